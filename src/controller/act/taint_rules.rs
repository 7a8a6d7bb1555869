//! remediation (side effects): writes and deletes one config's DeviceTaintRules as `crate::logic::remediation` decides,
//! with an event for each node remediated, released or newly held back. Rules are dynamic objects in the version
//! the server serves (found at start), applied only when the cache does not already hold them.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;

use super::publish::publish;
use crate::api::labels::{LABEL_CONFIG, MANAGER};
use crate::api::{NeuronDRAConfigStatus, RemediationStatus};
use crate::cluster::NodeView;
use crate::cluster::taint_rule::TaintRuleView;
use crate::controller::Context;
use crate::controller::act::apply::{ApplyError, Outcome};
use crate::controller::plan::{Mode, Plan};
use crate::logic::nodes::NodeFilter;
use crate::logic::remediation::{self, Decision};
use crate::logic::text::first_of;

/// Held-back nodes per config at the last reconcile, so an event marks a change, not every reconcile.
#[derive(Default)]
pub struct Memory {
    held_back: Mutex<HashMap<String, BTreeSet<String>>>,
}

impl Memory {
    pub fn forget(&self, config: &str) {
        self.held_back.lock().expect("not poisoned").remove(config);
    }
}

/// What one reconcile did: the status to report and the writes that failed.
pub struct Remediation {
    pub status: Option<RemediationStatus>,
    pub errors: Vec<ApplyError>,
}

/// Remediates the failing nodes `plan` selects under its policy, and releases the rest. Paused: nothing is
/// written and the status stays as it was.
pub async fn remediate(
    ctx: &Context,
    plan: &Plan,
    previous: Option<&NeuronDRAConfigStatus>,
    reference: &ObjectReference,
) -> Remediation {
    let config = &plan.config;
    if plan.mode == Mode::Paused {
        return Remediation { status: previous.and_then(|s| s.remediation.clone()), errors: Vec::new() };
    }
    let existing = ours(ctx, &config.name);
    let (Some(policy), Some(resource)) = (&config.spec.remediation, ctx.taint_rules.as_ref()) else {
        let errors = release(ctx, reference, &existing, &BTreeSet::new(), |_| "remediation is off".into()).await;
        return Remediation { status: None, errors };
    };

    let remediated: BTreeSet<String> =
        existing.iter().filter_map(|r| remediation::rule_node(r)).map(String::from).collect();
    // Nodes an older config serves are that config's to remediate.
    let filter = NodeFilter::new(&config.spec);
    let nodes = ctx.stores.nodes.state();
    let eligible: Vec<&NodeView> = nodes
        .iter()
        .filter(|n| filter.selects(n.labels()) && !plan.conflicts.nodes.contains_key(&n.name_any()))
        .map(AsRef::as_ref)
        .collect();
    let decision = remediation::decide(policy, &eligible, &remediated);

    let api = Api::<TaintRuleView>::all_with(ctx.client.clone(), resource);
    let mut errors = Vec::new();
    let mut failed = BTreeSet::new();
    let mut wanted = BTreeSet::new();
    for problem in &decision.remediate {
        let desired = remediation::rule(config, &resource.api_version, problem, decision.effect);
        let name = desired.name_any();
        let cached = existing.iter().find(|r| r.name_any() == name).map(AsRef::as_ref);
        match ctx.applier.ensure_as(resource, &api, &desired, cached, MANAGER).await {
            Ok(Outcome::Created) => {
                let note = format!(
                    "node {} reports {} ({}): its Neuron devices are tainted {} by DeviceTaintRule {name}",
                    problem.node,
                    problem.condition,
                    problem.reason,
                    decision.effect.as_str()
                );
                publish(ctx, reference, EventType::Warning, "Remediated", "Remediate", note).await;
            }
            Ok(_) => {}
            Err(error) => {
                failed.insert(problem.node.clone());
                errors.push(error);
            }
        }
        wanted.insert(name);
    }
    let why = |node: &str| released_because(node, &decision, &eligible);
    errors.extend(release(ctx, reference, &existing, &wanted, why).await);
    held_back_events(ctx, reference, previous, &config.name, &decision).await;
    Remediation { status: Some(remediation::status(&config.name, &decision, &failed)), errors }
}

