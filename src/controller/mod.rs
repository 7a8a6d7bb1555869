//! controller: the kube-runtime controller for `NeuronDRAConfig`: its watch caches, the shared reconcile context and
//! the retry policy. One reconcile is `reconcile` (plan → operands → observe → status); `run` is in `runtime`.

pub mod act;
mod capabilities;
mod error;
mod events;
mod observe;
mod plan;
mod reconcile;
mod validations;
mod watch;

use watch::sampling::sampled;
use watch::{cached, cached_read, watch, without_errors};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::api::NeuronDRAConfig;
use crate::api::labels::{LABEL_CONFIG, LABEL_MANAGED_BY, MANAGER};
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView, trim_meta, trim_pod};
use crate::runtime::telemetry::{ConditionLabels, ConfigLabels, ErrorLabels, Metrics, Readiness, TemplateLabels};

pub use error::Error;
pub use reconcile::FINALIZER;

/// How long a trigger waits for more before its reconcile starts: long enough to fold the tail of a burst of
/// owned-object events (a pass's own writes coming back through the watches; those that arrive while the pass runs
/// are folded anyway) into one reconcile, short against the writes themselves: a new config waits for it twice.
const DEBOUNCE: Duration = Duration::from_millis(10);

/// Objects per list page for the kinds watched by the thousand. A page is parsed from one response held whole, a
/// few times over while it is read and decoded: 500 ResourceSlices (client-go's default page) are ~10 MB of JSON,
/// and that transient, not the cache, would set the peak memory of a cold start. Pages of 100 cost a fleet of
/// 10,000 nodes 80 more list requests per kind.
const LIST_PAGE: u32 = 100;

/// How often changes of the cluster-wide inputs may trigger a reconcile of every config (see `sampled`); longer
/// than the controller's debounce, so the reconcile runs between two triggers.
const INPUTS_SAMPLING: Duration = Duration::from_secs(1);

/// The controller's options of `neuron-dra-operator run`.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Configs reconciled at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,
    /// Only manage configs with these labels (for example `shard=a`); default: every config.
    #[arg(long)]
    pub config_selector: Option<String>,
    /// Reconcile on every watch event of nodes, slices, claims, plugin pods and namespaces, even those that change
    /// nothing the operator reads (the benchmark's "before" figure; never needed in production).
    #[arg(long, hide = true)]
    pub trigger_on_every_event: bool,
}

/// The config as watched: one that cannot be parsed is still delivered, as an error, and reported.
pub type GuardedConfig = DeserializeGuard<NeuronDRAConfig>;

/// Watch caches of everything the reconcile reads. Owned kinds are watched by the managed-by label only.
#[derive(Clone)]
pub struct Stores {
    pub configs: Store<GuardedConfig>,
    pub nodes: Store<NodeView>,
    /// Only labels and deletion are read: metadata alone.
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub daemon_sets: Store<DaemonSet>,
    pub templates: Store<ResourceClaimTemplate>,
    pub service_accounts: Store<ServiceAccount>,
    pub cluster_roles: Store<ClusterRole>,
    pub cluster_role_bindings: Store<ClusterRoleBinding>,
    pub admission_policies: Store<ValidatingAdmissionPolicy>,
    pub admission_policy_bindings: Store<ValidatingAdmissionPolicyBinding>,
    pub device_classes: Store<DeviceClass>,
    /// The Neuron driver's ResourceSlices, trimmed to what health and capacity read.
    pub slices: Store<SliceView>,
    /// The EFA driver's ResourceSlices, for capacity (EFA alignment).
    pub efa_slices: Store<SliceView>,
    /// Every ResourceClaim, trimmed to labels, allocated devices and consumers: what is in use, and by whom.
    pub claims: Store<ClaimView>,
    /// In the version the server serves; empty (and ready) where it serves none.
    pub taint_rules: Store<TaintRuleView>,
    /// The kubelet-plugin pods of every config.
    pub plugin_pods: Store<PodView>,
    /// The plugin DaemonSets' ControllerRevisions (their templates), for the rollout.
    pub revisions: Store<ControllerRevision>,
    /// Each cached config validated once per generation (for conflict checks between configs).
    pub validations: Arc<validations::Validations>,
}

