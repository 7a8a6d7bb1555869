//! How the stepped plugin rollout (`driver.rollout`) catches and contains a bad version on the local control plane:
//! the soak after each step, re-checks of the nodes earlier steps moved, slices that were never written again, a
//! node that joins while the rollout is halted, and `onFailure: Rollback`. The simulated kubelet plays the plugin
//! (`-notready` and `-nopublish` tags misbehave).

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod rollout;
    pub mod scenario;
}

use std::time::Duration;

use neuron_dra_operator::api::{NeuronDRAConfigStatus, RolloutState, RolloutStatus};
use neuron_dra_operator::devtools::simulate::{self, FaultKind, TaintEffect, fleet};
use serde_json::json;
use support::cluster::eventually;
use support::rollout::{TYPE, all_on, apply, driver_ready, events, plugin_pods, ready_fleet, versions};
use support::scenario::TIMEOUT;

fn rollout(status: &NeuronDRAConfigStatus) -> Option<&RolloutStatus> {
    status.driver.as_ref()?.rollout.as_ref()
}

fn seconds(time: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    time.as_ref().expect("a time").0.as_second()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_soaks_before_the_next_and_a_node_of_an_earlier_step_that_fails_halts_the_rollout() {
    let policy = json!({"canary": 1, "maxUnavailable": 1, "timeout": "60s", "soak": "6s"});
    let f = ready_fleet("soak", 3, policy.clone()).await;
    apply(&f, "1.2.0", policy).await;

    let soaking = f
        .wait_status("the canary passed and soaks", |s| {
            rollout(s).is_some_and(|r| r.step == 1 && r.soak_start_time.is_some())
        })
        .await;
    let canary = rollout(&soaking).unwrap().step_nodes[0].node.clone();
    let soak_start = seconds(&rollout(&soaking).unwrap().soak_start_time);
    let second = f.wait_status("step 2", |s| rollout(s).is_some_and(|r| r.step == 2)).await;
    let started = seconds(&rollout(&second).unwrap().step_start_time);
    assert!(started >= soak_start + 6, "step 2 started {}s into the canary's 6s soak", started - soak_start);

    // The canary's plugin stops being Ready while step 2 runs: the rollout halts at once, naming it.
    f.fault(FaultKind::PluginNotReady, &canary, TaintEffect::NoSchedule).await;
    let halted = f.wait_status("the rollout halts", |s| driver_ready(s).1 == "RolloutHalted").await;
    let failed: Vec<&str> = rollout(&halted).unwrap().failed_nodes.iter().map(|n| n.node.as_str()).collect();
    assert!(failed.contains(&canary.as_str()), "{failed:?}");
    assert_eq!(rollout(&halted).unwrap().step, 2);
    f.clear().await;
}

/// `-nopublish` gets Ready but never writes its slices, and has no semver tag: the slices the old plugin wrote
/// must not pass for the new version's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_never_publishes_halts_even_without_a_semver_tag() {
    let policy = json!({"timeout": "10s", "soak": "0s"});
    let f = ready_fleet("nopublish", 3, policy.clone()).await;
    apply(&f, "1.2.0-nopublish", policy).await;
    let halted = f.wait_status("the rollout halts", |s| driver_ready(s).1 == "RolloutHalted").await;
    let failed = &rollout(&halted).unwrap().failed_nodes;
    assert_eq!((failed.len(), failed[0].reason.as_str()), (1, "SliceNotRepublished"));
    assert_eq!(versions(&halted).get("1.1.0"), Some(&2), "the other nodes keep the old version");
    f.clear().await;
}

/// A node that joins while the rollout is halted gets the last good version, not the halted one; the canary keeps
/// the bad version for inspection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_during_a_halt_gets_the_last_good_version() {
    let policy = json!({"timeout": "10s", "soak": "0s"});
    let f = ready_fleet("join", 2, policy.clone()).await;
    apply(&f, "1.2.0-notready", policy).await;
    let halted = f.wait_status("the rollout halts", |s| driver_ready(s).1 == "RolloutHalted").await;
    let canary = rollout(&halted).unwrap().failed_nodes[0].node.clone();

    let spec = fleet::FleetSpec {
        prefix: f.prefixes()[0].clone(),
        count: 3,
        instance_type: TYPE.into(),
        dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
        neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
    };
    simulate::create_fleet(&f.scenario.client, &spec).await.unwrap();
    let joined = f.node(TYPE, 2);
    let status = f
        .wait_status("the new node runs a ready plugin", |s| {
            versions(s).get("1.1.0") == Some(&2) && s.driver.as_ref().is_some_and(|d| d.ready_nodes == 2)
        })
        .await;
    let pods = plugin_pods(&f).await;
    assert!(pods[&joined].1.ends_with(":1.1.0"), "{joined} runs {}", pods[&joined].1);
    assert!(pods[&canary].1.ends_with(":1.2.0-notready"), "the halted canary is left as it is");
    assert_eq!(rollout(&status).unwrap().state, RolloutState::Halted, "still halted");
    f.clear().await;
}

/// `onFailure: Rollback`: the failed canary moves back to the last good version, and the rollout stays rolled back
/// until a new template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_moves_the_failed_nodes_back_to_the_last_good_version() {
    let policy = json!({"timeout": "10s", "soak": "0s", "onFailure": "Rollback"});
    let f = ready_fleet("rollback", 3, policy.clone()).await;
    let before = plugin_pods(&f).await;
    apply(&f, "1.2.0-notready", policy.clone()).await;
    let status = f
        .wait_status("rolled back", |s| {
            rollout(s).is_some_and(|r| r.state == RolloutState::RolledBack)
                && s.driver.as_ref().unwrap().ready_nodes == 3
        })
        .await;
    let rolled = rollout(&status).unwrap();
    assert_eq!((rolled.step, rolled.failed_nodes.len()), (1, 1), "the canary failed");
    let canary = rolled.failed_nodes[0].node.clone();
    assert_eq!(versions(&status).get("1.1.0"), Some(&3), "{:?}", versions(&status));
    let (ready, reason, message) = driver_ready(&status);
    assert_eq!((ready, reason), ("False", "RolloutHalted"));
    assert!(message.contains("its nodes run the last good version again"), "{message}");
    let after = plugin_pods(&f).await;
    for (node, pod) in &before {
        if *node != canary {
            assert_eq!(after.get(node), Some(pod), "{node}'s plugin pod was replaced");
        }
    }
    for what in ["RolloutHalted", "rolling back: moving", "runs the last good version again"] {
        eventually(TIMEOUT, &format!("an event {what:?}"), || async { events(&f).contains(what).then_some(()) }).await;
    }
    // Rolled back holds: nothing moves again.
    let writes = f.scenario.operator().writes();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(f.scenario.operator().writes(), writes, "a rolled back rollout writes nothing");

    // A fixed version rolls out as usual.
    apply(&f, "1.2.1", policy).await;
    f.wait_status("every node on 1.2.1", |s| all_on(s, "1.2.1", 3)).await;
    f.clear().await;
}
