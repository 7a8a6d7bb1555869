//! The ClusterServiceVersion: the operator's description, install strategy, permissions and the CRD's descriptors,
//! assembled from every source at once.

use anyhow::Context;
use serde_json::{Value, json};

use super::release::{CREATED_AT, PACKAGE, REPLACES, REPOSITORY, VERSION};
use super::sources::Sources;

const DESCRIPTION: &str = "\
Runs AWS Neuron Dynamic Resource Allocation (DRA) on Trainium from one cluster-scoped `NeuronDRAConfig`.

The operator rolls out AWS's Neuron DRA kubelet plugin (DaemonSet, RBAC, DeviceClass), compiles workload profiles
(training, long-context inference, disaggregated prefill/decode) into topology-aware `ResourceClaimTemplate`s in the
namespaces where ML teams work, and reports rollout and device health in the config's status (`kubectl get ndc`).
ML engineers then only write `resourceClaimTemplateName: <profile>` in their pods.

Requires Kubernetes 1.34 or newer (`resource.k8s.io/v1`). Install it in the suggested namespace,
`neuron-dra-operator-system`. OLM cannot install ValidatingAdmissionPolicies: apply the operator's and the kubelet
plugin's fences from the repository's `config/rbac` (docs/install.md, \"With OLM\"); until they exist, every config
reports `DriverReady=False`, reason `Unfenced`, and no kubelet plugin is started.

Upgrades: the operator refuses to start against a CRD older than the one it was built with; OLM installs the
bundle's CRD before the new operator, so upgrading through OLM upgrades both.
";

pub(super) fn csv(sources: &Sources, crd: &Value) -> anyhow::Result<Value> {
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
        // The CSV has no licence field; consoles show the links, and OperatorHub's listings name it this way.
        "links": [
            { "name": "License (Apache-2.0)", "url": format!("{REPOSITORY}/blob/main/LICENSE") },
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

/// What a config makes: the kinds of the table (`controller::kinds`), so a new kind is listed without a line here,
/// and the driver namespace, which it creates but never deletes (configs share it).
fn resources() -> Vec<Value> {
    let owned = crate::controller::kinds::owned().into_iter().map(|k| json!({ "kind": k.kind, "version": k.version }));
    owned.chain([json!({ "kind": "Namespace", "version": "v1" })]).collect()
}

fn owned_crd(crd: &Value) -> anyhow::Result<Value> {
    let version = &crd["spec"]["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    Ok(json!({
        "name": crd["metadata"]["name"],
        "version": version["name"],
        "kind": crd["spec"]["names"]["kind"],
        "displayName": "Neuron DRA Config",
        "description": schema["description"],
        "resources": resources(),
        "specDescriptors": descriptors(schema, "spec", SPEC_DESCRIPTORS)?,
        "statusDescriptors": descriptors(schema, "status", STATUS_DESCRIPTORS)?,
    }))
}

/// Descriptors for fields under `top` (`spec` or `status`) of a CRD schema, described by the schema itself.
pub(super) fn descriptors(schema: &Value, top: &str, list: &[Descriptor]) -> anyhow::Result<Vec<Value>> {
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

/// Standard base64 with padding (RFC 4648), as OLM decodes `icon.base64data`.
pub(super) fn base64(bytes: &[u8]) -> String {
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
