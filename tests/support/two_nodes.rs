//! Two real nodes of the local control plane (`hack/node.sh up node-1` and `node-2`, each in its own mount
//! namespace with its kubelet directory at `/var/lib/ndra-kubelet`): a config on both, workload pods, the Node's
//! readiness, and the node's components (for the fault tests of tests/real_node_faults.rs).

#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::allocation::{create_pod, pinned, workload_pod};
use super::cluster::{eventually, repo};
use super::node;
use super::scenario::{Scenario, TIMEOUT};

/// The two nodes' names (`NEURON_DRA_NODES`, default `node-1 node-2`).
pub fn names() -> [String; 2] {
    let list = std::env::var("NEURON_DRA_NODES").unwrap_or_else(|_| "node-1 node-2".into());
    let names: Vec<String> = list.split_whitespace().map(str::to_string).collect();
    assert_eq!(names.len(), 2, "NEURON_DRA_NODES names two nodes: {list}");
    [names[0].clone(), names[1].clone()]
}

/// The directory every local node's kubelet keeps its root in, as its pods see it (hack/node.sh).
pub const KUBELET_DIR: &str = "/var/lib/ndra-kubelet";

/// The `Ready` condition's status of a Node ("True", "False", "Unknown"; "" without one).
pub async fn ready(client: &Client, node: &str) -> String {
    let node = Api::<Node>::all(client.clone()).get_opt(node).await.ok().flatten();
    let conditions = node.and_then(|n| n.status?.conditions).unwrap_or_default();
    conditions.into_iter().find(|c| c.type_ == "Ready").map(|c| c.status).unwrap_or_default()
}

/// Both nodes Ready: a clear message when they were not started.
pub async fn both_ready(client: &Client) -> [String; 2] {
    let nodes = names();
    for node in &nodes {
        let status = ready(client, node).await;
        assert_eq!(status, "True", "no Ready Node {node}: start it with `hack/node.sh up {node}` (docs/local-node.md)");
    }
    nodes
}

/// A config on both nodes: the stand-in plugin at `tag` with the local nodes' kubelet directory, `profiles` in
/// `namespace`, and `extra` merged in.
pub fn spec(tag: &str, namespace: &str, profiles: &Value, extra: &Value) -> Value {
    let [a, b] = names();
    let mut spec = json!({
        "nodeSelector": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [a, b]}]},
        "driver": {
            // Each node has a network namespace of its own: both plugins bind their health port on every address,
            // as AWS's plugin does.
            "image": node::plugin_image(tag), "imagePullPolicy": "IfNotPresent", "kubeletDir": KUBELET_DIR,
        },
        "templates": {"namespaces": [namespace]},
        "profiles": profiles,
    });
    node::merge(&mut spec, extra);
    spec
}

/// Applies the test's config once earlier plugins are gone from both nodes, with their slices; gives its namespace.
pub async fn start(s: &Scenario, tag: &str, profiles: &Value, extra: &Value) -> String {
    for node in names() {
        node::plugin_pods_gone(&s.client, &node).await;
        node::forget_slices(&s.client, &node).await;
    }
    let namespace = s.namespace("work", &[]).await;
    s.apply(&s.config(&s.id, spec(tag, &namespace, profiles, extra))).await.unwrap();
    for node in names() {
        node::published_devices(&s.client, &node, tag).await;
    }
    namespace
}

/// A busybox pod on `template`, pinned to `node`, that sleeps.
pub fn sleeper(name: &str, template: &str) -> Value {
    let mut pod = workload_pod(name, template, &Value::Null);
    pod["spec"]["containers"][0]["image"] = json!(node::image("busybox"));
    pod["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
    pod["spec"]["containers"][0]["command"] = json!(["sleep", "3600"]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(1);
    pod
}

/// Runs `sleeper` on `node`; returns it Running.
pub async fn run_on(s: &Scenario, namespace: &str, name: &str, template: &str, node: &str) -> Pod {
    create_pod(&s.client, namespace, &pinned(sleeper(name, template), node)).await;
    running(s, namespace, name).await
}

/// The pod once Running.
pub async fn running(s: &Scenario, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    eventually(TIMEOUT, &format!("pod {name} Running"), || async {
        let pod = pods.get(name).await.ok()?;
        (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
    })
    .await
}

/// The container's restart count.
pub fn restarts(pod: &Pod) -> i32 {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    statuses.first().map(|c| c.restart_count).unwrap_or(-1)
}

/// This config's plugin pod on `node` (not being deleted): its uid and image.
pub async fn plugin_pod(s: &Scenario, node: &str) -> Option<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let list = pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await.ok()?;
    let pod = list.items.into_iter().find(|p| p.metadata.deletion_timestamp.is_none())?;
    Some((pod.uid()?, pod.spec?.containers[0].image.clone()?))
}

/// `hack/node.sh VERB COMPONENT NODE` (stop-component, start-component, kill-component).
pub fn component(verb: &str, component: &str, node: &str) {
    let status = Command::new(repo("hack/node.sh")).args([verb, component, node]).status().unwrap();
    assert!(status.success(), "hack/node.sh {verb} {component} {node}");
}

/// Waits up to `within` for the Node's `Ready` to be `status`.
pub async fn wait_ready(client: &Client, node: &str, status: &str, within: Duration) {
    eventually(within, &format!("{node} Ready={status}"), || async {
        (ready(client, node).await == status).then_some(())
    })
    .await
}
