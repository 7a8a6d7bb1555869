//! Proof on the real scheduler: a pod that uses a generated template is scheduled by kube-scheduler, and the
//! devices its claim holds keep the profile's promise (count, connected group, EFA alignment, instance type,
//! driver version, opaque config). Every sample, and a table over every profile kind and option.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use neuron_dra_operator::devtools::simulate::TaintEffect;
use serde_json::{Value, json};
use support::allocation::{self, Promise, create_pod, pinned, wait_scheduled, wait_unschedulable, workload_pod};
use support::fleet::{Fleet, NodeGroup};

/// Applies `profiles` into one namespace of the test, waits for their templates, and returns the namespace.
async fn templates_for(f: &Fleet, profiles: &Value) -> String {
    templates_of_class(f, profiles, None).await
}

/// `templates_for`, with the config's `deviceClassName` set to `class` when given.
async fn templates_of_class(f: &Fleet, profiles: &Value, class: Option<&str>) -> String {
    let s = &f.scenario;
    let namespace = s.namespace("work", &[]).await;
    let mut spec =
        json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]}, "profiles": profiles});
    if let Some(class) = class {
        spec["deviceClassName"] = json!(class);
    }
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let names: Vec<String> =
        profiles.as_array().unwrap().iter().flat_map(Promise::of_profile).map(|(t, _)| t).collect();
    s.wait_templates(&namespace, &names.iter().map(String::as_str).collect::<Vec<_>>()).await;
    namespace
}

/// Creates one pod for the template, waits for the scheduler, and checks the promise; returns the node.
async fn schedule_and_check(f: &Fleet, namespace: &str, pod: &str, template: &str, promise: &Promise) -> String {
    let client = &f.scenario.client;
    create_pod(client, namespace, &workload_pod(pod, template, &f.pod_affinity())).await;
    let scheduled = wait_scheduled(client, namespace, pod).await;
    let got = allocation::allocation(client, &scheduled).await;
    if let Err(broken) = allocation::check(promise, &got) {
        panic!("template {template} (pod {pod}) broke its promise {promise:?}: {broken}");
    }
    got.node
}

