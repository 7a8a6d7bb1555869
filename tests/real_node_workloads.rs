//! The training example's pod on the real node: `examples/pod.yaml` on the `finetune` profile exactly as
//! `samples/training.yaml` has it (8 connected devices at LNC=2, else 4 at LNC=2), twice: the first pod gets the
//! preferred 8 devices, and once another claim holds 4 of the other 8, the second gets the fallback's 4. Each runs
//! the example's own launch line (its image swapped for busybox, `torchrun` a shell function that prints what it
//! was asked, the CPU and memory requests dropped: the local node is small), and the test checks that the width it
//! launched equals the NeuronCores of the devices its claim holds, counted from the `NEURON_RT_VISIBLE_CORES` the
//! container got, and that the container's Neuron environment is the one docs/workloads.md documents (from AWS's
//! documentation), not what the stand-in plugin happens to set: the stand-in is checked against the document.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod node;
    pub mod scenario;
}

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;
use serde_json::{Value, json};
use support::allocation::{claim_of, create_pod, pinned};
use support::cluster::{documents, eventually, kubeconfig, kubectl_with, repo};
use support::node;
use support::scenario::{Scenario, TIMEOUT};

/// The real node's instance type (`hack/node.sh` labels it) and NeuronCores per device at LNC=2.
const TYPE: &str = "trn2.48xlarge";
const CORES_PER_DEVICE: usize = 4;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `NEURON_*` variables docs/workloads.md's "What the container gets" table documents.
fn documented_environment() -> BTreeSet<String> {
    let guide = read("docs/workloads.md");
    let section = guide.split("## What the container gets").nth(1).expect("the section").split("\n## ").next().unwrap();
    let rows = section.lines().filter(|l| l.starts_with("| `NEURON_"));
    rows.map(|l| l.split('`').nth(1).unwrap().to_string()).collect()
}

/// examples/pod.yaml for the real node: named `name`, in `namespace`, pinned to `node`; its launch line kept, with
/// `torchrun` printing its arguments and the Neuron environment, then holding the devices.
fn example_pod(name: &str, namespace: &str, node: &str) -> Value {
    let mut pod = documents(&read("examples/pod.yaml")).remove(0);
    pod["metadata"] = json!({"name": name, "namespace": namespace});
    pod["spec"]["nodeSelector"] = Value::Null;
    pod["spec"]["terminationGracePeriodSeconds"] = json!(1);
    let container = &mut pod["spec"]["containers"][0];
    let script = container["args"][0].as_str().expect("the example's launch line").to_string();
    assert!(script.contains("torchrun --nproc-per-node=\"$cores\""), "{script}");
    let stub = "torchrun() { echo \"torchrun $*\"; env | grep '^NEURON_' | sort; }\n";
    container["args"] = json!([format!("{stub}{script}echo launched\nsleep 3600\n")]);
    container["image"] = json!(node::image("busybox"));
    container["imagePullPolicy"] = json!("IfNotPresent");
    container["resources"] = json!({"claims": container["resources"]["claims"]});
    pinned(pod, node)
}

/// The pod's log once its launch line ran: the torchrun line and the `NEURON_*` variables.
async fn launched(namespace: &str, name: &str) -> (String, Vec<String>) {
    let log = eventually(TIMEOUT, &format!("{name} launched"), || async {
        let log = kubectl_with(&kubeconfig(), &["logs", "-n", namespace, name], None).ok()?;
        log.contains("launched").then_some(log)
    })
    .await;
    let torchrun = log.lines().find(|l| l.starts_with("torchrun ")).expect("torchrun ran").to_string();
    (torchrun, log.lines().filter(|l| l.starts_with("NEURON_")).map(str::to_string).collect())
}

/// The NeuronCores a `NEURON_RT_VISIBLE_CORES` value names (`0-3,16-19` is 8).
fn count(cores: &str) -> usize {
    let ranges = cores.split(',').map(|r| r.split_once('-').unwrap_or((r, r)));
    ranges.map(|(a, b)| b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1).sum()
}

