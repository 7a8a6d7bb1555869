//! The operator's plugin DaemonSet on a real node: a kubelet registers the stand-in Neuron plugin
//! (docs/standin-plugin.md) that the unchanged DaemonSet runs, pods on the operator's templates run in containers
//! with their claimed devices, a rollout moves the plugin between images, and `NoExecute` remediation evicts a
//! running pod. The operator runs as a process under the shipped RBAC, as in every controller test; tests/node_install.rs
//! runs it as a pod.
//!
//! One node serves them all, so `make test-node` runs them one at a time (`--test-threads=1`).

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod node;
    pub mod scenario;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PatchParams};
use neuron_dra_operator::api::{NeuronDRAConfigStatus, RolloutState};
use serde_json::{Value, json};
use support::allocation::{claim_of, create_pod, pinned, workload_pod};
use support::cluster::eventually;
use support::node::{self, Seen};
use support::scenario::{Scenario, TIMEOUT};

/// The real node's instance type (`hack/node.sh` labels it) and its device count in the simulator's model.
const TYPE: &str = "trn2.48xlarge";
const DEVICES: usize = 16;

/// The spec of a config on the real node only: the stand-in plugin at `tag`, `profiles` in `namespace`, and
/// `extra` merged in.
fn spec(node: &str, tag: &str, namespace: &str, profiles: &Value, extra: &Value) -> Value {
    let mut spec = json!({
        "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
        "driver": {"image": node::plugin_image(tag), "imagePullPolicy": "IfNotPresent"},
        "templates": {"namespaces": [namespace]},
        "profiles": profiles,
    });
    node::merge(&mut spec, extra);
    spec
}

/// Applies the test's config (`spec`) in a new namespace of the test, once the plugin pods of earlier tests have
/// stopped (`node::plugin_pods_gone`) and their slices are gone (so the slice a test waits for is this plugin's);
/// gives the namespace.
async fn start(s: &Scenario, node: &str, tag: &str, profiles: Value, extra: Value) -> String {
    node::plugin_pods_gone(&s.client, node).await;
    node::forget_slices(&s.client, node).await;
    let namespace = s.namespace("work", &[]).await;
    s.apply(&s.config(&s.id, spec(node, tag, &namespace, &profiles, &extra))).await.unwrap();
    namespace
}

