//! One reconcile of one config: observe (caches) → validate → build → apply → status.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::api::{Api, Patch, PatchParams};
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, GuardedConfig};
use crate::api::{DriverStatus, NeuronDRAConfig, NeuronDRAConfigStatus, ProfileStatus};
use crate::apply::{ApplyError, Outcome, shared_manager};
use crate::build::{self, ANNOTATION_SPEC_HASH, Desired, LABEL_CONFIG, MANAGER};
use crate::conflict::{self, Claimant, Conflicts};
use crate::health;
use crate::nodes;
use crate::status::{self, Observation, Rollout, Validity};
use crate::telemetry::{ConfigLabels, seconds};
use crate::validate::{ValidatedConfig, validate};
use crate::view::{PodView, SliceView};

pub const FINALIZER: &str = "neurondra.io/cleanup";

pub async fn reconcile(config: Arc<GuardedConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.stores.wait_ready().await;
    let started = Instant::now();
    let name = config.name_any();
    ctx.metrics.reconciles.get_or_create(&ConfigLabels { config: name.clone() }).inc();

    if config.0.is_ok() {
        ctx.parsed_again(&name);
    }
    let result = match &config.0 {
        Err(invalid) => report_unparseable(&name, invalid, &ctx).await,
        Ok(parsed) if parsed.spec.paused && parsed.meta().deletion_timestamp.is_none() => {
            // Paused: no writes but the status, not even the finalizer.
            apply(parsed, &ctx).await
        }
        Ok(parsed) => {
            let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
            finalizer(&api, FINALIZER, Arc::new(parsed.clone()), |event| async {
                match event {
                    FinalizerEvent::Apply(config) => apply(&config, &ctx).await,
                    FinalizerEvent::Cleanup(config) => cleanup(&config, &ctx).await,
                }
            })
            .await
            .map_err(|e| Error::Finalizer(Box::new(e)))
        }
    };

    ctx.metrics.reconcile_duration.observe(seconds(started.elapsed()));
    match &result {
        Ok(_) => ctx.reset_failures(&name),
        Err(error) => {
            let reference = ObjectRef::<NeuronDRAConfig>::new(&name).into();
            publish(&ctx, &reference, EventType::Warning, error.category(), "Reconcile", error.to_string()).await;
        }
    }
    result
}

async fn publish(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
    if let Err(error) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!(%error, reason, "publishing an event");
    }
}

/// A config the API server stored but this build cannot parse: reported, never retried in a loop.
async fn report_unparseable(name: &str, invalid: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    if !ctx.first_report_of(name, &invalid.error) {
        // Our own status write brings it back here; report once per distinct error.
        return Ok(Action::await_change());
    }
    tracing::warn!(config = name, error = %invalid.error, "cannot parse config");
    let condition = json!({
        "type": status::CONFIG_VALID, "status": "False", "reason": "Unparseable",
        "message": format!("the operator cannot read this object: {}", invalid.error),
        "lastTransitionTime": status::now().to_string(),
    });
    let patch = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "status": {"phase": "Degraded", "conditions": [condition]},
    });
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await.map_err(Error::Status)?;
    let reference = ObjectRef::<NeuronDRAConfig>::new(name).into();
    publish(ctx, &reference, EventType::Warning, "Unparseable", "Validate", invalid.error.clone()).await;
    Ok(Action::await_change())
}

/// The templates' target namespaces: the explicit list (those that exist) and every namespace the selector matches;
/// terminating namespaces are left out. Also returns the explicit namespaces that do not exist.
fn target_namespaces(config: &ValidatedConfig, namespaces: &Store<Namespace>) -> (Vec<String>, Vec<String>) {
    let active = |ns: &Namespace| !terminating(ns);
    let mut targets = BTreeSet::new();
    let mut missing = Vec::new();
    for name in &config.spec.templates.namespaces {
        match namespaces.get(&ObjectRef::new(name)) {
            Some(ns) if active(&ns) => {
                targets.insert(name.clone());
            }
            Some(_) => {}
            None => missing.push(name.clone()),
        }
    }
    if let Some(selector) = &config.spec.templates.namespace_selector {
        for ns in namespaces.state() {
            if active(&ns) && nodes::selector_matches(Some(selector), ns.labels()) {
                targets.insert(ns.name_any());
            }
        }
    }
    (targets.into_iter().collect(), missing)
}

