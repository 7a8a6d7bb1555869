//! status (pure): what was applied and observed, to the config's status. Conditions keep their
//! `lastTransitionTime` unless their status changes, so an unchanged world computes an identical status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

mod conditions;
mod driver;
mod progress;

pub use conditions::{ConditionType, Reason};
pub use driver::driver_condition;
pub use progress::Progress;

use crate::api::{
    DeviceSummary, DriverStatus, NeuronDRAConfigStatus, NodeIssue, Phase, ProfileStatus, RemediationStatus,
    TaintRuleSummary, TeamStatus, TeamSummary, TemplateCapacity, TemplateSummary, UnhealthyDevice,
};

/// Whether the spec can be acted on.
#[derive(Debug, Clone, PartialEq)]
pub enum Validity {
    Valid,
    /// A catalog rule failed: the problems, one per line.
    InvalidSpec(String),
    /// The stored object cannot be read by this build.
    Unparseable(String),
    /// Overlaps an older config; the rest is applied.
    Conflict(String),
    /// Asks for what this Kubernetes server does not support: why, naming the field. Nothing is applied.
    Unsupported(String),
}

impl Validity {
    pub fn reason(&self) -> Reason {
        match self {
            Self::Valid => Reason::Valid,
            Self::InvalidSpec(_) => Reason::InvalidSpec,
            Self::Unparseable(_) => Reason::Unparseable,
            Self::Conflict(_) => Reason::Conflict,
            Self::Unsupported(_) => Reason::Unsupported,
        }
    }

    /// Whether the spec could be read and passed validation (a conflict still applies the rest).
    pub fn spec_ok(&self) -> bool {
        matches!(self, Self::Valid | Self::Conflict(_))
    }
}

/// The reason a stored status gives for one condition, if it is one this build knows.
pub fn condition_reason(status: Option<&NeuronDRAConfigStatus>, type_: ConditionType) -> Option<Reason> {
    let condition = status?.conditions.iter().find(|c| c.type_ == type_.as_str())?;
    Reason::parse(&condition.reason)
}

/// The plugin rollout as the DaemonSet reports it.
// One per reconcile, moved into the status: a box would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Rollout {
    /// Not applied, with why.
    NotApplied(String),
    /// Not applied because the plugin's fences are not in place (`logic::fence`), with how.
    Unfenced(String),
    /// Applied; figures from its status (absent until the DaemonSet controller has looked at it).
    Applied { status: DriverStatus, observed: bool },
}

/// Device health over the selected nodes (see `health`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    pub summary: DeviceSummary,
    pub unhealthy_devices: Vec<UnhealthyDevice>,
    /// Devices with an `effect: None` taint: listed, still counted healthy.
    pub informational_taints: Vec<UnhealthyDevice>,
    /// DeviceTaintRules that taint this config's devices.
    pub taint_rules: Vec<TaintRuleSummary>,
    pub node_issues: Vec<NodeIssue>,
    /// Claims that hold an unhealthy device.
    pub affected_claims: usize,
}

/// Everything the status is computed from.
#[derive(Debug, Clone)]
pub struct Observation {
    pub generation: Option<i64>,
    pub paused: bool,
    pub validity: Validity,
    pub rollout: Rollout,
    /// Templates present and as wanted, over templates wanted.
    pub templates_present: usize,
    pub templates_wanted: usize,
    pub template_namespaces: usize,
    pub profiles: Vec<ProfileStatus>,
    /// Namespaces or templates that are missing, for the message.
    pub templates_missing: Vec<String>,
    /// Objects the config wants that someone else made and the operator left alone, one line each: templates
    /// (`TemplatesReady`), and the rest (`ConfigValid`).
    pub templates_foreign: Vec<String>,
    pub foreign: Vec<String>,
    /// Templates in place that no pod can use yet, because a DeviceClass they claim from does not exist, one line
    /// each (`TemplatesReady`).
    pub classes_missing: Vec<String>,
    pub health: Option<Health>,
    /// Claims and room per template (empty until computed).
    pub capacity: Vec<TemplateCapacity>,
    /// What the remediation policy does (None without one).
    pub remediation: Option<RemediationStatus>,
    /// The team namespaces' budgets, use and room (`logic::teams`), and their totals (None without budgets).
    pub teams: Vec<TeamStatus>,
    pub team_summary: Option<TeamSummary>,
}

