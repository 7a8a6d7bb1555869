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
