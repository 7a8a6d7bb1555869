//! health (pure): device and node health over the nodes a config selects, from what the cluster shows: the
//! driver's ResourceSlices (device taints, missing devices), DeviceTaintRules, the plugin pods and the Nodes.
//! Lists are bounded and sorted so the status stays small and stable at thousands of nodes. Over 400 lines only
//! with its tests, which build small fleets inline.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::ResourceExt;

use crate::api::{DeviceSummary, NeuronDRAConfigSpec, NodeIssue, TaintRuleSummary, UnhealthyDevice};
use crate::build::NEURON_DRIVER;
use crate::nodes::{self, NodeFilter};
use crate::status::Health;
use crate::taint_rule::{self, EFFECT_NONE, TaintRuleView};
use crate::view::{ClaimView, DeviceView, NodeView, PodView, SliceView};

/// Entries kept in `unhealthyDevices` and in `nodeIssues` each.
pub const MAX_LISTED: usize = 50;
pub const MISSING: &str = "Missing";

pub const NO_RESOURCE_SLICE: &str = "NoResourceSlice";
pub const PLUGIN_NOT_READY: &str = "PluginNotReady";
pub const LEGACY_DEVICE_PLUGIN: &str = "LegacyDevicePlugin";
pub const KUBELET_DRA_REGRESSION: &str = "KubeletDRARegression";
pub const NEURON_HEALTH: &str = "NeuronHealth";
/// The EKS node monitoring agent's `AcceleratedHardwareReady=False`, as a node issue.
pub const ACCELERATED_HARDWARE_NOT_READY: &str = "AcceleratedHardwareNotReady";
pub const DRIVER_VERSION_MISMATCH: &str = "DriverVersionMismatch";

/// What the cluster shows, indexed for one assessment.
pub struct Inputs<'a> {
    pub spec: &'a NeuronDRAConfigSpec,
    pub nodes: &'a [Arc<NodeView>],
    /// The driver's slices, by node name.
    pub slices: &'a HashMap<String, Vec<Arc<SliceView>>>,
    /// This config's plugin pods, by node name.
    pub plugin_pods: &'a HashMap<String, Arc<PodView>>,
    pub taint_rules: &'a [Arc<TaintRuleView>],
    /// Whether this config's DaemonSet is applied (else plugin pods are not expected).
    pub plugin_expected: bool,
    /// The claim holding each allocated Neuron device, by (pool, device).
    pub holders: &'a HashMap<(String, String), Arc<ClaimView>>,
}

/// The claim holding each allocated Neuron device, by (pool, device).
pub fn holders(claims: &[Arc<ClaimView>]) -> HashMap<(String, String), Arc<ClaimView>> {
    claims
        .iter()
        .flat_map(|claim| {
            claim
                .devices()
                .iter()
                .filter(|d| d.driver == NEURON_DRIVER)
                .map(move |d| ((d.pool.clone(), d.device.clone()), claim.clone()))
        })
        .collect()
}

/// Every unhealthy device, unbounded (events compare these sets); the status gets the bounded lists.
pub struct Assessment {
    pub health: Health,
    pub unhealthy: BTreeSet<(String, String)>,
    /// The claims (`namespace/name`) that hold an unhealthy device, unbounded.
    pub affected_claims: BTreeSet<String>,
}

