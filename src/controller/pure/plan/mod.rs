//! plan (pure over the snapshot): everything one reconcile of one config will do, decided before anything is
//! written: the objects it wants, the plugin's rollout step and remediation's rules. The act layer carries it out;
//! the status and the events are derived from it and what the act did.

mod mode;
mod remediation;
mod rollout;
mod unwanted;

pub use remediation::{Decided, Remediation};
pub use rollout::Step;
pub use unwanted::{Going, Unwanted, Wanted};

use std::sync::Arc;

use crate::cluster::taint_rule::TaintRuleView;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};

use super::snapshot::{Probes, Snapshot};
use crate::api::NeuronDRAConfig;
use crate::api::labels::LABEL_CONFIG;
use crate::controller::validations::Checked;
use crate::logic::conflict::{self, Claimant, Conflicts};
use crate::logic::desired::{self, Allocator, Allowance, Desired, OwnClasses};
use crate::logic::nodes::{self, NodeFilter};
use crate::logic::status::Validity;
use crate::logic::validate::{FieldError, InvalidConfig, ValidatedConfig};
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
    pub config: Arc<ValidatedConfig>,
    /// Every object wanted; templates that conflict with another config are already left out.
    pub desired: Desired,
    /// The templates left out for a conflict: one of this config's own is kept as it is, not deleted.
    pub kept_templates: Vec<ResourceClaimTemplate>,
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
    /// The server's allocator the templates are shaped for.
    pub allocator: Allocator,
    /// What the config has and no longer wants: deleted (or, shared with another config, let go). Nothing while
    /// paused.
    pub unwanted: Unwanted,
    /// The wanted templates whose spec changed, by `namespace/name`, with the cached copy: replaced (deleted, then
    /// created), as a template's spec is immutable.
    pub replaced_templates: BTreeMap<String, Arc<ResourceClaimTemplate>>,
    /// The wanted templates the cache holds as wanted (what a paused pass reports in place).
    pub templates_in_place: BTreeSet<String>,
}

impl Plan {
    /// Validates `config` and decides against the snapshot at `now` (seconds); a spec that fails validation, or
    /// that the server cannot serve (`Probes`), plans nothing.
    pub fn new(config: &NeuronDRAConfig, snapshot: &Snapshot, now: i64) -> Result<Plan, Refusal> {
        let validated = accepted(snapshot.validations.checked(config), &snapshot.probes)?;
        let (namespaces, missing_namespaces) = target_namespaces(&validated, snapshot);
        let conflicts = conflicts_of(config, &validated, snapshot);
        let budgets = quota_budgets(&validated, snapshot);
        let own = own_classes(&validated, snapshot);
        let allocator = snapshot.probes.allocator;
        let mut desired =
            desired::build_with(&validated, &namespaces, own, allocator).with_quotas(&validated, &budgets);
        for (keys, budgeted) in other_budgets(&validated, snapshot) {
            for quota in desired.quotas.iter_mut().filter(|q| !budgeted.contains(&q.namespace().unwrap_or_default())) {
                desired::cap_at_zero(quota, &keys);
            }
        }
        let (kept_templates, templates) = std::mem::take(&mut desired.templates)
            .into_iter()
            .partition(|t| conflicts.templates.contains_key(&(t.namespace().unwrap_or_default(), t.name_any())));
        desired.templates = templates;
        if conflicts.extended_resource.is_some() {
            desired.extended_resource_class = None;
        }
        let driver_namespace = match snapshot.namespace(&validated.spec.driver.namespace) {
            None => NamespaceState::Missing,
            Some(ns) if terminating(ns) => NamespaceState::Terminating,
            Some(_) => NamespaceState::Exists,
        };
        let driver = if !conflicts.nodes.is_empty() {
            Driver::BlockedByConflict
        } else if driver_namespace == NamespaceState::Terminating {
            Driver::WaitingForNamespace
        } else if snapshot.probes.fence.is_err() {
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
        let wanted = unwanted::wanted(&desired, &kept_templates, remediation.rules().iter());
        let unwanted = match mode {
            Mode::Paused => Unwanted::default(),
            _ => Unwanted::of(snapshot.owned(), &validated.name, validated.uid.as_deref(), &wanted),
        };
        let (replaced_templates, templates_in_place) =
            unwanted::templates_as_cached(&desired.templates, snapshot.templates());
        Ok(Plan {
            mode,
            config: validated,
            desired,
            kept_templates,
            driver,
            unfenced: snapshot.probes.fence.clone().err(),
            driver_namespace,
            conflicts,
            namespaces,
            missing_namespaces,
            rollout,
            taint_rules,
            remediation,
            allocator,
            unwanted,
            replaced_templates,
            templates_in_place,
        })
    }

    pub fn validity(&self) -> Validity {
        if self.conflicts.is_empty() { Validity::Valid } else { Validity::Conflict(self.conflicts.message()) }
    }
}

/// Why a config is not planned: its spec, or the server it is on.
#[derive(Debug)]
pub enum Refusal {
    /// The spec fails validation, or asks for a driver the plugin's fences do not allow.
    InvalidSpec(InvalidConfig),
    /// The server lacks what the spec needs (`Probes::unsupported`).
    Unsupported(String),
}

impl Refusal {
    /// What the status says of the config.
    pub fn validity(&self) -> Validity {
        match self {
            Refusal::InvalidSpec(_) => Validity::InvalidSpec(self.to_string()),
            Refusal::Unsupported(message) => Validity::Unsupported(message.clone()),
        }
    }
}

/// The refusal's message, one line per field.
impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::InvalidSpec(invalid) => {
                f.write_str(&invalid.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))
            }
            Refusal::Unsupported(message) => f.write_str(message),
        }
    }
}

