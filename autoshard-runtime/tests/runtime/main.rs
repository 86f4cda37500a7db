//! The runtime's own tests, one binary with a module per concern: the conformance suite's
//! checks of itself (`conformance_suite`), the typed folds against the reference fold
//! (`folds_agree`) and the mapper end to end on the memory store (`mapper`). The suites
//! against every store and real servers are the `autoshard-integration` package's.

mod conformance_suite;
mod folds_agree;
mod mapper;
