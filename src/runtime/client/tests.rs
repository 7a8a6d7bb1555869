use super::*;

/// The client's counting layer labels each request with the code of the answer it got, once.
#[tokio::test]
async fn the_client_layer_counts_each_answer_with_its_code() {
    use tower::{Layer, Service, ServiceExt};
    let metrics = Arc::new(Metrics::default());
    let (mock, mut handle) = tower_test::mock::pair::<http::Request<()>, http::Response<()>>();
    let mut service = CountLayer(metrics.clone()).layer(mock);
    let request = |uri: &str| http::Request::post(uri).body(()).unwrap();
    let answered = tokio::spawn({
        let mut service = service.clone();
        async move { service.ready().await.unwrap().call(request("/api/v1/namespaces/a/configmaps")).await }
    });
    let (_, reply) = handle.next_request().await.unwrap();
    reply.send_response(http::Response::builder().status(http::StatusCode::FORBIDDEN).body(()).unwrap());
    assert_eq!(answered.await.unwrap().unwrap().status(), http::StatusCode::FORBIDDEN);
    let failed = tokio::spawn(async move { service.ready().await.unwrap().call(request("/api/v1/nodes")).await });
    let (_, reply) = handle.next_request().await.unwrap();
    reply.send_error(std::io::Error::other("connection reset"));
    assert!(failed.await.unwrap().is_err());
    let text = metrics.encode();
    assert!(text.contains("api_requests_total{verb=\"create\",resource=\"configmaps\",code=\"403\"} 1"), "{text}");
    assert!(text.contains("api_requests_total{verb=\"create\",resource=\"nodes\",code=\"error\"} 1"), "{text}");
}
