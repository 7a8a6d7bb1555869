mod failure;

use super::*;
use crate::api::{PLUGIN_NOT_READY, VersionCount};
use crate::logic::status::{Reason, driver_condition};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const OLD: &str = "old111";
const NEW: &str = "new222";
const T0: i64 = 1_000_000;

fn target() -> Revision {
    Revision { hash: NEW.into(), number: 2, image: Some("registry/neuron-dra-driver:1.2.0".into()) }
}

/// A node running `revision`, ready, publishing 16 devices from `version`.
fn node(name: &str, revision: &str, version: &str) -> NodeState {
    NodeState {
        name: name.into(),
        pod: Some(PodState {
            name: format!("plugin-{name}"),
            uid: Some(format!("uid-{name}")),
            revision: Some(revision.into()),
            ready: true,
            terminating: false,
            created: Some(T0 - 1000),
        }),
        devices: 16,
        versions: vec![version.into()],
        slices: format!("{name}-{revision}"),
        created: Some(T0 - 10_000),
    }
}

/// A policy without a soak, for tests of the stepping itself.
fn unsoaked(policy: RolloutPolicy) -> RolloutPolicy {
    RolloutPolicy { soak: "0s".into(), ..policy }
}

fn fleet(n: usize) -> Vec<NodeState> {
    (0..n).map(|i| node(&format!("n{i:02}"), OLD, "1.1.0")).collect()
}

fn inputs<'a>(
    policy: &'a RolloutPolicy,
    nodes: &'a [NodeState],
    target: &'a Revision,
    previous: Option<&'a RolloutStatus>,
    now: i64,
) -> Inputs<'a> {
    let template = "spec222".into();
    Inputs {
        policy,
        nodes,
        target,
        slice_version: Some("1.2.0".into()),
        template,
        held: None,
        previous,
        now,
        acting: true,
    }
}

fn evicted(decision: &Decision) -> Vec<&str> {
    decision.evict.iter().map(|e| e.node.as_str()).collect()
}

/// Moves the evicted nodes to the target revision as the DaemonSet controller and a good plugin would.
fn move_nodes(nodes: &mut [NodeState], names: &[&str]) {
    for n in nodes.iter_mut().filter(|n| names.contains(&n.name.as_str())) {
        *n = node(&n.name, NEW, "1.2.0");
        n.pod.as_mut().unwrap().created = Some(T0 + 1);
    }
}

#[test]
fn a_good_rollout_moves_the_canary_then_steps_until_complete() {
    let policy = unsoaked(RolloutPolicy { max_unavailable: IntOrString::Int(2), ..RolloutPolicy::default() });
    let target = target();
    let mut nodes = fleet(5);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    assert_eq!(evicted(&first), ["n00"], "one canary node");
    assert_eq!(first.status.step, 1);
    assert_eq!(
        first.status.step_nodes,
        [StepNode { node: "n00".into(), devices: 16, slices: Some("n00-old111".into()) }]
    );
    assert_eq!(first.change, Some(Change::Step { step: 1, nodes: vec!["n00".into()] }));

    // Until the canary passes, nothing else moves; a canary pod that is still there is deleted again.
    let again = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 5));
    assert_eq!((evicted(&again), &again.status), (vec!["n00"], &first.status));
    nodes[0].pod.as_mut().unwrap().terminating = true;
    let waiting = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 10));
    assert!(waiting.evict.is_empty());
    assert_eq!(waiting.status, first.status, "a reconcile that changes nothing writes nothing");

    let mut status = first.status;
    move_nodes(&mut nodes, &["n00"]);
    let mut steps = vec![];
    for round in 0..10 {
        let decision = plan(&inputs(&policy, &nodes, &target, Some(&status), T0 + 20 + round));
        let moved: Vec<String> = evicted(&decision).iter().map(|s| s.to_string()).collect();
        status = decision.status;
        if moved.is_empty() {
            assert_eq!(decision.change, Some(Change::Complete));
            break;
        }
        steps.push(moved.clone());
        move_nodes(&mut nodes, &moved.iter().map(String::as_str).collect::<Vec<_>>());
    }
    assert_eq!(steps, [vec!["n01", "n02"], vec!["n03", "n04"]]);
    assert_eq!(status.state, RolloutState::Complete);
    assert!(status.step_nodes.is_empty() && status.step_start_time.is_none());
}

