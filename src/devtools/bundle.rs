//! The OLM bundle (`neuron-dra-devtools bundle`, `make bundle`, checked in under `bundle/`), generated from the
//! sources the kustomize install uses: the Deployment, metrics Service and image from `config/manager`, the
//! permissions and the metrics-reader ClusterRole from `config/rbac`, the CRD from `crds/`, `alm-examples` from
//! `samples/`. `check` compares a
//! bundle directory with what would be generated now and names every file that is missing, stale or unexpected.
//!
//! Output is deterministic: JSON maps are sorted by key and the sources are read in a fixed order. One file over
//! 400 lines: the ClusterServiceVersion is assembled from every source at once, and its tests sit beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

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
pub const METRICS_READER_FILE: &str =
    "manifests/neuron-dra-operator-metrics-reader_rbac.authorization.k8s.io_v1_clusterrole.yaml";
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
    let mut service = sources.metrics_service.clone();
    // OLM creates bundle objects in the namespace the operator is installed in.
    if let Some(metadata) = service["metadata"].as_object_mut() {
        metadata.remove("namespace");
    }
    let mut files = Files::from([
        (CSV_FILE.into(), yaml(&csv(&sources, &crd)?)),
        (CRD_FILE.into(), sources.crd_yaml.clone()),
        (SERVICE_FILE.into(), yaml(&service)),
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

const DESCRIPTION: &str = "\
Runs AWS Neuron Dynamic Resource Allocation (DRA) on Trainium from one cluster-scoped `NeuronDRAConfig`.

The operator rolls out AWS's Neuron DRA kubelet plugin (DaemonSet, RBAC, DeviceClass), compiles workload profiles
(training, long-context inference, disaggregated prefill/decode) into topology-aware `ResourceClaimTemplate`s in the
namespaces where ML teams work, and reports rollout and device health in the config's status (`kubectl get ndc`).
ML engineers then only write `resourceClaimTemplateName: <profile>` in their pods.

Requires Kubernetes 1.34 or newer (`resource.k8s.io/v1`).

Upgrades: the operator refuses to start against a CRD older than the one it was built with; OLM installs the
bundle's CRD before the new operator, so upgrading through OLM upgrades both.
";

fn csv(sources: &Sources, crd: &Value) -> anyhow::Result<Value> {
    let name = format!("{PACKAGE}.v{VERSION}");
    let examples = serde_json::to_string_pretty(&sources.samples)?;
    let permissions = |rules: &Value| json!([{ "serviceAccountName": sources.service_account, "rules": rules }]);
    let install_modes: Vec<Value> = [("OwnNamespace", false), ("SingleNamespace", false), ("MultiNamespace", false)]
        .into_iter()
        // Cluster-scoped configs, cluster-wide operands: only AllNamespaces makes sense.
        .chain([("AllNamespaces", true)])
        .map(|(type_, supported)| json!({ "type": type_, "supported": supported }))
        .collect();
    let mut spec = json!({
        "displayName": "Neuron DRA Operator",
        "description": DESCRIPTION,
        "version": VERSION,
        "minKubeVersion": "1.34.0",
        // The API is v1alpha1.
        "maturity": "alpha",
        "icon": [{ "base64data": base64(sources.icon_svg.as_bytes()), "mediatype": "image/svg+xml" }],
        "keywords": ["aws", "neuron", "trainium", "dra", "dynamic-resource-allocation", "accelerator", "machine-learning"],
        "maintainers": [{ "name": "neuron-dra-operator maintainers", "email": "maintainers@neurondra.io" }],
        "provider": { "name": "neuron-dra-operator maintainers" },
        "links": [
            { "name": "AWS Neuron documentation", "url": "https://awsdocs-neuron.readthedocs-hosted.com/" },
            { "name": "Kubernetes Dynamic Resource Allocation", "url": "https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/" },
        ],
        "installModes": install_modes,
        "customresourcedefinitions": { "owned": [owned_crd(crd)?] },
        "install": {
            "strategy": "deployment",
            "spec": {
                "clusterPermissions": permissions(&json!(sources.cluster_rules)),
                "permissions": permissions(&sources.role["rules"]),
                "deployments": [{
                    "name": sources.deployment["metadata"]["name"],
                    "label": sources.deployment["metadata"]["labels"],
                    "spec": sources.deployment["spec"],
                }],
            },
        },
    });
    if let Some(previous) = REPLACES {
        spec["replaces"] = json!(previous);
    }
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": name,
            "annotations": {
                "alm-examples": examples,
                "capabilities": "Basic Install",
                "categories": "AI/Machine Learning",
                "containerImage": sources.image(),
                "createdAt": CREATED_AT,
                "repository": REPOSITORY,
                "support": "neuron-dra-operator maintainers",
                "description": "Runs AWS Neuron DRA on Trainium from one NeuronDRAConfig.",
                "olm.skipRange": format!("<{VERSION}"),
                "operatorframework.io/suggested-namespace": sources.deployment["metadata"]["namespace"],
            },
        },
        "spec": spec,
    }))
}

