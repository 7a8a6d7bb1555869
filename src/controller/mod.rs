//! controller: the kube-runtime controller for `NeuronDRAConfig` (`run_controller`): its watch caches, the shared
//! reconcile context and the retry policy. One reconcile is `reconcile` (snapshot → plan → act → status and events);
//! the `run` command around the controller (client, servers, leader election) is `crate::run`.

#[macro_use]
pub mod kinds;
pub mod act;
mod capabilities;
mod context;
mod error;
mod expectations;
mod pure;
mod reconcile;
mod stores;
mod validations;
mod watch;

use watch::reads::{forget_versions, per_kind as reads, taint_rules_cache};
use watch::sampling::sampled;
use watch::{cached, cached_read, watch, without_errors};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::api::Api;
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::api::NeuronDRAConfig;
use crate::api::labels::{LABEL_CONFIG, LABEL_MANAGED_BY, MANAGER};
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView, trim_meta, trim_pod};
use crate::runtime::telemetry::{ErrorLabels, Metrics, Readiness};

pub use act::config::FINALIZER;
pub use context::Context;
pub use error::Error;
pub use stores::{GuardedConfig, Stores};

use expectations::Applier;
use pure::failure::Category;

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

/// What a reconcile reads of a config beyond its status: a change of anything else triggers one. Its own status write
/// comes back through the watch and triggers nothing: with a fleet's nodes to walk, that second reconcile per input
/// event doubled the work (the 100,000-node benchmark found it). The store still takes every version, and a config
/// created again under its name (a new uid) always passes.
fn what_a_reconcile_reads() -> impl Predicate<GuardedConfig> {
    let deleting = |config: &GuardedConfig| Some(u64::from(config.meta().deletion_timestamp.is_some()));
    predicates::generation
        .combine(predicates::labels)
        .combine(predicates::annotations)
        .combine(predicates::finalizers)
        .combine(deleting)
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

/// Maps a plugin pod to its config, but only from that config's driver namespace: any tenant who may create pods can
/// copy the plugin's labels onto its own, and those must never trigger a reconcile (nor are they counted:
/// `Snapshot::plugin_pods_of` goes by the DaemonSet's uid).
fn plugin_pod_owner(
    configs: &Store<GuardedConfig>,
) -> impl Fn(PodView) -> Option<ObjectRef<GuardedConfig>> + Send + Sync + 'static {
    let configs = configs.clone();
    move |pod| {
        let config = ObjectRef::new(pod.labels().get(LABEL_CONFIG)?);
        let stored = configs.get(&config)?;
        let driver_namespace = &stored.0.as_ref().ok()?.spec.driver.namespace;
        (pod.namespace().as_ref() == Some(driver_namespace)).then_some(config)
    }
}

macro_rules! owned_watches {
    ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
        /// Watches every owned kind (`kinds.rs`) by the managed-by label: the caches, the reconciles their changes
        /// trigger (the config their label names), and the changes that trigger every config (shared objects).
        fn watch_owned(
            client: &Client,
            managed: &watcher::Config,
            configs: &Store<GuardedConfig>,
        ) -> (stores::Owned, Vec<BoxStream<'static, ObjectRef<GuardedConfig>>>, Vec<BoxStream<'static, ()>>) {
            let (mut owners, mut all) = (Vec::new(), Vec::new());
            $(
                let ($store, stream) = cached(Api::<$ty>::all(client.clone()), managed.clone());
                match kinds::Trigger::$trigger {
                    kinds::Trigger::Owner => {
                        let owner = owner_in::<$ty>(configs);
                        owners.push(stream.filter_map(move |o| futures::future::ready(o.ok().and_then(&owner))).boxed());
                    }
                    kinds::Trigger::All => all.push(stream.map(|_| ()).boxed()),
                }
            )*
            (stores::Owned { $($store,)* }, owners, all)
        }
    };
}
owned_kinds!(owned_watches);

