//! events: what the operator tells users through Kubernetes Events on the config, once per change. Every event of
//! a pass is derived at its end from the plan and what the act did (`outcome`), and published beside the status
//! write (`act::publish`).

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::events::{Event, EventType};

use super::failure::Category;
use super::plan::{Decided, Mode, Plan, Remediation, Step};
use super::report::{Report, Written};
use crate::api::NeuronDRAConfigStatus;
use crate::cluster::taint_rule::{KIND as TAINT_RULE, TaintRuleView};
use crate::logic::health;
use crate::logic::remediation::rule_node;
use crate::logic::rollout::{self, Change};
use crate::logic::status::{ConditionType, Reason, Validity, condition_reason};
use crate::logic::text::first_of;
pub use reason::EventReason;

pub fn event(type_: EventType, reason: EventReason, action: &str, note: String) -> Event {
    Event { type_, reason: reason.as_str().into(), note: Some(note), action: action.into(), secondary: None }
}

/// What earlier passes over one config found of the states its events report changes of (unhealthy devices,
/// claims on them, nodes held back), so a pass tells changes, not states. None until a pass since the operator
/// started has looked: the stored status stands in, so that a restart tells no news.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remembered {
    pub unhealthy: Option<BTreeSet<(String, String)>>,
    pub in_use: Option<BTreeSet<String>>,
    pub held_back: Option<BTreeSet<String>>,
}

/// What one pass over a valid config tells: a new conflict, what remediation did, the rollout's step, halt or
/// completion, devices that turned unhealthy or recovered, and what the pass changed.
pub struct Pass<'a> {
    pub plan: &'a Plan,
    pub report: &'a Report,
    /// The rollout step the pass took, if the plugin is still applied (`outcome::step`).
    pub step: Option<&'a Step>,
    pub previous: Option<&'a NeuronDRAConfigStatus>,
    pub assessment: &'a health::Assessment,
    /// The config's DeviceTaintRules as the pass found them.
    pub rules: &'a [Arc<TaintRuleView>],
    /// Templates whose DeviceClass does not exist, one line each (`Observation::classes_missing`).
    pub classes_missing: &'a [String],
}

/// The pass's events, in order; `seen` is what earlier passes found, updated to what this one found.
pub fn of_pass(pass: &Pass, seen: &mut Remembered) -> Vec<Event> {
    let plan = pass.plan;
    let mut events = Vec::new();
    if let Validity::Conflict(message) = plan.validity()
        && condition_reason(pass.previous, ConditionType::ConfigValid) != Some(Reason::Conflict)
    {
        events.push(event(EventType::Warning, EventReason::Condition(Reason::Conflict), "Apply", message));
    }
    // Another tool's object under a name the config wants: said once, when it is first found.
    let foreign: Vec<String> = [false, true].into_iter().flat_map(|t| pass.report.foreign_lines(t)).collect();
    let told = [ConditionType::ConfigValid, ConditionType::TemplatesReady]
        .into_iter()
        .any(|c| condition_reason(pass.previous, c) == Some(Reason::ForeignObject));
    if !foreign.is_empty() && !told {
        events.push(event(
            EventType::Warning,
            EventReason::Condition(Reason::ForeignObject),
            "Apply",
            foreign.join("; "),
        ));
    }
    if !pass.classes_missing.is_empty()
        && condition_reason(pass.previous, ConditionType::TemplatesReady) != Some(Reason::DeviceClassMissing)
    {
        let note = pass.classes_missing.join("; ");
        events.push(event(EventType::Warning, EventReason::Condition(Reason::DeviceClassMissing), "Apply", note));
    }
    events.extend(remediated(&plan.remediation, pass.report));
    let why = |node: &str| plan.remediation.released_because(node);
    events.extend(released(pass.report, pass.rules, why));
    if let Remediation::On(decided) = &plan.remediation {
        events.extend(held_back(&mut seen.held_back, pass.previous, decided));
    }
    if let Some(step) = pass.step {
        events.extend(rollout(step));
    }
    events.extend(health(seen, pass.previous, pass.assessment));
    if plan.mode == Mode::Normal {
        events.extend(changes(pass.report));
    }
    events
}

