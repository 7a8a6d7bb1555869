//! Faults on two real nodes (hack/node.sh `node-1` and `node-2`, each with its own kubelet directory at
//! `/var/lib/ndra-kubelet` through `driver.kubeletDir`): a stepped plugin rollout across them and a halt, a node
//! that dies under a running claimed pod, a containerd restart and a deleted plugin pod under running pods. The
//! control plane runs the node-lifecycle, taint-eviction and pod-garbage-collector controllers with short
//! timeouts (hack/controlplane.sh). The two nodes serve every test: `make test-node` runs them one at a time.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod node;
    pub mod scenario;
    pub mod two_nodes;
}

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use neuron_dra_operator::api::{NeuronDRAConfigStatus, RolloutState};
use serde_json::json;
use support::allocation::claim_of;
use support::cluster::eventually;
use support::node;
use support::scenario::{Scenario, TIMEOUT};
use support::two_nodes::{self as two, both_ready, component, plugin_pod, restarts, run_on, running};

const DEVICES: i64 = 16;

fn condition<'a>(status: &'a NeuronDRAConfigStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn one_device() -> serde_json::Value {
    json!([{"name": "one", "training": {"instanceType": "trn2.48xlarge", "devices": 1}}])
}

/// Ends a test: its pods in `namespace` first, while the plugin still runs to unprepare their claims (the next test
/// on these nodes finds every device free), then its config.
async fn finish(s: &Scenario, namespace: &str) {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        s.delete_pod(namespace, &pod.name_any()).await;
    }
    s.delete_config(&s.id).await;
    eventually(TIMEOUT, "the config gone", || async { s.configs().get_opt(&s.id).await.ok()?.is_none().then_some(()) })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs two real nodes: make test-node"]
async fn a_stepped_rollout_moves_two_real_nodes_one_after_the_other_and_a_halt_leaves_the_second_untouched() {
    let s = Scenario::with_operator("two-rollout").await;
    let nodes = both_ready(&s.client).await;
    let rollout = json!({"driver": {"rollout": {"canary": 1, "maxUnavailable": 1, "timeout": "45s", "soak": "5s"}}});
    let namespace = two::start(&s, "1.1.0", &one_device(), &rollout).await;
    s.wait_status("ready on 1.1.0", |st| condition(st, "DriverReady").0 == "True").await;
    s.wait_templates(&namespace, &["one"]).await;
    let mut workloads = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        workloads.push(run_on(&s, &namespace, &format!("work-{i}"), "one", node).await);
    }

    // 1.2.0, stepped: the canary node's plugin moves first, the other's only once the canary passed its soak.
    let config = |tag: &str| s.config(&s.id, two::spec(tag, &namespace, &one_device(), &rollout));
    s.apply(&config("1.2.0")).await.unwrap();
    s.wait_status("the rollout to 1.2.0 complete", |st| {
        st.driver.as_ref().and_then(|d| d.rollout.as_ref()).is_some_and(|r| r.state == RolloutState::Complete)
            && condition(st, "DriverReady") == ("True", "RolloutComplete", "2/2 nodes on 1.2.0, 2 ready")
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let mut started = Vec::new();
    for node in &nodes {
        assert_eq!(node::published_devices(&s.client, node, "1.2.0").await.len(), DEVICES as usize);
        let (uid, image) = plugin_pod(&s, node).await.expect("a plugin pod");
        assert!(image.ends_with(":1.2.0"), "{node}: {image}");
        let pod =
            pods.list(&ListParams::default()).await.unwrap().items.into_iter().find(|p| p.uid() == Some(uid.clone()));
        started.push(pod.unwrap().metadata.creation_timestamp.unwrap().0);
    }
    started.sort();
    let apart = started[1].duration_since(started[0]).as_secs_f64();
    assert!(apart >= 5.0, "the second node's plugin started {apart}s after the canary's: not stepped");

    // A plugin that never gets Ready: the canary halts the rollout; the other node keeps its 1.2.0 plugin pod and
    // its workload pod as they run.
    let before: Vec<_> = [plugin_pod(&s, &nodes[0]).await.unwrap(), plugin_pod(&s, &nodes[1]).await.unwrap()].into();
    s.apply(&config("1.1.0-notready")).await.unwrap();
    let halted = s.wait_status("the rollout halted", |st| condition(st, "DriverReady").1 == "RolloutHalted").await;
    let failed = halted.driver.as_ref().unwrap().rollout.clone().unwrap().failed_nodes;
    assert_eq!(failed.len(), 1, "{failed:?}");
    let canary = nodes.iter().position(|n| *n == failed[0].node).expect("a failed node of the two");
    let other = 1 - canary;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(plugin_pod(&s, &nodes[other]).await.unwrap(), before[other], "the second node's plugin untouched");
    let still = running(&s, &namespace, &format!("work-{other}")).await;
    assert_eq!((still.uid(), restarts(&still)), (workloads[other].uid(), 0), "its workload pod untouched");
    assert!(condition(&halted, "DriverReady").2.contains(&nodes[canary]), "{:?}", condition(&halted, "DriverReady"));

    s.apply(&config("1.2.0")).await.unwrap();
    s.wait_status("back on 1.2.0", |st| condition(st, "DriverReady").2 == "2/2 nodes on 1.2.0, 2 ready").await;
    finish(&s, &namespace).await;
}

/// A Deployment of one sleeper on the `one` template, on either node.
fn deployment(name: &str) -> serde_json::Value {
    let mut pod = two::sleeper(name, "one");
    pod["metadata"] = json!({"labels": {"app": name}});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": pod},
    })
}