pub fn assess(inputs: &Inputs) -> Assessment {
    let expected_version = image_version(&inputs.spec.driver.image);
    let mut summary = DeviceSummary::default();
    let mut devices: Vec<(Option<i64>, UnhealthyDevice)> = Vec::new();
    let mut informational: Vec<UnhealthyDevice> = Vec::new();
    // Devices of this config's nodes each rule taints, by rule name.
    let mut rule_devices: HashMap<&str, i64> = HashMap::new();
    let mut issues: Vec<NodeIssue> = Vec::new();
    let mut affected_claims = BTreeSet::new();

    let filter = NodeFilter::new(inputs.spec);
    for node in inputs.nodes.iter().filter(|n| filter.selects(n.labels())) {
        let name = node.name_any();
        summary.nodes += 1;
        let expected = nodes::instance_type(node.labels()).and_then(|t| t.devices).unwrap_or(0) as i64;
        node_issues(node, inputs, &mut issues);

        let slices = inputs.slices.get(&name).map(Vec::as_slice).unwrap_or_default();
        if slices.is_empty() {
            summary.total += expected;
            summary.unhealthy += expected;
            issues.push(issue(
                &name,
                NO_RESOURCE_SLICE,
                format!(
                    "no ResourceSlice from {NEURON_DRIVER}: the kubelet plugin is not publishing its {expected} devices"
                ),
            ));
            continue;
        }
        let published: Vec<(&SliceView, &DeviceView)> = slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().map(move |d| (s.as_ref(), d)))
            .filter(|(_, d)| d.resource_type().is_none_or(|t| t == "neuron_device"))
            .collect();
        summary.total += expected.max(published.len() as i64);

        let mut versions = BTreeSet::new();
        for (slice, device) in &published {
            if let Some(version) = device.dra_driver_version() {
                versions.insert(version.to_string());
            }
            for rule in inputs.taint_rules.iter().filter(|rule| taint_rule::matches(rule, slice, device)) {
                *rule_devices.entry(rule.metadata.name.as_deref().unwrap_or_default()).or_default() += 1;
            }
            let holder = inputs.holders.get(&(slice.spec.pool.name.clone(), device.name.clone()));
            let entry = |reason: String, effect: String| UnhealthyDevice {
                node: name.clone(),
                device: device.name.clone(),
                reason,
                effect: Some(effect),
                claim: holder.map(|c| format!("{}/{}", c.metadata.namespace.as_deref().unwrap_or(""), c.name_any())),
                pods: holder.map(|c| c.pods()).unwrap_or_default(),
            };
            if let Some((reason, effect, added)) = taint_of(slice, device, inputs.taint_rules) {
                summary.unhealthy += 1;
                let entry = entry(reason, effect);
                affected_claims.extend(entry.claim.clone());
                devices.push((added, entry));
            } else if let Some(reason) = informational_taint(slice, device, inputs.taint_rules) {
                informational.push(entry(reason, EFFECT_NONE.into()));
            }
        }
        let present: BTreeSet<i64> = published.iter().filter_map(|(_, d)| d.device_id()).collect();
        let missing = expected - published.len() as i64;
        if missing > 0 {
            summary.unhealthy += missing;
            let absent = (0..expected).filter(|id| !present.contains(id)).take(missing as usize);
            for id in absent {
                devices.push((
                    None,
                    UnhealthyDevice {
                        node: name.clone(),
                        device: format!("deviceId={id}"),
                        reason: MISSING.into(),
                        ..UnhealthyDevice::default()
                    },
                ));
            }
        }
        if let Some(expected_version) = &expected_version
            && versions.iter().any(|v| v != expected_version)
        {
            let seen: Vec<&str> = versions.iter().map(String::as_str).collect();
            issues.push(issue(
                &name,
                DRIVER_VERSION_MISMATCH,
                format!(
                    "slices published by DRA driver {} but the configured image is {expected_version}",
                    seen.join(", ")
                ),
            ));
        }
    }
    summary.healthy = summary.total - summary.unhealthy;

    let unhealthy = devices.iter().map(|(_, d)| (d.node.clone(), d.device.clone())).collect();
    // Most recent taint first, then by node and device; missing devices (no time) last.
    devices.sort_by(|(ta, a), (tb, b)| tb.cmp(ta).then_with(|| (&a.node, &a.device).cmp(&(&b.node, &b.device))));
    issues.sort_by(|a, b| (&a.node, &a.reason).cmp(&(&b.node, &b.reason)));
    informational.sort_by(|a, b| (&a.node, &a.device).cmp(&(&b.node, &b.device)));
    Assessment {
        health: Health {
            summary,
            unhealthy_devices: devices.into_iter().take(MAX_LISTED).map(|(_, d)| d).collect(),
            informational_taints: informational.into_iter().take(MAX_LISTED).collect(),
            taint_rules: rule_summaries(inputs.taint_rules, &rule_devices),
            node_issues: issues.into_iter().take(MAX_LISTED).collect(),
            affected_claims: affected_claims.len(),
        },
        unhealthy,
        affected_claims,
    }
}

fn issue(node: &str, reason: &str, message: String) -> NodeIssue {
    NodeIssue { node: node.to_string(), reason: reason.to_string(), message }
}