#[test]
fn a_canary_that_never_gets_ready_halts_at_the_timeout_naming_it() {
    let policy = RolloutPolicy::default(); // 5m
    let target = target();
    let mut nodes = fleet(4);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    move_nodes(&mut nodes, &["n00"]);
    nodes[0].pod.as_mut().unwrap().ready = false;
    nodes[0].versions = vec!["1.1.0".into()];

    let before = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 299));
    assert_eq!((before.status.state, before.change.clone()), (RolloutState::Progressing, None));
    let halted = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 300));
    assert_eq!(halted.status.state, RolloutState::Halted);
    assert_eq!(halted.change, Some(Change::Halted));
    assert!(halted.evict.is_empty(), "the other nodes are not touched");
    let failed = &halted.status.failed_nodes[0];
    assert_eq!((failed.node.as_str(), failed.reason.as_str()), ("n00", PLUGIN_NOT_READY));
    assert!(halt_message(&halted.status).contains("n00: plugin pod plugin-n00 of 1.2.0 is not Ready"));

    // The halt holds, even once the node recovers: only a new template resumes.
    move_nodes(&mut nodes, &["n00"]);
    let later = plan(&inputs(&policy, &nodes, &target, Some(&halted.status), T0 + 900));
    assert_eq!((later.status.state, later.evict.len(), later.change), (RolloutState::Halted, 0, None));
}

#[test]
fn fewer_devices_or_a_stale_slice_fail_the_check() {
    let policy = unsoaked(RolloutPolicy::default());
    let target = target();
    let mut nodes = fleet(3);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    move_nodes(&mut nodes, &["n00"]);
    nodes[0].devices = 15;
    let halted = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 301));
    let failed = &halted.status.failed_nodes[0];
    assert_eq!(failed.reason, DEVICES_MISSING);
    assert_eq!(failed.message, "1.2.0 publishes 15 Neuron devices, 16 before");

    nodes[0].devices = 16;
    nodes[0].versions = vec!["1.1.0".into()];
    let stale = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 301));
    assert_eq!(stale.status.failed_nodes[0].reason, NOT_REPUBLISHED);

    // Without a semver tag only the devices are compared.
    let mut any = inputs(&policy, &nodes, &target, Some(&first.status), T0 + 301);
    any.slice_version = None;
    let next = plan(&any);
    assert_eq!((evicted(&next), next.status.step), (vec!["n01"], 2), "passed: the next step moves");
}

#[test]
fn a_new_template_resumes_and_moves_the_broken_nodes_first() {
    let policy = RolloutPolicy::default();
    let bad = target();
    let mut nodes = fleet(4);
    let first = plan(&inputs(&policy, &nodes, &bad, None, T0));
    move_nodes(&mut nodes, &["n00"]);
    nodes[0].pod.as_mut().unwrap().ready = false;
    let halted = plan(&inputs(&policy, &nodes, &bad, Some(&first.status), T0 + 400)).status;
    assert_eq!(halted.state, RolloutState::Halted);

    // Rolling back: the old revision is current again; only the canary node runs something else.
    let back = Revision { hash: OLD.into(), number: 3, image: Some("registry/neuron-dra-driver:1.1.0".into()) };
    let mut rollback = inputs(&policy, &nodes, &back, Some(&halted), T0 + 500);
    rollback.slice_version = Some("1.1.0".into());
    let decision = plan(&rollback);
    assert_eq!(evicted(&decision), ["n00"]);
    assert_eq!((decision.status.step, decision.status.revision.as_str()), (1, OLD));

    // A fixed image: every node is old; the broken canary goes first.
    let fixed = Revision { hash: "fix333".into(), number: 4, image: Some("registry/neuron-dra-driver:1.2.1".into()) };
    let decision = plan(&inputs(&policy, &nodes, &fixed, Some(&halted), T0 + 500));
    assert_eq!(evicted(&decision), ["n00"]);
    assert!(decision.status.failed_nodes.is_empty());
}

