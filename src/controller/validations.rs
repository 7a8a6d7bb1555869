//! validations: what validating each cached config gave, kept per generation. Every reconcile checks its config
//! against all the others for conflicts; validating each of them again on every reconcile costs configs² validations
//! per round, while a config's validity changes only with its spec (its generation).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::NeuronDRAConfig;
use crate::logic::validate::{ValidatedConfig, validate};

/// A config's generation and what validating it gave (None: invalid).
type Validated = (Option<i64>, Option<Arc<ValidatedConfig>>);

/// Validation results by config uid.
#[derive(Debug, Default)]
pub struct Validations(Mutex<HashMap<String, Validated>>);

impl Validations {
    /// The validated form of `config`, None when it is invalid; validated once per generation.
    pub fn of(&self, config: &NeuronDRAConfig) -> Option<Arc<ValidatedConfig>> {
        let Some(uid) = config.metadata.uid.clone() else {
            return validate(config).ok().map(Arc::new); // not stored yet (tests): nothing to key by
        };
        let generation = config.metadata.generation;
        let mut known = self.0.lock().expect("not poisoned");
        match known.get(&uid) {
            Some((seen, validated)) if *seen == generation => validated.clone(),
            _ => {
                let validated = validate(config).ok().map(Arc::new);
                known.insert(uid, (generation, validated.clone()));
                validated
            }
        }
    }

    /// Drops what is kept of a config that is gone.
    pub fn forget(&self, uid: &str) {
        self.0.lock().expect("not poisoned").remove(uid);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().expect("not poisoned").len()
    }
}

#[cfg(test)]
mod tests {
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
        assert!(validations.of(&config(3, 8)).is_some());
        assert_eq!(validations.len(), 1);
        validations.forget("u1");
        assert_eq!(validations.len(), 0);
    }
}
