//! The replay server: a fleet of 20,000 to 100,000 simulated nodes served to the unchanged operator binary, which
//! the local API server (one etcd, two cores) cannot hold. Issue #30: "measured, not extrapolated".
//!
//! What is emulated. Four kinds are generated on the fly from the simulator's device model (`fleet::node`,
//! `fleet::resource_slice`, `fleet::efa_slice`), each object a pure function of its index plus a small overlay of
//! the changes a benchmark made (device taints, claims). A node and its untainted slices are rendered to JSON
//! once, on first use, and their bytes kept (about 24 KiB a node: 2.4 GiB of the bench process at 100,000 nodes),
//! so a list costs a copy instead of a build; plugin pods are spliced into one JSON template per revision.
//!   - Nodes (`/api/v1/nodes`), ResourceSlices of both drivers (`/apis/resource.k8s.io/v1/resourceslices` with the
//!     `spec.driver=` field selector the operator sends; one kind per driver), ResourceClaims, and the plugin pods
//!     (`/api/v1/pods` with the operator's managed-by label selector): one per node and operator DaemonSet.
//!   - LIST: pages (`limit`, `continue` tokens that carry the list's resourceVersion and the next index),
//!     `metadata.resourceVersion`. WATCH (`watch=true`): the events after `resourceVersion` from a bounded log,
//!     BOOKMARKs when `allowWatchBookmarks` is set, the end of the stream at `timeoutSeconds`, and an ERROR event
//!     with code 410 when the version is older than the log (as the API server answers a too-old version).
//!   - Everything else (configs, templates, DaemonSets, revisions, leases, events, namespaces, discovery, RBAC) is
//!     forwarded to the real API server with a client built from the operator's own (ServiceAccount) kubeconfig, so
//!     the operator keeps its shipped RBAC; the operator itself gets a kubeconfig for `http://127.0.0.1:PORT` with
//!     no credentials.
//!   - DaemonSets: the real DaemonSet controller sees no synthetic node, so it reports 0 desired. The replay rewrites
//!     the status of the operator's DaemonSets (managed-by label) in forwarded GET, LIST and WATCH answers to N
//!     desired, current, ready, available and updated, observed at the current generation, and serves the plugin
//!     pods with the DaemonSet's uid as controller and the `controller-revision-hash` of its newest upstream
//!     ControllerRevision (polled every 500 ms). When that hash changes, the pods' watches get a 410 and relist
//!     (every node "updates" at once: rollouts are not what this measures).
//!
//! What is not: label and field selectors beyond the ones the operator sends, `resourceVersionMatch`, streaming
//! lists (`sendInitialEvents`), protobuf, writes to the generated kinds (an eviction of a generated pod is forwarded
//! and fails upstream), node heartbeats (a busy fleet is not replayed), consistency of a list's pages with events
//! emitted between them (pages are built from the current overlay).
//!
//! Considered: kwok (fakes kubelets, but every node and slice still lives in the real API server and etcd: the
//! limit this replaces), kube-apiserver over a fake or in-memory storage (no such mode ships; etcd's memory is the
//! cost), envtest (a real kube-apiserver and etcd again, without controllers). A purpose-built replay keeps the
//! fleet out of etcd and the API server (it lives in the operator's cache and as bytes in the bench process), and
//! lets a benchmark emit one event at a known instant.

mod serve;
mod shared;
mod upstream;

pub use shared::FleetModel;
use shared::{BASE_VERSION, Kind, Log, Shared};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::{Query, Request, State};
use axum::response::Response;
use kube::Client;
use serde_json::json;

/// A running replay server.
pub struct Replay {
    shared: Arc<Shared>,
    pub port: u16,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Replay {
    /// Serves `model` on 127.0.0.1 (a port the kernel picks), forwarding the rest to `upstream`. The replay runs
    /// on a runtime of its own, whose threads are named `replay`, so its CPU time is measured apart from the bench's
    /// (`cpu_seconds`).
    pub async fn start(model: FleetModel, upstream: Client) -> Replay {
        let shared = Arc::new(Shared {
            spec: model.spec(),
            logs: Mutex::new((
                BASE_VERSION,
                (0..5).map(|_| Log { start: BASE_VERSION, events: vec![] }).collect(),
                vec![],
            )),
            taints: Mutex::default(),
            claims: Mutex::default(),
            plugins: Mutex::default(),
            rendered: std::array::from_fn(|_| (0..model.nodes).map(|_| OnceLock::new()).collect()),
            list_bytes: Default::default(),
            watch_bytes: Default::default(),
            forwarded_bytes: AtomicU64::new(0),
            upstream,
            model,
        });
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("replay").enable_all().build();
        let runtime = runtime.unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let server = runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        let plugins = runtime.spawn(upstream::follow_plugins(shared.clone()));
        Replay { shared, port, tasks: vec![server, plugins], runtime: Some(runtime) }
    }

    /// CPU seconds (user + system) the replay's own threads have used.
    pub fn cpu_seconds(&self) -> f64 {
        let mut ticks = 0.0;
        for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if !comm.starts_with("replay") {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            ticks += field(11) + field(12);
        }
        ticks / 100.0
    }

    /// A kubeconfig for the operator: plain HTTP to the replay, no credentials (the replay forwards with them).
    pub fn kubeconfig(&self, path: &Path) -> PathBuf {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: http://127.0.0.1:{}\n\
             users:\n- name: operator\n  user: {{}}\ncontexts:\n- name: replay\n  context: {{cluster: replay, user: \
             operator}}\ncurrent-context: replay\n",
            self.port
        );
        std::fs::write(path, text).unwrap();
        path.to_path_buf()
    }

