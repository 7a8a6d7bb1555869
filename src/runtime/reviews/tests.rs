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
