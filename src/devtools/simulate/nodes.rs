//! The simulated nodes on the API server: created with their slices, and read back into the fleet they belong to.

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::fleet::{self, FleetSpec, SIMULATED_LABEL};
use super::marks::{
    DRA_VERSION_ANNOTATION, KUBELET_VERSION_ANNOTATION, NEURON_VERSION_ANNOTATION, PARALLEL, PLUGIN_READY_ANNOTATION,
    apply_params,
};

/// Creates or updates the fleet's nodes (Ready, untainted) and slices, and the EFA driver's DeviceClass.
pub async fn create_fleet(client: &Client, spec: &FleetSpec) -> anyhow::Result<()> {
    if fleet::expected_devices(&spec.instance_type).is_none() {
        bail!("--instance-type {}: not a Trainium type the simulator knows", spec.instance_type);
    }
    let class = fleet::efa_device_class();
    Api::<DeviceClass>::all(client.clone())
        .patch(&class.name_any(), &apply_params(), &Patch::Apply(&class))
        .await
        .context("applying the EFA DeviceClass")?;
    futures::stream::iter(0..spec.count)
        .map(|index| create_node(client, spec, index))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn create_node(client: &Client, spec: &FleetSpec, index: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node = fleet::node(spec, index);
    node.metadata.annotations = Some(
        [
            (DRA_VERSION_ANNOTATION.to_string(), spec.dra_driver_version.clone()),
            (NEURON_VERSION_ANNOTATION.to_string(), spec.neuron_driver_version.clone()),
            (KUBELET_VERSION_ANNOTATION.to_string(), spec.kubelet_version.clone()),
            (PLUGIN_READY_ANNOTATION.to_string(), "true".to_string()),
        ]
        .into(),
    );
    let name = node.name_any();
    let created = nodes.patch(&name, &apply_params(), &Patch::Apply(&node)).await.context("applying node")?;
    // Admission taints new nodes not-ready; with no node-lifecycle controller, the simulator clears it.
    if created.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| !t.is_empty()) {
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": null}}))).await?;
    }
    let status = json!({"apiVersion": "v1", "kind": "Node", "status": fleet::node_status(spec)});
    nodes.patch_status(&name, &apply_params(), &Patch::Apply(&status)).await.context("node status")?;
    apply_slices(client, spec, index, created.uid()).await
}

/// The node's Neuron slice and, where the type has EFA, its EFA slice.
pub(super) async fn apply_slices(
    client: &Client,
    spec: &FleetSpec,
    index: usize,
    uid: Option<String>,
) -> anyhow::Result<()> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let neuron = fleet::resource_slice(spec, index, uid.clone());
    slices.patch(&neuron.name_any(), &apply_params(), &Patch::Apply(&neuron)).await.context("applying slice")?;
    if let Some(efa) = fleet::efa_slice(spec, index, uid) {
        slices.patch(&efa.name_any(), &apply_params(), &Patch::Apply(&efa)).await.context("applying EFA slice")?;
    }
    Ok(())
}

/// The fleet a simulated node belongs to, recovered from its labels and annotations.
pub(super) async fn fleet_of(client: &Client, node_name: &str) -> anyhow::Result<(FleetSpec, usize, Node)> {
    let node = Api::<Node>::all(client.clone()).get(node_name).await.with_context(|| format!("node {node_name}"))?;
    let labels = node.labels();
    let prefix = labels.get(SIMULATED_LABEL).with_context(|| format!("{node_name} is not a simulated node"))?;
    let index = node_name
        .strip_prefix(&format!("{prefix}-"))
        .and_then(|i| i.parse().ok())
        .with_context(|| format!("{node_name} is not named {prefix}-<index>"))?;
    let annotation = |key: &str, default: &str| node.annotations().get(key).cloned().unwrap_or_else(|| default.into());
    let spec = FleetSpec {
        prefix: prefix.clone(),
        count: index + 1,
        instance_type: labels.get(fleet::INSTANCE_TYPE_LABEL).cloned().unwrap_or_default(),
        dra_driver_version: annotation(DRA_VERSION_ANNOTATION, fleet::DEFAULT_DRA_DRIVER_VERSION),
        neuron_driver_version: annotation(NEURON_VERSION_ANNOTATION, fleet::DEFAULT_NEURON_DRIVER_VERSION),
        kubelet_version: annotation(KUBELET_VERSION_ANNOTATION, fleet::DEFAULT_KUBELET_VERSION),
    };
    Ok((spec, index, node))
}
