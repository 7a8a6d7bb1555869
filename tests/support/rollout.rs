//! The stepped plugin rollout's test fleet: a config per plugin tag, and what its status and pods say.

#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use neuron_dra_operator::api::NeuronDRAConfigStatus;
use serde_json::{Value, json};

use super::cluster::kubectl;
use super::fleet::{Fleet, NodeGroup};

pub const IMAGE: &str = "public.ecr.aws/neuron/neuron-dra-driver";
pub const TYPE: &str = "trn1.32xlarge";

/// Applies the test's config with plugin image `tag` and `rollout`.
pub async fn apply(f: &Fleet, tag: &str, rollout: Value) {
    let s = &f.scenario;
    let spec = json!({
        "nodeSelector": f.node_selector(),
        "driver": {"image": format!("{IMAGE}:{tag}"), "rollout": rollout},
        "profiles": [{"name": "train", "training": {"devices": 4}}],
    });
    s.apply(&s.config(&s.id, spec)).await.unwrap();
}

pub fn driver_ready(status: &NeuronDRAConfigStatus) -> (&str, &str, &str) {
    let c = status.conditions.iter().find(|c| c.type_ == "DriverReady").expect("DriverReady");
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// Nodes per version, as `status.driver.versions` reports them.
pub fn versions(status: &NeuronDRAConfigStatus) -> BTreeMap<String, i32> {
    status
        .driver
        .as_ref()
        .map(|d| d.versions.iter().map(|v| (v.version.clone(), v.nodes)).collect())
        .unwrap_or_default()
}

pub fn all_on(status: &NeuronDRAConfigStatus, version: &str, nodes: i32) -> bool {
    let d = status.driver.as_ref();
    versions(status) == BTreeMap::from([(version.to_string(), nodes)])
        && d.is_some_and(|d| d.ready_nodes == nodes && d.updated_nodes == nodes)
        && driver_ready(status).0 == "True"
}

/// The plugin pods by node: (pod uid, image).
pub async fn plugin_pods(f: &Fleet) -> BTreeMap<String, (String, String)> {
    let pods: Api<Pod> = Api::namespaced(f.scenario.client.clone(), &f.scenario.driver_namespace());
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let spec = p.spec.as_ref()?;
            Some((spec.node_name.clone()?, (p.uid()?, spec.containers[0].image.clone()?)))
        })
        .collect()
}

pub fn events(f: &Fleet) -> String {
    kubectl(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={}", f.scenario.id)])
}

/// Starts a fleet of `nodes` with the plugin at 1.1.0 under `rollout`, ready everywhere.
pub async fn ready_fleet(name: &str, nodes: usize, rollout: Value) -> Fleet {
    let f = Fleet::with_plugin(name, &[NodeGroup::new(TYPE, nodes)]).await;
    apply(&f, "1.1.0", rollout).await;
    let status = f.wait_status("every node on 1.1.0", |s| all_on(s, "1.1.0", nodes as i32)).await;
    assert_eq!(driver_ready(&status).2, format!("{nodes}/{nodes} nodes on 1.1.0, {nodes} ready"));
    let ds = kubectl(&[
        "get",
        "ds",
        "-n",
        &f.scenario.driver_namespace(),
        "-o",
        "jsonpath={.items[0].spec.updateStrategy.type}",
    ]);
    assert_eq!(ds, "OnDelete", "the operator, not the DaemonSet controller, replaces the pods");
    f
}
