//! Templates on a busy fleet, on the real scheduler: nodes partly used by other jobs (one device held by a claim
//! another team's small job made), as users' fleets are. Before Kubernetes 1.36 an exact count of every device of a
//! node searches orderings for seconds on such a node; the operator asks for it as `All`, which fails at once, so
//! fallbacks reach their smaller alternatives and a whole node costs what `devices: All` costs
//! (docs/decisions.md, "Whole nodes on a busy fleet"). Run on both ends of the supported range.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PatchParams, PostParams};
use neuron_dra_operator::api::TemplateRequest;
use neuron_dra_operator::devtools::simulate::TaintEffect;
use neuron_dra_operator::logic::desired::Allocator;
use serde_json::{Value, json};
use support::allocation::{self, Promise, create_pod, workload_pod};
use support::fleet::Fleet;

const TYPE: &str = "trn2.48xlarge";
const NODES: usize = 40;
const PODS: usize = 8;
/// What the users wait at most for 8 pods: far below one filter timeout (10 s) per node of the fleet.
const BIND_WITHIN: Duration = Duration::from_secs(60);

/// Whether the server's scheduler searches combinations (1.36 and later), where a count of 16 stays a count.
async fn searches_combinations(f: &Fleet) -> bool {
    let version = f.scenario.client.apiserver_version().await.unwrap();
    Allocator::of_version(&version.minor) == Some(Allocator::Combinations)
}

/// The fleet's node affinity, and one pod of `job` per node, as the workers of one job are placed.
fn one_per_node(f: &Fleet, job: &str) -> Value {
    let mut affinity = f.pod_affinity();
    affinity["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"job": job}}, "topologyKey": "kubernetes.io/hostname"}]});
    affinity
}

/// Another team's claim holding `device` of `node` (as its small job would), allocated directly: the scheduler
/// counts the device in use exactly as if it had placed the job itself.
async fn hold(f: &Fleet, namespace: &str, node: &str, driver: &str, class: &str, device: &str) {
    let claims: Api<ResourceClaim> = Api::namespaced(f.scenario.client.clone(), namespace);
    let name = format!("held-{node}-{device}").replace('.', "-");
    let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "held", "exactly": {"deviceClassName": class}}]}}});
    claims.create(&PostParams::default(), &serde_json::from_value(claim).unwrap()).await.unwrap();
    let result = json!({"request": "held", "driver": driver, "pool": node, "device": device});
    let status = json!({"status": {"allocation": {"devices": {"results": [result]}}}});
    claims.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// One Neuron device held on each of the first `busy` nodes (a different device from node to node).
async fn hold_one_device(f: &Fleet, namespace: &str, busy: usize) {
    for index in 0..busy {
        let device = format!("neuron-device-{}", index % 16);
        hold(f, namespace, &f.node(TYPE, index), allocation::NEURON_DRIVER, "neuron.aws.com", &device).await;
    }
}

/// The fleet's config with `profiles` in a namespace of its own; waits for the templates and returns the namespace.
async fn templates(f: &Fleet, profiles: Value) -> String {
    let s = &f.scenario;
    let namespace = s.namespace("busy", &[]).await;
    let names: Vec<String> =
        profiles.as_array().unwrap().iter().flat_map(Promise::of_profile).map(|(t, _)| t).collect();
    let spec =
        json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]}, "profiles": profiles});
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&namespace, &names.iter().map(String::as_str).collect::<Vec<_>>()).await;
    namespace
}

