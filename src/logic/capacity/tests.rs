use super::*;
use crate::api::labels::LABEL_CLAIM_TEMPLATE;
use crate::cluster::{ClaimView, slice_view};
use crate::devtools::simulate::fleet::{self, FleetSpec};
use crate::logic::desired::{EFA_DRIVER, NEURON_DRIVER};
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

fn choice(count: Count, efa: Option<Count>) -> Choice {
    Choice {
        instance_type: None,
        neuron_driver_version: None,
        logical_neuron_core: None,
        kind: ClaimKind::Devices { count, efa },
    }
}

fn claim_of(choices: Vec<Choice>) -> ClaimSpec {
    ClaimSpec { template: "t".into(), profile: "t".into(), choices }
}

fn request(count: Count, efa: Option<Count>) -> ClaimSpec {
    claim_of(vec![choice(count, efa)])
}

/// A claim of one choice, changed by `edit`.
fn with(count: Count, edit: impl FnOnce(&mut Choice)) -> ClaimSpec {
    let mut only = choice(count, None);
    edit(&mut only);
    claim_of(vec![only])
}

fn room(claim: &ClaimSpec, slices: &[SliceView], claims: &[Arc<ClaimView>]) -> i64 {
    let allocated = Allocated::new(claims);
    let claims = std::slice::from_ref(claim);
    let pins = Pins::of(claims);
    available(claim, &pins, &[node_devices(slices, &allocated, &[], &pins)])
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
        assert_eq!(room(&claim, &s, &[]), expected, "{:?}", claim.first().kind);
    }
    let us = with(Count::All, |c| c.kind = ClaimKind::UltraServerNode { nodes: 2 });
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
            d.device_group(1)
                == s[0].spec.devices.iter().find(|d| &*d.name == "neuron-device-9").unwrap().device_group(1)
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
    let us = with(Count::All, |c| c.kind = ClaimKind::UltraServerNode { nodes: 4 });
    assert_eq!(room(&us, &s, &[]), 1);
    assert_eq!(room(&us, &s, &[claim(&[(NEURON_DRIVER, "neuron-node-0")])]), 0);
    // The node entry and the devices are one node's hardware: taking either leaves nothing of the other.
    let one = request(Count::Exactly(1), None);
    assert_eq!(room(&one, &s, &[]), 16);
    assert_eq!(room(&one, &s, &[claim(&[(NEURON_DRIVER, "neuron-node-0")])]), 0, "the entry holds every device");
    assert_eq!(room(&us, &s, &[claim(&[(NEURON_DRIVER, "neuron-device-3")])]), 0, "no whole node is left");
    let pinned = with(Count::All, |c| {
        c.kind = ClaimKind::UltraServerNode { nodes: 4 };
        c.instance_type = Some("trn2.48xlarge".into());
    });
    assert_eq!(room(&pinned, &s, &[]), 0);
    let version = with(Count::Exactly(4), |c| c.neuron_driver_version = Some("9.9.9.9".into()));
    assert_eq!(room(&version, &s, &[]), 0);
    let version =
        with(Count::Exactly(4), |c| c.neuron_driver_version = Some(fleet::DEFAULT_NEURON_DRIVER_VERSION.into()));
    assert_eq!(room(&version, &s, &[]), 4);
}

#[test]
fn allocated_claims_are_counted_per_template_of_the_config() {
    let mut mine = (*claim(&[(NEURON_DRIVER, "neuron-device-0")])).clone();
    mine.metadata.labels = Some(
        [
            (crate::api::labels::LABEL_CONFIG.to_string(), "cfg".to_string()),
            (LABEL_CLAIM_TEMPLATE.to_string(), "t".into()),
        ]
        .into(),
    );
    let mut pending = mine.clone();
    pending.status.allocation = None;
    let mut other = mine.clone();
    other.metadata.labels.as_mut().unwrap().insert(crate::api::labels::LABEL_CONFIG.into(), "other".into());
    let counts = allocated_by_template("cfg", &[Arc::new(mine), Arc::new(pending), Arc::new(other)]);
    assert_eq!(counts.get("t"), Some(&1));
    assert_eq!(claim(&[]).pods(), ["team/p"]);
}

