//! Scenario 6 (`BENCH_ONLY=fleet-replay`, sizes from `BENCH_SCALES`): fleets the local API server cannot hold,
//! served to the unchanged operator by the replay server (`benches/operator/replay`), which forwards everything but the fleet
//! to the real control plane. Per fleet: cold start to Ready and its CPU, the bytes the initial lists served, one
//! device taint → status, one claim allocated → status, status size, operator peak RSS; and the replay's own cost.
//!
//! The replay runs inside the bench process, on a tokio runtime of its own whose threads are named `replay`: its CPU
//! is those threads' (/proc/self/task), shown beside the whole process's; its memory cannot be told apart, so the
//! bench process's peak RSS is shown, a high-water mark over the whole run (earlier, smaller fleets included).

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, PostParams};
use neuron_dra_operator::api::NeuronDRAConfig;
use neuron_dra_operator::devtools::simulate::fleet;
use serde_json::json;

use super::common::{
    BENCH_ID, Table, config_doc, cpu_seconds, delete_and_wait, median, namespaces, operator_pid, peak_rss_mib, secs,
    wait_ready,
};
use super::replay::{FleetModel, Replay};
use neuron_dra_operator::devtools::harness::{self as cluster, OPERATOR_NAMESPACE, Operator, OperatorOptions};

