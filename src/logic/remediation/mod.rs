//! remediation (pure): which failing nodes get their Neuron devices tainted under `spec.remediation`, and the
//! DeviceTaintRule that does it. A node fails when it reports a Neuron hardware problem through a node condition:
//! `NeuronHealth=True` (node problem detector) or `AcceleratedHardwareReady=False` (EKS node monitoring agent).
//!
//! Who gets the budget when more nodes fail than it allows is decided the same way every time: nodes already
//! remediated first (a remediated node is never swapped for another, so taints do not flap), then the problem the
//! operator observed first, then the node name. Observed, not the condition's last transition: the plugin writes
//! that condition, and a forged old time would move its node ahead of others (#50.5). The time of observation is
//! kept in the config's status (`observed`), so an operator restart keeps the order of the nodes it lists.
//!
//! Hysteresis: a problem must have lasted `problemFor` before a node is remediated, and a remediated node's
//! conditions must have been clear for `clearFor` before its rule goes (both from the conditions' last transition
//! times, so an operator restart changes nothing). Until then the node waits, or keeps its rule (`clearing`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::core::{Object, TypeMeta};

use crate::api::{RemediatedNode, RemediationEffect, RemediationPolicy, RemediationStatus};
use crate::cluster::NodeView;
use crate::cluster::taint_rule::{TaintRuleSpec, TaintRuleView, TaintSelector};
use crate::logic::desired::{self, NEURON_DRIVER};
use crate::logic::health::MAX_LISTED;
use crate::logic::validate::ValidatedConfig;

/// The key of the operator's taints; the value is the condition's reason.
pub const TAINT_KEY: &str = "neurondra.io/hardware-problem";

/// A Neuron hardware problem a node reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub node: String,
    /// The condition type that reports it.
    pub condition: String,
    pub reason: String,
    /// The condition's last transition.
    pub since: Option<Time>,
    /// When the operator first observed the problem (seconds): what the budget orders by.
    pub observed: i64,
}

/// The node's Neuron hardware problem, if it reports one; with both conditions, the older one.
pub fn problem(node: &NodeView) -> Option<Problem> {
    node.status
        .conditions
        .iter()
        .filter(|c| c.reports_hardware_problem())
        .map(|c| Problem {
            node: node.name_any(),
            condition: c.type_.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            since: c.last_transition_time.clone(),
            observed: 0,
        })
        .min_by_key(|p| (p.since.is_none(), p.since.as_ref().map(|t| t.0)))
}

/// When a remediated node's Neuron conditions last turned healthy: the latest transition among those present and
/// clear; None when it reports none of them (then nothing can say how long it has been clear).
pub fn cleared_since(node: &NodeView) -> Option<i64> {
    let conditions =
        node.status.conditions.iter().filter(|c| c.is_hardware_condition() && !c.reports_hardware_problem());
    conditions.filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0.as_second())).max()
}

/// Which failing nodes are remediated and which are held back by the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub effect: RemediationEffect,
    /// The budget in nodes.
    pub budget: usize,
    /// In budget order.
    pub remediate: Vec<Problem>,
    /// In budget order: the next to be remediated first.
    pub held_back: Vec<Problem>,
    /// Failing for less than `problemFor`: not remediated yet.
    pub waiting: Vec<Problem>,
    /// Remediated nodes whose problem cleared less than `clearFor` ago: they keep their rule meanwhile.
    pub clearing: Vec<String>,
    /// When a waiting node's `problemFor` or a clearing node's `clearFor` ends: look again then.
    pub recheck: Option<u64>,
}

/// Decides over the nodes this config may remediate (`nodes`), given the nodes its rules cover now
/// (`remediated`) and when the operator first observed each node's problem (`observed`, from the last status; a
/// problem not there is observed `now`), at `now` (seconds). Nodes that stopped failing (for `clearFor`) or are no
/// longer among `nodes` are simply not in the result: their rules go.
pub fn decide(
    policy: &RemediationPolicy,
    nodes: &[&NodeView],
    remediated: &BTreeSet<String>,
    observed: &BTreeMap<String, i64>,
    now: i64,
) -> Decision {
    let budget = policy.budget(nodes.len());
    let problem_for = policy.problem_seconds().unwrap_or(0) as i64;
    let clear_for = policy.clear_seconds().unwrap_or(0) as i64;
    let (mut failing, mut waiting, mut clearing, mut ends) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for node in nodes {
        let name = node.name_any();
        match problem(node) {
            Some(mut problem) => {
                problem.observed = observed.get(&name).copied().filter(|at| *at <= now).unwrap_or(now);
                // Known since when: it waits out `problemFor`; unknown: acted on at once.
                let ready_at = problem.since.as_ref().map(|t| t.0.as_second() + problem_for);
                match ready_at.filter(|at| *at > now && !remediated.contains(&name)) {
                    Some(at) => {
                        ends.push(at);
                        waiting.push(problem);
                    }
                    None => failing.push(problem),
                }
            }
            None if remediated.contains(&name) => {
                if let Some(at) = cleared_since(node).map(|since| since + clear_for).filter(|at| *at > now) {
                    ends.push(at);
                    clearing.push(name);
                }
            }
            None => {}
        }
    }
    let recheck = ends.iter().min().map(|at| (at - now) as u64);
    // Already remediated, then observed first, then by name.
    failing.sort_by(|a, b| {
        let key = |p: &Problem| (!remediated.contains(&p.node), p.observed);
        key(a).cmp(&key(b)).then_with(|| a.node.cmp(&b.node))
    });
    // A percentage follows the fleet's size: when fewer nodes are selected, the nodes already remediated keep their
    // rule (a smaller fleet must not put known-bad devices back in service); only new ones wait for room. A count
    // lowered below what is remediated is the user's choice, and releases the most recent.
    let kept = match policy.max_nodes {
        IntOrString::String(_) => failing.iter().filter(|p| remediated.contains(&p.node)).count(),
        IntOrString::Int(_) => 0,
    };
    // Clearing nodes keep their rule, and their place in the budget.
    let room = budget.saturating_sub(clearing.len()).max(kept);
    let held_back = failing.split_off(room.min(failing.len()));
    Decision { effect: policy.effect, budget, remediate: failing, held_back, waiting, clearing, recheck }
}

