//! LIST and WATCH of the generated kinds: objects built from their index, a page at a time.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use neuron_dra_operator::devtools::simulate::fleet;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::shared::{BASE_VERSION, Kind, Plugin, Shared, TAINT_KEY, Taints, gone_line};

/// How often a watch that allows bookmarks gets one (the API server: about a minute; shorter here, so a bench
/// sees them).
const BOOKMARK_EVERY: Duration = Duration::from_secs(10);

fn version_of(object: &mut Value, version: u64) {
    object["metadata"]["resourceVersion"] = json!(version.to_string());
}

pub fn node(shared: &Shared, i: usize) -> Value {
    let mut node = serde_json::to_value(fleet::node(&shared.spec, i)).unwrap();
    node["metadata"]["uid"] = json!(format!("node-{i}"));
    node["status"] = fleet::node_status(&shared.spec);
    version_of(&mut node, BASE_VERSION);
    node
}

/// Node `i`'s Neuron slice with its taints, if any.
pub fn neuron_slice(shared: &Shared, i: usize, taints: Option<&Taints>) -> Value {
    let mut slice = serde_json::to_value(fleet::resource_slice(&shared.spec, i, Some(format!("node-{i}")))).unwrap();
    slice["metadata"]["uid"] = json!(format!("slice-{i}"));
    version_of(&mut slice, BASE_VERSION);
    if let Some((version, taints)) = taints {
        version_of(&mut slice, *version);
        for device in slice["spec"]["devices"].as_array_mut().into_iter().flatten() {
            let name = device["name"].as_str().unwrap_or_default().to_string();
            if let Some((_, effect)) = taints.iter().find(|(d, _)| name == format!("neuron-device-{d}")) {
                device["taints"] = json!([{"key": TAINT_KEY, "value": "replayed", "effect": effect,
                    "timeAdded": neuron_dra_operator::logic::status::now().to_string()}]);
            }
        }
    }
    slice
}

fn efa_slice(shared: &Shared, i: usize) -> Value {
    let mut slice = serde_json::to_value(fleet::efa_slice(&shared.spec, i, Some(format!("node-{i}")))).unwrap();
    slice["metadata"]["uid"] = json!(format!("efa-{i}"));
    version_of(&mut slice, BASE_VERSION);
    slice
}

/// Stands for the node's index in a plugin's pod template.
pub const POD_NODE: &str = "@NODE@";

/// The JSON of `plugin`'s pod on node `POD_NODE`, which each pod replaces with its node's index.
pub fn pod_template(shared: &Shared, plugin: &Plugin) -> String {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{}-{POD_NODE}", plugin.name), "namespace": plugin.namespace,
            "uid": format!("{}-{POD_NODE}", plugin.uid),
            "labels": {
                "app.kubernetes.io/managed-by": neuron_dra_operator::api::labels::MANAGER,
                "neurondra.io/config": plugin.config,
                "controller-revision-hash": plugin.hash,
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": plugin.name, "uid": plugin.uid,
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"nodeName": format!("{}-{POD_NODE}", shared.spec.prefix),
            "containers": [{"name": "plugin", "image": "replayed"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    });
    version_of(&mut pod, plugin.version);
    pod.to_string()
}

/// How many objects of `kind` there are now.
fn count(shared: &Shared, kind: Kind) -> usize {
    match kind {
        Kind::Nodes | Kind::NeuronSlices | Kind::EfaSlices => shared.model.nodes,
        Kind::Claims => shared.claims.lock().unwrap().len(),
        Kind::Pods => shared.model.nodes * shared.plugins.lock().unwrap().len(),
    }
}

/// Object `i` of `kind` as served: the node's unchanging objects from the cache (`Shared::rendered`), the rest built.
fn object(shared: &Shared, kind: Kind, i: usize) -> Option<Bytes> {
    let rendered = |slot: usize, build: &dyn Fn() -> Value| {
        shared.rendered[slot][i].get_or_init(|| Bytes::from(serde_json::to_vec(&build()).unwrap())).clone()
    };
    Some(match kind {
        Kind::Nodes => rendered(0, &|| node(shared, i)),
        Kind::NeuronSlices => match shared.taints.lock().unwrap().get(&i) {
            Some(taints) => Bytes::from(serde_json::to_vec(&neuron_slice(shared, i, Some(taints))).unwrap()),
            None => rendered(1, &|| neuron_slice(shared, i, None)),
        },
        Kind::EfaSlices => rendered(2, &|| efa_slice(shared, i)),
        Kind::Claims => Bytes::from(serde_json::to_vec(shared.claims.lock().unwrap().values().nth(i)?).unwrap()),
        Kind::Pods => {
            let plugins = shared.plugins.lock().unwrap();
            let plugin = plugins.get(i / shared.model.nodes)?;
            let node = (i % shared.model.nodes).to_string();
            Bytes::from(plugin.pod.replace(POD_NODE, &node))
        }
    })
}

fn list_kind(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Nodes => ("v1", "NodeList"),
        Kind::NeuronSlices | Kind::EfaSlices => ("resource.k8s.io/v1", "ResourceSliceList"),
        Kind::Claims => ("resource.k8s.io/v1", "ResourceClaimList"),
        Kind::Pods => ("v1", "PodList"),
    }
}

