//! The `NeuronDRAConfig` API (`neurondra.io/v1alpha1`).
//!
//! Doc comments on these types become the CRD's field descriptions (`kubectl explain`). Rules the API server
//! can check live here as schema attributes and CEL rules; rules that need the instance-type catalog live in
//! `validate`.
//!
//! Longer than most files because every field's documentation is the user-facing API reference.

use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;
use validator::Validate;

pub mod labels;
mod remediation;
mod rollout;
pub use remediation::*;
pub use rollout::*;

pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
pub static DNS_LABEL: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(DNS_LABEL_PATTERN).unwrap());
static DNS_SUBDOMAIN: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap());
static IMAGE_REF: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(r"^[^\s]+$").unwrap());
static INSTANCE_TYPE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z0-9][a-z0-9-]*\.[a-z0-9]+$").unwrap());
static DRIVER_VERSION: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[0-9]+(\.[0-9]+){1,3}$").unwrap());

/// `<DNS subdomain>/<name>`, outside the `kubernetes.io` domains (which the API server keeps for itself).
pub const EXTENDED_RESOURCE_PATTERN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
static EXTENDED_RESOURCE: LazyLock<regex::Regex> = LazyLock::new(|| {
    // The regex crate has no look-around: the kubernetes.io exclusion is checked in `validate`.
    regex::Regex::new(EXTENDED_RESOURCE_PATTERN).unwrap()
});

pub const GROUP: &str = "neurondra.io";
pub const DEFAULT_DRIVER_IMAGE: &str = "public.ecr.aws/neuron/neuron-dra-driver:1.1.0";
pub const DEFAULT_DRIVER_NAMESPACE: &str = "neuron-dra-driver";
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
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("!has(self.spec.extendedResourceName) || size(self.spec.deviceClassName) <= 245").message("spec.deviceClassName: must be at most 245 characters with extendedResourceName (the extra DeviceClass is named devices.<deviceClassName>)"),
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

    /// Name of the DeviceClass that selects Neuron devices (`device.driver == 'neuron.aws.com'`). Shared by
    /// every config that names it.
    #[serde(default = "default_device_class")]
    #[schemars(default = "default_device_class")]
    #[validate(length(min = 1, max = 253), regex(path = *DNS_SUBDOMAIN))]
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

fn validate_namespace_names(names: &[String]) -> Result<(), validator::ValidationError> {
    match names.iter().find(|name| name.len() > 63 || !DNS_LABEL.is_match(name)) {
        Some(bad) => Err(validator::ValidationError::new("namespace")
            .with_message(format!("{bad:?} is not a valid namespace name (DNS label)").into())),
        None => Ok(()),
    }
}

fn default_device_class() -> String {
    DEFAULT_DEVICE_CLASS.to_string()
}
fn default_driver_image() -> String {
    DEFAULT_DRIVER_IMAGE.to_string()
}
fn default_driver_namespace() -> String {
    DEFAULT_DRIVER_NAMESPACE.to_string()
}

/// The kubelet-plugin DaemonSet. Lists here are added to AWS's defaults; scalar fields replace them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.rollout) || !has(self.updateStrategy)").message("must not be set with updateStrategy (the operator steps the rollout itself)").field_path(".rollout"))]
pub struct DriverSpec {
    /// Kubelet plugin image, `public.ecr.aws/neuron/neuron-dra-driver:<semver>` or a mirror of it. The tag is
    /// compared with the `draDriverVersion` the nodes publish.
    #[serde(default = "default_driver_image")]
    #[schemars(default = "default_driver_image")]
    #[validate(length(min = 1, max = 512), regex(path = *IMAGE_REF))]
    pub image: String,

    /// When the kubelet pulls the image.
    #[serde(default)]
    #[schemars(default)]
    pub image_pull_policy: ImagePullPolicy,

    /// Namespace of the plugin DaemonSet and its ServiceAccount; created if missing.
    #[serde(default = "default_driver_namespace")]
    #[schemars(default = "default_driver_namespace")]
    #[validate(length(min = 1, max = 63), regex(path = *DNS_LABEL))]
    pub namespace: String,

    /// Secrets for pulling the image from a private mirror.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// PriorityClass of the plugin pods (for example `system-node-critical`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Tolerations added to the defaults (CriticalAddonsOnly, aws.amazon.com/neuron, SageMaker node health).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Container resources; replaces the default requests 10m/128Mi and limits 20m/256Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Environment variables added to the plugin container; a name that matches a default replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Rolling-update settings; default maxUnavailable 0, maxSurge 1 (seamless plugin upgrade). Excludes `rollout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,

    /// A plugin rollout in checked steps, driven by the operator instead of the DaemonSet controller (absent: the
    /// DaemonSet controller rolls out by `updateStrategy`; `{}` takes every default). The DaemonSet gets
    /// `updateStrategy: OnDelete`; the operator moves nodes to a new plugin template by deleting their old plugin
    /// pods, first `canary` nodes, then `maxUnavailable` nodes per step. After each step every moved node must run a
    /// Ready plugin pod of the new template and publish its ResourceSlice again, from the new version, with at least
    /// as many Neuron devices as before, within `timeout`. Otherwise the rollout halts (DriverReady=False, reason
    /// RolloutHalted) and the other nodes keep their version until the plugin's template changes again: a fixed
    /// image resumes, the old image rolls back, both in the same steps. Excludes `updateStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPolicy>,
}

