//! ResourceClaims as the operator reads them: labels, the allocated devices and the pods that reserve them.

use std::hash::Hash;

use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};

use super::parse::meta_with_labels;

/// A ResourceClaim: its labels (generated claims carry their template's) and what it holds now: the allocated
/// devices and the pods that reserve it. Every claim in the cluster is cached, so only this much is kept.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "ResourceClaim")]
pub struct ClaimView {
    #[serde(deserialize_with = "meta_with_labels")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: ClaimStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatusView {
    #[serde(default)]
    pub allocation: Option<AllocationView>,
    #[serde(default)]
    pub reserved_for: Vec<ConsumerView>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct AllocationView {
    #[serde(default)]
    pub devices: AllocatedDevicesView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct AllocatedDevicesView {
    #[serde(default)]
    pub results: Vec<AllocatedDeviceView>,
}

/// One allocated device: its driver, pool (the node, for node-local drivers) and name, and whether the claim has
/// it with `adminAccess` (monitoring or maintenance: the device stays free for ordinary claims).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct AllocatedDeviceView {
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ConsumerView {
    #[serde(default)]
    pub resource: String,
    pub name: String,
}

impl ClaimView {
    /// The devices the claim holds (none when it is not allocated).
    pub fn devices(&self) -> &[AllocatedDeviceView] {
        self.status.allocation.as_ref().map(|a| a.devices.results.as_slice()).unwrap_or_default()
    }

    /// The devices the claim takes from others: all it holds but those allocated with `adminAccess` (the scheduler
    /// still hands those to ordinary claims).
    pub fn taken_devices(&self) -> impl Iterator<Item = &AllocatedDeviceView> {
        self.devices().iter().filter(|d| d.admin_access != Some(true))
    }

    /// The pods that reserve the claim, as `namespace/name`.
    pub fn pods(&self) -> Vec<String> {
        let namespace = self.metadata.namespace.as_deref().unwrap_or_default();
        self.status
            .reserved_for
            .iter()
            .filter(|c| c.resource == "pods")
            .map(|c| format!("{namespace}/{}", c.name))
            .collect()
    }
}
