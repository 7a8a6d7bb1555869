//! What DRA gained between Kubernetes 1.34 and 1.37, on whichever version the local control plane runs (`make test`
//! runs this file on both ends of the supported range): DeviceTaintRules read in the version the server serves, with
//! their status where it has one; informational (`effect: None`) taints; extended-resource mapping, served by the
//! real scheduler where the server has it and refused where it does not.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use neuron_dra_operator::api::NeuronDRAConfigStatus;
use serde_json::json;
use support::allocation::{create_pod, wait_scheduled};
use support::cluster::{eventually, kubeconfig, kubectl, kubectl_with, served_version};
use support::fleet::Fleet;
use support::scenario::TIMEOUT;

/// The API server's minor version.
async fn server_minor(f: &Fleet) -> u32 {
    let version = f.scenario.client.apiserver_version().await.unwrap();
    version.minor.trim_end_matches('+').parse().unwrap()
}

fn condition<'a>(status: &'a NeuronDRAConfigStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Applies a DeviceTaintRule on one device in the served version; returns its name.
fn taint_rule(f: &Fleet, api_version: &str, suffix: &str, node: &str, device: &str, effect: &str) -> String {
    let name = format!("{}-{suffix}", f.scenario.id);
    let rule = json!({
        "apiVersion": api_version, "kind": "DeviceTaintRule", "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "neuron.aws.com", "pool": node, "device": device},
            "taint": {"key": format!("example.com/{suffix}"), "effect": effect},
        },
    });
    kubectl_with(&kubeconfig(), &["apply", "-f", "-"], Some(&rule.to_string())).unwrap();
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_taint_rules_are_read_in_the_served_version() {
    let f = Fleet::start("rulever", &[("trn2.48xlarge", 1)]).await;
    let minor = server_minor(&f).await;
    let api_version = served_version("devicetaintrules").expect("the control plane serves DeviceTaintRules");
    let expected = if minor >= 37 { "resource.k8s.io/v1" } else { "resource.k8s.io/v1alpha3" };
    assert_eq!(api_version, expected, "server 1.{minor}");
    f.apply_profiles(json!([{"name": "train", "training": {"devices": 4}}]), None).await;
    f.wait_status("healthy", |s| s.devices.as_ref().is_some_and(|d| d.nodes == 1 && d.unhealthy == 0)).await;
    let node = f.node("trn2.48xlarge", 0);

    let rule = taint_rule(&f, &api_version, "maintenance", &node, "neuron-device-2", "NoSchedule");
    let status = f
        .wait_status("the rule counted, with its eviction status where the server has one", |s| {
            let listed = s.taint_rules.iter().find(|r| r.name == rule);
            s.unhealthy_devices.iter().any(|d| d.device == "neuron-device-2" && d.reason == "example.com/maintenance")
                // From 1.35 the device-taint-eviction controller reports on every rule (False: nothing to evict).
                && listed.is_some_and(|r| r.devices == 1 && (minor < 35 || r.evicting == Some(false)))
        })
        .await;
    assert_eq!(status.devices.as_ref().unwrap().unhealthy, 1);
    if minor < 35 {
        assert_eq!(status.taint_rules[0].evicting, None, "1.{minor} rules have no status");
    }
    kubectl(&["delete", "devicetaintrule", &rule]);
    f.wait_status("rule removed", |s| s.unhealthy_devices.is_empty() && s.taint_rules.is_empty()).await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informational_taint_is_listed_and_the_device_stays_healthy() {
    let f = Fleet::start("infotaint", &[("trn2.48xlarge", 1)]).await;
    let minor = server_minor(&f).await;
    if minor < 35 {
        // `effect: None` arrived in 1.35; 1.34 refuses it, which is the server's business, not the operator's.
        eprintln!("skipped: Kubernetes 1.{minor} has no informational taints");
        f.clear().await;
        return;
    }
    let api_version = served_version("devicetaintrules").unwrap();
    f.apply_profiles(json!([{"name": "train", "training": {"devices": 4}}]), None).await;
    f.wait_status("healthy", |s| s.devices.as_ref().is_some_and(|d| d.nodes == 1 && d.unhealthy == 0)).await;
    let node = f.node("trn2.48xlarge", 0);
    let rule = taint_rule(&f, &api_version, "preview", &node, "neuron-device-5", "None");
    let status = f
        .wait_status("listed as informational", |s| {
            s.informational_taints.iter().any(|d| d.device == "neuron-device-5" && d.reason == "example.com/preview")
        })
        .await;
    let devices = status.devices.as_ref().unwrap();
    assert_eq!((devices.unhealthy, devices.healthy), (0, 16), "an informational taint is not a sick device");
    assert!(status.unhealthy_devices.is_empty());
    assert_eq!(status.informational_taints[0].effect.as_deref(), Some("None"));
    assert!(status.taint_rules.iter().any(|r| r.name == rule && r.effect == "None"));
    assert_eq!(condition(&status, "DevicesHealthy").map(|c| c.status.as_str()), Some("True"));
    kubectl(&["delete", "devicetaintrule", &rule]);
    f.wait_status("rule removed", |s| s.informational_taints.is_empty()).await;
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_resource_is_served_by_dra_or_refused() {
    let f = Fleet::start("extres", &[("trn2.48xlarge", 1)]).await;
    let minor = server_minor(&f).await;
    let s = &f.scenario;
    // A class of this test's own, so no other test's pods are served from it.
    let class = format!("{}.neuron.aws.com", s.id);
    let spec = json!({
        "nodeSelector": f.node_selector(), "deviceClassName": class,
        "extendedResourceName": "aws.amazon.com/neuron",
        "profiles": [{"name": "train", "training": {"devices": 4}}],
    });
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let classes: Api<DeviceClass> = Api::all(s.client.clone());

    if minor < 36 {
        let status = f
            .wait_status("refused", |s| {
                condition(s, "ConfigValid").is_some_and(|c| c.status == "False" && c.reason == "Unsupported")
            })
            .await;
        let message = &condition(&status, "ConfigValid").unwrap().message;
        assert!(message.starts_with("spec.extendedResourceName: ") && !message.contains('\n'), "{message}");
        // Nothing is half-applied: no class, no plugin.
        assert!(classes.get_opt(&class).await.unwrap().is_none());
        let daemon_sets: Api<DaemonSet> = Api::all(s.client.clone());
        let ours = ListParams::default().labels(&format!("neurondra.io/config={}", s.id));
        assert!(daemon_sets.list(&ours).await.unwrap().items.is_empty());
        f.clear().await;
        return;
    }

    let extended = eventually(TIMEOUT, "the extended-resource DeviceClass", || async {
        classes.get_opt(&format!("devices.{class}")).await.ok().flatten()
    })
    .await;
    assert_eq!(extended.spec.extended_resource_name.as_deref(), Some("aws.amazon.com/neuron"));
    f.wait_status("ready", |s| condition(s, "ConfigValid").is_some_and(|c| c.status == "True")).await;

    // A pod written for the legacy device plugin, unchanged.
    let namespace = s.namespace("legacy", &[]).await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "legacy"},
        "spec": {
            "affinity": f.pod_affinity(), "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.example/trainer:1",
                "resources": {"limits": {"aws.amazon.com/neuron": "4"}}}],
        },
    });
    create_pod(&s.client, &namespace, &pod).await;
    let scheduled: Pod = wait_scheduled(&s.client, &namespace, "legacy").await;
    let node = scheduled.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert_eq!(node, f.node("trn2.48xlarge", 0));
    let claim_name = eventually(TIMEOUT, "the scheduler's claim for the extended resource", || async {
        let pods: Api<Pod> = Api::namespaced(s.client.clone(), &namespace);
        let pod = serde_json::to_value(pods.get("legacy").await.ok()?).ok()?;
        pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"].as_str().map(str::to_string)
    })
    .await;
    let claims: Api<ResourceClaim> = Api::namespaced(s.client.clone(), &namespace);
    let claim = claims.get(&claim_name).await.unwrap();
    let results = claim.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap_or_default();
    assert_eq!(results.len(), 4, "four Neuron devices for aws.amazon.com/neuron: 4");
    for result in &results {
        assert_eq!((result.driver.as_str(), result.pool.as_str()), ("neuron.aws.com", node.as_str()));
        assert!(result.device.starts_with("neuron-device-"), "a device, not a node entry: {}", result.device);
    }
    f.delete_pod(&namespace, "legacy").await;
    f.clear().await;
}