impl Stores {
    /// Waits until every cache but the configs' has listed once, so a reconcile never mistakes "not loaded" for
    /// "absent". The configs' cache is the controller's own: its runner starts no reconcile before that cache is
    /// ready, and it waits on it itself. A store wakes only the latest of its waiters, so a second waiter on that
    /// cache here could sleep forever, and with it every reconcile.
    pub async fn wait_ready(&self) {
        let _ = futures::join!(
            self.nodes.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.daemon_sets.wait_until_ready(),
            self.templates.wait_until_ready(),
            self.service_accounts.wait_until_ready(),
            self.cluster_roles.wait_until_ready(),
            self.cluster_role_bindings.wait_until_ready(),
            self.admission_policies.wait_until_ready(),
            self.admission_policy_bindings.wait_until_ready(),
            self.device_classes.wait_until_ready(),
            self.slices.wait_until_ready(),
            self.efa_slices.wait_until_ready(),
            self.claims.wait_until_ready(),
            self.taint_rules.wait_until_ready(),
            self.plugin_pods.wait_until_ready(),
            self.revisions.wait_until_ready(),
        );
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// Server-side apply and delete, with the writes the cache has not shown yet.
    pub applier: crate::controller::act::apply::Applier,
    pub stores: Stores,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// What the API server supports beyond the base DRA API (probed on first need).
    pub capabilities: capabilities::Capabilities,
    /// The DeviceTaintRule version the server serves (found at start), for writing rules; None where it serves none.
    pub taint_rules: Option<kube::core::ApiResource>,
    /// What remediation remembers between reconciles.
    remediation: act::taint_rules::Memory,
    /// Consecutive failures per config, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Configs reported as unparseable, with the error: reported once, not on every event.
    unparseable: Mutex<HashMap<String, String>>,
    /// Unhealthy devices per config at the last reconcile, so events mark changes, not every reconcile.
    unhealthy_seen: Mutex<HashMap<String, std::collections::BTreeSet<(String, String)>>>,
    /// Claims on unhealthy devices per config at the last reconcile, likewise.
    in_use_seen: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// True once every cache has listed once (see `Context::synced`).
    synced: tokio::sync::watch::Receiver<bool>,
}

/// For `cached_read` of views, which are parsed trimmed (see `view`): what is left to drop is what only the watch
/// itself reads. The watcher has taken an object's resourceVersion (to resume from) before the cache sees it, and
/// nodes, slices and claims are never written by uid (`changes` then tells objects apart by name). Two strings
/// fewer per object, and two fewer in the cache's key, which copies them.
fn forget_versions<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.resource_version = None;
    meta.uid = None;
}

/// What the operator reads of each kind it watches by the thousand (see `view`), for `cached_read`.
mod reads {
    use super::watch::changes::fingerprint;
    use super::*;

    pub fn node(node: &NodeView) -> u64 {
        fingerprint(&(node.labels(), &node.status))
    }
    pub fn slice(slice: &SliceView) -> u64 {
        fingerprint(&(slice.labels(), &slice.spec))
    }
    pub fn claim(claim: &ClaimView) -> u64 {
        fingerprint(&(claim.labels(), &claim.status))
    }
    pub fn pod(pod: &PodView) -> u64 {
        fingerprint(&(pod.labels(), pod.metadata.deletion_timestamp.is_some(), &pod.spec, &pod.status))
    }
    pub fn namespace(namespace: &PartialObjectMeta<Namespace>) -> u64 {
        fingerprint(&(namespace.labels(), namespace.metadata.deletion_timestamp.is_some()))
    }
}

