//! The stand-in kubelet: reports the pods kube-scheduler bound to simulated nodes as running (plugin pods Ready or
//! not, as their node's annotation says), leaves the pods a test reports finished alone, and confirms their
//! deletion, as kubelets would. Asked to, it also plays the
//! kubelet plugin: a plugin pod that starts publishes its node's Neuron slice from its image's version, and a "bad"
//! version (an image tag ending in `-notready`, `-fewer` or `-nopublish`) misbehaves as `NOT_READY_TAG`,
//! `FEWER_DEVICES_TAG` and `NO_PUBLISH_TAG` say.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::fleet;
use super::fleet::SIMULATED_LABEL;
use super::marks::{
    FEWER_DEVICES_TAG, NO_PUBLISH_TAG, NOT_READY_TAG, PARALLEL, PLUGIN_POD_LABEL, PLUGIN_READY_ANNOTATION, apply_params,
};
use super::nodes::fleet_of;

pub(super) async fn set_plugin_ready(client: &Client, node_name: &str, ready: bool) -> anyhow::Result<()> {
    let patch = json!({"metadata": {"annotations": {PLUGIN_READY_ANNOTATION: ready.to_string()}}});
    Api::<Node>::all(client.clone()).patch(node_name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods.list(&ListParams::default().labels(PLUGIN_POD_LABEL)).await?;
    for pod in list.items.iter().filter(|p| pod_node(p).as_deref() == Some(node_name)) {
        report_pod(client, pod, ready).await?;
    }
    Ok(())
}

/// The node a pod is bound to, or (a DaemonSet pod not bound yet) pinned to.
pub(super) fn pod_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    spec.node_name.clone().or_else(|| crate::cluster::pinned_node(spec.affinity.as_ref()?))
}

fn is_plugin_pod(pod: &Pod) -> bool {
    let (key, value) = PLUGIN_POD_LABEL.split_once('=').expect("a key=value selector");
    pod.labels().get(key).is_some_and(|v| v == value)
}

/// Reports a pod bound to a simulated node as its kubelet would: running (plugin pods Ready as the node's
/// annotation says, other pods Ready), or, once it is being deleted, gone. Returns whether the pod was ours.
async fn handle_pod(client: &Client, nodes: &Store<Node>, pod: &Pod, plugin: bool) -> anyhow::Result<bool> {
    let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { return Ok(false) };
    // A pod can be seen before its node reaches the cache: ask the server then.
    let node = match nodes.get(&ObjectRef::new(&node_name)) {
        Some(node) => (*node).clone(),
        None => match Api::<Node>::all(client.clone()).get_opt(&node_name).await? {
            Some(node) if node.labels().contains_key(SIMULATED_LABEL) => node,
            _ => return Ok(false),
        },
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    if pod.metadata.deletion_timestamp.is_some() {
        // The kubelet confirms a deletion once the containers have stopped.
        force_delete(&pods, &pod.name_any()).await?;
        return Ok(true);
    }
    // A finished pod stays finished (a test reports a workload's end; a kubelet never restarts such a pod).
    if matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
        return Ok(true);
    }
    let mut ready = !is_plugin_pod(pod) || node.annotations().get(PLUGIN_READY_ANNOTATION).is_none_or(|v| v == "true");
    let tag = plugin_tag(pod).filter(|_| plugin && is_plugin_pod(pod));
    if tag.as_deref().is_some_and(|t| t.ends_with(NOT_READY_TAG)) {
        ready = false;
    }
    let status = pod.status.as_ref();
    let current = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
    if current != Some(ready) || !running {
        // The plugin starting: it publishes its devices before it reports Ready.
        if let Some(tag) = tag.filter(|t| ready && !running && !t.ends_with(NO_PUBLISH_TAG)) {
            publish_as_plugin(client, &node_name, &tag).await?;
        }
        report_pod(client, pod, ready).await?;
    }
    Ok(true)
}

/// The tag of the plugin container's image (`…:1.2.0` → `1.2.0`).
fn plugin_tag(pod: &Pod) -> Option<String> {
    let image = pod.spec.as_ref()?.containers.first()?.image.as_deref()?;
    Some(crate::logic::image::label(image))
}