/// What a cleanup pass tells: the rules released and everything deleted.
pub fn of_cleanup(report: &Report, rules: &[Arc<TaintRuleView>]) -> Vec<Event> {
    let mut events = released(report, rules, |_| "the config is being deleted".into());
    events.extend(changes(report));
    events
}

/// One Warning event per category of failure (`Forbidden`, `Conflict`, ...): see `grouped`.
pub fn failures(failures: Vec<(Category, String)>) -> Vec<Event> {
    grouped(failures)
        .into_iter()
        .map(|(category, note)| event(EventType::Warning, EventReason::Failure(category), "Reconcile", note))
        .collect()
}

/// The failures of one pass by category (in the order of their names), each with its first message and how many
/// more failed alike. A pass that fails a hundred writes (the API server going away, or throttling it) would
/// otherwise post a hundred events, each one more request to a server that is already failing them.
fn grouped(failures: Vec<(Category, String)>) -> Vec<(Category, String)> {
    let mut by_category: std::collections::BTreeMap<&'static str, (Category, String, usize)> = Default::default();
    for (category, note) in failures {
        by_category.entry(category.as_str()).or_insert((category, note, 0)).2 += 1;
    }
    by_category
        .into_values()
        .map(|(category, first, count)| match count {
            1 => (category, first),
            n => (category, format!("{first} (and {} more alike)", n - 1)),
        })
        .collect()
}

/// One Normal event per kind of change (`Created`, `Updated`, `Replaced`, `Deleted`), naming a bounded list.
/// Remediation's rules have events of their own.
fn changes(report: &Report) -> Vec<Event> {
    const SHOWN: usize = 8;
    let operands = |items: &[Written]| -> Vec<String> {
        items.iter().filter(|w| w.kind != TAINT_RULE).map(ToString::to_string).collect()
    };
    [
        (EventReason::Created, operands(&report.created)),
        (EventReason::Updated, operands(&report.updated)),
        (EventReason::Replaced, operands(&report.replaced)),
        (EventReason::Deleted, operands(&report.deleted)),
    ]
    .into_iter()
    .filter(|(_, items)| !items.is_empty())
    .map(|(reason, items)| {
        event(EventType::Normal, reason, "Apply", format!("{} {}", reason.as_str(), first_of(&items, SHOWN, ", ")))
    })
    .collect()
}

/// A Warning for each node whose rule this pass created.
fn remediated(remediation: &Remediation, report: &Report) -> Vec<Event> {
    let Remediation::On(decided) = remediation else { return Vec::new() };
    let created: BTreeSet<&str> = Report::names_of(&report.created, TAINT_RULE).collect();
    remediation
        .remediated()
        .filter(|(_, rule)| created.contains(rule.name_any().as_str()))
        .map(|(problem, rule)| {
            let note = format!(
                "node {} reports {} ({}): its Neuron devices are tainted {} by DeviceTaintRule {}",
                problem.node,
                problem.condition,
                problem.reason,
                decided.decision.effect.as_str(),
                rule.name_any()
            );
            event(EventType::Warning, EventReason::Remediated, "Remediate", note)
        })
        .collect()
}

/// A Normal event for each rule this pass deleted, saying `why` its node was released.
fn released(report: &Report, rules: &[Arc<TaintRuleView>], why: impl Fn(&str) -> String) -> Vec<Event> {
    Report::names_of(&report.deleted, TAINT_RULE)
        .map(|name| {
            let node = rules.iter().find(|r| r.name_any() == name).and_then(|r| rule_node(r)).unwrap_or_default();
            let note = format!("node {node} released ({}): DeviceTaintRule {name} deleted", why(node));
            event(EventType::Normal, EventReason::Released, "Remediate", note)
        })
        .collect()
}

