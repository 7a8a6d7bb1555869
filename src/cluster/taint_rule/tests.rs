use super::*;
use serde_json::json;

fn rule(value: serde_json::Value) -> TaintRuleView {
    serde_json::from_value(value).unwrap()
}

fn slice() -> (SliceView, DeviceView) {
    let slice: SliceView = serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {
            "driver": "neuron.aws.com", "nodeName": "n1", "pool": {"name": "n1"},
            "devices": [{"name": "neuron-3"}]}}))
    .unwrap();
    let device = DeviceView::clone(&slice.spec.devices[0]);
    (slice, device)
}

#[test]
fn every_served_version_parses_into_one_view() {
    // v1alpha3 (1.34) has deviceClassName and CEL selectors; v1 (1.37) has status conditions.
    let alpha = rule(json!({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule",
            "metadata": {"name": "a"}, "spec": {
                "deviceSelector": {"deviceClassName": "neuron.aws.com", "driver": "neuron.aws.com", "pool": "n1"},
                "taint": {"key": "k", "effect": "NoSchedule", "timeAdded": "2026-11-30T10:00:00Z"}}}));
    let stable = rule(json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "b"}, "spec": {
                "deviceSelector": {"driver": "neuron.aws.com", "device": "neuron-3"},
                "taint": {"key": "k", "effect": "NoExecute"}},
            "status": {"conditions": [{"type": "EvictionInProgress", "status": "True", "reason": "PodsPendingEviction",
                "message": "2 pods are pending eviction, 1 evicted already", "lastTransitionTime": "2026-11-30T10:00:00Z"}]}}));
    let (slice, device) = slice();
    assert!(matches(&alpha, &slice, &device));
    assert!(matches(&stable, &slice, &device));
    assert_eq!(eviction(&alpha), None);
    assert_eq!(eviction(&stable).map(|c| c.status.as_str()), Some("True"));
}

#[test]
fn a_rule_matches_only_what_every_set_field_names() {
    let (slice, device) = slice();
    let with = |selector: serde_json::Value| {
        rule(json!({"metadata": {"name": "r"}, "spec": {"deviceSelector": selector,
                "taint": {"key": "k", "effect": "NoSchedule"}}}))
    };
    assert!(matches(&with(json!({})), &slice, &device), "the empty selector matches every device");
    assert!(!matches(&with(json!({"driver": "dra.net"})), &slice, &device));
    assert!(!matches(&with(json!({"pool": "n2"})), &slice, &device));
    assert!(!matches(&with(json!({"device": "neuron-4"})), &slice, &device));
    let cel = json!([{"cel": {"expression": "true"}}]);
    assert!(!matches(&with(json!({"selectors": cel})), &slice, &device), "CEL alone is not evaluated");
    assert!(matches(&with(json!({"selectors": cel, "device": "neuron-3"})), &slice, &device));
    let without: TaintRuleView =
        rule(json!({"metadata": {"name": "r"}, "spec": {"taint": {"key": "k", "effect": "NoSchedule"}}}));
    assert!(!matches(&without, &slice, &device), "without a selector a rule matches nothing");
}
