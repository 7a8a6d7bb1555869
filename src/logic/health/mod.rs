//! health (pure): device and node health over the nodes a config selects, from what the cluster shows: the
//! driver's ResourceSlices (device taints, missing devices), DeviceTaintRules, the plugin pods and the Nodes.
//! Lists are bounded and sorted so the status stays small and stable at thousands of nodes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::ResourceExt;

use crate::api::{DeviceSummary, NeuronDRAConfigSpec, NodeIssue, PLUGIN_NOT_READY, TaintRuleSummary, UnhealthyDevice};
use crate::cluster::taint_rule::{self, EFFECT_NONE, TaintRuleView};
use crate::cluster::{
    ClaimView, DeviceView, LEGACY_DEVICE_PLUGIN_RESOURCES, NEURON_HEALTH, NodeView, PodView, SliceView,
};
use crate::logic::desired::NEURON_DRIVER;
use crate::logic::nodes;
use crate::logic::status::Health;

/// Entries kept in `unhealthyDevices` and in `nodeIssues` each.
pub const MAX_LISTED: usize = 50;
pub const MISSING: &str = "Missing";

pub const NO_RESOURCE_SLICE: &str = "NoResourceSlice";
pub const LEGACY_DEVICE_PLUGIN: &str = "LegacyDevicePlugin";
pub const KUBELET_DRA_REGRESSION: &str = "KubeletDRARegression";
/// The EKS node monitoring agent's `AcceleratedHardwareReady=False`, as a node issue.
pub const ACCELERATED_HARDWARE_NOT_READY: &str = "AcceleratedHardwareNotReady";
pub const DRIVER_VERSION_MISMATCH: &str = "DriverVersionMismatch";
/// A node whose kubelet's `Ready` is not True (stopped, unreachable, lost): its devices are counted unhealthy.
pub const NODE_NOT_READY: &str = "NodeNotReady";

/// What the cluster shows, indexed for one assessment.
pub struct Inputs<'a> {
    pub spec: &'a NeuronDRAConfigSpec,
    /// The nodes the config selects (`NodeFilter`).
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

/// The claim holding each allocated Neuron device, by (pool, device). A monitoring claim with `adminAccess` on the
/// same device is not its holder.
pub fn holders(claims: &[Arc<ClaimView>]) -> HashMap<(String, String), Arc<ClaimView>> {
    claims
        .iter()
        .flat_map(|claim| {
            claim
                .taken_devices()
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
    let expected_version = crate::logic::image::semver(&inputs.spec.driver.image);
    let mut tally = Tally::default();
    // Reused from node to node: a fleet has 100,000 of them.
    let mut scratch = Scratch::default();
    for node in inputs.nodes {
        tally.node(node, inputs, expected_version.as_deref(), &mut scratch);
    }
    tally.assessment(inputs.taint_rules)
}

/// What the assessment gathers node by node, unbounded and unsorted.
#[derive(Default)]
struct Tally<'a> {
    summary: DeviceSummary,
    /// Unhealthy devices, with the time their taint was added (None for a missing device).
    devices: Vec<(Option<i64>, UnhealthyDevice)>,
    informational: Vec<UnhealthyDevice>,
    /// Devices of this config's nodes each rule taints, by rule name.
    rule_devices: HashMap<&'a str, i64>,
    issues: Vec<NodeIssue>,
    affected_claims: BTreeSet<String>,
}

/// One node's published Neuron devices and the driver versions they report.
#[derive(Default)]
struct Scratch<'a> {
    published: Vec<(&'a SliceView, &'a DeviceView)>,
    versions: Vec<&'a str>,
}

impl<'a> Tally<'a> {
    fn node(
        &mut self,
        node: &NodeView,
        inputs: &Inputs<'a>,
        expected_version: Option<&str>,
        scratch: &mut Scratch<'a>,
    ) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        self.summary.nodes += 1;
        let expected = nodes::instance_type(node.labels()).and_then(|t| t.devices).unwrap_or(0) as i64;
        node_issues(node, inputs, &mut self.issues);

