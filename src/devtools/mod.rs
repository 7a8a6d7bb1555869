//! Development tools, never part of the operator binary: a simulated Trainium fleet (tests, benchmarks,
//! `make demo`), the OLM bundle generator (`make bundle`) and the Helm chart's README (`make chart`). Built with the
//! `devtools` feature.

pub mod bundle;
pub mod chart_readme;
pub mod simulate;
