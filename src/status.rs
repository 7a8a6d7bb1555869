//! status (pure): what was applied and observed, to the config's status. Conditions keep their
//! `lastTransitionTime` unless their status changes, so an unchanged world computes an identical status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{
    DeviceSummary, DriverStatus, NeuronDRAConfigStatus, NodeIssue, Phase, ProfileStatus, TemplateCapacity,
    TemplateSummary, UnhealthyDevice,
};

pub const READY: &str = "Ready";
pub const CONFIG_VALID: &str = "ConfigValid";
pub const DRIVER_READY: &str = "DriverReady";
pub const TEMPLATES_READY: &str = "TemplatesReady";
pub const DEVICES_HEALTHY: &str = "DevicesHealthy";

/// Whether the spec can be acted on.
#[derive(Debug, Clone, PartialEq)]
pub enum Validity {
    Valid,
    /// Reason (`InvalidSpec`, `Unparseable`) and the problems, one per line.
    Invalid {
        reason: &'static str,
        message: String,
    },
    /// Overlaps an older config; the rest is applied.
    Conflict(String),
}

/// The plugin rollout as the DaemonSet reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rollout {
    /// Not applied, with why.
    NotApplied(String),
    /// Applied; figures from its status (absent until the DaemonSet controller has looked at it).
    Applied { status: DriverStatus, observed: bool },
}

/// Device health over the selected nodes (see `health`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    pub summary: DeviceSummary,
    pub unhealthy_devices: Vec<UnhealthyDevice>,
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
    pub health: Option<Health>,
    /// Claims and room per template (empty until computed).
    pub capacity: Vec<TemplateCapacity>,
}

pub fn compute(
    previous: Option<&NeuronDRAConfigStatus>,
    observed: &Observation,
    now: Timestamp,
) -> NeuronDRAConfigStatus {
    let mut conditions = Vec::new();
    let generation = observed.generation;
    let mut set = |type_: &str, ok: bool, reason: &str, message: String| {
        let status = if ok { "True" } else { "False" };
        let previous = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
        let last_transition_time = match previous {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => Time(now),
        };
        conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time,
        });
    };

    let (valid, reason, message) = match &observed.validity {
        Validity::Valid => (true, "Valid", "the spec is valid".to_string()),
        Validity::Invalid { reason, message } => (false, *reason, message.clone()),
        Validity::Conflict(message) => (false, "Conflict", message.clone()),
    };
    let spec_ok = !matches!(observed.validity, Validity::Invalid { .. });
    set(CONFIG_VALID, valid, reason, message);

    let (driver_ok, driver_reason, driver_message, driver) = match &observed.rollout {
        Rollout::NotApplied(why) => (false, "NotApplied", why.clone(), None),
        Rollout::Applied { status, observed: false } => {
            (false, "Pending", "waiting for the DaemonSet controller".into(), Some(status.clone()))
        }
        Rollout::Applied { status, .. } => {
            let done = status.ready_nodes >= status.desired_nodes && status.updated_nodes >= status.desired_nodes;
            let message = format!(
                "{} of {} nodes ready, {} updated",
                status.ready_nodes, status.desired_nodes, status.updated_nodes
            );
            (done, if done { "RolloutComplete" } else { "RollingOut" }, message, Some(status.clone()))
        }
    };
    set(DRIVER_READY, driver_ok, driver_reason, driver_message);

    let templates_ok = spec_ok && observed.templates_present == observed.templates_wanted;
    let templates_message = if templates_ok {
        format!("{} templates in {} namespaces", observed.templates_present, observed.template_namespaces)
    } else if !spec_ok {
        "not applied: the spec is invalid".into()
    } else {
        format!(
            "{} of {} templates present; missing: {}",
            observed.templates_present,
            observed.templates_wanted,
            observed.templates_missing.join(", ")
        )
    };
    set(TEMPLATES_READY, templates_ok, if templates_ok { "Applied" } else { "Missing" }, templates_message);

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
        set(DEVICES_HEALTHY, healthy, if healthy { "AllHealthy" } else { "Unhealthy" }, message);
    }

    let ready = valid && driver_ok && templates_ok;
    let ready_message =
        if ready { "the driver is rolled out and every template is in place" } else { "see the other conditions" };
    set(READY, ready, if ready { "Ready" } else { "NotReady" }, ready_message.into());

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
    }
}

