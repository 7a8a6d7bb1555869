//! Development tools, never part of the operator binary: a simulated Trainium fleet (tests, benchmarks,
//! `make demo`), the OLM bundle generator (`make bundle`), the Helm chart's README (`make chart`) and the harness
//! the integration tests and benchmarks share (`harness`: the local control plane, the operator as a process). Built with the
//! `devtools` feature.

pub mod bundle;
pub mod chart_readme;
pub mod harness;
pub mod simulate;
