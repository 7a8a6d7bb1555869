//! Compact views of the objects the operator watches by the thousand (Nodes, ResourceSlices, plugin Pods, claims):
//! only what health, capacity, rollout and node selection read is parsed and cached. A full k8s-openapi
//! ResourceSlice of 16 devices costs ~25 KiB in memory (every device carries a map of attributes); its view under
//! 1 KiB, a pointer per device. Managed fields, annotations, owner references, labels nothing selects on and
//! conditions nothing reads are skipped while parsing (never built), and what thousands of devices share (names,
//! types, versions, whole devices alike on many nodes) is held once per process.

mod claim;
mod node;
mod pod;
mod shared;
mod slice;
pub mod taint_rule;

pub use claim::*;
pub use node::*;
pub use pod::*;
pub use shared::Shared;
pub use slice::*;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

/// Drops what the operator never reads from an object's metadata (for kinds that are not views).
pub fn trim_meta<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
}

/// What a view keeps of an object's metadata: identity, generation, times and the labels `keep_label` names.
/// Managed fields, annotations and owner references (most of an object's bytes) are skipped while parsing, never
/// built.
fn slim_meta<'de, D: Deserializer<'de>>(deserializer: D, keep_label: fn(&str) -> bool) -> Result<ObjectMeta, D::Error> {
    slim_meta_owned::<D, serde::de::IgnoredAny>(deserializer, keep_label, |_| None)
}

/// `slim_meta`, keeping what `owners` makes of the owner references (`O`; `IgnoredAny` skips them).
fn slim_meta_owned<'de, D, O>(
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
fn meta_with_labels<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |_| true)
}

/// Metadata without labels (a slice is found by driver and node, never by label).
fn meta_without_labels<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |_| false)
}

fn conditions_of<'de, D: Deserializer<'de>>(deserializer: D, types: &[&str]) -> Result<Vec<ConditionView>, D::Error> {
    let mut conditions = Option::<Vec<ConditionView>>::deserialize(deserializer)?.unwrap_or_default();
    conditions.retain(|c| types.contains(&c.type_.as_str()));
    conditions.shrink_to_fit();
    Ok(conditions)
}

/// A view from a full object (tests, the simulator): through its JSON form, as the watch would.
pub fn view_of<Full: Serialize, View: serde::de::DeserializeOwned>(full: &Full) -> View {
    serde_json::from_value(serde_json::to_value(full).expect("serializes")).expect("a view reads any full object")
}

/// Views of the full kinds, for tests.
pub fn slice_view(slice: &ResourceSlice) -> SliceView {
    view_of(slice)
}
pub fn node_view(node: &Node) -> NodeView {
    view_of(node)
}
pub fn pod_view(pod: &Pod) -> PodView {
    view_of(pod)
}

#[cfg(test)]
mod tests;
