//! `quotas`: a device budget per team namespace, written as a ResourceQuota, and what each team uses of it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

use super::{DNS_LABEL_PATTERN, validate_namespace_names};

/// A device budget: every namespace it names or selects gets its own ResourceQuota
/// `neuron-dra-<config>`, which caps the Neuron devices that claims in that namespace may hold at once.
#[derive(KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("size(self.namespaces) > 0 || has(self.namespaceSelector)").message("set namespaces, namespaceSelector or both"))]
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

    /// Neuron devices that the claims of one namespace may hold at once. Kubernetes charges a claim when it is
    /// created: a request for N devices counts N, an `All` request counts 32 (the most one claim can hold), and a
    /// request with fallbacks counts its largest alternative. A claim that would pass the budget is refused.
    #[validate(range(min = 0, max = 1000000))]
    #[schemars(range(min = 0, max = 1000000))]
    pub devices: i64,
}

/// One team namespace's budget, use and room.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamStatus {
    pub namespace: String,
    /// The budget, in Neuron devices.
    pub hard: i64,
    /// Devices the namespace's claims hold, as the ResourceQuota reports it (absent until Kubernetes counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<i64>,
    /// Per template: how many more claims fit both the budget's room and the cluster's room.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub room: Vec<TeamRoom>,
}

/// Room for one template in one team namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamRoom {
    pub template: String,
    /// Devices one claim of it is charged.
    pub charge: i64,
    /// Claims of it that still fit: the smaller of the budget's room (`(hard - used) / charge`) and the cluster's
    /// (`profiles[].capacity[].available`).
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
