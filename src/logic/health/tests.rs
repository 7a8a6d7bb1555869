//! Unit tests of `health`, over small fleets built inline.
use super::*;
use crate::cluster::{node_view, pod_view, slice_view};
use crate::devtools::simulate::fleet::{self, FleetSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::DeviceTaint;
use serde_json::json;

fn fleet(prefix: &str, instance_type: &str) -> FleetSpec {
    FleetSpec {
        prefix: prefix.into(),
        count: 2,
        instance_type: instance_type.into(),
        dra_driver_version: "1.1.0".into(),
        neuron_driver_version: "2.25.4.0".into(),
        kubelet_version: "v1.34.2".into(),
    }
}

struct World {
    spec: NeuronDRAConfigSpec,
    nodes: Vec<Arc<NodeView>>,
    slices: HashMap<String, Vec<Arc<SliceView>>>,
    pods: HashMap<String, Arc<PodView>>,
    rules: Vec<Arc<TaintRuleView>>,
    holders: HashMap<(String, String), Arc<crate::cluster::ClaimView>>,
}

impl World {
    fn new(fleets: &[FleetSpec]) -> World {
        let mut world = World {
            spec: serde_json::from_value(json!({})).unwrap(),
            nodes: vec![],
            slices: HashMap::new(),
            pods: HashMap::new(),
            rules: vec![],
            holders: HashMap::new(),
        };
        for f in fleets {
            for i in 0..f.count {
                let mut node: Node = fleet::node(f, i);
                node.status = Some(serde_json::from_value(fleet::node_status(f)).unwrap());
                world.nodes.push(Arc::new(node_view(&node)));
                let slice = fleet::resource_slice(f, i, None);
                world.slices.insert(f.node_name(i), vec![Arc::new(slice_view(&slice))]);
                let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p-{}", f.node_name(i))},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
                .unwrap();
                world.pods.insert(f.node_name(i), Arc::new(pod_view(&pod)));
            }
        }
        world
    }

    fn assess(&self) -> Assessment {
        let filter = crate::logic::nodes::NodeFilter::new(&self.spec);
        let selected: Vec<_> = self.nodes.iter().filter(|n| filter.selects(n.labels())).cloned().collect();
        assess(&Inputs {
            spec: &self.spec,
            nodes: &selected,
            slices: &self.slices,
            plugin_pods: &self.pods,
            taint_rules: &self.rules,
            plugin_expected: true,
            holders: &self.holders,
        })
    }

    fn slice_mut(&mut self, node: &str) -> &mut SliceView {
        Arc::make_mut(&mut self.slices.get_mut(node).unwrap()[0])
    }

    fn node_mut(&mut self, node: &str) -> &mut NodeView {
        Arc::make_mut(self.nodes.iter_mut().find(|n| n.name_any() == node).unwrap())
    }
}

#[test]
fn a_healthy_mixed_fleet_reports_totals_by_instance_type() {
    let world = World::new(&[fleet("a", "trn2.48xlarge"), fleet("b", "trn1.2xlarge"), fleet("u", "trn2u.48xlarge")]);
    let health = world.assess().health;
    // trn2u's neuron_node entries are not devices.
    assert_eq!(health.summary, DeviceSummary { nodes: 6, total: 16 * 2 + 2 + 16 * 2, healthy: 66, unhealthy: 0 });
    assert!(health.unhealthy_devices.is_empty() && health.node_issues.is_empty(), "{:?}", health.node_issues);
}

#[test]
fn a_sick_device_in_use_names_its_claim_and_pods() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    Arc::make_mut(&mut world.slice_mut("a-0").spec.devices[0]).taints =
        Box::new([DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }]);
    let claim: crate::cluster::ClaimView = serde_json::from_value(json!({
        "metadata": {"name": "job-0-neurons", "namespace": "team"},
        "status": {
            "allocation": {"devices": {"results": [{"driver": "neuron.aws.com", "pool": "a-0", "device": "neuron-device-0"}]}},
            "reservedFor": [{"resource": "pods", "name": "job-0"}],
        },
    }))
    .unwrap();
    // A monitoring claim on the same device (adminAccess) does not hold it, wherever it comes in the list.
    let monitor: crate::cluster::ClaimView = serde_json::from_value(json!({
        "metadata": {"name": "monitor", "namespace": "ops"},
        "status": {"allocation": {"devices": {"results": [
            {"driver": "neuron.aws.com", "pool": "a-0", "device": "neuron-device-0", "adminAccess": true}]}}},
    }))
    .unwrap();
    world.holders = holders(&[Arc::new(claim), Arc::new(monitor)]);
    let assessment = world.assess();
    let entry = &assessment.health.unhealthy_devices[0];
    assert_eq!(
        (entry.claim.as_deref(), entry.pods.as_slice()),
        (Some("team/job-0-neurons"), &["team/job-0".to_string()][..])
    );
    assert_eq!(assessment.health.affected_claims, 1);
    assert_eq!(assessment.affected_claims.into_iter().collect::<Vec<_>>(), ["team/job-0-neurons"]);
}

