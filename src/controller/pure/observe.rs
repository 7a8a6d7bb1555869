//! The `Observation` the status is computed from: what the plan decided, what the pass did and what the caches
//! show after it (`AfterAct`: the plugin's DaemonSet and the teams' ResourceQuotas, read once, as a value).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::ResourceExt;

use kube::runtime::reflector::ObjectRef;

use super::plan::{Driver, Plan};
use super::report::{Report, key};
use crate::api::{DriverStatus, ProfileStatus, TeamStatus, TeamSummary, TemplateCapacity};
use crate::cluster::taint_rule::KIND as TAINT_RULE;
use crate::controller::Stores;
use crate::logic::desired::kueue::admission::kueue_admission;
use crate::logic::desired::{OwnClasses, resource_claim_template};
use crate::logic::status::{Observation, Rollout, Validity};
use crate::logic::teams::{Amount, Budget, template_request};

/// What the caches show, once the act is done, of the objects it may just have written and whose status the
/// config reports: the plugin's DaemonSet (its rollout) and the teams' ResourceQuotas (their use), in the plan's
/// order. Read once, so that the outcome is a function of values.
pub struct AfterAct {
    daemon_set: Option<Arc<DaemonSet>>,
    quotas: Vec<Option<Arc<ResourceQuota>>>,
}

impl AfterAct {
    pub fn read(plan: &Plan, stores: &Stores) -> Self {
        let ds = &plan.desired.daemon_set;
        let at = |name: String, namespace: Option<String>| (name, namespace.unwrap_or_default());
        let (name, namespace) = at(ds.name_any(), ds.namespace());
        let quotas = plan.desired.quotas.iter().map(|q| {
            let (name, namespace) = at(q.name_any(), q.namespace());
            stores.owned.resource_quotas.get(&ObjectRef::new(&name).within(&namespace))
        });
        AfterAct {
            daemon_set: stores.owned.daemon_sets.get(&ObjectRef::new(&name).within(&namespace)),
            quotas: quotas.collect(),
        }
    }
}

/// A config that is not acted on (invalid or unreadable): nothing applied, nothing judged.
pub fn not_acted_on(generation: Option<i64>, paused: bool, validity: Validity) -> Observation {
    Observation::bare(generation, paused, validity, Rollout::NotApplied("the spec is invalid".into()))
}

/// The plugin's rollout: why it is not applied, or what its DaemonSet reports.
fn rollout(plan: &Plan, driver: Driver, after: &AfterAct) -> Rollout {
    match driver {
        Driver::BlockedByConflict => {
            return Rollout::NotApplied(
                "another config holds some of its nodes: the plugin is kept as it runs, not created or updated".into(),
            );
        }
        Driver::WaitingForNamespace => {
            let ns = &plan.config.spec.driver.namespace;
            return Rollout::NotApplied(format!(
                "namespace {ns} is being deleted; the plugin is applied once it is gone"
            ));
        }
        Driver::Unfenced => {
            return Rollout::Unfenced(plan.unfenced.clone().unwrap_or_default());
        }
        Driver::Apply => {}
    }
    let ds = &plan.desired.daemon_set;
    let image = plan.config.spec.driver.image.clone();
    let Some(current) = &after.daemon_set else {
        return Rollout::Applied {
            status: DriverStatus { image: Some(image), daemon_set: Some(key(ds)), ..DriverStatus::default() },
            observed: false,
        };
    };
    let s = current.status.clone().unwrap_or_default();
    let observed =
        s.observed_generation.unwrap_or(0) >= current.metadata.generation.unwrap_or(0) && current.status.is_some();
    Rollout::Applied {
        status: DriverStatus {
            image: Some(image),
            daemon_set: Some(key(ds)),
            desired_nodes: s.desired_number_scheduled,
            ready_nodes: s.number_ready,
            updated_nodes: s.updated_number_scheduled.unwrap_or(0),
            ..DriverStatus::default()
        },
        observed,
    }
}

