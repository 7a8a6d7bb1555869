//! The metadata every built object carries: labels, owner references to the config, and the spec hash.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::Serialize;

use crate::api::NeuronDRAConfig;
use crate::api::labels::{LABEL_CONFIG, LABEL_MANAGED_BY, LABEL_SHARED, MANAGER};
use crate::logic::validate::ValidatedConfig;

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
pub(super) fn shared_meta(config: &ValidatedConfig, name: &str) -> ObjectMeta {
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
