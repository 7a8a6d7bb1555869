//! The shared table of invalid configs (tests/fixtures/invalid-configs.yaml).

use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct InvalidCase {
    pub case: String,
    /// The field path the error must name.
    pub field: String,
    /// `rejects` when the CRD schema or CEL catches it, `accepts` when only the operator's catalog rules do.
    pub server: String,
    #[serde(default)]
    pub metadata_name: Option<String>,
    pub spec: Value,
}

impl InvalidCase {
    /// The whole NeuronDRAConfig document, named `name` unless the case overrides it.
    pub fn document(&self, name: &str) -> Value {
        json!({
            "apiVersion": "neurondra.io/v1alpha1",
            "kind": "NeuronDRAConfig",
            "metadata": {"name": self.metadata_name.clone().unwrap_or_else(|| name.to_string())},
            "spec": self.spec,
        })
    }
}

pub fn invalid_cases() -> Vec<InvalidCase> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/invalid-configs.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