/// `config` validated, and found within what the fences allow (unfenced, the plugin is not written whatever its
/// driver: nothing to refuse) and what the server serves, in that order.
fn accepted(checked: Checked, probes: &Probes) -> Result<Arc<ValidatedConfig>, Refusal> {
    let validated = checked.map_err(Refusal::InvalidSpec)?;
    let refusals = probes.fence.as_ref().map(|allowed| allowed.refusals(&validated.spec.driver)).unwrap_or_default();
    if !refusals.is_empty() {
        let fields = refusals.into_iter().map(|(path, why)| FieldError::new(path, why)).collect();
        return Err(Refusal::InvalidSpec(InvalidConfig(fields)));
    }
    match &probes.unsupported {
        Some(missing) => Err(Refusal::Unsupported(missing.clone())),
        None => Ok(validated),
    }
}

/// A namespace being deleted (its phase is Terminating from the moment its deletion timestamp is set).
pub fn terminating(namespace: &PartialObjectMeta<Namespace>) -> bool {
    namespace.metadata.deletion_timestamp.is_some()
}

/// The templates' target namespaces: the explicit list (those that exist) and every namespace the selector matches;
/// terminating namespaces are left out. Also returns the explicit namespaces that do not exist.
fn target_namespaces(config: &ValidatedConfig, snapshot: &Snapshot) -> (Vec<String>, Vec<String>) {
    let templates = &config.spec.templates;
    let (targets, missing) =
        matching_namespaces(&templates.namespaces, templates.namespace_selector.as_ref(), snapshot);
    (targets.into_iter().collect(), missing)
}

/// Which DeviceClasses the templates name are the operator's: each unless the cluster holds one of its name that
/// another tool made (the apply path's test, which reports it `ForeignObject` and leaves it as it is). One that is
/// absent counts as the operator's: this pass creates it, before the templates (`Stage::Class`).
fn own_classes(config: &ValidatedConfig, snapshot: &Snapshot) -> OwnClasses {
    let own = |name: &str| !snapshot.foreign_device_classes.contains(name);
    let class = &config.spec.device_class_name;
    OwnClasses { devices: own(class), nodes: own(&desired::ultra_server_node_class_name(class)) }
}

/// The device budget of each namespace a budget names (once it exists) or selects, the first budget winning.
fn quota_budgets(config: &ValidatedConfig, snapshot: &Snapshot) -> Vec<(String, Allowance)> {
    let mut budgets = BTreeMap::new();
    for quota in &config.spec.quotas {
        let (targets, _) = matching_namespaces(&quota.namespaces, quota.namespace_selector.as_ref(), snapshot);
        for namespace in targets {
            budgets.entry(namespace).or_insert(Allowance::of(quota));
        }
    }
    budgets.into_iter().collect()
}