/// A field a console shows and offers in forms: (path, display name, x-descriptors). The description comes from
/// the CRD's schema, so a path that does not exist fails generation.
type Descriptor = (&'static str, &'static str, &'static [&'static str]);

const SPEC_DESCRIPTORS: &[Descriptor] = &[
    ("nodeSelector", "Node Selector", &["urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Node"]),
    ("driver.image", "Driver Image", &["urn:alm:descriptor:com.tectonic.ui:text"]),
    ("driver.imagePullPolicy", "Driver Image Pull Policy", &["urn:alm:descriptor:com.tectonic.ui:imagePullPolicy"]),
    ("driver.namespace", "Driver Namespace", &["urn:alm:descriptor:io.kubernetes:Namespace"]),
    ("driver.resources", "Driver Resources", &["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"]),
    ("deviceClassName", "Device Class", &["urn:alm:descriptor:com.tectonic.ui:text"]),
    ("templates.namespaces", "Template Namespaces", &[]),
    (
        "templates.namespaceSelector",
        "Template Namespace Selector",
        &["urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Namespace"],
    ),
    ("profiles", "Profiles", &[]),
    ("paused", "Paused", &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"]),
];

const STATUS_DESCRIPTORS: &[Descriptor] = &[
    ("phase", "Phase", &["urn:alm:descriptor:io.kubernetes.phase"]),
    ("conditions", "Conditions", &["urn:alm:descriptor:io.kubernetes.conditions"]),
    ("observedGeneration", "Observed Generation", &["urn:alm:descriptor:text"]),
    ("driver.daemonSet", "Driver DaemonSet", &["urn:alm:descriptor:text"]),
    ("driver.readyNodes", "Driver Ready Nodes", &["urn:alm:descriptor:text"]),
    ("devices.nodes", "Nodes", &["urn:alm:descriptor:text"]),
    ("devices.total", "Devices", &["urn:alm:descriptor:text"]),
    ("devices.healthy", "Healthy Devices", &["urn:alm:descriptor:text"]),
    ("devices.unhealthy", "Unhealthy Devices", &["urn:alm:descriptor:text"]),
    ("unhealthyDevices", "Unhealthy Device List", &[]),
    ("nodeIssues", "Node Issues", &[]),
    ("templates.count", "Templates", &["urn:alm:descriptor:text"]),
    ("templates.namespaces", "Template Namespaces", &["urn:alm:descriptor:text"]),
];

fn owned_crd(crd: &Value) -> anyhow::Result<Value> {
    let version = &crd["spec"]["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    Ok(json!({
        "name": crd["metadata"]["name"],
        "version": version["name"],
        "kind": crd["spec"]["names"]["kind"],
        "displayName": "Neuron DRA Config",
        "description": schema["description"],
        "resources": [
            { "kind": "DaemonSet", "version": "v1" },
            { "kind": "DeviceClass", "version": "v1" },
            { "kind": "ResourceClaimTemplate", "version": "v1" },
            { "kind": "ServiceAccount", "version": "v1" },
            { "kind": "ClusterRole", "version": "v1" },
            { "kind": "ClusterRoleBinding", "version": "v1" },
            { "kind": "Namespace", "version": "v1" },
        ],
        "specDescriptors": descriptors(schema, "spec", SPEC_DESCRIPTORS)?,
        "statusDescriptors": descriptors(schema, "status", STATUS_DESCRIPTORS)?,
    }))
}

