//! Scenario 4 of `make bench`: fleets of trn2.48xlarge nodes, from a few thousand to the largest this machine
//! holds. Per fleet: cold start to Ready, one device taint to the status (measured once the control plane is quiet),
//! status size, operator CPU and peak RSS; across fleets: memory per node; on the largest: reconciles per minute
//! under a busy fleet (node heartbeats and plugin-pod status writes), with and without the operator's event
//! filtering.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use neuron_dra_operator::api::NeuronDRAConfig;
use neuron_dra_operator::devtools::simulate::{self, FaultKind, TaintEffect, fleet};
use serde_json::json;

use super::common::{
    BENCH_ID, Table, config_doc, cpu_seconds, delete_and_wait, env_or, median, namespaces, operator_pid, peak_rss_mib,
    secs, wait_ready,
};
use neuron_dra_operator::devtools::harness::{Operator, OperatorOptions};

const DRIVER_NAMESPACE: &str = "bench-driver";

/// Every fleet in `scales` (node counts, ascending), then what they show together.
pub async fn fleets(client: &Client, scales: &[usize], table: &mut Table) {
    let mut memory = Vec::new();
    for (i, &nodes) in scales.iter().enumerate() {
        let largest = i + 1 == scales.len();
        memory.push((nodes, fleet(client, nodes, largest, table).await));
    }
    if let [.., (small, small_rss), (large, large_rss)] = memory[..] {
        let per_node_kib = (large_rss - small_rss) * 1024.0 / (large - small) as f64;
        let at = |n: usize| large_rss + per_node_kib * (n - large) as f64 / 1024.0;
        let scenario = "4. fleets together";
        table.add(
            scenario,
            &format!("operator memory per node (peak RSS, {small} → {large} nodes)"),
            format!("{per_node_kib:.1} KiB"),
            "",
            None,
        );
        let at_20k = at(20_000);
        table.add(
            scenario,
            "peak RSS at 20,000 nodes (measured, or extrapolated from the two largest)",
            format!("{at_20k:.0} MiB"),
            "< 250 MiB",
            Some(at_20k < 250.0),
        );
        table.add(scenario, "peak RSS at 100,000 nodes (extrapolated)", format!("{:.0} MiB", at(100_000)), "", None);
    }
}