/// Two configs map one DeviceClass to different extended resources: the older keeps `devices.<class>`, the newer
/// reports the conflict and leaves the class alone (before, both force-applied their own name on every pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_configs_with_one_class_and_different_extended_resources_do_not_fight() {
    let f = Fleet::start("extconflict", &[]).await;
    let minor = server_minor(&f).await;
    let s = &f.scenario;
    let class = format!("{}.neuron.aws.com", s.id);
    let spec = |resource: &str| {
        json!({
            // No nodeSelector: the scenario's own, which no node matches (the two must overlap in nothing else).
            "deviceClassName": class, "extendedResourceName": resource,
            "profiles": [{"name": "train", "training": {"devices": 4}}],
        })
    };
    let (old, new) = (format!("{}-old", s.id), format!("{}-new", s.id));
    s.apply(&s.config(&old, spec("aws.amazon.com/neuron"))).await.unwrap();
    if minor < 36 {
        // The server cannot map extended resources: both are refused before any conflict check (see above).
        s.wait_condition(&old, "ConfigValid", "False").await;
        f.clear().await;
        return;
    }
    s.wait_condition(&old, "ConfigValid", "True").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await; // creation times are in seconds
    s.apply(&s.config(&new, spec("example.com/neuron"))).await.unwrap();
    let newer = s.wait_condition(&new, "ConfigValid", "False").await;
    let valid = condition(newer.status.as_ref().unwrap(), "ConfigValid").unwrap();
    assert_eq!(valid.reason, "Conflict");
    assert!(
        valid.message.contains(&format!(
            "deviceClassName {class} already serves extendedResourceName aws.amazon.com/neuron for {old}"
        )),
        "{}",
        valid.message
    );
    // The class keeps the older config's resource and is not rewritten pass after pass.
    let classes: Api<DeviceClass> = Api::all(s.client.clone());
    let extended = format!("devices.{class}");
    let before = classes.get(&extended).await.unwrap();
    assert_eq!(before.spec.extended_resource_name.as_deref(), Some("aws.amazon.com/neuron"));
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let after = classes.get(&extended).await.unwrap();
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version, "nobody rewrote the class");
    assert_eq!(
        s.configs()
            .get(&old)
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "ConfigValid")
            .unwrap()
            .status,
        "True"
    );
    f.clear().await;
}
