//! The API client: a kubeconfig (`--kubeconfig`, `--context`) or in-cluster, with every request counted in the metrics.

use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::client::ClientBuilder;
use kube::client::retry::RetryPolicy;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

use crate::runtime::telemetry::Metrics;

/// Retries of one request the API server answered with 429, 503 or 504, honouring its `Retry-After`.
const RETRIES: u32 = 3;

/// Where the client's cluster and credentials come from: `--kubeconfig` and `--context`, else kube's inference
/// (`KUBECONFIG`, `~/.kube/config`, then the in-cluster ServiceAccount).
#[derive(Debug, Clone, Default)]
pub struct Connection {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

impl Connection {
    pub async fn config(&self) -> anyhow::Result<Config> {
        let options = KubeConfigOptions { context: self.context.clone(), ..Default::default() };
        match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {}", path.display(), e))?;
                Config::from_custom_kubeconfig(file, &options).await.map_err(|e| kubeconfig_error(&options, e))
            }
            (None, Some(_)) => Config::from_kubeconfig(&options).await.map_err(|e| kubeconfig_error(&options, e)),
            (None, None) => Ok(Config::infer().await?),
        }
    }
}

fn kubeconfig_error(options: &KubeConfigOptions, error: kube::config::KubeconfigError) -> anyhow::Error {
    match &options.context {
        Some(context) => anyhow::anyhow!("--context {context}: {error}"),
        None => anyhow::anyhow!("{error}"),
    }
}

/// A client from the connection whose requests land in `api_requests`.
///
/// kube's own retry of throttled requests (15 attempts, backing off to minutes) would hold a reconcile silently for
/// minutes under API Priority and Fairness; this one gives up after a few seconds, so the reconcile fails visibly
/// (log, metric, event) and its config is retried with the controller's backoff while other configs go on.
pub async fn counted_client(connection: &Connection, metrics: Arc<Metrics>) -> anyhow::Result<Client> {
    let mut config = connection.config().await?;
    config.default_retry = false;
    let policy = RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(5), RETRIES, true)?;
    let count = CountLayer(metrics);
    Ok(ClientBuilder::try_from(config)?
        // The retry layer clones the service it wraps; a buffer makes the boxed stack clonable.
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(policy))
        .with_layer(&count)
        .build())
}

/// A client layer that counts each request in `api_requests` once its answer (or the lack of one) is known. Outside
/// the retry layer, a request retried after a 429 counts once, with the code it finally got.
#[derive(Clone)]
pub struct CountLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Count<S>;
    fn layer(&self, inner: S) -> Count<S> {
        Count { inner, metrics: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct Count<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for Count<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (method, uri) = (request.method().clone(), request.uri().clone());
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            metrics.record_request(&method, &uri, answer.as_ref().ok().map(|response| response.status()));
            answer
        })
    }
}

/// The CRD `run` checks before it starts.
pub const CRD_NAME: &str = "neurondraconfigs.neurondra.io";
/// Names another CRD for `check_crd` to read, for tests only (deliberately not a `run` flag). The install tests
/// point it at a throwaway CRD carrying an older version, so they can show a real operator process refusing to
/// start without downgrading the shared control plane's real CRD under tests that run in parallel.
pub const CHECK_CRD_ENV: &str = "NEURONDRA_TEST_CHECK_CRD";

/// Refuses to run against a missing or older CRD (it would silently drop fields this build writes).
pub async fn check_crd(client: &Client) -> anyhow::Result<()> {
    let name = std::env::var(CHECK_CRD_ENV).unwrap_or_else(|_| CRD_NAME.to_string());
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let installed = api.get_opt(&name).await?;
    crate::runtime::crd::check_installed(installed.as_ref())?;
    Ok(())
}

/// A kube error in one line: for a refusal, what the API server said, with its code and reason (kube's own Display
/// appends a debug dump of the whole Status, which events, conditions and logs would then carry).
pub fn brief(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => refusal(status),
        other => other.to_string(),
    }
}

/// What the API server said in a `Status`, with its code and reason, in one line.
pub fn refusal(status: &kube::core::Status) -> String {
    format!("{} ({} {})", status.message, status.code, status.reason)
}

#[cfg(test)]
mod tests;