fn node_issues(node: &NodeView, inputs: &Inputs, issues: &mut Vec<NodeIssue>) {
    let name = node.name_any();
    let status = &node.status;
    if inputs.plugin_expected {
        match inputs.plugin_pods.get(&name) {
            None => issues.push(issue(&name, PLUGIN_NOT_READY, "no kubelet-plugin pod on this node".into())),
            Some(pod) if !pod.ready() => issues.push(issue(
                &name,
                PLUGIN_NOT_READY,
                format!("kubelet-plugin pod {} is not ready", pod.name_any()),
            )),
            Some(_) => {}
        }
    }
    let legacy = ["aws.amazon.com/neuron", "aws.amazon.com/neuroncore"];
    if let Some(resource) = legacy.iter().find(|r| status.allocatable.iter().any(|a| a == *r)) {
        issues.push(issue(&name, LEGACY_DEVICE_PLUGIN, format!("the legacy Neuron device plugin advertises {resource} here: devices may be allocated twice; remove it from DRA nodes")));
    }
    let version = status.node_info.kubelet_version.as_str();
    if kubelet_has_dra_regression(version) {
        issues.push(issue(
            &name,
            KUBELET_DRA_REGRESSION,
            format!(
                "kubelet {version} has a DRA regression (kubernetes/kubernetes#133920); upgrade to 1.34.2 or newer"
            ),
        ));
    }
    for condition in &status.conditions {
        let kind = match (condition.type_.as_str(), condition.status.as_str()) {
            (NEURON_HEALTH, "True") => NEURON_HEALTH,
            (crate::remediation::ACCELERATED_HARDWARE_READY, "False") => ACCELERATED_HARDWARE_NOT_READY,
            _ => continue,
        };
        let reason = condition.reason.clone().unwrap_or_default();
        let message = condition.message.clone().unwrap_or_default();
        issues.push(issue(&name, kind, format!("{reason}: {message}")));
    }
}

/// kubelets 1.34.0 and 1.34.1 (any build suffix) have the DRA regression.
pub fn kubelet_has_dra_regression(version: &str) -> bool {
    let v = version.trim_start_matches('v');
    ["1.34.0", "1.34.1"]
        .iter()
        .any(|bad| v.strip_prefix(bad).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())))
}

/// The semver tag of the configured image, if it has one (`…/neuron-dra-driver:1.1.0` → `1.1.0`).
pub fn image_version(image: &str) -> Option<String> {
    let last = image.rsplit('/').next()?;
    let tag = last.split('@').next()?.split_once(':')?.1.trim_start_matches('v');
    (tag.split('.').count() == 3 && tag.split('.').all(|p| p.parse::<u64>().is_ok())).then(|| tag.to_string())
}

/// The first NoSchedule/NoExecute taint on a device, from its slice or a matching DeviceTaintRule:
/// (reason = taint key, effect, time added as seconds).
pub fn taint_of(
    slice: &SliceView,
    device: &DeviceView,
    rules: &[Arc<TaintRuleView>],
) -> Option<(String, String, Option<i64>)> {
    let effective = |effect: &str| matches!(effect, "NoSchedule" | "NoExecute");
    if let Some(t) = device.taints.iter().find(|t| effective(&t.effect)) {
        return Some((t.key.clone(), t.effect.clone(), t.time_added.as_ref().map(|t| t.0.as_second())));
    }
    rules.iter().find(|rule| effective(&rule.spec.taint.effect) && taint_rule::matches(rule, slice, device)).map(
        |rule| {
            let added = rule.spec.taint.time_added.as_ref().or(rule.metadata.creation_timestamp.as_ref());
            (rule.spec.taint.key.clone(), rule.spec.taint.effect.clone(), added.map(|t| t.0.as_second()))
        },
    )
}

/// The key of the first `effect: None` taint on a device (slice or rule): it informs, the device stays usable.
fn informational_taint(slice: &SliceView, device: &DeviceView, rules: &[Arc<TaintRuleView>]) -> Option<String> {
    let from_slice = device.taints.iter().find(|t| t.effect == EFFECT_NONE).map(|t| t.key.clone());
    from_slice.or_else(|| {
        rules
            .iter()
            .find(|rule| rule.spec.taint.effect == EFFECT_NONE && taint_rule::matches(rule, slice, device))
            .map(|rule| rule.spec.taint.key.clone())
    })
}