/// The rule's name: `<config>.<node>`. Config names have no dots, so two configs never share one; a name over
/// 253 characters is cut and ends in a hash of the node name.
pub fn rule_name(config: &str, node: &str) -> String {
    let name = format!("{config}.{node}");
    if name.len() <= 253 {
        return name;
    }
    let cut = name[..236].trim_end_matches(['-', '.']);
    format!("{cut}-{}", desired::short_hash(&node))
}

/// A condition reason as a taint value (a label value: at most 63 characters of `[-A-Za-z0-9_.]`, alphanumeric
/// at both ends); None when nothing is left.
pub fn taint_value(reason: &str) -> Option<String> {
    let cleaned: String =
        reason.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let trim = |s: &str| s.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string();
    let value = trim(&trim(&cleaned).chars().take(63).collect::<String>());
    (!value.is_empty()).then_some(value)
}

/// The DeviceTaintRule that taints every Neuron device of the problem's node (its ResourceSlice pool is named
/// after the node), in `api_version` (v1alpha3 and v1 share this shape).
pub fn rule(
    config: &ValidatedConfig,
    api_version: &str,
    problem: &Problem,
    effect: RemediationEffect,
) -> TaintRuleView {
    Object {
        types: Some(TypeMeta { api_version: api_version.into(), kind: crate::cluster::taint_rule::KIND.into() }),
        metadata: desired::owned_meta(config, &rule_name(&config.name, &problem.node), None),
        spec: TaintRuleSpec {
            device_selector: Some(TaintSelector {
                driver: Some(NEURON_DRIVER.into()),
                pool: Some(problem.node.clone()),
                ..TaintSelector::default()
            }),
            taint: DeviceTaint {
                key: TAINT_KEY.into(),
                value: taint_value(&problem.reason),
                effect: effect.as_str().into(),
                time_added: None,
            },
        },
        status: None,
    }
}

/// The status of a decision; `failed` are nodes whose rule could not be written (not remediated after all).
pub fn status(config: &str, decision: &Decision, failed: &BTreeSet<String>) -> RemediationStatus {
    let entry = |p: &Problem, rule: Option<String>| RemediatedNode {
        node: p.node.clone(),
        condition: p.condition.clone(),
        reason: p.reason.clone(),
        since: p.since.clone(),
        observed: k8s_openapi::jiff::Timestamp::from_second(p.observed).ok().map(Time),
        rule,
    };
    let remediated: Vec<&Problem> = decision.remediate.iter().filter(|p| !failed.contains(&p.node)).collect();
    RemediationStatus {
        effect: decision.effect.as_str().into(),
        max_nodes: decision.budget as i64,
        failing_nodes: (decision.remediate.len() + decision.held_back.len() + decision.waiting.len()) as i64,
        remediated: (remediated.len() + decision.clearing.len()) as i64,
        held_back: decision.held_back.len() as i64,
        waiting: decision.waiting.len() as i64,
        clearing_nodes: decision.clearing.iter().take(MAX_LISTED).cloned().collect(),
        waiting_nodes: decision.waiting.iter().take(MAX_LISTED).map(|p| entry(p, None)).collect(),
        remediated_nodes: remediated
            .iter()
            .take(MAX_LISTED)
            .map(|p| entry(p, Some(rule_name(config, &p.node))))
            .collect(),
        held_back_nodes: decision.held_back.iter().take(MAX_LISTED).map(|p| entry(p, None)).collect(),
    }
}

/// The node a rule of the operator taints (its selector's pool).
pub fn rule_node(rule: &TaintRuleView) -> Option<&str> {
    rule.spec.device_selector.as_ref()?.pool.as_deref()
}

#[cfg(test)]
mod tests;

/// When the operator first observed each node's problem, as the last status lists it (`decide`'s `observed`).
pub fn observed_in(status: Option<&RemediationStatus>) -> BTreeMap<String, i64> {
    let listed =
        status.into_iter().flat_map(|s| s.remediated_nodes.iter().chain(&s.held_back_nodes).chain(&s.waiting_nodes));
    listed.filter_map(|n| n.observed.as_ref().map(|t| (n.node.clone(), t.0.as_second()))).collect()
}
