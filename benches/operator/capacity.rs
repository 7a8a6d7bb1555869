//! Scenario 5 of `make bench`: capacity at scale. A fleet of N trn2.48xlarge nodes with C allocated claims: the time
//! of one capacity computation (the pure function, over the same data the operator caches), the operator's peak RSS
//! holding it all, and the time from one more claim's allocation to the status.
//!
//! Knobs: BENCH_CAPACITY_NODES (5000), BENCH_CLAIMS (20000).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use neuron_dra_operator::api::{NeuronDRAConfig, NeuronDRAConfigStatus};
use neuron_dra_operator::cluster::{ClaimView, NodeView, SliceView, node_view, slice_view};
use neuron_dra_operator::devtools::simulate::{self, fleet};
use serde_json::{Value, json};

use super::common::{BENCH_ID, Table, env_or, median, namespaces, operator_pid, peak_rss_mib, secs, wait_ready};
use neuron_dra_operator::devtools::harness::{self, Operator, OperatorOptions, TEST_LABEL};

const PROFILES: &str = r#"[
  {"name": "one", "training": {"instanceType": "trn2.48xlarge", "devices": 1}},
  {"name": "four-efa", "training": {"instanceType": "trn2.48xlarge", "devices": 4, "efa": true}},
  {"name": "eight", "longContextInference": {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 1}},
  {"name": "whole", "training": {"instanceType": "trn2.48xlarge", "devices": "All", "efa": true}},
  {"name": "serve", "disaggregated": {"prefill": {"devices": 8, "efa": true}, "decode": {"devices": 4}}}
]"#;

fn fleet_spec(prefix: &str, count: usize) -> fleet::FleetSpec {
    fleet::FleetSpec {
        prefix: prefix.into(),
        count,
        instance_type: "trn2.48xlarge".into(),
        dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
        neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
    }
}

fn config_doc(name: &str, namespace: &str, prefix: &str) -> Value {
    json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": name, "labels": {TEST_LABEL: BENCH_ID}},
        "spec": {
            "nodeSelector": {"matchLabels": {fleet::SIMULATED_LABEL: prefix}},
            "driver": {"namespace": format!("{BENCH_ID}-driver")},
            "templates": {"namespaces": [namespace]},
            "profiles": serde_json::from_str::<Value>(PROFILES).unwrap(),
        },
    })
}

/// Claim `k`: one device of node `k / 4`, made (as if) from template `one` of `config`.
fn claim(config: &str, namespace: &str, spec: &fleet::FleetSpec, k: usize) -> (Value, Value) {
    let name = format!("claim-{k}");
    let object = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"neurondra.io/config": config, "neurondra.io/template": "one"}},
        "spec": {"devices": {"requests": [{"name": "neurons", "exactly": {"deviceClassName": "neuron.aws.com"}}]}},
    });
    let node = spec.node_name(k / 4);
    let allocation = json!({"devices": {"results": [
        {"request": "neurons", "driver": "neuron.aws.com", "pool": node, "device": format!("neuron-device-{}", k % 4 * 4)}
    ]}});
    (object, json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "status": {"allocation": allocation}}))
}

/// Creates the claim and writes its allocation, as the scheduler would.
async fn allocate(client: &Client, namespace: &str, (object, status): (Value, Value)) -> anyhow::Result<()> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let params = PatchParams::apply("bench-scheduler").force();
    claims.patch(&name, &params, &Patch::Apply(&object)).await?;
    claims.patch_status(&name, &params, &Patch::Apply(&status)).await?;
    Ok(())
}

fn allocated_one(status: &NeuronDRAConfigStatus) -> Option<i64> {
    status.profiles.iter().flat_map(|p| &p.capacity).find(|c| c.template == "one").map(|c| c.allocated)
}