#[test]
fn a_tainted_device_is_unhealthy_with_its_key_and_effect() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    let device = world.slice_mut("a-1").spec.devices.iter_mut().find(|d| &*d.name == "neuron-device-3").unwrap();
    Arc::make_mut(device).taints =
        Box::new([DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }]);
    let health = world.assess().health;
    assert_eq!(health.summary.unhealthy, 1);
    assert_eq!(
        health.unhealthy_devices,
        vec![UnhealthyDevice {
            node: "a-1".into(),
            device: "neuron-device-3".into(),
            reason: "k".into(),
            effect: Some("NoExecute".into()),
            ..UnhealthyDevice::default()
        }]
    );
}

#[test]
fn taint_rules_count_like_slice_taints() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    let rule: TaintRuleView = serde_json::from_value(json!({"metadata": {"name": "r"}, "spec": {
        "deviceSelector": {"driver": "neuron.aws.com", "pool": "a-0", "device": "neuron-device-7"},
        "taint": {"key": "maintenance", "effect": "NoSchedule"}}}))
    .unwrap();
    world.rules.push(Arc::new(rule));
    let health = world.assess().health;
    assert_eq!(health.summary.unhealthy, 1);
    assert_eq!(health.unhealthy_devices[0].device, "neuron-device-7");
    assert_eq!(health.unhealthy_devices[0].reason, "maintenance");
    assert_eq!(
        health.taint_rules,
        vec![TaintRuleSummary {
            name: "r".into(),
            key: "maintenance".into(),
            effect: "NoSchedule".into(),
            devices: 1,
            ..TaintRuleSummary::default()
        }]
    );
}

#[test]
fn a_rule_over_a_whole_pool_lists_its_device_count_and_eviction_progress() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    let rule: TaintRuleView = serde_json::from_value(json!({"metadata": {"name": "drain-a-1"}, "spec": {
        "deviceSelector": {"driver": "neuron.aws.com", "pool": "a-1"},
        "taint": {"key": "drain", "effect": "NoExecute"}},
        "status": {"conditions": [{"type": "EvictionInProgress", "status": "True", "reason": "PodsPending",
            "message": "1 pod pending eviction", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}))
    .unwrap();
    // A rule that matches none of this config's devices is not listed.
    let elsewhere: TaintRuleView = serde_json::from_value(json!({"metadata": {"name": "other"}, "spec": {
        "deviceSelector": {"driver": "neuron.aws.com", "pool": "z-9"},
        "taint": {"key": "drain", "effect": "NoExecute"}}}))
    .unwrap();
    world.rules = vec![Arc::new(rule), Arc::new(elsewhere)];
    let health = world.assess().health;
    assert_eq!(health.summary.unhealthy, 16);
    let listed = &health.taint_rules;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].name.as_str(), listed[0].devices, listed[0].evicting), ("drain-a-1", 16, Some(true)));
    assert_eq!(listed[0].message.as_deref(), Some("1 pod pending eviction"));
}

#[test]
fn an_informational_taint_is_listed_but_the_device_stays_healthy() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    let device = world.slice_mut("a-0").spec.devices.iter_mut().find(|d| &*d.name == "neuron-device-4").unwrap();
    Arc::make_mut(device).taints =
        Box::new([DeviceTaint { key: "degraded".into(), effect: "None".into(), value: None, time_added: None }]);
    let rule: TaintRuleView = serde_json::from_value(json!({"metadata": {"name": "preview"}, "spec": {
        "deviceSelector": {"driver": "neuron.aws.com", "pool": "a-1", "device": "neuron-device-2"},
        "taint": {"key": "preview", "effect": "None"}}}))
    .unwrap();
    world.rules.push(Arc::new(rule));
    let health = world.assess().health;
    assert_eq!((health.summary.unhealthy, health.summary.healthy), (0, 32));
    assert!(health.unhealthy_devices.is_empty());
    let listed: Vec<(&str, &str, &str, Option<&str>)> = health
        .informational_taints
        .iter()
        .map(|d| (d.node.as_str(), d.device.as_str(), d.reason.as_str(), d.effect.as_deref()))
        .collect();
    assert_eq!(
        listed,
        [("a-0", "neuron-device-4", "degraded", Some("None")), ("a-1", "neuron-device-2", "preview", Some("None"))]
    );
}

