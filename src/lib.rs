//! neuron-dra-operator: turns a `NeuronDRAConfig` into a working AWS Neuron DRA installation.
//!
//! The reconcile is a pipeline; the modules follow it: `api` (the types), `validate` and `build` (pure),
//! then the controller's apply and status steps.

pub mod api;
pub mod apply;
pub mod build;
pub mod bundle;
pub mod capacity;
pub mod catalog;
pub mod cli;
pub mod client;
pub mod conflict;
pub mod controller;
pub mod crd;
pub mod health;
pub mod leader;
pub mod nodes;
pub mod remediation;
pub mod rollout;
pub mod server;
pub mod simulate;
pub mod status;
pub mod taint_rule;
pub mod telemetry;
pub mod validate;
pub mod view;
