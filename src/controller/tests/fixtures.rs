//! Fixtures for reconcile tests without a cluster: watch caches filled from plain objects, and a client whose
//! requests reach a mock API service (tower-test) that answers like an API server, records every request and fails
//! the ones a test asks it to.

use std::sync::{Arc, Mutex};

use http::{Method, Request, Response};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{Value, json};

use super::super::{Context, GuardedConfig, Stores};
use crate::api::NeuronDRAConfig;
use crate::api::labels::MANAGER;
use crate::cluster::{NodeView, PodView, SliceView, node_view};
use crate::logic::desired::Desired;
use crate::runtime::telemetry::Metrics;

/// A store holding `objects`, listed once (ready).
fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store_of(K::DynamicType::default(), objects)
}

/// A cache of a kind whose type is only known at run time (DeviceTaintRules).
fn store_of<K>(resource: K::DynamicType, objects: Vec<K>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut writer = reflector::store::Writer::new(resource);
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

/// What the watch caches hold.
#[derive(Default, Clone)]
pub struct World {
    pub configs: Vec<NeuronDRAConfig>,
    pub nodes: Vec<Node>,
    pub namespaces: Vec<Namespace>,
    pub daemon_sets: Vec<DaemonSet>,
    pub templates: Vec<ResourceClaimTemplate>,
    pub service_accounts: Vec<ServiceAccount>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// The plugin's fences as judged (in place unless a test says otherwise).
    pub fence: Option<String>,
    /// The server's scheduler (default: the older, which searches orderings).
    pub allocator: crate::logic::desired::Allocator,
    pub device_classes: Vec<DeviceClass>,
    /// DeviceClasses another tool made: in no owned cache, only among every class's metadata.
    pub foreign_device_classes: Vec<DeviceClass>,
    /// AWS's EFA driver not installed: its DeviceClass, otherwise among every class's metadata (as in the test
    /// clusters), absent.
    pub no_efa_driver: bool,
    /// DeviceTaintRules (`v1`); None: the server serves none.
    pub taint_rules: Option<Vec<crate::cluster::taint_rule::TaintRuleView>>,
    pub slices: Vec<SliceView>,
    pub plugin_pods: Vec<PodView>,
    pub revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
}

/// Gives an object the resourceVersion a cached copy has.
/// `object` as the operator's apply left it: stamped with what was applied, at a resourceVersion.
fn stored<K: Resource + serde::Serialize + Clone>(object: K) -> K {
    let mut object = crate::controller::act::apply::stamped(&object, crate::api::labels::MANAGER);
    object.meta_mut().resource_version = Some("1".into());
    object
}

impl World {
    /// Namespaces `names` exist (and nothing else).
    pub fn with_namespaces(names: &[&str]) -> World {
        let namespaces = names
            .iter()
            .map(|n| serde_json::from_value(json!({"metadata": {"name": n, "resourceVersion": "1"}})).unwrap())
            .collect();
        World { namespaces, ..World::default() }
    }

    /// The cluster already holds every object of `desired`, its DaemonSet rolled out on `nodes` nodes.
    pub fn holding(mut self, desired: &Desired, nodes: i32) -> World {
        if !self.namespaces.iter().any(|n| n.metadata.name == desired.namespace.metadata.name) {
            self.namespaces.push(stored(desired.namespace.clone()));
        }
        self.service_accounts.push(stored(desired.service_account.clone()));
        self.cluster_role_bindings.push(stored(desired.cluster_role_binding.clone()));
        self.device_classes.push(stored(desired.device_class.clone()));
        self.device_classes.push(stored(desired.ultra_server_node_class.clone()));
        let mut daemon_set = stored(desired.daemon_set.clone());
        daemon_set.metadata.generation = Some(1);
        daemon_set.status = Some(
            serde_json::from_value(json!({"observedGeneration": 1, "desiredNumberScheduled": nodes,
                "currentNumberScheduled": nodes, "numberMisscheduled": 0, "numberReady": nodes,
                "updatedNumberScheduled": nodes}))
            .unwrap(),
        );
        self.daemon_sets.push(daemon_set);
        self.templates.extend(desired.templates.iter().cloned().map(stored));
        self
    }

    /// The snapshot a reconcile would take of this world.
    pub fn snapshot(&self) -> crate::controller::pure::snapshot::Snapshot {
        let taint_rules = self.taint_rules.as_ref().map(|_| crate::cluster::taint_rule::v1_resource());
        // The unit tests' world: fences in place that allow any driver, a server that serves everything.
        let fence = Ok(crate::logic::fence::Allowed::default());
        let probes = crate::controller::pure::snapshot::Probes { fence, unsupported: None, allocator: self.allocator };
        crate::controller::pure::snapshot::Snapshot::new(&self.stores(), taint_rules, probes)
    }

    pub fn stores(&self) -> Stores {
        Stores {
            configs: store(self.configs.iter().cloned().map(guarded).collect()),
            nodes: store(self.nodes.iter().map(node_view).collect::<Vec<NodeView>>()),
            namespaces: store(
                self.namespaces
                    .iter()
                    .map(|ns| kube::core::PartialObjectMetaExt::into_response_partial(ns.metadata.clone()))
                    .collect::<Vec<_>>(),
            ),
            owned: crate::controller::stores::Owned {
                daemon_sets: store(self.daemon_sets.clone()),
                templates: store(self.templates.clone()),
                service_accounts: store(self.service_accounts.clone()),
                cluster_role_bindings: store(self.cluster_role_bindings.clone()),
                device_classes: store(self.device_classes.clone()),
                resource_quotas: store(Vec::new()),
            },
            every_device_class: store(
                self.device_classes
                    .iter()
                    .chain(&self.foreign_device_classes)
                    .map(|class| class.metadata.clone())
                    .chain((!self.no_efa_driver).then(efa_class_metadata))
                    .map(kube::core::PartialObjectMetaExt::into_response_partial)
                    .collect::<Vec<_>>(),
            ),
            slices: store(self.slices.clone()),
            efa_slices: store(Vec::<SliceView>::new()),
            claims: store(Vec::new()),
            taint_rules: store_of(
                crate::cluster::taint_rule::v1_resource(),
                self.taint_rules.clone().unwrap_or_default(),
            ),
            plugin_pods: store(self.plugin_pods.clone()),
            revisions: store(self.revisions.clone()),
            validations: Default::default(),
        }
    }
}

pub fn guarded(config: NeuronDRAConfig) -> GuardedConfig {
    kube::core::DeserializeGuard(Ok(config))
}

/// One request as the API server received it.
#[derive(Debug, Clone)]
pub struct Sent {
    pub method: Method,
    /// Path without the query.
    pub path: String,
    pub body: Value,
}

impl Sent {
    /// `METHOD path`, the form tests compare.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A failure the mock answers with, for the requests whose `METHOD path` starts with `prefix`.
struct Failure {
    prefix: String,
    code: u16,
    message: String,
    /// How many more matching requests fail (then they succeed).
    times: usize,
}

#[derive(Default)]
struct Server {
    sent: Vec<Sent>,
    failures: Vec<Failure>,
    /// The config as stored, returned by its status and finalizer patches.
    configs: Vec<Value>,
    /// Objects a GET finds (by path) that the caches do not hold; any other GET finds nothing.
    stored: Vec<(String, Value)>,
}

/// A reconcile context over `World`'s caches, and the mock API server its client talks to.
pub struct Fixture {
    pub ctx: Arc<Context>,
    server: Arc<Mutex<Server>>,
    serving: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl Fixture {
    pub fn new(world: &World) -> Fixture {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let server = Arc::new(Mutex::new(Server {
            configs: world.configs.iter().map(|c| serde_json::to_value(c).unwrap()).collect(),
            ..Server::default()
        }));
        let serving = {
            let server = server.clone();
            tokio::spawn(async move {
                while let Some((request, respond)) = handle.next_request().await {
                    let (parts, body) = request.into_parts();
                    let bytes = body.collect_bytes().await.expect("a request body");
                    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    let sent = Sent { method: parts.method, path: parts.uri.path().to_string(), body };
                    let (code, reply) = server.lock().unwrap().answer(sent);
                    let response = Response::builder().status(code).body(Body::from(reply.to_string().into_bytes()));
                    respond.send_response(response.unwrap());
                }
            })
        };
        let reporter = Reporter { controller: MANAGER.into(), instance: None };
        let ctx = Arc::new(Context {
            client: client.clone(),
            applier: crate::controller::expectations::Applier::default(),
            stores: world.stores(),
            recorder: Recorder::new(client, reporter),
            metrics: Arc::new(Metrics::default()),
            capabilities: crate::controller::capabilities::Capabilities::fixed(
                match &world.fence {
                    None => Ok(Default::default()),
                    Some(problem) => Err(problem.clone()),
                },
                world.allocator,
            ),
            taint_rules: world.taint_rules.as_ref().map(|_| crate::cluster::taint_rule::v1_resource()),
            memory: Default::default(),
            // The fixture's caches are filled before the reconcile runs.
            synced: tokio::sync::watch::channel(true).1,
        });
        Fixture { ctx, server, serving }
    }

    /// The next `times` requests whose `METHOD path` starts with `prefix` fail with `code`.
    pub fn fail(&self, prefix: &str, code: u16, message: &str, times: usize) {
        let failure = Failure { prefix: prefix.into(), code, message: message.into(), times };
        self.server.lock().unwrap().failures.push(failure);
    }

    /// A GET of `path` finds `object` (which the caches do not hold: someone else's, or ours not cached yet).
    pub fn store(&self, path: &str, object: Value) {
        self.server.lock().unwrap().stored.push((path.into(), object));
    }

    /// Every request so far, as `METHOD path`.
    pub fn lines(&self) -> Vec<String> {
        self.server.lock().unwrap().sent.iter().map(Sent::line).collect()
    }

    /// Every request so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.server.lock().unwrap().sent.clone()
    }

    /// Forgets the requests so far.
    pub fn clear(&self) {
        self.server.lock().unwrap().sent.clear();
    }

    /// Reasons of the events published so far.
    pub fn event_reasons(&self) -> Vec<String> {
        let sent = self.sent();
        let events = sent.iter().filter(|s| s.method == Method::POST && s.path.ends_with("/events"));
        events.map(|s| s.body["reason"].as_str().unwrap_or_default().to_string()).collect()
    }

    /// The last status this fixture's client wrote for a config.
    pub fn last_status(&self) -> Option<Value> {
        let sent = self.sent();
        sent.iter().rev().find(|s| s.path.ends_with("/status")).map(|s| s.body["status"].clone())
    }

    /// Runs one reconcile of `config`.
    pub async fn reconcile(
        &self,
        config: &NeuronDRAConfig,
    ) -> Result<kube::runtime::controller::Action, super::super::Error> {
        super::super::reconcile::reconcile(Arc::new(guarded(config.clone())), self.ctx.clone()).await
    }
}

impl Server {
    /// Records a request and answers it as an API server would: writes echo the object with a new
    /// resourceVersion, deletes and event writes succeed, config patches return the stored config.
    fn answer(&mut self, sent: Sent) -> (u16, Value) {
        let line = sent.line();
        self.sent.push(sent.clone());
        if let Some(failure) = self.failures.iter_mut().find(|f| f.times > 0 && line.starts_with(&f.prefix)) {
            failure.times -= 1;
            let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": failure.code,
                "message": failure.message, "reason": "Injected"});
            return (failure.code, status);
        }
        if sent.path.contains("/neurondraconfigs/") {
            let name = sent.path.split('/').nth(5).unwrap_or_default();
            let mut config = self.configs.iter().find(|c| c["metadata"]["name"] == name).cloned().unwrap_or(json!({}));
            if sent.path.ends_with("/status") {
                config["status"] = sent.body["status"].clone();
            }
            return (200, config);
        }
        match sent.method {
            Method::GET => match self.stored.iter().find(|(path, _)| *path == sent.path) {
                Some((_, object)) => (200, object.clone()),
                None => (
                    404,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 404,
                    "reason": "NotFound", "message": "not found"}),
                ),
            },
            Method::DELETE => (200, json!({"apiVersion": "v1", "kind": "Status", "status": "Success"})),
            Method::POST => (201, sent.body),
            _ => {
                let mut object = sent.body;
                object["metadata"]["resourceVersion"] = json!("2");
                (200, object)
            }
        }
    }
}

/// The EFA driver's DeviceClass as its chart installs it (not the operator's).
fn efa_class_metadata() -> kube::api::ObjectMeta {
    kube::api::ObjectMeta { name: Some(crate::logic::desired::EFA_DEVICE_CLASS.into()), ..Default::default() }
}
