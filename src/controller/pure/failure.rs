//! Why a write failed (`ApplyError`) and the category users act on (`Category`): the label of
//! `reconcile_errors_total` and the reason of the failure's Warning event.

use crate::runtime::client::brief;
use std::fmt::Debug;

/// What kind of failure: what the API server said, or which write failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// The API server refused the request for the operator's rights (403).
    Forbidden,
    /// The object changed meanwhile (409).
    Conflict,
    /// The API server found the object invalid (422).
    Rejected,
    ApplyFailed,
    DeleteFailed,
    EvictFailed,
    StatusFailed,
    ProbeFailed,
    FinalizerFailed,
    Unknown,
}

impl Category {
    /// Every category, so that each series of `reconcile_errors_total` is served from the start at 0 (an alert on
    /// `increase()` sees the first failure of a category, not only the second).
    pub const ALL: [Category; 10] = [
        Self::Forbidden,
        Self::Conflict,
        Self::Rejected,
        Self::ApplyFailed,
        Self::DeleteFailed,
        Self::EvictFailed,
        Self::StatusFailed,
        Self::ProbeFailed,
        Self::FinalizerFailed,
        Self::Unknown,
    ];

    /// The metric label and the event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forbidden => "Forbidden",
            Self::Conflict => "Conflict",
            Self::Rejected => "Rejected",
            Self::ApplyFailed => "ApplyFailed",
            Self::DeleteFailed => "DeleteFailed",
            Self::EvictFailed => "EvictFailed",
            Self::StatusFailed => "StatusFailed",
            Self::ProbeFailed => "ProbeFailed",
            Self::FinalizerFailed => "FinalizerFailed",
            Self::Unknown => "Unknown",
        }
    }

    /// The category of an API server refusal that users act on: `Forbidden` (RBAC), `Conflict`, `Rejected` (invalid).
    pub fn of_refusal(error: &kube::Error) -> Option<Category> {
        match error {
            kube::Error::Api(status) if status.code == 403 => Some(Self::Forbidden),
            kube::Error::Api(status) if status.code == 409 => Some(Self::Conflict),
            kube::Error::Api(status) if status.code == 422 => Some(Self::Rejected),
            _ => None,
        }
    }
}

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

    /// What the API server said, or which write failed.
    pub fn category(&self) -> Category {
        Category::of_refusal(self.source_error()).unwrap_or(match self {
            Self::Apply { .. } => Category::ApplyFailed,
            Self::Delete { .. } => Category::DeleteFailed,
            Self::Evict { .. } => Category::EvictFailed,
        })
    }
}
