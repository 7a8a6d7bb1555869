//! The profile compiler: one resolved claim to a ResourceClaimTemplate (the rules are in docs/neuron-driver.md,
//! "How workloads are expressed as claims").

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClaim, DeviceClaimConfiguration, DeviceConstraint, DeviceRequest, DeviceSelector,
    DeviceSubRequest, ExactDeviceRequest, OpaqueDeviceConfiguration, ResourceClaimSpec, ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::json;

use super::device_class::{NEURON_DEVICE, NEURON_DRIVER, NEURON_NODE, ultra_server_node_class_name};
use super::meta::{owned_meta, short_hash};
use super::whole_node::{Allocator, whole_node};
use crate::api::labels::{ANNOTATION_SPEC_HASH, LABEL_CLAIM_TEMPLATE, LABEL_CONFIG, LABEL_PROFILE};
use crate::logic::validate::{Choice, ClaimKind, ClaimSpec, Count, ValidatedConfig};

pub const REQUEST_NEURONS: &str = "neurons";
pub const REQUEST_EFA: &str = "efa";
/// Subrequest names of a request with fallbacks (see `subrequest_name`).
pub const SUBREQUEST_PREFERRED: &str = "preferred";
pub const SUBREQUEST_FALLBACK: &str = "fallback";
pub const EFA_DEVICE_CLASS: &str = "efa.networking.k8s.aws";
/// The EFA DRA driver's name (DRANET): `ResourceSlice.spec.driver` and the domain of its attributes.
pub const EFA_DRIVER: &str = "dra.net";
/// The `pciDevice` DRANET reports for an EFA, which the EFA DeviceClass selects on.
pub const EFA_PCI_DEVICE: &str = "Elastic Fabric Adapter (EFA)";
const OPAQUE_API_VERSION: &str = "neuron.aws.com/v1";

/// Which DeviceClasses the templates name are the operator's own, as `device_class` and `ultra_server_node_class`
/// build them: each selects one `resourceType`, so a request of an own class leaves that selector to the class (the
/// scheduler runs every selector on every candidate device: docs/decisions.md, "Template shape"). A class another
/// tool made under the name may select by driver alone (AWS's chart does): a request of it selects its type itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnClasses {
    /// The config's class (`deviceClassName`), of device requests.
    pub devices: bool,
    /// `ultraserver-nodes.<deviceClassName>`, of UltraServer node requests.
    pub nodes: bool,
}

impl OwnClasses {
    /// Both classes as this build makes them (`render`, and a cluster that holds no other class of their names).
    pub const BOTH: OwnClasses = OwnClasses { devices: true, nodes: true };
    pub const NEITHER: OwnClasses = OwnClasses { devices: false, nodes: false };

    /// The `resourceType` a device request selects itself: none where its class is the operator's.
    fn device_type(self) -> Option<&'static str> {
        (!self.devices).then_some(NEURON_DEVICE)
    }

    /// The `resourceType` a node entry request selects itself: none where its class is the operator's.
    fn node_type(self) -> Option<&'static str> {
        (!self.nodes).then_some(NEURON_NODE)
    }
}

pub fn resource_claim_template(
    config: &ValidatedConfig,
    claim: &ClaimSpec,
    namespace: &str,
    own: OwnClasses,
    allocator: Allocator,
) -> ResourceClaimTemplate {
    let spec = template_spec(config, claim, own, allocator);
    let mut metadata = owned_meta(config, &claim.template, Some(namespace));
    metadata.labels.get_or_insert_with(BTreeMap::new).insert(LABEL_PROFILE.into(), claim.profile.clone());
    metadata.annotations = Some(BTreeMap::from([(ANNOTATION_SPEC_HASH.to_string(), short_hash(&spec))]));
    ResourceClaimTemplate { metadata, spec }
}

/// The template's spec: labels for the claims made from it, requests, constraints and opaque config for one claim,
/// in the form the server's scheduler (`allocator`) allocates quickly.
pub fn template_spec(
    owner: &ValidatedConfig,
    claim: &ClaimSpec,
    own: OwnClasses,
    allocator: Allocator,
) -> ResourceClaimTemplateSpec {
    let device_class = owner.spec.device_class_name.as_str();
    let mut devices = Devices { allocator, ..Devices::default() };
    match claim.choices.as_slice() {
        [only] => devices.exactly(only, device_class, own),
        choices => devices.first_available(choices, device_class, own),
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
                requests: Some(devices.requests),
                constraints: Some(devices.constraints).filter(|c| !c.is_empty()),
                config: Some(devices.config).filter(|c| !c.is_empty()),
            }),
        },
    }
}