/// One fleet; returns the operator's peak RSS (MiB).
async fn fleet(client: &Client, nodes: usize, largest: bool, table: &mut Table) -> f64 {
    let scenario = format!("4. fleet of {nodes} trn2.48xlarge");
    let prefix = format!("bench{nodes}");
    let spec = fleet::FleetSpec {
        prefix: prefix.clone(),
        count: nodes,
        instance_type: "trn2.48xlarge".into(),
        dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
        neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
    };
    let started = Instant::now();
    simulate::create_fleet(client, &spec).await.unwrap();
    eprintln!("bench: {nodes} nodes and slices created in {:.1}s", secs(started.elapsed()));
    let kubelet = tokio::spawn(simulate::kubelet(client.clone()));
    let api: Api<NeuronDRAConfig> = Api::all(client.clone());
    let ns = namespaces(client, &format!("{prefix}-ns"), 1).await;
    let name = format!("{prefix}-config");
    let selector = json!({"matchLabels": {fleet::SIMULATED_LABEL: prefix}});

    // Roll out with one operator, so the DaemonSet is complete before the cold start is measured.
    let mut first = Operator::start(OperatorOptions { test_id: BENCH_ID, lease: &format!("{prefix}-1"), extra: &[] });
    api.create(&PostParams::default(), &serde_json::from_value(config_doc(&name, &ns, selector.clone(), 4)).unwrap())
        .await
        .unwrap();
    let rolled = wait_ready(&api, &name, Duration::from_secs(1800)).await;
    eprintln!("bench: rollout to {nodes} nodes: {:?}", rolled.map(|t| secs(t - started)));
    first.terminate();
    quiet(client).await;

    // Cold start: a new process lists everything, then confirms Ready in its first reconcile.
    let started = Instant::now();
    let operator = Operator::start(OperatorOptions { test_id: BENCH_ID, lease: &format!("{prefix}-2"), extra: &[] });
    let pid = operator_pid(&operator);
    // Its first reconcile of this config has finished when the per-config gauges show the fleet's size.
    let gauge = format!("neuron_dra_operator_nodes{{config=\"{name}\"}} {nodes}");
    let first_reconcile = loop {
        if operator.metrics().lines().any(|l| l == gauge)
            && wait_ready(&api, &name, Duration::from_secs(1)).await.is_some()
        {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(900), "no reconcile after start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let cold_cpu = cpu_seconds(pid);
    table.add(
        &scenario,
        "time to first Ready after operator start (cold caches)",
        format!("{:.2} s", secs(first_reconcile)),
        "",
        None,
    );
    table.add(&scenario, "operator CPU time, start to first Ready", format!("{cold_cpu:.2} s"), "", None);

    // One device taint until the status shows it, three times, on a quiet control plane.
    quiet(client).await;
    let mut latencies = Vec::new();
    for k in 0..3 {
        let node = spec.node_name(nodes / 2 + k);
        let started = Instant::now();
        simulate::fault(client, FaultKind::Taint, &node, None, TaintEffect::NoExecute).await.unwrap();
        loop {
            let status = api.get(&name).await.unwrap().status.unwrap_or_default();
            if status.unhealthy_devices.iter().any(|d| d.node == node) {
                latencies.push(secs(started.elapsed()));
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "taint never showed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await; // the status write settles before the next taint
    }
    let latency = median(&mut latencies);
    let goal = if largest && nodes > 5000 { 2.0 } else { 1.0 };
    table.add(
        &scenario,
        "one device taint → status (median of 3, quiet control plane)",
        format!("{latency:.2} s"),
        &format!("< {goal} s"),
        Some(latency < goal),
    );

    // Fill the bounded lists (60 tainted devices, 60 nodes without a slice), then weigh the status.
    for k in 0..60.min(nodes / 2) {
        simulate::fault(client, FaultKind::Taint, &spec.node_name(k), None, TaintEffect::NoSchedule).await.unwrap();
        simulate::fault(client, FaultKind::NoSlice, &spec.node_name(nodes - 1 - k), None, TaintEffect::NoSchedule)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let config = api.get(&name).await.unwrap();
    let status = config.status.unwrap_or_default();
    let size = serde_json::to_vec(&status).unwrap().len() as f64 / 1024.0;
    table.add(
        &scenario,
        "status size (63 unhealthy devices, 60 node issues)",
        format!("{size:.1} KiB ({} + {} listed)", status.unhealthy_devices.len(), status.node_issues.len()),
        "< 64 KiB",
        Some(size < 64.0),
    );
    let rss = peak_rss_mib(pid);
    table.add(&scenario, "operator peak RSS", format!("{rss:.0} MiB"), "", None);

    let mut operator = operator;
    if largest {
        operator = busy_fleet(client, &spec, &name, operator, &scenario, table).await;
    }

    // Clean up while the operator still runs (its finalizer), then remove the fleet.
    delete_and_wait(&api, &name).await;
    drop(operator);
    kubelet.abort();
    super::common::clear_fleet(client, &prefix).await;
    rss
}

/// Waits until the plugin pods stop changing: the highest resourceVersion among them has stayed the same for five
/// seconds (the DaemonSet controller, the scheduler and the stand-in kubelet have finished their writes).
async fn quiet(client: &Client) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), DRIVER_NAMESPACE);
    let started = Instant::now();
    let (mut last, mut since) = (0u64, Instant::now());
    loop {
        let list = pods.list_metadata(&ListParams::default()).await.unwrap();
        let newest = list.items.iter().filter_map(|p| p.metadata.resource_version.as_deref()?.parse().ok()).max();
        let newest = newest.unwrap_or(0);
        if newest != last {
            (last, since) = (newest, Instant::now());
        } else if since.elapsed() >= Duration::from_secs(5) {
            eprintln!("bench: plugin pods quiet after {:.1}s", secs(started.elapsed()));
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// This operator's reconciles of `config` so far.
fn reconciles(operator: &Operator, config: &str) -> f64 {
    let series = format!("neuron_dra_operator_reconciles_total{{config=\"{config}\"}} ");
    operator.metrics().lines().find_map(|l| l.strip_prefix(series.as_str())?.parse().ok()).unwrap_or(0.0)
}

/// Reconciles per minute while nodes heartbeat and plugin pods' status is rewritten (nothing the operator reads),
/// with the running operator (events filtered), then with one that reconciles on every event. Returns the
/// operator left running.
async fn busy_fleet(
    client: &Client,
    spec: &fleet::FleetSpec,
    config: &str,
    filtered: Operator,
    scenario: &str,
    table: &mut Table,
) -> Operator {
    let seconds: u64 = env_or("BENCH_CHURN_SECS", 60);
    let rate: u64 = env_or("BENCH_CHURN_RATE", 50);
    let pods: Vec<String> = Api::<Pod>::namespaced(client.clone(), DRIVER_NAMESPACE)
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let churn = {
        let (client, spec) = (client.clone(), spec.clone());
        tokio::spawn(async move { churn(&client, &spec, &pods, rate).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await; // the churn is under way
    let per_minute = |before: f64, after: f64| (after - before) * 60.0 / seconds as f64;

    let before = reconciles(&filtered, config);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let with_filter = per_minute(before, reconciles(&filtered, config));
    drop(filtered);

    let every = Operator::start(OperatorOptions {
        test_id: BENCH_ID,
        lease: &format!("{}-every", spec.prefix),
        extra: &["--trigger-on-every-event"],
    });
    let api: Api<NeuronDRAConfig> = Api::all(client.clone());
    while reconciles(&every, config) < 1.0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_ready(&api, config, Duration::from_secs(300)).await;
    let before = reconciles(&every, config);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let without_filter = per_minute(before, reconciles(&every, config));
    churn.abort();

    let what = format!("reconciles per minute, {rate} irrelevant writes/s (heartbeats, pod status)");
    table.add(scenario, &format!("{what}: every event"), format!("{without_filter:.0}"), "", None);
    table.add(
        scenario,
        &format!("{what}: changed reads only"),
        format!("{with_filter:.0}"),
        "< every event",
        Some(with_filter < without_filter),
    );
    every
}

/// Writes, at `rate` per second and alternating, a node's heartbeat (its Ready condition's lastHeartbeatTime) and a
/// plugin pod's status message: what a busy cluster rewrites all the time, none of it read by the operator.
async fn churn(client: &Client, spec: &fleet::FleetSpec, pods: &[String], rate: u64) {
    let nodes: Api<Node> = Api::all(client.clone());
    let plugin_pods: Api<Pod> = Api::namespaced(client.clone(), DRIVER_NAMESPACE);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    for beat in 0usize.. {
        tick.tick().await;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let result = if beat % 2 == 0 || pods.is_empty() {
            let status =
                json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": now}]}});
            nodes
                .patch_status(
                    &spec.node_name(beat / 2 % spec.count),
                    &PatchParams::default(),
                    &Patch::Strategic(&status),
                )
                .await
                .map(|_| ())
        } else {
            let status = json!({"status": {"message": format!("heartbeat {now}")}});
            plugin_pods
                .patch_status(&pods[beat / 2 % pods.len()], &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map(|_| ())
        };
        if let Err(error) = result {
            eprintln!("bench: churn write failed: {error}");
        }
    }
}
