//! Nodes as the operator reads them: labels, the hardware-health conditions, the legacy device plugin's resources and
//! the kubelet version.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize};

use super::parse::{ConditionView, conditions_of, meta_with_labels};
use super::shared::{Shared, interned_str};

/// The Neuron node problem detector's condition (True: a problem).
pub const NEURON_HEALTH: &str = "NeuronHealth";
/// What the legacy Neuron device plugin advertises in a node's allocatable.
pub const LEGACY_DEVICE_PLUGIN_RESOURCES: [&str; 2] = ["aws.amazon.com/neuron", "aws.amazon.com/neuroncore"];
/// The EKS node monitoring agent's condition for GPUs and Neuron devices (False: a problem).
pub const ACCELERATED_HARDWARE_READY: &str = "AcceleratedHardwareReady";

/// The kubelet's condition: Unknown once the node-lifecycle controller has heard nothing for its grace period.
pub const NODE_READY: &str = "Ready";

/// A Node: labels (in metadata) and what its kubelet and node problem detector report.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "Node")]
pub struct NodeView {
    #[serde(deserialize_with = "meta_with_labels")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: NodeStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatusView {
    /// Only whether the legacy device plugin's resources are there is read: only their keys are kept.
    #[serde(default, deserialize_with = "legacy_keys_only")]
    pub allocatable: Vec<String>,
    /// Only the hardware-health conditions health and remediation read are kept, and `Ready` when it is not True
    /// (a node's other conditions, with their messages, would cost more than the rest of its view).
    #[serde(default, deserialize_with = "health_conditions_only")]
    pub conditions: Vec<ConditionView>,
    #[serde(default)]
    pub node_info: NodeInfoView,
}

impl NodeView {
    /// The node's `Ready` condition when it is not True (a stopped or unreachable kubelet, a failing runtime): its
    /// devices take no new pods (the node-lifecycle controller taints it) and its running pods are being evicted.
    pub fn not_ready(&self) -> Option<&ConditionView> {
        self.status.conditions.iter().find(|c| c.type_ == NODE_READY)
    }
}

impl ConditionView {
    /// Whether this node condition reports a Neuron hardware problem: `NeuronHealth=True` (node problem detector)
    /// or `AcceleratedHardwareReady=False` (EKS node monitoring agent). Health lists it, remediation acts on it.
    pub fn reports_hardware_problem(&self) -> bool {
        (self.type_ == NEURON_HEALTH && self.status == "True")
            || (self.type_ == ACCELERATED_HARDWARE_READY && self.status == "False")
    }

    /// Whether this is one of the two Neuron hardware conditions, whatever it says.
    pub fn is_hardware_condition(&self) -> bool {
        self.type_ == NEURON_HEALTH || self.type_ == ACCELERATED_HARDWARE_READY
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfoView {
    /// The same on most nodes of a fleet: held once.
    #[serde(default, deserialize_with = "interned_str")]
    pub kubelet_version: Shared,
}

fn health_conditions_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ConditionView>, D::Error> {
    let mut conditions = conditions_of(deserializer, &[NEURON_HEALTH, ACCELERATED_HARDWARE_READY, NODE_READY])?;
    conditions.retain(|c| c.type_ != NODE_READY || c.status != "True");
    Ok(conditions)
}

fn legacy_keys_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let map: Option<BTreeMap<String, IgnoredAny>> = Option::deserialize(deserializer)?;
    let legacy = |key: &String| crate::cluster::LEGACY_DEVICE_PLUGIN_RESOURCES.contains(&key.as_str());
    Ok(map.map(|m| m.into_keys().filter(legacy).collect()).unwrap_or_default())
}