/// Runs the controller until `stop`: the configs' watch and every cache, the triggers that wire them to reconciles,
/// and the context the reconciles share.
pub async fn run_controller(
    client: Client,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    args: &Options,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let managed = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    let (configs, controller) = config_controller(&client, args);
    let every = args.trigger_on_every_event;
    let cluster = watch_cluster_inputs(&client, every).await;
    // Plugin pods come by the thousand too, but each triggers only its config (see `plugin_pod_owner`).
    let plugin_pods_watch = managed.clone().page_size(LIST_PAGE);
    let (plugin_pods, pods_stream) =
        cached_read(Api::<PodView>::all(client.clone()), plugin_pods_watch, trim_pod, reads::pod, every);
    let (owned, owned_streams, shared_streams) = watch_owned(&client, &managed, &configs);
    // The DaemonSet controller copies the pod template's labels (managed-by included) onto its revisions.
    let (revisions, revisions_stream) = cached(Api::<ControllerRevision>::all(client.clone()), managed.clone());

    let stores = Stores {
        configs: configs.clone(),
        nodes: cluster.nodes,
        namespaces: cluster.namespaces,
        owned,
        every_device_class: cluster.every_device_class,
        slices: cluster.slices,
        efa_slices: cluster.efa_slices,
        claims: cluster.claims,
        taint_rules: cluster.taint_rules,
        plugin_pods,
        revisions,
        validations: Default::default(),
    };
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let context = Arc::new(context(client, stores.clone(), metrics, cluster.taint_rule_resource, synced_rx));

    // Inputs every config reads (cluster-wide), merged into one trigger for all configs and sampled: a busy
    // cluster's stream of claim, slice and node changes cannot keep postponing a debounced reconcile.
    let inputs = shared_streams.into_iter().chain(cluster.changes);
    let controller = controller
        .reconcile_on(futures::stream::select_all(owned_streams))
        .watches_stream(watch::changes::changed_objects(pods_stream), plugin_pod_owner(&configs))
        .watches_stream(revisions_stream, owner_in(&configs))
        .reconcile_all_on(sampled(futures::stream::select_all(inputs), INPUTS_SAMPLING))
        .graceful_shutdown_on(stop);
    signal_when_synced(stores, synced_tx, readiness);

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

/// The controller of the configs this operator manages (all, or those `--config-selector` selects), and their
/// cache. Their watch is as every other (see `watch`): kube's `Controller::new` would leave its retries to the
/// controller's backoff of all triggers.
fn config_controller(client: &Client, args: &Options) -> (Store<GuardedConfig>, Controller<GuardedConfig>) {
    let config_watch = match &args.config_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let (configs, writer) = reflector::store();
    let applied = reflector::reflector(writer, watch(Api::<GuardedConfig>::all(client.clone()), config_watch))
        .applied_objects()
        .predicate_filter(what_a_reconcile_reads(), Default::default());
    let controller =
        Controller::for_stream(without_errors(NeuronDRAConfig::kind(&()).into_owned(), applied), configs.clone())
            .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrency).debounce(DEBOUNCE));
    (configs, controller)
}

/// The caches of what every config reads cluster-wide, and their changes: each triggers every config.
struct ClusterInputs {
    nodes: Store<NodeView>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Every DeviceClass, the operator's or not: another tool's under a name the templates use changes their
    /// shape (`plan::own_classes`).
    every_device_class: Store<PartialObjectMeta<DeviceClass>>,
    slices: Store<SliceView>,
    efa_slices: Store<SliceView>,
    claims: Store<ClaimView>,
    taint_rules: Store<TaintRuleView>,
    /// The DeviceTaintRule version the server serves; None where it serves none.
    taint_rule_resource: Option<ApiResource>,
    changes: Vec<BoxStream<'static, ()>>,
}

