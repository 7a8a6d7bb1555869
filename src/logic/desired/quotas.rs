//! quotas: a team namespace's device budget as a ResourceQuota. Kubernetes charges each ResourceClaim, when it is
//! created, against `<class>.deviceclass.resource.k8s.io/devices` for every DeviceClass it asks for (1.34 and
//! later); pods that ask for an extended resource are charged `requests.<name>`, and the claim the scheduler makes
//! for them counts against their class's key too. A quota counts requested devices per class and cannot weight
//! them, so UltraServer node entries, each a whole node, have a class and a key of their own, and a budget carves
//! them out of its devices. docs/teams.md has the sources.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::device_class::ultra_server_node_class_name;
use super::meta::owned_meta;
use crate::api::DeviceQuota;
use crate::logic::catalog::ULTRA_SERVER_NODE_DEVICES;
use crate::logic::validate::ValidatedConfig;

/// The ResourceQuota key that counts the devices claimed from one DeviceClass.
pub fn device_quota_key(class: &str) -> String {
    format!("{class}.deviceclass.resource.k8s.io/devices")
}

/// The name of a config's ResourceQuota in each team namespace.
pub fn quota_name(config: &str) -> String {
    format!("neuron-dra-{config}")
}

/// One namespace's budget as the spec gives it: `devices` in all, of which `ultra_server_nodes` node entries (each
/// `ULTRA_SERVER_NODE_DEVICES` devices) are held on the node entries' key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Allowance {
    pub devices: i64,
    pub ultra_server_nodes: i64,
}

impl Allowance {
    pub fn of(quota: &DeviceQuota) -> Allowance {
        Allowance { devices: quota.devices, ultra_server_nodes: quota.ultra_server_nodes.unwrap_or(0) }
    }

    /// What is left for claims of devices once the node entries are carved out (validation keeps it at least 0).
    pub fn device_claims(&self) -> i64 {
        (self.devices - self.ultra_server_nodes * ULTRA_SERVER_NODE_DEVICES).max(0)
    }
}

/// A budget of devices alone.
impl From<i64> for Allowance {
    fn from(devices: i64) -> Allowance {
        Allowance { devices, ultra_server_nodes: 0 }
    }
}

/// The budget `allowance` in `namespace`: the devices of claims from the config's DeviceClass (`devices` less the
/// node entries' devices); the node entries of claims from `ultraserver-nodes.<class>` (0 unless the budget gives
/// some: a key left out would not cap at all); with `extendedResourceName`, the devices again for pods that ask for
/// the extended resource (their class, and the resource itself). No scope: Kubernetes never matches a scoped quota
/// against ResourceClaims.
pub fn resource_quota(config: &ValidatedConfig, namespace: &str, allowance: Allowance) -> ResourceQuota {
    let class = &config.spec.device_class_name;
    let devices = allowance.device_claims();
    let mut hard = vec![
        (device_quota_key(class), devices),
        (device_quota_key(&ultra_server_node_class_name(class)), allowance.ultra_server_nodes),
    ];
    if let Some(resource) = &config.spec.extended_resource_name {
        hard.push((device_quota_key(&format!("devices.{class}")), devices));
        hard.push((format!("requests.{resource}"), devices));
    }
    let hard: BTreeMap<String, Quantity> =
        hard.into_iter().map(|(key, value)| (key, Quantity(value.to_string()))).collect();
    ResourceQuota {
        metadata: owned_meta(config, &quota_name(&config.name), Some(namespace)),
        spec: Some(ResourceQuotaSpec { hard: Some(hard), ..ResourceQuotaSpec::default() }),
        status: None,
    }
}

/// Every key `resource_quota` sets for `config`: its classes' devices (and node entries) and its extended resource.
pub fn quota_keys(config: &ValidatedConfig) -> Vec<String> {
    let zero = resource_quota(config, "", Allowance::default());
    zero.spec.and_then(|spec| spec.hard).map(|hard| hard.into_keys().collect()).unwrap_or_default()
}

/// Caps each of `keys` the quota does not already set at 0 (#50.4): every class the operator manages selects Neuron
/// devices, and a class no key names is claimed outside the budget. `keys` are another config's (`quota_keys`),
/// for a namespace that config gives no budget: where it does, its own quota caps them, and a 0 here would
/// override it (Kubernetes enforces every quota of a namespace).
pub fn cap_at_zero(quota: &mut ResourceQuota, keys: &[String]) {
    let hard = quota.spec.get_or_insert_default().hard.get_or_insert_default();
    for key in keys {
        hard.entry(key.clone()).or_insert_with(|| Quantity("0".into()));
    }
}

/// The namespaces that budgets name, each with the first budget that names it, sorted by namespace (what the
/// operator writes as ResourceQuotas without asking the cluster: a selector needs it).
pub fn named_budgets(config: &ValidatedConfig) -> Vec<(String, Allowance)> {
    let mut budgets: Vec<(String, Allowance)> = Vec::new();
    for quota in &config.spec.quotas {
        for namespace in &quota.namespaces {
            if !budgets.iter().any(|(known, _)| known == namespace) {
                budgets.push((namespace.clone(), Allowance::of(quota)));
            }
        }
    }
    budgets.sort_by(|a, b| a.0.cmp(&b.0));
    budgets
}
