//! The profile kinds the scheduling scenario times, each beside a plain claim of the same device count: the
//! templates come from the operator's own compiler (the library, in this process: no operator runs), the plain ones
//! are written here (`exactly: {count: N}` of the same DeviceClass, no selector, no constraint), and so is each
//! template's bare twin (its very requests without a selector or constraint: what the shape itself costs).

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::ResourceExt;
use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::desired::{Allocator, OwnClasses, build_with};
use neuron_dra_operator::logic::validate::validate;
use serde_json::{Value, json};

/// One profile kind of the matrix.
pub struct Kind {
    /// The profile's name, and its template's.
    pub name: &'static str,
    /// The profile as a NeuronDRAConfig writes it.
    pub profile: Value,
    /// Devices a pod takes (the preferred choice for fallbacks); also the plain claim's count.
    pub devices: u32,
    /// Whether the pods take EFA interfaces too (occupancy then holds the EFAs of its devices).
    pub efa: bool,
    /// Whether the kind runs on the UltraServer fleet (trn2u) and takes the node entry.
    pub ultra: bool,
}

pub const TRN2: &str = "trn2.48xlarge";
pub const TRN2U: &str = "trn2u.48xlarge";
/// The config's DeviceClass (the default `deviceClassName`).
pub const DEVICE_CLASS: &str = "neuron.aws.com";

pub fn all() -> Vec<Kind> {
    let kind = |name, profile, devices, efa, ultra| Kind { name, profile, devices, efa, ultra };
    vec![
        kind("one", json!({"training": {"devices": 1}}), 1, false, false),
        kind("four", json!({"training": {"devices": 4}}), 4, false, false),
        kind("four-efa", json!({"training": {"devices": 4, "efa": true}}), 4, true, false),
        kind("eight", json!({"training": {"devices": 8}}), 8, false, false),
        kind("sixteen", json!({"training": {"devices": 16}}), 16, false, false),
        kind("whole", json!({"training": {}}), 16, false, false),
        kind(
            "fallbacks",
            json!({"training": {"devices": 16, "fallbacks": [{"devices": 8}, {"devices": 4}]}}),
            16,
            false,
            false,
        ),
        kind(
            "ultraserver",
            json!({"longContextInference": {"instanceType": TRN2U, "ultraServerNodes": 1}}),
            16,
            false,
            true,
        ),
    ]
}

/// What to apply before any pod: the DeviceClasses and every template, compiled by the operator's compiler for
/// `namespace` and the server's `allocator` (the form the operator would write there). Owner references are
/// dropped: no config object exists for the garbage collector to find.
pub fn compiled(
    kinds: &[Kind],
    namespace: &str,
    allocator: Allocator,
) -> (Vec<DeviceClass>, Vec<ResourceClaimTemplate>) {
    let profiles: Vec<Value> = kinds
        .iter()
        .map(|k| {
            let mut p = k.profile.clone();
            p["name"] = json!(k.name);
            p
        })
        .collect();
    let doc = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "bench-sched", "uid": "00000000-0000-0000-0000-000000000000"},
        "spec": {"profiles": profiles},
    });
    let parsed = parse_config(&doc.to_string()).expect("the bench's config parses");
    let config = validate(&parsed).unwrap_or_else(|e| panic!("the bench's config is valid: {e:?}"));
    let desired = build_with(&config, &[namespace.to_string()], OwnClasses::BOTH, allocator);
    let mut classes = vec![desired.device_class, desired.ultra_server_node_class];
    for class in &mut classes {
        class.metadata.owner_references = None;
    }
    let mut templates = desired.templates;
    for template in &mut templates {
        template.metadata.owner_references = None;
    }
    (classes, templates)
}

/// The name of the plain template of `devices` devices.
pub fn plain_name(devices: u32) -> String {
    format!("plain-{devices}")
}

/// `exactly: {count: devices}` of the config's DeviceClass: no selector, no constraint.
pub fn plain(devices: u32, namespace: &str) -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": plain_name(devices), "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "neurons", "exactly": {
            "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": devices}}]}}},
    }))
    .expect("a valid template")
}

/// The name of the bare twin of the template `kind`.
pub fn bare_name(kind: &str) -> String {
    format!("bare-{kind}")
}

/// `template`'s requests as they are (classes, counts, allocation modes, alternatives, the EFA request) without
/// any selector or constraint: the same allocation work less the shape's own CEL and `matchAttribute` search.
/// It promises less (no connected devices), so it is a measure, never a candidate shape.
pub fn bare(template: &ResourceClaimTemplate) -> ResourceClaimTemplate {
    let mut value = serde_json::to_value(template).expect("a template serializes");
    value["metadata"] = json!({"name": bare_name(&template.name_any()), "namespace": template.namespace()});
    let devices = value["spec"]["spec"]["devices"].as_object_mut().expect("a template has devices");
    devices.remove("constraints");
    for request in devices.get_mut("requests").and_then(Value::as_array_mut).into_iter().flatten() {
        let request = request.as_object_mut().expect("a request is an object");
        if let Some(exactly) = request.get_mut("exactly").and_then(Value::as_object_mut) {
            exactly.remove("selectors");
        }
        for choice in request.get_mut("firstAvailable").and_then(Value::as_array_mut).into_iter().flatten() {
            choice.as_object_mut().expect("a choice is an object").remove("selectors");
        }
    }
    serde_json::from_value(value).expect("a valid template")
}
