//! The `NeuronDRAConfig` API (`neurondra.io/v1alpha1`).
//!
//! Doc comments on these types become the CRD's field descriptions (`kubectl explain`). Rules the API server
//! can check live here as schema attributes and CEL rules; rules that need the instance-type catalog live in
//! `validate`.
//!
//! Files by concern: the spec's root here, `driver` (the plugin DaemonSet), `profiles` (workload profiles),
//! `rollout` and `remediation` (their policies and status), `quotas` (device budgets per team), `status` (what the
//! operator observed), `issue` (a node's problem, which the status and a halted rollout both list), `names` (the
//! name and reference rules several files check). The children import each other one way only, never this file.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use validator::Validate;

mod driver;
mod issue;
pub mod labels;
mod names;
mod profiles;
mod quotas;
mod remediation;
mod rollout;
mod status;

pub use driver::*;
pub use issue::*;
pub use names::*;
pub use profiles::*;
pub use quotas::*;
pub use remediation::*;
pub use rollout::*;
pub use status::*;

pub const GROUP: &str = "neurondra.io";
pub const DEFAULT_DEVICE_CLASS: &str = "neuron.aws.com";
/// Longest profile name whose `-prefill` suffix still fits a 63-character label value.
pub const MAX_DISAGGREGATED_NAME: usize = 63 - "-prefill".len();
/// Most fallbacks one request may list: `firstAvailable` holds at most 8 subrequests, the first choice and 7 more.
pub const MAX_FALLBACKS: usize = 7;

/// Declares a Neuron DRA installation: the kubelet-plugin DaemonSet for the selected Trainium nodes, the
/// DeviceClass, and ResourceClaimTemplates compiled from workload profiles in the target namespaces.
#[derive(CustomResource, KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "neurondra.io",
    version = "v1alpha1",
    kind = "NeuronDRAConfig",
    plural = "neurondraconfigs",
    shortname = "ndc",
    category = "neuron",
    doc = "A Neuron DRA installation: the kubelet-plugin DaemonSet, the DeviceClass and ResourceClaimTemplates compiled from workload profiles, with rollout and device health in status.",
    status = "NeuronDRAConfigStatus",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.devices.nodes"),
    printcolumn(name = "Devices", type_ = "integer", json_path = ".status.devices.total"),
    printcolumn(name = "Healthy", type_ = "integer", json_path = ".status.devices.healthy"),
    printcolumn(name = "Templates", type_ = "integer", json_path = ".status.templates.count"),
    printcolumn(name = "Room", type_ = "integer", json_path = ".status.templates.minAvailable"),
    printcolumn(name = "At Quota", type_ = "integer", json_path = ".status.teamSummary.atQuota", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 40").message("metadata.name: must be at most 40 characters (it names the plugin DaemonSet)"),
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NeuronDRAConfigSpec {
    /// Nodes that run the kubelet plugin and whose devices this config reports on. Absent means every node of a
    /// supported Trainium instance type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// The AWS Neuron DRA kubelet plugin: image and DaemonSet settings, merged on top of AWS's chart defaults.
    #[serde(default)]
    #[validate(nested)]
    pub driver: DriverSpec,

    /// Name of the DeviceClass that selects Neuron devices (`device.driver == 'neuron.aws.com'`, resource type
    /// `neuron_device`); UltraServer node entries get the DeviceClass `ultraserver-nodes.<deviceClassName>`. Both are
    /// shared by every config that names them. At most 207 characters: the longest name made from it, the node
    /// entries' quota key `ultraserver-nodes.<deviceClassName>.deviceclass.resource.k8s.io/devices`, needs a DNS
    /// subdomain before the `/`.
    #[serde(default = "default_device_class")]
    #[schemars(default = "default_device_class")]
    #[validate(length(min = 1, max = 207), regex(path = *DNS_SUBDOMAIN))]
    pub device_class_name: String,

    /// Serves pods that ask for this extended resource the old way (`resources.limits: {aws.amazon.com/neuron:
    /// 4}`) with DRA: the migration path off the legacy Neuron device plugin. The operator then also makes the
    /// DeviceClass `devices.<deviceClassName>`, which selects Neuron devices only (never UltraServer node entries)
    /// and names this resource; the scheduler turns each such request into a claim for that many devices. Needs a
    /// server with extended-resource mapping (Kubernetes 1.36 or newer); elsewhere the config is refused
    /// (`ConfigValid=False`, reason `Unsupported`) and nothing is applied. Remove the device plugin from these
    /// nodes first, or both will hand out the same devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = EXTENDED_RESOURCE_PATTERN), length(max = 253))]
    #[x_kube(validation = Rule::new("!self.matches('(^|[.])kubernetes[.]io/')").message("must not be in the kubernetes.io domain (kept for Kubernetes' own resources)"))]
    #[validate(length(max = 253), regex(path = *EXTENDED_RESOURCE, message = "must be a qualified name `<domain>/<name>` outside kubernetes.io, like aws.amazon.com/neuron"))]
    pub extended_resource_name: Option<String>,

    /// Where ResourceClaimTemplates are created: an explicit namespace list, a namespace selector, or both.
    #[serde(default)]
    #[validate(nested)]
    pub templates: TemplatesSpec,

    /// Workload profiles. Each compiles into one ResourceClaimTemplate named after it (two for
    /// `disaggregated`: `<name>-prefill` and `<name>-decode`) in every target namespace.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    #[validate(length(max = 64), nested)]
    pub profiles: Vec<Profile>,

    /// Device budgets per team namespace, each written as a ResourceQuota `neuron-dra-<config>` in the namespace
    /// (a quota of its own: one the team already has is left alone). Status `teams` shows each namespace's use and
    /// how many more claims of each template fit. A namespace named or selected by two budgets gets the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[validate(length(max = 64), nested)]
    pub quotas: Vec<DeviceQuota>,

    /// Stops every write for this config (operands are left as they are); the phase shows `Paused`.
    #[serde(default)]
    pub paused: bool,

    /// Taints the Neuron devices of selected nodes that report a Neuron hardware problem (node conditions
    /// `NeuronHealth=True` from the node problem detector, `AcceleratedHardwareReady=False` from the EKS node
    /// monitoring agent) with a DeviceTaintRule per node, at most `maxNodes` nodes at once, and removes the rule
    /// when the condition clears. Absent: off (`{}` takes every default). Needs a server that serves
    /// DeviceTaintRules; elsewhere the config is refused (`ConfigValid=False`, reason `Unsupported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationPolicy>,
}

fn default_device_class() -> String {
    DEFAULT_DEVICE_CLASS.to_string()
}