impl Default for DriverSpec {
    fn default() -> Self {
        Self {
            image: default_driver_image(),
            image_pull_policy: ImagePullPolicy::default(),
            namespace: default_driver_namespace(),
            image_pull_secrets: Vec::new(),
            priority_class_name: None,
            tolerations: Vec::new(),
            resources: None,
            env: Vec::new(),
            update_strategy: None,
            rollout: None,
        }
    }
}

/// Image pull policy of the plugin container.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    #[default]
    IfNotPresent,
    Never,
}

impl ImagePullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// Rolling-update settings of the plugin DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateStrategy {
    /// Nodes whose plugin may be unavailable during an update (count or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Nodes that may run an old and a new plugin pod at once during an update (count or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// Target namespaces of the ResourceClaimTemplates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplatesSpec {
    /// Namespaces that get the templates. They must exist; the operator does not create them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(pattern = DNS_LABEL_PATTERN), length(max = 63)))]
    #[validate(length(max = 1000), custom(function = "validate_namespace_names"))]
    pub namespaces: Vec<String>,

    /// Every namespace whose labels match also gets the templates, and loses them when it stops matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// One workload profile. Set exactly one of `training`, `longContextInference` or `disaggregated`.
#[derive(KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("[has(self.training), has(self.longContextInference), has(self.disaggregated)].filter(x, x).size() == 1").message("exactly one of training, longContextInference or disaggregated must be set"))]
#[x_kube(validation = Rule::new("!has(self.disaggregated) || size(self.name) <= 55").message("must be at most 55 characters for a disaggregated profile (room for the -prefill and -decode suffixes)").field_path(".name"))]
pub struct Profile {
    /// Profile name; the name of the generated template, and what pods put in `resourceClaimTemplateName`.
    #[validate(length(min = 1, max = 63), regex(path = *DNS_LABEL))]
    pub name: String,

    /// Training: whole nodes or connected device groups, optionally with EFA aligned to the devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub training: Option<DeviceRequest>,

    /// Long-context inference: a device group on one node, or one node entry of an UltraServer spanning 2 or 4
    /// nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub long_context_inference: Option<LongContextInference>,

    /// Disaggregated serving: separate prefill and decode templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub disaggregated: Option<Disaggregated>,
}

/// What one claim asks for.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new(NO_FALLBACKS_WITH_EFA).message(FALLBACKS_WITH_EFA).field_path(".fallbacks"))]
pub struct DeviceRequest {
    /// EC2 instance type the devices must be on, for example `trn2.48xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 63), regex(path = *INSTANCE_TYPE))]
    pub instance_type: Option<String>,

    /// Neuron devices per claim: `All` (the whole node, the default) or 1, 4, 8 or 16 connected devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceCount>,

    /// Logical NeuronCore setting (1 or 2) passed to the driver; only on types that support LNC (Trn2, Trn3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 2, message = "must be 1 or 2"))]
    pub logical_neuron_core: Option<u8>,

    /// Host Neuron driver version the devices must run, for example `2.25.4.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 64), regex(path = *DRIVER_VERSION))]
    pub neuron_driver_version: Option<String>,

    /// Also claim the EFA interfaces paired with the devices (DeviceClass `efa.networking.k8s.aws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa: Option<bool>,

    /// Alternatives tried in order when this request cannot be allocated on a node (Kubernetes' prioritized
    /// list, `firstAvailable`); each stands on its own (fields it leaves out are not taken from the request).
    /// At most 7; not with `efa`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[validate(length(max = 7), nested)]
    pub fallbacks: Vec<Fallback>,
}

/// A long-context inference claim: a device request, or `ultraServerNodes` for an UltraServer.
#[derive(KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.ultraServerNodes) || !has(self.devices)").message("must not be set with ultraServerNodes (each pod claims one UltraServer node entry)").field_path(".devices"))]
#[x_kube(validation = Rule::new("!has(self.ultraServerNodes) || !has(self.efa) || !self.efa").message("must not be set with ultraServerNodes").field_path(".efa"))]
#[x_kube(validation = Rule::new("!has(self.ultraServerNodes) || !has(self.fallbacks) || size(self.fallbacks) == 0").message("must not be set with ultraServerNodes").field_path(".fallbacks"))]
#[x_kube(validation = Rule::new(NO_FALLBACKS_WITH_EFA).message(FALLBACKS_WITH_EFA).field_path(".fallbacks"))]
pub struct LongContextInference {
    /// EC2 instance type the devices must be on, for example `trn2.48xlarge` (or `trn2u.48xlarge` for an
    /// UltraServer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 63), regex(path = *INSTANCE_TYPE))]
    pub instance_type: Option<String>,

