//! Remediation on the real control plane: a node that reports a Neuron hardware problem gets a DeviceTaintRule
//! over its devices, which the real kube-scheduler and device-taint-eviction controller act on; the budget holds;
//! the rule goes when the condition clears. `make test` runs this file on both ends of the supported range
//! (`effect: None` exists only from 1.35).

mod support {
    pub mod allocation;
    pub mod attack;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use neuron_dra_operator::api::{NeuronDRAConfigStatus, RemediationStatus};
use neuron_dra_operator::cluster::taint_rule::{self, TaintRuleView};
use neuron_dra_operator::devtools::simulate::{FaultKind, TaintEffect};
use serde_json::{Value, json};
use support::allocation::{create_pod, pinned, wait_scheduled, wait_unschedulable, workload_pod};
use support::cluster::{eventually, kubectl};
use support::fleet::Fleet;
use support::scenario::TIMEOUT;

const TRN2: &str = "trn2.48xlarge";

/// Applies a config over the fleet with a one-device template in a namespace of the test and `remediation`
/// (None: no policy); returns the namespace once the template is there.
async fn apply(f: &Fleet, remediation: Option<Value>) -> String {
    let s = &f.scenario;
    let namespace = s.namespace("work", &[]).await;
    let mut spec = json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]},
        "profiles": [{"name": "one", "training": {"devices": 1}}]});
    if let Some(mut policy) = remediation {
        // No hysteresis here (the unit tests of `logic::remediation` cover `problemFor` and `clearFor`): the faults
        // the tests inject are acted on, and their clearing released, at once.
        for field in ["problemFor", "clearFor"] {
            policy.as_object_mut().unwrap().entry(field).or_insert(json!("0s"));
        }
        spec["remediation"] = policy;
    }
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&namespace, &["one"]).await;
    namespace
}

/// The config's DeviceTaintRules as (node, effect, value), sorted by node.
async fn rules(f: &Fleet) -> Vec<(String, String, Option<String>)> {
    let client = &f.scenario.client;
    let resource = taint_rule::served(client).await.expect("the control plane serves DeviceTaintRules");
    let api: Api<TaintRuleView> = Api::all_with(client.clone(), &resource);
    let ours = ListParams::default().labels(&format!("neurondra.io/config={}", f.scenario.id));
    let mut found: Vec<(String, String, Option<String>)> = api
        .list(&ours)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| {
            let pool = r.spec.device_selector.and_then(|s| s.pool).unwrap_or_default();
            (pool, r.spec.taint.effect, r.spec.taint.value)
        })
        .collect();
    found.sort();
    found
}

async fn wait_rules(f: &Fleet, what: &str, expected: &[(&str, &str)]) {
    eventually(TIMEOUT, what, || async {
        let nodes: Vec<(String, String)> = rules(f).await.into_iter().map(|(n, e, _)| (n, e)).collect();
        (nodes.iter().map(|(n, e)| (n.as_str(), e.as_str())).collect::<Vec<_>>() == expected).then_some(())
    })
    .await
}

fn remediation(status: &NeuronDRAConfigStatus) -> Option<&RemediationStatus> {
    status.remediation.as_ref()
}

fn listed(nodes: &[neuron_dra_operator::api::RemediatedNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.node.as_str()).collect()
}

/// Waits for an event on the config with this reason that names `node`.
async fn wait_event(f: &Fleet, reason: &str, node: &str) {
    let selector = format!("involvedObject.name={}", f.scenario.id);
    eventually(TIMEOUT, &format!("a {reason} event naming {node}"), || async {
        let events = kubectl(&["get", "events", "-A", "--field-selector", &selector]);
        events.lines().any(|l| l.contains(reason) && l.contains(node)).then_some(())
    })
    .await
}