/// What a config asks of the cluster, for conflict checks against the others.
fn claimant(config: &NeuronDRAConfig, validated: &ValidatedConfig, ctx: &Context) -> Claimant {
    let (namespaces, _) = target_namespaces(validated, &ctx.stores.namespaces);
    let filter = nodes::NodeFilter::new(&validated.spec);
    let nodes = ctx
        .stores
        .nodes
        .state()
        .iter()
        .filter(|node| filter.selects(node.labels()))
        .map(|node| node.name_any())
        .collect();
    let templates = namespaces
        .iter()
        .flat_map(|ns| validated.claims.iter().map(move |c| (ns.clone(), c.template.clone())))
        .collect();
    let created = config.meta().creation_timestamp.as_ref().map_or(i64::MAX, |t| t.0.as_second());
    Claimant { name: validated.name.clone(), created: (created, validated.name.clone()), nodes, templates }
}

/// Conflicts with older configs that are valid and not being deleted.
fn conflicts_of(config: &NeuronDRAConfig, validated: &ValidatedConfig, ctx: &Context) -> Conflicts {
    let others: Vec<Claimant> = ctx
        .stores
        .configs
        .state()
        .iter()
        .filter_map(|guard| guard.0.as_ref().ok())
        .filter(|other| other.name_any() != validated.name && other.meta().deletion_timestamp.is_none())
        .filter_map(|other| validate(other).ok().map(|v| claimant(other, &v, ctx)))
        .collect();
    conflict::find_conflicts(&claimant(config, validated, ctx), &others)
}

/// What one reconcile did, for events and the status.
#[derive(Default)]
struct Report {
    created: Vec<String>,
    updated: Vec<String>,
    replaced: Vec<String>,
    deleted: Vec<String>,
    errors: Vec<ApplyError>,
    /// (namespace/name) of desired templates now in place.
    templates_in_place: BTreeSet<String>,
    /// Some earlier write has not reached the cache yet: look again shortly.
    pending: bool,
    /// The driver namespace is being deleted: the plugin waits until it can be created again.
    driver_namespace_terminating: bool,
}

impl Report {
    fn record(&mut self, what: String, outcome: Result<Outcome, ApplyError>) -> bool {
        match outcome {
            Ok(Outcome::Created) => self.created.push(what),
            Ok(Outcome::Updated) => self.updated.push(what),
            Ok(Outcome::Unchanged) => {}
            Ok(Outcome::Pending) => self.pending = true,
            Err(error) => {
                self.errors.push(error);
                return false;
            }
        }
        true
    }

    fn record_delete(&mut self, what: String, outcome: Result<bool, ApplyError>) {
        match outcome {
            Ok(true) => self.deleted.push(what),
            Ok(false) => self.pending = true,
            Err(error) => self.errors.push(error),
        }
    }
}

fn cached<K>(store: &Store<K>, name: &str, namespace: Option<&str>) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let reference = ObjectRef::new(name);
    store.get(&match namespace {
        Some(ns) => reference.within(ns),
        None => reference,
    })
}

fn key<K: Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

fn kind_key<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!("{} {}", K::kind(&()), key(object))
}

