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

/// Refuses to run against a missing or older CRD (it would silently drop fields this build writes).
pub async fn check_crd(client: &Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let installed = api.get_opt("neurondraconfigs.neurondra.io").await?;
    crate::crd::check_installed(installed.as_ref())?;
    Ok(())
}
