//! outcome (pure): the end of one pass, decided at once from the plan, what the act did, the snapshot and what
//! earlier passes remembered: the status (computed once, written and read for the gauges), the events, the rollout
//! step whose plugin pods go next, when to look again, and what to remember. `reconcile` writes it through
//! `act::config` and `act::evict`.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};

use super::events::{self, EventReason, Remembered};
use super::observe::{self, AfterAct};
use super::plan::{Driver, Plan, Refusal, Step};
use super::report::Report;
use super::snapshot::Snapshot;
use crate::api::{NeuronDRAConfig, NeuronDRAConfigStatus, TemplateCapacity};
use crate::controller::kinds::DRIVER_OBJECTS;
use crate::logic::desired::{Allocator, VERSION_RECHECK, changes_with_the_allocator};
use crate::logic::status::{self, ConditionType, Reason, Validity, condition_reason};
use crate::logic::validate::ValidatedConfig;

/// How soon a config whose plugin is unfenced looks again: admission objects are read by name, not watched, so a
/// restored fence brings no event.
pub const FENCE_RECHECK: Duration = Duration::from_secs(10);

/// What one pass leaves behind, for the write layer to carry out.
pub struct Outcome<'p> {
    /// The whole status, as it should be stored.
    pub status: NeuronDRAConfigStatus,
    /// The events, in order.
    pub events: Vec<Event>,
    /// The per-config gauges beside those read from the status (none for a config not acted on).
    pub gauges: Option<Gauges<'p>>,
    /// The rollout step whose plugin pods are deleted, once the status that records it is stored.
    pub evictions: Option<&'p Step>,
    pub next: Next,
    /// What the next pass's events compare with (None: as it was).
    pub remembered: Option<Remembered>,
}

/// The per-config gauges of a pass that acted: room per template, and the objects managed.
pub struct Gauges<'p> {
    pub config: &'p ValidatedConfig,
    pub capacity: Vec<TemplateCapacity>,
    pub managed_objects: usize,
}

/// When the config is looked at again, as far as the pass knows before its evictions are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Next {
    /// Our own writes (or a namespace's deletion) show up in the cache in a moment.
    pub waiting: bool,
    /// Another tool's objects are in the way: they lack the operator's label and are not watched.
    pub foreign: bool,
    /// The soonest change that comes without an event.
    pub recheck: Option<Duration>,
}

impl Next {
    /// The reconcile's answer, given whether the evictions' writes are still to show up in the cache too.
    pub fn action(&self, evictions_pending: bool) -> Action {
        if self.waiting || evictions_pending {
            return Action::requeue(Duration::from_secs(1));
        }
        if self.foreign {
            return Action::requeue(Duration::from_secs(60));
        }
        self.recheck.map_or_else(Action::await_change, Action::requeue)
    }
}

/// The end of a pass over a valid config that `plan` decided, the act did (`report`), `snapshot` saw before and
/// `after` once the act was done (the plugin DaemonSet's rollout and the budgets' use, which the act may change).
pub fn outcome<'p>(
    config: &NeuronDRAConfig,
    plan: &'p Plan,
    report: &Report,
    snapshot: &Snapshot,
    after: &AfterAct,
    previous: &Remembered,
    now: Timestamp,
) -> Outcome<'p> {
    let driver = driver(plan, report);
    let step = step(plan, driver);
    let mut observation = observe::observation(config.meta().generation, plan, driver, report, after);
    observation.classes_missing = classes_missing(plan, snapshot.efa_class);
    let assessment = snapshot.health(&plan.config, plan.driver != Driver::BlockedByConflict);
    let previous_status = config.status.as_ref();
    let mut remembered = previous.clone();
    let pass = events::Pass {
        plan,
        report,
        step,
        previous: previous_status,
        assessment: &assessment,
        rules: &plan.taint_rules,
        classes_missing: &observation.classes_missing,
    };
    let events = events::of_pass(&pass, &mut remembered);
    observation.capacity = snapshot.capacity(&plan.config);
    (observation.teams, observation.team_summary) = observe::teams(plan, after, &observation.capacity);
    observation.health = Some(assessment.health);
    let next = Next {
        waiting: report.pending || driver == Driver::WaitingForNamespace,
        foreign: !report.foreign.is_empty(),
        recheck: recheck(plan, driver, step),
    };
    let managed_objects = report.templates_in_place.len() + DRIVER_OBJECTS;
    Outcome {
        status: status::compute(previous_status, &observation, now),
        events,
        evictions: step.filter(|step| !step.evict.is_empty()),
        gauges: Some(Gauges { config: &plan.config, capacity: observation.capacity, managed_objects }),
        next,
        remembered: Some(remembered),
    }
}

