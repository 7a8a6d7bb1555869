//! Why a write failed (`ApplyError`) and the category users act on: the metric label and the Warning event's reason.

use crate::runtime::client::brief;
use std::fmt::Debug;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("applying {kind} {name}: {}", brief(.source))]
    Apply { kind: String, name: String, source: kube::Error },
    #[error("deleting {kind} {name}: {}", brief(.source))]
    Delete { kind: String, name: String, source: kube::Error },
    #[error("replacing plugin pod {name}: {}", brief(.source))]
    Evict { name: String, source: kube::Error },
}

impl ApplyError {
    pub fn source_error(&self) -> &kube::Error {
        match self {
            Self::Apply { source, .. } | Self::Delete { source, .. } | Self::Evict { source, .. } => source,
        }
    }

    /// The metric label and Warning event reason: what the API server said, or which write failed.
    pub fn category(&self) -> &'static str {
        api_category(self.source_error()).unwrap_or(match self {
            Self::Apply { .. } => "ApplyFailed",
            Self::Delete { .. } => "DeleteFailed",
            Self::Evict { .. } => "EvictFailed",
        })
    }
}

/// The category of an API server refusal that users act on: `Forbidden` (RBAC), `Conflict`, `Rejected` (invalid).
pub fn api_category(error: &kube::Error) -> Option<&'static str> {
    match error {
        kube::Error::Api(status) if status.code == 403 => Some("Forbidden"),
        kube::Error::Api(status) if status.code == 409 => Some("Conflict"),
        kube::Error::Api(status) if status.code == 422 => Some("Rejected"),
        _ => None,
    }
}