/// Descriptors for fields under `top` (`spec` or `status`) of a CRD schema, described by the schema itself.
fn descriptors(schema: &Value, top: &str, list: &[Descriptor]) -> anyhow::Result<Vec<Value>> {
    list.iter()
        .map(|(path, display_name, x_descriptors)| {
            let field = path
                .split('.')
                .try_fold(&schema["properties"][top], |node, part| node["properties"].get(part))
                .with_context(|| format!("descriptor {top}.{path} is not in the CRD schema"))?;
            Ok(json!({
                "path": path,
                "displayName": display_name,
                "description": field["description"],
                "x-descriptors": x_descriptors,
            }))
        })
        .collect()
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
mod tests {
    use super::*;

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn generated_csv() -> Value {
        serde_yaml::from_str(&generate(root()).unwrap()[CSV_FILE]).unwrap()
    }

    #[test]
    fn generation_is_deterministic() {
        assert_eq!(generate(root()).unwrap(), generate(root()).unwrap());
    }

    #[test]
    fn the_dockerfile_labels_are_the_annotations() {
        let files = generate(root()).unwrap();
        let labels: BTreeMap<String, String> = files[DOCKERFILE]
            .lines()
            .filter_map(|l| l.strip_prefix("LABEL "))
            .map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
            .collect();
        let annotations: BTreeMap<String, BTreeMap<String, String>> =
            serde_yaml::from_str(&files[ANNOTATIONS_FILE]).unwrap();
        assert_eq!(labels, annotations["annotations"]);
        assert!(files[DOCKERFILE].contains("COPY manifests /manifests/\nCOPY metadata /metadata/\n"));
    }

    #[test]
    fn the_csv_is_versioned_cluster_wide_and_needs_kubernetes_1_34() {
        let csv = generated_csv();
        assert_eq!(csv["metadata"]["name"], format!("neuron-dra-operator.v{VERSION}"));
        assert_eq!(csv["spec"]["version"], VERSION);
        assert_eq!(csv["spec"]["minKubeVersion"], "1.34.0");
        assert_eq!(csv["metadata"]["annotations"]["olm.skipRange"], format!("<{VERSION}"));
        let supported: Vec<&str> = csv["spec"]["installModes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["supported"] == true)
            .map(|m| m["type"].as_str().unwrap())
            .collect();
        assert_eq!(supported, ["AllNamespaces"]);
        assert_eq!(
            csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["image"],
            csv["metadata"]["annotations"]["containerImage"]
        );
    }

    #[test]
    fn descriptors_describe_real_fields() {
        let owned = &generated_csv()["spec"]["customresourcedefinitions"]["owned"][0];
        assert_eq!(owned["name"], "neurondraconfigs.neurondra.io");
        for list in ["specDescriptors", "statusDescriptors"] {
            for descriptor in owned[list].as_array().unwrap() {
                assert!(descriptor["description"].as_str().is_some_and(|d| !d.is_empty()), "{descriptor}");
            }
        }
        let paths: Vec<&str> =
            owned["statusDescriptors"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
        for path in ["phase", "conditions", "devices.healthy"] {
            assert!(paths.contains(&path), "{path}");
        }
        let crd: Value = serde_yaml::from_str(&crate::runtime::crd::crd_yaml()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let error = descriptors(schema, "status", &[("devices.broken", "X", &[])]).unwrap_err();
        assert_eq!(error.to_string(), "descriptor status.devices.broken is not in the CRD schema");
    }

    #[test]
    fn channels_follow_olm_conventions_and_the_annotation_lists_them() {
        assert_eq!(CHANNELS.join(","), CHANNELS_ANNOTATION);
        assert!(CHANNELS.contains(&DEFAULT_CHANNEL));
        let annotations = generated_csv()["metadata"]["annotations"].clone();
        for key in ["createdAt", "repository", "support", "containerImage", "categories", "capabilities"] {
            assert!(annotations[key].as_str().is_some_and(|v| !v.is_empty()), "{key}");
        }
    }

    /// The operator may review /metrics callers; whoever scrapes gets the metrics-reader ClusterRole, bound by the
    /// cluster's admin (OLM binds only what the CSV's permissions list).
    #[test]
    fn the_metrics_auth_rules_are_cluster_permissions_and_the_reader_role_ships_unbound() {
        let files = generate(root()).unwrap();
        let csv: Value = serde_yaml::from_str(&files[CSV_FILE]).unwrap();
        let rules = csv["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"].as_array().unwrap().clone();
        for (group, resource) in
            [("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")]
        {
            let rule = json!({"apiGroups": [group], "resources": [resource], "verbs": ["create"]});
            assert!(rules.contains(&rule), "no {rule} in {rules:?}");
        }
        assert!(rules.iter().any(|r| r["resources"] == json!(["neurondraconfigs"])), "the operator's own rules");
        assert!(!rules.iter().any(|r| r.get("nonResourceURLs").is_some()), "the operator does not read /metrics");
        let reader: Value = serde_yaml::from_str(&files[METRICS_READER_FILE]).unwrap();
        assert_eq!(reader["kind"], "ClusterRole");
        assert_eq!(reader["rules"], json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]));
    }

    #[test]
    fn base64_is_rfc_4648() {
        let cases =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn images_resolve_like_kustomize() {
        let mut deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"image": "op"}, {"image": "op:1"}, {"image": "other:1"}, {"image": "localhost:5000/op:2"},
        ]}}}});
        set_image(&mut deployment, &json!({"name": "op", "newName": "r.example/op", "newTag": "9"}));
        set_image(&mut deployment, &json!({"name": "localhost:5000/op", "digest": "sha256:ab"}));
        let images: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["image"].as_str().unwrap())
            .collect();
        assert_eq!(images, ["r.example/op:9", "r.example/op:9", "other:1", "localhost:5000/op@sha256:ab"]);
    }
}