/// Each other valid config's quota keys, with the namespaces it budgets (#50.4): this config's budgets cap those
/// keys at 0 where the other gives the team nothing, so that a team cannot claim past its budget through another
/// config's class.
fn other_budgets(config: &ValidatedConfig, snapshot: &Snapshot) -> Vec<(Vec<String>, BTreeSet<String>)> {
    snapshot
        .configs()
        .iter()
        .filter_map(|guard| guard.0.as_ref().ok())
        .filter(|other| other.metadata.name.as_deref() != Some(config.name.as_str()))
        .filter(|other| other.metadata.deletion_timestamp.is_none())
        .filter_map(|other| snapshot.validations.of(other))
        .map(|other| {
            let budgeted = quota_budgets(&other, snapshot).into_iter().map(|(namespace, _)| namespace).collect();
            (desired::quota_keys(&other), budgeted)
        })
        .collect()
}

/// The namespaces of `names` that exist and every namespace `selector` matches, none terminating; and the names
/// that do not exist.
fn matching_namespaces(
    names: &[String],
    selector: Option<&LabelSelector>,
    snapshot: &Snapshot,
) -> (BTreeSet<String>, Vec<String>) {
    let mut targets = BTreeSet::new();
    let mut missing = Vec::new();
    for name in names {
        match snapshot.namespace(name) {
            Some(ns) if !terminating(ns) => {
                targets.insert(name.clone());
            }
            Some(_) => {}
            None => missing.push(name.clone()),
        }
    }
    if let Some(selector) = selector {
        for ns in snapshot.namespaces() {
            if !terminating(ns) && nodes::selector_matches(Some(selector), ns.labels()) {
                targets.insert(ns.name_any());
            }
        }
    }
    (targets, missing)
}

/// What a config asks of the cluster, for conflict checks against the others.
fn claimant(config: &NeuronDRAConfig, validated: &ValidatedConfig, snapshot: &Snapshot) -> Claimant {
    let (namespaces, _) = target_namespaces(validated, snapshot);
    let filter = NodeFilter::new(&validated.spec);
    let selected = snapshot.nodes().iter().filter(|node| filter.selects(node.labels()));
    let nodes = selected.map(|node| node.name_any()).collect();
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
fn conflicts_of(config: &NeuronDRAConfig, validated: &ValidatedConfig, snapshot: &Snapshot) -> Conflicts {
    let others: Vec<(String, Option<&NeuronDRAConfig>)> = snapshot
        .configs()
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
        .filter_map(|(_, other)| other.and_then(|o| snapshot.validations.of(o).map(|v| claimant(o, &v, snapshot))))
        .collect();
    let runs = snapshot.daemon_set(&desired::plugin_name(&validated.name), &validated.spec.driver.namespace).is_some();
    claimants.extend(running(others.into_iter().map(|(name, _)| name), !runs, snapshot));
    if claimants.is_empty() {
        // Alone, it conflicts with nobody: its own claim (a walk over every node) is not needed.
        return Conflicts::default();
    }
    conflict::find_conflicts(&claimant(config, validated, snapshot), &claimants)
}

/// What other configs hold in the cluster, whatever their spec says now (an invalid or unreadable spec leaves its
/// objects as they are): the templates labelled as theirs and, when `nodes`, the nodes their plugin pods run on.
/// Such a claimant counts as older than every config: what runs is never taken over, and no second plugin is
/// created beside one that runs (`nodes` is set only for a config that has no DaemonSet yet).
fn running(names: impl Iterator<Item = String>, nodes: bool, snapshot: &Snapshot) -> Vec<Claimant> {
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
    for template in snapshot.templates() {
        if let Some(claimant) = config_of(template.labels()).and_then(|c| held.get_mut(&c)) {
            claimant.templates.insert((template.namespace().unwrap_or_default(), template.name_any()));
        }
    }
    if nodes {
        // Only pods a config's own DaemonSet controls: a look-alike pod holds no node.
        let daemon_sets: BTreeMap<String, String> =
            snapshot.daemon_sets().iter().filter_map(|ds| Some((ds.uid()?, config_of(ds.labels())?))).collect();
        for pod in snapshot.plugin_pods() {
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
