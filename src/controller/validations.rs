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
mod tests;
