//! The integration-test harness, shared with the benchmarks: `neuron_dra_operator::devtools::harness` (a client for
//! the local control plane, the CRD and shipped RBAC installed once, the operator as a real process).

pub use neuron_dra_operator::devtools::harness::*;
