//! plan (pure over the snapshot): everything one reconcile of one config will do, decided before anything is
//! written: the objects it wants, the plugin's rollout step and remediation's rules. The act layer carries it out;
//! the status and the events are derived from it and what the act did.

mod mode;
mod remediation;
mod rollout;

pub use remediation::{Decided, Remediation};
pub use rollout::Step;

use std::sync::Arc;

use crate::cluster::taint_rule::TaintRuleView;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::Stores;
use super::snapshot::Snapshot;
use crate::api::NeuronDRAConfig;
use crate::api::labels::{LABEL_CONFIG, ours};
use crate::logic::build::{self, Allowance, Desired, OwnClasses};
use crate::logic::conflict::{self, Claimant, Conflicts};
use crate::logic::nodes::{self, NodeFilter};
use crate::logic::status::Validity;
use crate::logic::validate::{FieldError, InvalidConfig, ValidatedConfig, validate};
pub use mode::Mode;

/// What happens to the kubelet plugin (its ServiceAccount and DaemonSet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Apply,
    /// Another config holds some of these nodes: the DaemonSet is kept as it runs (neither updated nor deleted), and
    /// none is created.
    BlockedByConflict,
    /// The driver namespace is being deleted: keep what is there and apply once it can be created again.
    WaitingForNamespace,
    /// The plugin's fences are not in place as shipped (`Plan::unfenced` says how): the DaemonSet is kept as it runs
    /// (neither updated nor deleted), and none is created.
    Unfenced,
}

/// The driver namespace as the cache shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceState {
    /// Used as it is.
    Exists,
    /// Created.
    Missing,
    /// Being deleted: nothing can be created in it until it is gone.
    Terminating,
}

/// One reconcile's decisions for a valid config.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: Mode,
    pub config: ValidatedConfig,
    /// Every object wanted; templates that conflict with another config are already left out.
    pub desired: Desired,
    /// The templates left out for a conflict: one of this config's own is kept as it is, not deleted.
    pub kept_templates: Vec<k8s_openapi::api::resource::v1::ResourceClaimTemplate>,
    pub driver: Driver,
    /// Why the plugin's fences are not in place, when they are not.
    pub unfenced: Option<String>,
    pub driver_namespace: NamespaceState,
    pub conflicts: Conflicts,
    /// Namespaces that receive templates.
    pub namespaces: Vec<String>,
    /// Namespaces the spec lists that do not exist.
    pub missing_namespaces: Vec<String>,
    /// The plugin's versions and rollout step (nothing unless the plugin is applied).
    pub rollout: Step,
    /// The config's DeviceTaintRules as cached when the plan was made, by name.
    pub taint_rules: Vec<Arc<TaintRuleView>>,
    pub remediation: Remediation,
}

impl Plan {
    /// Validates `config` and decides against the snapshot at `now` (seconds); a spec that fails validation plans
    /// nothing.
    pub fn new(config: &NeuronDRAConfig, snapshot: &Snapshot, now: i64) -> Result<Plan, InvalidConfig> {
        let stores = &snapshot.stores;
        let validated = validate(config)?;
        // Unfenced, the plugin is not written whatever its driver: nothing to refuse.
        let refusals =
            snapshot.fence.as_ref().map(|allowed| allowed.refusals(&validated.spec.driver)).unwrap_or_default();
        if !refusals.is_empty() {
            return Err(InvalidConfig(refusals.into_iter().map(|(path, why)| FieldError::new(path, why)).collect()));
        }
        let (namespaces, missing_namespaces) = target_namespaces(&validated, &stores.namespaces);
        let conflicts = conflicts_of(config, &validated, stores);
        let budgets = quota_budgets(&validated, &stores.namespaces);
        let own = own_classes(&validated, stores);
        let mut desired = build::build_with(&validated, &namespaces, own).with_quotas(&validated, &budgets);
        let (kept_templates, templates) = std::mem::take(&mut desired.templates)
            .into_iter()
            .partition(|t| conflicts.templates.contains_key(&(t.namespace().unwrap_or_default(), t.name_any())));
        desired.templates = templates;
        if conflicts.extended_resource.is_some() {
            desired.extended_resource_class = None;
        }
        let driver_namespace = match stores.namespaces.get(&ObjectRef::new(&validated.spec.driver.namespace)) {
            None => NamespaceState::Missing,
            Some(ns) if terminating(&ns) => NamespaceState::Terminating,
            Some(_) => NamespaceState::Exists,
        };
        let driver = if !conflicts.nodes.is_empty() {
            Driver::BlockedByConflict
        } else if driver_namespace == NamespaceState::Terminating {
            Driver::WaitingForNamespace
        } else if snapshot.fence.is_err() {
            Driver::Unfenced
        } else {
            Driver::Apply
        };
        let mode = if config.spec.paused { Mode::Paused } else { Mode::Normal };
        let previous = config.status.as_ref();
        let rollout = match driver {
            Driver::Apply => rollout::step(&validated, &desired.daemon_set, mode, previous, snapshot, now),
            _ => Step::default(),
        };
        // A halt or rollback keeps the DaemonSet on the last good template (see `Step::hold`).
        if let (Some(template), Some(spec)) = (&rollout.hold, desired.daemon_set.spec.as_mut()) {
            spec.template = template.clone();
        }
        let taint_rules = snapshot.taint_rules_of(&validated.name);
        let remediation =
            remediation::decide(&validated, mode == Mode::Paused, &conflicts, previous, snapshot, &taint_rules, now);
        Ok(Plan {
            mode,
            config: validated,
            desired,
            kept_templates,
            driver,
            unfenced: snapshot.fence.clone().err(),
            driver_namespace,
            conflicts,
            namespaces,
            missing_namespaces,
            rollout,
            taint_rules,
            remediation,
        })
    }