/// Nodes, slices and claims come by the thousand: cached as compact views (see `view`), and their events trigger
/// only when what is read of them changed (see `changes`); `every` triggers on every event.
async fn watch_cluster_inputs(client: &Client, every: bool) -> ClusterInputs {
    let by_the_thousand = watcher::Config::default().page_size(LIST_PAGE);
    let of_driver = |driver: &str| by_the_thousand.clone().fields(&format!("spec.driver={driver}"));
    let (nodes, nodes_stream) =
        cached_read(Api::<NodeView>::all(client.clone()), by_the_thousand.clone(), forget_versions, reads::node, every);
    let (slices, slices_stream) = cached_read(
        Api::<SliceView>::all(client.clone()),
        of_driver(crate::logic::desired::NEURON_DRIVER),
        forget_versions,
        reads::slice,
        every,
    );
    let (efa_slices, efa_slices_stream) = cached_read(
        Api::<SliceView>::all(client.clone()),
        of_driver(crate::logic::desired::EFA_DRIVER),
        forget_versions,
        reads::slice,
        every,
    );
    let (claims, claims_stream) =
        cached_read(Api::<ClaimView>::all(client.clone()), by_the_thousand, forget_versions, reads::claim, every);
    let (taint_rules, rules_stream, taint_rule_resource) = taint_rules_cache(client).await;
    let (namespaces, namespaces_stream) = cached_read(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
        trim_meta,
        reads::namespace,
        every,
    );
    let (every_device_class, device_classes_stream) = cached_read(
        Api::<PartialObjectMeta<DeviceClass>>::all(client.clone()),
        watcher::Config::default(),
        trim_meta,
        reads::device_class,
        every,
    );
    let mut changes = vec![
        namespaces_stream.map(|_| ()).boxed(),
        device_classes_stream.map(|_| ()).boxed(),
        nodes_stream.map(|_| ()).boxed(),
        slices_stream.map(|_| ()).boxed(),
        efa_slices_stream.map(|_| ()).boxed(),
        claims_stream.map(|_| ()).boxed(),
    ];
    changes.extend(rules_stream.map(|stream| stream.map(|_| ()).boxed()));
    ClusterInputs {
        nodes,
        namespaces,
        every_device_class,
        slices,
        efa_slices,
        claims,
        taint_rules,
        taint_rule_resource,
        changes,
    }
}

/// What every reconcile shares, with nothing remembered yet.
fn context(
    client: Client,
    stores: Stores,
    metrics: Arc<Metrics>,
    taint_rules: Option<ApiResource>,
    synced: tokio::sync::watch::Receiver<bool>,
) -> Context {
    let reporter = Reporter { controller: MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    Context {
        client: client.clone(),
        applier: Applier::default(),
        stores,
        recorder: Recorder::new(client, reporter),
        metrics,
        capabilities: Default::default(),
        taint_rules,
        memory: Mutex::default(),
        synced,
    }
}

/// The one waiter on the caches' readiness: a store's ready signal wakes only its latest waiter, so concurrent
/// reconciles waiting on it directly could wait forever. Reconciles wait on `synced` instead.
fn signal_when_synced(stores: Stores, synced: tokio::sync::watch::Sender<bool>, readiness: Readiness) {
    tokio::spawn(async move {
        stores.wait_ready().await;
        let _ = synced.send(true);
        readiness.set(true);
        tracing::info!("caches synced");
    });
}

/// Serves every series of the reconcile's error counter at 0 from the start (see `Category::ALL`).
pub fn count_errors_from_zero(metrics: &Metrics) {
    for category in Category::ALL {
        let _ = metrics.reconcile_errors.get_or_create(&ErrorLabels { category: category.as_str().into() });
    }
}

/// Transient errors retry with per-config exponential backoff (1 s doubling to 5 min).
fn error_policy(config: Arc<GuardedConfig>, error: &Error, ctx: Arc<Context>) -> Action {
    let name = config.name_any();
    let category = error.category().as_str();
    let categories: std::collections::BTreeSet<&str> = error.failures().into_iter().map(|(c, _)| c.as_str()).collect();
    for category in categories {
        ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { category: category.into() }).inc();
    }
    let failures = ctx.failed_again(&name);
    let delay = backoff(failures);
    tracing::warn!(config = %name, %error, category, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The delay before retry number `failures`: 1 s doubling to 5 min.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.clamp(1, 10).saturating_sub(1)).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests;