/// Runs the example as `name`, then checks its launch against its claim; gives the claim's chosen request.
async fn run_and_check(s: &Scenario, node: &str, namespace: &str, name: &str) -> String {
    create_pod(&s.client, namespace, &example_pod(name, namespace, node)).await;
    let (torchrun, env) = launched(namespace, name).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    let claim: ResourceClaim = claim_of(&s.client, &pods.get(name).await.unwrap()).await;
    let results = claim.status.and_then(|st| st.allocation).and_then(|a| a.devices).and_then(|d| d.results);
    let results = results.expect("an allocated claim");
    let visible = node::env_value(&env, "NEURON_RT_VISIBLE_CORES").unwrap_or_else(|| panic!("{name}: {env:?}"));
    assert_eq!(count(visible), results.len() * CORES_PER_DEVICE, "{name}: {visible} for {} devices", results.len());
    assert_eq!(torchrun, format!("torchrun --nproc-per-node={} finetune.py", count(visible)), "{name}");
    // The fallback keeps the LNC: the model compiled for LNC=2 loads either way.
    assert_eq!(node::env_value(&env, "NEURON_LOGICAL_NC_CONFIG"), Some("2"), "{name}: {env:?}");
    // The container's Neuron environment is the documented one, plus the stand-in's own NEURON_DRA_DEVICES
    // (docs/standin-plugin.md), which no workload reads.
    let names: BTreeSet<String> = env.iter().map(|l| l.split('=').next().unwrap().to_string()).collect();
    let mut documented = documented_environment();
    assert!(documented.contains("NEURON_RT_VISIBLE_CORES"), "{documented:?}");
    documented.insert("NEURON_DRA_DEVICES".to_string());
    assert_eq!(names, documented, "{name}: the container's NEURON_* against docs/workloads.md");
    results[0].request.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real node: make test-node"]
async fn the_training_example_launches_as_wide_as_its_claim_on_the_preferred_choice_and_the_fallback() {
    let s = Scenario::with_operator("node-workloads").await;
    let node = node::name(&s.client).await;
    let sample = documents(&read("samples/training.yaml")).remove(0);
    let finetune = sample["spec"]["profiles"].as_array().unwrap().iter().find(|p| p["name"] == "finetune").cloned();
    let finetune = finetune.expect("the training sample's finetune profile");
    assert_eq!(finetune["training"]["instanceType"], TYPE);
    let profiles = json!([finetune, {"name": "quarter", "training": {"instanceType": TYPE, "devices": 4}}]);

    node::plugin_pods_gone(&s.client, &node).await;
    node::devices_free(&s.client, &node).await;
    node::forget_slices(&s.client, &node).await;
    let namespace = s.namespace("work", &[]).await;
    let spec = json!({
        "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
        "driver": {"image": node::plugin_image("1.1.0"), "imagePullPolicy": "IfNotPresent"},
        "templates": {"namespaces": [namespace]},
        "profiles": profiles,
    });
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    node::published_devices(&s.client, &node, "1.1.0").await;
    s.wait_templates(&namespace, &["finetune", "quarter"]).await;

    // The preferred choice: 8 connected devices, 32 NeuronCores.
    assert_eq!(run_and_check(&s, &node, &namespace, "finetune-a").await, "neurons/preferred");
    // Another claim takes 4 of the other 8 devices: no 8 connected are left, so the next gets the fallback's 4.
    let mut holder = example_pod("holder", &namespace, &node);
    holder["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = json!("quarter");
    create_pod(&s.client, &namespace, &holder).await;
    launched(&namespace, "holder").await;
    assert_eq!(run_and_check(&s, &node, &namespace, "finetune-b").await, "neurons/fallback-1");

    for name in ["finetune-a", "finetune-b", "holder"] {
        s.delete_pod(&namespace, name).await;
    }
    s.delete_config(&s.id).await;
    eventually(TIMEOUT, "the config gone", || async { s.configs().get_opt(&s.id).await.ok()?.is_none().then_some(()) })
        .await;
}
