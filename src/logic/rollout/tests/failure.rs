//! Soak, re-checks of earlier steps, slices that were there before a node moved, and what a failure does
//! (`onFailure`): the decisions alone, in milliseconds.

use super::*;
use crate::api::OnFailure;

const SOAK: i64 = 120;

fn rollback() -> RolloutPolicy {
    RolloutPolicy { on_failure: OnFailure::Rollback, ..unsoaked(RolloutPolicy::default()) }
}

#[test]
fn a_passed_step_soaks_before_the_next_and_a_failure_during_the_soak_halts_at_once() {
    let policy = RolloutPolicy::default(); // soak 2m
    let target = target();
    let mut nodes = fleet(4);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    move_nodes(&mut nodes, &["n00"]);

    // Passed at T0 + 10: the soak starts (written once), nothing moves.
    let passed = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 10));
    assert!(passed.evict.is_empty() && passed.change.is_none());
    assert_eq!(passed.status.soak_start_time.as_ref().map(|t| t.0.as_second()), Some(T0 + 10));
    let again = plan(&inputs(&policy, &nodes, &target, Some(&passed.status), T0 + 10 + SOAK - 1));
    assert_eq!((again.evict.len(), &again.status), (0, &passed.status), "a soaking step changes nothing");

    // The soak over: the next step.
    let next = plan(&inputs(&policy, &nodes, &target, Some(&passed.status), T0 + 10 + SOAK));
    assert_eq!((evicted(&next), next.status.step), (vec!["n01"], 2));
    assert!(next.status.soak_start_time.is_none());

    // A node that had passed fails during the soak: halted at once, well before the timeout.
    nodes[0].pod.as_mut().unwrap().ready = false;
    let halted = plan(&inputs(&policy, &nodes, &target, Some(&passed.status), T0 + 20));
    assert_eq!((halted.status.state, halted.change), (RolloutState::Halted, Some(Change::Halted)));
    assert_eq!(halted.status.failed_nodes[0].node, "n00");
}

#[test]
fn the_last_step_soaks_before_the_rollout_is_complete() {
    let policy = RolloutPolicy::default();
    let target = target();
    let mut nodes = fleet(1);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    move_nodes(&mut nodes, &["n00"]);
    let soaking = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 5));
    assert_eq!(soaking.status.state, RolloutState::Progressing);
    let done = plan(&inputs(&policy, &nodes, &target, Some(&soaking.status), T0 + 5 + SOAK));
    assert_eq!((done.status.state, done.change), (RolloutState::Complete, Some(Change::Complete)));
}

#[test]
fn nodes_of_earlier_steps_are_checked_until_the_rollout_completes_but_nodes_that_joined_are_not() {
    let policy = unsoaked(RolloutPolicy::default());
    let target = target();
    let mut nodes = fleet(4);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    move_nodes(&mut nodes, &["n00"]);
    let second = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 10));
    assert_eq!(evicted(&second), ["n01"]);
    move_nodes(&mut nodes, &["n01"]);

    // A node that joined during the rollout runs the new version but was never moved: not a reason to halt.
    let mut joined = node("n99", NEW, "1.2.0");
    joined.created = Some(T0 + 5);
    joined.pod.as_mut().unwrap().ready = false;
    nodes.push(joined);
    let third = plan(&inputs(&policy, &nodes, &target, Some(&second.status), T0 + 20));
    assert_eq!((third.status.state, third.status.step), (RolloutState::Progressing, 3));

    // The canary's plugin stops being Ready while step 3 runs: the rollout halts at once, naming it.
    nodes[0].pod.as_mut().unwrap().ready = false;
    let halted = plan(&inputs(&policy, &nodes, &target, Some(&third.status), T0 + 25));
    assert_eq!(halted.status.state, RolloutState::Halted);
    let failed: Vec<&str> = halted.status.failed_nodes.iter().map(|f| f.node.as_str()).collect();
    assert_eq!(failed, ["n00"]);
}

