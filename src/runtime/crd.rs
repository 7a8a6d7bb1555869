//! The CRD as YAML (what `neuron-dra-operator crd` prints and `crds/` holds), and the check that the installed
//! CRD is not older than the one this binary was built with.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::NeuronDRAConfig;
use crate::logic::desired::short_hash;

pub const CRD_FILE: &str = "crds/neurondra.io_neurondraconfigs.yaml";
/// Operator version that generated the CRD.
pub const ANNOTATION_VERSION: &str = "neurondra.io/operator-version";
/// Hash of the CRD's spec: equal hashes mean the same schema.
pub const ANNOTATION_SCHEMA_HASH: &str = "neurondra.io/schema-hash";

/// The CRD, annotated with the operator version and a hash of its spec.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = NeuronDRAConfig::crd();
    default_status(&mut crd);
    crd.metadata.annotations = Some(BTreeMap::from([
        (ANNOTATION_VERSION.to_string(), env!("CARGO_PKG_VERSION").to_string()),
        (ANNOTATION_SCHEMA_HASH.to_string(), short_hash(&crd.spec)),
    ]));
    crd
}

/// A config's status until the operator first writes one: `observedGeneration: 0`, which no generation equals, so
/// kstatus and the Argo CD check (docs/gitops.md) read a config the operator has not seen yet as in progress. Without
/// it kstatus reads an object with no status as Current, and a GitOps gate would open before anything happened.
/// The API server fills the default in whenever it returns an object without a status.
fn default_status(crd: &mut CustomResourceDefinition) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON;
    for version in &mut crd.spec.versions {
        let schema = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut());
        if let Some(status) = schema.and_then(|s| s.properties.as_mut()).and_then(|p| p.get_mut("status")) {
            status.default = Some(JSON(serde_json::json!({"observedGeneration": 0})));
        }
    }
}

pub fn crd_yaml() -> String {
    serde_yaml::to_string(&crd()).expect("the CRD serializes")
}

/// The one upgrade procedure (docs/install.md), which the refusal below names instead of commands of its own.
pub const UPGRADE_DOC: &str = "https://github.com/neurondra/neuron-dra-operator/blob/main/docs/install.md#upgrading";

/// Why the installed CRD cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CrdMismatch {
    #[error(
        "the NeuronDRAConfig CRD is not installed; install it with the operator (docs/install.md), or on its own with `kubectl apply -f {CRD_FILE}`"
    )]
    Missing,
    #[error(
        "the installed NeuronDRAConfig CRD (operator version {installed}) is older than this operator ({ours}) and would silently drop fields; upgrade it as {UPGRADE_DOC} says (with Helm, `helm upgrade` to this chart version does it), then restart the operator"
    )]
    Older { installed: String, ours: String },
}

/// Compares the installed CRD's annotations with this build's. A newer CRD is accepted (fields only grow within
/// v1alpha1); an older or unannotated one is refused.
pub fn check_installed(installed: Option<&CustomResourceDefinition>) -> Result<(), CrdMismatch> {
    let installed = installed.ok_or(CrdMismatch::Missing)?;
    let ours = crd();
    let annotation = |crd: &CustomResourceDefinition, key: &str| {
        crd.metadata.annotations.as_ref().and_then(|a| a.get(key)).cloned().unwrap_or_default()
    };
    if annotation(installed, ANNOTATION_SCHEMA_HASH) == annotation(&ours, ANNOTATION_SCHEMA_HASH) {
        return Ok(());
    }
    let installed_version = annotation(installed, ANNOTATION_VERSION);
    let our_version = annotation(&ours, ANNOTATION_VERSION);
    if parse_version(&installed_version) > parse_version(&our_version) {
        return Ok(());
    }
    Err(CrdMismatch::Older {
        installed: if installed_version.is_empty() { "unknown".into() } else { installed_version },
        ours: our_version,
    })
}

fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

#[cfg(test)]
mod tests;
