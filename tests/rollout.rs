//! The stepped plugin rollout (`driver.rollout`) on the local control plane: the real DaemonSet controller recreates
//! the pods the operator deletes, the real scheduler binds them, and the simulated kubelet plays the plugin (it
//! publishes each node's slice from the pod's image tag; `-notready` and `-fewer` tags misbehave).

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod rollout;
    pub mod scenario;
}

use std::collections::BTreeMap;
use std::time::Duration;

use neuron_dra_operator::api::{NeuronDRAConfigStatus, Phase, RolloutState};
use serde_json::json;
use support::cluster::eventually;
use support::rollout::{IMAGE, TYPE, all_on, apply, driver_ready, events, plugin_pods, ready_fleet, versions};
use support::scenario::TIMEOUT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_version_reaches_every_node_in_steps() {
    let policy = json!({"canary": 1, "maxUnavailable": 2, "timeout": "60s", "soak": "1s"});
    let f = ready_fleet("good", 5, policy.clone()).await;
    apply(&f, "1.2.0", policy).await;

    // Every status seen until the end: the counts must move through intermediate states.
    let seen = std::sync::Mutex::new(Vec::new());
    let done = f
        .wait_status("every node on 1.2.0", |s| {
            seen.lock().unwrap().push(s.clone());
            all_on(s, "1.2.0", 5)
                && s.driver.as_ref().unwrap().rollout.as_ref().unwrap().state == RolloutState::Complete
        })
        .await;
    let seen = seen.into_inner().unwrap();
    let mixed: Vec<&NeuronDRAConfigStatus> = seen.iter().filter(|s| versions(s).len() == 2).collect();
    assert!(!mixed.is_empty(), "no status showed two versions at once");
    let message = driver_ready(mixed[0]).2;
    assert!(message.contains("/5 nodes on 1.2.0"), "{message}");
    assert_eq!(driver_ready(mixed[0]).1, "RollingOut");
    assert_eq!(done.driver.unwrap().rollout.unwrap().step, 3, "canary 1, then 2 and 2");
    assert!(plugin_pods(&f).await.values().all(|(_, image)| image.ends_with(":1.2.0")));
    // Complete and idle: nothing more is written.
    let writes = f.scenario.operator().writes();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(f.scenario.operator().writes(), writes, "a finished rollout writes nothing");
    for what in ["canary: moving", "step 2: moving", "step 3: moving", "every node runs the plugin 1.2.0"] {
        eventually(TIMEOUT, &format!("an event {what:?}"), || async { events(&f).contains(what).then_some(()) }).await;
    }
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_never_gets_ready_halts_after_the_canary_and_rolling_back_recovers() {
    let policy = json!({"canary": 1, "maxUnavailable": 2, "timeout": "10s", "soak": "0s"});
    let f = ready_fleet("halt", 4, policy.clone()).await;
    let before = plugin_pods(&f).await;
    apply(&f, "1.2.0-notready", policy.clone()).await;

    let status = f.wait_status("the rollout halts", |s| driver_ready(s).1 == "RolloutHalted").await;
    let rollout = status.driver.as_ref().unwrap().rollout.clone().unwrap();
    assert_eq!(rollout.state, RolloutState::Halted);
    assert_eq!((rollout.step, rollout.failed_nodes.len()), (1, 1), "halted after the canary");
    let canary = rollout.failed_nodes[0].node.clone();
    assert_eq!(rollout.failed_nodes[0].reason, "PluginNotReady");
    let (ready, _, message) = driver_ready(&status);
    assert_eq!(ready, "False");
    assert!(message.contains(&format!("{canary}: plugin pod")) && message.contains("is not Ready"), "{message}");
    assert_eq!(versions(&status), BTreeMap::from([("1.1.0".into(), 3), ("1.2.0-notready".into(), 1)]));
    eventually(TIMEOUT, "RolloutHalted event", || async { events(&f).contains("RolloutHalted").then_some(()) }).await;
    let metric = format!("neuron_dra_operator_driver_rollout_halted{{config=\"{}\"}} 1", f.scenario.id);
    assert!(f.scenario.operator().metrics().lines().any(|l| l == metric), "no {metric}");

    // The other nodes are untouched, and stay so.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = plugin_pods(&f).await;
    for (node, pod) in &before {
        if *node != canary {
            assert_eq!(after.get(node), Some(pod), "{node}'s plugin pod was replaced");
        }
    }

    // The old image back: the canary node rolls back in the same steps.
    apply(&f, "1.1.0", policy).await;
    let status = f
        .wait_status("rolled back", |s| {
            all_on(s, "1.1.0", 4)
                && s.driver.as_ref().unwrap().rollout.as_ref().unwrap().state == RolloutState::Complete
        })
        .await;
    assert_eq!(status.phase, Some(Phase::Ready));
    assert_eq!(plugin_pods(&f).await.values().filter(|(_, image)| image.ends_with(":1.1.0")).count(), 4);
    let metric = format!("neuron_dra_operator_driver_rollout_halted{{config=\"{}\"}} 0", f.scenario.id);
    eventually(TIMEOUT, "the halted gauge back to 0", || async {
        f.scenario.operator().metrics().lines().any(|l| l == metric).then_some(())
    })
    .await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_loses_a_device_halts_and_a_fixed_image_resumes() {
    let policy = json!({"timeout": "10s", "soak": "0s"});
    let f = ready_fleet("fewer", 3, policy.clone()).await;
    apply(&f, "1.2.0-fewer", policy.clone()).await;
    let status = f.wait_status("the rollout halts", |s| driver_ready(s).1 == "RolloutHalted").await;
    let failed = &status.driver.as_ref().unwrap().rollout.as_ref().unwrap().failed_nodes;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].reason, "DevicesMissing");
    assert_eq!(failed[0].message, "1.2.0-fewer publishes 15 Neuron devices, 16 before");
    assert_eq!(versions(&status), BTreeMap::from([("1.1.0".into(), 2), ("1.2.0-fewer".into(), 1)]));

    // A fixed image resumes: the broken canary first, then the rest (10% of 3 rounds up to 1 per step).
    apply(&f, "1.2.1", policy).await;
    let status = f
        .wait_status("every node on 1.2.1", |s| {
            all_on(s, "1.2.1", 3)
                && s.driver.as_ref().unwrap().rollout.as_ref().unwrap().state == RolloutState::Complete
        })
        .await;
    assert_eq!(status.driver.unwrap().rollout.unwrap().step, 3);
    assert_eq!(status.devices.unwrap().unhealthy, 0, "every device published again");
    f.clear().await;
}

