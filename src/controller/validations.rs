//! validations: what validating each cached config gave, kept per generation. Every reconcile checks its config
//! against all the others for conflicts; validating each of them again on every reconcile costs configs² validations
//! per round, while a config's validity changes only with its spec (its generation).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::NeuronDRAConfig;
use crate::logic::validate::{InvalidConfig, ValidatedConfig, validate};

/// What validating a config gave: its validated form, or every field in error.
pub type Checked = Result<Arc<ValidatedConfig>, InvalidConfig>;

/// A config's generation and what validating it gave.
type Validated = (Option<i64>, Checked);

/// Validation results by config uid.
#[derive(Debug, Default)]
pub struct Validations(Mutex<HashMap<String, Validated>>);

impl Validations {
    /// The validated form of `config`, None when it is invalid.
    pub fn of(&self, config: &NeuronDRAConfig) -> Option<Arc<ValidatedConfig>> {
        self.checked(config).ok()
    }

    /// What validating `config` gives, worked out once per generation.
    pub fn checked(&self, config: &NeuronDRAConfig) -> Checked {
        let Some(uid) = config.metadata.uid.clone() else {
            return validate(config).map(Arc::new); // not stored yet (tests): nothing to key by
        };
        let generation = config.metadata.generation;
        let mut known = self.0.lock().expect("not poisoned");
        match known.get(&uid) {
            Some((seen, checked)) if *seen == generation => checked.clone(),
            _ => {
                let checked = validate(config).map(Arc::new);
                known.insert(uid, (generation, checked.clone()));
                checked
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