impl Observation {
    /// What a pass that judged nothing yet found: the validity and rollout given, no templates, profiles, health,
    /// capacity, remediation or budgets (the rest is filled in by whoever found more).
    pub fn bare(generation: Option<i64>, paused: bool, validity: Validity, rollout: Rollout) -> Self {
        Observation {
            generation,
            paused,
            validity,
            rollout,
            templates_present: 0,
            templates_wanted: 0,
            template_namespaces: 0,
            profiles: Vec::new(),
            templates_missing: Vec::new(),
            templates_foreign: Vec::new(),
            classes_missing: Vec::new(),
            foreign: Vec::new(),
            health: None,
            capacity: Vec::new(),
            remediation: None,
            teams: Vec::new(),
            team_summary: None,
        }
    }
}

/// The status from what was applied and observed: one condition per part, `Ready` over them, kstatus's two over
/// those, the phase, and the figures.
pub fn compute(
    previous: Option<&NeuronDRAConfigStatus>,
    observed: &Observation,
    now: Timestamp,
) -> NeuronDRAConfigStatus {
    let mut conditions = Conditions { previous, generation: observed.generation, now, list: Vec::new() };
    conditions.set(ConditionType::ConfigValid, config_valid(observed));
    let (driver_ready, driver) = driver_ready(previous, &observed.rollout);
    let driver_ok = driver_ready.0;
    conditions.set(ConditionType::DriverReady, driver_ready);
    let templates_ready = templates_ready(observed);
    let templates_ok = templates_ready.0;
    conditions.set(ConditionType::TemplatesReady, templates_ready);
    if let Some(health) = &observed.health {
        conditions.set(ConditionType::DevicesHealthy, devices_healthy(health));
    }
    let valid = observed.validity == Validity::Valid;
    let ready = valid && driver_ok && templates_ok;
    conditions.set(ConditionType::Ready, ready_condition(ready));
    let [reconciling, stalled] = Progress::of(&conditions.list, observed.paused).conditions();
    conditions.set(ConditionType::Reconciling, reconciling);
    conditions.set(ConditionType::Stalled, stalled);
    let mut conditions = conditions.list;
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    status(observed, phase(observed, valid, ready), conditions, driver)
}

/// The conditions as they are set, each keeping its previous `lastTransitionTime` while its status holds.
struct Conditions<'a> {
    previous: Option<&'a NeuronDRAConfigStatus>,
    generation: Option<i64>,
    now: Timestamp,
    list: Vec<Condition>,
}

impl Conditions<'_> {
    fn set(&mut self, type_: ConditionType, (ok, reason, message): (bool, Reason, String)) {
        let status = if ok { "True" } else { "False" };
        let previous = self.previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_.as_str()));
        let last_transition_time = match previous {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => Time(self.now),
        };
        self.list.push(Condition {
            type_: type_.as_str().into(),
            status: status.into(),
            reason: reason.as_str().into(),
            message,
            observed_generation: self.generation,
            last_transition_time,
        });
    }
}

/// ConfigValid: whether the spec is valid, and no other tool's object is in the way.
fn config_valid(observed: &Observation) -> (bool, Reason, String) {
    let (valid, message) = match &observed.validity {
        Validity::Valid => (true, "the spec is valid".to_string()),
        Validity::InvalidSpec(message) | Validity::Conflict(message) | Validity::Unsupported(message) => {
            (false, message.clone())
        }
        Validity::Unparseable(error) => (false, format!("the operator cannot read this object: {error}")),
    };
    // Another tool's object under a name the config wants: the spec is fine, but it cannot be carried out as is.
    let (reason, message) = match (valid, observed.foreign.join("; ")) {
        (_, foreign) if foreign.is_empty() => (observed.validity.reason(), message),
        (true, foreign) => (Reason::ForeignObject, foreign),
        (false, foreign) => (observed.validity.reason(), format!("{message}; {foreign}")),
    };
    (valid && observed.foreign.is_empty(), reason, message)
}

/// DriverReady, and the driver's part of the status.
fn driver_ready(
    previous: Option<&NeuronDRAConfigStatus>,
    rollout: &Rollout,
) -> ((bool, Reason, String), Option<DriverStatus>) {
    match rollout {
        // Nothing applied this time (an invalid or conflicting spec, the namespace going): the rollout's record is
        // kept as stored, so a halt (or a step in flight) survives until a valid spec brings a new template; were it
        // dropped, fixing a typo would restart the halted revision at the canary.
        Rollout::NotApplied(why) | Rollout::Unfenced(why) => {
            let kept = previous.and_then(|p| p.driver.as_ref()).and_then(|d| d.rollout.clone());
            let reason = if matches!(rollout, Rollout::Unfenced(_)) { Reason::Unfenced } else { Reason::NotApplied };
            ((false, reason, why.clone()), kept.map(|r| DriverStatus { rollout: Some(r), ..Default::default() }))
        }
        Rollout::Applied { status, observed: false } => {
            ((false, Reason::Pending, "waiting for the DaemonSet controller".into()), Some(status.clone()))
        }
        Rollout::Applied { status, .. } => (driver_condition(status), Some(status.clone())),
    }
}