/// A spec that fails validation, or that this server cannot serve: the status and one event (when the reason is
/// new), nothing applied; permanent until the spec changes, so no recheck.
pub fn refused(config: &NeuronDRAConfig, refusal: &Refusal, now: Timestamp) -> Outcome<'static> {
    let validity = refusal.validity();
    let reason = validity.reason();
    let mut events = Vec::new();
    if condition_reason(config.status.as_ref(), ConditionType::ConfigValid) != Some(reason) {
        events.push(events::event(EventType::Warning, EventReason::Condition(reason), "Validate", refusal.to_string()));
    }
    let observation = observe::not_acted_on(config.meta().generation, config.spec.paused, validity);
    not_acted_on(status::compute(config.status.as_ref(), &observation, now), events)
}

/// A config the API server stored but this build cannot parse: the whole status anew but for the rollout's record
/// (`kept`: a halt holds until a new template), and one event.
pub fn unparseable(invalid: &InvalidObject, kept: Option<&NeuronDRAConfigStatus>, now: Timestamp) -> Outcome<'static> {
    let validity = Validity::Unparseable(invalid.error.clone());
    let observation = observe::not_acted_on(invalid.metadata.generation, false, validity);
    let reason = EventReason::Condition(Reason::Unparseable);
    let refused = events::event(EventType::Warning, reason, "Validate", invalid.error.clone());
    not_acted_on(status::compute(kept, &observation, now), vec![refused])
}

fn not_acted_on(status: NeuronDRAConfigStatus, events: Vec<Event>) -> Outcome<'static> {
    Outcome { status, events, gauges: None, evictions: None, next: Next::default(), remembered: None }
}

/// The plugin's state as the pass left it: the plan's, unless a write found the driver namespace being deleted
/// before the cache showed it.
pub fn driver(plan: &Plan, report: &Report) -> Driver {
    match plan.driver {
        Driver::Apply if report.namespace_terminating => Driver::WaitingForNamespace,
        driver => driver,
    }
}

/// The plan's rollout step, if the plugin is still applied after the pass (its events, evictions and recheck
/// follow it; a plugin not applied after all moves no step).
pub fn step(plan: &Plan, driver: Driver) -> Option<&Step> {
    (driver == Driver::Apply).then_some(&plan.rollout)
}

/// The soonest change that brings no event: a rollout step's timeout or soak, remediation's problemFor or
/// clearFor, and a fence restored (admission objects are read by name).
fn recheck(plan: &Plan, driver: Driver, step: Option<&Step>) -> Option<Duration> {
    let fence = (driver == Driver::Unfenced).then_some(FENCE_RECHECK);
    // Templates shaped for an older scheduler change form once the server is upgraded, which no event announces.
    let older = plan.allocator == Allocator::Orderings;
    let version = (older && changes_with_the_allocator(&plan.config)).then_some(VERSION_RECHECK);
    [step.and_then(|s| s.recheck), plan.remediation.recheck(), fence, version].into_iter().flatten().min()
}

/// One line per template that claims from a DeviceClass this cluster lacks: the EFA driver's, for `efa: true`.
/// Its pods would stay Pending with nothing but the scheduler's event to say why.
fn classes_missing(plan: &Plan, efa_class: bool) -> Vec<String> {
    let templates = crate::logic::desired::efa_templates(&plan.config);
    if templates.is_empty() || efa_class {
        return Vec::new();
    }
    vec![format!(
        "templates {} claim EFA interfaces from DeviceClass {}, which does not exist: install AWS's EFA DRA driver \
         (the aws-dranet chart), or their pods stay Pending",
        templates.join(", "),
        crate::logic::desired::EFA_DEVICE_CLASS
    )]
}
