//! The reconcile's one error type: every failure of one reconcile, each with a category, which is the label of
//! `reconcile_errors_total` and the reason of its Warning event.

use kube::runtime::finalizer;

use super::pure::failure::{ApplyError, Category};
use crate::runtime::client::brief;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Every write of the pass that failed (the others went through).
    #[error("{}", writes_message(.0))]
    Writes(Vec<ApplyError>),
    #[error("writing status: {}", brief(.0))]
    Status(#[source] kube::Error),
    /// Asking the server what it supports failed.
    #[error("probing the API server: {}", brief(.0))]
    Probe(#[source] kube::Error),
    #[error("{}", finalizer_message(.0))]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
}

fn finalizer_message(error: &finalizer::Error<Error>) -> String {
    match error {
        finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => inner.to_string(),
        finalizer::Error::AddFinalizer(api) => format!("adding the finalizer: {}", brief(api)),
        finalizer::Error::RemoveFinalizer(api) => format!("removing the finalizer: {}", brief(api)),
        other => format!("finalizer: {other}"),
    }
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
    pub fn failures(&self) -> Vec<(Category, String)> {
        let refused = |e: &kube::Error, otherwise| Category::of_refusal(e).unwrap_or(otherwise);
        match self {
            Self::Writes(errors) => errors.iter().map(|e| (e.category(), e.to_string())).collect(),
            Self::Status(e) => vec![(refused(e, Category::StatusFailed), self.to_string())],
            Self::Probe(e) => vec![(refused(e, Category::ProbeFailed), self.to_string())],
            Self::Finalizer(e) => match e.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => inner.failures(),
                finalizer::Error::AddFinalizer(api) | finalizer::Error::RemoveFinalizer(api) => {
                    vec![(refused(api, Category::FinalizerFailed), self.to_string())]
                }
                _ => vec![(Category::FinalizerFailed, self.to_string())],
            },
        }
    }

    /// The category of the first failure: the label its log line and the first of its metric series carry.
    pub fn category(&self) -> Category {
        self.failures().first().map_or(Category::Unknown, |(category, _)| *category)
    }
}
#[cfg(test)]
mod tests;
