//! The templates' two shapes: a request leaves its `resourceType` selector to a DeviceClass the operator made
//! (`OwnClasses`), and selects the type itself from a class another tool made under the name.

use serde_json::{Value, json};

use super::*;

const DEVICE_TYPE: &str = "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'";
const NODE_TYPE: &str = "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'";
const TRN2: &str = "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'";
const TRN2U: &str = "device.attributes['neuron.aws.com'].instanceType == 'trn2u.48xlarge'";
const DRIVER: &str = "device.attributes['neuron.aws.com'].neuronDriverVersion == '2.25.4.0'";

/// A device request, a node entry request and a request with fallbacks.
fn profiles() -> Value {
    json!([
        {"name": "four", "training": {"instanceType": "trn2.48xlarge", "devices": 4, "neuronDriverVersion": "2.25.4.0"}},
        {"name": "us", "longContextInference": {"instanceType": "trn2u.48xlarge", "ultraServerNodes": 1}},
        {"name": "elastic", "training": {"devices": 16, "fallbacks": [{"instanceType": "trn2.48xlarge", "devices": 8}]}},
    ])
}

/// Each template's selectors: the `neurons` request's, or each of its subrequests' in order.
fn shaped(own: OwnClasses) -> Vec<Vec<Vec<String>>> {
    let expressions = |selectors: &Option<Vec<k8s_openapi::api::resource::v1::DeviceSelector>>| -> Vec<String> {
        selectors.iter().flatten().map(|s| s.cel.clone().unwrap().expression).collect()
    };
    build_with(&config(profiles()), &["team-a".to_string()], own, Allocator::Combinations)
        .templates
        .iter()
        .map(|t| {
            let neurons = request(t, "neurons");
            match (&neurons.exactly, &neurons.first_available) {
                (Some(exact), _) => vec![expressions(&exact.selectors)],
                (None, Some(subrequests)) => subrequests.iter().map(|s| expressions(&s.selectors)).collect(),
                (None, None) => panic!("a request without devices"),
            }
        })
        .collect()
}

#[test]
fn requests_of_the_operators_own_classes_leave_the_resource_type_to_the_class() {
    assert_eq!(build(&config(profiles()), &["team-a".to_string()]).templates.len(), 3);
    assert_eq!(shaped(OwnClasses::BOTH), [vec![vec![TRN2, DRIVER]], vec![vec![TRN2U]], vec![vec![], vec![TRN2]]]);
    assert_eq!(
        build(&config(profiles()), &["team-a".to_string()]),
        build_with(&config(profiles()), &["team-a".to_string()], OwnClasses::BOTH, Allocator::default()),
        "build shapes the templates for the classes it builds"
    );
}

#[test]
fn requests_of_another_tools_classes_select_the_resource_type_themselves() {
    assert_eq!(
        shaped(OwnClasses::NEITHER),
        [
            vec![vec![DEVICE_TYPE, TRN2, DRIVER]],
            vec![vec![NODE_TYPE, TRN2U]],
            vec![vec![DEVICE_TYPE], vec![DEVICE_TYPE, TRN2]]
        ]
    );
}

#[test]
fn each_class_decides_for_its_own_requests() {
    let foreign_devices = shaped(OwnClasses { devices: false, nodes: true });
    assert_eq!(
        foreign_devices,
        [vec![vec![DEVICE_TYPE, TRN2, DRIVER]], vec![vec![TRN2U]], vec![vec![DEVICE_TYPE], vec![DEVICE_TYPE, TRN2]]]
    );
    let foreign_nodes = shaped(OwnClasses { devices: true, nodes: false });
    assert_eq!(foreign_nodes, [vec![vec![TRN2, DRIVER]], vec![vec![NODE_TYPE, TRN2U]], vec![vec![], vec![TRN2]]]);
}

/// The shape is in the spec hash, so a template made in the other shape is replaced (its spec is immutable): once
/// on the upgrade that drops the selector, and whenever a class of the name changes hands.
#[test]
fn the_two_shapes_hash_apart() {
    let hash = |own| {
        let desired = build_with(&config(profiles()), &["team-a".to_string()], own, Allocator::default());
        desired.templates[0].metadata.annotations.clone().unwrap()[ANNOTATION_SPEC_HASH].clone()
    };
    assert_ne!(hash(OwnClasses::BOTH), hash(OwnClasses::NEITHER));
}
