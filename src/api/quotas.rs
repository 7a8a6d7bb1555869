//! `quotas`: a device budget per team namespace, written as a ResourceQuota, and what each team uses of it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

use super::names::{DNS_LABEL_PATTERN, validate_namespace_names};

/// The CEL rule that keeps a budget's UltraServer node entries within its devices. 16 is the devices one node entry
/// stands for (`catalog::ULTRA_SERVER_NODE_DEVICES`, which a test holds it to; the API layer cannot read the catalog).
pub const NODE_ENTRIES_WITHIN_DEVICES: &str =
    "!has(self.ultraServerNodes) || self.ultraServerNodes * 16 <= self.devices";
/// Its message, also validation's (`render`).
pub const NODE_ENTRIES_OVER_DEVICES: &str =
    "each UltraServer node entry takes 16 of the budget's devices: set devices to at least 16 x ultraServerNodes";

/// A device budget: every namespace it names or selects gets its own ResourceQuota
/// `neuron-dra-<config>`, which caps the Neuron devices that claims in that namespace may hold at once.
#[derive(KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("size(self.namespaces) > 0 || has(self.namespaceSelector)").message("set namespaces, namespaceSelector or both"))]
#[x_kube(validation = Rule::new(NODE_ENTRIES_WITHIN_DEVICES).message(NODE_ENTRIES_OVER_DEVICES).field_path(".ultraServerNodes"))]
pub struct DeviceQuota {
    /// Namespaces that get this budget, each its own. A namespace that does not exist yet gets it once created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(pattern = DNS_LABEL_PATTERN), length(max = 63)))]
    #[validate(length(max = 1000), custom(function = "validate_namespace_names"))]
    pub namespaces: Vec<String>,

    /// Every namespace whose labels match also gets this budget, and loses it when it stops matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Neuron devices that the claims of one namespace may hold at once, UltraServer node entries included.
    /// Kubernetes charges a claim when it is created: a request for N devices counts N, an `All` request counts 32
    /// (the most one claim can hold), and a request with fallbacks counts its largest alternative. A claim that
    /// would pass the budget is refused.
    #[validate(range(min = 0, max = 1000000))]
    #[schemars(range(min = 0, max = 1000000))]
    pub devices: i64,

    /// How many UltraServer node entries (`ultraServerNodes` profiles; each a whole node of 16 devices) the
    /// namespace's claims may hold at once, carved out of `devices`: claims of devices get `devices - 16 x
    /// ultraServerNodes`. Absent: none, and a claim of a node entry is refused. Kubernetes' quota counts a node entry
    /// as one, whatever it holds, so node entries are claimed from their own DeviceClass
    /// (`ultraserver-nodes.<deviceClassName>`) and capped on its quota key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[validate(range(min = 0, max = 62500))]
    #[schemars(range(min = 0, max = 62500))]
    pub ultra_server_nodes: Option<i64>,
}

/// One team namespace's budget, use and room.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamStatus {
    pub namespace: String,
    /// The budget, in Neuron devices.
    pub hard: i64,
    /// Devices the namespace's claims hold, as the ResourceQuota reports it, each UltraServer node entry as 16
    /// devices (absent until Kubernetes counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<i64>,
    /// The UltraServer node entries the budget carves out of `hard`, and those held (absent when it gives none and
    /// none are held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ultra_server_nodes: Option<TeamNodeEntries>,
    /// Per template: how many more claims fit both the budget's room and the cluster's room.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub room: Vec<TeamRoom>,
}

/// A team's UltraServer node entries: its budget's and those its claims hold.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamNodeEntries {
    /// Node entries the budget gives (`ultraServerNodes`).
    pub hard: i64,
    /// Node entries the namespace's claims hold, as the ResourceQuota reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<i64>,
}

/// Room for one template in one team namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamRoom {
    pub template: String,
    /// Devices one claim of it is charged (16 per UltraServer node entry).
    pub charge: i64,
    /// Claims of it that still fit: the smaller of the budget's room and the cluster's
    /// (`profiles[].capacity[].available`). The budget's room is, for a claim of devices, the devices left outside
    /// the node entries divided by `charge`; for a claim of a node entry, the node entries left.
    pub fits: i64,
}

/// Totals over the team namespaces.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamSummary {
    /// Namespaces with a budget.
    pub namespaces: i64,
    /// Of them, those whose claims hold their whole budget.
    pub at_quota: i64,
}