/// What a pass over a valid config found; `driver` is the plugin's state as the pass left it.
pub fn observation(
    generation: Option<i64>,
    plan: &Plan,
    driver: Driver,
    report: &Report,
    after: &AfterAct,
) -> Observation {
    let config = &plan.config;
    let in_place = &report.templates_in_place;
    // Templates left to an older config are reported as the conflict, not as missing.
    let wanted = plan.desired.templates.len();
    let mut missing: Vec<String> =
        plan.missing_namespaces.iter().map(|ns| format!("namespace {ns} not found")).collect();
    missing.extend(plan.desired.templates.iter().map(key).filter(|k| !in_place.contains(k)).take(10));
    let profiles = config
        .templates_by_profile()
        .into_iter()
        .map(|(profile, templates)| {
            let complete = plan
                .namespaces
                .iter()
                .filter(|ns| templates.iter().all(|t| in_place.contains(&format!("{ns}/{t}"))))
                .count();
            let kueue = Some(kueue_admission(config, &profile, plan.allocator));
            // Counts and modes are the same in every namespace and for either shape of the classes.
            let class = &config.spec.device_class_name;
            let requests = config
                .claims
                .iter()
                .filter(|claim| claim.profile == profile)
                .map(|claim| resource_claim_template(config, claim, "", OwnClasses::BOTH, plan.allocator))
                .map(|template| template_request(&template, class))
                .collect();
            ProfileStatus {
                name: profile,
                templates,
                namespaces: complete as i64,
                capacity: Vec::new(),
                kueue,
                requests,
            }
        })
        .collect();
    let in_place_namespaces: BTreeSet<&str> =
        in_place.iter().filter_map(|k| k.split_once('/').map(|(ns, _)| ns)).collect();
    let mut rollout = rollout(plan, driver, after);
    if let Rollout::Applied { status, .. } = &mut rollout {
        status.versions = plan.rollout.versions.clone();
        status.rollout = plan.rollout.status.clone();
    }
    // A node whose rule could not be written is not remediated after all.
    let failed_rules = report.failed_applies(TAINT_RULE);
    let failed = plan
        .remediation
        .remediated()
        .filter(|(_, rule)| failed_rules.contains(&rule.name_any()))
        .map(|(problem, _)| problem.node.clone())
        .collect();
    Observation {
        templates_present: in_place.len(),
        templates_wanted: wanted + plan.missing_namespaces.len() * config.claims.len(),
        template_namespaces: in_place_namespaces.len(),
        profiles,
        templates_missing: missing,
        templates_foreign: report.foreign_lines(true),
        foreign: report.foreign_lines(false),
        remediation: plan.remediation.status(&config.name, &failed),
        ..Observation::bare(generation, config.spec.paused, plan.validity(), rollout)
    }
}

/// The team namespaces' budgets, what their ResourceQuotas report as used, and their room given the cluster's
/// (`capacity`); no summary without budgets.
pub fn teams(plan: &Plan, after: &AfterAct, capacity: &[TemplateCapacity]) -> (Vec<TeamStatus>, Option<TeamSummary>) {
    if plan.desired.quotas.is_empty() {
        return (Vec::new(), None);
    }
    let class = &plan.config.spec.device_class_name;
    let budgets: Vec<Budget> = plan
        .desired
        .quotas
        .iter()
        .zip(&after.quotas)
        .map(|(quota, cached)| Budget::of(quota, cached.as_deref(), class))
        .collect();
    let mut templates: BTreeMap<String, Vec<(String, Amount)>> = BTreeMap::new();
    for template in &plan.desired.templates {
        let namespace = template.namespace().unwrap_or_default();
        templates.entry(namespace).or_default().push((template.name_any(), Amount::charge(template, class)));
    }
    let (teams, summary) = crate::logic::teams::teams(&budgets, &templates, capacity);
    (teams, Some(summary))
}
