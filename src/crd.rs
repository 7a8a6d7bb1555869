//! The CRD as YAML: what `neuron-dra-operator crd` prints and `crds/` holds.

use kube::CustomResourceExt;

use crate::api::NeuronDRAConfig;

pub const CRD_FILE: &str = "crds/neurondra.io_neurondraconfigs.yaml";

pub fn crd_yaml() -> String {
    serde_yaml::to_string(&NeuronDRAConfig::crd()).expect("the CRD serializes")
}