/// DeviceTaintRules in the most stable version the server serves (see `taint_rule`), or an empty, ready cache where
/// it serves none. Found once at start: a server upgrade that changes the version restarts the operator's pod anyway
/// (it runs on the upgraded nodes) or is picked up by the next restart.
async fn taint_rules_cache(
    client: &Client,
) -> (
    Store<TaintRuleView>,
    Option<impl Stream<Item = Result<TaintRuleView, watcher::Error>> + Send + use<>>,
    Option<kube::core::ApiResource>,
) {
    match crate::cluster::taint_rule::served(client).await {
        Some(resource) => {
            tracing::info!(version = %resource.api_version, "watching DeviceTaintRules");
            let api = Api::<TaintRuleView>::all_with(client.clone(), &resource);
            let writer = reflector::store::Writer::new(resource.clone());
            let store = writer.as_reader();
            // Owner references stay: remediation compares its own rules with what it wants.
            let trim = |rule: &mut TaintRuleView| rule.metadata.managed_fields = None;
            let events = watch(api, watcher::Config::default()).modify(trim);
            let touched = reflector::reflector(writer, events).touched_objects();
            (store, Some(without_errors(resource.kind.clone(), touched)), Some(resource))
        }
        None => {
            tracing::info!("the server serves no DeviceTaintRules: only slice taints count");
            let mut writer = reflector::store::Writer::new(crate::cluster::taint_rule::v1_resource());
            writer.apply_watcher_event(&watcher::Event::InitDone);
            (writer.as_reader(), None, None)
        }
    }
}

/// Maps an owned object to the config named in its label, if this operator manages that config (with
/// `--config-selector`, other operators' objects carry the label too).
fn owner_in<K: Resource>(
    configs: &Store<GuardedConfig>,
) -> impl Fn(K) -> Option<ObjectRef<GuardedConfig>> + Send + Sync + 'static {
    let configs = configs.clone();
    move |object| {
        let config = ObjectRef::new(object.labels().get(LABEL_CONFIG)?);
        configs.get(&config).map(|_| config)
    }
}