/// `PODS` pods of `template`, one per node (as the workers of one job), created at once; waits until all are bound
/// and checks each against `promise`. Returns the time from the first creation to the last binding, and each
/// pod's device count.
async fn bind_all(f: &Fleet, namespace: &str, template: &str, promise: &Promise) -> (Duration, Vec<usize>) {
    let client = &f.scenario.client;
    let affinity = one_per_node(f, template);
    let started = Instant::now();
    for i in 0..PODS {
        let mut pod = workload_pod(&format!("{template}-{i}"), template, &affinity);
        pod["metadata"]["labels"]["job"] = json!(template);
        create_pod(client, namespace, &pod).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut bound = Vec::new();
    while bound.len() < PODS {
        assert!(started.elapsed() < BIND_WITHIN, "{template}: {} of {PODS} pods bound in {BIND_WITHIN:?}", bound.len());
        bound.clear();
        for i in 0..PODS {
            let pod = pods.get(&format!("{template}-{i}")).await.unwrap();
            if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.push(pod);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = started.elapsed();
    let mut counts = Vec::new();
    for pod in &bound {
        let got = allocation::allocation(client, pod).await;
        if let Err(broken) = allocation::check(promise, &got) {
            panic!("template {template} broke its promise {promise:?}: {broken}");
        }
        counts.push(got.neurons.len());
    }
    (took, counts)
}

/// The form and charge `status.profiles[].requests` reports for `template`.
async fn reported(f: &Fleet, template: &str) -> TemplateRequest {
    let status = f
        .wait_status("the templates' form", |s| {
            s.profiles.iter().any(|p| p.requests.iter().any(|r| r.template == template))
        })
        .await;
    status.profiles.iter().flat_map(|p| p.requests.iter()).find(|r| r.template == template).unwrap().clone()
}

/// One device in use on every node: a whole node fits nowhere, and each pod of a profile of 16 with fallbacks of 8
/// and 4 gets 8 devices, within a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_device_in_use_on_every_node_fallbacks_bind_to_their_smaller_choice() {
    let f = Fleet::start("busy-all", &[(TYPE, NODES)]).await;
    let profiles =
        json!([{"name": "elastic", "training": {"devices": 16, "fallbacks": [{"devices": 8}, {"devices": 4}]}}]);
    let namespace = templates(&f, profiles.clone()).await;
    hold_one_device(&f, &namespace, NODES).await;
    let promise = Promise::of_profile(&profiles[0]).remove(0).1;
    let (took, counts) = bind_all(&f, &namespace, "elastic", &promise).await;
    assert_eq!(counts, vec![8; PODS], "each pod on its own node takes the 8 free devices of one group");
    eprintln!("busy_fleet: {PODS} pods of elastic bound in {took:?}");
    let form = reported(&f, "elastic").await;
    let expected = if searches_combinations(&f).await { "ExactCount" } else { "All" };
    assert_eq!(form.allocation_mode, expected);
    assert_eq!(form.charge, if expected == "All" { 32 } else { 16 }, "the largest alternative is charged");
    f.clear().await;
}

/// One device in use on half of the nodes: 8 pods of `devices: 16` and 8 of `devices: All` each get a free node
/// within a minute; the status says which form `devices: 16` takes on this server and what a claim is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_device_in_use_on_half_of_the_nodes_whole_nodes_bind() {
    let f = Fleet::start("busy-half", &[(TYPE, NODES)]).await;
    let profiles = json!([{"name": "sixteen", "training": {"instanceType": TYPE, "devices": 16}},
        {"name": "whole", "training": {"instanceType": TYPE, "devices": "All"}}]);
    let namespace = templates(&f, profiles.clone()).await;
    hold_one_device(&f, &namespace, NODES / 2).await;
    let promises = Promise::of_profile(&profiles[0]).into_iter().chain(Promise::of_profile(&profiles[1]));
    for (template, promise) in promises.collect::<Vec<_>>() {
        let (took, counts) = bind_all(&f, &namespace, &template, &promise).await;
        assert_eq!(counts, vec![16; PODS], "{template}: every device of a free node");
        eprintln!("busy_fleet: {PODS} pods of {template} bound in {took:?}");
    }
    let (sixteen, whole) = (reported(&f, "sixteen").await, reported(&f, "whole").await);
    match searches_combinations(&f).await {
        true => assert_eq!((sixteen.allocation_mode.as_str(), sixteen.charge), ("ExactCount", 16)),
        false => assert_eq!((sixteen.allocation_mode.as_str(), sixteen.charge), ("All", 32)),
    }
    assert_eq!((whole.allocation_mode.as_str(), whole.charge), ("All", 32));
    f.clear().await;
}

/// The other fills users have, on a whole-node profile with its EFA interfaces: a tainted device, a held EFA in an
/// otherwise free group, and a device in use, each on a node of its own; the pods go to the free nodes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tainted_device_or_a_held_efa_keeps_a_whole_node_off_that_node_only() {
    const FREE: usize = 4;
    let f = Fleet::start("busy-efa", &[(TYPE, FREE + 3)]).await;
    let profiles = json!([{"name": "node-efa", "training": {"instanceType": TYPE, "devices": 16, "efa": true}}]);
    let namespace = templates(&f, profiles.clone()).await;
    let node = |i: usize| f.node(TYPE, i);
    f.taint_device(&node(FREE), "neuron-device-5", TaintEffect::NoSchedule).await;
    let efas = allocation::node_devices(&f.scenario.client, &node(FREE + 1)).await;
    let efa = efas.keys().find(|(driver, _)| driver == allocation::EFA_DRIVER).unwrap().1.clone();
    hold(&f, &namespace, &node(FREE + 1), allocation::EFA_DRIVER, "efa.networking.k8s.aws", &efa).await;
    hold(&f, &namespace, &node(FREE + 2), allocation::NEURON_DRIVER, "neuron.aws.com", "neuron-device-9").await;
    let promise = Promise::of_profile(&profiles[0]).remove(0).1;
    let client = &f.scenario.client;
    let started = Instant::now();
    let mut nodes = Vec::new();
    for i in 0..FREE {
        let name = format!("node-efa-{i}");
        let mut pod = workload_pod(&name, "node-efa", &one_per_node(&f, "node-efa"));
        pod["metadata"]["labels"]["job"] = json!("node-efa");
        create_pod(client, &namespace, &pod).await;
        let scheduled = allocation::wait_scheduled(client, &namespace, &name).await;
        let got = allocation::allocation(client, &scheduled).await;
        allocation::check(&promise, &got).unwrap_or_else(|broken| panic!("{broken}"));
        assert_eq!((got.neurons.len(), got.efas.len()), (16, 16));
        nodes.push(got.node);
    }
    assert!(started.elapsed() < BIND_WITHIN, "{FREE} pods took {:?}", started.elapsed());
    nodes.sort();
    assert_eq!(nodes, (0..FREE).map(node).collect::<Vec<_>>(), "only the free nodes");
    // A fifth finds no free node, and the scheduler says so rather than timing out.
    let mut pod = workload_pod("node-efa-extra", "node-efa", &f.pod_affinity());
    pod["metadata"]["labels"]["job"] = json!("extra");
    create_pod(client, &namespace, &pod).await;
    let why = allocation::wait_unschedulable(client, &namespace, "node-efa-extra").await;
    assert!(!why.contains("timed out"), "{why}");
    f.clear().await;
}
