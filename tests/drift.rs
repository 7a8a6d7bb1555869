//! What counts as drift, on the real API server: quantities it stores in canonical form are not drift (no write per
//! reconcile), and a field the operator stops sending leaves the object (server-side apply drops it, if applied).

mod support {
    pub mod cluster;
    pub mod scenario;
}

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use support::cluster::eventually;
use support::scenario::{Scenario, TIMEOUT};

fn spec(namespace: &str, driver: Value) -> Value {
    json!({
        "templates": {"namespaces": [namespace]},
        "profiles": [{"name": "train", "training": {"instanceType": "trn2.48xlarge", "devices": 4}}],
        "driver": driver,
    })
}

async fn daemon_set(s: &Scenario) -> DaemonSet {
    let api: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    api.get(&format!("neuron-dra-{}", s.id)).await.unwrap()
}

/// This operator's reconciles of the test's config so far, from its metrics.
fn reconciles(s: &Scenario) -> u64 {
    let series = format!("neuron_dra_operator_reconciles_total{{config=\"{}\"}} ", s.id);
    let metrics = s.operator().metrics();
    metrics.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quantities_the_server_rewrites_are_not_drift() {
    let s = Scenario::with_operator("quantity").await;
    let ns = s.namespace("a", &[]).await;
    let driver = json!({"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}});
    s.apply(&s.config(&s.id, spec(&ns, driver))).await.unwrap();
    s.wait_ready(&s.id).await;
    let ds = daemon_set(&s).await;
    let requests = ds.spec.unwrap().template.spec.unwrap().containers[0].resources.clone().unwrap().requests.unwrap();
    assert_eq!((requests["cpu"].0.as_str(), requests["memory"].0.as_str()), ("500m", "1Gi"), "stored canonically");
    tokio::time::sleep(Duration::from_secs(3)).await; // the last status writes of the install

    // Reconciles that change nothing the operator reads or writes: a new annotation on the config each time.
    let (writes, before) = (s.operator().writes(), reconciles(&s));
    for poke in 0..6 {
        let patch = json!({"metadata": {"annotations": {"test.neurondra.io/poke": poke.to_string()}}});
        s.configs().patch(&s.id, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    eventually(TIMEOUT, "the pokes reconciled", || async { (reconciles(&s) >= before + 6).then_some(()) }).await;
    assert_eq!(s.operator().writes(), writes, "a reconcile that changes nothing writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_no_longer_sent_leaves_the_daemon_set() {
    let s = Scenario::with_operator("removed").await;
    let ns = s.namespace("a", &[]).await;
    let driver = json!({"priorityClassName": "system-node-critical",
        "resources": {"requests": {"cpu": "10m"}, "limits": {"cpu": "1", "memory": "256Mi"}}});
    s.apply(&s.config(&s.id, spec(&ns, driver))).await.unwrap();
    s.wait_ready(&s.id).await;
    let pod = daemon_set(&s).await.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"));

    s.apply(&s.config(&s.id, spec(&ns, json!({"resources": {"requests": {"cpu": "10m"}}})))).await.unwrap();
    let pod = eventually(TIMEOUT, "priorityClassName and limits gone", || async {
        let pod = daemon_set(&s).await.spec?.template.spec?;
        (pod.priority_class_name.is_none()).then_some(pod)
    })
    .await;
    let resources = pod.containers[0].resources.clone().unwrap();
    assert_eq!(resources.limits, None, "the limits we no longer send are gone too");
}
