//! The API client: kubeconfig or in-cluster, with every request counted in the metrics.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};

use crate::telemetry::Metrics;

/// A client from `KUBECONFIG` or the in-cluster environment whose requests land in `api_requests`.
pub async fn counted_client(metrics: Arc<Metrics>) -> anyhow::Result<Client> {
    let config = Config::infer().await?;
    let count = tower::util::MapRequestLayer::new(move |request: http::Request<Body>| {
        metrics.record_request(&request);
        request
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&count).build())
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
    crate::crd::check_installed(installed.as_ref())?;
    Ok(())
}