async fn pod_exists(f: &Fleet, namespace: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(f.scenario.client.clone(), namespace);
    pods.get_opt(name).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_schedule_keeps_new_claims_off_a_failing_node_and_clearing_the_condition_releases_it() {
    let f = Fleet::start("remedy-nosched", &[(TRN2, 2)]).await;
    let client = &f.scenario.client;
    let namespace = apply(&f, Some(json!({"effect": "NoSchedule", "maxNodes": 1}))).await;
    let (sick, well) = (f.node(TRN2, 0), f.node(TRN2, 1));
    create_pod(client, &namespace, &pinned(workload_pod("holder", "one", &f.pod_affinity()), &sick)).await;
    wait_scheduled(client, &namespace, "holder").await;

    f.fault(FaultKind::NeuronHealth, &sick, TaintEffect::NoSchedule).await;
    let status = f
        .wait_status("the failing node remediated", |s| {
            remediation(s).is_some_and(|r| r.remediated == 1 && listed(&r.remediated_nodes) == [sick.as_str()])
        })
        .await;
    let entry = &remediation(&status).unwrap().remediated_nodes[0];
    assert_eq!(
        (entry.condition.as_str(), entry.reason.as_str()),
        ("NeuronHealth", "NeuronHasError_NC_UNCORRECTABLE_ERROR")
    );
    assert_eq!(entry.rule.as_deref(), Some(format!("{}.{sick}", f.scenario.id).as_str()));
    assert_eq!(
        rules(&f).await,
        [(sick.clone(), "NoSchedule".to_string(), Some("NeuronHasError_NC_UNCORRECTABLE_ERROR".to_string()))]
    );
    wait_event(&f, "Remediated", &sick).await;
    // The operator's own watch has seen the rule taint the devices: the scheduler's watch of DeviceTaintRules gets
    // the same event (a pod created right after the rule's write could be placed before the scheduler saw it; seen
    // once in CI under load).
    let status =
        f.wait_status("the devices counted unhealthy", |s| s.devices.as_ref().is_some_and(|d| d.unhealthy == 16)).await;

    // No new claim gets the node's devices; the other node still serves.
    create_pod(client, &namespace, &pinned(workload_pod("blocked", "one", &f.pod_affinity()), &sick)).await;
    wait_unschedulable(client, &namespace, "blocked").await;
    create_pod(client, &namespace, &pinned(workload_pod("elsewhere", "one", &f.pod_affinity()), &well)).await;
    wait_scheduled(client, &namespace, "elsewhere").await;
    assert!(status.unhealthy_devices.iter().all(|d| d.node == sick && d.reason == "neurondra.io/hardware-problem"));
    assert!(pod_exists(&f, &namespace, "holder").await, "NoSchedule evicts nothing");

    f.fault(FaultKind::Clear, &sick, TaintEffect::NoSchedule).await;
    wait_rules(&f, "the rule removed", &[]).await;
    f.wait_status("nothing remediated", |s| remediation(s).is_some_and(|r| r.failing_nodes == 0 && r.remediated == 0))
        .await;
    wait_event(&f, "Released", &sick).await;
    let scheduled = wait_scheduled(client, &namespace, "blocked").await;
    assert_eq!(scheduled.spec.unwrap().node_name.as_deref(), Some(sick.as_str()), "the node serves again");
    assert!(pod_exists(&f, &namespace, "holder").await);
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_execute_evicts_the_pod_holding_a_device_and_turning_remediation_off_releases_the_node() {
    let f = Fleet::start("remedy-noexec", &[(TRN2, 2)]).await;
    let client = &f.scenario.client;
    let namespace = apply(&f, Some(json!({"effect": "NoExecute"}))).await;
    let (sick, well) = (f.node(TRN2, 0), f.node(TRN2, 1));
    for (pod, node) in [("victim", &sick), ("bystander", &well)] {
        create_pod(client, &namespace, &pinned(workload_pod(pod, "one", &f.pod_affinity()), node)).await;
        wait_scheduled(client, &namespace, pod).await;
    }

    f.fault(FaultKind::AcceleratedHardwareNotReady, &sick, TaintEffect::NoSchedule).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    eventually(TIMEOUT, "the victim evicted", || async { pods.get_opt("victim").await.ok()?.is_none().then_some(()) })
        .await;
    assert!(pod_exists(&f, &namespace, "bystander").await, "the pod on the healthy node stays");
    assert_eq!(rules(&f).await[0].0, sick);
    assert_eq!(rules(&f).await[0].1, "NoExecute");
    let status = f.wait_status("remediated", |s| remediation(s).is_some_and(|r| r.remediated == 1)).await;
    let r = remediation(&status).unwrap();
    assert_eq!((r.effect.as_str(), r.max_nodes), ("NoExecute", 1), "10% of 2 nodes, rounded up");
    let entry = &r.remediated_nodes[0];
    assert_eq!(
        (entry.condition.as_str(), entry.reason.as_str()),
        ("AcceleratedHardwareReady", "NeuronHBMUncorrectableError")
    );
    assert!(status.node_issues.iter().any(|i| i.node == sick && i.reason == "AcceleratedHardwareNotReady"));

    // Off again: the rule goes though the node still fails.
    apply(&f, None).await;
    wait_rules(&f, "the rule removed with the policy", &[]).await;
    let status = f.wait_status("no remediation status", |s| s.remediation.is_none()).await;
    assert!(status.node_issues.iter().any(|i| i.node == sick), "the problem is still reported");
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_holds_when_more_nodes_fail_than_it_allows() {
    let f = Fleet::start("remedy-budget", &[(TRN2, 4)]).await;
    apply(&f, Some(json!({"maxNodes": "25%"}))).await;
    let n: Vec<String> = (0..4).map(|i| f.node(TRN2, i)).collect();
    // Problems in the order n0, n2, n1, a second apart: the oldest first, not the first by name.
    f.fault(FaultKind::NeuronHealth, &n[0], TaintEffect::NoSchedule).await;
    wait_rules(&f, "the first failing node remediated", &[(&n[0], "NoSchedule")]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    f.fault(FaultKind::AcceleratedHardwareNotReady, &n[2], TaintEffect::NoSchedule).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    f.fault(FaultKind::NeuronHealth, &n[1], TaintEffect::NoSchedule).await;
    let status =
        f.wait_status("one remediated, two held back", |s| remediation(s).is_some_and(|r| r.failing_nodes == 3)).await;
    let r = remediation(&status).unwrap();
    assert_eq!((r.max_nodes, r.remediated, r.held_back), (1, 1, 2));
    assert_eq!(listed(&r.remediated_nodes), [n[0].as_str()]);
    assert_eq!(listed(&r.held_back_nodes), [n[2].as_str(), n[1].as_str()], "next in line first");
    assert!(r.held_back_nodes.iter().all(|h| h.rule.is_none()));
    wait_rules(&f, "still one rule", &[(&n[0], "NoSchedule")]).await;
    wait_event(&f, "RemediationHeldBack", &n[2]).await;
    let metrics = f.scenario.operator().metrics();
    for (gauge, value) in
        [("remediated_nodes", 1), ("remediation_held_back_nodes", 2), ("remediation_failing_nodes", 3)]
    {
        let line = format!("neuron_dra_operator_{gauge}{{config=\"{}\"}} {value}", f.scenario.id);
        assert!(metrics.lines().any(|l| l == line), "no {line} in\n{metrics}");
    }

    // Settled: nothing is rewritten.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = f.scenario.operator().writes();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(f.scenario.operator().writes(), before, "writes while settled:\n{}", f.scenario.operator().metrics());

    // The first node recovers: the budget passes to the next in line.
    f.fault(FaultKind::Clear, &n[0], TaintEffect::NoSchedule).await;
    wait_rules(&f, "the budget passed on", &[(&n[2], "NoSchedule")]).await;
    let status = f
        .wait_status("n2 remediated, n1 held back", |s| {
            remediation(s).is_some_and(|r| listed(&r.remediated_nodes) == [n[2].as_str()])
        })
        .await;
    assert_eq!(listed(&remediation(&status).unwrap().held_back_nodes), [n[1].as_str()]);

    // The config goes, and its rules with it.
    f.scenario.delete_config(&f.scenario.id).await;
    wait_rules(&f, "the rules deleted with the config", &[]).await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effect_none_previews_where_the_server_supports_it_and_is_refused_elsewhere() {
    let f = Fleet::start("remedy-none", &[(TRN2, 1)]).await;
    let client = &f.scenario.client;
    let version = client.apiserver_version().await.unwrap();
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap();
    let s = &f.scenario;
    let namespace = s.namespace("work", &[]).await;
    let spec = json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]},
        "profiles": [{"name": "one", "training": {"devices": 1}}], "remediation": {"effect": "None"}});
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let sick = f.node(TRN2, 0);

    if minor < 35 {
        let status = f
            .wait_status("refused", |s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "ConfigValid" && c.status == "False" && c.reason == "Unsupported")
            })
            .await;
        let message = &status.conditions.iter().find(|c| c.type_ == "ConfigValid").unwrap().message;
        assert!(message.starts_with("spec.remediation.effect: ") && !message.contains('\n'), "{message}");
        // Nothing is half-applied.
        f.fault(FaultKind::NeuronHealth, &sick, TaintEffect::NoSchedule).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(rules(&f).await.is_empty());
        assert!(s.template_names(&namespace).await.is_empty());
        f.clear().await;
        return;
    }

    s.wait_templates(&namespace, &["one"]).await;
    f.fault(FaultKind::NeuronHealth, &sick, TaintEffect::NoSchedule).await;
    wait_rules(&f, "a preview rule", &[(&sick, "None")]).await;
    let status = f
        .wait_status("listed as informational", |s| {
            remediation(s).is_some_and(|r| r.remediated == 1) && s.informational_taints.iter().any(|d| d.node == sick)
        })
        .await;
    assert_eq!(status.devices.as_ref().unwrap().unhealthy, 0, "a preview takes no device away");
    assert!(status.informational_taints.iter().all(|d| d.reason == "neurondra.io/hardware-problem"));
    create_pod(client, &namespace, &pinned(workload_pod("still", "one", &f.pod_affinity()), &sick)).await;
    let pod = wait_scheduled(client, &namespace, "still").await;
    assert_eq!(pod.name_any(), "still");
    f.clear().await;
}

