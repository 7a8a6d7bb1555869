use super::*;
use serde_json::json;

fn meta(value: serde_json::Value) -> ObjectMeta {
    serde_json::from_value(value).unwrap()
}

#[test]
fn only_the_operators_label_makes_an_object_ours() {
    assert!(ours(&meta(json!({"labels": {"app.kubernetes.io/managed-by": "neuron-dra-operator"}}))));
    assert!(!ours(&meta(json!({"labels": {"app.kubernetes.io/managed-by": "Helm"}}))));
    assert!(!ours(&meta(json!({}))));
}

#[test]
fn a_foreign_object_is_named_by_its_field_managers() {
    let fields = json!({"managedFields": [{"manager": "helm", "operation": "Update"},
            {"manager": "helm", "operation": "Apply"}, {"manager": "kubectl-edit", "operation": "Update"}]});
    assert_eq!(managers(&meta(fields)), "helm, kubectl-edit");
    assert_eq!(managers(&meta(json!({}))), "unknown");
}
