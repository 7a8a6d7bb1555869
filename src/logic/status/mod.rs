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

pub fn compute(
    previous: Option<&NeuronDRAConfigStatus>,
    observed: &Observation,
    now: Timestamp,
) -> NeuronDRAConfigStatus {
    let mut conditions: Vec<Condition> = Vec::new();
    let generation = observed.generation;
    let set = |conditions: &mut Vec<Condition>, type_: ConditionType, ok: bool, reason: Reason, message: String| {
        let status = if ok { "True" } else { "False" };
        let previous = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_.as_str()));
        let last_transition_time = match previous {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => Time(now),
        };
        conditions.push(Condition {
            type_: type_.as_str().into(),
            status: status.into(),
            reason: reason.as_str().into(),
            message,
            observed_generation: generation,
            last_transition_time,
        });
    };

    let (valid, message) = match &observed.validity {
        Validity::Valid => (true, "the spec is valid".to_string()),
        Validity::InvalidSpec(message) | Validity::Conflict(message) | Validity::Unsupported(message) => {
            (false, message.clone())
        }
        Validity::Unparseable(error) => (false, format!("the operator cannot read this object: {error}")),
    };
    let spec_ok = observed.validity.spec_ok();
    // Another tool's object under a name the config wants: the spec is fine, but it cannot be carried out as is.
    let (reason, message) = match (valid, observed.foreign.join("; ")) {
        (_, foreign) if foreign.is_empty() => (observed.validity.reason(), message),
        (true, foreign) => (Reason::ForeignObject, foreign),
        (false, foreign) => (observed.validity.reason(), format!("{message}; {foreign}")),
    };
    set(&mut conditions, ConditionType::ConfigValid, valid && observed.foreign.is_empty(), reason, message);

    let (driver_ok, driver_reason, driver_message, driver) = match &observed.rollout {
        // Nothing applied this time (an invalid or conflicting spec, the namespace going): the rollout's record is
        // kept as stored, so a halt (or a step in flight) survives until a valid spec brings a new template; were it
        // dropped, fixing a typo would restart the halted revision at the canary.
        Rollout::NotApplied(why) | Rollout::Unfenced(why) => {
            let rollout = previous.and_then(|p| p.driver.as_ref()).and_then(|d| d.rollout.clone());
            let reason =
                if matches!(observed.rollout, Rollout::Unfenced(_)) { Reason::Unfenced } else { Reason::NotApplied };
            (false, reason, why.clone(), rollout.map(|r| DriverStatus { rollout: Some(r), ..Default::default() }))
        }
        Rollout::Applied { status, observed: false } => {
            (false, Reason::Pending, "waiting for the DaemonSet controller".into(), Some(status.clone()))
        }
        Rollout::Applied { status, .. } => {
            let (ok, reason, message) = driver_condition(status);
            (ok, reason, message, Some(status.clone()))
        }
    };
    set(&mut conditions, ConditionType::DriverReady, driver_ok, driver_reason, driver_message);

    let all_present = spec_ok && observed.templates_present == observed.templates_wanted;
    let templates_ok = all_present && observed.classes_missing.is_empty();
    let templates_message = if templates_ok {
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
    let templates_reason = match () {
        () if templates_ok => Reason::Applied,
        () if spec_ok && !observed.templates_foreign.is_empty() => Reason::ForeignObject,
        () if all_present => Reason::DeviceClassMissing,
        () => Reason::Missing,
    };
    set(&mut conditions, ConditionType::TemplatesReady, templates_ok, templates_reason, templates_message);

    if let Some(health) = &observed.health {
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
        set(&mut conditions, ConditionType::DevicesHealthy, healthy, reason, message);
    }

    let ready = valid && driver_ok && templates_ok;
    let ready_message =
        if ready { "the driver is rolled out and every template is in place" } else { "see the other conditions" };
    set(
        &mut conditions,
        ConditionType::Ready,
        ready,
        if ready { Reason::Ready } else { Reason::NotReady },
        ready_message.into(),
    );
    let [reconciling, stalled] = Progress::of(&conditions, observed.paused).conditions();
    for (type_, (status, reason, message)) in
        [(ConditionType::Reconciling, reconciling), (ConditionType::Stalled, stalled)]
    {
        set(&mut conditions, type_, status, reason, message);
    }

    let phase = if observed.paused {
        Phase::Paused
    } else if !valid || observed.health.as_ref().is_some_and(|h| h.summary.unhealthy > 0 || !h.node_issues.is_empty()) {
        Phase::Degraded
    } else if ready {
        Phase::Ready
    } else {
        Phase::Progressing
    };

    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    let health = observed.health.clone().unwrap_or_default();
    NeuronDRAConfigStatus {
        observed_generation: generation,
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
        profiles: observed
            .profiles
            .iter()
            .map(|profile| ProfileStatus {
                capacity: observed
                    .capacity
                    .iter()
                    .filter(|c| profile.templates.contains(&c.template))
                    .cloned()
                    .collect(),
                ..profile.clone()
            })
            .collect(),
        remediation: observed.remediation.clone(),
        teams: observed.teams.clone(),
        team_summary: observed.team_summary.clone(),
    }
}

/// Now, to the second: the API server stores condition times in seconds, so a finer time would never compare equal.
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("current time is in range")
}

#[cfg(test)]
mod tests;