    pub fn validity(&self) -> Validity {
        if self.conflicts.is_empty() { Validity::Valid } else { Validity::Conflict(self.conflicts.message()) }
    }
}

/// A namespace being deleted (its phase is Terminating from the moment its deletion timestamp is set).
pub fn terminating(namespace: &PartialObjectMeta<Namespace>) -> bool {
    namespace.metadata.deletion_timestamp.is_some()
}

/// The templates' target namespaces: the explicit list (those that exist) and every namespace the selector matches;
/// terminating namespaces are left out. Also returns the explicit namespaces that do not exist.
fn target_namespaces(
    config: &ValidatedConfig,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
) -> (Vec<String>, Vec<String>) {
    let templates = &config.spec.templates;
    let (targets, missing) =
        matching_namespaces(&templates.namespaces, templates.namespace_selector.as_ref(), namespaces);
    (targets.into_iter().collect(), missing)
}

/// Which DeviceClasses the templates name are the operator's: each unless the cluster holds one of its name that
/// another tool made (the apply path's test, which reports it `ForeignObject` and leaves it as it is). One that is
/// absent counts as the operator's: this pass creates it, before the templates (`Stage::Class`).
fn own_classes(config: &ValidatedConfig, stores: &Stores) -> OwnClasses {
    let own =
        |name: &str| stores.every_device_class.get(&ObjectRef::new(name)).is_none_or(|class| ours(&class.metadata));
    let class = &config.spec.device_class_name;
    OwnClasses { devices: own(class), nodes: own(&build::ultra_server_node_class_name(class)) }
}

/// The device budget of each namespace a budget names (once it exists) or selects, the first budget winning.
fn quota_budgets(
    config: &ValidatedConfig,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
) -> Vec<(String, Allowance)> {
    let mut budgets = BTreeMap::new();
    for quota in &config.spec.quotas {
        let (targets, _) = matching_namespaces(&quota.namespaces, quota.namespace_selector.as_ref(), namespaces);
        for namespace in targets {
            budgets.entry(namespace).or_insert(Allowance::of(quota));
        }
    }
    budgets.into_iter().collect()
}

/// The namespaces of `names` that exist and every namespace `selector` matches, none terminating; and the names
/// that do not exist.
fn matching_namespaces(
    names: &[String],
    selector: Option<&LabelSelector>,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
) -> (BTreeSet<String>, Vec<String>) {
    let mut targets = BTreeSet::new();
    let mut missing = Vec::new();
    for name in names {
        match namespaces.get(&ObjectRef::new(name)) {
            Some(ns) if !terminating(&ns) => {
                targets.insert(name.clone());
            }
            Some(_) => {}
            None => missing.push(name.clone()),
        }
    }
    if let Some(selector) = selector {
        for ns in namespaces.state() {
            if !terminating(&ns) && nodes::selector_matches(Some(selector), ns.labels()) {
                targets.insert(ns.name_any());
            }
        }
    }
    (targets, missing)
}

