//! Outages of the control plane under a running operator: kube-apiserver stopped mid-rollout, etcd stopped, and
//! the operator's requests throttled (429) by API Priority and Fairness. Each test stops parts of the shared control
//! plane, so they run one at a time (cargo runs test binaries one after another, and a lock orders these).

mod support {
    pub mod cluster;
    pub mod scenario;
}

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::{Value, json};
use support::cluster::{OPERATOR_NAMESPACE, OPERATOR_SA, eventually, kubeconfig, kubectl, kubectl_with, repo};
use support::scenario::{Scenario, TIMEOUT};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `hack/controlplane.sh stop-component|start-component NAME`.
fn controlplane(verb: &str, component: &str) {
    let status = Command::new(repo("hack/controlplane.sh")).args([verb, component]).status().unwrap();
    assert!(status.success(), "hack/controlplane.sh {verb} {component}");
}

fn spec(namespaces: &[String]) -> Value {
    json!({
        "templates": {"namespaces": namespaces},
        "profiles": [
            {"name": "train", "training": {"instanceType": "trn2.48xlarge", "devices": 4}},
            {"name": "serve", "disaggregated": {"prefill": {"devices": 8}, "decode": {"devices": 4}}},
        ],
    })
}

/// Every namespace holds exactly `expected`, and the driver namespace exactly one DaemonSet.
async fn nothing_missing_or_doubled(s: &Scenario, namespaces: &[String], expected: &[&str]) {
    for ns in namespaces {
        assert_eq!(s.template_names(ns).await, expected, "{ns}");
    }
    let daemon_sets: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    assert_eq!(daemon_sets.list(&Default::default()).await.unwrap().items.len(), 1);
}

/// The operator is running and holds this test's Lease. One that exited during the outage must have said why in
/// one line (it lost the lease); it is started again, as its Deployment would.
async fn running_and_leading(s: &mut Scenario) {
    let operator = s.operator.as_mut().unwrap();
    if !operator.is_running() {
        let log = operator.log_text();
        assert!(log.contains("lost leadership"), "the operator died without saying why:\n{log}");
        eprintln!("the operator exited during the outage (lost its lease) and is started again");
        s.operator = Some(s.start_operator(&[]));
    }
    let pid = s.operator().pid().unwrap();
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), OPERATOR_NAMESPACE);
    eventually(TIMEOUT, "the running operator holds the lease", || async {
        let holder = leases.get(&s.id).await.ok()?.spec?.holder_identity?;
        holder.ends_with(&format!("-{pid}")).then_some(())
    })
    .await;
}

/// A watch error that reached kube's controller pauses every trigger, and with them every cache, behind the
/// controller's backoff; the operator logs each one it sees as "reconcile did not complete: event queue error". The
/// watches are meant to retry on their own and keep their errors (`controller/watches.rs`).
fn no_watch_error_reached_the_controller(log: &std::path::Path) {
    let log = std::fs::read_to_string(log).unwrap();
    let reached: Vec<&str> = log.lines().filter(|l| l.contains("event queue error")).collect();
    assert!(reached.is_empty(), "watch errors reached the controller:\n{}", reached.join("\n"));
}