/// Now, to the second: the API server stores condition times in seconds, so a finer time would never compare equal.
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("current time is in range")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observation() -> Observation {
        Observation {
            generation: Some(3),
            paused: false,
            validity: Validity::Valid,
            rollout: Rollout::Applied {
                status: DriverStatus { desired_nodes: 2, ready_nodes: 2, updated_nodes: 2, ..DriverStatus::default() },
                observed: true,
            },
            templates_present: 4,
            templates_wanted: 4,
            template_namespaces: 2,
            profiles: vec![],
            templates_missing: vec![],
            health: None,
            capacity: Vec::new(),
        }
    }

    fn condition<'a>(status: &'a NeuronDRAConfigStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn all_good_is_ready() {
        let status = compute(None, &observation(), now());
        assert_eq!(status.phase, Some(Phase::Ready));
        for type_ in [READY, CONFIG_VALID, DRIVER_READY, TEMPLATES_READY] {
            assert_eq!(condition(&status, type_).status, "True", "{type_}");
        }
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.templates, Some(TemplateSummary { namespaces: 2, count: 4, min_available: None }));
    }

    #[test]
    fn an_unchanged_world_computes_an_identical_status() {
        let first = compute(None, &observation(), Timestamp::from_second(1000).unwrap());
        let second = compute(Some(&first), &observation(), Timestamp::from_second(2000).unwrap());
        assert_eq!(first, second);
    }

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let t1 = Timestamp::from_second(1000).unwrap();
        let t2 = Timestamp::from_second(2000).unwrap();
        let first = compute(None, &observation(), t1);
        let mut rolling = observation();
        rolling.rollout = Rollout::Applied {
            status: DriverStatus { desired_nodes: 2, ready_nodes: 1, updated_nodes: 2, ..DriverStatus::default() },
            observed: true,
        };
        let second = compute(Some(&first), &rolling, t2);
        assert_eq!(condition(&second, DRIVER_READY).last_transition_time, Time(t2));
        assert_eq!(condition(&second, DRIVER_READY).reason, "RollingOut");
        assert_eq!(condition(&second, CONFIG_VALID).last_transition_time, Time(t1));
        assert_eq!(second.phase, Some(Phase::Progressing));
    }

    #[test]
    fn invalid_spec_is_degraded_and_conflict_keeps_templates_judged() {
        let mut invalid = observation();
        invalid.validity = Validity::Invalid { reason: "InvalidSpec", message: "spec.x: bad".into() };
        let status = compute(None, &invalid, now());
        assert_eq!(status.phase, Some(Phase::Degraded));
        assert_eq!(condition(&status, CONFIG_VALID).reason, "InvalidSpec");
        assert_eq!(condition(&status, READY).status, "False");

        let mut conflict = observation();
        conflict.validity = Validity::Conflict("nodes n1 ...".into());
        let status = compute(None, &conflict, now());
        assert_eq!(condition(&status, CONFIG_VALID).reason, "Conflict");
        assert_eq!(condition(&status, TEMPLATES_READY).status, "True");
    }

    #[test]
    fn paused_shows_paused() {
        let mut paused = observation();
        paused.paused = true;
        assert_eq!(compute(None, &paused, now()).phase, Some(Phase::Paused));
    }

    #[test]
    fn missing_templates_are_named() {
        let mut missing = observation();
        missing.templates_present = 3;
        missing.templates_missing = vec!["team-a/pretrain".into()];
        let status = compute(None, &missing, now());
        assert_eq!(condition(&status, TEMPLATES_READY).status, "False");
        assert!(condition(&status, TEMPLATES_READY).message.contains("team-a/pretrain"));
        assert_eq!(status.phase, Some(Phase::Progressing));
    }
}
