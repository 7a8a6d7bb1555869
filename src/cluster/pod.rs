//! Kubelet-plugin pods as the operator reads them: the config and revision labels, the node, and readiness.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::parse::{ConditionView, conditions_of, slim_meta_owned};

/// The label the DaemonSet controller puts on its pods and ControllerRevisions.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// A plugin pod's metadata with the two labels read (its config and its DaemonSet revision) and its controller's
/// uid: labels anyone who may create a pod can copy, so only the DaemonSet's own pods count (`controller_uid`).
fn plugin_pod_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let keep = |key: &str| key == crate::api::labels::LABEL_CONFIG || key == crate::cluster::REVISION_LABEL;
    slim_meta_owned(deserializer, keep, |owners: Option<Vec<OwnerReference>>| {
        let controller = owners?.into_iter().find(|o| o.controller == Some(true))?;
        // Only the uid is read; the rest would cost memory on every pod.
        Some(vec![OwnerReference { uid: controller.uid, controller: Some(true), ..OwnerReference::default() }])
    })
}

/// A bound pod's node is its nodeName; the affinity that pinned it is no longer needed. Its resourceVersion is read
/// by the watch alone, before the cache sees the pod (the uid stays: evictions are conditional on it).
pub fn trim_pod(pod: &mut PodView) {
    pod.metadata.resource_version = None;
    if pod.spec.node_name.is_some() {
        pod.spec.affinity = None;
    }
}

/// A kubelet-plugin Pod: labels, the node it runs on (or is pinned to) and whether it is Ready.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "Pod")]
pub struct PodView {
    #[serde(deserialize_with = "plugin_pod_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpecView,
    #[serde(default)]
    pub status: PodStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView {
    #[serde(default)]
    pub node_name: Option<String>,
    /// Boxed: most pods are bound and hold none, and an unboxed one would take more room than the rest of the pod.
    #[serde(default)]
    pub affinity: Option<Box<k8s_openapi::api::core::v1::Affinity>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PodStatusView {
    /// Only `Ready` is read, so only it is kept.
    #[serde(default, deserialize_with = "ready_only")]
    pub conditions: Vec<ConditionView>,
}

impl PodView {
    pub fn ready(&self) -> bool {
        self.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    }

    /// The uid of the object that controls it (its DaemonSet).
    pub fn controller_uid(&self) -> Option<&str> {
        let owners = self.metadata.owner_references.as_deref()?;
        owners.iter().find(|o| o.controller == Some(true)).map(|o| o.uid.as_str())
    }

    /// The node it runs on, or (unbound) the one its DaemonSet affinity pins it to.
    pub fn node(&self) -> Option<String> {
        if let Some(node) = &self.spec.node_name {
            return Some(node.clone());
        }
        pinned_node(self.spec.affinity.as_ref()?)
    }
}

fn ready_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ConditionView>, D::Error> {
    conditions_of(deserializer, &["Ready"])
}

/// The node a DaemonSet pod's affinity pins it to (the `metadata.name` field the DaemonSet controller requires).
pub fn pinned_node(affinity: &k8s_openapi::api::core::v1::Affinity) -> Option<String> {
    let required = affinity.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref()?;
    let field = required
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name")?;
    field.values.as_ref()?.first().cloned()
}
