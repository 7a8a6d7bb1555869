//! Requests with fallbacks compile to `firstAvailable` subrequests, each with its own constraint and config.

use serde_json::{Value, json};

use super::*;
use crate::api::{DNS_LABEL, MAX_FALLBACKS};
use crate::cli::parse_config;
use crate::logic::validate::validate;

/// The `devices` of every template `profiles` compile to for a server that searches combinations, as JSON, by
/// template name.
fn compiled(profiles: Value) -> Vec<(String, Value)> {
    compiled_for(profiles, Allocator::Combinations)
}

fn compiled_for(profiles: Value, allocator: Allocator) -> Vec<(String, Value)> {
    let doc = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "pool"}, "spec": {"profiles": profiles},
    });
    let config = validate(&parse_config(&doc.to_string()).expect("parses")).expect("valid");
    build_with(&config, &["team-a".to_string()], OwnClasses::BOTH, allocator)
        .templates
        .iter()
        .map(|t| (t.metadata.name.clone().unwrap(), serde_json::to_value(&t.spec.spec.devices).unwrap()))
        .collect()
}

/// A subrequest's selectors: the type pin alone, as the operator's class selects device entries.
fn selectors(instance_type: &str) -> Value {
    json!([{"cel": {"expression": format!("device.attributes['neuron.aws.com'].instanceType == '{instance_type}'")}}])
}

#[test]
fn each_choice_is_a_subrequest_with_its_own_selectors_count_constraint_and_config() {
    let t = compiled(json!([{"name": "pretrain", "training": {
        "instanceType": "trn2.48xlarge", "devices": 16, "logicalNeuronCore": 2, "allowLncChange": true,
        "fallbacks": [
            {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 1},
            {"instanceType": "trn1.32xlarge", "devices": "All", "neuronDriverVersion": "2.25.4.0"},
        ],
    }}]));
    let lnc = |n: u8, sub: &str| {
        json!({"opaque": {"driver": "neuron.aws.com", "parameters":
            {"apiVersion": "neuron.aws.com/v1", "kind": "NeuronConfig", "logicalNeuronCore": n}},
            "requests": [format!("neurons/{sub}")]})
    };
    let mut trn1 = selectors("trn1.32xlarge");
    trn1.as_array_mut()
        .unwrap()
        .push(json!({"cel": {"expression": "device.attributes['neuron.aws.com'].neuronDriverVersion == '2.25.4.0'"}}));
    let expected = json!({
        "requests": [{"name": "neurons", "firstAvailable": [
            {"name": "preferred", "deviceClassName": "neuron.aws.com", "allocationMode": "ExactCount", "count": 16,
             "selectors": selectors("trn2.48xlarge")},
            {"name": "fallback-1", "deviceClassName": "neuron.aws.com", "allocationMode": "ExactCount", "count": 8,
             "selectors": selectors("trn2.48xlarge")},
            {"name": "fallback-2", "deviceClassName": "neuron.aws.com", "allocationMode": "All", "selectors": trn1},
        ]}],
        "constraints": [
            {"matchAttribute": "resource.aws.com/devicegroup16_id", "requests": ["neurons/preferred"]},
            {"matchAttribute": "resource.aws.com/devicegroup8_id", "requests": ["neurons/fallback-1"]},
        ],
        "config": [lnc(2, "preferred"), lnc(1, "fallback-1")],
    });
    assert_eq!(t, [("pretrain".to_string(), expected)]);
}

#[test]
fn every_device_request_kind_takes_fallbacks() {
    let one = |devices: u32| json!({"devices": devices, "fallbacks": [{"devices": 1}]});
    let t = compiled(json!([
        {"name": "lci", "longContextInference": one(4)},
        {"name": "serve", "disaggregated": {"prefill": one(8), "decode": {"devices": 1}}},
    ]));
    let subrequests = |template: &str| -> Vec<String> {
        let (_, devices) = t.iter().find(|(name, _)| name == template).unwrap();
        let first_available = devices["requests"][0]["firstAvailable"].as_array().cloned().unwrap_or_default();
        first_available.iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(subrequests("lci"), ["preferred", "fallback-1"]);
    assert_eq!(subrequests("serve-prefill"), ["preferred", "fallback-1"]);
    assert!(subrequests("serve-decode").is_empty(), "a side without fallbacks stays an exact request");
}

#[test]
fn subrequest_names_are_distinct_dns_labels() {
    let names: Vec<String> = (0..=MAX_FALLBACKS).map(subrequest_name).collect();
    assert!(names.iter().all(|n| DNS_LABEL.is_match(n) && n.len() <= 63), "{names:?}");
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), MAX_FALLBACKS + 1);
}

/// Before 1.36 the preferred choice, when it is every device of its type, is `All`, so that a node with one in use
/// fails at once and the fallbacks are tried; a fallback keeps its count (an `All` after the first subrequest is
/// allocated with the first one's data there), and so does the preferred choice on a newer server.
#[test]
fn before_1_36_a_whole_node_first_choice_is_all_and_its_fallbacks_keep_their_counts() {
    let profiles = json!([{"name": "elastic", "training": {"instanceType": "trn2.48xlarge", "devices": 16,
        "allowLncChange": true, "fallbacks": [{"devices": 8}, {"instanceType": "trn1.32xlarge", "devices": 16}]}}]);
    let modes = |allocator| {
        let (_, devices) = compiled_for(profiles.clone(), allocator).remove(0);
        let subrequests = devices["requests"][0]["firstAvailable"].as_array().unwrap().clone();
        subrequests.iter().map(|s| (s["allocationMode"].clone(), s["count"].clone())).collect::<Vec<_>>()
    };
    let (all, exact) = (json!("All"), json!("ExactCount"));
    assert_eq!(
        modes(Allocator::Orderings),
        [(all, Value::Null), (exact.clone(), json!(8)), (exact.clone(), json!(16))],
        "the group constraints stay: each request still names its devicegroup"
    );
    assert_eq!(
        modes(Allocator::Combinations),
        [(exact.clone(), json!(16)), (exact.clone(), json!(8)), (exact, json!(16))]
    );
    let (_, devices) = compiled_for(profiles, Allocator::Orderings).remove(0);
    assert_eq!(devices["constraints"][0]["matchAttribute"], "resource.aws.com/devicegroup16_id");
}
