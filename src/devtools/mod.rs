//! Development tools, never part of the operator binary: a simulated Trainium fleet (tests, benchmarks,
//! `make demo`) and the OLM bundle generator (`make bundle`). Built with the `devtools` feature.

pub mod bundle;
pub mod simulate;