async fn apply(config: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    let name = config.name_any();
    let reference = config.object_ref(&());
    let previous = config.status.as_ref();
    let validated = match validate(config) {
        Ok(validated) => validated,
        Err(invalid) => {
            let message = invalid.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
            let observation = Observation {
                generation: config.meta().generation,
                paused: config.spec.paused,
                validity: Validity::Invalid { reason: "InvalidSpec", message: message.clone() },
                rollout: Rollout::NotApplied("the spec is invalid".into()),
                templates_present: 0,
                templates_wanted: 0,
                template_namespaces: 0,
                profiles: Vec::new(),
                templates_missing: Vec::new(),
                health: None,
                capacity: Vec::new(),
            };
            if condition_reason(previous, status::CONFIG_VALID) != Some("InvalidSpec") {
                publish(ctx, &reference, EventType::Warning, "InvalidSpec", "Validate", message).await;
            }
            write_status(config, &observation, ctx).await?;
            // Permanent until the spec changes: no requeue.
            return Ok(Action::await_change());
        }
    };

    let (namespaces, missing_namespaces) = target_namespaces(&validated, &ctx.stores.namespaces);
    let conflicts = conflicts_of(config, &validated, ctx);
    let mut desired = build::build(&validated, &namespaces);
    desired.templates.retain(|t| !conflicts.templates.contains_key(&(t.namespace().unwrap_or_default(), t.name_any())));
    let daemon_set_wanted = conflicts.nodes.is_empty();

    let mut report = Report::default();
    if !config.spec.paused {
        apply_desired(&validated, &desired, daemon_set_wanted, ctx, &mut report).await;
        delete_orphans(&validated, &desired, daemon_set_wanted, ctx, &mut report).await;
        publish_changes(ctx, &reference, &report).await;
    } else {
        // Paused: judge what is there without touching it.
        for template in &desired.templates {
            let existing = cached(&ctx.stores.templates, &template.name_any(), template.namespace().as_deref());
            if existing.is_some_and(|e| spec_hash(&e) == spec_hash(template)) {
                report.templates_in_place.insert(key(template));
            }
        }
    }

    let validity = if conflicts.is_empty() { Validity::Valid } else { Validity::Conflict(conflicts.message()) };
    if let Validity::Conflict(message) = &validity
        && condition_reason(previous, status::CONFIG_VALID) != Some("Conflict")
    {
        publish(ctx, &reference, EventType::Warning, "Conflict", "Apply", message.clone()).await;
    }
    let mut observation = observe(
        config,
        &validated,
        &desired,
        &namespaces,
        &missing_namespaces,
        daemon_set_wanted,
        validity,
        &report,
        ctx,
    );
    let assessment = assess_health(&validated, daemon_set_wanted, ctx);
    health_events(ctx, &reference, previous, &assessment).await;
    observation.capacity = assess_capacity(&validated, ctx);
    ctx.metrics.record_capacity(&name, &validated, &observation.capacity);
    let labels = ConfigLabels { config: name.clone() };
    let summary = &assessment.health.summary;
    ctx.metrics.nodes.get_or_create(&labels).set(summary.nodes);
    ctx.metrics.devices.get_or_create(&labels).set(summary.total);
    ctx.metrics.unhealthy_devices.get_or_create(&labels).set(summary.unhealthy);
    observation.health = Some(assessment.health);
    ctx.metrics
        .managed_objects
        .get_or_create(&ConfigLabels { config: name.clone() })
        .set((report.templates_in_place.len() + 6) as i64);
    write_status(config, &observation, ctx).await?;

    match report.errors.into_iter().next() {
        Some(error) => Err(error.into()),
        // Our own writes (or a namespace's deletion) will show up in the cache in a moment; check then.
        None if report.pending || report.driver_namespace_terminating => {
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        }
        None => Ok(Action::await_change()),
    }
}

fn condition_reason<'a>(status: Option<&'a NeuronDRAConfigStatus>, type_: &str) -> Option<&'a str> {
    status?.conditions.iter().find(|c| c.type_ == type_).map(|c| c.reason.as_str())
}

fn spec_hash(template: &ResourceClaimTemplate) -> Option<&String> {
    template.annotations().get(ANNOTATION_SPEC_HASH)
}

/// The API to write an object of a kind through: in its namespace for namespaced kinds, cluster-wide otherwise.
trait ApiFor: Resource<DynamicType = ()> + Sized {
    fn api(client: &kube::Client, namespace: Option<&str>) -> Api<Self>;
}

macro_rules! api_for {
    (namespaced: $($namespaced:ty),*; cluster: $($cluster:ty),*) => {
        $(impl ApiFor for $namespaced {
            fn api(client: &kube::Client, namespace: Option<&str>) -> Api<Self> {
                Api::namespaced(client.clone(), namespace.unwrap_or_default())
            }
        })*
        $(impl ApiFor for $cluster {
            fn api(client: &kube::Client, _: Option<&str>) -> Api<Self> {
                Api::all(client.clone())
            }
        })*
    };
}

api_for!(namespaced: ServiceAccount, DaemonSet, ResourceClaimTemplate; cluster: Namespace, ClusterRole, ClusterRoleBinding, DeviceClass);

fn api_for<K: ApiFor>(client: &kube::Client, object: &K) -> Api<K> {
    K::api(client, object.meta().namespace.as_deref())
}

