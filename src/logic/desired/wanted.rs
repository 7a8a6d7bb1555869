//! Every object one config asks for, gathered from the builders of each kind.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};

use super::device_class::{device_class, extended_resource_class, ultra_server_node_class};
use super::driver::{cluster_role_binding, daemon_set, namespace, service_account};
use super::quotas::{Allowance, resource_quota};
use super::templates::{OwnClasses, resource_claim_template};
use super::whole_node::Allocator;
use crate::logic::validate::ValidatedConfig;

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
/// its DeviceClasses the ones the templates name, the templates in the form every supported server allocates quickly
/// (`build_with` for a cluster where the classes may be another tool's, or whose scheduler is known).
pub fn build(config: &ValidatedConfig, namespaces: &[String]) -> Desired {
    build_with(config, namespaces, OwnClasses::BOTH, Allocator::default())
}

/// `build`, the templates shaped for the classes `own` says are the operator's and for the server's `allocator`.
pub fn build_with(config: &ValidatedConfig, namespaces: &[String], own: OwnClasses, allocator: Allocator) -> Desired {
    let mut namespaces: Vec<&String> = namespaces.iter().collect();
    namespaces.sort();
    namespaces.dedup();
    let templates = namespaces
        .into_iter()
        .flat_map(|ns| {
            config.claims.iter().map(move |claim| resource_claim_template(config, claim, ns, own, allocator))
        })
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
