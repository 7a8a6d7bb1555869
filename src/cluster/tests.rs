use super::*;
use crate::devtools::simulate::fleet::{self, FleetSpec};
use k8s_openapi::api::resource::v1::DeviceTaint;
use std::collections::BTreeMap;
use std::sync::Arc;

fn fleet() -> FleetSpec {
    FleetSpec {
        prefix: "v".into(),
        count: 1,
        instance_type: "trn2u.48xlarge".into(),
        dra_driver_version: "1.1.0".into(),
        neuron_driver_version: "2.25.4.0".into(),
        kubelet_version: "v1.34.2".into(),
    }
}

#[test]
fn a_slice_view_keeps_names_taints_and_three_attributes() {
    let mut slice = fleet::resource_slice(&fleet(), 0, Some("uid".into()));
    slice.spec.devices.as_mut().unwrap()[2].taints =
        Some(vec![DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }]);
    let view = slice_view(&slice);
    assert_eq!(&*view.spec.driver, "neuron.aws.com");
    assert_eq!(view.spec.pool.name, "v-0");
    assert_eq!(view.spec.devices.len(), 17);
    assert_eq!(view.spec.devices[2].taints[0].key, "k");
    assert_eq!(view.spec.devices[5].device_id(), Some(5));
    assert_eq!(view.spec.devices[5].resource_type(), Some("neuron_device"));
    assert_eq!(view.spec.devices[16].resource_type(), Some("neuron_node"));
    assert_eq!(view.spec.devices[0].dra_driver_version(), Some("1.1.0"));
}

#[test]
fn the_strings_devices_share_are_held_once() {
    let first = slice_view(&fleet::resource_slice(&fleet(), 0, None));
    let second = slice_view(&fleet::resource_slice(&fleet(), 1, None));
    let (a, b) = (&first.spec.devices[0], &second.spec.devices[3]);
    assert!(Arc::ptr_eq(&a.attributes.common, &b.attributes.common), "one copy of the attributes devices share");
    assert_eq!(a.instance_type(), Some("trn2u.48xlarge"));
    let same_name = second.spec.devices.iter().find(|d| d.name == a.name).unwrap();
    assert!(Arc::ptr_eq(&a.name, &same_name.name), "{} is one allocation on every node", a.name);
    assert_ne!(a.device_group(4), None);
    assert_eq!(std::mem::size_of::<DeviceView>(), 64);
}

#[test]
fn nodes_that_publish_the_same_devices_share_them_and_a_tainted_device_is_its_own() {
    // The simulator wires node i's EFAs at PCI layout i % 200: nodes 0 and 200 publish the same devices, node 1
    // others (its group ids differ).
    let mut tainted = fleet::resource_slice(&fleet(), 200, None);
    tainted.spec.devices.as_mut().unwrap()[2].taints =
        Some(vec![DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }]);
    let first = slice_view(&fleet::resource_slice(&fleet(), 0, None));
    let same = slice_view(&tainted);
    let other = slice_view(&fleet::resource_slice(&fleet(), 1, None));
    assert!(Arc::ptr_eq(&first.spec.devices[5], &same.spec.devices[5]), "one copy of a device alike on two nodes");
    assert!(!Arc::ptr_eq(&first.spec.devices[2], &same.spec.devices[2]), "a tainted device is not shared");
    assert_eq!((first.spec.devices[2].taints.len(), same.spec.devices[2].taints.len()), (0, 1));
    assert_ne!(first.spec.devices[5].device_group(4), other.spec.devices[5].device_group(4));
    assert!(!Arc::ptr_eq(&first.spec.devices[5], &other.spec.devices[5]), "devices of another layout are others");
    assert_eq!(first.spec.devices.capacity(), first.spec.devices.len(), "no spare room in the list");
}

#[test]
fn a_pod_view_keeps_its_ready_condition_only() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "generateName": "p-", "labels": {
            "a": "b", "neurondra.io/config": "c", "controller-revision-hash": "h",
        }},
        "spec": {"nodeName": "n", "containers": []},
        "status": {"conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"},
            {"type": "Initialized", "status": "True"},
        ]},
    }))
    .unwrap();
    let view = pod_view(&pod);
    assert_eq!(view.status.conditions.len(), 1);
    assert!(view.ready());
    let labels: Vec<String> = view.metadata.labels.unwrap().into_keys().collect();
    assert_eq!(labels, ["controller-revision-hash", "neurondra.io/config"], "the labels read");
    assert_eq!(view.metadata.generate_name, None);
}

#[test]
fn a_node_view_keeps_labels_legacy_resources_health_conditions_and_kubelet_version() {
    let mut node = fleet::node(&fleet(), 0);
    let mut status = fleet::node_status(&fleet());
    status["allocatable"]["aws.amazon.com/neuron"] = serde_json::json!("16");
    let problem = serde_json::json!({"type": "NeuronHealth", "status": "True", "reason": "NeuronHardwareError"});
    status["conditions"].as_array_mut().unwrap().push(problem);
    node.status = Some(serde_json::from_value(status).unwrap());
    node.metadata.managed_fields = Some(vec![Default::default()]);
    node.metadata.annotations = Some(BTreeMap::from([("a".to_string(), "b".to_string())]));
    let view = node_view(&node);
    assert_eq!((view.metadata.managed_fields, view.metadata.annotations), (None, None), "skipped while parsing");
    assert_eq!(view.metadata.labels.unwrap()["node.kubernetes.io/instance-type"], "trn2u.48xlarge");
    assert_eq!(view.status.allocatable, ["aws.amazon.com/neuron"], "only the legacy plugin's resources");
    let conditions: Vec<&str> = view.status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(conditions, ["NeuronHealth"], "only the hardware-health conditions");
    assert_eq!(&*view.status.node_info.kubelet_version, "v1.34.2");
}

#[test]
fn a_pod_is_pinned_by_its_metadata_name_field() {
    let affinity: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(serde_json::json!({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-3"]}]}]}}}))
    .unwrap();
    assert_eq!(pinned_node(&affinity).as_deref(), Some("n-3"));
    assert_eq!(pinned_node(&Default::default()), None);
}

#[test]
fn a_pod_view_keeps_only_its_controllers_uid_of_the_owner_references() {
    let owner = |uid: &str, controller: bool| {
        serde_json::json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": uid, "uid": uid,
            "controller": controller, "blockOwnerDeletion": true})
    };
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "ownerReferences": [owner("other", false), owner("ds", true)]},
        "spec": {"nodeName": "n", "containers": []},
    }))
    .unwrap();
    let view = pod_view(&pod);
    assert_eq!(view.controller_uid(), Some("ds"));
    let kept = view.metadata.owner_references.unwrap();
    assert_eq!((kept.len(), kept[0].name.as_str(), kept[0].block_owner_deletion), (1, "", None));
    let orphan: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "q", "ownerReferences":
        [owner("other", false)]}, "spec": {"containers": []}}))
    .unwrap();
    assert_eq!(pod_view(&orphan).controller_uid(), None, "an owner that is not the controller does not count");
}
