//! Compact views of the objects the operator watches by the thousand (Nodes, ResourceSlices, plugin Pods, claims):
//! only what health, capacity, rollout and node selection read is parsed and cached. A full k8s-openapi
//! ResourceSlice of 16 devices costs ~25 KiB in memory (every device carries a map of attributes); its view under
//! 1 KiB, a pointer per device. Managed fields, annotations, owner references, labels nothing selects on and
//! conditions nothing reads are skipped while parsing (never built), and what thousands of devices share (names,
//! types, versions, whole devices alike on many nodes) is held once per process.

mod claim;
mod node;
mod parse;
mod pod;
mod shared;
mod slice;
pub mod taint_rule;

pub use claim::*;
pub use node::*;
pub use parse::ConditionView;
pub use pod::*;
pub use shared::Shared;
pub use slice::*;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Resource;
use serde::Serialize;

/// Drops what the operator never reads from an object's metadata (for kinds that are not views).
pub fn trim_meta<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
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