/// The parts of a claim's `devices` being built.
#[derive(Default)]
struct Devices {
    allocator: Allocator,
    requests: Vec<DeviceRequest>,
    constraints: Vec<DeviceConstraint>,
    config: Vec<DeviceClaimConfiguration>,
}

impl Devices {
    /// A claim without fallbacks: the `neurons` request (and `efa`), as `exactly` requests.
    fn exactly(&mut self, choice: &Choice, device_class: &str, own: OwnClasses) {
        match &choice.kind {
            ClaimKind::Devices { count, efa } => {
                let (asked, selectors) = self.neurons(choice, *count, 0, own);
                // `neurons` before `efa`: the scheduler fills requests in order, and with the EFAs first it stalled on
                // nodes whose group had free EFAs but a device in use (docs/decisions.md, "Template shape").
                self.requests.push(exact_request(REQUEST_NEURONS, device_class, asked, selectors));
                let mut aligned = vec![REQUEST_NEURONS.to_string()];
                if let Some(efa_count) = efa {
                    // With every device of a node, every EFA interface of it, asked for the same way.
                    let efa_count = if asked == Count::All { Count::All } else { *efa_count };
                    self.requests.push(exact_request(REQUEST_EFA, EFA_DEVICE_CLASS, efa_count, Vec::new()));
                    aligned.push(REQUEST_EFA.to_string());
                }
                if let Some(group) = device_group(*count, efa.is_some()) {
                    self.constraints.push(group_constraint(group, aligned));
                }
            }
            ClaimKind::UltraServerNode { nodes } => {
                // From the node entries' own class, so that a budget counts it on their key (docs/teams.md).
                let class = ultra_server_node_class_name(device_class);
                let selectors = neuron_selectors(choice, own.node_type());
                self.requests.push(exact_request(REQUEST_NEURONS, &class, Count::Exactly(1), selectors));
                self.config.push(opaque(
                    REQUEST_NEURONS,
                    json!({"apiVersion": OPAQUE_API_VERSION, "kind": "UltraServerConfig", "ultraserverMode": nodes}),
                ));
            }
        }
        self.lnc(choice, REQUEST_NEURONS);
    }

    /// A claim with fallbacks: one `neurons` request whose `firstAvailable` subrequests are the choices in order,
    /// each with its own connected-group constraint and LNC config, which apply only when it is the one chosen.
    /// Validation keeps EFA and UltraServer claims out of here.
    fn first_available(&mut self, choices: &[Choice], device_class: &str, own: OwnClasses) {
        let mut subrequests = Vec::new();
        for (rank, choice) in choices.iter().enumerate() {
            let ClaimKind::Devices { count, efa: None } = choice.kind else {
                unreachable!("validation refuses fallbacks with EFA or ultraServerNodes")
            };
            let name = subrequest_name(rank);
            let (asked, selectors) = self.neurons(choice, count, rank, own);
            let (allocation_mode, exact) = allocation(asked);
            subrequests.push(DeviceSubRequest {
                name: name.clone(),
                device_class_name: device_class.into(),
                allocation_mode,
                count: exact,
                selectors: cel_selectors(selectors),
                ..DeviceSubRequest::default()
            });
            let reference = format!("{REQUEST_NEURONS}/{name}");
            if let Some(group) = device_group(count, false) {
                self.constraints.push(group_constraint(group, vec![reference.clone()]));
            }
            self.lnc(choice, &reference);
        }
        self.requests.push(DeviceRequest {
            name: REQUEST_NEURONS.into(),
            first_available: Some(subrequests),
            ..DeviceRequest::default()
        });
    }

