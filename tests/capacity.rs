//! Capacity in status, judged by the real scheduler: with some devices already held and some tainted, a
//! template's `available` says N; N + 1 pods of it get exactly N scheduled and one Pending; the status then says 0,
//! and N again once the pods are gone (also for a template with fallbacks). A sick device in use names its claim
//! and pods.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use neuron_dra_operator::api::NeuronDRAConfigStatus;
use neuron_dra_operator::devtools::simulate::TaintEffect;
use serde_json::json;
use support::allocation::{create_pod, pinned, wait_scheduled, workload_pod};
use support::cluster::eventually;
use support::fleet::{Fleet, NodeGroup};
use support::scenario::TIMEOUT;

/// A finalizer of the test's own, holding an evicted pod.
const HOLD: &str = "neurondra.io/test-hold";

fn available(status: &NeuronDRAConfigStatus, template: &str) -> Option<i64> {
    status.profiles.iter().flat_map(|p| &p.capacity).find(|c| c.template == template).map(|c| c.available)
}

fn allocated(status: &NeuronDRAConfigStatus, template: &str) -> Option<i64> {
    status.profiles.iter().flat_map(|p| &p.capacity).find(|c| c.template == template).map(|c| c.allocated)
}

/// Counts the pods of one template that are bound to a node.
async fn scheduled(f: &Fleet, namespace: &str, template: &str) -> (usize, usize) {
    let pods: Api<Pod> = Api::namespaced(f.scenario.client.clone(), namespace);
    let list = pods.list(&ListParams::default().labels(&format!("template={template}"))).await.unwrap();
    let bound = list.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
    (bound, list.items.len() - bound)
}

