use super::*;
use serde_json::json;

#[test]
fn server_defaults_and_extra_fields_are_not_drift() {
    let desired = json!({"spec": {"template": {"containers": [{"name": "c", "image": "a:1"}]}}});
    let existing = json!({"spec": {"revisionHistoryLimit": 10,
        "template": {"containers": [{"name": "c", "image": "a:1", "terminationMessagePath": "/dev/x"}]}}});
    assert!(holds(&existing, &desired));
}

#[test]
fn a_changed_value_or_list_is_drift() {
    let desired = json!({"spec": {"template": {"containers": [{"name": "c", "image": "a:1"}]}}});
    assert!(!holds(&json!({"spec": {"template": {"containers": [{"name": "c", "image": "a:2"}]}}}), &desired));
    assert!(!holds(&json!({"spec": {"template": {"containers": []}}}), &desired));
    assert!(!holds(&json!({}), &desired));
    assert!(!holds(&json!({"metadata": {"labels": {"a": "b"}}}), &json!({"metadata": {"labels": {"a": "c"}}})));
}

#[test]
fn owner_references_need_only_contain_ours() {
    let ours = json!({"uid": "1", "name": "a"});
    let desired = json!({"metadata": {"ownerReferences": [ours]}});
    assert!(holds(&json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, ours]}}), &desired));
    assert!(!holds(&json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}), &desired));
}