    /// How `count` devices of `choice` (at `rank` among the claim's choices) are asked for, and the selectors: an
    /// exact count, or `All` kept to the instance types it is every device of, where this server would search too
    /// long for an exact count of them (`whole_node`).
    fn neurons(&self, choice: &Choice, count: Count, rank: usize, own: OwnClasses) -> (Count, Vec<String>) {
        let mut selectors = neuron_selectors(choice, own.device_type());
        let Count::Exactly(n) = count else { return (count, selectors) };
        match whole_node(choice, n, rank, self.allocator) {
            Some(whole) => {
                selectors.extend(whole.selector);
                (Count::All, selectors)
            }
            None => (count, selectors),
        }
    }

    /// The `NeuronConfig` for `request` (a request or `request/subrequest`) when the choice sets LNC.
    fn lnc(&mut self, choice: &Choice, request: &str) {
        if let Some(lnc) = choice.logical_neuron_core {
            self.config.push(opaque(
                request,
                json!({"apiVersion": OPAQUE_API_VERSION, "kind": "NeuronConfig", "logicalNeuronCore": lnc}),
            ));
        }
    }
}

/// The subrequest name of the choice at `rank`: `preferred` for the request as written, then `fallback-1` for
/// `fallbacks[0]`, `fallback-2` for `fallbacks[1]`, ... (allocation results name them as `neurons/<name>`).
pub fn subrequest_name(rank: usize) -> String {
    match rank {
        0 => SUBREQUEST_PREFERRED.to_string(),
        n => format!("{SUBREQUEST_FALLBACK}-{n}"),
    }
}

fn group_constraint(group: u32, requests: Vec<String>) -> DeviceConstraint {
    DeviceConstraint {
        requests: Some(requests),
        match_attribute: Some(format!("resource.aws.com/devicegroup{group}_id")),
        ..DeviceConstraint::default()
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

/// CEL selectors on Neuron attributes; every one must hold. `resource_type` where the class does not select it.
fn neuron_selectors(choice: &Choice, resource_type: Option<&str>) -> Vec<String> {
    let attribute = |name: &str, value: &str| format!("device.attributes['{NEURON_DRIVER}'].{name} == '{value}'");
    let mut selectors: Vec<String> = resource_type.map(|t| attribute("resourceType", t)).into_iter().collect();
    if let Some(instance_type) = &choice.instance_type {
        selectors.push(attribute("instanceType", instance_type));
    }
    if let Some(version) = &choice.neuron_driver_version {
        selectors.push(attribute("neuronDriverVersion", version));
    }
    selectors
}

/// `allocationMode` and `count` of a request or subrequest.
fn allocation(count: Count) -> (Option<String>, Option<i64>) {
    match count {
        Count::All => (Some("All".into()), None),
        Count::Exactly(n) => (Some("ExactCount".into()), Some(i64::from(n))),
    }
}

fn cel_selectors(expressions: Vec<String>) -> Option<Vec<DeviceSelector>> {
    let selectors: Vec<DeviceSelector> = expressions
        .into_iter()
        .map(|expression| DeviceSelector { cel: Some(CELDeviceSelector { expression }) })
        .collect();
    Some(selectors).filter(|s| !s.is_empty())
}

fn exact_request(name: &str, device_class: &str, count: Count, selectors: Vec<String>) -> DeviceRequest {
    let (allocation_mode, count) = allocation(count);
    DeviceRequest {
        name: name.into(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: device_class.into(),
            allocation_mode,
            count,
            selectors: cel_selectors(selectors),
            ..ExactDeviceRequest::default()
        }),
        ..DeviceRequest::default()
    }
}

/// Opaque Neuron driver parameters for `request` (a request, or `request/subrequest`).
fn opaque(request: &str, parameters: serde_json::Value) -> DeviceClaimConfiguration {
    DeviceClaimConfiguration {
        requests: Some(vec![request.into()]),
        opaque: Some(OpaqueDeviceConfiguration { driver: NEURON_DRIVER.into(), parameters: RawExtension(parameters) }),
    }
}

/// The templates of `config` that claim EFA interfaces (`efa: true`), which need the EFA driver's DeviceClass.
pub fn efa_templates(config: &ValidatedConfig) -> Vec<&str> {
    let needs_efa =
        |claim: &&ClaimSpec| claim.choices.iter().any(|c| matches!(c.kind, ClaimKind::Devices { efa: Some(_), .. }));
    config.claims.iter().filter(needs_efa).map(|c| c.template.as_str()).collect()
}