/// What a config asks of the cluster, for conflict checks against the others.
fn claimant(config: &NeuronDRAConfig, validated: &ValidatedConfig, stores: &Stores) -> Claimant {
    let (namespaces, _) = target_namespaces(validated, &stores.namespaces);
    let filter = NodeFilter::new(&validated.spec);
    let nodes =
        stores.nodes.state().iter().filter(|node| filter.selects(node.labels())).map(|node| node.name_any()).collect();
    let templates = namespaces
        .iter()
        .flat_map(|ns| validated.claims.iter().map(move |c| (ns.clone(), c.template.clone())))
        .collect();
    let created = config.meta().creation_timestamp.as_ref().map_or(i64::MAX, |t| t.0.as_second());
    let extended_resource = validated
        .spec
        .extended_resource_name
        .clone()
        .map(|resource| (validated.spec.device_class_name.clone(), resource));
    Claimant {
        name: validated.name.clone(),
        created: (created, validated.name.clone()),
        nodes,
        templates,
        extended_resource,
    }
}

/// Conflicts with the other configs that are not being deleted: by spec with the older ones that are valid, and by
/// what runs with every one, valid or not (`running`).
fn conflicts_of(config: &NeuronDRAConfig, validated: &ValidatedConfig, stores: &Stores) -> Conflicts {
    let others = stores.configs.state();
    let others: Vec<(String, Option<&NeuronDRAConfig>)> = others
        .iter()
        .filter_map(|guard| {
            let (meta, config) = match &guard.0 {
                Ok(other) => (&other.metadata, Some(other)),
                // Unreadable by this build: what it runs still counts.
                Err(invalid) => (&invalid.metadata, None),
            };
            let name = meta.name.clone()?;
            (name != validated.name && meta.deletion_timestamp.is_none()).then_some((name, config))
        })
        .collect();
    let mut claimants: Vec<Claimant> = others
        .iter()
        .filter_map(|(_, other)| other.and_then(|o| stores.validations.of(o).map(|v| claimant(o, &v, stores))))
        .collect();
    let daemon_set = ObjectRef::new(&build::plugin_name(&validated.name)).within(&validated.spec.driver.namespace);
    let runs = stores.owned.daemon_sets.get(&daemon_set).is_some();
    claimants.extend(running(others.into_iter().map(|(name, _)| name), !runs, stores));
    if claimants.is_empty() {
        // Alone, it conflicts with nobody: its own claim (a walk over every node) is not needed.
        return Conflicts::default();
    }
    conflict::find_conflicts(&claimant(config, validated, stores), &claimants)
}

/// What other configs hold in the cluster, whatever their spec says now (an invalid or unreadable spec leaves its
/// objects as they are): the templates labelled as theirs and, when `nodes`, the nodes their plugin pods run on.
/// Such a claimant counts as older than every config: what runs is never taken over, and no second plugin is
/// created beside one that runs (`nodes` is set only for a config that has no DaemonSet yet).
fn running(names: impl Iterator<Item = String>, nodes: bool, stores: &Stores) -> Vec<Claimant> {
    use std::collections::BTreeMap;
    let mut held: BTreeMap<String, Claimant> = names
        .map(|name| {
            let claimant = Claimant {
                name: name.clone(),
                created: (i64::MIN, name.clone()),
                nodes: BTreeSet::new(),
                templates: BTreeSet::new(),
                extended_resource: None,
            };
            (name, claimant)
        })
        .collect();
    let config_of = |labels: &std::collections::BTreeMap<String, String>| labels.get(LABEL_CONFIG).cloned();
    for template in stores.owned.templates.state() {
        if let Some(claimant) = config_of(template.labels()).and_then(|c| held.get_mut(&c)) {
            claimant.templates.insert((template.namespace().unwrap_or_default(), template.name_any()));
        }
    }
    if nodes {
        // Only pods a config's own DaemonSet controls: a look-alike pod holds no node.
        let daemon_sets: BTreeMap<String, String> = stores
            .owned
            .daemon_sets
            .state()
            .iter()
            .filter_map(|ds| Some((ds.uid()?, config_of(ds.labels())?)))
            .collect();
        for pod in stores.plugin_pods.state() {
            let owner = pod.controller_uid().and_then(|uid| daemon_sets.get(uid));
            if let (Some(config), Some(node)) = (owner, pod.node())
                && let Some(claimant) = held.get_mut(config)
            {
                claimant.nodes.insert(node);
            }
        }
    }
    held.into_values().collect()
}