#[test]
fn paused_judges_but_moves_nothing_and_a_lost_start_time_restarts_the_clock() {
    let policy = RolloutPolicy::default();
    let target = target();
    let nodes = fleet(3);
    let mut paused = inputs(&policy, &nodes, &target, None, T0);
    paused.acting = false;
    let decision = plan(&paused);
    assert!(decision.evict.is_empty() && decision.change.is_none());

    let mut lost = plan(&inputs(&policy, &nodes, &target, None, T0)).status;
    lost.step_start_time = None;
    let decision = plan(&inputs(&policy, &nodes, &target, Some(&lost), T0 + 1000));
    assert_eq!(decision.status.step_start_time.map(|t| t.0.as_second()), Some(T0 + 1000));
    assert_eq!(decision.status.state, RolloutState::Progressing);
}

#[test]
fn steps_are_sized_by_the_fleet_and_complete_at_once_when_nothing_is_old() {
    let policy = unsoaked(RolloutPolicy { canary: 2, ..RolloutPolicy::default() });
    let target = target();
    let mut nodes = fleet(40);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    assert_eq!(first.evict.len(), 2);
    move_nodes(&mut nodes, &["n00", "n01"]);
    let second = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 1));
    assert_eq!(evicted(&second), ["n02", "n03", "n04", "n05"], "10% of 40");

    let fresh: Vec<NodeState> = (0..3).map(|i| node(&format!("m{i}"), NEW, "1.2.0")).collect();
    let done = plan(&inputs(&policy, &fresh, &target, None, T0));
    assert_eq!((done.status.state, done.status.step, done.change), (RolloutState::Complete, 0, None));
}

#[test]
fn versions_count_nodes_and_ready_per_revision() {
    let mut nodes = fleet(3);
    move_nodes(&mut nodes, &["n00"]);
    nodes[1].pod.as_mut().unwrap().ready = false;
    nodes[2].pod.as_mut().unwrap().terminating = true;
    let revisions =
        vec![Revision { hash: OLD.into(), number: 1, image: Some("r/neuron-dra-driver:1.1.0".into()) }, target()];
    let list = versions(&nodes, &revisions, Some(NEW));
    assert_eq!(
        list,
        [
            VersionCount { version: "1.2.0".into(), revision: NEW.into(), current: true, nodes: 1, ready: 1 },
            VersionCount { version: "1.1.0".into(), revision: OLD.into(), current: false, nodes: 1, ready: 0 },
        ]
    );
}

#[test]
fn driver_ready_says_how_many_nodes_run_the_version_and_names_a_halt() {
    let mut driver = crate::api::DriverStatus {
        image: Some("r/neuron-dra-driver:1.2.0".into()),
        desired_nodes: 40,
        ready_nodes: 39,
        updated_nodes: 12,
        ..Default::default()
    };
    let (ok, reason, message) = driver_condition(&driver);
    assert_eq!((ok, reason, message.as_str()), (false, Reason::RollingOut, "12/40 nodes on 1.2.0, 39 ready"));

    let policy = RolloutPolicy::default();
    let target = target();
    let nodes = fleet(40);
    driver.rollout = Some(plan(&inputs(&policy, &nodes, &target, None, T0)).status);
    assert_eq!(driver_condition(&driver).2, "12/40 nodes on 1.2.0, 39 ready (canary: n00)");

    let mut halted = driver.rollout.clone().unwrap();
    halted.state = RolloutState::Halted;
    halted.failed_nodes = vec![NodeIssue {
        node: "n00".into(),
        reason: PLUGIN_NOT_READY.into(),
        message: "plugin pod p is not Ready".into(),
    }];
    driver.rollout = Some(halted);
    let (ok, reason, message) = driver_condition(&driver);
    assert_eq!((ok, reason), (false, Reason::RolloutHalted));
    assert!(
        message.starts_with(
            "12/40 nodes on 1.2.0, 39 ready; rollout to 1.2.0 halted at step 1: n00: plugin pod p is not Ready"
        ),
        "{message}"
    );
}
