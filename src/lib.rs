//! neuron-dra-operator: turns a `NeuronDRAConfig` into a working AWS Neuron DRA installation.
//!
//! The layers, each importing only those above it in this list:
//! - `api`: the `NeuronDRAConfig` types, their schema and CEL rules.
//! - `cluster`: compact views of what the operator reads from the cluster (nodes, slices, claims, pods, taint rules).
//! - `logic`: pure decisions: validate, conflicts, the desired objects, health, capacity, the rollout and
//!   remediation plans, the status.
//! - `runtime`: the process around the controller: API client, leader election, servers, telemetry, CRD check.
//! - `controller`: watches and caches, the reconcile (observe, plan, act, status and events).
//! - `run` and `cli`: the operator's entry points.
//!
//! `devtools` (the simulated fleet and the OLM bundle generator) is compiled only with the `devtools` feature, for
//! the `neuron-dra-devtools` binary and the tests; the operator binary carries none of it.

pub mod api;
pub mod cli;
pub mod cluster;
pub mod controller;
#[cfg(any(test, feature = "devtools"))]
pub mod devtools;
pub mod logic;
pub mod run;
pub mod runtime;
