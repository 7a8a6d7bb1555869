//! Pure decisions: every function here takes values and returns values; nothing reads or writes the cluster.

pub mod capacity;
pub mod catalog;
pub mod conflict;
pub mod desired;
pub mod fence;
pub mod health;
pub mod image;
pub mod nodes;
pub mod remediation;
pub mod rollout;
pub mod status;
pub mod teams;
pub mod text;
pub mod validate;