/// Applies one object unless its cached copy already holds it, and records what happened.
async fn ensure_cached<K>(ctx: &Context, report: &mut Report, store: &Store<K>, desired: &K, manager: &str)
where
    K: ApiFor + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + 'static,
{
    let existing = cached(store, &desired.name_any(), desired.meta().namespace.as_deref());
    let outcome = ctx.applier.ensure(&api_for(&ctx.client, desired), desired, existing.as_deref(), manager).await;
    match outcome {
        // The cache had not shown the namespace's deletion yet: wait for it like the cache-driven path does.
        Err(error) if namespace_terminating(&error) => report.driver_namespace_terminating = true,
        outcome => {
            report.record(kind_key(desired), outcome);
        }
    }
}

/// The namespace is being deleted, or already gone while the cache still shows it.
fn namespace_terminating(error: &ApplyError) -> bool {
    match error.source_error() {
        kube::Error::Api(status) if status.code == 403 => status.message.contains("is being terminated"),
        kube::Error::Api(status) if status.code == 404 => {
            status.details.as_ref().is_some_and(|d| d.kind == "namespaces")
        }
        _ => false,
    }
}

/// Applies in a fixed order: Namespace, ServiceAccount, RBAC, DeviceClass, DaemonSet, templates.
async fn apply_desired(
    validated: &ValidatedConfig,
    desired: &Desired,
    daemon_set_wanted: bool,
    ctx: &Context,
    report: &mut Report,
) {
    let stores = &ctx.stores;
    // An existing namespace is used as it is: the operator only creates a missing one. One still terminating
    // (deleted by hand) cannot take new objects: wait for it to go, then create it anew.
    match stores.namespaces.get(&ObjectRef::new(&validated.spec.driver.namespace)) {
        None => ensure_cached(ctx, report, &stores.namespaces, &desired.namespace, MANAGER).await,
        Some(ns) if terminating(&ns) => report.driver_namespace_terminating = true,
        Some(_) => {}
    }
    if !report.driver_namespace_terminating {
        ensure_cached(ctx, report, &stores.service_accounts, &desired.service_account, MANAGER).await;
    }
    ensure_cached(ctx, report, &stores.cluster_roles, &desired.cluster_role, MANAGER).await;
    ensure_cached(ctx, report, &stores.cluster_role_bindings, &desired.cluster_role_binding, MANAGER).await;
    let shared = shared_manager(&validated.name);
    ensure_cached(ctx, report, &stores.device_classes, &desired.device_class, &shared).await;
    if daemon_set_wanted && !report.driver_namespace_terminating {
        ensure_cached(ctx, report, &stores.daemon_sets, &desired.daemon_set, MANAGER).await;
    }
    apply_templates(&desired.templates, ctx, report).await;
}