#[test]
fn without_a_semver_tag_a_slice_that_was_there_before_the_node_moved_never_counts_as_published_again() {
    let policy = unsoaked(RolloutPolicy::default());
    let target = Revision { image: Some("registry/neuron-dra-driver:nightly".into()), ..target() };
    let mut nodes = fleet(3);
    let judged = |nodes: &[NodeState], previous, now| {
        let mut i = inputs(&policy, nodes, &target, previous, now);
        i.slice_version = None;
        plan(&i)
    };
    let first = judged(&nodes, None, T0);
    // The new pod is Ready, but the node's slices are still the ones the old plugin wrote.
    let before = nodes[0].slices.clone();
    move_nodes(&mut nodes, &["n00"]);
    nodes[0].slices = before;
    let halted = judged(&nodes, Some(&first.status), T0 + 300);
    assert_eq!(halted.status.state, RolloutState::Halted);
    let failed = &halted.status.failed_nodes[0];
    assert_eq!(failed.reason, NOT_REPUBLISHED);
    assert_eq!(failed.message, "ResourceSlice not published again by nightly since the plugin was replaced");

    nodes[0].slices = "written-again".into();
    let passed = judged(&nodes, Some(&first.status), T0 + 300);
    assert_eq!(evicted(&passed), ["n01"]);
}

#[test]
fn rollback_moves_the_failed_nodes_back_in_steps_once_the_daemon_set_holds_the_last_good_template() {
    let policy = rollback();
    let target = target();
    let mut nodes = fleet(4);
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    assert_eq!(first.status.previous_revision.as_deref(), Some(OLD), "the revision the nodes ran");
    move_nodes(&mut nodes, &["n00"]);
    nodes[0].pod.as_mut().unwrap().ready = false;
    let failed = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 300));
    assert_eq!((failed.status.state, failed.change.clone()), (RolloutState::RollingBack, Some(Change::Halted)));
    assert!(holds(&failed.status, "spec222") && !holds(&failed.status, "other"), "held until a new template");

    // The DaemonSet does not run the last good template yet: nothing moves.
    let waiting = plan(&inputs(&policy, &nodes, &target, Some(&failed.status), T0 + 301));
    assert!(waiting.evict.is_empty());

    let good = Revision { hash: OLD.into(), number: 3, image: Some("registry/neuron-dra-driver:1.1.0".into()) };
    let held = Held { revision: &good, slice_version: Some("1.1.0") };
    let with_held = |nodes: &[NodeState], status, now| {
        let mut i = inputs(&policy, nodes, &target, Some(status), now);
        i.held = Some(held);
        plan(&i)
    };
    let back = with_held(&nodes, &failed.status, T0 + 302);
    assert_eq!((evicted(&back), back.change.clone()), (vec!["n00"], Some(Change::Back { nodes: vec!["n00".into()] })));
    assert_eq!((back.status.state, back.status.step), (RolloutState::RollingBack, 1), "the step that failed");

    // Back on the old revision, its slices written again by 1.1.0: rolled back, and it stays so.
    nodes[0] = node("n00", OLD, "1.1.0");
    nodes[0].slices = "written-again".into();
    let done = with_held(&nodes, &back.status, T0 + 310);
    assert_eq!((done.status.state, done.change.clone()), (RolloutState::RolledBack, Some(Change::RolledBack)));
    assert!(halt_message(&done.status).contains("its nodes run the last good version again"));
    let later = with_held(&nodes, &done.status, T0 + 900);
    assert_eq!((later.status, later.evict.len()), (done.status, 0));
}

#[test]
fn halt_keeps_the_nodes_and_without_a_last_good_revision_rollback_halts() {
    let target = target();
    let fresh_fleet: Vec<NodeState> = vec![];
    let first = plan(&inputs(&rollback(), &fresh_fleet, &target, None, T0));
    assert_eq!(first.status.previous_revision, None, "nothing ran before");

    let mut nodes = fleet(2);
    let policy = unsoaked(RolloutPolicy::default());
    let first = plan(&inputs(&policy, &nodes, &target, None, T0));
    move_nodes(&mut nodes, &["n00"]);
    nodes[0].pod.as_mut().unwrap().ready = false;
    let halted = plan(&inputs(&policy, &nodes, &target, Some(&first.status), T0 + 300)).status;
    assert_eq!(halted.state, RolloutState::Halted);
    assert!(holds(&halted, "spec222"), "new nodes get the last good template while halted");
    let mut stale = halted.clone();
    stale.template = None;
    assert!(!holds(&stale, "spec222"), "a status from before holds nothing");
}