/// TemplatesReady: every template wanted is in place, and every DeviceClass they claim from exists.
fn templates_ready(observed: &Observation) -> (bool, Reason, String) {
    let spec_ok = observed.validity.spec_ok();
    let all_present = spec_ok && observed.templates_present == observed.templates_wanted;
    let templates_ok = all_present && observed.classes_missing.is_empty();
    let message = if templates_ok {
        format!("{} templates in {} namespaces", observed.templates_present, observed.template_namespaces)
    } else if !spec_ok {
        "not applied: the spec is invalid".into()
    } else if all_present {
        format!("{} templates in place; {}", observed.templates_present, observed.classes_missing.join("; "))
    } else if !observed.templates_foreign.is_empty() {
        format!(
            "{} of {} templates present; {}",
            observed.templates_present,
            observed.templates_wanted,
            observed.templates_foreign.join("; ")
        )
    } else {
        format!(
            "{} of {} templates present; missing: {}",
            observed.templates_present,
            observed.templates_wanted,
            observed.templates_missing.join(", ")
        )
    };
    let reason = match () {
        () if templates_ok => Reason::Applied,
        () if spec_ok && !observed.templates_foreign.is_empty() => Reason::ForeignObject,
        () if all_present => Reason::DeviceClassMissing,
        () => Reason::Missing,
    };
    (templates_ok, reason, message)
}

/// DevicesHealthy: no unhealthy device and no node issue.
fn devices_healthy(health: &Health) -> (bool, Reason, String) {
    let healthy = health.summary.unhealthy == 0 && health.node_issues.is_empty();
    let message = format!(
        "{} of {} devices healthy on {} nodes; {} node issues; {} claims hold an unhealthy device",
        health.summary.healthy,
        health.summary.total,
        health.summary.nodes,
        health.node_issues.len(),
        health.affected_claims
    );
    let reason = if healthy { Reason::AllHealthy } else { Reason::Unhealthy };
    (healthy, reason, message)
}

/// Ready: a valid spec, the driver rolled out and every template in place (device health is not part of it).
fn ready_condition(ready: bool) -> (bool, Reason, String) {
    let message =
        if ready { "the driver is rolled out and every template is in place" } else { "see the other conditions" };
    (ready, if ready { Reason::Ready } else { Reason::NotReady }, message.into())
}

/// The phase: paused, else degraded (an invalid spec, or an unhealthy device or node), ready, or progressing.
fn phase(observed: &Observation, valid: bool, ready: bool) -> Phase {
    if observed.paused {
        Phase::Paused
    } else if !valid || observed.health.as_ref().is_some_and(|h| h.summary.unhealthy > 0 || !h.node_issues.is_empty()) {
        Phase::Degraded
    } else if ready {
        Phase::Ready
    } else {
        Phase::Progressing
    }
}

/// The status with its conditions and phase, and the figures as observed.
fn status(
    observed: &Observation,
    phase: Phase,
    conditions: Vec<Condition>,
    driver: Option<DriverStatus>,
) -> NeuronDRAConfigStatus {
    let health = observed.health.clone().unwrap_or_default();
    NeuronDRAConfigStatus {
        observed_generation: observed.generation,
        phase: Some(phase),
        conditions,
        driver,
        devices: observed.health.as_ref().map(|h| h.summary.clone()),
        unhealthy_devices: health.unhealthy_devices,
        informational_taints: health.informational_taints,
        taint_rules: health.taint_rules,
        node_issues: health.node_issues,
        templates: Some(TemplateSummary {
            namespaces: observed.template_namespaces as i64,
            count: observed.templates_present as i64,
            min_available: observed.capacity.iter().map(|c| c.available).min(),
        }),
        profiles: profiles_with_capacity(observed),
        remediation: observed.remediation.clone(),
        teams: observed.teams.clone(),
        team_summary: observed.team_summary.clone(),
    }
}

/// Each profile with the room of its templates.
fn profiles_with_capacity(observed: &Observation) -> Vec<ProfileStatus> {
    let capacity_of = |profile: &ProfileStatus| {
        observed.capacity.iter().filter(|c| profile.templates.contains(&c.template)).cloned().collect()
    };
    observed
        .profiles
        .iter()
        .map(|profile| ProfileStatus { capacity: capacity_of(profile), ..profile.clone() })
        .collect()
}

/// Now, to the second: the API server stores condition times in seconds, so a finer time would never compare equal.
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("current time is in range")
}

#[cfg(test)]
mod tests;