/// The rules that taint at least one of this config's devices, with their eviction status, sorted by name.
fn rule_summaries(rules: &[Arc<TaintRuleView>], devices: &HashMap<&str, i64>) -> Vec<TaintRuleSummary> {
    let mut summaries: Vec<TaintRuleSummary> = rules
        .iter()
        .filter_map(|rule| {
            let name = rule.metadata.name.clone()?;
            let devices = *devices.get(name.as_str())?;
            let eviction = taint_rule::eviction(rule);
            Some(TaintRuleSummary {
                key: rule.spec.taint.key.clone(),
                effect: rule.spec.taint.effect.clone(),
                devices,
                evicting: eviction.map(|c| c.status == "True"),
                message: eviction.map(|c| c.message.clone()).filter(|m| !m.is_empty()),
                name,
            })
        })
        .collect();
    summaries.sort_by(|a, b| a.name.cmp(&b.name));
    summaries.truncate(MAX_LISTED);
    summaries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::fleet::{self, FleetSpec};
    use crate::view::{node_view, pod_view, slice_view};
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
        holders: HashMap<(String, String), Arc<crate::view::ClaimView>>,
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
                    let pod: Pod =
                        serde_json::from_value(json!({"metadata": {"name": format!("p-{}", f.node_name(i))},
                        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
                        .unwrap();
                    world.pods.insert(f.node_name(i), Arc::new(pod_view(&pod)));
                }
            }
            world
        }

        fn assess(&self) -> Assessment {
            assess(&Inputs {
                spec: &self.spec,
                nodes: &self.nodes,
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
        let world =
            World::new(&[fleet("a", "trn2.48xlarge"), fleet("b", "trn1.2xlarge"), fleet("u", "trn2u.48xlarge")]);
        let health = world.assess().health;
        // trn2u's neuron_node entries are not devices.
        assert_eq!(health.summary, DeviceSummary { nodes: 6, total: 16 * 2 + 2 + 16 * 2, healthy: 66, unhealthy: 0 });
        assert!(health.unhealthy_devices.is_empty() && health.node_issues.is_empty(), "{:?}", health.node_issues);
    }

    #[test]
    fn a_sick_device_in_use_names_its_claim_and_pods() {
        let mut world = World::new(&[fleet("a", "trn2.48xlarge")]);
        world.slice_mut("a-0").spec.devices[0].taints =
            vec![DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }];
        let claim: crate::view::ClaimView = serde_json::from_value(json!({
            "metadata": {"name": "job-0-neurons", "namespace": "team"},
            "status": {
                "allocation": {"devices": {"results": [{"driver": "neuron.aws.com", "pool": "a-0", "device": "neuron-device-0"}]}},
                "reservedFor": [{"resource": "pods", "name": "job-0"}],
            },
        }))
        .unwrap();
        world.holders = holders(&[Arc::new(claim)]);
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
        let device = world.slice_mut("a-1").spec.devices.iter_mut().find(|d| d.name == "neuron-device-3").unwrap();
        device.taints =
            vec![DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }];
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
        let device = world.slice_mut("a-0").spec.devices.iter_mut().find(|d| d.name == "neuron-device-4").unwrap();
        device.taints =
            vec![DeviceTaint { key: "degraded".into(), effect: "None".into(), value: None, time_added: None }];
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
        status.conditions.push(serde_json::from_value(json!({"type": "NeuronHealth", "status": "True", "reason": "NeuronHasError_DMA_ERROR", "message": "dma"})).unwrap());
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
        assert_eq!(image_version("public.ecr.aws/neuron/neuron-dra-driver:1.1.0").as_deref(), Some("1.1.0"));
        assert_eq!(image_version("registry:5000/neuron-dra-driver").as_deref(), None);
        assert_eq!(image_version("x/neuron-dra-driver:latest"), None);
        assert!(kubelet_has_dra_regression("v1.34.0"));
        assert!(kubelet_has_dra_regression("v1.34.1-eks-1234"));
        assert!(!kubelet_has_dra_regression("v1.34.10"));
        assert!(!kubelet_has_dra_regression("v1.34.2"));
    }
}
