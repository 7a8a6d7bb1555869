//! nodes (pure): which nodes a config's kubelet plugin runs on and counts for health. One rule, in two forms: the
//! DaemonSet's node affinity (the scheduler applies it) and `NodeFilter` (conflicts, health and the simulator apply
//! it to cached nodes). A table test keeps the two in agreement.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::api::NeuronDRAConfigSpec;
use crate::logic::catalog::{self, InstanceType, TRAINIUM_TYPES};

/// The well-known label kubelets set from the EC2 instance type.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// EKS's compute-type label: Fargate, hybrid and Auto Mode nodes cannot run a privileged host-path plugin.
pub const COMPUTE_TYPE_LABEL: &str = "eks.amazonaws.com/compute-type";
pub const EXCLUDED_COMPUTE_TYPES: [&str; 3] = ["fargate", "hybrid", "auto"];

/// The catalog row of a node's instance type, when it is a supported Trainium type.
pub fn instance_type(labels: &BTreeMap<String, String>) -> Option<&'static InstanceType> {
    labels.get(INSTANCE_TYPE_LABEL).and_then(|t| catalog::lookup(t))
}

/// Whether a label selector matches; a selector that cannot be parsed matches nothing (validation reports it).
pub fn selector_matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    match selector {
        None => true,
        Some(selector) => Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels)),
    }
}

/// The selection rule over a node's labels: a supported Trainium type, not an excluded compute type, and matching
/// `nodeSelector`. The selector is parsed once, for many nodes.
pub struct NodeFilter {
    /// None: every node; Some(None): a selector that cannot be parsed, which matches nothing.
    selector: Option<Option<Selector>>,
}

impl NodeFilter {
    pub fn new(spec: &NeuronDRAConfigSpec) -> Self {
        Self { selector: spec.node_selector.as_ref().map(|s| Selector::try_from(s.clone()).ok()) }
    }

    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        let excluded = labels.get(COMPUTE_TYPE_LABEL).is_some_and(|c| EXCLUDED_COMPUTE_TYPES.contains(&c.as_str()));
        let selected = match &self.selector {
            None => true,
            Some(selector) => selector.as_ref().is_some_and(|s| s.matches(labels)),
        };
        instance_type(labels).is_some() && !excluded && selected
    }
}

fn requirement(key: &str, operator: &str, values: Vec<String>) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: Some(values).filter(|v| !v.is_empty()),
    }
}

/// The same rule as `NodeFilter`, as the plugin DaemonSet's required node affinity.
pub fn affinity(spec: &NeuronDRAConfigSpec) -> Affinity {
    let mut requirements = vec![
        requirement(INSTANCE_TYPE_LABEL, "In", TRAINIUM_TYPES.iter().map(|t| t.name.to_string()).collect()),
        requirement(COMPUTE_TYPE_LABEL, "NotIn", EXCLUDED_COMPUTE_TYPES.iter().map(|c| c.to_string()).collect()),
    ];
    if let Some(selector) = &spec.node_selector {
        requirements.extend(node_requirements(selector));
    }
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(requirements),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// A LabelSelector as node-selector requirements (both are ANDed lists of the same operators).
pub fn node_requirements(selector: &LabelSelector) -> Vec<NodeSelectorRequirement> {
    let labels = selector.match_labels.iter().flatten().map(|(k, v)| requirement(k, "In", vec![v.clone()]));
    let expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| requirement(&e.key, &e.operator, e.values.clone().unwrap_or_default()));
    labels.chain(expressions).collect()
}

#[cfg(test)]
mod tests;