/// Publishes the node's Neuron slice as plugin version `tag` would: `draDriverVersion` is the tag, and a
/// `FEWER_DEVICES_TAG` version leaves out the node's last Neuron device.
async fn publish_as_plugin(client: &Client, node_name: &str, tag: &str) -> anyhow::Result<()> {
    let (mut spec, index, node) = fleet_of(client, node_name).await?;
    spec.dra_driver_version = tag.to_string();
    let mut slice = fleet::resource_slice(&spec, index, node.uid());
    if tag.ends_with(FEWER_DEVICES_TAG)
        && let Some(devices) = slice.spec.devices.as_mut()
        && let Some(last) = devices.iter().rposition(|d| {
            d.attributes.as_ref().and_then(|a| a.get("resourceType")).and_then(|v| v.string.as_deref())
                == Some("neuron_device")
        })
    {
        devices.remove(last);
    }
    let slices: Api<k8s_openapi::api::resource::v1::ResourceSlice> = Api::all(client.clone());
    slices.patch(&slice.metadata.name.clone().unwrap_or_default(), &apply_params(), &Patch::Apply(&slice)).await?;
    Ok(())
}

async fn report_pod(client: &Client, pod: &Pod, ready: bool) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let now = crate::logic::status::now().to_string();
    let flag = if ready { "True" } else { "False" };
    let containers: Vec<serde_json::Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({"name": c.name, "ready": ready, "started": true, "restartCount": 0, "image": c.image,
                   "imageID": format!("sim://{}", c.image.clone().unwrap_or_default()),
                   "containerID": format!("containerd://{}", pod.uid().unwrap_or_default()),
                   "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let status = json!({
        "apiVersion": "v1", "kind": "Pod",
        "status": {
            "phase": "Running", "hostIP": "10.0.0.10", "podIP": "10.0.0.10", "startTime": now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                {"type": "Ready", "status": flag, "lastTransitionTime": now},
            ],
            "containerStatuses": containers,
        }
    });
    match pods.patch_status(&pod.name_any(), &apply_params(), &Patch::Apply(&status)).await {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing left to report.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The simulated nodes, cached; ready once the first list has arrived.
async fn simulated_nodes(client: &Client) -> (Store<Node>, tokio::task::JoinHandle<()>) {
    let (store, writer) = reflector::store();
    let nodes: Api<Node> = Api::all(client.clone());
    let stream = reflector(writer, watcher(nodes, watcher::Config::default().labels(SIMULATED_LABEL)))
        .default_backoff()
        .for_each(|_| futures::future::ready(()));
    let task = tokio::spawn(stream);
    let _ = store.wait_until_ready().await;
    (store, task)
}

/// One pass over every pod; returns how many are on simulated nodes.
pub async fn kubelet_pass(client: &Client) -> anyhow::Result<usize> {
    let (nodes, task) = simulated_nodes(client).await;
    super::lease::renew_all(client, nodes.state()).await;
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods.list(&ListParams::default().fields("spec.nodeName!=")).await?;
    let handled = futures::stream::iter(list.items.iter())
        .map(|pod| handle_pod(client, &nodes, pod, false))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<bool>>()
        .await;
    task.abort();
    Ok(handled?.into_iter().filter(|h| *h).count())
}

/// Watches the pods bound to nodes until the process is stopped.
pub async fn kubelet(client: Client) -> anyhow::Result<()> {
    kubelet_with(client, false).await
}

/// `kubelet`, also playing the kubelet plugin when `plugin` is true (see the module's documentation).
pub async fn kubelet_with(client: Client, plugin: bool) -> anyhow::Result<()> {
    let (nodes, _task) = simulated_nodes(&client).await;
    // Aborted with the watch below, when this future is dropped.
    let heartbeat = AbortOnDrop(tokio::spawn(super::lease::heartbeat(client.clone(), nodes.clone())));
    let pods: Api<Pod> = Api::all(client.clone());
    let stream =
        watcher(pods, watcher::Config::default().fields("spec.nodeName!=")).default_backoff().applied_objects();
    stream
        .for_each_concurrent(PARALLEL, |pod| {
            let client = client.clone();
            let nodes = nodes.clone();
            async move {
                match pod {
                    Ok(pod) => {
                        if let Err(error) = handle_pod(&client, &nodes, &pod, plugin).await {
                            tracing::warn!(pod = %pod.name_any(), %error, "simulated kubelet");
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "watching pods");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        })
        .await;
    drop(heartbeat);
    Ok(())
}

/// A spawned task that ends with its owner: a dropped stand-in kubelet stops renewing its nodes' Leases.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(super) async fn force_delete(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    match pods.delete(name, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
