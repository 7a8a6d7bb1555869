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

/// A trn2.48xlarge request for 16 devices with `fallbacks`, allowed to change the LNC (the rules tested with it are
/// the others; `strict` is the same without the allowance).
fn training(fallbacks: Value) -> Value {
    let mut profile = strict(fallbacks);
    profile["training"]["allowLncChange"] = json!(true);
    profile
}

fn strict(fallbacks: Value) -> Value {
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

#[test]
fn a_fallback_that_changes_the_lnc_is_refused_naming_it() {
    // 8 devices at LNC=2 falling back to 4 at LNC=1: the model compiled for LNC=2 would not load.
    let finetune = |fallback: Value| {
        json!({"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 2,
            "fallbacks": [fallback]}})
    };
    assert_eq!(
        error(finetune(json!({"instanceType": "trn2.48xlarge", "devices": 4, "logicalNeuronCore": 1}))),
        "spec.profiles[0].training.fallbacks[0].logicalNeuronCore: runs at LNC=1 but the request at LNC=2: a model \
         compiled for one does not load at the other; keep LNC=2 or set allowLncChange: true"
    );
    // The same LNC, written or the default, is fine.
    assert!(check(finetune(json!({"instanceType": "trn2.48xlarge", "devices": 4, "logicalNeuronCore": 2}))).is_ok());
    assert!(check(finetune(json!({"instanceType": "trn2.48xlarge", "devices": 4}))).is_ok());
    // Trainium1 runs only at LNC=1: a trn2 request at the default LNC=2 cannot fall back to it unmarked.
    assert_eq!(
        error(strict(json!([{"instanceType": "trn2.48xlarge", "devices": 8}, {"instanceType": "trn1.32xlarge"}]))),
        "spec.profiles[0].training.fallbacks[1].logicalNeuronCore: runs at LNC=1 but the request at LNC=2: a model \
         compiled for one does not load at the other; keep LNC=2 or set allowLncChange: true"
    );
    // Every side of every kind is checked, each naming its own field.
    let disaggregated = json!({"name": "p", "disaggregated": {
        "prefill": {"devices": 8},
        "decode": {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 1, "fallbacks": [{"devices": 4}]},
    }});
    assert!(error(disaggregated).starts_with("spec.profiles[0].disaggregated.decode.fallbacks[0].logicalNeuronCore: "));
    let inference = json!({"name": "p", "longContextInference": {"devices": 16, "logicalNeuronCore": 1,
        "fallbacks": [{"devices": 8, "logicalNeuronCore": 1}, {"devices": 4}]}});
    assert!(error(inference).starts_with("spec.profiles[0].longContextInference.fallbacks[1].logicalNeuronCore: "));
}

#[test]
fn allow_lnc_change_lets_a_fallback_change_the_lnc() {
    let marked = json!({"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": 8, "logicalNeuronCore": 2,
        "allowLncChange": true, "fallbacks": [{"instanceType": "trn2.48xlarge", "devices": 4, "logicalNeuronCore": 1}]}});
    let config = check(marked.clone()).expect("marked as intended");
    let lncs: Vec<Option<u8>> = config.claims[0].choices.iter().map(|c| c.logical_neuron_core).collect();
    assert_eq!(lncs, [Some(2), Some(1)]);
    // `false` is the default: refused.
    let mut unmarked = marked;
    unmarked["training"]["allowLncChange"] = json!(false);
    assert!(error(unmarked).starts_with("spec.profiles[0].training.fallbacks[0].logicalNeuronCore: "));
}

#[test]
fn the_lnc_a_choice_runs_at_follows_the_catalog() {
    use crate::api::DeviceRequest;
    let at = |instance_type: Option<&str>, lnc: Option<u8>| {
        effective_lnc(&DeviceRequest {
            instance_type: instance_type.map(str::to_string),
            logical_neuron_core: lnc,
            ..DeviceRequest::default()
        })
    };
    assert_eq!(at(None, None), 2, "the driver's default");
    assert_eq!(at(Some("trn2.48xlarge"), Some(1)), 1);
    // The rule (and its CEL twin) tells Trainium1 by the `trn1` prefix: exactly the catalog's types without LNC.
    for row in crate::logic::catalog::TRAINIUM_TYPES {
        let expected = if row.lnc { crate::logic::catalog::DEFAULT_LNC as u8 } else { 1 };
        assert_eq!(at(Some(row.name), None), expected, "{}", row.name);
    }
}

/// #50: what the operator policy refuses of the plugin's pod is refused in the config first, each field named.
#[test]
fn driver_pod_fields_the_fence_refuses_are_refused_in_the_config() {
    let doc = |driver: Value| {
        json!({"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "metadata": {"name": "pool"},
               "spec": {"profiles": [{"name": "p", "training": {"devices": 4}}], "driver": driver}})
    };
    let errors = |driver: Value| match validate(&parse_config(&doc(driver).to_string()).expect("parses")) {
        Ok(_) => String::new(),
        Err(invalid) => invalid.to_string(),
    };
    let secret = json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]});
    assert!(errors(secret).starts_with("spec.driver.env[0].valueFrom: a value from a Secret or ConfigMap"));
    let config_map = json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]});
    assert!(errors(config_map).starts_with("spec.driver.env[0].valueFrom"));
    let everything = json!({"tolerations": [{"operator": "Exists"}]});
    assert!(errors(everything).starts_with("spec.driver.tolerations[0].key: must name a key"));
    let gpu = json!({"resources": {"requests": {"cpu": "10m", "nvidia.com/gpu": "1"}}});
    assert_eq!(errors(gpu), "spec.driver.resources.requests: nvidia.com/gpu is not allowed: only cpu and memory");
    let fine = json!({"env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, {"name": "V", "value": "1"}],
        "tolerations": [{"key": "example.com/t", "operator": "Exists"}],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}});
    assert_eq!(errors(fine), "");
}