/// The Deployment's pods that are not being deleted, Running.
async fn live_replica(s: &Scenario, namespace: &str, app: &str) -> Option<Pod> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await.ok()?;
    list.items.into_iter().find(|p| {
        p.metadata.deletion_timestamp.is_none() && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
}

async fn taint_out_of_service(s: &Scenario, node: &str, on: bool) {
    let taints = if on {
        json!([{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}])
    } else {
        json!([])
    };
    let nodes: Api<Node> = Api::all(s.client.clone());
    let mut current = nodes.get(node).await.unwrap();
    let mut kept: Vec<_> = current.spec.take().and_then(|sp| sp.taints).unwrap_or_default();
    kept.retain(|t| t.key != "node.kubernetes.io/out-of-service");
    let mut all = serde_json::to_value(kept).unwrap();
    all.as_array_mut().unwrap().extend(taints.as_array().unwrap().clone());
    let patch = json!({"spec": {"taints": all}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs two real nodes: make test-node"]
async fn a_node_that_dies_is_reported_its_pod_replaced_on_the_other_node_and_it_counts_again_once_back() {
    let s = Scenario::with_operator("two-death").await;
    let nodes = both_ready(&s.client).await;
    let namespace = two::start(&s, "1.1.0", &one_device(), &json!({})).await;
    s.wait_status("both nodes healthy", |st| st.devices.as_ref().is_some_and(|d| d.healthy == 2 * DEVICES)).await;
    s.wait_templates(&namespace, &["one"]).await;
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &namespace);
    let app = "trainer";
    eventually(TIMEOUT, "the Deployment created", || async {
        let d: Deployment = serde_json::from_value(deployment(app)).unwrap();
        deployments.create(&PostParams::default(), &d).await.ok()
    })
    .await;
    let first = eventually(TIMEOUT, "the trainer Running", || live_replica(&s, &namespace, app)).await;
    let victim = first.spec.as_ref().unwrap().node_name.clone().unwrap();
    let other = nodes.iter().find(|n| **n != victim).unwrap().clone();
    let claim = claim_of(&s.client, &first).await;
    let registered = node::registrations(&victim, node::DRIVER);
    let capacity =
        |st: &NeuronDRAConfigStatus| st.profiles.iter().flat_map(|p| &p.capacity).map(|c| c.available).sum::<i64>();
    let before = capacity(&s.wait_status("capacity counted", |st| capacity(st) > 0).await);

    // Power loss: kubelet and containerd killed.
    let stopped = Instant::now();
    component("kill-component", "kubelet", &victim);
    component("kill-component", "containerd", &victim);
    let down = s
        .wait_status("the dead node in the status", |st| {
            st.node_issues.iter().any(|i| i.node == victim && i.reason == "NodeNotReady")
                && st.devices.as_ref().is_some_and(|d| d.unhealthy == DEVICES)
        })
        .await;
    let to_status = stopped.elapsed();
    let issue = down.node_issues.iter().find(|i| i.reason == "NodeNotReady").unwrap();
    assert!(issue.message.contains(&format!("its {DEVICES} Neuron devices are unavailable")), "{}", issue.message);
    assert!(capacity(&down) < before, "capacity {} did not drop from {before}", capacity(&down));
    assert!(down.remediation.is_none() && down.taint_rules.is_empty(), "no remediation for an unreachable node");

    // The taint manager evicts the pod; the Deployment's replacement runs on the other node.
    let replacement = eventually(Duration::from_secs(180), "the replacement Running", || async {
        live_replica(&s, &namespace, app).await.filter(|p| p.uid() != first.uid())
    })
    .await;
    let to_replacement = stopped.elapsed();
    assert_eq!(replacement.spec.as_ref().unwrap().node_name.as_deref(), Some(other.as_str()));
    println!(
        "FIGURES node stopped -> status NodeNotReady: {:.1}s; -> replacement Running on {other}: {:.1}s",
        to_status.as_secs_f64(),
        to_replacement.as_secs_f64()
    );

    // The evicted pod waits for a kubelet that is gone; the out-of-service taint (as for a node shut down for good)
    // lets the pod garbage collector delete it, and its claim is released.
    taint_out_of_service(&s, &victim, true).await;
    let claims: Api<k8s_openapi::api::resource::v1::ResourceClaim> = Api::namespaced(s.client.clone(), &namespace);
    eventually(Duration::from_secs(120), "the evicted pod's claim released", || async {
        claims.get_opt(&claim.name_any()).await.ok()?.is_none().then_some(())
    })
    .await;

    // Back: the plugin registers with the new kubelet and the node's devices count again.
    component("start-component", "containerd", &victim);
    component("start-component", "kubelet", &victim);
    two::wait_ready(&s.client, &victim, "True", TIMEOUT).await;
    taint_out_of_service(&s, &victim, false).await;
    eventually(TIMEOUT, "the plugin registered again", || async {
        (node::registrations(&victim, node::DRIVER) > registered).then_some(())
    })
    .await;
    s.wait_status("both nodes healthy again", |st| {
        st.devices.as_ref().is_some_and(|d| d.healthy == 2 * DEVICES) && st.node_issues.is_empty()
    })
    .await;
    deployments.delete(app, &DeleteParams::default()).await.unwrap();
    finish(&s, &namespace).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs two real nodes: make test-node"]
async fn a_runtime_restart_and_a_plugin_restart_leave_running_pods_and_their_claims_alone() {
    let s = Scenario::with_operator("two-restart").await;
    let [node, _] = both_ready(&s.client).await;
    let namespace = two::start(&s, "1.1.0", &one_device(), &json!({})).await;
    s.wait_templates(&namespace, &["one"]).await;
    let first = run_on(&s, &namespace, "first", "one", &node).await;
    let claim = claim_of(&s.client, &first).await;
    let spec = node::cdi_spec(&claim.uid().unwrap());
    assert!(spec.exists(), "{} prepared", spec.display());

    // containerd restarted: the pod keeps running with its claim prepared, and a new one starts.
    component("stop-component", "containerd", &node);
    component("start-component", "containerd", &node);
    let after = running(&s, &namespace, "first").await;
    assert_eq!((after.uid(), restarts(&after)), (first.uid(), 0), "the pod kept running");
    assert!(spec.exists(), "{} still there", spec.display());
    // Through the new containerd, once the kubelet has reconnected to it.
    let args = ["exec", "-n", namespace.as_str(), "first", "--", "sh", "-c", "ls /dev | grep '^neuron'"];
    let seen = eventually(TIMEOUT, "exec in the running pod", || async {
        support::cluster::kubectl_with(&support::cluster::kubeconfig(), &args, None).ok()
    })
    .await;
    assert_eq!(seen.lines().count(), 1, "its one device still there: {seen}");
    run_on(&s, &namespace, "second", "one", &node).await;

    // The plugin pod deleted: a new one registers; the running pods are untouched; unprepare still works.
    let registered = node::registrations(&node, node::DRIVER);
    let (old, _) = plugin_pod(&s, &node).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let old_name = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.uid() == Some(old.clone()))
        .unwrap()
        .name_any();
    pods.delete(&old_name, &DeleteParams::default()).await.unwrap();
    eventually(TIMEOUT, "a new plugin registered", || async {
        let (uid, _) = plugin_pod(&s, &node).await?;
        (uid != old && node::registrations(&node, node::DRIVER) > registered).then_some(())
    })
    .await;
    let after = running(&s, &namespace, "first").await;
    assert_eq!((after.uid(), restarts(&after)), (first.uid(), 0), "the pod untouched by the plugin's restart");
    s.delete_pod(&namespace, "first").await;
    eventually(TIMEOUT, "the claim unprepared (its CDI spec removed)", || async { (!spec.exists()).then_some(()) })
        .await;
    s.delete_pod(&namespace, "second").await;
    finish(&s, &namespace).await;
}