fn condition<'a>(status: &'a NeuronDRAConfigStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// A workload pod on `template` that sleeps, on the real node (never on a simulated node another test left).
async fn run_pod(s: &Scenario, node: &str, namespace: &str, name: &str, template: &str) {
    let mut pod = pinned(workload_pod(name, template, &Value::Null), node);
    pod["spec"]["containers"][0]["image"] = json!(node::image("busybox"));
    pod["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
    pod["spec"]["containers"][0]["command"] = json!(["sleep", "3600"]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(1);
    create_pod(&s.client, namespace, &pod).await;
}

async fn wait_running(s: &Scenario, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    let what = format!("pod {name} Running");
    let found = tokio::time::timeout(TIMEOUT, async {
        loop {
            let pod = pods.get(name).await.unwrap();
            if pod.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running") {
                return pod;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}:\n{}", node::describe(&[namespace])))
}

/// The devices the claim of a pod was allocated, as the container should see them, with the claim's uid.
async fn allocated(s: &Scenario, pod: &Pod) -> (Vec<String>, String) {
    let claim: ResourceClaim = claim_of(&s.client, pod).await;
    let results = claim.status.and_then(|st| st.allocation).and_then(|a| a.devices).and_then(|d| d.results);
    let mut indexes: Vec<u32> = results
        .unwrap_or_default()
        .iter()
        .map(|r| r.device.strip_prefix("neuron-device-").and_then(|k| k.parse().ok()).expect("a Neuron device"))
        .collect();
    indexes.sort();
    (indexes.iter().map(|k| format!("/dev/neuron{k}")).collect(), claim.metadata.uid.unwrap())
}

/// The pod's container sees exactly its claim's devices and the Neuron runtime's environment for them; gives the
/// claim's uid.
async fn check_devices(s: &Scenario, namespace: &str, pod: &Pod, lnc: &str) -> String {
    let name = pod.metadata.name.as_deref().unwrap();
    let (want, uid) = allocated(s, pod).await;
    let seen: Seen = node::seen_by(namespace, name);
    assert_eq!(seen.devices, want, "{name}: the container's /dev against its claim's allocation");
    let listed: Vec<String> = want.iter().map(|d| d.trim_start_matches("/dev/neuron").to_string()).collect();
    assert_eq!(node::env_value(&seen.env, "NEURON_DRA_DEVICES"), Some(listed.join(",").as_str()), "{seen:?}");
    assert_eq!(node::env_value(&seen.env, "NEURON_LOGICAL_NC_CONFIG"), Some(lnc), "{seen:?}");
    assert!(node::env_value(&seen.env, "NEURON_RT_VISIBLE_CORES").is_some(), "{seen:?}");
    assert!(node::cdi_spec(&uid).exists(), "{name}: the claim's CDI spec is on the node");
    uid
}

async fn wait_unprepared(claim_uid: &str) {
    let spec = node::cdi_spec(claim_uid);
    eventually(TIMEOUT, &format!("{} removed (claim unprepared)", spec.display()), || async {
        (!spec.exists()).then_some(())
    })
    .await;
}

async fn finish(s: &Scenario) {
    s.delete_config(&s.id).await;
    eventually(TIMEOUT, "the config gone", || async { s.configs().get_opt(&s.id).await.ok()?.is_none().then_some(()) })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real node: make test-node"]
async fn the_unchanged_daemonset_registers_the_plugin_with_the_kubelet_and_the_node_counts_ready() {
    let s = Scenario::with_operator("node-plugin").await;
    let node = node::name(&s.client).await;
    start(&s, &node, "1.1.0", json!([{"name": "four", "training": {"instanceType": TYPE, "devices": 4}}]), json!({}))
        .await;

    let devices = node::published_devices(&s.client, &node, "1.1.0").await;
    assert_eq!(devices.len(), DEVICES, "{devices:?}");
    let registered = node::registrations(&node, node::DRIVER);
    assert!(registered > 0, "the kubelet registered no {} plugin", node::DRIVER);
    let status = s
        .wait_status("Ready with the node's devices", |st| {
            st.devices.as_ref().is_some_and(|d| d.nodes == 1 && d.healthy == DEVICES as i64)
                && condition(st, "Ready").0 == "True"
        })
        .await;
    let driver = status.driver.as_ref().unwrap();
    assert_eq!((driver.desired_nodes, driver.ready_nodes), (1, 1));
    assert_eq!(condition(&status, "DriverReady").2, "1/1 nodes on 1.1.0, 1 ready");
    assert!(status.node_issues.is_empty(), "{:?}", status.node_issues);

    // A kubelet restart (`stop-component kubelet`, then `start-component`): the running plugin registers with the
    // new kubelet, and the config stays Ready with the node's devices.
    node::component("stop-component", "kubelet", &node);
    assert!(!node::running(&node), "hack/node.sh status sees the kubelet stopped");
    node::component("start-component", "kubelet", &node);
    eventually(TIMEOUT, "the plugin registered with the restarted kubelet", || async {
        (node::registrations(&node, node::DRIVER) > registered).then_some(())
    })
    .await;
    assert!(node::running(&node));
    s.wait_status("Ready after the kubelet restart", |st| {
        st.devices.as_ref().is_some_and(|d| d.healthy == DEVICES as i64) && condition(st, "Ready").0 == "True"
    })
    .await;
    finish(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real node: make test-node"]
async fn pods_run_with_exactly_their_claimed_devices_and_free_them_when_they_go() {
    let s = Scenario::with_operator("node-pods").await;
    let node = node::name(&s.client).await;
    let profiles = json!([
        {"name": "whole", "training": {"instanceType": TYPE, "devices": DEVICES}},
        {"name": "serve", "disaggregated": {
            "prefill": {"instanceType": TYPE, "devices": 8, "logicalNeuronCore": 2},
            "decode": {"instanceType": TYPE, "devices": 8, "logicalNeuronCore": 1},
        }},
    ]);
    let namespace = start(&s, &node, "1.1.0", profiles, json!({})).await;
    node::published_devices(&s.client, &node, "1.1.0").await;
    s.wait_templates(&namespace, &["serve-decode", "serve-prefill", "whole"]).await;

    // The whole node for one trainer.
    run_pod(&s, &node, &namespace, "trainer", "whole").await;
    let trainer = wait_running(&s, &namespace, "trainer").await;
    let trainer_claim = check_devices(&s, &namespace, &trainer, "2").await;

    // The disaggregated pair waits for devices while the trainer holds every one...
    run_pod(&s, &node, &namespace, "prefill", "serve-prefill").await;
    run_pod(&s, &node, &namespace, "decode", "serve-decode").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &namespace);
    for name in ["prefill", "decode"] {
        let phase = pods.get(name).await.unwrap().status.and_then(|st| st.phase);
        assert_eq!(phase.as_deref(), Some("Pending"), "{name} must wait for the trainer's devices");
    }

    // ...and gets them once the trainer goes and its claim is unprepared.
    s.delete_pod(&namespace, "trainer").await;
    wait_unprepared(&trainer_claim).await;
    let prefill = wait_running(&s, &namespace, "prefill").await;
    let decode = wait_running(&s, &namespace, "decode").await;
    let prefill_claim = check_devices(&s, &namespace, &prefill, "2").await;
    let decode_claim = check_devices(&s, &namespace, &decode, "1").await;
    let (a, _) = allocated(&s, &prefill).await;
    let (b, _) = allocated(&s, &decode).await;
    assert_eq!(a.len() + b.len(), DEVICES);
    assert!(a.iter().all(|d| !b.contains(d)), "prefill {a:?} and decode {b:?} share a device");

    for (name, claim) in [("prefill", prefill_claim), ("decode", decode_claim)] {
        s.delete_pod(&namespace, name).await;
        wait_unprepared(&claim).await;
    }
    finish(&s).await;
}

/// The plugin pod's image on the node, and whether it is Ready.
async fn plugin_pod(s: &Scenario) -> Option<(String, bool)> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let list = pods.list(&Default::default()).await.ok()?;
    let pod = list.items.into_iter().find(|p| p.metadata.deletion_timestamp.is_none())?;
    let image = pod.spec.as_ref()?.containers[0].image.clone()?;
    let ready = pod.status?.conditions?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    Some((image, ready))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real node: make test-node"]
async fn a_rollout_moves_the_real_node_between_tags_and_a_notready_tag_halts_naming_it() {
    let s = Scenario::with_operator("node-rollout").await;
    let node = node::name(&s.client).await;
    let profiles = json!([{"name": "one", "training": {"instanceType": TYPE, "devices": 1}}]);
    let rollout = json!({"driver": {"rollout": {"canary": 1, "maxUnavailable": 1, "timeout": "45s", "soak": "5s"}}});
    let namespace = start(&s, &node, "1.1.0", profiles.clone(), rollout.clone()).await;
    node::published_devices(&s.client, &node, "1.1.0").await;
    s.wait_status("ready on 1.1.0", |st| condition(st, "DriverReady").0 == "True").await;

    // A good version: the operator replaces the node's plugin pod and the new plugin republishes the slice.
    let config = |tag: &str| s.config(&s.id, spec(&node, tag, &namespace, &profiles, &rollout));
    s.apply(&config("1.2.0")).await.unwrap();
    let done = s
        .wait_status("the rollout to 1.2.0 complete", |st| {
            st.driver.as_ref().and_then(|d| d.rollout.as_ref()).is_some_and(|r| r.state == RolloutState::Complete)
                && condition(st, "DriverReady") == ("True", "RolloutComplete", "1/1 nodes on 1.2.0, 1 ready")
        })
        .await;
    assert_eq!(done.driver.as_ref().unwrap().updated_nodes, 1);
    assert_eq!(node::published_devices(&s.client, &node, "1.2.0").await.len(), DEVICES);
    let (image, ready) = plugin_pod(&s).await.expect("a plugin pod");
    assert!(image.ends_with(":1.2.0") && ready, "{image} ready={ready}");

    // A plugin that never starts: the canary (the one node) fails and the rollout halts, naming the node.
    s.apply(&config("1.1.0-notready")).await.unwrap();
    let halted = s.wait_status("the rollout halted", |st| condition(st, "DriverReady").1 == "RolloutHalted").await;
    let rollout = halted.driver.as_ref().unwrap().rollout.clone().unwrap();
    assert_eq!(rollout.state, RolloutState::Halted);
    assert_eq!(rollout.failed_nodes.len(), 1, "{rollout:?}");
    assert_eq!(
        (rollout.failed_nodes[0].node.as_str(), rollout.failed_nodes[0].reason.as_str()),
        (node.as_str(), "PluginNotReady")
    );
    assert!(condition(&halted, "DriverReady").2.contains(&node), "{:?}", condition(&halted, "DriverReady"));

    // Back to the good version: the node recovers.
    s.apply(&config("1.2.0")).await.unwrap();
    s.wait_status("back on 1.2.0", |st| condition(st, "DriverReady").2 == "1/1 nodes on 1.2.0, 1 ready").await;
    assert!(plugin_pod(&s).await.is_some_and(|(image, ready)| image.ends_with(":1.2.0") && ready));
    finish(&s).await;
}

/// Sets a condition on the Node's status, as the node monitoring agent does.
async fn set_node_condition(s: &Scenario, node: &str, type_: &str, status: &str, reason: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": type_, "status": status, "reason": reason, "message": format!("set by {}", s.id),
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    Api::<Node>::all(s.client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real node: make test-node"]
async fn no_execute_remediation_evicts_a_running_pod_holding_a_device_of_a_failing_node() {
    let s = Scenario::with_operator("node-remedy").await;
    let node = node::name(&s.client).await;
    let profiles = json!([{"name": "one", "training": {"instanceType": TYPE, "devices": 1}}]);
    let namespace = start(
        &s,
        &node,
        "1.1.0",
        profiles,
        json!({"remediation": {"effect": "NoExecute", "problemFor": "0s", "clearFor": "0s"}}),
    )
    .await;
    node::published_devices(&s.client, &node, "1.1.0").await;
    s.wait_templates(&namespace, &["one"]).await;
    run_pod(&s, &node, &namespace, "victim", "one").await;
    let victim = wait_running(&s, &namespace, "victim").await;
    let claim = check_devices(&s, &namespace, &victim, "2").await;

    set_node_condition(&s, &node, "AcceleratedHardwareReady", "False", "NeuronHBMUncorrectableError").await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &namespace);
    eventually(TIMEOUT, "the victim evicted", || async { pods.get_opt("victim").await.ok()?.is_none().then_some(()) })
        .await;
    wait_unprepared(&claim).await;
    let status = s.wait_status("remediated", |st| st.remediation.as_ref().is_some_and(|r| r.remediated == 1)).await;
    assert_eq!(status.remediation.as_ref().unwrap().remediated_nodes[0].node, node);

    // Healthy again: the rule is released and a new pod runs on the node.
    set_node_condition(&s, &node, "AcceleratedHardwareReady", "True", "NeuronHealthy").await;
    s.wait_status("released", |st| st.remediation.as_ref().is_none_or(|r| r.remediated == 0)).await;
    run_pod(&s, &node, &namespace, "after", "one").await;
    wait_running(&s, &namespace, "after").await;
    s.delete_pod(&namespace, "after").await;
    finish(&s).await;
}