/// #50.5: a plugin that writes an old `lastTransitionTime` into its node's NeuronHealth (with the token its pod was
/// given, which its fence lets set that condition) does not move its node ahead in the budget's queue: the budget
/// goes by when the operator observed each problem, kept in the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_problem_time_does_not_move_a_node_ahead_in_the_budget() {
    let f = Fleet::start("remedy-forged", &[(TRN2, 4)]).await;
    apply(&f, Some(json!({"maxNodes": "25%"}))).await;
    let n: Vec<String> = (0..4).map(|i| f.node(TRN2, i)).collect();
    f.fault(FaultKind::NeuronHealth, &n[0], TaintEffect::NoSchedule).await;
    wait_rules(&f, "the first failing node remediated", &[(&n[0], "NoSchedule")]).await;
    f.fault(FaultKind::NeuronHealth, &n[2], TaintEffect::NoSchedule).await;
    f.wait_status("n2 held back", |s| remediation(s).is_some_and(|r| listed(&r.held_back_nodes) == [n[2].as_str()]))
        .await;

    // A second later (the status's times are in seconds), n1's plugin, with its pod-bound token, reports a problem
    // that began in 2000.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let s = &f.scenario;
    let (namespace, account) = (s.driver_namespace(), format!("neuron-dra-{}", s.id));
    let on_n1 = format!("jsonpath={{range .items[?(@.spec.nodeName==\"{}\")]}}{{.metadata.name}}{{end}}", n[1]);
    let pod = eventually(TIMEOUT, "the plugin's pod on n1", || async {
        let name = kubectl(&["get", "pods", "-n", &namespace, "-o", &on_n1]);
        (!name.trim().is_empty()).then(|| name.trim().to_string())
    })
    .await;
    let bound = ["--bound-object-kind", "Pod", "--bound-object-name", pod.as_str()];
    let token = support::cluster::token(&namespace, &account, &bound);
    let plugin = support::attack::client_with(&token, &format!("{}-n1-plugin", s.id)).await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n[1]}});
    let forged = json!({"status": {"conditions": [{"type": "NeuronHealth", "status": "True",
        "reason": "NeuronHasError_DMA_ERROR", "lastHeartbeatTime": "2000-01-01T00:00:00Z",
        "lastTransitionTime": "2000-01-01T00:00:00Z"}]}});
    support::attack::assert_accepted(
        "the plugin's forged report",
        support::attack::patch_status(&plugin, &node, &forged).await,
    );

    let status = f.wait_status("n1 held back too", |s| remediation(s).is_some_and(|r| r.held_back == 2)).await;
    let held = &remediation(&status).unwrap().held_back_nodes;
    assert_eq!(listed(held), [n[2].as_str(), n[1].as_str()], "observed first, whatever the node says");
    let since = held[1].since.as_ref().map(|t| t.0.as_second());
    assert_eq!(since, Some(946_684_800), "the node's own time is reported as it says");
    assert!(held[1].observed > held[0].observed, "{held:?}");

    // The remediated node recovers: the budget passes to n2, observed first.
    f.fault(FaultKind::Clear, &n[0], TaintEffect::NoSchedule).await;
    wait_rules(&f, "the budget passed to n2", &[(&n[2], "NoSchedule")]).await;
    f.scenario.delete_config(&f.scenario.id).await;
    wait_rules(&f, "the rules deleted with the config", &[]).await;
    f.clear().await;
}
