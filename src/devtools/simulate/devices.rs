//! `simulate devices`: the Neuron devices the simulated fleet publishes, as JSON and without a cluster, so the
//! stand-in kubelet plugin (images/neuron-plugin, docs/standin-plugin.md) bakes them into its image instead of
//! holding a second copy of the model.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::Device;

use super::fleet::{self, FleetSpec};
use crate::logic::catalog::TRAINIUM_TYPES;

/// The devices node `prefix-index` of each instance type publishes (every Trainium type when `instance_type` is
/// `None`), keyed by type.
pub fn by_instance_type(instance_type: Option<&str>, prefix: &str, index: usize) -> BTreeMap<String, Vec<Device>> {
    let types: Vec<&str> = match instance_type {
        Some(name) => vec![name],
        None => TRAINIUM_TYPES.iter().map(|t| t.name).collect(),
    };
    types
        .into_iter()
        .map(|name| {
            let spec = FleetSpec {
                prefix: prefix.to_string(),
                count: index + 1,
                instance_type: name.to_string(),
                dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
                neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
                kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
            };
            (name.to_string(), fleet::devices(&spec, index))
        })
        .collect()
}

#[cfg(test)]
mod tests;
