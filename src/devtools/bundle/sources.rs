//! What the bundle is generated from, read from a checkout: `config/manager` and `config/rbac` through the subset of
//! kustomize they use, the CRD, the samples and the icon.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The icon OperatorHub shows, drawn for this project.
const ICON_FILE: &str = "docs/icon.svg";

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
pub(super) fn set_image(object: &mut Value, image: &Value) {
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
pub(super) fn read_yaml(path: &Path) -> anyhow::Result<Vec<Value>> {
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
