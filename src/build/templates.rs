//! The profile compiler: one resolved claim to a ResourceClaimTemplate (the rules are in docs/neuron-driver.md,
//! "How workloads are expressed as claims").

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClaim, DeviceClaimConfiguration, DeviceConstraint, DeviceRequest, DeviceSelector,
    ExactDeviceRequest, OpaqueDeviceConfiguration, ResourceClaimSpec, ResourceClaimTemplate, ResourceClaimTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::json;

use super::{
    ANNOTATION_SPEC_HASH, LABEL_CLAIM_TEMPLATE, LABEL_CONFIG, LABEL_PROFILE, NEURON_DRIVER, owned_meta, short_hash,
};
use crate::validate::{ClaimKind, ClaimSpec, Count, ValidatedConfig};

pub const REQUEST_NEURONS: &str = "neurons";
pub const REQUEST_EFA: &str = "efa";
pub const EFA_DEVICE_CLASS: &str = "efa.networking.k8s.aws";
/// The EFA DRA driver's name (DRANET): `ResourceSlice.spec.driver` and the domain of its attributes.
pub const EFA_DRIVER: &str = "dra.net";
/// The `pciDevice` DRANET reports for an EFA, which the EFA DeviceClass selects on.
pub const EFA_PCI_DEVICE: &str = "Elastic Fabric Adapter (EFA)";
const OPAQUE_API_VERSION: &str = "neuron.aws.com/v1";

pub fn resource_claim_template(config: &ValidatedConfig, claim: &ClaimSpec, namespace: &str) -> ResourceClaimTemplate {
    let spec = template_spec(config, claim);
    let mut metadata = owned_meta(config, &claim.template, Some(namespace));
    metadata.labels.get_or_insert_with(BTreeMap::new).insert(LABEL_PROFILE.into(), claim.profile.clone());
    metadata.annotations = Some(BTreeMap::from([(ANNOTATION_SPEC_HASH.to_string(), short_hash(&spec))]));
    ResourceClaimTemplate { metadata, spec }
}

/// The template's spec: labels for the claims made from it, requests, constraints and opaque config for one claim.
pub fn template_spec(owner: &ValidatedConfig, claim: &ClaimSpec) -> ResourceClaimTemplateSpec {
    let device_class = owner.spec.device_class_name.as_str();
    let mut requests = Vec::new();
    let mut constraints = Vec::new();
    let mut config = Vec::new();

    match &claim.kind {
        ClaimKind::Devices { count, efa } => {
            requests.push(request(REQUEST_NEURONS, device_class, *count, neuron_selectors(claim, "neuron_device")));
            let mut aligned = vec![REQUEST_NEURONS.to_string()];
            if let Some(efa_count) = efa {
                requests.push(request(REQUEST_EFA, EFA_DEVICE_CLASS, *efa_count, Vec::new()));
                aligned.push(REQUEST_EFA.to_string());
            }
            if let Some(group) = device_group(*count, efa.is_some()) {
                constraints.push(DeviceConstraint {
                    requests: Some(aligned),
                    match_attribute: Some(format!("resource.aws.com/devicegroup{group}_id")),
                    ..DeviceConstraint::default()
                });
            }
        }
        ClaimKind::UltraServerNode { nodes } => {
            requests.push(request(
                REQUEST_NEURONS,
                device_class,
                Count::Exactly(1),
                neuron_selectors(claim, "neuron_node"),
            ));
            config.push(opaque(json!({
                "apiVersion": OPAQUE_API_VERSION, "kind": "UltraServerConfig", "ultraserverMode": nodes,
            })));
        }
    }
    if let Some(lnc) = claim.logical_neuron_core {
        config.push(opaque(json!({
            "apiVersion": OPAQUE_API_VERSION, "kind": "NeuronConfig", "logicalNeuronCore": lnc,
        })));
    }

    // Copied onto every claim made from the template, so status can count each template's claims.
    let claim_labels = BTreeMap::from([
        (LABEL_CONFIG.to_string(), owner.name.clone()),
        (LABEL_PROFILE.to_string(), claim.profile.clone()),
        (LABEL_CLAIM_TEMPLATE.to_string(), claim.template.clone()),
    ]);
    ResourceClaimTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(claim_labels), ..ObjectMeta::default() }),
        spec: ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(requests),
                constraints: Some(constraints).filter(|c| !c.is_empty()),
                config: Some(config).filter(|c| !c.is_empty()),
            }),
        },
    }
}

/// The `devicegroup<N>_id` attribute that keeps N devices (and their EFAs) connected, if any is needed.
/// With EFA, a single device is paired with its own EFA through `devicegroup1_id`.
fn device_group(count: Count, efa: bool) -> Option<u32> {
    match count {
        Count::Exactly(n @ (4 | 8 | 16)) => Some(n),
        Count::Exactly(1) if efa => Some(1),
        _ => None,
    }
}

/// CEL selectors on Neuron attributes; every one must hold.
fn neuron_selectors(claim: &ClaimSpec, resource_type: &str) -> Vec<String> {
    let attribute = |name: &str, value: &str| format!("device.attributes['{NEURON_DRIVER}'].{name} == '{value}'");
    let mut selectors = vec![attribute("resourceType", resource_type)];
    if let Some(instance_type) = &claim.instance_type {
        selectors.push(attribute("instanceType", instance_type));
    }
    if let Some(version) = &claim.neuron_driver_version {
        selectors.push(attribute("neuronDriverVersion", version));
    }
    selectors
}

fn request(name: &str, device_class: &str, count: Count, selectors: Vec<String>) -> DeviceRequest {
    let (mode, count) = match count {
        Count::All => ("All", None),
        Count::Exactly(n) => ("ExactCount", Some(i64::from(n))),
    };
    DeviceRequest {
        name: name.into(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: device_class.into(),
            allocation_mode: Some(mode.into()),
            count,
            selectors: Some(
                selectors
                    .into_iter()
                    .map(|expression| DeviceSelector { cel: Some(CELDeviceSelector { expression }) })
                    .collect(),
            )
            .filter(|s: &Vec<DeviceSelector>| !s.is_empty()),
            ..ExactDeviceRequest::default()
        }),
        ..DeviceRequest::default()
    }
}

fn opaque(parameters: serde_json::Value) -> DeviceClaimConfiguration {
    DeviceClaimConfiguration {
        requests: Some(vec![REQUEST_NEURONS.into()]),
        opaque: Some(OpaqueDeviceConfiguration { driver: NEURON_DRIVER.into(), parameters: RawExtension(parameters) }),
    }
}