        let slices = inputs.slices.get(name).map(Vec::as_slice).unwrap_or_default();
        if let Some(condition) = node.not_ready() {
            // Its slices stay published (nothing on the node can withdraw them), but nothing new can use them.
            let published = slices.iter().flat_map(|s| s.spec.devices.iter()).filter(|d| d.is_neuron_device()).count();
            let gone = expected.max(published as i64);
            return self.unavailable(gone, issue(name, NODE_NOT_READY, not_ready_message(condition, gone)));
        }
        if slices.is_empty() {
            let message = format!(
                "no ResourceSlice from {NEURON_DRIVER}: the kubelet plugin is not publishing its {expected} devices"
            );
            return self.unavailable(expected, issue(name, NO_RESOURCE_SLICE, message));
        }
        self.published(name, expected, slices, inputs, scratch);
        self.driver_versions(name, &mut scratch.versions, expected_version);
    }

    /// A node none of whose devices can be used, with why.
    fn unavailable(&mut self, devices: i64, why: NodeIssue) {
        self.summary.total += devices;
        self.summary.unhealthy += devices;
        self.issues.push(why);
    }

    /// The devices a node's slices publish, each judged, and those its type has that they do not publish.
    fn published(
        &mut self,
        name: &str,
        expected: i64,
        slices: &'a [Arc<SliceView>],
        inputs: &Inputs<'a>,
        scratch: &mut Scratch<'a>,
    ) {
        let Scratch { published, versions } = scratch;
        published.clear();
        published.extend(
            slices
                .iter()
                .flat_map(|s| s.spec.devices.iter().map(move |d| (s.as_ref(), d.as_ref())))
                .filter(|(_, d)| d.is_neuron_device()),
        );
        self.summary.total += expected.max(published.len() as i64);
        versions.clear();
        for &(slice, device) in published.iter() {
            if let Some(version) = device.dra_driver_version().filter(|v| !versions.contains(v)) {
                versions.push(version);
            }
            self.device(name, slice, device, inputs);
        }
        self.missing(name, expected, published);
    }

    /// A node whose slices report a DRA driver version other than the configured image's.
    fn driver_versions(&mut self, name: &str, versions: &mut [&str], expected_version: Option<&str>) {
        if let Some(expected_version) = expected_version
            && versions.iter().any(|v| *v != expected_version)
        {
            versions.sort_unstable();
            let seen = versions.join(", ");
            let message =
                format!("slices published by DRA driver {} but the configured image is {expected_version}", seen);
            self.issues.push(issue(name, DRIVER_VERSION_MISMATCH, message));
        }
    }

    /// One published device: the rules that taint it, and whether it is unhealthy or informationally tainted.
    fn device(&mut self, node: &str, slice: &SliceView, device: &DeviceView, inputs: &Inputs<'a>) {
        for rule in inputs.taint_rules.iter().filter(|rule| taint_rule::matches(rule, slice, device)) {
            *self.rule_devices.entry(rule.metadata.name.as_deref().unwrap_or_default()).or_default() += 1;
        }
        if let Some((reason, effect, added)) = taint_of(slice, device, inputs.taint_rules) {
            self.summary.unhealthy += 1;
            let entry = listed_device(node, slice, device, inputs.holders, reason, effect);
            self.affected_claims.extend(entry.claim.clone());
            self.devices.push((added, entry));
        } else if let Some(reason) = informational_taint(slice, device, inputs.taint_rules) {
            self.informational.push(listed_device(node, slice, device, inputs.holders, reason, EFFECT_NONE.into()));
        }
    }

    /// The devices the node's type has that its slices do not publish, by the device ids absent.
    fn missing(&mut self, node: &str, expected: i64, published: &[(&SliceView, &DeviceView)]) {
        let missing = expected - published.len() as i64;
        if missing > 0 {
            self.summary.unhealthy += missing;
            let present: BTreeSet<i64> = published.iter().filter_map(|(_, d)| d.device_id()).collect();
            let absent = (0..expected).filter(|id| !present.contains(id)).take(missing as usize);
            for id in absent {
                self.devices.push((
                    None,
                    UnhealthyDevice {
                        node: node.to_string(),
                        device: format!("deviceId={id}"),
                        reason: MISSING.into(),
                        ..UnhealthyDevice::default()
                    },
                ));
            }
        }
    }

    /// The bounded, sorted lists for the status, and the unbounded sets for events.
    fn assessment(self, rules: &[Arc<TaintRuleView>]) -> Assessment {
        let Tally { mut summary, mut devices, mut informational, rule_devices, mut issues, affected_claims } = self;
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
                taint_rules: rule_summaries(rules, &rule_devices),
                node_issues: issues.into_iter().take(MAX_LISTED).collect(),
                affected_claims: affected_claims.len(),
            },
            unhealthy,
            affected_claims,
        }
    }
}