/// The name of the one pod of a template that is not bound to a node.
async fn unbound(f: &Fleet, namespace: &str, template: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(f.scenario.client.clone(), namespace);
    let list = pods.list(&ListParams::default().labels(&format!("template={template}"))).await.unwrap();
    let mut names = list.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none());
    match (names.next(), names.next()) {
        (Some(pod), None) => pod.metadata.name.clone().unwrap(),
        _ => panic!("not exactly one unbound pod of {template}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_is_what_the_scheduler_can_place() {
    let groups =
        [NodeGroup::new("trn2.48xlarge", 3), NodeGroup::new("trn1.32xlarge", 1), NodeGroup::new("trn2u.48xlarge", 2)];
    let f = Fleet::with_groups("capacity", &groups).await;
    let client = &f.scenario.client;
    let s = &f.scenario;
    let namespace = s.namespace("work", &[]).await;
    let trn2 = "trn2.48xlarge";
    let profiles = json!([
        {"name": "holder", "training": {"instanceType": trn2, "devices": 1}},
        {"name": "four-efa", "training": {"instanceType": trn2, "devices": 4, "efa": true}},
        {"name": "whole", "training": {"instanceType": trn2, "devices": "All", "efa": true}},
        {"name": "us", "longContextInference": {"instanceType": "trn2u.48xlarge", "ultraServerNodes": 2}},
        {"name": "trn1-one-efa", "training": {"instanceType": "trn1.32xlarge", "devices": 1, "efa": true}},
        {"name": "serve", "disaggregated": {
            "prefill": {"instanceType": trn2, "devices": 8, "efa": true, "logicalNeuronCore": 2},
            "decode": {"instanceType": trn2, "devices": 4},
        }},
        {"name": "elastic", "training": {"instanceType": trn2, "devices": 8, "allowLncChange": true, "fallbacks": [
            {"instanceType": trn2, "devices": 4}, {"instanceType": "trn1.32xlarge", "devices": 4},
        ]}},
    ]);
    let spec =
        json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]}, "profiles": profiles});
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(
        &namespace,
        &["elastic", "four-efa", "holder", "serve-decode", "serve-prefill", "trn1-one-efa", "us", "whole"],
    )
    .await;

    // One device held on the first trn2 node, one tainted on the second; the third is untouched.
    let holder = pinned(workload_pod("holder", "holder", &f.pod_affinity()), &f.node(trn2, 0));
    create_pod(client, &namespace, &holder).await;
    wait_scheduled(client, &namespace, "holder").await;
    f.taint_device(&f.node(trn2, 1), "neuron-device-9", TaintEffect::NoSchedule).await;
    // The whole-node template is the tightest: only the third node is untouched.
    f.wait_status("the held device and the taint counted", |s| {
        allocated(s, "holder") == Some(1) && s.templates.as_ref().and_then(|t| t.min_available) == Some(1)
    })
    .await;

    // Expected room, worked out by hand: groups of 4 = 3 + 3 + 4; groups of 8 = 1 + 1 + 2; whole nodes: the third;
    // UltraServer entries: 2; trn1 devices with their own EFA: 8 EFAs. With fallbacks, each node first takes 8
    // connected trn2 devices as often as they fit, then 4, then 4 on trn1: 1 + 1, 1 + 1, 2 and 4 groups on trn1.
    let expected = [
        ("four-efa", 10),
        ("whole", 1),
        ("us", 2),
        ("trn1-one-efa", 8),
        ("serve-prefill", 4),
        ("serve-decode", 10),
        ("elastic", 10),
    ];
    for (template, room) in expected {
        f.wait_status(&format!("{template} has room for {room}"), |s| available(s, template) == Some(room)).await;
        for i in 0..=room {
            let mut pod = workload_pod(&format!("{template}-{i}"), template, &f.pod_affinity());
            pod["metadata"]["labels"]["template"] = json!(template);
            create_pod(client, &namespace, &pod).await;
        }
        eventually(TIMEOUT, &format!("{room} of {} pods of {template} scheduled", room + 1), || async {
            let (bound, _) = scheduled(&f, &namespace, template).await;
            (bound == room as usize).then_some(())
        })
        .await;
        // The scheduler need not bind pods in the order they were created: the one left over is the one that must
        // be Unschedulable.
        let leftover = unbound(&f, &namespace, template).await;
        support::allocation::wait_unschedulable(client, &namespace, &leftover).await;
        assert_eq!(scheduled(&f, &namespace, template).await, (room as usize, 1), "{template}: exactly {room} fit");
        f.wait_status(&format!("{template} full"), |s| {
            available(s, template) == Some(0) && allocated(s, template) == Some(room)
        })
        .await;
        for i in 0..=room {
            f.delete_pod(&namespace, &format!("{template}-{i}")).await;
        }
        f.wait_status(&format!("{template} has room again"), |s| available(s, template) == Some(room)).await;
    }
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sick_device_in_use_names_its_claim_and_pod() {
    let f = Fleet::start("inuse", &[("trn2.48xlarge", 1)]).await;
    let client = &f.scenario.client;
    let s = &f.scenario;
    let namespace = s.namespace("work", &[]).await;
    let node = f.node("trn2.48xlarge", 0);
    let profiles = json!([{"name": "one", "training": {"devices": 1}}]);
    let spec =
        json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]}, "profiles": profiles});
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&namespace, &["one"]).await;
    // A finalizer keeps the evicted pod (and so its claim's allocation) around, as a real kubelet does while it
    // stops the containers: the window in which the status must name the workload.
    let mut pod = workload_pod("trainer", "one", &f.pod_affinity());
    pod["metadata"]["finalizers"] = json!([HOLD]);
    create_pod(client, &namespace, &pod).await;
    let scheduled = wait_scheduled(client, &namespace, "trainer").await;
    let got = support::allocation::allocation(client, &scheduled).await;
    let device = got.neurons[0].name.clone();
    let claim = support::allocation::claim_of(client, &scheduled).await.metadata.name.unwrap();

    f.taint_device(&node, &device, TaintEffect::NoExecute).await;
    let status = f
        .wait_status("the sick device names its claim", |s| s.unhealthy_devices.iter().any(|d| d.claim.is_some()))
        .await;
    let entry = status.unhealthy_devices.iter().find(|d| d.device == device).unwrap();
    assert_eq!(entry.claim.as_deref(), Some(format!("{namespace}/{claim}").as_str()));
    assert_eq!(entry.pods, [format!("{namespace}/trainer")]);
    let healthy = status.conditions.iter().find(|c| c.type_ == "DevicesHealthy").unwrap();
    assert!(healthy.message.contains("1 claims hold an unhealthy device"), "{}", healthy.message);
    eventually(TIMEOUT, "UnhealthyDeviceInUse event", || async {
        let events = support::cluster::kubectl(&[
            "get",
            "events",
            "-A",
            "--field-selector",
            &format!("involvedObject.name={}", s.id),
        ]);
        events.contains("UnhealthyDeviceInUse").then_some(())
    })
    .await;
    // The device-taint-eviction controller evicts the pod; once it is gone, so is the claim from the status.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    eventually(TIMEOUT, "NoExecute evicts the pod", || async {
        pods.get("trainer").await.ok()?.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    pods.patch("trainer", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    f.wait_status("the claim is released", |s| s.unhealthy_devices.iter().all(|d| d.claim.is_none())).await;
    f.clear().await;
}