    /// A NoExecute (or other `effect`) taint on device `device` of node `node`'s Neuron slice: MODIFIED.
    pub fn taint(&self, node: usize, device: u32, effect: &str) {
        let mut taints = self.shared.taints.lock().unwrap();
        let entry = taints.entry(node).or_insert((0, Vec::new()));
        entry.1.retain(|(d, _)| *d != device);
        entry.1.push((device, effect.to_string()));
        let slice = serve::neuron_slice(&self.shared, node, Some(&*entry));
        entry.0 = self.shared.emit(Kind::NeuronSlices, "MODIFIED", slice);
    }

    /// A claim made from `template` of `config`, allocated `device` of node `node`: ADDED, or MODIFIED when a claim of
    /// that name was sent before.
    pub fn allocate(&self, namespace: &str, name: &str, config: &str, template: &str, node: usize, device: u32) {
        let node_name = self.shared.spec.node_name(node);
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {
                "name": name, "namespace": namespace, "uid": format!("claim-{namespace}-{name}"),
                "labels": {"neurondra.io/config": config, "neurondra.io/template": template},
            },
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [{
                "request": "neuron", "driver": neuron_dra_operator::logic::desired::NEURON_DRIVER,
                "pool": node_name, "device": format!("neuron-device-{device}"),
            }]}}},
        });
        let key = format!("{namespace}/{name}");
        let mut claims = self.shared.claims.lock().unwrap();
        let event = if claims.contains_key(&key) { "MODIFIED" } else { "ADDED" };
        let version = self.shared.emit(Kind::Claims, event, claim.clone());
        let mut claim = claim;
        claim["metadata"]["resourceVersion"] = json!(version.to_string());
        claims.insert(key, claim);
    }

    /// Bytes served per kind so far: (lists, watches); and forwarded to or from the API server.
    pub fn bytes(&self) -> (Vec<(Kind, u64, u64)>, u64) {
        let per_kind = Kind::ALL
            .iter()
            .map(|&k| {
                let i = k as usize;
                (
                    k,
                    self.shared.list_bytes[i].load(Ordering::Relaxed),
                    self.shared.watch_bytes[i].load(Ordering::Relaxed),
                )
            })
            .collect();
        (per_kind, self.shared.forwarded_bytes.load(Ordering::Relaxed))
    }

    /// Counts from zero again.
    pub fn reset_counters(&self) {
        for i in 0..5 {
            self.shared.list_bytes[i].store(0, Ordering::Relaxed);
            self.shared.watch_bytes[i].store(0, Ordering::Relaxed);
        }
        self.shared.forwarded_bytes.store(0, Ordering::Relaxed);
    }

    pub fn node_name(&self, index: usize) -> String {
        self.shared.spec.node_name(index)
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
        // Not dropped in place: dropping a runtime inside another's async context panics.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Serves a generated kind, or forwards the request.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let query: std::collections::HashMap<String, String> =
        Query::try_from_uri(request.uri()).map(|q| q.0).unwrap_or_default();
    if request.method() == axum::http::Method::GET
        && let Some(kind) = generated(request.uri().path(), &query)
    {
        let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        return match watching {
            true => serve::watch(&shared, kind, &query),
            false => serve::list(&shared, kind, &query),
        };
    }
    upstream::forward(&shared, request).await
}

/// The kind a GET of `path` asks for, if the replay generates it.
fn generated(path: &str, query: &std::collections::HashMap<String, String>) -> Option<Kind> {
    use neuron_dra_operator::logic::desired::{EFA_DRIVER, NEURON_DRIVER};
    let selector = |key: &str| query.get(key).map(String::as_str).unwrap_or_default();
    match path {
        "/api/v1/nodes" => Some(Kind::Nodes),
        "/apis/resource.k8s.io/v1/resourceslices" => match selector("fieldSelector") {
            s if s == format!("spec.driver={NEURON_DRIVER}") => Some(Kind::NeuronSlices),
            s if s == format!("spec.driver={EFA_DRIVER}") => Some(Kind::EfaSlices),
            _ => None,
        },
        "/apis/resource.k8s.io/v1/resourceclaims" => Some(Kind::Claims),
        "/api/v1/pods" if selector("labelSelector").contains("app.kubernetes.io/managed-by") => Some(Kind::Pods),
        _ => None,
    }
}
