//! quotas: a team namespace's device budget as a ResourceQuota. Kubernetes charges each ResourceClaim, when it is
//! created, against `<class>.deviceclass.resource.k8s.io/devices` for every DeviceClass it asks for (1.34 and
//! later); pods that ask for an extended resource are charged `requests.<name>`, and the claim the scheduler makes
//! for them counts against their class's key too. docs/teams.md has the sources.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::owned_meta;
use crate::logic::validate::ValidatedConfig;

/// The ResourceQuota key that counts the devices claimed from one DeviceClass.
pub fn device_quota_key(class: &str) -> String {
    format!("{class}.deviceclass.resource.k8s.io/devices")
}

/// The name of a config's ResourceQuota in each team namespace.
pub fn quota_name(config: &str) -> String {
    format!("neuron-dra-{config}")
}

/// The budget of `devices` in `namespace`: the devices of claims from the config's DeviceClass; with
/// `extendedResourceName`, the same again for pods that ask for the extended resource (their class, and the
/// resource itself). No scope: Kubernetes never matches a scoped quota against ResourceClaims.
pub fn resource_quota(config: &ValidatedConfig, namespace: &str, devices: i64) -> ResourceQuota {
    let class = &config.spec.device_class_name;
    let mut keys = vec![device_quota_key(class)];
    if let Some(resource) = &config.spec.extended_resource_name {
        keys.push(device_quota_key(&format!("devices.{class}")));
        keys.push(format!("requests.{resource}"));
    }
    let hard: BTreeMap<String, Quantity> = keys.into_iter().map(|key| (key, Quantity(devices.to_string()))).collect();
    ResourceQuota {
        metadata: owned_meta(config, &quota_name(&config.name), Some(namespace)),
        spec: Some(ResourceQuotaSpec { hard: Some(hard), ..ResourceQuotaSpec::default() }),
        status: None,
    }
}

/// The namespaces that budgets name, each with the first budget that names it, sorted by namespace (what the
/// operator writes as ResourceQuotas without asking the cluster: a selector needs it).
pub fn named_budgets(config: &ValidatedConfig) -> Vec<(String, i64)> {
    let mut budgets: Vec<(String, i64)> = Vec::new();
    for quota in &config.spec.quotas {
        for namespace in &quota.namespaces {
            if !budgets.iter().any(|(known, _)| known == namespace) {
                budgets.push((namespace.clone(), quota.devices));
            }
        }
    }
    budgets.sort();
    budgets
}