pub async fn run_controller(
    client: Client,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    args: &Options,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let managed = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    let configs_api: Api<GuardedConfig> = Api::all(client.clone());
    let config_watch = match &args.config_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    // The configs' own watch as every other (see `watches`): kube's `Controller::new` would leave its retries to the
    // controller's backoff of all triggers.
    let (configs, writer) = reflector::store();
    let applied = reflector::reflector(writer, watch(configs_api, config_watch)).applied_objects();
    let controller =
        Controller::for_stream(without_errors(NeuronDRAConfig::kind(&()).into_owned(), applied), configs.clone())
            .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrency).debounce(DEBOUNCE));

    // Nodes, slices, claims and plugin pods come by the thousand: cached as compact views (see `view`), and their
    // events trigger only when what is read of them changed (see `changes`).
    let every = args.trigger_on_every_event;
    let by_the_thousand = watcher::Config::default().page_size(LIST_PAGE);
    let (nodes, nodes_stream) =
        cached_read(Api::<NodeView>::all(client.clone()), by_the_thousand.clone(), forget_versions, reads::node, every);
    let (slices, slices_stream) = cached_read(
        Api::<SliceView>::all(client.clone()),
        by_the_thousand.clone().fields(&format!("spec.driver={}", crate::logic::build::NEURON_DRIVER)),
        forget_versions,
        reads::slice,
        every,
    );
    let (efa_slices, efa_slices_stream) = cached_read(
        Api::<SliceView>::all(client.clone()),
        by_the_thousand.clone().fields(&format!("spec.driver={}", crate::logic::build::EFA_DRIVER)),
        forget_versions,
        reads::slice,
        every,
    );
    let (claims, claims_stream) =
        cached_read(Api::<ClaimView>::all(client.clone()), by_the_thousand, forget_versions, reads::claim, every);
    let (plugin_pods, pods_stream) = cached_read(
        Api::<PodView>::all(client.clone()),
        managed.clone().page_size(LIST_PAGE),
        trim_pod,
        reads::pod,
        every,
    );
    let (taint_rules, rules_stream, taint_rule_resource) = taint_rules_cache(&client).await;
    let (namespaces, namespaces_stream) = cached_read(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
        trim_meta,
        reads::namespace,
        every,
    );
    let (daemon_sets, ds_stream) = cached(Api::<DaemonSet>::all(client.clone()), managed.clone());
    let (templates, templates_stream) = cached(Api::<ResourceClaimTemplate>::all(client.clone()), managed.clone());
    let (service_accounts, sa_stream) = cached(Api::<ServiceAccount>::all(client.clone()), managed.clone());
    let (cluster_roles, cr_stream) = cached(Api::<ClusterRole>::all(client.clone()), managed.clone());
    let (cluster_role_bindings, crb_stream) = cached(Api::<ClusterRoleBinding>::all(client.clone()), managed.clone());
    let (admission_policies, vap_stream) =
        cached(Api::<ValidatingAdmissionPolicy>::all(client.clone()), managed.clone());
    let (admission_policy_bindings, vapb_stream) =
        cached(Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()), managed.clone());
    let (device_classes, dc_stream) = cached(Api::<DeviceClass>::all(client.clone()), managed.clone());
    // The DaemonSet controller copies the pod template's labels (managed-by included) onto its revisions.
    let (revisions, revisions_stream) = cached(Api::<ControllerRevision>::all(client.clone()), managed.clone());

    let stores = Stores {
        configs: configs.clone(),
        nodes,
        namespaces,
        daemon_sets,
        templates,
        service_accounts,
        cluster_roles,
        cluster_role_bindings,
        admission_policies,
        admission_policy_bindings,
        device_classes,
        slices,
        efa_slices,
        claims,
        taint_rules,
        plugin_pods,
        revisions,
        validations: Default::default(),
    };
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let reporter = Reporter { controller: MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    let context = Arc::new(Context {
        client: client.clone(),
        applier: crate::controller::act::apply::Applier::default(),
        stores: stores.clone(),
        recorder: Recorder::new(client, reporter),
        metrics,
        capabilities: Default::default(),
        taint_rules: taint_rule_resource,
        remediation: Default::default(),
        failures: Mutex::default(),
        unparseable: Mutex::default(),
        unhealthy_seen: Mutex::default(),
        in_use_seen: Mutex::default(),
        synced: synced_rx,
    });

    // Inputs every config reads (cluster-wide), merged into one trigger for all configs and sampled: a busy
    // cluster's stream of claim, slice and node changes cannot keep postponing a debounced reconcile.
    let mut inputs = vec![
        dc_stream.map(|_| ()).boxed(),
        namespaces_stream.map(|_| ()).boxed(),
        nodes_stream.map(|_| ()).boxed(),
        slices_stream.map(|_| ()).boxed(),
        efa_slices_stream.map(|_| ()).boxed(),
        claims_stream.map(|_| ()).boxed(),
    ];
    inputs.extend(rules_stream.map(|stream| stream.map(|_| ()).boxed()));
    let controller = controller
        .watches_stream(ds_stream, owner_in(&configs))
        .watches_stream(templates_stream, owner_in(&configs))
        .watches_stream(sa_stream, owner_in(&configs))
        .watches_stream(cr_stream, owner_in(&configs))
        .watches_stream(crb_stream, owner_in(&configs))
        .watches_stream(vap_stream, owner_in(&configs))
        .watches_stream(vapb_stream, owner_in(&configs))
        .watches_stream(watch::changes::changed_objects(pods_stream), owner_in(&configs))
        .watches_stream(revisions_stream, owner_in(&configs))
        .reconcile_all_on(sampled(futures::stream::select_all(inputs), INPUTS_SAMPLING))
        .graceful_shutdown_on(stop);

    // The one waiter on the caches' readiness: a store's ready signal wakes only its latest waiter, so concurrent
    // reconciles waiting on it directly could wait forever. Reconciles wait on `synced` instead.
    let ready_stores = stores.clone();
    tokio::spawn(async move {
        ready_stores.wait_ready().await;
        let _ = synced_tx.send(true);
        readiness.set(true);
        tracing::info!("caches synced");
    });

    controller
        .run(reconcile::reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((config, _)) => tracing::debug!(config = %config.name, "reconciled"),
                Err(error) => tracing::debug!(%error, "reconcile did not complete"),
            }
        })
        .await;
}

