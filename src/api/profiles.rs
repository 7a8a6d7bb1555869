//! `spec.profiles`: workload profiles, compiled into ResourceClaimTemplates, and `spec.templates`.

use super::names::{DNS_LABEL, DNS_LABEL_PATTERN, DRIVER_VERSION, INSTANCE_TYPE, validate_namespace_names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

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
#[x_kube(validation = Rule::new(FALLBACKS_KEEP_LNC).message(FALLBACK_CHANGES_LNC).field_path(".fallbacks"))]
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

    /// Lets `fallbacks` run at another Logical NeuronCore setting than the request (say 8 devices at LNC=2, else 4
    /// at LNC=1). Off by default: a model compiled for one LNC does not load at the other, so such a fallback is
    /// refused unless the workload is built for both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_lnc_change: Option<bool>,
}

/// A long-context inference claim: a device request, or `ultraServerNodes` for an UltraServer.
#[derive(KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.ultraServerNodes) || !has(self.devices)").message("must not be set with ultraServerNodes (each pod claims one UltraServer node entry)").field_path(".devices"))]
#[x_kube(validation = Rule::new("!has(self.ultraServerNodes) || !has(self.efa) || !self.efa").message("must not be set with ultraServerNodes").field_path(".efa"))]
#[x_kube(validation = Rule::new("!has(self.ultraServerNodes) || !has(self.fallbacks) || size(self.fallbacks) == 0").message("must not be set with ultraServerNodes").field_path(".fallbacks"))]
#[x_kube(validation = Rule::new(NO_FALLBACKS_WITH_EFA).message(FALLBACKS_WITH_EFA).field_path(".fallbacks"))]
#[x_kube(validation = Rule::new(FALLBACKS_KEEP_LNC).message(FALLBACK_CHANGES_LNC).field_path(".fallbacks"))]
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

    /// Lets `fallbacks` run at another Logical NeuronCore setting than the request (say 8 devices at LNC=2, else 4
    /// at LNC=1). Off by default: a model compiled for one LNC does not load at the other, so such a fallback is
    /// refused unless the workload is built for both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_lnc_change: Option<bool>,
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
            allow_lnc_change: self.allow_lnc_change,
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

/// CEL for "every fallback runs at the request's Logical NeuronCore setting, unless `allowLncChange`". The
/// setting a choice runs at: its `logicalNeuronCore`, else 1 on Trainium1 (`trn1*`, which has only LNC=1), else the
/// driver's default 2; `validate::lnc` applies the same rule.
const FALLBACKS_KEEP_LNC: &str = "(has(self.allowLncChange) && self.allowLncChange) || !has(self.fallbacks) || \
     self.fallbacks.all(f, (has(f.logicalNeuronCore) ? f.logicalNeuronCore : \
     (has(f.instanceType) && f.instanceType.startsWith('trn1') ? 1 : 2)) == \
     (has(self.logicalNeuronCore) ? self.logicalNeuronCore : \
     (has(self.instanceType) && self.instanceType.startsWith('trn1') ? 1 : 2)))";
/// Why: a model compiled for one Logical NeuronCore setting does not load at another.
pub const FALLBACK_CHANGES_LNC: &str = "a fallback must keep the request's Logical NeuronCore setting (a model \
     compiled for one LNC does not load at another); set allowLncChange: true if the workload is built for both";

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
