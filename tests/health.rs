//! Device health in status, with the simulated fleet on the real control plane.

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use neuron_dra_operator::api::{NeuronDRAConfigStatus, Phase};
use neuron_dra_operator::devtools::simulate::{self, FaultKind, TaintEffect};
use serde_json::json;
use support::cluster::{eventually, kubeconfig, kubectl, kubectl_with, served_version};
use support::fleet::Fleet;
use support::scenario::TIMEOUT;

/// The config every health test applies: one 4-device profile over the test's fleet.
async fn apply_config(f: &Fleet, driver_image: Option<&str>) -> String {
    f.apply_profiles(json!([{"name": "train", "training": {"devices": 4}}]), driver_image).await
}

fn has_issue(status: &NeuronDRAConfigStatus, node: &str, reason: &str) -> bool {
    status.node_issues.iter().any(|i| i.node == node && i.reason == reason)
}

fn condition<'a>(status: &'a NeuronDRAConfigStatus, type_: &str) -> &'a str {
    status.conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str()).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_reports_the_right_totals_and_becomes_ready() {
    let f = Fleet::start(
        "mixed",
        &[("trn2.48xlarge", 2), ("trn1.32xlarge", 2), ("trn1.2xlarge", 1), ("trn2u.48xlarge", 4)],
    )
    .await;
    apply_config(&f, None).await;
    let status = f
        .wait_status("all devices counted and healthy", |s| {
            s.devices
                .as_ref()
                .is_some_and(|d| d.nodes == 9 && d.total == 2 * 16 + 2 * 16 + 1 + 4 * 16 && d.unhealthy == 0)
        })
        .await;
    assert_eq!(status.devices.as_ref().unwrap().healthy, 129);
    let status = f.wait_status("plugin rolled out on 9 nodes", |s| s.phase == Some(Phase::Ready)).await;
    assert_eq!(condition(&status, "DevicesHealthy"), "True");
    let driver = status.driver.unwrap();
    assert_eq!((driver.desired_nodes, driver.ready_nodes), (9, 9));
    let table = kubectl(&["get", "ndc", &f.scenario.id, "--no-headers"]);
    let columns: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(&columns[1..6], ["Ready", "9", "129", "129", "0"], "{table}");
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_shows_up_with_its_reason_and_clears() {
    let f = Fleet::start("faults", &[("trn2.48xlarge", 3), ("trn1.2xlarge", 1)]).await;
    apply_config(&f, None).await;
    f.wait_status("healthy", |s| {
        s.devices.as_ref().is_some_and(|d| d.nodes == 4 && d.unhealthy == 0) && s.node_issues.is_empty()
    })
    .await;
    let n0 = f.node("trn2.48xlarge", 0);
    let n1 = f.node("trn2.48xlarge", 1);
    let n2 = f.node("trn2.48xlarge", 2);
    let small = f.node("trn1.2xlarge", 0);

    f.fault(FaultKind::Taint, &n0, TaintEffect::NoExecute).await;
    let status = f
        .wait_status("tainted device", |s| {
            s.unhealthy_devices.iter().any(|d| d.node == n0 && d.device == "neuron-device-0")
        })
        .await;
    let entry = status.unhealthy_devices.iter().find(|d| d.node == n0).unwrap();
    assert_eq!((entry.reason.as_str(), entry.effect.as_deref()), (simulate::FAULT_TAINT_KEY, Some("NoExecute")));
    assert_eq!(status.devices.as_ref().unwrap().unhealthy, 1);
    assert_eq!(condition(&status, "DevicesHealthy"), "False");
    assert_eq!(status.phase, Some(Phase::Degraded));
    eventually(TIMEOUT, "DeviceUnhealthy event", || async {
        let events =
            kubectl(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={}", f.scenario.id)]);
        events.contains("DeviceUnhealthy").then_some(())
    })
    .await;

    f.fault(FaultKind::DropDevice, &n1, TaintEffect::NoSchedule).await;
    f.wait_status("missing device", |s| {
        s.unhealthy_devices.iter().any(|d| d.node == n1 && d.reason == "Missing" && d.device == "deviceId=0")
    })
    .await;
    f.fault(FaultKind::NoSlice, &n2, TaintEffect::NoSchedule).await;
    f.wait_status("no slice", |s| has_issue(s, &n2, "NoResourceSlice")).await;
    f.fault(FaultKind::LegacyPlugin, &small, TaintEffect::NoSchedule).await;
    f.wait_status("legacy plugin", |s| has_issue(s, &small, "LegacyDevicePlugin")).await;
    f.fault(FaultKind::NeuronHealth, &n1, TaintEffect::NoSchedule).await;
    f.wait_status("NeuronHealth", |s| has_issue(s, &n1, "NeuronHealth")).await;
    f.fault(FaultKind::OldKubelet, &n0, TaintEffect::NoSchedule).await;
    f.wait_status("kubelet regression", |s| has_issue(s, &n0, "KubeletDRARegression")).await;
    f.fault(FaultKind::PluginNotReady, &n2, TaintEffect::NoSchedule).await;
    let status = f.wait_status("plugin not ready", |s| has_issue(s, &n2, "PluginNotReady")).await;
    // 1 tainted + 1 missing + 16 on the node without a slice.
    assert_eq!(status.devices.as_ref().unwrap().unhealthy, 18);

    for node in [&n0, &n1, &n2, &small] {
        f.fault(FaultKind::Clear, node, TaintEffect::NoSchedule).await;
    }
    let status = f
        .wait_status("everything recovered", |s| {
            s.node_issues.is_empty()
                && s.unhealthy_devices.is_empty()
                && s.devices.as_ref().is_some_and(|d| d.unhealthy == 0)
        })
        .await;
    assert_eq!(condition(&status, "DevicesHealthy"), "True");
    eventually(TIMEOUT, "DeviceRecovered event", || async {
        let events =
            kubectl(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={}", f.scenario.id)]);
        events.contains("DeviceRecovered").then_some(())
    })
    .await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_taint_rules_count_as_well_as_slice_taints() {
    let f = Fleet::start("rules", &[("trn2.48xlarge", 1)]).await;
    apply_config(&f, None).await;
    f.wait_status("healthy", |s| s.devices.as_ref().is_some_and(|d| d.nodes == 1 && d.unhealthy == 0)).await;
    let node = f.node("trn2.48xlarge", 0);
    // In whichever version the server serves (tests/versions.rs checks which that is).
    let name = format!("{}-maintenance", f.scenario.id);
    let rule = json!({
        "apiVersion": served_version("devicetaintrules").unwrap(), "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "neuron.aws.com", "pool": node, "device": "neuron-device-2"},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    });
    kubectl_with(&kubeconfig(), &["create", "-f", "-"], Some(&rule.to_string())).unwrap();
    let status = f
        .wait_status("rule taint", |s| {
            s.unhealthy_devices.iter().any(|d| d.device == "neuron-device-2" && d.reason == "example.com/maintenance")
        })
        .await;
    assert_eq!(status.devices.unwrap().unhealthy, 1);
    kubectl(&["delete", "devicetaintrule", &name]);
    f.wait_status("rule removed", |s| s.unhealthy_devices.is_empty()).await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_driver_version_on_the_nodes_is_reported() {
    let f = Fleet::start("version", &[("trn2.48xlarge", 1)]).await;
    apply_config(&f, Some("public.ecr.aws/neuron/neuron-dra-driver:1.2.0")).await;
    let node = f.node("trn2.48xlarge", 0);
    let status = f.wait_status("version mismatch", |s| has_issue(s, &node, "DriverVersionMismatch")).await;
    let issue = status.node_issues.iter().find(|i| i.reason == "DriverVersionMismatch").unwrap();
    assert!(issue.message.contains("1.1.0") && issue.message.contains("1.2.0"), "{}", issue.message);
    f.clear().await;
}

/// Hardening #26 item 2: plugin pods are told by their DaemonSet (owner uid) in the driver namespace, not by
/// labels anyone who may create a pod can copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_alike_pod_does_not_stand_in_for_the_plugin() {
    let f = Fleet::start("spoof", &[("trn2.48xlarge", 2)]).await;
    let (n0, n1) = (f.node("trn2.48xlarge", 0), f.node("trn2.48xlarge", 1));
    // The plugin does not tolerate this taint: its DaemonSet places no pod on n1.
    kubectl(&["taint", "node", &n1, "neurondra.io/test-blocked=yes:NoSchedule"]);
    let config = apply_config(&f, None).await;
    f.wait_status("no plugin on n1", |s| has_issue(s, &n1, "PluginNotReady") && !has_issue(s, &n0, "PluginNotReady"))
        .await;
    // Pods with the plugin's labels and a pin to n1, by someone else: in a tenant namespace, and one in the driver
    // namespace that no DaemonSet controls. The stand-in kubelet reports both Ready.
    let tenant = f.scenario.namespace("tenant", &[]).await;
    for namespace in [tenant.as_str(), &f.scenario.driver_namespace()] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "look-alike", "namespace": namespace, "labels": {
                "app.kubernetes.io/managed-by": "neuron-dra-operator", "neurondra.io/config": config}},
            "spec": {"nodeName": n1, "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "plugin", "image": "registry.k8s.io/pause:3.10"}]}});
        kubectl_with(&kubeconfig(), &["create", "-f", "-"], Some(&pod.to_string())).unwrap();
    }
    eventually(TIMEOUT, "look-alike pods Ready", || async {
        let ready = kubectl(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "metadata.name=look-alike",
            "-o",
            "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        (ready.trim() == "True True").then_some(())
    })
    .await;
    // A later change the operator must report, so the status below was computed after the pods were Ready.
    f.fault(FaultKind::NeuronHealth, &n0, TaintEffect::NoSchedule).await;
    let status = f.wait_status("NeuronHealth on n0", |s| has_issue(s, &n0, "NeuronHealth")).await;
    assert!(
        has_issue(&status, &n1, "PluginNotReady"),
        "a look-alike pod hid n1's missing plugin: {:?}",
        status.node_issues
    );
    f.clear().await;
}