    /// Neuron devices per claim: `All` (the whole node, the default) or 1, 4, 8 or 16 connected devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceCount>,

    /// Logical NeuronCore setting (1 or 2) passed to the driver; only on types that support LNC (Trn2, Trn3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 2, message = "must be 1 or 2"))]
    pub logical_neuron_core: Option<u8>,

    /// Host Neuron driver version the devices must run, for example `2.25.4.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 64), regex(path = *DRIVER_VERSION))]
    pub neuron_driver_version: Option<String>,

    /// Also claim the EFA interfaces paired with the devices (DeviceClass `efa.networking.k8s.aws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa: Option<bool>,

    /// UltraServer mode: each pod claims one UltraServer node entry and the driver joins 1, 2 or 4 nodes. Excludes
    /// `devices` and `efa`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [1, 2, 4]))]
    #[validate(custom(function = "validate_ultra_server_nodes"))]
    pub ultra_server_nodes: Option<u8>,

    /// Alternatives tried in order when this request cannot be allocated on a node (Kubernetes' prioritized
    /// list, `firstAvailable`); each stands on its own (fields it leaves out are not taken from the request).
    /// At most 7; not with `efa` or `ultraServerNodes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[validate(length(max = 7), nested)]
    pub fallbacks: Vec<Fallback>,
}

impl LongContextInference {
    /// The device-request part, shared with the other profile kinds.
    pub fn request(&self) -> DeviceRequest {
        DeviceRequest {
            instance_type: self.instance_type.clone(),
            devices: self.devices,
            logical_neuron_core: self.logical_neuron_core,
            neuron_driver_version: self.neuron_driver_version.clone(),
            efa: self.efa,
            fallbacks: self.fallbacks.clone(),
        }
    }
}

fn validate_ultra_server_nodes(nodes: u8) -> Result<(), validator::ValidationError> {
    match nodes {
        1 | 2 | 4 => Ok(()),
        _ => Err(validator::ValidationError::new("enum").with_message("must be 1, 2 or 4".into())),
    }
}

/// CEL for "no `fallbacks` together with `efa: true`".
const NO_FALLBACKS_WITH_EFA: &str = "!has(self.fallbacks) || size(self.fallbacks) == 0 || !has(self.efa) || !self.efa";
/// Why: the EFA request would have to follow whichever alternative the scheduler picks, and one constraint
/// cannot align it with each of them.
pub const FALLBACKS_WITH_EFA: &str =
    "must not be set with efa (the EFA interfaces cannot be aligned with whichever alternative is chosen)";

/// One alternative to a request, as the request itself but without EFA: used when the request (and every
/// fallback before this one) cannot be allocated on a node. It compiles to a `firstAvailable` subrequest with
/// its own selectors, connected-group constraint and Logical NeuronCore config.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fallback {
    /// EC2 instance type the devices must be on, for example `trn1.32xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 63), regex(path = *INSTANCE_TYPE))]
    pub instance_type: Option<String>,

    /// Neuron devices per claim: `All` (the whole node, the default) or 1, 4, 8 or 16 connected devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceCount>,

    /// Logical NeuronCore setting (1 or 2) passed to the driver; only on types that support LNC (Trn2, Trn3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 1, max = 2, message = "must be 1 or 2"))]
    pub logical_neuron_core: Option<u8>,

    /// Host Neuron driver version the devices must run, for example `2.25.4.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = 64), regex(path = *DRIVER_VERSION))]
    pub neuron_driver_version: Option<String>,
}

impl Fallback {
    /// The same choice as a request, for the checks and rules a request goes through.
    pub fn request(&self) -> DeviceRequest {
        DeviceRequest {
            instance_type: self.instance_type.clone(),
            devices: self.devices,
            logical_neuron_core: self.logical_neuron_core,
            neuron_driver_version: self.neuron_driver_version.clone(),
            ..DeviceRequest::default()
        }
    }
}

/// Disaggregated prefill/decode serving.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disaggregated {
    /// The prefill side (template `<name>-prefill`).
    #[validate(nested)]
    pub prefill: DeviceRequest,
    /// The decode side (template `<name>-decode`).
    #[validate(nested)]
    pub decode: DeviceRequest,
}

/// Devices per claim: `All` or a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeviceCount {
    Count(u32),
    All(AllDevices),
}

/// The literal `All`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllDevices {
    All,
}

impl DeviceCount {
    pub const ALL: DeviceCount = DeviceCount::All(AllDevices::All);
    pub const ALLOWED_COUNTS: [u32; 4] = [1, 4, 8, 16];
}

impl JsonSchema for DeviceCount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DeviceCount".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // An enum rather than a CEL rule: CEL over an unbounded int-or-string exceeds the cost budget.
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true,
            "enum": ["All", 1, 4, 8, 16]
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

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

/// One node problem.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeIssue {
    pub node: String,
    /// A CamelCase reason such as NoResourceSlice or LegacyDevicePlugin.
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
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