/// A Warning when nodes are newly held back by the budget; nothing while the set is unchanged.
fn held_back(
    seen: &mut Option<BTreeSet<String>>,
    previous: Option<&NeuronDRAConfigStatus>,
    decided: &Decided,
) -> Option<Event> {
    let decision = &decided.decision;
    let now: BTreeSet<String> = decision.held_back.iter().map(|p| p.node.clone()).collect();
    // After a restart: what the stored status already lists is not news.
    let before = seen.replace(now.clone()).unwrap_or_else(|| {
        let listed = previous.and_then(|s| s.remediation.as_ref()).map(|r| r.held_back_nodes.iter());
        listed.into_iter().flatten().map(|n| n.node.clone()).collect()
    });
    let new: Vec<&str> = now.difference(&before).map(String::as_str).collect();
    if new.is_empty() {
        return None;
    }
    let note = format!(
        "{} nodes report a Neuron hardware problem but the budget of {} nodes is spent; held back: {}",
        decision.remediate.len() + decision.held_back.len(),
        decision.budget,
        first_of(&new, 10, ", ")
    );
    Some(event(EventType::Warning, EventReason::RemediationHeldBack, "Remediate", note))
}

/// One event per step, halt and completion. The recorder folds events of one reason, action and related object
/// into a series that keeps the first note, so each names the target revision (related) and its step (action).
fn rollout(step: &Step) -> Option<Event> {
    let status = step.status.as_ref()?;
    let (type_, reason, action, note) = match step.change.as_ref()? {
        Change::Step { step, nodes } => {
            let what = if *step == 1 { "canary".to_string() } else { format!("step {step}") };
            let note = format!("{what}: moving {} to {}", nodes.join(", "), status.version);
            (EventType::Normal, EventReason::RolloutStep, format!("Step{step}"), note)
        }
        Change::Halted => {
            (EventType::Warning, EventReason::RolloutHalted, "Halt".into(), rollout::halt_message(status))
        }
        Change::Complete => {
            let note = format!("every node runs the plugin {}", status.version);
            (EventType::Normal, EventReason::RolloutComplete, "Complete".into(), note)
        }
        Change::Back { nodes } => {
            // Each node moves back once: the first names the step.
            let note = format!("rolling back: moving {} back to the last good version", nodes.join(", "));
            let action = format!("Back-{}", nodes.first().map_or("", String::as_str));
            (EventType::Normal, EventReason::RolloutBack, action, note)
        }
        Change::RolledBack => {
            let note = format!("every node that got {} runs the last good version again", status.version);
            (EventType::Normal, EventReason::RolledBack, "RolledBack".into(), note)
        }
    };
    Some(Event { type_, reason: reason.as_str().into(), note: Some(note), action, secondary: step.revision.clone() })
}

/// An event when devices turn unhealthy or recover; nothing when the set is unchanged.
fn health(
    seen: &mut Remembered,
    previous: Option<&NeuronDRAConfigStatus>,
    assessment: &health::Assessment,
) -> Vec<Event> {
    let mut events = Vec::new();
    let unhealthy = &assessment.unhealthy;
    let in_use_before = seen.in_use.replace(assessment.affected_claims.clone()).unwrap_or_else(|| {
        previous.iter().flat_map(|s| &s.unhealthy_devices).filter_map(|d| d.claim.clone()).collect()
    });
    let newly_in_use: Vec<&String> = assessment.affected_claims.difference(&in_use_before).collect();
    if !newly_in_use.is_empty() {
        let shown: Vec<&str> = newly_in_use.iter().take(10).map(|c| c.as_str()).collect();
        let note = format!("unhealthy devices are allocated to claims: {}", shown.join(", "));
        events.push(event(EventType::Warning, EventReason::UnhealthyDeviceInUse, "Health", note));
    }
    let before = seen.unhealthy.replace(unhealthy.clone()).unwrap_or_else(|| {
        // After a restart: what the status already reports is not news.
        previous.iter().flat_map(|s| &s.unhealthy_devices).map(|d| (d.node.clone(), d.device.clone())).collect()
    });
    let list = |items: Vec<&(String, String)>| {
        first_of(items.iter().map(|(node, device)| format!("{node}/{device}")), 10, ", ")
    };
    let turned: Vec<_> = unhealthy.difference(&before).collect();
    if !turned.is_empty() {
        let note = format!("devices turned unhealthy: {}", list(turned));
        events.push(event(EventType::Warning, EventReason::DeviceUnhealthy, "Health", note));
    }
    let recovered: Vec<_> = before.difference(unhealthy).collect();
    if !recovered.is_empty() {
        let note = format!("devices recovered: {}", list(recovered));
        events.push(event(EventType::Normal, EventReason::DeviceRecovered, "Health", note));
    }
    events
}

mod reason;
#[cfg(test)]
mod tests;
