//! What every scenario shares: the table of figures, the knobs, and the cluster helpers (namespaces, configs, waits,
//! the operator's CPU and memory).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use neuron_dra_operator::api::NeuronDRAConfig;
use neuron_dra_operator::devtools::harness as cluster;
use serde_json::{Value, json};

use cluster::{Operator, TEST_LABEL};

pub(crate) const BENCH_ID: &str = "bench";

pub(crate) fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub(crate) struct Row {
    scenario: String,
    figure: String,
    value: String,
    target: String,
    met: Option<bool>,
}

#[derive(Default)]
pub(crate) struct Table(Vec<Row>);

impl Table {
    pub(crate) fn add(&mut self, scenario: &str, figure: &str, value: String, target: &str, met: Option<bool>) {
        eprintln!("bench: {scenario} | {figure} = {value}");
        self.0.push(Row { scenario: scenario.into(), figure: figure.into(), value, target: target.into(), met });
    }

    pub(crate) fn print(&self) {
        println!("\n| scenario | figure | value | target | met |");
        println!("|---|---|---|---|---|");
        for r in &self.0 {
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            println!("| {} | {} | {} | {} | {} |", r.scenario, r.figure, r.value, r.target, met);
        }
    }
}

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    match values.len() % 2 {
        1 => values[values.len() / 2],
        _ => (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0,
    }
}

pub(crate) fn fastest(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Counts from the operator's own client metrics, by (verb, resource).
pub(crate) fn requests(operator: &Operator) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for line in operator.metrics().lines().filter(|l| l.starts_with("neuron_dra_operator_api_requests_total{")) {
        let field =
            |name: &str| line.split(&format!("{name}=\"")).nth(1).and_then(|r| r.split('"').next()).map(String::from);
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) as u64;
        if let (Some(verb), Some(resource)) = (field("verb"), field("resource")) {
            // One series per status code: the sum is the requests sent.
            *out.entry((verb, resource)).or_default() += value;
        }
    }
    out
}

pub(crate) fn writes_delta(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
) -> BTreeMap<String, u64> {
    let mut delta = BTreeMap::new();
    for ((verb, resource), value) in after {
        let old = before.get(&(verb.clone(), resource.clone())).copied().unwrap_or(0);
        if value > &old && ["create", "update", "patch", "delete"].contains(&verb.as_str()) && resource != "leases" {
            delta.insert(format!("{verb} {resource}"), value - old);
        }
    }
    delta
}

/// CPU seconds (user + system) a process has used.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Removes a simulated fleet. The API server holding a large fleet can drop a connection under the deletes (a
/// collection of 20,000 slices outlasts a request): up to three tries.
pub(crate) async fn clear_fleet(client: &Client, prefix: &str) {
    for attempt in 1.. {
        match neuron_dra_operator::devtools::simulate::clear(client, Some(prefix)).await {
            Ok(_) => return,
            Err(error) if attempt < 3 => eprintln!("bench: clearing the fleet: {error}; again"),
            Err(error) => panic!("clearing the fleet: {error}"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Peak resident memory (VmHWM) of a process, in MiB.
pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

pub(crate) fn config_doc(name: &str, namespaces: &[String], node_selector: Value, training_devices: u32) -> Value {
    config_doc_in(name, "bench-driver", namespaces, node_selector, training_devices)
}

pub(crate) fn config_doc_in(
    name: &str,
    driver_namespace: &str,
    namespaces: &[String],
    node_selector: Value,
    training_devices: u32,
) -> Value {
    json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": name, "labels": {TEST_LABEL: BENCH_ID}},
        "spec": {
            "nodeSelector": node_selector,
            "driver": {"namespace": driver_namespace},
            "templates": {"namespaces": namespaces},
            "profiles": [
                {"name": "pretrain", "training": {"instanceType": "trn2.48xlarge", "devices": training_devices, "efa": true}},
                {"name": "chat-128k", "longContextInference": {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 1}},
                {"name": "chat-us", "longContextInference": {"instanceType": "trn2u.48xlarge", "ultraServerNodes": 2}},
                {"name": "serve", "disaggregated": {"prefill": {"devices": 8}, "decode": {"devices": 4}}},
            ],
        },
    })
}

pub(crate) fn no_nodes() -> Value {
    json!({"matchLabels": {TEST_LABEL: "no-such-node"}})
}

pub(crate) async fn namespaces(client: &Client, prefix: &str, count: usize) -> Vec<String> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut names = Vec::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        api.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&ns)).await.unwrap();
        names.push(name);
    }
    names
}

/// Watches until the config's current generation is Ready; returns when the watch showed it (a poll would add up
/// to its period to every figure).
pub(crate) async fn wait_ready(api: &Api<NeuronDRAConfig>, name: &str, timeout: Duration) -> Option<Instant> {
    let ready = |config: Option<&NeuronDRAConfig>| {
        config.is_some_and(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.observed_generation == c.metadata.generation
                    && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, kube::runtime::wait::await_condition(api.clone(), name, ready)).await {
            Ok(Ok(_)) => return Some(Instant::now()),
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await, // the watch broke: watch again
            Err(_) => return None,
        }
    }
}

/// Lets the API server finish what the previous step left (background deletes, controllers catching up), so each
/// timed step starts on a quiet control plane.
pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

pub(crate) fn kubectl_apply_file(path: &std::path::Path, server_side: bool) -> Duration {
    let started = Instant::now();
    let mut args = vec!["apply", "-f", path.to_str().unwrap()];
    if server_side {
        args.push("--server-side");
    }
    cluster::kubectl(&args);
    started.elapsed()
}

pub(crate) async fn delete_and_wait(api: &Api<NeuronDRAConfig>, name: &str) {
    api.delete(name, &DeleteParams::default()).await.ok();
    while api.get_opt(name).await.ok().flatten().is_some() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) fn operator_pid(operator: &Operator) -> u32 {
    operator.pid().expect("operator running")
}