/// A listed device, with the claim that holds it and that claim's pods. Looked up for a listed device only: the
/// key costs two strings, and a fleet has millions of devices.
fn listed_device(
    node: &str,
    slice: &SliceView,
    device: &DeviceView,
    holders: &HashMap<(String, String), Arc<ClaimView>>,
    reason: String,
    effect: String,
) -> UnhealthyDevice {
    let holder = holders.get(&(slice.spec.pool.name.clone(), device.name.to_string()));
    UnhealthyDevice {
        node: node.to_string(),
        device: device.name.to_string(),
        reason,
        effect: Some(effect),
        claim: holder.map(|c| format!("{}/{}", c.metadata.namespace.as_deref().unwrap_or(""), c.name_any())),
        pods: holder.map(|c| c.pods()).unwrap_or_default(),
    }
}

fn not_ready_message(condition: &crate::cluster::ConditionView, devices: i64) -> String {
    let reason = condition.reason.as_deref().unwrap_or("no reason given");
    format!(
        "node not Ready ({}, {reason}): its {devices} Neuron devices are unavailable until its kubelet reports again",
        condition.status
    )
}

fn issue(node: &str, reason: &str, message: String) -> NodeIssue {
    NodeIssue { node: node.to_string(), reason: reason.to_string(), message }
}

fn node_issues(node: &NodeView, inputs: &Inputs, issues: &mut Vec<NodeIssue>) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let status = &node.status;
    if inputs.plugin_expected {
        match inputs.plugin_pods.get(name) {
            None => issues.push(issue(name, PLUGIN_NOT_READY, "no kubelet-plugin pod on this node".into())),
            Some(pod) if !pod.ready() => issues.push(issue(
                name,
                PLUGIN_NOT_READY,
                format!("kubelet-plugin pod {} is not ready", pod.name_any()),
            )),
            Some(_) => {}
        }
    }
    if let Some(resource) = LEGACY_DEVICE_PLUGIN_RESOURCES.iter().find(|r| status.allocatable.iter().any(|a| a == *r)) {
        issues.push(issue(name, LEGACY_DEVICE_PLUGIN, format!("the legacy Neuron device plugin advertises {resource} here: devices may be allocated twice; remove it from DRA nodes")));
    }
    let version: &str = &status.node_info.kubelet_version;
    if kubelet_has_dra_regression(version) {
        issues.push(issue(
            name,
            KUBELET_DRA_REGRESSION,
            format!(
                "kubelet {version} has a DRA regression (kubernetes/kubernetes#133920); upgrade to 1.34.2 or newer"
            ),
        ));
    }
    for condition in status.conditions.iter().filter(|c| c.reports_hardware_problem()) {
        let kind = if condition.type_ == NEURON_HEALTH { NEURON_HEALTH } else { ACCELERATED_HARDWARE_NOT_READY };
        let reason = condition.reason.clone().unwrap_or_default();
        let message = condition.message.clone().unwrap_or_default();
        issues.push(issue(name, kind, format!("{reason}: {message}")));
    }
}

/// kubelets 1.34.0 and 1.34.1 (any build suffix) have the DRA regression.
pub fn kubelet_has_dra_regression(version: &str) -> bool {
    let v = version.trim_start_matches('v');
    ["1.34.0", "1.34.1"]
        .iter()
        .any(|bad| v.strip_prefix(bad).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())))
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
mod tests;
