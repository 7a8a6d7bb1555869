//! The plan's rollout step and remediation decisions, from snapshots of fixture worlds: no API server, no clock.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::fixtures::{Fixture, World};
use super::plan::NOW;
use super::{STATUS, config, converged, nodes};
use crate::api::{NeuronDRAConfig, RolloutState, RolloutStatus, StepNode};
use crate::cluster::{PodView, slice_view};
use crate::controller::pure::plan::{Plan, Remediation};
use crate::devtools::simulate::fleet::{self, FleetSpec};
use crate::logic::rollout::Change;
use crate::logic::validate::validate;

const NAMESPACE: &str = "neuron-dra-driver";
const OLD: &str = "old111";
const NEW: &str = "new222";
const IMAGE: &str = "registry/neuron-dra-driver:1.2.0";

fn time(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

fn revision(hash: &str, number: i64, image: &str) -> ControllerRevision {
    serde_json::from_value(json!({
        "metadata": {"name": format!("neuron-dra-c-{hash}"), "namespace": NAMESPACE,
            "labels": {"controller-revision-hash": hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "neuron-dra-c", "uid": "uid-ds"}]},
        "revision": number,
        "data": {"spec": {"template": {"spec": {"containers": [{"name": "plugin", "image": image}]}}}},
    }))
    .unwrap()
}

