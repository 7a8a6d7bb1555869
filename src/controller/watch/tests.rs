use super::*;

fn ended(code: u16, reason: &str) -> watcher::Error {
    let status = kube::core::Status { code, ..kube::core::Status::failure("too old resource version", reason) };
    watcher::Error::WatchError(status.boxed())
}

#[test]
fn only_gone_skips_the_backoff() {
    assert!(gone::<()>(&Err(ended(410, "Expired"))));
    assert!(!gone::<()>(&Err(ended(500, "InternalError"))));
    assert!(!gone(&Ok(())));
}

#[tokio::test]
async fn errors_are_dropped_and_the_items_go_on() {
    let items = futures::stream::iter([Ok(1), Err(ended(500, "InternalError")), Ok(2)]);
    let passed: Vec<_> = without_errors("Test".into(), items).collect().await;
    assert_eq!(passed.into_iter().map(Result::unwrap).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        watch_error(&ended(500, "InternalError")),
        "the server ended the watch: too old resource version (500 InternalError)"
    );
}
