//! Remediation's part of the plan: the DeviceTaintRules this config wants (`crate::logic::remediation` decides
//! which failing nodes get one under the budget); the rules it has and does not want go with the pass's unclaimed
//! objects.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;

use crate::api::{NeuronDRAConfigStatus, RemediationStatus};
use crate::cluster::NodeView;
use crate::cluster::taint_rule::TaintRuleView;
use crate::controller::pure::snapshot::Snapshot;
use crate::logic::conflict::Conflicts;
use crate::logic::remediation::{self, Decision, Problem};
use crate::logic::validate::ValidatedConfig;

/// What remediation does in one reconcile.
#[derive(Debug, Clone)]
pub enum Remediation {
    /// Paused: nothing is written and the status stays as it was.
    Unchanged(Option<RemediationStatus>),
    /// No policy (or no DeviceTaintRules served): the config's rules, if any, all go.
    Off,
    On(Decided),
}

/// The decision over the nodes this config may remediate, and the rules it wants.
#[derive(Debug, Clone)]
pub struct Decided {
    pub decision: Decision,
    /// One rule per node in `decision.remediate`, in its order, then the rules of the clearing nodes.
    pub rules: Vec<TaintRuleView>,
    /// The nodes the config selects and no older config serves.
    pub eligible: BTreeSet<String>,
}

/// Decides remediation for `config` over the snapshot. Nodes an older config serves are that config's to remediate.
pub fn decide(
    config: &ValidatedConfig,
    paused: bool,
    conflicts: &Conflicts,
    previous: Option<&NeuronDRAConfigStatus>,
    snapshot: &Snapshot,
    taint_rules: &[Arc<TaintRuleView>],
    now: i64,
) -> Remediation {
    if paused {
        return Remediation::Unchanged(previous.and_then(|s| s.remediation.clone()));
    }
    let (Some(policy), Some(resource)) = (&config.spec.remediation, snapshot.taint_rule_resource.as_ref()) else {
        return Remediation::Off;
    };
    let remediated: BTreeSet<String> =
        taint_rules.iter().filter_map(|r| remediation::rule_node(r)).map(String::from).collect();
    let selected = snapshot.selected_nodes(config);
    let eligible: Vec<&NodeView> =
        selected.iter().filter(|n| !conflicts.nodes.contains_key(&n.name_any())).map(AsRef::as_ref).collect();
    let observed = remediation::observed_in(previous.and_then(|s| s.remediation.as_ref()));
    let decision = remediation::decide(policy, &eligible, &remediated, &observed, now);
    let mut rules: Vec<TaintRuleView> = decision
        .remediate
        .iter()
        .map(|problem| remediation::rule(config, &resource.api_version, problem, decision.effect))
        .collect();
    // A clearing node keeps the rule it has, as it is.
    let clearing = taint_rules
        .iter()
        .filter(|r| remediation::rule_node(r).is_some_and(|n| decision.clearing.iter().any(|c| c == n)));
    rules.extend(clearing.map(|r| TaintRuleView::clone(r)));
    Remediation::On(Decided { rules, eligible: eligible.iter().map(|n| n.name_any()).collect(), decision })
}

impl Remediation {
    /// The rules the config wants in place.
    pub fn rules(&self) -> &[TaintRuleView] {
        match self {
            Remediation::On(decided) => &decided.rules,
            _ => &[],
        }
    }

    /// The node's problem, with the name of its rule, for each rule the config wants.
    pub fn remediated(&self) -> impl Iterator<Item = (&Problem, &TaintRuleView)> {
        let decided = match self {
            Remediation::On(decided) => Some(decided),
            _ => None,
        };
        decided.into_iter().flat_map(|d| d.decision.remediate.iter().zip(&d.rules))
    }

    /// Why a node's rule is deleted.
    pub fn released_because(&self, node: &str) -> String {
        let Remediation::On(Decided { decision, eligible, .. }) = self else {
            return "remediation is off".into();
        };
        if decision.held_back.iter().any(|p| p.node == node) {
            format!("over the budget of {} nodes", decision.budget)
        } else if eligible.contains(node) {
            "its Neuron hardware problem cleared".into()
        } else {
            "the node is gone or no longer selected".into()
        }
    }

    /// When to look again without an event: a waiting node's `problemFor` or a clearing node's `clearFor` ends.
    pub fn recheck(&self) -> Option<std::time::Duration> {
        let Remediation::On(decided) = self else { return None };
        decided.decision.recheck.map(|seconds| std::time::Duration::from_secs(seconds + 1))
    }

    /// `status.remediation`, given the nodes whose rule could not be written (not remediated after all).
    pub fn status(&self, config: &str, failed: &BTreeSet<String>) -> Option<RemediationStatus> {
        match self {
            Remediation::Unchanged(status) => status.clone(),
            Remediation::Off => None,
            Remediation::On(decided) => Some(remediation::status(config, &decided.decision, failed)),
        }
    }
}
