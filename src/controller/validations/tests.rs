use super::*;
use serde_json::json;

fn config(generation: i64, devices: u32) -> NeuronDRAConfig {
    serde_json::from_value(json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "c", "uid": "u1", "generation": generation},
        "spec": {"profiles": [{"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": devices}}]},
    }))
    .unwrap()
}

#[test]
fn a_generation_is_validated_once_and_a_new_one_again() {
    let validations = Validations::default();
    let first = validations.of(&config(1, 4)).expect("valid");
    let again = validations.of(&config(1, 4)).expect("valid");
    assert!(Arc::ptr_eq(&first, &again), "the same generation is not validated again");
    assert!(validations.of(&config(2, 5)).is_none(), "5 devices is no connected group: invalid");
    let errors = validations.checked(&config(2, 5)).expect_err("kept with its field errors");
    assert!(errors.0.iter().any(|e| e.to_string().contains("devices")), "{errors:?}");
    assert!(validations.of(&config(3, 8)).is_some());
    assert_eq!(validations.len(), 1);
    validations.forget("u1");
    assert_eq!(validations.len(), 0);
}
