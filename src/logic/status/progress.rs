//! `Reconciling` and `Stalled`: the two conditions kstatus (sigs.k8s.io/cli-utils: Flux's health checks and the
//! waiters built on it) and the Argo CD health check (config/argocd/health.lua) take a config's readiness from.
//! Both are "abnormal-true": True while work is in progress, or while the config cannot progress until someone
//! changes something. Computed from the other conditions, never from anything of their own,
//! so they can never disagree with `Ready`: Ready=True is Current, whatever the devices' health (a fleet of
//! thousands of nodes nearly always has a sick device; `DevicesHealthy` and its alert say so, not the GitOps gate).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{ConditionType, Reason};

/// Where a config stands, as kstatus sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Ready=True: nothing left to do.
    Ready,
    /// `spec.paused`: the operator writes nothing on purpose.
    Paused,
    /// Cannot go on without a change to the spec or the cluster (the cause's reason and message).
    Stalled(Reason, String),
    /// Work in progress that needs nothing but time (the cause's reason and message).
    Reconciling(Reason, String),
}

impl Progress {
    /// From the conditions `compute` set (by type, before sorting). A False `ConfigValid` stalls (invalid,
    /// unsupported, unreadable, conflicting, or another tool's object in the way), and so do a halted rollout, a
    /// plugin whose fences are not in place, and templates that cannot be used as they are; whatever else keeps Ready False is in progress.
    pub fn of(conditions: &[Condition], paused: bool) -> Self {
        let find = |type_: ConditionType| conditions.iter().find(|c| c.type_ == type_.as_str());
        let failing = |type_: ConditionType| find(type_).filter(|c| c.status == "False");
        let cause = |c: &Condition| (Reason::parse(&c.reason).unwrap_or(Reason::NotReady), c.message.clone());
        if paused {
            return Self::Paused;
        }
        if find(ConditionType::Ready).is_some_and(|c| c.status == "True") {
            return Self::Ready;
        }
        if let Some(invalid) = failing(ConditionType::ConfigValid) {
            let (reason, message) = cause(invalid);
            return Self::Stalled(reason, message);
        }
        let blocked = [
            (ConditionType::DriverReady, Reason::RolloutHalted),
            (ConditionType::DriverReady, Reason::Unfenced),
            (ConditionType::TemplatesReady, Reason::ForeignObject),
            (ConditionType::TemplatesReady, Reason::DeviceClassMissing),
        ];
        for (type_, reason) in blocked {
            if let Some(stuck) = failing(type_).filter(|c| c.reason == reason.as_str()) {
                return Self::Stalled(reason, stuck.message.clone());
            }
        }
        let working = failing(ConditionType::DriverReady).or_else(|| failing(ConditionType::TemplatesReady));
        let (reason, message) = working.map(cause).unwrap_or((Reason::NotReady, "see the other conditions".into()));
        Self::Reconciling(reason, message)
    }

    /// `(status, reason, message)` of `Reconciling` and of `Stalled`, in that order. A False one carries the
    /// reason of where the config stands instead (`Ready`, `Paused`, or the other one's cause).
    pub fn conditions(&self) -> [(bool, Reason, String); 2] {
        match self {
            Self::Ready => {
                let done = || (false, Reason::Ready, "the driver is rolled out and every template is in place".into());
                [done(), done()]
            }
            Self::Paused => {
                let paused = || (false, Reason::Paused, "spec.paused: the operator changes nothing".into());
                [paused(), paused()]
            }
            Self::Stalled(reason, message) => [(false, *reason, message.clone()), (true, *reason, message.clone())],
            Self::Reconciling(reason, message) => [(true, *reason, message.clone()), (false, *reason, message.clone())],
        }
    }
}
