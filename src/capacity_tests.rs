use super::*;
use crate::build::LABEL_CLAIM_TEMPLATE;
use crate::simulate::fleet::{self, FleetSpec};
use crate::view::{ClaimView, slice_view};
use k8s_openapi::api::resource::v1::DeviceTaint;
use serde_json::json;

fn fleet(instance_type: &str) -> FleetSpec {
    FleetSpec {
        prefix: "n".into(),
        count: 1,
        instance_type: instance_type.into(),
        dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
        neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
    }
}

/// Node 0's Neuron slice (with device `taint` tainted NoSchedule) and EFA slice, as views.
fn slices(instance_type: &str, taint: Option<&str>) -> Vec<SliceView> {
    let spec = fleet(instance_type);
    let mut neuron = fleet::resource_slice(&spec, 0, None);
    if let Some(name) = taint {
        let device = neuron.spec.devices.as_mut().unwrap().iter_mut().find(|d| d.name == name).unwrap();
        device.taints =
            Some(vec![DeviceTaint { key: "k".into(), effect: "NoSchedule".into(), ..DeviceTaint::default() }]);
    }
    let mut views = vec![slice_view(&neuron)];
    views.extend(fleet::efa_slice(&spec, 0, None).map(|s| slice_view(&s)));
    views
}

/// A claim holding these devices of node `n-0`.
fn claim(devices: &[(&str, &str)]) -> Arc<ClaimView> {
    let results: Vec<_> =
        devices.iter().map(|(driver, device)| json!({"driver": driver, "pool": "n-0", "device": device})).collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "team"},
            "status": {"allocation": {"devices": {"results": results}}, "reservedFor": [{"resource": "pods", "name": "p"}]},
        }))
        .unwrap(),
    )
}

fn request(count: Count, efa: Option<Count>) -> ClaimSpec {
    ClaimSpec {
        template: "t".into(),
        profile: "t".into(),
        instance_type: None,
        neuron_driver_version: None,
        logical_neuron_core: None,
        kind: ClaimKind::Devices { count, efa },
    }
}

fn room(claim: &ClaimSpec, slices: &[SliceView], claims: &[Arc<ClaimView>]) -> i64 {
    let allocated = Allocated::new(claims);
    let sizes = group_sizes(std::slice::from_ref(claim));
    available(claim, &[node_devices(slices, &allocated, &[], &sizes)])
}

#[test]
fn an_empty_trn2_node_fits_one_whole_node_or_its_groups() {
    let s = slices("trn2.48xlarge", None);
    let cases = [
        (request(Count::All, None), 1),
        (request(Count::All, Some(Count::All)), 1),
        (request(Count::Exactly(16), Some(Count::Exactly(16))), 1),
        (request(Count::Exactly(8), None), 2),
        (request(Count::Exactly(4), Some(Count::Exactly(4))), 4),
        (request(Count::Exactly(1), None), 16),
        (request(Count::Exactly(1), Some(Count::Exactly(1))), 16),
    ];
    for (claim, expected) in cases {
        assert_eq!(room(&claim, &s, &[]), expected, "{:?}", claim.kind);
    }
    let us = ClaimSpec { kind: ClaimKind::UltraServerNode { nodes: 2 }, ..request(Count::All, None) };
    assert_eq!(room(&us, &s, &[]), 0, "trn2.48xlarge has no UltraServer node entry");
}

#[test]
fn a_held_device_takes_its_groups_and_the_whole_node() {
    let s = slices("trn2.48xlarge", None);
    let held = [claim(&[(NEURON_DRIVER, "neuron-device-0")])];
    assert_eq!(room(&request(Count::All, None), &s, &held), 0);
    assert_eq!(room(&request(Count::Exactly(16), None), &s, &held), 0);
    assert_eq!(room(&request(Count::Exactly(8), None), &s, &held), 1);
    assert_eq!(room(&request(Count::Exactly(4), None), &s, &held), 3);
    assert_eq!(room(&request(Count::Exactly(1), None), &s, &held), 15);
}

#[test]
fn a_tainted_device_is_not_free() {
    let s = slices("trn2.48xlarge", Some("neuron-device-5"));
    assert_eq!(room(&request(Count::Exactly(4), None), &s, &[]), 3);
    assert_eq!(room(&request(Count::Exactly(1), None), &s, &[]), 15);
    assert_eq!(room(&request(Count::All, None), &s, &[]), 0);
}

#[test]
fn a_held_efa_interface_costs_its_group_only_for_efa_claims() {
    let s = slices("trn2.48xlarge", None);
    let efa_of_device_9 = s[1]
        .spec
        .devices
        .iter()
        .find(|d| {
            d.device_group(1) == s[0].spec.devices.iter().find(|d| d.name == "neuron-device-9").unwrap().device_group(1)
        })
        .unwrap()
        .name
        .clone();
    let held = [claim(&[(EFA_DRIVER, &efa_of_device_9)])];
    assert_eq!(room(&request(Count::Exactly(4), Some(Count::Exactly(4))), &s, &held), 3);
    assert_eq!(room(&request(Count::Exactly(4), None), &s, &held), 4);
    assert_eq!(room(&request(Count::Exactly(1), Some(Count::Exactly(1))), &s, &held), 15);
    assert_eq!(room(&request(Count::All, Some(Count::All)), &s, &held), 0);
}

#[test]
fn on_trn1_two_devices_share_one_efa() {
    let s = slices("trn1.32xlarge", None);
    assert_eq!(room(&request(Count::Exactly(1), Some(Count::Exactly(1))), &s, &[]), 8);
    assert_eq!(room(&request(Count::Exactly(4), Some(Count::Exactly(2))), &s, &[]), 4);
    assert_eq!(room(&request(Count::Exactly(1), None), &s, &[]), 16);
}

#[test]
fn ultraserver_claims_take_node_entries_and_pins_filter() {
    let s = slices("trn2u.48xlarge", None);
    let us = ClaimSpec { kind: ClaimKind::UltraServerNode { nodes: 4 }, ..request(Count::All, None) };
    assert_eq!(room(&us, &s, &[]), 1);
    assert_eq!(room(&us, &s, &[claim(&[(NEURON_DRIVER, "neuron-node-0")])]), 0);
    let pinned = ClaimSpec { instance_type: Some("trn2.48xlarge".into()), ..us.clone() };
    assert_eq!(room(&pinned, &s, &[]), 0);
    let version = ClaimSpec { neuron_driver_version: Some("9.9.9.9".into()), ..request(Count::Exactly(4), None) };
    assert_eq!(room(&version, &s, &[]), 0);
    let version = ClaimSpec { neuron_driver_version: Some(fleet::DEFAULT_NEURON_DRIVER_VERSION.into()), ..version };
    assert_eq!(room(&version, &s, &[]), 4);
}

#[test]
fn allocated_claims_are_counted_per_template_of_the_config() {
    let mut mine = (*claim(&[(NEURON_DRIVER, "neuron-device-0")])).clone();
    mine.metadata.labels = Some(
        [(crate::build::LABEL_CONFIG.to_string(), "cfg".to_string()), (LABEL_CLAIM_TEMPLATE.to_string(), "t".into())]
            .into(),
    );
    let mut pending = mine.clone();
    pending.status.allocation = None;
    let mut other = mine.clone();
    other.metadata.labels.as_mut().unwrap().insert(crate::build::LABEL_CONFIG.into(), "other".into());
    let counts = allocated_by_template("cfg", &[Arc::new(mine), Arc::new(pending), Arc::new(other)]);
    assert_eq!(counts.get("t"), Some(&1));
    assert_eq!(claim(&[]).pods(), ["team/p"]);
}
