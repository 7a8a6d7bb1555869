//! `status`: what the operator applied and observed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::issue::NodeIssue;
use super::quotas::{TeamStatus, TeamSummary};
use super::remediation::RemediationStatus;
use super::rollout::{RolloutStatus, VersionCount};

/// Observed state, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NeuronDRAConfigStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Progressing, Degraded or Paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// Ready, ConfigValid, DriverReady, TemplatesReady and DevicesHealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Rollout of the kubelet-plugin DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverStatus>,

    /// Device counts over the nodes this config selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceSummary>,

    /// Unhealthy devices (bounded; the total is in `devices.unhealthy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_devices: Vec<UnhealthyDevice>,

    /// Devices with an informational taint (`effect: None`, Kubernetes 1.35+): still schedulable and counted
    /// healthy, listed with the claim and pods a `NoExecute` taint would evict (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub informational_taints: Vec<UnhealthyDevice>,

    /// DeviceTaintRules that taint at least one device of the selected nodes, with their eviction progress
    /// (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taint_rules: Vec<TaintRuleSummary>,

    /// Nodes with a problem worth acting on (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_issues: Vec<NodeIssue>,

    /// Template totals over all target namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub templates: Option<TemplateSummary>,

    /// Templates per profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<ProfileStatus>,

    /// Each team namespace with a budget (`spec.quotas`): budget, use and room, by namespace (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<TeamStatus>,

    /// Totals over `teams`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_summary: Option<TeamSummary>,

    /// The remediation policy at work, with `spec.remediation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationStatus>,
}

/// Summary phase shown by `kubectl get ndc`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    Ready,
    Progressing,
    Degraded,
    Paused,
}

/// Kubelet-plugin rollout figures from the DaemonSet status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverStatus {
    /// Image the DaemonSet runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `namespace/name` of the DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set: Option<String>,
    /// Nodes that should run the plugin.
    #[serde(default)]
    pub desired_nodes: i32,
    /// Nodes whose plugin pod is ready.
    #[serde(default)]
    pub ready_nodes: i32,
    /// Nodes running the current plugin version.
    #[serde(default)]
    pub updated_nodes: i32,
    /// The plugin versions the nodes run, with how many nodes (and ready nodes) each; most nodes first, at most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<VersionCount>,
    /// The stepped rollout, with `driver.rollout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// Device totals.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSummary {
    /// Selected nodes.
    pub nodes: i64,
    /// Devices expected or published on them.
    pub total: i64,
    /// Devices without a NoSchedule/NoExecute taint.
    pub healthy: i64,
    /// Tainted or missing devices.
    pub unhealthy: i64,
}

/// One unhealthy device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyDevice {
    pub node: String,
    pub device: String,
    /// Taint key (or `Missing` for a device the node should have but does not publish).
    pub reason: String,
    /// NoSchedule or NoExecute (None in `informationalTaints`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// The ResourceClaim (`namespace/name`) that holds the device, if it is allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The pods (`namespace/name`) that reserve that claim: the workloads the sick device touches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
}

/// A DeviceTaintRule that taints devices of this config.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaintRuleSummary {
    pub name: String,
    /// The taint's key.
    pub key: String,
    /// NoSchedule, NoExecute or None.
    pub effect: String,
    /// Devices of the selected nodes it taints.
    pub devices: i64,
    /// The rule's `EvictionInProgress` condition (Kubernetes 1.35+): whether pods are still being evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicting: Option<bool>,
    /// That condition's message (pods pending eviction and evicted; for `effect: None`, what `NoExecute` would do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Template totals.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSummary {
    /// Namespaces that hold this config's templates.
    pub namespaces: i64,
    /// Templates present.
    pub count: i64,
    /// The smallest `available` over this config's templates: how many more claims of the tightest profile fit
    /// now (`kubectl get ndc` column Room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i64>,
}

/// Templates of one profile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    pub name: String,
    /// Template names this profile produces.
    pub templates: Vec<String>,
    /// Namespaces where all of them are present.
    pub namespaces: i64,
    /// Claims and room per template, in template order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<TemplateCapacity>,
    /// Whether Kueue (v0.19, configured as `render --kueue` prints) can admit pods that use this profile's templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<KueueAdmission>,
    /// How each template asks for its devices on this server, and what one claim of it is charged, in template order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<TemplateRequest>,
}

/// How one template asks for its Neuron devices on this cluster's Kubernetes version (docs/decisions.md, "Whole
/// nodes on a busy fleet").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRequest {
    pub template: String,
    /// The allocation mode of its preferred request: `ExactCount`, or `All` where the profile asks for every
    /// device of a node and the server's scheduler (before 1.36) would search for seconds for an exact count of
    /// them on a node with one in use.
    pub allocation_mode: String,
    /// Devices one claim of it is charged against a team's device budget (its ResourceQuota): its count, 32 for
    /// `All`, the largest alternative with fallbacks; an UltraServer node entry as its node's devices.
    pub charge: i64,
}

/// Kueue's verdict on a profile: it admits a workload only when it can count every device the workload's claims ask
/// for (docs/kueue.md, "What Kueue can admit").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KueueAdmission {
    pub admissible: bool,
    /// Why not: the first template and request Kueue cannot count, and what would do instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Claims of one template, and room for more.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateCapacity {
    pub template: String,
    /// Claims made from this template (in any namespace) that hold an allocation now.
    pub allocated: i64,
    /// How many more claims of this template the nodes this config selects can satisfy now, counting this template
    /// on its own (as if no other template's claims came first) and packing claims as the scheduler places them: a
    /// claim of N connected devices takes one whole free `devicegroup<N>` group (with free EFA interfaces of the
    /// same group when it asks for EFA); one device takes a free device (with EFA: one whose EFA is free too);
    /// `All` takes a node whose every matching device (and EFA) is free; an UltraServer claim takes a free
    /// `neuron_node` entry. With fallbacks, each node takes the first alternative as often as it fits, then the
    /// next on what remains, and so on, as the scheduler tries them in order on a node. Only devices that match the
    /// template's (or the alternative's) instance type and driver version count. A device is not free when any
    /// ResourceClaim holds it or it has a NoSchedule or NoExecute taint (in its slice or from a DeviceTaintRule).
    pub available: i64,
}
