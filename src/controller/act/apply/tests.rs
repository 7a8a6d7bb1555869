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
fn an_expectation_holds_until_the_cache_moves_past_the_replaced_state() {
    let expectations = Expectations::default();
    assert!(expectations.settled("k", Some("1")), "nothing awaited");
    expectations.wrote("k".into(), Some("4".into()));
    assert!(!expectations.settled("k", Some("4")), "the cache still shows the object our write replaced");
    assert!(expectations.settled("k", Some("9")), "our write, or a later one (a status update), is in the cache");
    assert!(expectations.settled("k", Some("4")), "settled once: the cache is trusted again");
    expectations.wrote("created".into(), None);
    assert!(!expectations.settled("created", None), "the cache has not seen the create");
    assert!(expectations.settled("created", Some("1")));
    expectations.wrote("deleted".into(), Some("7".into()));
    assert!(!expectations.settled("deleted", Some("7")), "deleted, the cache still shows it");
    assert!(expectations.settled("deleted", None));
}

#[test]
fn owner_references_need_only_contain_ours() {
    let ours = json!({"uid": "1", "name": "a"});
    let desired = json!({"metadata": {"ownerReferences": [ours]}});
    assert!(holds(&json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, ours]}}), &desired));
    assert!(!holds(&json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}), &desired));
}
