//! What the API server said about each `/metrics` caller, kept for a short time, and a bound on the reviews in
//! flight. Without them every scrape costs the API server a TokenReview and a SubjectAccessReview, and anyone who
//! can reach the port (unauthenticated: a made-up token is enough) can make the operator send them as fast as it
//! can connect.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

/// An answer to a caller: allowed, or the status and body to send.
pub type Decision = Result<(), (StatusCode, String)>;

/// How long an answer is kept: a revoked token or a removed binding is honoured within this time.
pub const KEEP_FOR: Duration = Duration::from_secs(30);
/// Reviews in flight at most; further callers wait for a slot.
pub const CONCURRENT_REVIEWS: usize = 4;
/// Answers kept at most: past this, expired ones are dropped, and while none has expired a new answer is not kept
/// (a flood of made-up tokens cannot push out the answers kept for the real scrapers).
const KEPT_AT_MOST: usize = 1024;

/// Answers by the SHA-256 of the token (the token itself is never kept), with the time each was made.
pub struct Reviews {
    kept: Mutex<HashMap<[u8; 32], (Instant, Decision)>>,
    slots: Semaphore,
    keep_for: Duration,
}

impl Default for Reviews {
    fn default() -> Self {
        Reviews::new(KEEP_FOR, CONCURRENT_REVIEWS)
    }
}

impl Reviews {
    pub fn new(keep_for: Duration, concurrent: usize) -> Self {
        Reviews { kept: Mutex::default(), slots: Semaphore::new(concurrent), keep_for }
    }

    /// The answer for `token`: a kept one younger than `keep_for`, or `review`'s, run in one of the slots. Only
    /// the API server's verdicts (allowed, 401, 403) are kept; a failed review (500) is asked again next time.
    pub async fn decide<F, Fut>(&self, token: &str, review: F) -> Decision
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Decision>,
    {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(decision) = self.kept(&key) {
            return decision;
        }
        let _slot = self.slots.acquire().await.expect("the semaphore is never closed");
        // A caller with the same token may have been answered while this one waited.
        if let Some(decision) = self.kept(&key) {
            return decision;
        }
        let decision = review().await;
        let verdict = match &decision {
            Ok(()) => true,
            Err((status, _)) => *status == StatusCode::UNAUTHORIZED || *status == StatusCode::FORBIDDEN,
        };
        if verdict {
            self.keep(key, decision.clone());
        }
        decision
    }

    fn kept(&self, key: &[u8; 32]) -> Option<Decision> {
        let kept = self.kept.lock().expect("not poisoned");
        kept.get(key).filter(|(at, _)| at.elapsed() < self.keep_for).map(|(_, decision)| decision.clone())
    }

    fn keep(&self, key: [u8; 32], decision: Decision) {
        let mut kept = self.kept.lock().expect("not poisoned");
        if kept.len() >= KEPT_AT_MOST {
            kept.retain(|_, (at, _)| at.elapsed() < self.keep_for);
        }
        if kept.len() < KEPT_AT_MOST {
            kept.insert(key, (Instant::now(), decision));
        }
    }
}

#[cfg(test)]
mod tests;
