//! The outcome as a plain value: what a pass writes, tells and does next, from the plan, a report and the snapshot,
//! with no client.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::json;

use super::fixtures::World;
use super::plan::NOW;
use super::{config, converged};
use crate::api::NeuronDRAConfig;
use crate::controller::pure::events::Remembered;
use crate::controller::pure::observe::AfterAct;
use crate::controller::pure::outcome::{self, Next, Outcome};
use crate::controller::pure::plan::{Plan, Refusal};
use crate::controller::pure::report::Report;
use crate::controller::pure::snapshot::Snapshot;
use crate::controller::stores::Stores;
use crate::logic::status::{ConditionType, Reason, condition_reason};

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(NOW).unwrap()
}

/// What a pass that found the fixtures' one template in place reports.
fn in_place() -> Report {
    Report { templates_in_place: ["team-a/pretrain".to_string()].into(), ..Report::default() }
}

fn reasons(events: &[kube::runtime::events::Event]) -> Vec<&str> {
    events.iter().map(|e| e.reason.as_str()).collect()
}

/// The outcome of a pass with nothing remembered from earlier ones, the caches after it as `stores` holds them.
fn first_pass<'p>(
    config: &NeuronDRAConfig,
    plan: &'p Plan,
    report: &Report,
    snapshot: &Snapshot,
    stores: &Stores,
) -> Outcome<'p> {
    let after = AfterAct::read(plan, stores);
    outcome::outcome(config, plan, report, snapshot, &after, &Remembered::default(), now())
}

#[test]
fn a_converged_pass_writes_its_status_tells_nothing_and_waits_for_a_change() {
    let c = config(json!({}));
    let world = converged(&c);
    let (snapshot, stores) = (world.snapshot(), world.stores());
    let plan = Plan::new(&c, &snapshot, NOW).unwrap();
    let outcome = first_pass(&c, &plan, &in_place(), &snapshot, &stores);
    assert_eq!(condition_reason(Some(&outcome.status), ConditionType::ConfigValid), Some(Reason::Valid));
    assert_eq!(reasons(&outcome.events), Vec::<&str>::new());
    assert!(outcome.evictions.is_none());
    assert_eq!(outcome.next, Next::default());
    assert_eq!(outcome.next.action(false), Action::await_change());
    let gauges = outcome.gauges.expect("a pass that acted records its gauges");
    assert_eq!(gauges.managed_objects, 1 + crate::controller::kinds::DRIVER_OBJECTS);
    // What the events compare with next time: now seen, and empty.
    let remembered = outcome.remembered.expect("remembered");
    assert_eq!((remembered.unhealthy, remembered.in_use), (Some(Default::default()), Some(Default::default())));
}

#[test]
fn writes_that_wait_for_the_cache_or_a_foreign_object_bring_the_config_back() {
    let c = config(json!({}));
    let world = converged(&c);
    let (snapshot, stores) = (world.snapshot(), world.stores());
    let plan = Plan::new(&c, &snapshot, NOW).unwrap();
    let pending = Report { pending: true, ..Report::default() };
    let outcome = first_pass(&c, &plan, &pending, &snapshot, &stores);
    assert_eq!(outcome.next.action(false), Action::requeue(Duration::from_secs(1)));
    let outcome = first_pass(&c, &plan, &Report::default(), &snapshot, &stores);
    assert_eq!(outcome.next.action(true), Action::requeue(Duration::from_secs(1)), "the evictions' writes");
}

#[test]
fn a_missing_efa_class_is_in_the_status_told_once_and_gone_with_the_class() {
    let c = config(json!({"profiles": [
        {"name": "pretrain", "training": {"instanceType": "trn2.48xlarge", "devices": 4, "efa": true}}]}));
    let world = World { no_efa_driver: true, ..converged(&c) };
    let (snapshot, stores) = (world.snapshot(), world.stores());
    let plan = Plan::new(&c, &snapshot, NOW).unwrap();
    let outcome = first_pass(&c, &plan, &in_place(), &snapshot, &stores);
    let reason = condition_reason(Some(&outcome.status), ConditionType::TemplatesReady);
    assert_eq!(reason, Some(Reason::DeviceClassMissing));
    assert_eq!(reasons(&outcome.events), ["DeviceClassMissing"]);
    assert_eq!(outcome.next.recheck, None, "the class is watched: its creation brings the next pass");

    let mut told = c.clone();
    told.status = Some(outcome.status.clone());
    let again = first_pass(&told, &plan, &in_place(), &snapshot, &stores);
    assert_eq!(reasons(&again.events), Vec::<&str>::new(), "the stored status already says so");

    let installed = converged(&c);
    let (snapshot, stores) = (installed.snapshot(), installed.stores());
    let outcome = first_pass(&told, &plan, &in_place(), &snapshot, &stores);
    let reason = condition_reason(Some(&outcome.status), ConditionType::TemplatesReady);
    assert_eq!(reason, Some(Reason::Applied), "the EFA driver's class in the cache");
}

#[test]
fn a_spec_the_server_cannot_serve_is_refused_by_the_plan_after_validation() {
    let c = config(json!({"extendedResourceName": "aws.amazon.com/neuron"}));
    let mut snapshot = converged(&c).snapshot();
    snapshot.probes.unsupported = Some("spec.extendedResourceName: not here".into());
    let refusal = Plan::new(&c, &snapshot, NOW).unwrap_err();
    assert!(matches!(&refusal, Refusal::Unsupported(m) if m.starts_with("spec.extendedResourceName")), "{refusal}");

    let outcome = outcome::refused(&c, &refusal, now());
    assert_eq!(condition_reason(Some(&outcome.status), ConditionType::ConfigValid), Some(Reason::Unsupported));
    assert_eq!(reasons(&outcome.events), ["Unsupported"]);
    assert!(outcome.gauges.is_none() && outcome.evictions.is_none() && outcome.remembered.is_none());
    let mut told = c.clone();
    told.status = Some(outcome.status);
    assert!(outcome::refused(&told, &refusal, now()).events.is_empty(), "told once");

    let mut invalid = config(json!({"profiles": [{"name": "p", "training": {"instanceType": "trn1.32xlarge",
        "logicalNeuronCore": 2}}]}));
    // A changed spec is a new generation (validations are kept per generation).
    invalid.metadata.generation = Some(c.metadata.generation.unwrap_or_default() + 1);
    let refusal = Plan::new(&invalid, &snapshot, NOW).unwrap_err();
    assert!(matches!(refusal, Refusal::InvalidSpec(_)), "an invalid spec is refused as such first: {refusal}");
}
