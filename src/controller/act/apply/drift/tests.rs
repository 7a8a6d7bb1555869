use k8s_openapi::api::apps::v1::DaemonSet;
use serde_json::json;

use super::*;

fn in_place<K: Resource + Serialize>(existing: &K, desired: &K, manager: &str) -> bool {
    Applied::of(desired, manager).held_by(existing)
}

#[test]
fn quantities_compare_by_value_as_the_server_stores_them() {
    for (spec, stored) in [("0.5", "500m"), ("1024Mi", "1Gi"), ("1e3", "1k"), ("2", "2"), ("1.5Gi", "1536Mi")] {
        assert_eq!(quantity(spec), quantity(stored), "{spec} = {stored}");
        assert!(quantity(spec).is_some(), "{spec}");
    }
    for (a, b) in [("1", "1m"), ("1Gi", "1G"), ("500m", "0.6")] {
        assert_ne!(quantity(a), quantity(b), "{a} != {b}");
    }
    assert_eq!(quantity("fast"), None);
}

fn plugin(resources: Value, priority: Option<&str>) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": "neuron-dra-c", "namespace": "neuron-dra-driver"},
        "spec": {"selector": {}, "template": {"spec": {"priorityClassName": priority,
            "containers": [{"name": "plugin", "resources": resources}]}}},
    }))
    .unwrap()
}

#[test]
fn a_stored_object_with_canonical_quantities_is_in_place() {
    let desired = plugin(json!({"requests": {"cpu": "0.5", "memory": "1024Mi"}}), None);
    // The server stores canonical quantities under the hash of what was applied (the spec's spelling).
    let mut stored = plugin(json!({"requests": {"cpu": "500m", "memory": "1Gi"}}), None);
    stored.metadata.annotations = stamped(&desired, MANAGER).metadata.annotations;
    assert!(in_place(&stored, &desired, MANAGER));
    let more = plugin(json!({"requests": {"cpu": "0.6", "memory": "1024Mi"}}), None);
    assert!(!in_place(&stored, &more, MANAGER), "a different value is drift");
}

#[test]
fn a_field_no_longer_sent_is_drift_for_our_own_manager() {
    let before = stamped(&plugin(json!({}), Some("system-node-critical")), MANAGER);
    let after = plugin(json!({}), None);
    assert!(holds(&serde_json::to_value(&before).unwrap(), &comparable(&after)), "the old object holds the new");
    assert!(!in_place(&before, &after, MANAGER), "but it was applied from other fields: apply, to drop them");
    assert!(in_place(&before, &plugin(json!({}), Some("system-node-critical")), MANAGER));
    assert!(in_place(&stamped(&after, MANAGER), &stamped(&after, MANAGER), MANAGER), "stamping is idempotent");
}

#[test]
fn shared_objects_carry_no_hash() {
    let shared = format!("{MANAGER}.c");
    let object = stamped(&plugin(json!({}), None), &shared);
    assert_eq!(object.metadata.annotations, None);
    assert!(in_place(&object, &plugin(json!({}), None), &shared));
}
