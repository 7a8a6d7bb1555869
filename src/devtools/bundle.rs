//! The OLM bundle (`neuron-dra-devtools bundle`, `make bundle`, checked in under `bundle/`), generated from the
//! sources the kustomize install uses: the Deployment, PodDisruptionBudget, metrics Service and image from
//! `config/manager`, the permissions, the ClusterRoles bound to nobody (the metrics reader, the kubelet plugin's) and
//! the CRD from `crds/`, `alm-examples`
//! from `samples/`. `config/rbac`'s ValidatingAdmissionPolicies and their bindings are not kinds OLM installs from a
//! bundle: docs/install.md's OLM section applies them beside it. `check` compares a bundle directory with what would be generated now and names
//! every file that is missing, stale or unexpected.
//!
//! Output is deterministic: JSON maps are sorted by key and the sources are read in a fixed order. The sources are
//! read in `sources`, the ClusterServiceVersion is assembled in `csv`, and what names the release is in `release`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

mod csv;
mod release;
mod sources;

use csv::csv;
pub use release::{CHANNELS, DEFAULT_CHANNEL, PACKAGE, VERSION};
pub use sources::Sources;

pub const CSV_FILE: &str = "manifests/neuron-dra-operator.clusterserviceversion.yaml";
pub const CRD_FILE: &str = "manifests/neurondra.io_neurondraconfigs.yaml";
pub const SERVICE_FILE: &str = "manifests/neuron-dra-operator-metrics_v1_service.yaml";
pub const DISRUPTION_BUDGET_FILE: &str = "manifests/neuron-dra-operator_policy_v1_poddisruptionbudget.yaml";
pub const METRICS_READER_FILE: &str =
    "manifests/neuron-dra-operator-metrics-reader_rbac.authorization.k8s.io_v1_clusterrole.yaml";
pub const PLUGIN_ROLE_FILE: &str = "manifests/neuron-dra-plugin_rbac.authorization.k8s.io_v1_clusterrole.yaml";
pub const ANNOTATIONS_FILE: &str = "metadata/annotations.yaml";

pub const DOCKERFILE: &str = "bundle.Dockerfile";

/// The bundle: file contents by path relative to the bundle directory.
pub type Files = BTreeMap<String, String>;

/// Generates the bundle from a checkout.
pub fn generate(root: &Path) -> anyhow::Result<Files> {
    let sources = Sources::read(root)?;
    let crd: Value = serde_yaml::from_str(&sources.crd_yaml).context("parsing the CRD")?;
    // OLM creates bundle objects in the namespace the operator is installed in.
    let without_namespace = |object: &Value| {
        let mut object = object.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("namespace");
        }
        object
    };
    let mut files = Files::from([
        (CSV_FILE.into(), yaml(&csv(&sources, &crd)?)),
        (CRD_FILE.into(), sources.crd_yaml.clone()),
        (SERVICE_FILE.into(), yaml(&without_namespace(&sources.metrics_service))),
        (DISRUPTION_BUDGET_FILE.into(), yaml(&without_namespace(&sources.disruption_budget))),
        (ANNOTATIONS_FILE.into(), yaml(&json!({ "annotations": annotations() }))),
        (DOCKERFILE.into(), dockerfile()),
    ]);
    // OLM installs a bundle's ClusterRoles as they are; its own bindings come from the CSV's permissions.
    for role in &sources.unbound_cluster_roles {
        let name = role["metadata"]["name"].as_str().context("a ClusterRole without a name")?;
        files.insert(format!("manifests/{name}_rbac.authorization.k8s.io_v1_clusterrole.yaml"), yaml(role));
    }
    Ok(files)
}

/// Writes the bundle under `dir`, creating directories as needed.
pub fn write(files: &Files, dir: &Path) -> anyhow::Result<()> {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap())?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// One way a bundle directory differs from the generated bundle; `file` is relative to the bundle directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    Missing { file: String },
    Stale { file: String },
    Unexpected { file: String },
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drift::Missing { file } => write!(f, "{file}: missing"),
            Drift::Stale { file } => write!(f, "{file}: differs from what `make bundle` generates"),
            Drift::Unexpected { file } => write!(f, "{file}: not part of the generated bundle"),
        }
    }
}

/// Compares `dir` with `expected`, file by file.
pub fn check(expected: &Files, dir: &Path) -> anyhow::Result<Vec<Drift>> {
    let mut drift = Vec::new();
    for (file, text) in expected {
        match std::fs::read_to_string(dir.join(file)) {
            Ok(found) if found == *text => {}
            Ok(_) => drift.push(Drift::Stale { file: file.clone() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => drift.push(Drift::Missing { file: file.clone() }),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.join(file).display())),
        }
    }
    for file in files_under(dir)? {
        if !expected.contains_key(&file) {
            drift.push(Drift::Unexpected { file });
        }
    }
    Ok(drift)
}

const CHANNELS_ANNOTATION: &str = "candidate,fast,stable";

/// The standard bundle annotations; `bundle.Dockerfile` repeats them as labels.
pub fn annotations() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"),
        ("operators.operatorframework.io.bundle.manifests.v1", "manifests/"),
        ("operators.operatorframework.io.bundle.metadata.v1", "metadata/"),
        ("operators.operatorframework.io.bundle.package.v1", PACKAGE),
        ("operators.operatorframework.io.bundle.channels.v1", CHANNELS_ANNOTATION),
        ("operators.operatorframework.io.bundle.channel.default.v1", DEFAULT_CHANNEL),
    ])
}

fn dockerfile() -> String {
    let mut text = String::from(
        "# The OLM bundle image; build it with this directory (bundle/) as the context. Generated by `make bundle`.\n\
         FROM scratch\n",
    );
    for (key, value) in annotations() {
        text.push_str(&format!("LABEL {key}={value}\n"));
    }
    text.push_str("COPY manifests /manifests/\nCOPY metadata /metadata/\n");
    text
}

/// Files under `dir`, relative to it, with `/` separators; none when `dir` does not exist.
fn files_under(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    Ok(found)
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).expect("JSON values serialize as YAML")
}

#[cfg(test)]
mod tests;