/// Every template of a sample gets a pod; each is scheduled and keeps its promise.
async fn sample_allocates(file: &str, groups: &[NodeGroup]) {
    let f = Fleet::with_groups(&format!("alloc-{}", file.replace('.', "-")), groups).await;
    let path = support::cluster::repo(&format!("samples/{file}.yaml"));
    let sample: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let profiles = sample["spec"]["profiles"].clone();
    let namespace = templates_for(&f, &profiles).await;
    // Whole-node requests first, so smaller ones cannot fragment the node they need.
    let mut rows: Vec<(String, Promise)> = profiles.as_array().unwrap().iter().flat_map(Promise::of_profile).collect();
    rows.sort_by_key(|(_, p)| p.devices.unwrap_or(64) < 16);
    for (i, (template, promise)) in rows.iter().enumerate() {
        schedule_and_check(&f, &namespace, &format!("{template}-{i}"), template, promise).await;
    }
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_training_allocates() {
    sample_allocates("training", &[NodeGroup::new("trn2.48xlarge", 2)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_long_context_inference_allocates() {
    sample_allocates(
        "long-context-inference",
        &[NodeGroup::new("trn2.48xlarge", 1), NodeGroup::new("trn2u.48xlarge", 4)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_disaggregated_allocates() {
    sample_allocates("disaggregated", &[NodeGroup::new("trn2.48xlarge", 1)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_mixed_allocates() {
    let groups =
        [NodeGroup::new("trn2.48xlarge", 3), NodeGroup::new("trn1.32xlarge", 1), NodeGroup::new("trn2u.48xlarge", 4)];
    sample_allocates("mixed", &groups).await;
}

/// One row per profile kind and option; each is scheduled, in this order, and keeps its promise.
fn table() -> Value {
    let trn2 = "trn2.48xlarge";
    let us = "trn2u.48xlarge";
    json!([
        // First, so the only node with that driver has room (unpinned rows may land there too).
        {"name": "pinned-driver", "training": {"instanceType": trn2, "devices": 4, "neuronDriverVersion": "2.26.0.0"}},
        {"name": "whole", "training": {"instanceType": trn2, "devices": "All", "efa": true}},
        {"name": "sixteen-efa", "training": {"instanceType": trn2, "devices": 16, "efa": true, "logicalNeuronCore": 2}},
        {"name": "eight-lnc1", "training": {"instanceType": trn2, "devices": 8, "logicalNeuronCore": 1}},
        {"name": "four", "longContextInference": {"instanceType": trn2, "devices": 4, "logicalNeuronCore": 2}},
        {"name": "one-efa", "training": {"instanceType": trn2, "devices": 1, "efa": true}},
        {"name": "one", "training": {"devices": 1}},
        {"name": "trn1-four-efa", "training": {"instanceType": "trn1.32xlarge", "devices": 4, "efa": true}},
        {"name": "trn1-one-efa", "training": {"instanceType": "trn1.32xlarge", "devices": 1, "efa": true}},
        {"name": "us1", "longContextInference": {"instanceType": us, "ultraServerNodes": 1}},
        {"name": "us2", "longContextInference": {"instanceType": us, "ultraServerNodes": 2, "logicalNeuronCore": 1}},
        {"name": "us4", "longContextInference": {"instanceType": us, "ultraServerNodes": 4, "logicalNeuronCore": 2}},
        {"name": "serve", "disaggregated": {
            "prefill": {"instanceType": trn2, "devices": 8, "logicalNeuronCore": 2, "efa": true},
            "decode": {"instanceType": trn2, "devices": 1, "neuronDriverVersion": "2.25.4.0"},
        }},
        {"name": "trn1-whole", "training": {"instanceType": "trn1.32xlarge", "devices": "All"}},
        {"name": "absent", "training": {"instanceType": "trn1n.32xlarge", "devices": 16}},
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profile_kind_and_option_allocates_what_it_promises() {
    let groups = [
        NodeGroup::new("trn2.48xlarge", 4),
        NodeGroup::new("trn2.48xlarge", 1).named("trn2-new").neuron_driver("2.26.0.0"),
        NodeGroup::new("trn1.32xlarge", 2),
        NodeGroup::new("trn2u.48xlarge", 4),
    ];
    let f = Fleet::with_groups("alloc-table", &groups).await;
    let client = &f.scenario.client;
    let profiles = table();
    let namespace = templates_for(&f, &profiles).await;
    let rows: Vec<(String, Promise)> = profiles.as_array().unwrap().iter().flat_map(Promise::of_profile).collect();
    let mut placed = Vec::new();
    for (template, promise) in rows.iter().filter(|(t, _)| !["trn1-whole", "absent"].contains(&t.as_str())) {
        let node = schedule_and_check(&f, &namespace, template, template, promise).await;
        placed.push((template.clone(), node));
    }
    let node_of = |t: &str| placed.iter().find(|(p, _)| p == t).map(|(_, n)| n.clone()).unwrap();
    assert_eq!(node_of("pinned-driver"), f.node("trn2-new", 0), "the driver-version pin chose its node");
    assert!(node_of("trn1-four-efa").contains("trn1-32xlarge") && node_of("us2").contains("trn2u"));

    // Whole trn1 nodes fit as many times as trn1 nodes are still untouched; one more stays Pending with the reason.
    let (_, whole) = rows.iter().find(|(t, _)| t == "trn1-whole").unwrap();
    let trn1 = |i| f.node("trn1.32xlarge", i);
    let free = (0..2).filter(|i| !placed.iter().any(|(_, n)| *n == trn1(*i))).count();
    for i in 0..free {
        schedule_and_check(&f, &namespace, &format!("trn1-whole-{i}"), "trn1-whole", whole).await;
    }
    create_pod(client, &namespace, &workload_pod("trn1-whole-extra", "trn1-whole", &f.pod_affinity())).await;
    let reason = wait_unschedulable(client, &namespace, "trn1-whole-extra").await;
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    // A type the fleet does not have never lands elsewhere.
    create_pod(client, &namespace, &workload_pod("absent", "absent", &f.pod_affinity())).await;
    let reason = wait_unschedulable(client, &namespace, "absent").await;
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_schedule_device_is_never_allocated() {
    let f = Fleet::start("alloc-noschedule", &[("trn2.48xlarge", 1)]).await;
    let client = &f.scenario.client;
    let node = f.node("trn2.48xlarge", 0);
    f.taint_device(&node, "neuron-device-5", TaintEffect::NoSchedule).await;
    let namespace = templates_for(&f, &json!([{"name": "four", "training": {"devices": 4}}])).await;
    let promise = Promise { devices: Some(4), ..Promise::default() };
    let mut held = Vec::new();
    for i in 0..3 {
        let pod = format!("four-{i}");
        create_pod(client, &namespace, &workload_pod(&pod, "four", &f.pod_affinity())).await;
        let got = allocation::allocation(client, &wait_scheduled(client, &namespace, &pod).await).await;
        allocation::check(&promise, &got).unwrap();
        held.extend(got.neurons.into_iter().map(|d| d.name));
    }
    assert!(!held.contains(&"neuron-device-5".to_string()), "the tainted device was allocated: {held:?}");
    // Its whole group of 4 is unusable, so a fourth 4-device claim cannot fit.
    create_pod(client, &namespace, &workload_pod("four-3", "four", &f.pod_affinity())).await;
    wait_unschedulable(client, &namespace, "four-3").await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_execute_taint_on_an_allocated_device_evicts_its_pod() {
    let f = Fleet::start("alloc-noexecute", &[("trn2.48xlarge", 1)]).await;
    let client = &f.scenario.client;
    let namespace = templates_for(&f, &json!([{"name": "one", "training": {"devices": 1}}])).await;
    let mut devices = Vec::new();
    for pod in ["victim", "bystander"] {
        create_pod(client, &namespace, &workload_pod(pod, "one", &f.pod_affinity())).await;
        let got = allocation::allocation(client, &wait_scheduled(client, &namespace, pod).await).await;
        devices.push((got.node.clone(), got.neurons[0].name.clone()));
    }
    let (node, device) = &devices[0];
    f.taint_device(node, device, TaintEffect::NoExecute).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), &namespace);
    support::cluster::eventually(support::scenario::TIMEOUT, "victim evicted", || async {
        pods.get_opt("victim").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(pods.get_opt("bystander").await.unwrap().is_some(), "the pod on a healthy device stays");
    f.clear().await;
}

/// A request with fallbacks: the scheduler takes the first choice that fits on the node, and the allocation keeps
/// that choice's promise (its type, count, connected group and LNC, and no other choice's config).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_first_choice_falls_back_and_the_fallback_keeps_its_promise() {
    let f = Fleet::start("alloc-fallback", &[("trn2.48xlarge", 2), ("trn1.32xlarge", 1)]).await;
    let client = &f.scenario.client;
    let trn2 = "trn2.48xlarge";
    let profiles = json!([
        {"name": "pretrain", "training": {"instanceType": trn2, "devices": 16, "logicalNeuronCore": 2, "allowLncChange": true, "fallbacks": [
            {"instanceType": trn2, "devices": 8, "logicalNeuronCore": 1},
            {"instanceType": "trn1.32xlarge", "devices": 16},
        ]}},
        {"name": "eight", "training": {"instanceType": trn2, "devices": 8}},
    ]);
    let namespace = templates_for(&f, &profiles).await;
    let promise = Promise::of_profile(&profiles[0]).remove(0).1;
    // Which choice a pod gets, checked against the promise; pinned pods stay on one node, since kube-scheduler
    // 1.34 does not yet prefer the nodes where an earlier choice fits.
    let place = |pod: &'static str, node: Option<String>| {
        let (f, namespace, promise) = (&f, &namespace, &promise);
        async move {
            let spec = workload_pod(pod, "pretrain", &f.pod_affinity());
            create_pod(client, namespace, &node.map_or(spec.clone(), |n| pinned(spec, &n))).await;
            let got = allocation::allocation(client, &wait_scheduled(client, namespace, pod).await).await;
            allocation::check(promise, &got).unwrap_or_else(|broken| panic!("{pod}: {broken}"));
            let requests: Vec<&str> = got.results.iter().map(|r| r.request.as_str()).collect();
            (got.node.clone(), requests[0].to_string())
        }
    };

    // Room for the first choice: it is taken.
    let node = f.node(trn2, 0);
    assert_eq!(place("first", Some(node.clone())).await, (node, "neurons/preferred".into()));
    // Eight devices held on the other trn2 node: no group of 16 there, so the first fallback (8 connected, LNC 1).
    // (Not 4: the scheduler searches orderings of the free devices for 16, and with 12 free it ran out of its
    // filter time on that node, which it then rejected without trying the fallbacks.)
    let eight = pinned(workload_pod("eight", "eight", &f.pod_affinity()), &f.node(trn2, 1));
    create_pod(client, &namespace, &eight).await;
    wait_scheduled(client, &namespace, "eight").await;
    let node = f.node(trn2, 1);
    assert_eq!(place("second", Some(node.clone())).await, (node, "neurons/fallback-1".into()));
    // Both trn2 nodes are full: the pod goes to the trn1 node, with 16 connected trn1 devices.
    assert_eq!(place("third", None).await, (f.node("trn1.32xlarge", 0), "neurons/fallback-2".into()));
    // Every choice is full now.
    create_pod(client, &namespace, &workload_pod("fourth", "pretrain", &f.pod_affinity())).await;
    let reason = wait_unschedulable(client, &namespace, "fourth").await;
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    f.clear().await;
}

/// A DeviceClass of the config's name that another tool made, selecting by driver alone (AWS's chart does), is left
/// as it is; the templates then select `neuron_device` themselves. On UltraServer nodes, whose slices publish a
/// `neuron_node` entry beside the devices, a whole-node device claim (which the class alone would give the entry
/// too) gets exactly the node's devices. With the operator's own class, the other tests allocate the shape without
/// that selector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_another_tools_device_class_a_device_claim_gets_devices_only() {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
    use kube::api::{Api, Patch, PatchParams};
    let f = Fleet::start("alloc-foreign-class", &[("trn2u.48xlarge", 1)]).await;
    let client = &f.scenario.client;
    let class = format!("{}.example.com", f.scenario.id);
    let theirs = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]}});
    let classes: Api<DeviceClass> = Api::all(client.clone());
    classes.patch(&class, &PatchParams::apply("helm"), &Patch::Apply(&theirs)).await.unwrap();
    let profiles = json!([{"name": "whole", "training": {"instanceType": "trn2u.48xlarge", "devices": "All"}}]);
    let namespace = templates_of_class(&f, &profiles, Some(&class)).await;
    // Its first template may predate the operator's sight of the class; it is replaced in the selecting shape.
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), &namespace);
    let selecting = "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'";
    support::cluster::eventually(support::scenario::TIMEOUT, "the template selects neuron_device", || async {
        let template = templates.get_opt("whole").await.ok()??;
        let requests = template.spec.spec.devices?.requests?;
        let selectors = requests[0].exactly.clone()?.selectors?;
        selectors.iter().any(|s| s.cel.as_ref().is_some_and(|c| c.expression == selecting)).then_some(())
    })
    .await;
    let promise = Promise::of_profile(&profiles[0]).remove(0).1;
    schedule_and_check(&f, &namespace, "whole", "whole", &promise).await;
    f.clear().await;
    classes.delete(&class, &Default::default()).await.unwrap();
}
