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
mod tests {
    use super::*;
    use serde_json::json;

    /// The scheduler's reading of required node affinity: any term, every requirement of it.
    fn admits(affinity: &Affinity, labels: &BTreeMap<String, String>) -> bool {
        let required = &affinity.node_affinity.as_ref().unwrap().required_during_scheduling_ignored_during_execution;
        required.as_ref().unwrap().node_selector_terms.iter().any(|term| {
            term.match_expressions.iter().flatten().all(|r| {
                let values = r.values.clone().unwrap_or_default();
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    other => panic!("operator {other} is not produced"),
                }
            })
        })
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_affinity_and_the_filter_select_the_same_nodes() {
        let selectors = [
            json!({}),
            json!({"nodeSelector": {"matchLabels": {"pool": "a"}}}),
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}}),
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["b"]}]}}),
            json!({"nodeSelector": {"matchExpressions": [{"key": "spot", "operator": "Exists"}]}}),
            json!({"nodeSelector": {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}}),
            json!({"nodeSelector": {"matchLabels": {INSTANCE_TYPE_LABEL: "trn1.2xlarge"}}}),
        ];
        let nodes = [
            labels(&[(INSTANCE_TYPE_LABEL, "trn2.48xlarge")]),
            labels(&[(INSTANCE_TYPE_LABEL, "trn2.48xlarge"), ("pool", "a")]),
            labels(&[(INSTANCE_TYPE_LABEL, "trn1.2xlarge"), ("pool", "b"), ("spot", "")]),
            labels(&[(INSTANCE_TYPE_LABEL, "trn2u.48xlarge"), ("pool", "a"), (COMPUTE_TYPE_LABEL, "ec2")]),
            labels(&[(INSTANCE_TYPE_LABEL, "trn2.48xlarge"), ("pool", "a"), (COMPUTE_TYPE_LABEL, "auto")]),
            labels(&[(INSTANCE_TYPE_LABEL, "trn1.32xlarge"), (COMPUTE_TYPE_LABEL, "fargate")]),
            labels(&[(INSTANCE_TYPE_LABEL, "trn1.32xlarge"), (COMPUTE_TYPE_LABEL, "hybrid")]),
            labels(&[(INSTANCE_TYPE_LABEL, "inf2.48xlarge"), ("pool", "a")]),
            labels(&[(INSTANCE_TYPE_LABEL, "m5.large")]),
            labels(&[("pool", "a")]),
        ];
        let mut selected = 0;
        for selector in &selectors {
            let spec: NeuronDRAConfigSpec = serde_json::from_value(selector.clone()).unwrap();
            let (filter, affinity) = (NodeFilter::new(&spec), affinity(&spec));
            for node in &nodes {
                let chosen = filter.selects(node);
                assert_eq!(chosen, admits(&affinity, node), "selector {selector}, node {node:?}");
                selected += usize::from(chosen);
            }
        }
        assert!(selected > 5, "the table exercises selected nodes too ({selected})");
    }
}