/// A halt holds until a new template: a spec that turns invalid in between keeps `status.driver.rollout`, and the
/// same spec fixed finds the rollout still halted (not restarting the broken revision at the canary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_survives_a_spec_that_turns_invalid_and_is_fixed() {
    let policy = json!({"canary": 1, "maxUnavailable": 2, "timeout": "10s", "soak": "0s"});
    let f = ready_fleet("halt-invalid", 3, policy.clone()).await;
    apply(&f, "1.2.0-notready", policy.clone()).await;
    let halted = f.wait_status("the rollout halts", |s| driver_ready(s).1 == "RolloutHalted").await;
    let halt = halted.driver.as_ref().unwrap().rollout.clone().unwrap();
    let pods = plugin_pods(&f).await;

    // Accepted by the API server, refused by the operator's catalog (no logical cores of 2 on trn1).
    let s = &f.scenario;
    let spec = json!({
        "nodeSelector": f.node_selector(),
        "driver": {"image": format!("{IMAGE}:1.2.0-notready"), "rollout": policy.clone()},
        "profiles": [{"name": "train", "training": {"instanceType": TYPE, "logicalNeuronCore": 2}}],
    });
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let invalid = f
        .wait_status("the spec is refused", |s| {
            s.conditions.iter().any(|c| c.type_ == "ConfigValid" && c.reason == "InvalidSpec")
        })
        .await;
    let kept = invalid.driver.as_ref().and_then(|d| d.rollout.clone());
    assert_eq!(kept.as_ref(), Some(&halt), "the invalid spec dropped the halted rollout");

    // The typo fixed: the same template, so the same halt; no pod moves.
    apply(&f, "1.2.0-notready", policy).await;
    let valid = f
        .wait_status("the spec is valid again", |s| {
            s.conditions.iter().any(|c| c.type_ == "ConfigValid" && c.status == "True")
                && s.conditions.iter().any(|c| c.type_ == "DriverReady" && c.reason != "NotApplied")
        })
        .await;
    assert_eq!(driver_ready(&valid).1, "RolloutHalted");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = f.wait_status("the status", |_| true).await;
    let rollout = status.driver.as_ref().unwrap().rollout.clone().unwrap();
    assert_eq!((rollout.state, rollout.step, &rollout.revision), (RolloutState::Halted, 1, &halt.revision));
    assert_eq!(plugin_pods(&f).await, pods, "no plugin pod was replaced: the canary did not start again");
    f.clear().await;
}
