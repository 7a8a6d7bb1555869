//! What every view shares while it is parsed: the slim metadata it keeps and the conditions it keeps.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

/// A condition as a view keeps it (a node's hardware health, a pod's readiness).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// When the status last changed: remediation serves the oldest problem first.
    #[serde(default, rename = "lastTransitionTime", skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// What a view keeps of an object's metadata: identity, generation, times and the labels `keep_label` names.
/// Managed fields, annotations and owner references (most of an object's bytes) are skipped while parsing, never
/// built.
pub(super) fn slim_meta<'de, D: Deserializer<'de>>(
    deserializer: D,
    keep_label: fn(&str) -> bool,
) -> Result<ObjectMeta, D::Error> {
    slim_meta_owned::<D, serde::de::IgnoredAny>(deserializer, keep_label, |_| None)
}

/// `slim_meta`, keeping what `owners` makes of the owner references (`O`; `IgnoredAny` skips them).
pub(super) fn slim_meta_owned<'de, D, O>(
    deserializer: D,
    keep_label: fn(&str) -> bool,
    owners: fn(O) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
) -> Result<ObjectMeta, D::Error>
where
    D: Deserializer<'de>,
    O: Deserialize<'de> + Default,
{
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept<O> {
        #[serde(default)]
        owner_references: O,
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        creation_timestamp: Option<Time>,
        deletion_timestamp: Option<Time>,
    }
    let kept = Kept::<O>::deserialize(deserializer)?;
    let labels = kept.labels.map(|mut labels| {
        labels.retain(|key, _| keep_label(key));
        labels
    });
    Ok(ObjectMeta {
        name: kept.name,
        namespace: kept.namespace,
        uid: kept.uid,
        resource_version: kept.resource_version,
        generation: kept.generation,
        labels: labels.filter(|labels| !labels.is_empty()),
        creation_timestamp: kept.creation_timestamp,
        deletion_timestamp: kept.deletion_timestamp,
        owner_references: owners(kept.owner_references),
        ..ObjectMeta::default()
    })
}

/// Metadata with every label (nodes and claims are selected by any label).
pub(super) fn meta_with_labels<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |_| true)
}

/// Metadata without labels (a slice is found by driver and node, never by label).
pub(super) fn meta_without_labels<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |_| false)
}

pub(super) fn conditions_of<'de, D: Deserializer<'de>>(
    deserializer: D,
    types: &[&str],
) -> Result<Vec<ConditionView>, D::Error> {
    let mut conditions = Option::<Vec<ConditionView>>::deserialize(deserializer)?.unwrap_or_default();
    conditions.retain(|c| types.contains(&c.type_.as_str()));
    conditions.shrink_to_fit();
    Ok(conditions)
}