/// Deletes every rule of a config that is going away.
pub async fn release_all(ctx: &Context, reference: &ObjectReference, config: &str) -> Vec<ApplyError> {
    let existing = ours(ctx, config);
    release(ctx, reference, &existing, &BTreeSet::new(), |_| "the config is being deleted".into()).await
}

/// This config's rules in the cache (none where the server serves no DeviceTaintRules).
fn ours(ctx: &Context, config: &str) -> Vec<Arc<TaintRuleView>> {
    let mut rules: Vec<Arc<TaintRuleView>> = ctx
        .stores
        .taint_rules
        .state()
        .into_iter()
        .filter(|r| r.labels().get(LABEL_CONFIG).map(String::as_str) == Some(config))
        .collect();
    rules.sort_by_key(|r| r.name_any());
    rules
}

/// Deletes the rules in `existing` not named in `wanted`, one event each, saying `why` the node was released.
async fn release(
    ctx: &Context,
    reference: &ObjectReference,
    existing: &[Arc<TaintRuleView>],
    wanted: &BTreeSet<String>,
    why: impl Fn(&str) -> String,
) -> Vec<ApplyError> {
    let Some(resource) = ctx.taint_rules.as_ref() else { return Vec::new() };
    let api = Api::<TaintRuleView>::all_with(ctx.client.clone(), resource);
    let mut errors = Vec::new();
    for rule in existing.iter().filter(|r| !wanted.contains(&r.name_any())) {
        match ctx.applier.delete_as(resource, &api, rule.as_ref()).await {
            Ok(true) => {
                let node = remediation::rule_node(rule).unwrap_or_default();
                let note = format!("node {node} released ({}): DeviceTaintRule {} deleted", why(node), rule.name_any());
                publish(ctx, reference, EventType::Normal, "Released", "Remediate", note).await;
            }
            Ok(false) => {}
            Err(error) => errors.push(error),
        }
    }
    errors
}

fn released_because(node: &str, decision: &Decision, eligible: &[&NodeView]) -> String {
    if decision.held_back.iter().any(|p| p.node == node) {
        format!("over the budget of {} nodes", decision.budget)
    } else if eligible.iter().any(|n| n.name_any() == node) {
        "its Neuron hardware problem cleared".into()
    } else {
        "the node is gone or no longer selected".into()
    }
}

/// A Warning when nodes are newly held back by the budget; nothing while the set is unchanged.
async fn held_back_events(
    ctx: &Context,
    reference: &ObjectReference,
    previous: Option<&NeuronDRAConfigStatus>,
    config: &str,
    decision: &Decision,
) {
    let now: BTreeSet<String> = decision.held_back.iter().map(|p| p.node.clone()).collect();
    let before = {
        let mut seen = ctx.remediation.held_back.lock().expect("not poisoned");
        seen.insert(config.to_string(), now.clone()).unwrap_or_else(|| {
            // After a restart: what the status already lists is not news.
            let listed = previous.and_then(|s| s.remediation.as_ref()).map(|r| r.held_back_nodes.as_slice());
            listed.unwrap_or_default().iter().map(|n| n.node.clone()).collect()
        })
    };
    let new: Vec<&str> = now.difference(&before).map(String::as_str).collect();
    if new.is_empty() {
        return;
    }
    let note = format!(
        "{} nodes report a Neuron hardware problem but the budget of {} nodes is spent; held back: {}",
        decision.remediate.len() + decision.held_back.len(),
        decision.budget,
        first_of(&new, 10, ", ")
    );
    publish(ctx, reference, EventType::Warning, "RemediationHeldBack", "Remediate", note).await;
}