/// One outage test at a time: an operator, `count` namespaces, and the config applied to them.
async fn start(prefix: &str, count: usize) -> (tokio::sync::MutexGuard<'static, ()>, Scenario, Vec<String>) {
    let one = ONE_AT_A_TIME.lock().await;
    let s = Scenario::with_operator(prefix).await;
    let mut namespaces = Vec::new();
    for i in 0..count {
        namespaces.push(s.namespace(&format!("t{i}"), &[]).await);
    }
    s.apply(&s.config(&s.id, spec(&namespaces))).await.unwrap();
    (one, s, namespaces)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_stopped_mid_rollout_and_started_again() {
    let (_one, mut s, namespaces) = start("apidown", 30).await;
    // Mid-rollout: the first templates are in, not all of them.
    eventually(TIMEOUT, "the rollout under way", || async {
        (!s.template_names(&namespaces[0]).await.is_empty()).then_some(())
    })
    .await;
    let log = s.operator().log.clone();
    controlplane("stop-component", "kube-apiserver");
    // Longer than the operator's lease (6 s in tests).
    tokio::time::sleep(Duration::from_secs(10)).await;
    controlplane("start-component", "kube-apiserver");

    running_and_leading(&mut s).await;
    // The failed passes during the outage back off (1 s doubling), and so does each watch (0.8 s doubling to 30 s):
    // the first pass after it can be half a minute away.
    let config = s.wait_condition_within(&s.id, "Ready", "True", Duration::from_secs(300)).await;
    assert_eq!(config.status.unwrap().templates.unwrap().count, 3 * namespaces.len() as i64);
    nothing_missing_or_doubled(&s, &namespaces, &["serve-decode", "serve-prefill", "train"]).await;
    no_watch_error_reached_the_controller(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_and_started_again() {
    let (_one, mut s, namespaces) = start("etcddown", 5).await;
    s.wait_ready(&s.id).await;
    let log = s.operator().log.clone();
    controlplane("stop-component", "etcd");
    tokio::time::sleep(Duration::from_secs(10)).await;
    controlplane("start-component", "etcd");

    running_and_leading(&mut s).await;
    // The operator acts on what changed after the outage.
    let mut changed = spec(&namespaces);
    changed["profiles"].as_array_mut().unwrap().push(json!({"name": "extra", "training": {"devices": 1}}));
    s.apply(&s.config(&s.id, changed)).await.unwrap();
    s.wait_ready(&s.id).await;
    nothing_missing_or_doubled(&s, &namespaces, &["extra", "serve-decode", "serve-prefill", "train"]).await;
    no_watch_error_reached_the_controller(&log);
}

/// API Priority and Fairness objects that give the operator's ServiceAccount a priority level of no nominal seats
/// that rejects what it cannot run (the server still runs one request at a time, so concurrent writes are answered
/// 429), except its Lease's, which keep the apiserver's leader-election class as in a real cluster.
fn throttle(name: &str) -> String {
    let subject = json!([{"kind": "ServiceAccount",
        "serviceAccount": {"name": OPERATOR_SA, "namespace": OPERATOR_NAMESPACE}}]);
    let objects = [
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0,
                "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": format!("{name}-leases")},
            "spec": {"priorityLevelConfiguration": {"name": "leader-election"}, "matchingPrecedence": 90,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": subject, "resourceRules": [{"verbs": ["*"],
                    "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]}]}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 91,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": subject,
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "clusterScope": true, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}),
    ];
    objects.iter().map(|o| format!("---\n{o}\n")).collect()
}

/// The API server's own metric `family`, summed over the series whose labels contain `label`; None without any.
fn apiserver_metric(family: &str, label: &str) -> Option<f64> {
    let metrics = kubectl(&["get", "--raw", "/metrics"]);
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The throttle, removed again however the test ends.
struct Throttle(String);

impl Throttle {
    fn apply(name: &str) -> Throttle {
        let objects = throttle(name);
        kubectl_with(&kubeconfig(), &["apply", "-f", "-"], Some(&objects)).unwrap();
        Throttle(objects)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        let _ = kubectl_with(&kubeconfig(), &["delete", "--ignore-not-found", "-f", "-"], Some(&self.0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_requests_are_retried_and_the_config_converges_under_the_throttle() {
    let (_one, mut s, namespaces) = start("throttled", 10).await;
    s.wait_ready(&s.id).await;
    let pid = s.operator().pid();

    let _throttle = Throttle::apply(&s.id);
    // API Priority and Fairness takes the new level in a moment later; its metrics show when.
    let level = format!("priority_level=\"{}\"", s.id);
    eventually(TIMEOUT, "the throttle in effect", || async {
        apiserver_metric("apiserver_flowcontrol_current_limit_seats", &level)
    })
    .await;
    // Twenty new templates, written in parallel: the server answers most of them 429 at first.
    let mut changed = spec(&namespaces);
    let profiles = changed["profiles"].as_array_mut().unwrap();
    profiles.push(json!({"name": "extra", "training": {"devices": 1}}));
    profiles.push(json!({"name": "more", "training": {"devices": 8}}));
    s.apply(&s.config(&s.id, changed)).await.unwrap();
    // Under the throttle a failed pass takes tens of seconds (every write retried against 429s) before backing off:
    // convergence can take a few passes.
    s.wait_condition_within(&s.id, "Ready", "True", Duration::from_secs(300)).await;
    let rejected = apiserver_metric("apiserver_flowcontrol_rejected_requests_total", &level).unwrap_or(0.0);
    assert!(rejected > 0.0, "the server throttled the operator");
    nothing_missing_or_doubled(&s, &namespaces, &["extra", "more", "serve-decode", "serve-prefill", "train"]).await;
    assert!(s.operator.as_mut().unwrap().is_running());
    assert_eq!(s.operator().pid(), pid, "the operator rode the throttle out without a restart");
    running_and_leading(&mut s).await;
}
