//! The write layer: every change the operator makes to the cluster goes through here.

pub mod apply;
pub mod operands;
pub mod plugin_pods;
pub mod publish;
pub mod taint_rules;
