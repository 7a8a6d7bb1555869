//! desired (pure): a `ValidatedConfig` to every object the operator applies. `render` prints exactly this. Each kind
//! has its builder module, all on `meta`'s labels and owner references; `wanted` gathers one config's objects.

mod device_class;
mod driver;
pub mod kueue;
mod meta;
mod order;
mod quotas;
mod templates;
mod wanted;
mod whole_node;

pub use device_class::{
    NEURON_DRIVER, ULTRA_SERVER_NODES_PREFIX, device_class, extended_resource_class, ultra_server_node_class,
    ultra_server_node_class_name,
};
pub use driver::{PLUGIN_CLUSTER_ROLE, cluster_role_binding, daemon_set, namespace, plugin_name, service_account};
pub use meta::{config_labels, owned_meta, shared_labels, short_hash};
pub use order::{Object, Stage};
pub use quotas::{Allowance, cap_at_zero, device_quota_key, named_budgets, quota_keys, quota_name, resource_quota};
pub use templates::{
    EFA_DEVICE_CLASS, EFA_DRIVER, EFA_PCI_DEVICE, OwnClasses, REQUEST_EFA, REQUEST_NEURONS, SUBREQUEST_FALLBACK,
    SUBREQUEST_PREFERRED, efa_templates, resource_claim_template, subrequest_name, template_spec,
};
pub use wanted::{Desired, build, build_with};
pub use whole_node::{Allocator, VERSION_RECHECK, WholeNode, changes_with_the_allocator, whole_node};

#[cfg(test)]
mod tests;
