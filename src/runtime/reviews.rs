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
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_token_is_reviewed_once_while_its_answer_is_kept() {
        let reviews = Reviews::new(Duration::from_millis(200), 4);
        let count = AtomicUsize::new(0);
        let review = |answer: Decision| {
            count.fetch_add(1, Ordering::SeqCst);
            async move { answer }
        };
        let refused = || Err((StatusCode::UNAUTHORIZED, "no\n".to_string()));
        for _ in 0..5 {
            assert_eq!(reviews.decide("reader", || review(Ok(()))).await, Ok(()));
            assert_eq!(reviews.decide("stranger", || review(refused())).await, refused());
        }
        assert_eq!(count.load(Ordering::SeqCst), 2, "one review per token");
        // A failed review is not kept: the next scrape asks again.
        let failed = || Err((StatusCode::INTERNAL_SERVER_ERROR, "down\n".to_string()));
        reviews.decide("unlucky", || review(failed())).await.unwrap_err();
        reviews.decide("unlucky", || review(failed())).await.unwrap_err();
        assert_eq!(count.load(Ordering::SeqCst), 4);
        // Past its time an answer is asked for again.
        tokio::time::sleep(Duration::from_millis(250)).await;
        reviews.decide("reader", || review(Ok(()))).await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn a_flood_of_made_up_tokens_does_not_push_out_a_kept_answer() {
        let reviews = Reviews::new(Duration::from_secs(30), 4);
        let reader = AtomicUsize::new(0);
        let read = || {
            reader.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        };
        reviews.decide("reader", read).await.unwrap();
        for i in 0..KEPT_AT_MOST + 100 {
            let refused = || async { Err((StatusCode::UNAUTHORIZED, "no\n".to_string())) };
            reviews.decide(&format!("made-up-{i}"), refused).await.unwrap_err();
        }
        assert_eq!(reviews.kept.lock().unwrap().len(), KEPT_AT_MOST, "the kept answers stay bounded");
        reviews.decide("reader", read).await.unwrap();
        assert_eq!(reader.load(Ordering::SeqCst), 1, "the reader's answer is still kept");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn at_most_a_few_reviews_run_at_once() {
        let reviews = Arc::new(Reviews::new(Duration::from_secs(30), 3));
        let (running, most, total) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let callers: Vec<_> = (0..24)
            .map(|i| {
                let (reviews, running, most, total) = (reviews.clone(), running.clone(), most.clone(), total.clone());
                tokio::spawn(async move {
                    // Made-up tokens, each new: nothing to keep, every one reviewed.
                    reviews
                        .decide(&format!("made-up-{i}"), || async move {
                            total.fetch_add(1, Ordering::SeqCst);
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            running.fetch_sub(1, Ordering::SeqCst);
                            Err((StatusCode::UNAUTHORIZED, "no\n".to_string()))
                        })
                        .await
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap().unwrap_err();
        }
        assert_eq!(total.load(Ordering::SeqCst), 24);
        assert_eq!(most.load(Ordering::SeqCst), 3, "never more than three reviews in flight");
    }
}
