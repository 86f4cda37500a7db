//! The voting app's tests, one binary with a module per concern: the page in a real
//! browser (`browser`), the binary's options and messages (`cli`), short runs of the app,
//! the benchmark and the hot-spot mode (`smoke`), and the JSON API over HTTP (`web`).

mod browser;
mod cli;
mod smoke;
mod web;