#[test]
fn a_dropped_device_is_missing_by_id() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    world.slice_mut("a-0").spec.devices.remove(5);
    let health = world.assess().health;
    assert_eq!(health.summary.total, 32);
    assert_eq!(health.summary.unhealthy, 1);
    assert_eq!(health.unhealthy_devices[0].device, "deviceId=5");
    assert_eq!(health.unhealthy_devices[0].reason, MISSING);
}

#[test]
fn node_problems_are_reported_with_their_reasons() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    world.slices.remove("a-0");
    world.pods.remove("a-1");
    let status = &mut world.node_mut("a-1").status;
    status.allocatable.push("aws.amazon.com/neuron".into());
    status.node_info.kubelet_version = "v1.34.1-eks-abc".into();
    status.conditions.push(
        serde_json::from_value(
            json!({"type": "NeuronHealth", "status": "True", "reason": "NeuronHasError_DMA_ERROR", "message": "dma"}),
        )
        .unwrap(),
    );
    status.conditions.push(serde_json::from_value(json!({"type": "AcceleratedHardwareReady", "status": "False", "reason": "NeuronHBMUncorrectableError", "message": "hbm"})).unwrap());
    world.spec.driver.image = "public.ecr.aws/neuron/neuron-dra-driver:1.2.0".into();
    let health = world.assess().health;
    let reasons: Vec<(String, String)> =
        health.node_issues.iter().map(|i| (i.node.clone(), i.reason.clone())).collect();
    assert_eq!(
        reasons,
        [
            ("a-0".into(), NO_RESOURCE_SLICE.into()),
            ("a-1".into(), ACCELERATED_HARDWARE_NOT_READY.into()),
            ("a-1".into(), DRIVER_VERSION_MISMATCH.into()),
            ("a-1".into(), KUBELET_DRA_REGRESSION.into()),
            ("a-1".into(), LEGACY_DEVICE_PLUGIN.into()),
            ("a-1".into(), NEURON_HEALTH.into()),
            ("a-1".into(), PLUGIN_NOT_READY.into()),
        ]
    );
    assert!(health.node_issues[5].message.contains("NeuronHasError_DMA_ERROR"));
    assert_eq!(health.node_issues[1].message, "NeuronHBMUncorrectableError: hbm");
    assert_eq!(health.summary.unhealthy, 16, "a node without a slice has its devices counted unhealthy");
}

#[test]
fn lists_are_bounded_and_stable() {
    let mut big = fleet("a", "trn2.48xlarge");
    big.count = 100;
    let mut world = World::new(&[big]);
    for i in 0..100 {
        world.slices.remove(&format!("a-{i}"));
    }
    let first = world.assess().health;
    assert_eq!(first.node_issues.len(), MAX_LISTED);
    assert_eq!(first.summary.unhealthy, 1600);
    assert_eq!(first, world.assess().health);
}

#[test]
fn only_selected_nodes_count() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge"), fleet("b", "trn1.2xlarge")]);
    world.spec = serde_json::from_value(
        json!({"nodeSelector": {"matchLabels": {"node.kubernetes.io/instance-type": "trn1.2xlarge"}}}),
    )
    .unwrap();
    assert_eq!(world.assess().health.summary.nodes, 2);
}

#[test]
fn versions_and_regressions_parse() {
    assert!(kubelet_has_dra_regression("v1.34.0"));
    assert!(kubelet_has_dra_regression("v1.34.1-eks-1234"));
    assert!(!kubelet_has_dra_regression("v1.34.10"));
    assert!(!kubelet_has_dra_regression("v1.34.2"));
}

#[test]
fn a_node_that_stopped_reporting_counts_its_devices_gone_and_says_so() {
    let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "a-1"}, "status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."},
        {"type": "MemoryPressure", "status": "Unknown"},
    ]}}))
    .unwrap();
    let labels = world.node_mut("a-1").metadata.labels.clone();
    *world.node_mut("a-1") = node_view(&node);
    world.node_mut("a-1").metadata.labels = labels;
    let health = world.assess().health;
    assert_eq!(health.summary, DeviceSummary { nodes: 2, total: 32, healthy: 16, unhealthy: 16 });
    assert_eq!(health.node_issues.len(), 1, "{:?}", health.node_issues);
    let issue = &health.node_issues[0];
    assert_eq!((issue.node.as_str(), issue.reason.as_str()), ("a-1", NODE_NOT_READY));
    assert_eq!(
        issue.message,
        "node not Ready (Unknown, NodeStatusUnknown): its 16 Neuron devices are unavailable until its kubelet reports again"
    );
    // A Ready node keeps no Ready condition in its view (a fleet's worth of messages).
    assert!(world.node_mut("a-0").status.conditions.is_empty());
}
