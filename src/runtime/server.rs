//! The two servers of `run`: `/healthz` and `/readyz` in plain HTTP for the kubelet's probes, and `/metrics` over
//! HTTPS for callers the API server vouches for: the bearer token is authenticated with a TokenReview and the
//! caller must be allowed `get` on the non-resource URL `/metrics` (a SubjectAccessReview), as kubebuilder's
//! secure metrics server does. Answers are kept for a short time per token, and only a few reviews run at once
//! (`reviews`), so scrapes, made-up tokens included, do not cost the API server a review each.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::runtime::certs::MetricsCertificate;
use crate::runtime::reviews::Reviews;
use crate::runtime::telemetry::{Metrics, Readiness};

/// The path, and the verb a caller needs on it, of the metrics endpoint (the `metrics-reader` ClusterRole's rule).
pub const METRICS_PATH: &str = "/metrics";
const METRICS_VERB: &str = "get";

/// How `/metrics` is served.
pub enum MetricsSecurity {
    /// Plain HTTP, no authentication: `--metrics-secure=false`, for local runs only.
    Plain,
    /// HTTPS; the client sends the TokenReviews and SubjectAccessReviews.
    Https { tls: MetricsCertificate, client: Client },
}

/// Binds an address, naming it in the error (a port in use is a one-line error at start).
pub fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} ({what})"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `/healthz` and `/readyz` until `shutdown` resolves.
pub async fn serve_probes(
    listener: std::net::TcpListener,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz_handler))
        .with_state(readiness);
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(address = %listener.local_addr()?, "serving /healthz, /readyz");
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

async fn readyz_handler(State(readiness): State<Readiness>) -> impl IntoResponse {
    if readiness.get() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "caches not synced") }
}

#[derive(Clone)]
struct MetricsState {
    metrics: Arc<Metrics>,
    /// None when serving plainly.
    reviewer: Option<Client>,
    reviews: Arc<Reviews>,
}

/// Serves `/metrics` until `shutdown` resolves.
pub async fn serve_metrics(
    listener: std::net::TcpListener,
    metrics: Arc<Metrics>,
    security: MetricsSecurity,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let (tls, reviewer) = match security {
        MetricsSecurity::Plain => (None, None),
        MetricsSecurity::Https { tls, client } => (Some(tls), Some(client)),
    };
    let app = Router::new().route(METRICS_PATH, get(metrics_handler)).with_state(MetricsState {
        metrics,
        reviewer,
        reviews: Arc::default(),
    });
    let Some(tls) = tls else {
        tracing::warn!(%address, "serving /metrics over plain HTTP without authentication (--metrics-secure=false)");
        let listener = tokio::net::TcpListener::from_std(listener)?;
        return axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
    };
    tracing::info!(%address, "serving /metrics over HTTPS to authorized callers");
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(Duration::from_secs(5)));
    });
    let config = axum_server::tls_rustls::RustlsConfig::from_config(tls.config.clone());
    let server = axum_server::from_tcp_rustls(listener, config.clone())?.handle(handle);
    // Without --enable-http2 a client that sends HTTP/2 anyway (prior knowledge, no ALPN) is refused too.
    let server = if tls.http2 { server } else { server.http1_only() };
    let renewals = tokio::spawn(tls.keep_fresh(config));
    let served = server.serve(app.into_make_service()).await;
    renewals.abort();
    served
}

async fn metrics_handler(State(state): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Some(client) = &state.reviewer
        && let Err(refusal) = match bearer_token(&headers) {
            Some(token) => state.reviews.decide(token, || authorize(client, token)).await,
            None => Err((StatusCode::UNAUTHORIZED, "Unauthorized: no bearer token\n".into())),
        }
    {
        return refusal.into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}

/// The bearer token of an `Authorization` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// 401 without a token the API server accepts, 403 when its user may not `get` `/metrics`, 500 when a review
/// could not be made.
async fn authorize(client: &Client, token: &str) -> Result<(), (StatusCode, String)> {
    let unauthorized = |why: &str| (StatusCode::UNAUTHORIZED, format!("Unauthorized: {why}\n"));
    let review = TokenReview {
        spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
        ..Default::default()
    };
    let reviewed =
        Api::<TokenReview>::all(client.clone()).create(&PostParams::default(), &review).await.map_err(unavailable)?;
    let status = reviewed.status.unwrap_or_default();
    let user = match (status.authenticated, status.user) {
        (Some(true), Some(user)) => user,
        _ => return Err(unauthorized("the token was not accepted")),
    };
    let access = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(METRICS_PATH.into()),
                verb: Some(METRICS_VERB.into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let decided = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &access)
        .await
        .map_err(unavailable)?;
    if decided.status.is_some_and(|s| s.allowed) {
        Ok(())
    } else {
        let who = user.username.unwrap_or_default();
        Err((StatusCode::FORBIDDEN, format!("Forbidden: {who} may not {METRICS_VERB} {METRICS_PATH}\n")))
    }
}

fn unavailable(error: kube::Error) -> (StatusCode, String) {
    tracing::warn!(error = %crate::runtime::client::brief(&error), "cannot review a /metrics caller");
    (StatusCode::INTERNAL_SERVER_ERROR, "cannot review the caller with the API server\n".into())
}

#[cfg(test)]
mod tests;
