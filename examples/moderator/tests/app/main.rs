//! The voting app's tests, one binary with a module per concern: the page in a real
//! browser (`browser`), short runs of the app, the benchmark and the hot-spot mode
//! (`smoke`), and the JSON API over HTTP (`web`).

mod browser;
mod smoke;
mod web;