/// A claim of `choices`: the first preferred, the others its fallbacks in order.
fn fallbacks(choices: &[(Option<&str>, Count)]) -> ClaimSpec {
    let choice = |(instance_type, count): &(Option<&str>, Count)| Choice {
        instance_type: instance_type.map(String::from),
        ..choice(*count, None)
    };
    claim_of(choices.iter().map(choice).collect())
}

#[test]
fn with_fallbacks_a_node_takes_the_first_choice_as_often_as_it_fits_then_the_next() {
    let s = slices("trn2.48xlarge", None);
    let (trn2, n) = (Some("trn2.48xlarge"), Count::Exactly);
    // Sixteen take the whole empty node, so nothing is left for four.
    assert_eq!(room(&fallbacks(&[(trn2, n(16)), (trn2, n(4))]), &s, &[]), 1);
    // Device 0 held: no group of 16, so three free groups of four.
    let held = [claim(&[(NEURON_DRIVER, "neuron-device-0")])];
    assert_eq!(room(&fallbacks(&[(trn2, n(16)), (trn2, n(4))]), &s, &held), 3);
    // Eight take devices 8..16; of 1..8 (device 0 held) only the group 4..8 is whole for four.
    assert_eq!(room(&fallbacks(&[(trn2, n(8)), (trn2, n(4))]), &s, &held), 2);
    // Each choice counts on its own type: all on trn2 does not fit, so eight take the free group.
    assert_eq!(room(&fallbacks(&[(trn2, Count::All), (trn2, n(8))]), &s, &held), 1);
    // One device at a time takes every free device, leaving nothing for the fallback.
    assert_eq!(room(&fallbacks(&[(trn2, n(1)), (trn2, n(4))]), &s, &held), 15);
    // A first choice of another type leaves the node to the fallback.
    assert_eq!(room(&fallbacks(&[(Some("trn1.32xlarge"), n(16)), (trn2, n(8))]), &s, &held), 1);
}

#[test]
fn with_fallbacks_each_node_is_counted_with_its_own_choice() {
    let trn2 = slices("trn2.48xlarge", None);
    let mut trn1 = fleet("trn1.32xlarge");
    trn1.prefix = "m".into();
    let trn1 = [slice_view(&fleet::resource_slice(&trn1, 0, None))];
    let claim_of_both =
        fallbacks(&[(Some("trn2.48xlarge"), Count::Exactly(16)), (Some("trn1.32xlarge"), Count::Exactly(16))]);
    let on = |held: &[Arc<ClaimView>]| {
        let allocated = Allocated::new(held);
        let pins = Pins::of(std::slice::from_ref(&claim_of_both));
        let nodes = [node_devices(&trn2, &allocated, &[], &pins), node_devices(&trn1, &allocated, &[], &pins)];
        available(&claim_of_both, &pins, &nodes)
    };
    assert_eq!(on(&[]), 2, "the trn2 node by the first choice, the trn1 node by the fallback");
    assert_eq!(on(&[claim(&[(NEURON_DRIVER, "neuron-device-3")])]), 1, "the trn2 node is broken, trn1 is left");
}

#[test]
fn admin_access_allocations_leave_the_device_free() {
    let s = slices("trn2.48xlarge", None);
    let one = request(Count::Exactly(1), None);
    let mut admin = (*claim(&[(NEURON_DRIVER, "neuron-device-0")])).clone();
    admin.status.allocation.as_mut().unwrap().devices.results[0].admin_access = Some(true);
    assert_eq!(room(&one, &s, &[Arc::new(admin)]), 16, "a monitoring claim takes nothing");
    assert_eq!(room(&one, &s, &[claim(&[(NEURON_DRIVER, "neuron-device-0")])]), 15);
}
