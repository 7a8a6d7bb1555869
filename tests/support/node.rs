//! The real node of the local control plane (`hack/node.sh`: containerd, runc, CNI and a kubelet), for the tests
//! that run containers: its name, the images built for it (`hack/images.sh`), its files, and `kubectl exec`.
//!
//! These tests are `#[ignore]`d ("needs the real node"): `make test` starts the node after the suite that needs none
//! and runs them with `--ignored` (the Makefile's `test-node`).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};

use super::cluster::{eventually, kubeconfig, kubectl, kubectl_with, repo};
use super::scenario::TIMEOUT;

/// The driver name of AWS's Neuron DRA driver and of the stand-in plugin.
pub const DRIVER: &str = "neuron.aws.com";
/// The label of the plugin pods the operator's DaemonSets run.
pub const PLUGIN_SELECTOR: &str = "app.kubernetes.io/name=neuron-dra-driver";

/// The real node's name (`NEURON_DRA_NODE`, default node-1), checked to be a Ready Node: a clear message when the
/// node was not started, rather than a timeout later.
pub async fn name(client: &Client) -> String {
    let name = std::env::var("NEURON_DRA_NODE").unwrap_or_else(|_| "node-1".into());
    let node = Api::<Node>::all(client.clone()).get_opt(&name).await.unwrap();
    let ready = node
        .as_ref()
        .and_then(|n| n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").cloned())
        .is_some_and(|c| c.status == "True");
    assert!(ready, "no Ready Node {name}: start it with `hack/node.sh up` (docs/local-node.md)");
    name
}

/// The reference of an image `hack/images.sh` builds (`busybox`, `neuron-plugin`, `operator`, ...).
pub fn image(name: &str) -> String {
    let out = Command::new(repo("hack/images.sh")).args(["ref", name]).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "hack/images.sh ref {name}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The stand-in plugin image with `tag` (1.1.0, 1.2.0, 1.1.0-notready, 1.1.0-fewer).
pub fn plugin_image(tag: &str) -> String {
    let base = image("neuron-plugin");
    format!("{}:{tag}", base.rsplit_once(':').unwrap().0)
}

/// The node's kubelet log.
pub fn kubelet_log(node: &str) -> String {
    std::fs::read_to_string(repo(&format!("target/controlplane/nodes/{node}/kubelet.log"))).unwrap_or_default()
}

/// How often the node's kubelet has logged the plugin of `driver` registering.
pub fn registrations(node: &str, driver: &str) -> usize {
    let socket = format!("{driver}-reg.sock");
    kubelet_log(node).lines().filter(|l| l.contains("RegisterPlugin started") && l.contains(&socket)).count()
}

/// `hack/controlplane.sh stop-component|start-component COMPONENT NODE` (kubelet or containerd).
pub fn component(verb: &str, component: &str, node: &str) {
    let status = Command::new(repo("hack/controlplane.sh")).args([verb, component, node]).status().unwrap();
    assert!(status.success(), "hack/controlplane.sh {verb} {component} {node}");
}

/// Whether `hack/node.sh status` finds the node's kubelet and containerd running and the Node Ready.
pub fn running(node: &str) -> bool {
    let status = Command::new(repo("hack/node.sh")).args(["status", node]).stdout(Stdio::null()).status().unwrap();
    status.success()
}

/// Where the plugin writes a claim's CDI spec (the host's CDI directory, which the node's containerd reads).
pub fn cdi_spec(claim_uid: &str) -> PathBuf {
    PathBuf::from(format!("/var/run/cdi/{DRIVER}-{claim_uid}.json"))
}

/// Deletes the node's Neuron slices: a slice outlives the plugin that published it (the Node owns it), so one left
/// by an earlier test must not pass for the next plugin's.
pub async fn forget_slices(client: &Client, node: &str) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mine = ListParams::default().fields(&format!("spec.nodeName={node},spec.driver={DRIVER}"));
    slices.delete_collection(&DeleteParams::default(), &mine).await.unwrap();
}

/// Waits until no plugin pod (of any config) is left on the node, terminating ones included. A plugin that stops
/// removes its registration socket, whose path is the same for every plugin of the driver: an old pod that stops
/// after a new one started takes the new one's registration with it, and the kubelet reports the driver as not
/// registered (docs/troubleshooting.md).
pub async fn plugin_pods_gone(client: &Client, node: &str) {
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = ListParams::default().labels(PLUGIN_SELECTOR).fields(&format!("spec.nodeName={node}"));
    eventually(TIMEOUT, &format!("the earlier plugin pods gone from {node}"), || async {
        pods.list(&on_node).await.ok()?.items.is_empty().then_some(())
    })
    .await
}

/// Waits until no claim is allocated on the node: a test that needs its devices free (connected groups of 8) does
/// not depend on every earlier test having released theirs.
pub async fn devices_free(client: &Client, node: &str) {
    let claims: Api<ResourceClaim> = Api::all(client.clone());
    eventually(TIMEOUT, &format!("every claim on {node} released"), || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        let on_node = |claim: &ResourceClaim| {
            let terms = claim.status.as_ref()?.allocation.as_ref()?.node_selector.as_ref()?.node_selector_terms.clone();
            Some(
                terms
                    .iter()
                    .flat_map(|t| t.match_fields.iter().flatten())
                    .any(|f| f.key == "metadata.name" && f.values.iter().flatten().any(|v| v == node)),
            )
        };
        (!list.items.iter().any(|c| on_node(c) == Some(true))).then_some(())
    })
    .await
}