/// Every fleet in `scales`, one replay server each.
pub async fn fleets(client: &Client, scales: &[usize], table: &mut Table) {
    for &nodes in scales {
        fleet(client, nodes, table).await;
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

async fn fleet(client: &Client, nodes: usize, table: &mut Table) {
    let scenario = format!("6. replayed fleet of {nodes} trn2.48xlarge");
    let prefix = format!("replay{nodes}");
    let dir = std::env::temp_dir().join("ndo-bench-replay");
    std::fs::create_dir_all(&dir).unwrap();
    let upstream = cluster::client_from(&cluster::operator_kubeconfig(&dir)).await;
    let replay = Replay::start(FleetModel::trn2(nodes, &prefix), upstream).await;
    let kubeconfig = replay.kubeconfig(&dir.join(format!("{prefix}.kubeconfig")));
    let api: Api<NeuronDRAConfig> = Api::all(client.clone());
    let ns = namespaces(client, &format!("{prefix}-ns"), 1).await;
    let name = format!("{prefix}-config");
    let selector = json!({"matchLabels": {fleet::SIMULATED_LABEL: prefix}});
    let start = |lease: &str| {
        let options = OperatorOptions { test_id: BENCH_ID, lease, extra: &[] };
        Operator::start_with_kubeconfig(options, OPERATOR_NAMESPACE, &kubeconfig)
    };

    // Roll out with one operator, so the DaemonSet and its revision exist upstream before the cold start.
    let started = Instant::now();
    let mut first = start(&format!("{prefix}-1"));
    delete_and_wait(&api, &name).await; // an earlier run's, if it was stopped
    api.create(&PostParams::default(), &serde_json::from_value(config_doc(&name, &ns, selector, 4)).unwrap())
        .await
        .unwrap();
    let rolled = wait_ready(&api, &name, Duration::from_secs(900)).await;
    eprintln!("bench: replayed rollout to {nodes} nodes: {:?}", rolled.map(|t| secs(t - started)));
    if rolled.is_none() {
        eprintln!("bench: the first operator's log:\n{}", std::fs::read_to_string(&first.log).unwrap_or_default());
        panic!("the replayed fleet never became Ready");
    }
    first.terminate();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Cold start: a new process lists everything from the replay, then confirms Ready in its first reconcile.
    replay.reset_counters();
    let me = std::process::id();
    let (bench_cpu, replay_cpu) = (cpu_seconds(me), replay.cpu_seconds());
    let started = Instant::now();
    let operator = start(&format!("{prefix}-2"));
    let pid = operator_pid(&operator);
    let gauge = format!("neuron_dra_operator_nodes{{config=\"{name}\"}} {nodes}");
    let cold = loop {
        if operator.metrics().lines().any(|l| l == gauge)
            && wait_ready(&api, &name, Duration::from_secs(1)).await.is_some()
        {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(900), "no reconcile after start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let cold_cpu = cpu_seconds(pid);
    let (bench_cpu, replay_cpu) = (cpu_seconds(me) - bench_cpu, replay.cpu_seconds() - replay_cpu);
    table.add(
        &scenario,
        "time to first Ready after operator start (cold caches)",
        format!("{:.2} s", secs(cold)),
        "",
        None,
    );
    table.add(&scenario, "operator CPU time, start to first Ready", format!("{cold_cpu:.2} s"), "", None);
    let (per_kind, forwarded) = replay.bytes();
    let lists: u64 = per_kind.iter().map(|(_, list, _)| list).sum();
    let detail: Vec<String> = per_kind.iter().map(|(k, list, _)| format!("{} {}", k.name(), mib(*list))).collect();
    table.add(
        &scenario,
        "bytes served for the initial lists (replayed kinds)",
        format!("{} ({})", mib(lists), detail.join(", ")),
        "",
        None,
    );
    table.add(&scenario, "bytes forwarded to and from the API server, start to Ready", mib(forwarded), "", None);

    // One device taint until the status shows it, three times.
    let mut latencies = Vec::new();
    for k in 0..3 {
        let index = nodes / 2 + k;
        let node = replay.node_name(index);
        let started = Instant::now();
        replay.taint(index, 0, "NoExecute");
        loop {
            let status = api.get(&name).await.unwrap().status.unwrap_or_default();
            if status.unhealthy_devices.iter().any(|d| d.node == node) {
                latencies.push(secs(started.elapsed()));
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "taint never showed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    table.add(
        &scenario,
        "one device taint → status (median of 3)",
        format!("{:.2} s", median(&mut latencies)),
        "< 2 s",
        Some(median(&mut latencies) < 2.0),
    );

    // One claim of the first template allocated until the template's capacity counts it, three times.
    let status = api.get(&name).await.unwrap().status.unwrap_or_default();
    let template = status.profiles.iter().flat_map(|p| &p.capacity).next().map(|c| c.template.clone());
    let template = template.expect("the status counts claims per template");
    let allocated = |status: &neuron_dra_operator::api::NeuronDRAConfigStatus| {
        status.profiles.iter().flat_map(|p| &p.capacity).find(|c| c.template == template).map_or(0, |c| c.allocated)
    };
    let mut latencies = Vec::new();
    for k in 0..3 {
        let started = Instant::now();
        replay.allocate(&ns[0], &format!("claim-{k}"), &name, &template, k, 0);
        loop {
            let status = api.get(&name).await.unwrap().status.unwrap_or_default();
            if allocated(&status) > k as i64 {
                latencies.push(secs(started.elapsed()));
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "the claim never showed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    table.add(
        &scenario,
        "one claim allocated → status (median of 3)",
        format!("{:.2} s", median(&mut latencies)),
        "",
        None,
    );

    let status = api.get(&name).await.unwrap().status.unwrap_or_default();
    let size = serde_json::to_vec(&status).unwrap().len() as f64 / 1024.0;
    table.add(
        &scenario,
        "status size (3 unhealthy devices, 3 claims)",
        format!("{size:.1} KiB"),
        "< 64 KiB",
        Some(size < 64.0),
    );
    table.add(&scenario, "operator peak RSS", format!("{:.0} MiB", peak_rss_mib(pid)), "", None);
    table.add(
        &scenario,
        "replay: CPU start to Ready (its threads; whole bench process)",
        format!("{replay_cpu:.2} s; {bench_cpu:.2} s"),
        "",
        None,
    );
    table.add(
        &scenario,
        "bench process (replay inside) peak RSS, whole run",
        format!("{:.0} MiB", peak_rss_mib(me)),
        "",
        None,
    );

    delete_and_wait(&api, &name).await;
    drop(operator);
    drop(replay);
    // The same fleet as the operator caches it, with one allocated claim per five nodes (one device each, four to a
    // node): the pure computation a reconcile runs per config.
    super::capacity::computation(&scenario, nodes, nodes / 5, 1000.0, table);
}
