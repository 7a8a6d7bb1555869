//! Watch hygiene on the real control plane: writes that change nothing the operator reads do not reconcile. Alone
//! in its test binary, so no other test's fleet changes what is read while it counts reconciles.

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use neuron_dra_operator::api::Phase;
use serde_json::json;
use support::fleet::Fleet;

/// The config the test applies: one 4-device profile over its fleet.
async fn apply_config(f: &Fleet) -> String {
    f.apply_profiles(json!([{"name": "train", "training": {"devices": 4}}]), None).await
}

/// This operator's reconciles of `config` so far, from its metrics.
fn reconciles(f: &Fleet, config: &str) -> u64 {
    let series = format!("neuron_dra_operator_reconciles_total{{config=\"{config}\"}} ");
    let metrics = f.scenario.operator().metrics();
    metrics.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_change_nothing_read_do_not_reconcile() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    let f = Fleet::start("quiet", &[("trn2.48xlarge", 2)]).await;
    let config = apply_config(&f).await;
    f.wait_status("ready", |s| s.phase == Some(Phase::Ready)).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await; // the rollout's last status writes
    let nodes: Api<Node> = Api::all(f.scenario.client.clone());
    let node = f.node("trn2.48xlarge", 0);
    let before = reconciles(&f, &config);
    // What a kubelet writes every few seconds: a heartbeat in the Ready condition, nothing the operator reads.
    for beat in 0..30 {
        let time = format!("2026-01-01T00:00:{beat:02}Z");
        let status =
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": time}]}});
        nodes.patch_status(&node, &PatchParams::default(), &Patch::Strategic(&status)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    let after_heartbeats = reconciles(&f, &config);
    // Each heartbeat reconciling would add about one per 1 s sampling window (12); a stray requeue or two are allowed.
    assert!(after_heartbeats - before <= 2, "heartbeats reconciled {} times", after_heartbeats - before);
    // A label the operator reads (node selection) does reconcile, and the node leaves the config.
    let label = json!({"metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}}});
    nodes.patch(&node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    f.wait_status("the relabelled node left", |s| s.devices.as_ref().is_some_and(|d| d.nodes == 1)).await;
    assert!(reconciles(&f, &config) > after_heartbeats);
    f.clear().await;
}
