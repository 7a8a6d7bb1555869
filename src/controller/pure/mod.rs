//! pure: the core of a pass, values in and values out, with no client, no context and no write: what the pass
//! reads (`snapshot`: the caches once, and the server's answers as required `Probes`), what it decides (`plan`:
//! the objects wanted, the rollout step, remediation's rules), what the act reports back (`report`, and
//! `failure` for a write that failed, by `Category`), and the end of the pass (`outcome`, from `observe` and
//! `events`). The shell around it (`reconcile`, `act`, `capabilities`, `context`, `watch`) reads, writes and
//! remembers; nothing here imports it (`tests/architecture` checks).

pub mod events;
pub mod failure;
pub mod observe;
pub mod outcome;
pub mod plan;
pub mod report;
pub mod snapshot;
