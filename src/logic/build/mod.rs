//! build (pure): a `ValidatedConfig` to every object the operator applies. `render` prints exactly this.

mod device_class;
mod driver;
pub mod kueue;
mod order;
mod quotas;
mod templates;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::Serialize;

use crate::api::NeuronDRAConfig;
use crate::api::labels::{LABEL_CONFIG, LABEL_MANAGED_BY, LABEL_SHARED, MANAGER};
use crate::logic::validate::ValidatedConfig;

pub use device_class::{
    NEURON_DRIVER, ULTRA_SERVER_NODES_PREFIX, device_class, extended_resource_class, ultra_server_node_class,
    ultra_server_node_class_name,
};
pub use driver::{PLUGIN_CLUSTER_ROLE, cluster_role_binding, daemon_set, namespace, plugin_name, service_account};
pub use order::{Object, Stage};
pub use quotas::{Allowance, device_quota_key, named_budgets, quota_name, resource_quota};
pub use templates::{
    EFA_DEVICE_CLASS, EFA_DRIVER, EFA_PCI_DEVICE, OwnClasses, REQUEST_EFA, REQUEST_NEURONS, SUBREQUEST_FALLBACK,
    SUBREQUEST_PREFERRED, efa_templates, resource_claim_template, subrequest_name, template_spec,
};

/// Everything one config asks for (`in_order` gives the apply order).
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub namespace: Namespace,
    pub service_account: ServiceAccount,
    /// The plugin's rights: the installed ClusterRole `PLUGIN_CLUSTER_ROLE`, bound to its ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
    pub device_class: DeviceClass,
    /// The DeviceClass that serves `extendedResourceName`, when the spec names one.
    pub extended_resource_class: Option<DeviceClass>,
    /// The DeviceClass of UltraServer node entries, `ultraserver-nodes.<deviceClassName>`.
    pub ultra_server_node_class: DeviceClass,
    pub daemon_set: DaemonSet,
    /// Sorted by namespace, then in profile order.
    pub templates: Vec<ResourceClaimTemplate>,
    /// The device budgets (`spec.quotas`), by namespace.
    pub quotas: Vec<ResourceQuota>,
}

/// Builds every object for `config`, with templates in each of `namespaces` and no budgets (`with_quotas` adds them),
/// its DeviceClasses the ones the templates name (`build_with` for a cluster where they may be another tool's).
pub fn build(config: &ValidatedConfig, namespaces: &[String]) -> Desired {
    build_with(config, namespaces, OwnClasses::BOTH)
}

/// `build`, the templates shaped for the classes `own` says are the operator's.
pub fn build_with(config: &ValidatedConfig, namespaces: &[String], own: OwnClasses) -> Desired {
    let mut namespaces: Vec<&String> = namespaces.iter().collect();
    namespaces.sort();
    namespaces.dedup();
    let templates = namespaces
        .into_iter()
        .flat_map(|ns| config.claims.iter().map(move |claim| resource_claim_template(config, claim, ns, own)))
        .collect();
    Desired {
        namespace: namespace(config),
        service_account: service_account(config),
        cluster_role_binding: cluster_role_binding(config),
        device_class: device_class(config),
        extended_resource_class: extended_resource_class(config),
        ultra_server_node_class: ultra_server_node_class(config),
        daemon_set: daemon_set(config),
        templates,
        quotas: Vec::new(),
    }
}

impl Desired {
    /// Adds a ResourceQuota for each `(namespace, allowance)` budget (a bare number is devices alone).
    pub fn with_quotas<A: Copy + Into<Allowance>>(
        mut self,
        config: &ValidatedConfig,
        budgets: &[(String, A)],
    ) -> Desired {
        self.quotas =
            budgets.iter().map(|(namespace, budget)| resource_quota(config, namespace, (*budget).into())).collect();
        self
    }
}

/// Labels on objects that belong to one config.
pub fn config_labels(config: &ValidatedConfig) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGER.to_string()),
        (LABEL_CONFIG.to_string(), config.name.clone()),
    ])
}

/// Labels on objects that several configs may share.
pub fn shared_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGER.to_string()),
        (LABEL_SHARED.to_string(), "true".to_string()),
    ])
}

/// Owner reference to the config; absent when rendering offline (no uid yet). Shared objects get a
/// non-controller reference from each config, so garbage collection keeps them until the last owner goes.
fn owner_references(config: &ValidatedConfig, controller: bool) -> Option<Vec<OwnerReference>> {
    let uid = config.uid.clone()?;
    Some(vec![OwnerReference {
        api_version: NeuronDRAConfig::api_version(&()).into_owned(),
        kind: NeuronDRAConfig::kind(&()).into_owned(),
        name: config.name.clone(),
        uid,
        controller: Some(controller),
        block_owner_deletion: Some(true),
    }])
}

/// Metadata of an object that belongs to one config.
pub fn owned_meta(config: &ValidatedConfig, name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(config_labels(config)),
        owner_references: owner_references(config, true),
        ..ObjectMeta::default()
    }
}

/// Metadata of an object that several configs may share.
fn shared_meta(config: &ValidatedConfig, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(shared_labels()),
        owner_references: owner_references(config, false),
        ..ObjectMeta::default()
    }
}

/// First 16 hex characters of the SHA-256 of a value's JSON form.
pub fn short_hash(value: &impl Serialize) -> String {
    use sha2::{Digest, Sha256};
    let bytes = serde_json::to_vec(value).expect("k8s objects serialize");
    hex::encode(&Sha256::digest(bytes)[..8])
}

#[cfg(test)]
mod tests;
