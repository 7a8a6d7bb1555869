//! Fallbacks are checked like the request they stand in for, each error naming its own field.

use serde_json::{Value, json};

use super::*;
use crate::cli::parse_config;

fn check(profile: Value) -> Result<ValidatedConfig, InvalidConfig> {
    let doc = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "pool"}, "spec": {"profiles": [profile]},
    });
    validate(&parse_config(&doc.to_string()).expect("parses"))
}

/// The one error `profile` gets, as `path: reason`.
fn error(profile: Value) -> String {
    match check(profile) {
        Ok(_) => panic!("accepted"),
        Err(InvalidConfig(errors)) if errors.len() == 1 => errors[0].to_string(),
        Err(other) => panic!("not one error: {other}"),
    }
}

fn training(fallbacks: Value) -> Value {
    json!({"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": 16, "fallbacks": fallbacks}})
}

#[test]
fn fallbacks_resolve_to_choices_in_order() {
    let config = check(training(json!([
        {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 1},
        {"instanceType": "trn1.32xlarge"},
    ])))
    .expect("valid");
    let choices = &config.claims[0].choices;
    let kinds: Vec<(Option<&str>, &ClaimKind, Option<u8>)> =
        choices.iter().map(|c| (c.instance_type.as_deref(), &c.kind, c.logical_neuron_core)).collect();
    let devices = |count| ClaimKind::Devices { count, efa: None };
    assert_eq!(
        kinds,
        [
            (Some("trn2.48xlarge"), &devices(Count::Exactly(16)), None),
            (Some("trn2.48xlarge"), &devices(Count::Exactly(8)), Some(1)),
            (Some("trn1.32xlarge"), &devices(Count::All), None),
        ]
    );
}

#[test]
fn each_fallback_is_checked_against_the_catalog() {
    assert_eq!(
        error(training(
            json!([{"instanceType": "trn2.48xlarge", "devices": 8}, {"instanceType": "trn1.2xlarge", "devices": 4}])
        )),
        "spec.profiles[0].training.fallbacks[1].devices: 4 is more than the 1 devices of trn1.2xlarge"
    );
    assert_eq!(
        error(training(json!([{"instanceType": "trn1.32xlarge", "devices": 16, "logicalNeuronCore": 2}]))),
        "spec.profiles[0].training.fallbacks[0].logicalNeuronCore: trn1.32xlarge does not support Logical \
         NeuronCore configuration (only Trn2 and Trn3 do)"
    );
    assert_eq!(
        error(training(json!([{"instanceType": "inf2.48xlarge"}]))),
        "spec.profiles[0].training.fallbacks[0].instanceType: inf2.48xlarge is Inferentia, which the Neuron DRA \
         driver does not support"
    );
    assert_eq!(
        error(training(json!([{"devices": 5}]))),
        "spec.profiles[0].training.fallbacks[0].devices: 5 is not one of All, 1, 4, 8 or 16"
    );
    assert_eq!(
        error(training(json!([{"instanceType": "trn2"}]))),
        "spec.profiles[0].training.fallbacks[0].instanceType: \"trn2\" is not well-formed"
    );
}

#[test]
fn a_fallback_that_asks_for_the_same_devices_is_refused() {
    // Only the LNC differs from the request: the scheduler would fail it exactly where the request failed.
    let same = json!([{"instanceType": "trn1.32xlarge"}, {"instanceType": "trn2.48xlarge", "devices": 16, "logicalNeuronCore": 1}]);
    assert_eq!(
        error(training(same)),
        "spec.profiles[0].training.fallbacks[1]: asks for the same devices as the request or an earlier fallback, \
         so it would never be chosen"
    );
    // `devices` left out is `All`, as on the request.
    let all = json!([{"instanceType": "trn1.32xlarge"}, {"instanceType": "trn1.32xlarge", "devices": "All"}]);
    assert!(error(training(all)).starts_with("spec.profiles[0].training.fallbacks[1]: asks for the same devices"));
}

#[test]
fn efa_ultraserver_and_more_than_seven_fallbacks_are_refused() {
    let efa = json!({"name": "p", "disaggregated": {
        "prefill": {"devices": 8, "efa": true, "fallbacks": [{"devices": 4}]},
        "decode": {"devices": 1},
    }});
    assert_eq!(error(efa), format!("spec.profiles[0].disaggregated.prefill.fallbacks: {FALLBACKS_WITH_EFA}"));
    let us = json!({"name": "p", "longContextInference":
        {"instanceType": "trn2u.48xlarge", "ultraServerNodes": 2, "fallbacks": [{"devices": 16}]}});
    assert_eq!(error(us), "spec.profiles[0].longContextInference.fallbacks: must not be set with ultraServerNodes");
    let eight: Vec<Value> = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"]
        .iter()
        .map(|v| json!({"devices": 16, "neuronDriverVersion": v}))
        .collect();
    assert_eq!(
        error(training(json!(eight))),
        "spec.profiles[0].training.fallbacks: must have at most 7 entries or characters"
    );
    assert!(check(training(json!(eight[..7]))).is_ok(), "seven are fine");
}