fn terminating(namespace: &Namespace) -> bool {
    namespace.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// Templates in parallel (bounded); a template whose spec changed is deleted and created again (its spec is
/// immutable).
async fn apply_templates(templates: &[ResourceClaimTemplate], ctx: &Context, report: &mut Report) {
    use futures::StreamExt;
    const PARALLEL: usize = 16;
    let outcomes: Vec<(String, bool, Result<Outcome, ApplyError>)> = futures::stream::iter(templates.iter().cloned())
        .map(|template| apply_template(template, ctx))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    for (what, replaced, outcome) in outcomes {
        let ok = match outcome {
            Ok(Outcome::Created) if replaced => {
                report.replaced.push(format!("ResourceClaimTemplate {what}"));
                true
            }
            outcome => report.record(format!("ResourceClaimTemplate {what}"), outcome),
        };
        if ok {
            report.templates_in_place.insert(what);
        }
    }
}

/// One template: (namespace/name, whether it was replaced, outcome).
async fn apply_template(template: ResourceClaimTemplate, ctx: &Context) -> (String, bool, Result<Outcome, ApplyError>) {
    let ns = template.namespace().unwrap_or_default();
    let api = Api::<ResourceClaimTemplate>::namespaced(ctx.client.clone(), &ns);
    let existing = cached(&ctx.stores.templates, &template.name_any(), Some(&ns));
    let stale = existing.as_ref().filter(|e| spec_hash(e) != spec_hash(&template));
    let Some(stale) = stale else {
        return (key(&template), false, ctx.applier.ensure(&api, &template, existing.as_deref(), MANAGER).await);
    };
    // Its spec is immutable: delete, then create anew.
    let outcome = match ctx.applier.delete(&api, stale.as_ref()).await {
        Ok(true) => ctx.applier.apply(&api, &template, None, MANAGER).await.map(|()| Outcome::Created),
        Ok(false) => Ok(Outcome::Pending),
        Err(error) => Err(error),
    };
    (key(&template), true, outcome)
}

/// Deletes this config's objects that the spec no longer asks for (found by label, in every namespace).
async fn delete_orphans(
    validated: &ValidatedConfig,
    desired: &Desired,
    daemon_set_wanted: bool,
    ctx: &Context,
    report: &mut Report,
) {
    let stores = &ctx.stores;
    let name = &validated.name;
    let templates: BTreeSet<String> = desired.templates.iter().map(key).collect();
    delete_mine_except(ctx, report, &stores.templates, name, &templates).await;
    let daemon_sets = daemon_set_wanted.then(|| key(&desired.daemon_set)).into_iter().collect();
    delete_mine_except(ctx, report, &stores.daemon_sets, name, &daemon_sets).await;
    let service_accounts = BTreeSet::from([key(&desired.service_account)]);
    delete_mine_except(ctx, report, &stores.service_accounts, name, &service_accounts).await;
    let uid = validated.uid.as_deref();
    release_device_classes(name, uid, Some(&desired.device_class.name_any()), ctx, report).await;
}

/// Deletes every cached object labelled as this config's whose `namespace/name` is not in `keep`.
async fn delete_mine_except<K>(
    ctx: &Context,
    report: &mut Report,
    store: &Store<K>,
    config: &str,
    keep: &BTreeSet<String>,
) where
    K: ApiFor + Clone + serde::de::DeserializeOwned + std::fmt::Debug + 'static,
{
    let mine = store.state().into_iter().filter(|o| o.labels().get(LABEL_CONFIG).map(String::as_str) == Some(config));
    for object in mine.filter(|o| !keep.contains(&key(o.as_ref()))) {
        let outcome = ctx.applier.delete(&api_for(&ctx.client, object.as_ref()), object.as_ref()).await;
        report.record_delete(kind_key(object.as_ref()), outcome);
    }
}

/// DeviceClasses this config owns but does not want (all of them when `keep` is None): deleted when no other config
/// owns them, otherwise only this config's owner reference is released.
async fn release_device_classes(
    config: &str,
    uid: Option<&str>,
    keep: Option<&str>,
    ctx: &Context,
    report: &mut Report,
) {
    let Some(uid) = uid else { return };
    let api = Api::<DeviceClass>::all(ctx.client.clone());
    for class in ctx.stores.device_classes.state() {
        let owners = class.owner_references();
        if Some(class.name_any().as_str()) == keep || !owners.iter().any(|o| o.uid == uid) {
            continue;
        }
        if owners.iter().all(|o| o.uid == uid) {
            report.record_delete(kind_key(class.as_ref()), ctx.applier.delete(&api, class.as_ref()).await);
        } else {
            // Applying an empty object under this config's manager drops the fields only it owned.
            let empty = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": class.name_any()}});
            let params = PatchParams::apply(&shared_manager(config)).force();
            if let Err(source) = api.patch(&class.name_any(), &params, &Patch::Apply(&empty)).await {
                report.errors.push(ApplyError::Apply { kind: "DeviceClass".into(), name: class.name_any(), source });
            }
        }
    }
}

async fn publish_changes(ctx: &Context, reference: &k8s_openapi::api::core::v1::ObjectReference, report: &Report) {
    const SHOWN: usize = 8;
    let summary = |items: &[String]| {
        let more = items.len().saturating_sub(SHOWN);
        let mut text = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    };
    for (reason, items) in [
        ("Created", &report.created),
        ("Updated", &report.updated),
        ("Replaced", &report.replaced),
        ("Deleted", &report.deleted),
    ] {
        if !items.is_empty() {
            publish(ctx, reference, EventType::Normal, reason, "Apply", format!("{reason} {}", summary(items))).await;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn observe(
    config: &NeuronDRAConfig,
    validated: &ValidatedConfig,
    desired: &Desired,
    namespaces: &[String],
    missing_namespaces: &[String],
    daemon_set_wanted: bool,
    validity: Validity,
    report: &Report,
    ctx: &Context,
) -> Observation {
    let rollout = if !daemon_set_wanted {
        Rollout::NotApplied("its nodes are already served by an older config".into())
    } else if report.driver_namespace_terminating {
        let ns = &validated.spec.driver.namespace;
        Rollout::NotApplied(format!("namespace {ns} is being deleted; the plugin is applied once it is gone"))
    } else {
        let ds = &desired.daemon_set;
        let image = validated.spec.driver.image.clone();
        match cached(&ctx.stores.daemon_sets, &ds.name_any(), ds.namespace().as_deref()) {
            None => Rollout::Applied {
                status: DriverStatus { image: Some(image), daemon_set: Some(key(ds)), ..DriverStatus::default() },
                observed: false,
            },
            Some(current) => {
                let s = current.status.clone().unwrap_or_default();
                let observed = s.observed_generation.unwrap_or(0) >= current.metadata.generation.unwrap_or(0)
                    && current.status.is_some();
                Rollout::Applied {
                    status: DriverStatus {
                        image: Some(image),
                        daemon_set: Some(key(ds)),
                        desired_nodes: s.desired_number_scheduled,
                        ready_nodes: s.number_ready,
                        updated_nodes: s.updated_number_scheduled.unwrap_or(0),
                    },
                    observed,
                }
            }
        }
    };
    let wanted = namespaces.len() * validated.claims.len();
    let mut missing: Vec<String> = missing_namespaces.iter().map(|ns| format!("namespace {ns} not found")).collect();
    missing.extend(desired.templates.iter().map(key).filter(|k| !report.templates_in_place.contains(k)).take(10));
    let profiles = validated
        .templates_by_profile()
        .into_iter()
        .map(|(profile, templates)| {
            let complete = namespaces
                .iter()
                .filter(|ns| templates.iter().all(|t| report.templates_in_place.contains(&format!("{ns}/{t}"))))
                .count();
            ProfileStatus { name: profile, templates, namespaces: complete as i64, capacity: Vec::new() }
        })
        .collect();
    let in_place_namespaces: BTreeSet<&str> =
        report.templates_in_place.iter().filter_map(|k| k.split_once('/').map(|(ns, _)| ns)).collect();
    Observation {
        generation: config.meta().generation,
        paused: config.spec.paused,
        validity,
        rollout,
        templates_present: report.templates_in_place.len(),
        templates_wanted: wanted + missing_namespaces.len() * validated.claims.len(),
        template_namespaces: in_place_namespaces.len(),
        profiles,
        templates_missing: missing,
        health: None,
        capacity: Vec::new(),
    }
}

/// Device and node health over the nodes this config selects, from the caches.
fn assess_health(validated: &ValidatedConfig, daemon_set_wanted: bool, ctx: &Context) -> health::Assessment {
    let stores = &ctx.stores;
    let nodes = stores.nodes.state();
    let mut slices: HashMap<String, Vec<Arc<SliceView>>> = HashMap::new();
    for slice in stores.slices.state() {
        if let Some(node) = slice.spec.node_name.clone() {
            slices.entry(node).or_default().push(slice);
        }
    }
    let plugin_pods: HashMap<String, Arc<PodView>> = stores
        .plugin_pods
        .state()
        .into_iter()
        .filter(|pod| pod.labels().get(LABEL_CONFIG) == Some(&validated.name))
        .filter_map(|pod| Some((pod.node()?, pod)))
        .collect();
    let taint_rules = stores.taint_rules.state();
    let holders = health::holders(&stores.claims.state());
    health::assess(&health::Inputs {
        spec: &validated.spec,
        nodes: &nodes,
        slices: &slices,
        plugin_pods: &plugin_pods,
        taint_rules: &taint_rules,
        plugin_expected: daemon_set_wanted,
        holders: &holders,
    })
}

/// Claims and room per template over the nodes this config selects, from the caches.
fn assess_capacity(validated: &ValidatedConfig, ctx: &Context) -> Vec<crate::api::TemplateCapacity> {
    let stores = &ctx.stores;
    let mut slices: HashMap<String, Vec<Arc<SliceView>>> = HashMap::new();
    for slice in stores.slices.state().into_iter().chain(stores.efa_slices.state()) {
        if let Some(node) = slice.spec.node_name.clone() {
            slices.entry(node).or_default().push(slice);
        }
    }
    crate::capacity::assess(&crate::capacity::Inputs {
        config: validated,
        nodes: &stores.nodes.state(),
        slices: &slices,
        claims: &stores.claims.state(),
        taint_rules: &stores.taint_rules.state(),
    })
}

/// An event when devices turn unhealthy or recover; nothing when the set is unchanged.
async fn health_events(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    previous: Option<&NeuronDRAConfigStatus>,
    assessment: &health::Assessment,
) {
    let unhealthy = &assessment.unhealthy;
    let name = reference.name.clone().unwrap_or_default();
    let in_use_before = {
        let mut seen = ctx.in_use_seen.lock().expect("not poisoned");
        seen.insert(name.clone(), assessment.affected_claims.clone()).unwrap_or_else(|| {
            previous.iter().flat_map(|s| &s.unhealthy_devices).filter_map(|d| d.claim.clone()).collect()
        })
    };
    let newly_in_use: Vec<&String> = assessment.affected_claims.difference(&in_use_before).collect();
    if !newly_in_use.is_empty() {
        let shown: Vec<&str> = newly_in_use.iter().take(10).map(|c| c.as_str()).collect();
        let note = format!("unhealthy devices are allocated to claims: {}", shown.join(", "));
        publish(ctx, reference, EventType::Warning, "UnhealthyDeviceInUse", "Health", note).await;
    }
    let before = {
        let mut seen = ctx.unhealthy_seen.lock().expect("not poisoned");
        let before = seen.get(&name).cloned().unwrap_or_else(|| {
            // After a restart: what the status already reports is not news.
            previous.iter().flat_map(|s| &s.unhealthy_devices).map(|d| (d.node.clone(), d.device.clone())).collect()
        });
        seen.insert(name, unhealthy.clone());
        before
    };
    let list = |items: Vec<&(String, String)>| {
        let shown: Vec<String> = items.iter().take(10).map(|(node, device)| format!("{node}/{device}")).collect();
        let more = items.len().saturating_sub(10);
        if more > 0 { format!("{} and {more} more", shown.join(", ")) } else { shown.join(", ") }
    };
    let turned: Vec<_> = unhealthy.difference(&before).collect();
    if !turned.is_empty() {
        let note = format!("devices turned unhealthy: {}", list(turned));
        publish(ctx, reference, EventType::Warning, "DeviceUnhealthy", "Health", note).await;
    }
    let recovered: Vec<_> = before.difference(unhealthy).collect();
    if !recovered.is_empty() {
        let note = format!("devices recovered: {}", list(recovered));
        publish(ctx, reference, EventType::Normal, "DeviceRecovered", "Health", note).await;
    }
}

/// One server-side apply of the whole status, only when it differs from what is stored.
async fn write_status(config: &NeuronDRAConfig, observation: &Observation, ctx: &Context) -> Result<(), Error> {
    let status = status::compute(config.status.as_ref(), observation, status::now());
    if config.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let patch = json!({"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "status": status});
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    api.patch_status(&config.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(Error::Status)?;
    Ok(())
}

/// Removes everything this config created before it goes away.
async fn cleanup(config: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    let name = config.name_any();
    let mut report = Report::default();
    let stores = &ctx.stores;
    let nothing = BTreeSet::new();
    delete_mine_except(ctx, &mut report, &stores.templates, &name, &nothing).await;
    delete_mine_except(ctx, &mut report, &stores.daemon_sets, &name, &nothing).await;
    delete_mine_except(ctx, &mut report, &stores.cluster_role_bindings, &name, &nothing).await;
    delete_mine_except(ctx, &mut report, &stores.cluster_roles, &name, &nothing).await;
    delete_mine_except(ctx, &mut report, &stores.service_accounts, &name, &nothing).await;

    // The shared DeviceClass goes with its last owner. The driver namespace stays: another config may want it at any
    // moment, and deleting it would race with that config's rollout.
    release_device_classes(&name, config.uid().as_deref(), None, ctx, &mut report).await;

    publish_changes(ctx, &config.object_ref(&()), &report).await;
    match report.errors.into_iter().next() {
        Some(error) => Err(error.into()),
        None => Ok(Action::await_change()),
    }
}
