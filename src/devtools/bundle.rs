//! The OLM bundle (`neuron-dra-devtools bundle`, `make bundle`, checked in under `bundle/`), generated from the
//! sources the kustomize install uses: the Deployment, PodDisruptionBudget, metrics Service and image from
//! `config/manager`, the permissions, the ClusterRoles bound to nobody (the metrics reader, the kubelet plugin's) and
//! the CRD from `crds/`, `alm-examples`
//! from `samples/`. `config/rbac`'s ValidatingAdmissionPolicies and their bindings are not kinds OLM installs from a
//! bundle: docs/install.md's OLM section applies them beside it. `check` compares a bundle directory with what would be generated now and names
//! every file that is missing, stale or unexpected.
//!
//! Output is deterministic: JSON maps are sorted by key and the sources are read in a fixed order. The
//! ClusterServiceVersion itself is assembled in `csv`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

mod csv;
use csv::csv;

pub const PACKAGE: &str = "neuron-dra-operator";
/// OLM's channel naming convention: `candidate` ⊇ `fast` ⊇ `stable`; a release goes into all three, and a
/// subscription without a channel follows `stable`.
pub const CHANNELS: &[&str] = &["candidate", "fast", "stable"];
pub const DEFAULT_CHANNEL: &str = "stable";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// When this version was released (the CSV's `createdAt`); a constant so generation stays deterministic. Set it
/// with the version at release.
const CREATED_AT: &str = "2026-11-30T00:00:00Z";
const REPOSITORY: &str = "https://github.com/neurondra/neuron-dra-operator";
/// The icon OperatorHub shows, drawn for this project.
const ICON_FILE: &str = "docs/icon.svg";
/// The CSV this version replaces in the channel: none for the first release. Set it to the previous release's CSV
/// name when releasing; `olm.skipRange` already lets OLM upgrade from any older version.
const REPLACES: Option<&str> = None;

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

/// What the bundle is made of, read from a checkout.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `config/manager`'s Deployment with the image from its kustomization's `images`.
    pub deployment: Value,
    pub metrics_service: Value,
    pub disruption_budget: Value,
    /// The rules of every ClusterRole `config/rbac` binds to the operator's ServiceAccount, in file order.
    pub cluster_rules: Vec<Value>,
    /// The ClusterRoles it binds to nobody (the metrics reader, for whoever scrapes): shipped as they are.
    pub unbound_cluster_roles: Vec<Value>,
    /// The leader-election Role.
    pub role: Value,
    pub service_account: String,
    /// `crds/`'s file, byte for byte.
    pub crd_yaml: String,
    /// `samples/*.yaml` by file name.
    pub samples: Vec<Value>,
    pub icon_svg: String,
}

impl Sources {
    pub fn read(root: &Path) -> anyhow::Result<Sources> {
        let manager = kustomization(&root.join("config/manager"))?;
        let rbac = kustomization(&root.join("config/rbac"))?;
        let one = |objects: &[Value], kind: &str| -> anyhow::Result<Value> {
            let mut found = objects.iter().filter(|o| o["kind"] == kind);
            match (found.next(), found.next()) {
                (Some(object), None) => Ok(object.clone()),
                _ => bail!("expected exactly one {kind}"),
            }
        };
        let service_account =
            one(&rbac, "ServiceAccount")?["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let deployment = one(&manager, "Deployment")?;
        let runs_as = deployment["spec"]["template"]["spec"]["serviceAccountName"].as_str();
        if runs_as != Some(service_account.as_str()) {
            bail!(
                "config/manager's Deployment runs as {runs_as:?}, not config/rbac's ServiceAccount {service_account:?}"
            );
        }
        let bound: Vec<&Value> = rbac
            .iter()
            .filter(|o| o["kind"] == "ClusterRoleBinding")
            .filter(|b| b["subjects"].as_array().into_iter().flatten().any(|s| s["name"] == service_account.as_str()))
            .map(|b| &b["roleRef"]["name"])
            .collect();
        let (granted, unbound): (Vec<Value>, Vec<Value>) = rbac
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .cloned()
            .partition(|role| bound.contains(&&role["metadata"]["name"]));
        if granted.is_empty() {
            bail!("config/rbac binds no ClusterRole to {service_account:?}");
        }
        let mut samples = Vec::new();
        for file in yaml_files(&root.join("samples"))? {
            samples.extend(read_yaml(&file)?);
        }
        Ok(Sources {
            deployment,
            metrics_service: one(&manager, "Service")?,
            disruption_budget: one(&manager, "PodDisruptionBudget")?,
            cluster_rules: granted.iter().flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default()).collect(),
            unbound_cluster_roles: unbound,
            role: one(&rbac, "Role")?,
            service_account,
            crd_yaml: read(&root.join(crate::runtime::crd::CRD_FILE))?,
            samples,
            icon_svg: read(&root.join(ICON_FILE))?,
        })
    }

    /// The operator image the Deployment runs.
    pub fn image(&self) -> &str {
        self.deployment["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap_or_default()
    }
}

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

/// The objects of a kustomization's file resources, with its `images` applied (the subset of kustomize the
/// `config/` directories use; tests compare the result with `kubectl kustomize`).
fn kustomization(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let kustomization = read_yaml(&dir.join("kustomization.yaml"))?.remove(0);
    let mut objects = Vec::new();
    for resource in kustomization["resources"].as_array().into_iter().flatten() {
        let path = dir.join(resource.as_str().context("a resource is not a string")?);
        if path.is_dir() {
            bail!("{}: directory resources are not supported here", path.display());
        }
        objects.extend(read_yaml(&path)?);
    }
    for image in kustomization["images"].as_array().into_iter().flatten() {
        for object in &mut objects {
            set_image(object, image);
        }
    }
    Ok(objects)
}

/// Applies one kustomize `images` entry (name, newName, newTag, digest) to a workload's containers.
fn set_image(object: &mut Value, image: &Value) {
    let name = image["name"].as_str().unwrap_or_default();
    let Some(pod) = object.pointer_mut("/spec/template/spec") else { return };
    for list in ["initContainers", "containers"] {
        for container in pod.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(current) = container["image"].as_str() else { continue };
            let (current_name, current_tag) = split_image(current);
            if current_name != name {
                continue;
            }
            let new_name = image["newName"].as_str().unwrap_or(name);
            let reference = match (image["digest"].as_str(), image["newTag"].as_str(), current_tag) {
                (Some(digest), _, _) => format!("{new_name}@{digest}"),
                (None, Some(tag), _) => format!("{new_name}:{tag}"),
                (None, None, Some(tag)) => format!("{new_name}{tag}"),
                (None, None, None) => new_name.to_string(),
            };
            container["image"] = json!(reference);
        }
    }
}

/// `registry:5000/repo:tag` → (`registry:5000/repo`, Some(`:tag`)); a digest stays with the tag part.
fn split_image(reference: &str) -> (&str, Option<&str>) {
    let last_segment = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_segment..].find([':', '@']) {
        Some(i) => (&reference[..last_segment + i], Some(&reference[last_segment + i..])),
        None => (reference, None),
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Every document of a YAML file.
fn read_yaml(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = read(path)?;
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            serde::Deserialize::deserialize(document).with_context(|| format!("parsing {}", path.display()))
        })
        .filter(|value| !matches!(value, Ok(Value::Null)))
        .collect()
}

fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    Ok(files)
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

/// Standard base64 with padding (RFC 4648), as OLM decodes `icon.base64data`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char } else { '=' });
        }
    }
    out
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).expect("JSON values serialize as YAML")
}

#[cfg(test)]
mod tests;