/// 5a: the pure computation over the views the operator would cache (scenario 6 measures it per fleet too).
pub fn computation(scenario: &str, nodes: usize, claims: usize, target_ms: f64, table: &mut Table) {
    let spec = fleet_spec("cap", nodes);
    let node_views: Vec<Arc<NodeView>> = (0..nodes).map(|i| Arc::new(node_view(&fleet::node(&spec, i)))).collect();
    let mut slices: HashMap<String, Vec<Arc<SliceView>>> = HashMap::new();
    let mut efa_slices: HashMap<String, Vec<Arc<SliceView>>> = HashMap::new();
    for i in 0..nodes {
        slices.insert(spec.node_name(i), vec![Arc::new(slice_view(&fleet::resource_slice(&spec, i, None)))]);
        let efa = fleet::efa_slice(&spec, i, None).map(|s| Arc::new(slice_view(&s)));
        efa_slices.insert(spec.node_name(i), efa.into_iter().collect());
    }
    let claim_views: Vec<Arc<ClaimView>> = (0..claims)
        .map(|k| {
            let (mut object, status) = claim("cap", "ns", &spec, k);
            object["status"] = status["status"].clone();
            Arc::new(serde_json::from_value(object).unwrap())
        })
        .collect();
    let config: NeuronDRAConfig = serde_json::from_value(config_doc("cap", "ns", "cap")).unwrap();
    let validated = neuron_dra_operator::logic::validate::validate(&config).unwrap();
    // The snapshot selects a config's nodes once per reconcile, for rollout, health and capacity alike.
    let filter = neuron_dra_operator::logic::nodes::NodeFilter::new(&validated.spec);
    let selected: Vec<_> =
        node_views.iter().filter(|n| filter.selects(kube::ResourceExt::labels(n.as_ref()))).cloned().collect();
    assert_eq!(selected.len(), node_views.len(), "the config selects the whole fleet");
    let inputs = neuron_dra_operator::logic::capacity::Inputs {
        config: &validated,
        nodes: &selected,
        slices: &slices,
        efa_slices: &efa_slices,
        claims: &claim_views,
        taint_rules: &[],
    };
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let result = neuron_dra_operator::logic::capacity::assess(&inputs);
        times.push(secs(started.elapsed()) * 1000.0);
        assert_eq!(result.len(), validated.claims.len());
    }
    let ms = median(&mut times);
    table.add(
        scenario,
        &format!("one capacity computation per config (6 templates, {claims} claims, median of 5)"),
        format!("{ms:.1} ms"),
        &format!("< {target_ms} ms"),
        Some(ms < target_ms),
    );
}

/// 5a alone.
pub fn computation_only(table: &mut Table) {
    let (nodes, claims) = (env_or("BENCH_CAPACITY_NODES", 5000), env_or("BENCH_CLAIMS", 20000));
    computation(&format!("5. capacity, {nodes} nodes, {claims} claims"), nodes, claims, 100.0, table);
}

/// 5b: the operator holding the fleet and the claims.
pub async fn capacity_scale(client: &Client, table: &mut Table) {
    let nodes: usize = env_or("BENCH_CAPACITY_NODES", 5000);
    let claims: usize = env_or("BENCH_CLAIMS", 20000);
    let scenario = format!("5. capacity, {nodes} nodes, {claims} claims");
    computation(&scenario, nodes, claims, 100.0, table);
    let prefix = "benchcap";
    let spec = fleet_spec(prefix, nodes);
    let started = Instant::now();
    simulate::create_fleet(client, &spec).await.unwrap();
    let namespace = namespaces(client, &format!("{prefix}-ns"), 1).await.remove(0);
    let name = format!("{prefix}-config");
    futures::stream::iter(0..claims)
        .map(|k| allocate(client, &namespace, claim(&name, &namespace, &spec, k)))
        .buffer_unordered(48)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    eprintln!("bench: {nodes} nodes and {claims} allocated claims in {:.1}s", secs(started.elapsed()));

    let kubelet = tokio::spawn(simulate::kubelet(client.clone()));
    let operator = Operator::start(OperatorOptions { test_id: BENCH_ID, lease: prefix, extra: &[] });
    let api: Api<NeuronDRAConfig> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(config_doc(&name, &namespace, prefix)).unwrap())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(900);
    while api.get(&name).await.ok().and_then(|c| c.status).and_then(|s| allocated_one(&s)) != Some(claims as i64) {
        assert!(Instant::now() < deadline, "the status never counted the claims");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_ready(&api, &name, Duration::from_secs(900)).await;

    // One more claim allocated → the status counts it, three times.
    let mut latencies = Vec::new();
    for extra in 0..3 {
        let k = claims + extra;
        let started = Instant::now();
        allocate(client, &namespace, claim(&name, &namespace, &spec, k)).await.unwrap();
        loop {
            let status = api.get(&name).await.unwrap().status.unwrap_or_default();
            if allocated_one(&status) == Some(k as i64 + 1) {
                latencies.push(secs(started.elapsed()));
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "the claim never showed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let latency = median(&mut latencies);
    table.add(
        &scenario,
        "claim allocated → status (median of 3)",
        format!("{latency:.2} s"),
        "< 2 s",
        Some(latency < 2.0),
    );
    let rss = peak_rss_mib(operator_pid(&operator));
    table.add(&scenario, "operator peak RSS", format!("{rss:.0} MiB"), "< 200 MiB", Some(rss < 200.0));

    super::common::delete_and_wait(&api, &name).await;
    drop(operator);
    kubelet.abort();
    let _ = harness::kubectl_with(&harness::kubeconfig(), &["delete", "namespace", &namespace, "--wait=false"], None);
    super::common::clear_fleet(client, prefix).await;
}