/// Transient errors retry with per-config exponential backoff (1 s doubling to 5 min).
fn error_policy(config: Arc<GuardedConfig>, error: &Error, ctx: Arc<Context>) -> Action {
    let name = config.name_any();
    let category = error.category();
    let categories: std::collections::BTreeSet<&str> = error.failures().into_iter().map(|(c, _)| c).collect();
    for category in categories {
        ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { category: category.into() }).inc();
    }
    let failures = {
        let mut failures = ctx.failures.lock().expect("not poisoned");
        let count = failures.entry(name.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let delay = backoff(failures);
    tracing::warn!(config = %name, %error, category, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The delay before retry number `failures`: 1 s doubling to 5 min.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.clamp(1, 10).saturating_sub(1)).min(Duration::from_secs(300))
}

impl Context {
    /// Waits until every cache has listed once, so a reconcile never mistakes "not loaded" for "absent".
    async fn synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|ready| *ready).await;
    }

    fn reset_failures(&self, name: &str) {
        self.failures.lock().expect("not poisoned").remove(name);
    }

    /// Whether this exact parse error was already reported for this config.
    fn already_reported(&self, name: &str, error: &str) -> bool {
        self.unparseable.lock().expect("not poisoned").get(name).map(String::as_str) == Some(error)
    }

    /// Remembers a parse error once its status is written, so it is reported once, not on every event.
    fn reported_unparseable(&self, name: &str, error: &str) {
        self.unparseable.lock().expect("not poisoned").insert(name.to_string(), error.to_string());
    }

    /// Drops everything kept about a config that is gone: its metric series and its entries here.
    fn forget(&self, config: &NeuronDRAConfig) {
        let name = config.name_any();
        self.failures.lock().expect("not poisoned").remove(&name);
        self.unparseable.lock().expect("not poisoned").remove(&name);
        self.unhealthy_seen.lock().expect("not poisoned").remove(&name);
        self.in_use_seen.lock().expect("not poisoned").remove(&name);
        self.remediation.forget(&name);
        self.applier.expectations.forget(&reconcile::config_key(&name));
        if let Some(uid) = config.metadata.uid.as_deref() {
            self.stores.validations.forget(uid);
        }
        let labels = ConfigLabels { config: name.clone() };
        let metrics = &self.metrics;
        metrics.reconciles.remove(&labels);
        for gauge in [
            &metrics.managed_objects,
            &metrics.nodes,
            &metrics.devices,
            &metrics.unhealthy_devices,
            &metrics.driver_desired_nodes,
            &metrics.driver_ready_nodes,
            &metrics.driver_updated_nodes,
            &metrics.driver_rollout_halted,
            &metrics.templates,
            &metrics.remediation_failing_nodes,
            &metrics.remediated_nodes,
            &metrics.remediation_held_back_nodes,
        ] {
            gauge.remove(&labels);
        }
        for type_ in crate::logic::status::ConditionType::ALL {
            metrics.condition.remove(&ConditionLabels { config: name.clone(), condition: type_.as_str().into() });
        }
        for claim in crate::logic::validate::validate(config).map(|v| v.claims).unwrap_or_default() {
            let labels = TemplateLabels { config: name.clone(), profile: claim.profile, template: claim.template };
            metrics.template_available.remove(&labels);
            metrics.template_allocated.remove(&labels);
        }
    }

    fn parsed_again(&self, name: &str) {
        self.unparseable.lock().expect("not poisoned").remove(name);
    }
}

#[cfg(test)]
mod tests;