/// The node's Neuron slice once the plugin of image `tag` published it (`draDriverVersion` is the image tag): its
/// device names, sorted.
pub async fn published_devices(client: &Client, node: &str, tag: &str) -> Vec<String> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mine = ListParams::default().fields(&format!("spec.nodeName={node},spec.driver={DRIVER}"));
    eventually(TIMEOUT, &format!("{node}'s slice from plugin {tag}"), || async {
        let list = slices.list(&mine).await.ok()?;
        let slice = list.items.first()?;
        let devices = slice.spec.devices.as_ref()?;
        let version = devices.iter().find_map(|d| d.attributes.as_ref()?.get("draDriverVersion")?.version.clone())?;
        (version == tag).then(|| {
            let mut names: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
            names.sort();
            names
        })
    })
    .await
}

/// `kubectl exec` in a pod's only container: stdout, or a panic with stderr.
pub fn exec(namespace: &str, pod: &str, command: &[&str]) -> String {
    let args = [&["exec", "-n", namespace, pod, "--"][..], command].concat();
    kubectl_with(&kubeconfig(), &args, None).unwrap_or_else(|e| panic!("kubectl exec {pod}: {e}"))
}

/// What a container sees of its Neuron devices: the device files under /dev and the Neuron runtime's environment.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    /// `/dev/neuron<K>`, sorted by K.
    pub devices: Vec<String>,
    /// `NEURON_*` variables, sorted.
    pub env: Vec<String>,
}

pub fn seen_by(namespace: &str, pod: &str) -> Seen {
    let mut devices: Vec<String> =
        exec(namespace, pod, &["sh", "-c", "ls /dev | grep '^neuron' || true"]).lines().map(str::to_string).collect();
    devices.sort_by_key(|d| d.trim_start_matches("neuron").parse::<u32>().unwrap_or(u32::MAX));
    let mut env: Vec<String> =
        exec(namespace, pod, &["env"]).lines().filter(|l| l.starts_with("NEURON_")).map(str::to_string).collect();
    env.sort();
    Seen { devices: devices.into_iter().map(|d| format!("/dev/{d}")).collect(), env }
}

/// The value of one `NAME=value` line of `env`.
pub fn env_value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter().find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

/// `kubectl describe` of the pods in `namespaces`, for a failed test's output.
pub fn describe(namespaces: &[&str]) -> String {
    namespaces.iter().map(|ns| kubectl(&["describe", "pods", "-n", ns])).collect::<Vec<_>>().join("\n")
}

/// `from` merged into `into`, object by object (a config spec and a test's additions to it).
pub fn merge(into: &mut serde_json::Value, from: &serde_json::Value) {
    use serde_json::Value;
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from.clone(),
    }
}