fn pod(node: &str, hash: &str, ready: bool) -> PodView {
    serde_json::from_value(json!({
        "metadata": {"name": format!("plugin-{node}-{hash}"), "namespace": NAMESPACE, "uid": format!("uid-{node}-{hash}"),
            "labels": {"neurondra.io/config": "c", "controller-revision-hash": hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "neuron-dra-c", "uid": "uid-ds",
                "controller": true}]},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

/// Three nodes running the old plugin (1.1.0), and a DaemonSet whose newest template runs 1.2.0 with a stepped
/// rollout of one node per step.
fn rolling() -> (NeuronDRAConfig, World) {
    let c = config(json!({"driver": {"image": IMAGE, "rollout": {"maxUnavailable": 1, "soak": "0s"}}}));
    let mut world = converged(&c);
    world.nodes = nodes(3);
    let ds = &mut world.daemon_sets[0];
    ds.metadata.uid = Some("uid-ds".into());
    ds.metadata.generation = Some(2);
    ds.status = Some(
        serde_json::from_value(json!({"observedGeneration": 2, "currentNumberScheduled": 3,
        "desiredNumberScheduled": 3, "numberMisscheduled": 0, "numberReady": 3}))
        .unwrap(),
    );
    world.revisions = vec![revision(OLD, 1, "registry/neuron-dra-driver:1.1.0"), revision(NEW, 2, IMAGE)];
    for i in 0..3 {
        move_node(&mut world, i, OLD, "1.1.0", true);
    }
    (c, world)
}

/// Node `i` runs plugin revision `hash` (Ready or not) and its slice is published by `version`.
fn move_node(world: &mut World, i: usize, hash: &str, version: &str, ready: bool) {
    let node = format!("n-{i}");
    world.plugin_pods.retain(|p| p.spec.node_name.as_deref() != Some(node.as_str()));
    world.plugin_pods.push(pod(&node, hash, ready));
    let spec = FleetSpec {
        prefix: "n".into(),
        count: 3,
        instance_type: "trn2.48xlarge".into(),
        dra_driver_version: version.into(),
        neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
    };
    world.slices.retain(|s| s.spec.node_name.as_deref() != Some(node.as_str()));
    world.slices.push(slice_view(&fleet::resource_slice(&spec, i, None)));
}

/// `config` as the cache shows it once its status holds `rollout`.
fn with_rollout(config: &NeuronDRAConfig, rollout: RolloutStatus) -> NeuronDRAConfig {
    let mut next = config.clone();
    let driver = json!({"rollout": serde_json::to_value(rollout).unwrap()});
    next.status = Some(serde_json::from_value(json!({"driver": driver})).unwrap());
    next
}

fn step(started: i64, nodes: &[&str]) -> RolloutStatus {
    RolloutStatus {
        revision: NEW.into(),
        version: "1.2.0".into(),
        state: RolloutState::Progressing,
        step: 1,
        step_start_time: Some(time(started)),
        step_nodes: nodes.iter().map(|n| StepNode { node: n.to_string(), devices: 16, slices: None }).collect(),
        ..RolloutStatus::default()
    }
}

fn evicted(plan: &Plan) -> Vec<&str> {
    plan.rollout.evict.iter().map(|e| e.node.as_str()).collect()
}

#[test]
fn a_new_template_starts_with_the_canary() {
    let (c, world) = rolling();
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(evicted(&plan), ["n-0"]);
    assert_eq!(plan.rollout.evict[0].pod, "plugin-n-0-old111", "the old pod, by name and uid");
    assert_eq!(plan.rollout.change, Some(Change::Step { step: 1, nodes: vec!["n-0".into()] }));
    let status = plan.rollout.status.as_ref().unwrap();
    assert_eq!((status.step, status.state), (1, RolloutState::Progressing));
    assert_eq!(plan.rollout.revision.as_ref().and_then(|r| r.name.as_deref()), Some("neuron-dra-c-new222"));
    assert_eq!(plan.rollout.versions[0].nodes, 3);
}

const EVICT_CANARY: &str = "DELETE /api/v1/namespaces/neuron-dra-driver/pods/plugin-n-0-old111";

/// Write-ahead: a step's plugin pods are deleted only once the status records the step. Were they deleted first, a
/// lost status write would leave the next pass reading no step, and it would move another batch.
#[tokio::test]
async fn a_step_is_recorded_in_the_status_before_its_plugin_pods_are_deleted() {
    let (c, world) = rolling();
    let fixture = Fixture::new(&world);
    fixture.fail(STATUS, 500, "etcd is away", 1);
    assert!(fixture.reconcile(&c).await.is_err(), "the failed status write fails the reconcile");
    let lines = fixture.lines();
    assert!(lines.iter().any(|l| l == STATUS), "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.contains("/pods/")),
        "no plugin pod deleted while the step is unrecorded: {lines:?}"
    );

    fixture.clear();
    fixture.reconcile(&c).await.unwrap();
    let lines = fixture.lines();
    let status = lines.iter().position(|l| l == STATUS).expect("the step is written");
    let evict = lines.iter().position(|l| l == EVICT_CANARY).expect("then the canary's pod is deleted");
    assert!(status < evict, "{lines:?}");
    assert_eq!(lines.iter().filter(|l| l.contains("/pods/")).count(), 1, "the same one node, not a second batch");
    let rollout = &fixture.last_status().unwrap()["driver"]["rollout"];
    assert_eq!((&rollout["step"], &rollout["stepNodes"][0]["node"]), (&json!(1), &json!("n-0")));
}

#[test]
fn a_canary_that_passed_moves_the_next_step() {
    let (c, mut world) = rolling();
    move_node(&mut world, 0, NEW, "1.2.0", true);
    let c = with_rollout(&c, step(NOW - 30, &["n-0"]));
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(evicted(&plan), ["n-1"]);
    assert_eq!(plan.rollout.change, Some(Change::Step { step: 2, nodes: vec!["n-1".into()] }));
}

#[test]
fn a_canary_failing_past_its_timeout_halts_naming_the_node() {
    let (c, mut world) = rolling();
    move_node(&mut world, 0, NEW, "1.2.0", false);
    let waiting = with_rollout(&c, step(NOW - 30, &["n-0"]));
    let plan = Plan::new(&waiting, &world.snapshot(), NOW).unwrap();
    assert_eq!((evicted(&plan), &plan.rollout.change), (vec![], &None), "waits for its checks");
    assert_eq!(plan.rollout.recheck, Some(std::time::Duration::from_secs(271)), "then looks again at the timeout");

    let late = with_rollout(&c, step(NOW - 301, &["n-0"]));
    let plan = Plan::new(&late, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.rollout.change, Some(Change::Halted));
    assert!(plan.rollout.evict.is_empty());
    let status = plan.rollout.status.as_ref().unwrap();
    assert_eq!(status.state, RolloutState::Halted);
    assert_eq!(status.failed_nodes[0].node, "n-0");
    assert!(crate::logic::rollout::halt_message(status).contains("n-0: plugin pod"), "{status:?}");
}

#[test]
fn a_rollout_whose_last_step_passed_is_complete() {
    let (c, mut world) = rolling();
    for i in 0..3 {
        move_node(&mut world, i, NEW, "1.2.0", true);
    }
    let c = with_rollout(&c, RolloutStatus { step: 2, ..step(NOW - 30, &["n-1", "n-2"]) });
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.rollout.change, Some(Change::Complete));
    assert_eq!(plan.rollout.status.as_ref().map(|s| s.state), Some(RolloutState::Complete));
    assert!(plan.rollout.evict.is_empty() && plan.rollout.recheck.is_none());
}

#[test]
fn a_terminating_pod_beside_its_replacement_does_not_stand_for_the_node() {
    let (c, mut world) = rolling();
    let mut going = pod("n-0", OLD, true);
    going.metadata.deletion_timestamp = Some(time(NOW - 1));
    world.plugin_pods.retain(|p| p.spec.node_name.as_deref() != Some("n-0"));
    world.plugin_pods.extend([pod("n-0", NEW, true), going]);
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    let new = plan.rollout.versions.iter().find(|v| v.revision == NEW).map(|v| v.nodes);
    assert_eq!(new, Some(1), "n-0 runs the new pod: {:?}", plan.rollout.versions);
    let pods = world.snapshot().plugin_pods_of(&validate(&c).unwrap());
    assert_eq!(pods["n-0"].metadata.name.as_deref(), Some("plugin-n-0-new222"));
}

/// A soaking step writes its start once, then nothing; each pass asks to be looked at again when the soak ends
/// (nothing in the cluster changes then to trigger one).
#[test]
fn a_soaking_step_is_looked_at_again_when_the_soak_ends() {
    let (mut c, mut world) = rolling();
    c.spec.driver.rollout.as_mut().unwrap().soak = "30s".into();
    move_node(&mut world, 0, NEW, "1.2.0", true);
    let passed = Plan::new(&with_rollout(&c, step(NOW - 30, &["n-0"])), &world.snapshot(), NOW).unwrap();
    let status = passed.rollout.status.clone().unwrap();
    assert_eq!((status.soak_start_time.clone(), passed.rollout.evict.len()), (Some(time(NOW)), 0));
    assert_eq!(passed.rollout.recheck, Some(std::time::Duration::from_secs(31)));
    let later = Plan::new(&with_rollout(&c, status.clone()), &world.snapshot(), NOW + 10).unwrap();
    assert_eq!(later.rollout.status.as_ref(), Some(&status), "nothing new to write while soaking");
    assert_eq!(later.rollout.recheck, Some(std::time::Duration::from_secs(21)));
}

/// A halt of the spec's template keeps the DaemonSet on the last good template (so nodes that join get it) and
/// judges the rollout under the revision the status names; a new template in the spec ends the hold.
#[test]
fn a_halt_holds_the_daemon_set_on_the_last_good_template_until_the_template_changes() {
    let (c, mut world) = rolling();
    let spec_template = Plan::new(&c, &world.snapshot(), NOW).unwrap().desired.daemon_set.spec.unwrap().template;
    let hash = crate::logic::desired::short_hash(&Some(&spec_template));
    move_node(&mut world, 0, NEW, "1.2.0", false);
    let halted = RolloutStatus {
        state: RolloutState::Halted,
        template: Some(hash),
        previous_revision: Some(OLD.into()),
        step_nodes: Vec::new(),
        ..step(NOW - 400, &[])
    };
    let c = with_rollout(&c, halted.clone());
    // The DaemonSet controller has made the last good template the newest revision again.
    world.revisions[0].revision = 3;
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    let template = plan.desired.daemon_set.spec.as_ref().unwrap().template.clone();
    let image = template.spec.as_ref().unwrap().containers[0].image.as_deref();
    assert_eq!(image, Some("registry/neuron-dra-driver:1.1.0"), "the last good template");
    assert_eq!(plan.rollout.status.as_ref(), Some(&halted), "the halt holds and writes nothing new");
    assert!(plan.rollout.evict.is_empty() && plan.rollout.recheck.is_none());

    // Another template in the spec: the DaemonSet gets it.
    let mut fixed = c.clone();
    fixed.spec.driver.image = "registry/neuron-dra-driver:1.2.1".into();
    let plan = Plan::new(&fixed, &world.snapshot(), NOW).unwrap();
    let image = plan.desired.daemon_set.spec.unwrap().template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("registry/neuron-dra-driver:1.2.1"));
}

#[test]
fn only_pods_the_daemon_set_controls_in_the_driver_namespace_stand_for_a_node() {
    let (c, mut world) = rolling();
    // A tenant's copies of the labels and node pin of n-0's plugin, on new nodes' worth of the old revision.
    let mut unowned = pod("n-0", NEW, true);
    unowned.metadata.owner_references = None;
    let mut elsewhere = pod("n-0", NEW, true);
    elsewhere.metadata.namespace = Some("tenant".into());
    let mut other_owner = pod("n-0", NEW, true);
    other_owner.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-tenant-rs".into();
    world.plugin_pods.retain(|p| p.spec.node_name.as_deref() != Some("n-0"));
    world.plugin_pods.extend([unowned, elsewhere, other_owner]);
    let pods = world.snapshot().plugin_pods_of(&validate(&c).unwrap());
    assert!(!pods.contains_key("n-0"), "a look-alike pod stood for n-0: {:?}", pods.get("n-0"));
    assert_eq!(pods.len(), 2);
}

/// Two nodes of which those in `failing` report NeuronHealth=True, with `rules` in the cache.
fn remediating(policy: Value, failing: &[usize], rules: Vec<Value>) -> (NeuronDRAConfig, World) {
    let c = config(json!({"remediation": policy}));
    let mut world = converged(&c);
    world.nodes = nodes(2);
    for &i in failing {
        world.nodes[i].status = Some(
            serde_json::from_value(json!({"conditions": [{"type": "NeuronHealth", "status": "True",
                "reason": "NeuronHasError_DMA", "lastTransitionTime": format!("2026-01-03T00:00:0{i}Z")}]}))
            .unwrap(),
        );
    }
    world.taint_rules = Some(rules.into_iter().map(|r| serde_json::from_value(r).unwrap()).collect());
    (c, world)
}

fn rule_names(plan: &Plan) -> Vec<String> {
    plan.remediation.rules().iter().map(|r| r.metadata.name.clone().unwrap()).collect()
}

#[test]
fn a_failing_node_gets_a_rule() {
    let (c, world) = remediating(json!({"effect": "NoExecute"}), &[0], vec![]);
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(rule_names(&plan), ["c.n-0"]);
    let rule = &plan.remediation.rules()[0];
    assert_eq!(rule.spec.taint.effect, "NoExecute");
    assert_eq!(rule.spec.device_selector.as_ref().and_then(|s| s.pool.as_deref()), Some("n-0"));
    let status = plan.remediation.status("c", &Default::default()).unwrap();
    assert_eq!((status.remediated, status.held_back), (1, 0));
}

#[test]
fn a_recovered_node_is_released() {
    let rule = json!({"metadata": {"name": "c.n-0", "labels": {"neurondra.io/config": "c"}},
        "spec": {"deviceSelector": {"driver": "neuron.aws.com", "pool": "n-0"},
            "taint": {"key": "neurondra.io/hardware-problem", "effect": "NoSchedule"}}});
    let (c, world) = remediating(json!({}), &[], vec![rule]);
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert!(plan.remediation.rules().is_empty(), "the rule is not claimed: the pass deletes it");
    assert_eq!(plan.remediation.released_because("n-0"), "its Neuron hardware problem cleared");
    assert_eq!(plan.remediation.released_because("gone"), "the node is gone or no longer selected");
}

#[test]
fn nodes_over_the_budget_are_held_back() {
    let (c, world) = remediating(json!({"maxNodes": 1}), &[0, 1], vec![]);
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(rule_names(&plan), ["c.n-0"], "the older problem first");
    let Remediation::On(decided) = &plan.remediation else { panic!("remediation is on") };
    assert_eq!(decided.decision.held_back.iter().map(|p| p.node.as_str()).collect::<Vec<_>>(), ["n-1"]);
    assert_eq!(plan.remediation.released_because("n-1"), "over the budget of 1 nodes");
    let status = plan.remediation.status("c", &Default::default()).unwrap();
    assert_eq!((status.failing_nodes, status.remediated, status.held_back), (2, 1, 1));
}

#[test]
fn paused_keeps_the_remediation_status_and_wants_no_rule() {
    let (mut c, world) = remediating(json!({}), &[0], vec![]);
    c.spec.paused = true;
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert!(matches!(plan.remediation, Remediation::Unchanged(None)));
}
