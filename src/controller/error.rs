//! The controller's error: every failure of one reconcile, each with a category (the metric label and the Warning
//! event reason).

use kube::runtime::finalizer;

use crate::apply::{ApplyError, api_category};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Every write of the pass that failed (the others went through).
    #[error("{}", writes_message(.0))]
    Writes(Vec<ApplyError>),
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    /// Asking the server what it supports failed.
    #[error("probing the API server: {0}")]
    Probe(#[source] kube::Error),
    #[error("replacing a plugin pod: {0}")]
    Evict(#[source] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
}

fn writes_message(errors: &[ApplyError]) -> String {
    let each: Vec<String> = errors.iter().map(ToString::to_string).collect();
    match each.len() {
        1 => each[0].clone(),
        n => format!("{n} writes failed: {}", each.join("; ")),
    }
}

impl Error {
    /// Each failure as (category, message): one Warning event each.
    pub fn failures(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Writes(errors) => errors.iter().map(|e| (e.category(), e.to_string())).collect(),
            Self::Status(e) => vec![(api_category(e).unwrap_or("StatusFailed"), self.to_string())],
            Self::Probe(e) => vec![(api_category(e).unwrap_or("ProbeFailed"), self.to_string())],
            Self::Evict(e) => vec![(api_category(e).unwrap_or("EvictFailed"), self.to_string())],
            Self::Finalizer(e) => match e.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => inner.failures(),
                finalizer::Error::AddFinalizer(api) | finalizer::Error::RemoveFinalizer(api) => {
                    vec![(api_category(api).unwrap_or("FinalizerFailed"), self.to_string())]
                }
                _ => vec![("FinalizerFailed", self.to_string())],
            },
        }
    }

    /// The category of the first failure.
    pub fn category(&self) -> &'static str {
        self.failures().first().map_or("Unknown", |(category, _)| category)
    }
}