/// One page: `limit` objects from the `continue` token's index (every object without `limit`).
pub fn list(shared: &Shared, kind: Kind, query: &HashMap<String, String>) -> Response {
    let resumed = query.get("continue").and_then(|c| c.split_once('-'));
    let (version, from) = match resumed.and_then(|(v, i)| Some((v.parse::<u64>().ok()?, i.parse::<usize>().ok()?))) {
        Some(token) => token,
        None => (shared.version(), 0),
    };
    let total = count(shared, kind);
    let limit = query.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let to = from.saturating_add(limit).min(total);
    let mut items = Vec::with_capacity(64 * 1024);
    items.push(b'[');
    for i in from..to {
        if let Some(object) = object(shared, kind, i) {
            if items.len() > 1 {
                items.push(b',');
            }
            items.extend_from_slice(&object);
        }
    }
    items.push(b']');
    let mut metadata = json!({"resourceVersion": version.to_string()});
    if to < total {
        metadata["continue"] = json!(format!("{version}-{to}"));
        metadata["remainingItemCount"] = json!(total - to);
    }
    let (api_version, list_kind) = list_kind(kind);
    let head = json!({"apiVersion": api_version, "kind": list_kind, "metadata": metadata});
    let mut body = serde_json::to_vec(&head).unwrap();
    body.pop(); // the closing brace
    body.extend_from_slice(b",\"items\":");
    body.extend_from_slice(&items);
    body.push(b'}');
    shared.list_bytes[kind as usize].fetch_add(body.len() as u64, Ordering::Relaxed);
    Response::builder().header("content-type", "application/json").body(Body::from(body)).unwrap()
}

fn bookmark(kind: Kind, version: u64) -> Bytes {
    let (api_version, list_kind) = list_kind(kind);
    let object = json!({"apiVersion": api_version, "kind": list_kind.trim_end_matches("List"),
        "metadata": {"resourceVersion": version.to_string()}});
    let mut line = serde_json::to_vec(&json!({"type": "BOOKMARK", "object": object})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

/// A watch from `resourceVersion`: the logged events after it, then new ones, bookmarks, until `timeoutSeconds`.
pub fn watch(shared: &std::sync::Arc<Shared>, kind: Kind, query: &HashMap<String, String>) -> Response {
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    {
        let mut logs = shared.logs.lock().unwrap();
        let current = logs.0;
        let from = query.get("resourceVersion").and_then(|v| v.parse::<u64>().ok()).filter(|v| *v > 0);
        let from = from.unwrap_or(current);
        let log = &logs.1[kind as usize];
        if from < log.start {
            let _ = tx.send(gone_line());
            drop(tx);
        } else {
            for (_, line) in log.events.iter().filter(|(v, _)| *v > from) {
                let _ = tx.send(line.clone());
            }
            logs.2.push((kind, tx));
        }
    }
    let bookmarks = query.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let timeout = query.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800);
    let (out, out_rx) = mpsc::channel::<Bytes>(64);
    let shared = shared.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            let line = tokio::select! {
                _ = &mut deadline => break,
                line = rx.recv() => match line { Some(line) => line, None => break },
                _ = tick.tick(), if bookmarks => bookmark(kind, shared.version()),
            };
            shared.watch_bytes[kind as usize].fetch_add(line.len() as u64, Ordering::Relaxed);
            if out.send(line).await.is_err() {
                break;
            }
        }
    });
    let stream =
        futures::stream::unfold(
            out_rx,
            |mut rx| async move { rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx)) },
        );
    Response::builder().header("content-type", "application/json").body(Body::from_stream(stream)).unwrap()
}
