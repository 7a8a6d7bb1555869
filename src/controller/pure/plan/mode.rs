//! What kind of pass this is (`Mode`: normal, paused or cleanup), read by the plan and by the rollout's part of it.

/// What kind of pass this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Apply what is wanted, delete what is not.
    Normal,
    /// Judge what is there; write nothing but the status.
    Paused,
    /// The config is being deleted: it wants nothing, so everything it created goes.
    Cleanup,
}
