//! What a profile promises, checked against what the real scheduler allocated: workload pods that use a generated
//! template, their ResourceClaims, and the devices (with their attributes) the claims hold.
//!
//! The promise is read from the profile's request fields (the API), not from the compiled template, so a compiler
//! mistake shows up as a broken promise.

#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{Device, DeviceRequestAllocationResult, ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::cluster::eventually;
use super::scenario::TIMEOUT;

pub const NEURON_DRIVER: &str = "neuron.aws.com";
pub const EFA_DRIVER: &str = "dra.net";
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// One profile request (`training`, `longContextInference`, a side of `disaggregated`) as the user wrote it.
#[derive(Clone, Debug, Default)]
pub struct Promise {
    pub instance_type: Option<String>,
    /// `None` = `All` (a whole node).
    pub devices: Option<u32>,
    pub efa: bool,
    pub logical_neuron_core: Option<i64>,
    pub neuron_driver_version: Option<String>,
    pub ultra_server_nodes: Option<i64>,
    /// The alternatives, in order, each a promise of its own.
    pub fallbacks: Vec<Promise>,
}

impl Promise {
    pub fn from_request(request: &Value) -> Promise {
        let devices = match &request["devices"] {
            Value::Number(n) => Some(n.as_u64().unwrap() as u32),
            _ => None,
        };
        Promise {
            instance_type: request["instanceType"].as_str().map(String::from),
            devices,
            efa: request["efa"].as_bool().unwrap_or(false),
            logical_neuron_core: request["logicalNeuronCore"].as_i64(),
            neuron_driver_version: request["neuronDriverVersion"].as_str().map(String::from),
            ultra_server_nodes: request["ultraServerNodes"].as_i64(),
            fallbacks: request["fallbacks"].as_array().into_iter().flatten().map(Promise::from_request).collect(),
        }
    }

    /// The choice the scheduler took, by the request the allocation results name: `neurons` without fallbacks,
    /// else `neurons/preferred` or `neurons/fallback-<n>` (the n-th fallback), the same in every Neuron result.
    pub fn chosen(&self, got: &Allocation) -> Result<&Promise, String> {
        let names: std::collections::BTreeSet<&str> =
            got.results.iter().filter(|r| r.driver == NEURON_DRIVER).map(|r| r.request.as_str()).collect();
        let name = match names.into_iter().collect::<Vec<_>>()[..] {
            [one] => one,
            ref several => return Err(format!("the Neuron results name several requests: {several:?}")),
        };
        match (self.fallbacks.is_empty(), name.strip_prefix("neurons/")) {
            (true, None) if name == "neurons" => Ok(self),
            (false, Some("preferred")) => Ok(self),
            (false, Some(sub)) => sub
                .strip_prefix("fallback-")
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| self.fallbacks.get(n.checked_sub(1)?))
                .ok_or_else(|| format!("the results name {name}, which is none of the promised choices")),
            _ => Err(format!("the results name {name}, not what the promise compiles to")),
        }
    }

    /// Every template a profile compiles to, with the request it comes from.
    pub fn of_profile(profile: &Value) -> Vec<(String, Promise)> {
        let name = profile["name"].as_str().unwrap();
        let kinds = profile.as_object().unwrap();
        if let Some(d) = kinds.get("disaggregated") {
            return vec![
                (format!("{name}-prefill"), Promise::from_request(&d["prefill"])),
                (format!("{name}-decode"), Promise::from_request(&d["decode"])),
            ];
        }
        let request = kinds.get("training").or_else(|| kinds.get("longContextInference")).expect("a profile kind");
        vec![(name.to_string(), Promise::from_request(request))]
    }
}

/// A workload pod asking for one claim from `template`, kept on the fleet by `affinity`.
pub fn workload_pod(name: &str, template: &str, affinity: &Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "neuron-workload"}},
        "spec": {
            "affinity": affinity,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.example/trainer:1", "resources": {"claims": [{"name": "neuron"}]}}],
            "resourceClaims": [{"name": "neuron", "resourceClaimTemplateName": template}],
        },
    })
}

/// A pod pinned to one node.
pub fn pinned(mut pod: Value, node: &str) -> Value {
    pod["spec"]["nodeName"] = Value::Null;
    pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}});
    pod
}

/// Creates the pod (retrying while the namespace's default ServiceAccount does not exist yet).
pub async fn create_pod(client: &Client, namespace: &str, pod: &Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let name = pod["metadata"]["name"].as_str().unwrap();
    eventually(TIMEOUT, &format!("pod {name} created"), || async {
        pods.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(pod)).await.ok().map(|_| ())
    })
    .await;
}

/// Waits until the scheduler has bound the pod; returns it.
pub async fn wait_scheduled(client: &Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    eventually(TIMEOUT, &format!("pod {name} scheduled"), || async {
        let pod = pods.get(name).await.ok()?;
        pod.spec.as_ref()?.node_name.is_some().then_some(pod)
    })
    .await
}

/// Waits until the scheduler has given up on the pod for now; returns its PodScheduled message.
pub async fn wait_unschedulable(client: &Client, namespace: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    eventually(TIMEOUT, &format!("pod {name} unschedulable"), || async {
        let pod = pods.get(name).await.ok()?;
        assert!(pod.spec.as_ref()?.node_name.is_none(), "pod {name} was scheduled");
        let conditions = pod.status?.conditions?;
        let scheduled = conditions.into_iter().find(|c| c.type_ == "PodScheduled")?;
        (scheduled.status == "False" && scheduled.reason.as_deref() == Some("Unschedulable"))
            .then(|| scheduled.message.unwrap_or_default())
    })
    .await
}

/// The allocated claim of a scheduled pod.
pub async fn claim_of(client: &Client, pod: &Pod) -> ResourceClaim {
    let namespace = pod.namespace().unwrap();
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.clone()).unwrap_or_default();
    let named = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).into_iter().flatten();
    let claim_name = statuses
        .iter()
        .find_map(|s| s.resource_claim_name.clone())
        .or_else(|| named.into_iter().find_map(|c| c.resource_claim_name.clone()))
        .unwrap_or_else(|| panic!("pod {} has no claim", pod.name_any()));
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &namespace);
    eventually(TIMEOUT, &format!("claim {claim_name} allocated"), || async {
        let claim = claims.get(&claim_name).await.ok()?;
        claim.status.as_ref()?.allocation.is_some().then_some(claim)
    })
    .await
}

/// Every device the node's slices publish, by (driver, device name).
pub async fn node_devices(client: &Client, node: &str) -> BTreeMap<(String, String), Device> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let list = slices.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await.unwrap();
    list.items
        .into_iter()
        .flat_map(|s| {
            let driver = s.spec.driver.clone();
            s.spec.devices.unwrap_or_default().into_iter().map(move |d| ((driver.clone(), d.name.clone()), d))
        })
        .collect()
}

fn string_attr(device: &Device, key: &str) -> Option<String> {
    device.attributes.as_ref()?.get(key)?.string.clone()
}

/// What the scheduler gave one pod, resolved to devices.
pub struct Allocation {
    pub node: String,
    pub instance_type: String,
    /// Neuron devices (or node entries) and EFA interfaces, each with the request that got it.
    pub neurons: Vec<Device>,
    pub efas: Vec<Device>,
    pub results: Vec<DeviceRequestAllocationResult>,
    /// The opaque parameters the claim's allocation carries for the Neuron driver.
    pub config: Vec<Value>,
    pub node_neuron_devices: usize,
    pub node_efas: usize,
}

/// Resolves a scheduled pod's allocation.
pub async fn allocation(client: &Client, pod: &Pod) -> Allocation {
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    let claim = claim_of(client, pod).await;
    let allocated = claim.status.unwrap().allocation.unwrap();
    let devices = node_devices(client, &node).await;
    let node_object = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    let results = allocated.devices.as_ref().and_then(|d| d.results.clone()).unwrap_or_default();
    let mut neurons = Vec::new();
    let mut efas = Vec::new();
    for result in &results {
        assert_eq!(result.pool, node, "device {} comes from another node's pool", result.device);
        let device = devices
            .get(&(result.driver.clone(), result.device.clone()))
            .unwrap_or_else(|| panic!("{} {} is not published on {node}", result.driver, result.device))
            .clone();
        match result.driver.as_str() {
            NEURON_DRIVER => neurons.push(device),
            EFA_DRIVER => efas.push(device),
            other => panic!("unexpected driver {other}"),
        }
    }
    let config = allocated
        .devices
        .and_then(|d| d.config)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.opaque)
        .filter(|o| o.driver == NEURON_DRIVER)
        .map(|o| o.parameters.0)
        .collect();
    let count = |driver: &str, resource_type: Option<&str>| {
        devices
            .iter()
            .filter(|((d, _), dev)| {
                d == driver && resource_type.is_none_or(|t| string_attr(dev, "resourceType").as_deref() == Some(t))
            })
            .count()
    };
    Allocation {
        instance_type: node_object.labels().get(INSTANCE_TYPE_LABEL).cloned().unwrap_or_default(),
        node_neuron_devices: count(NEURON_DRIVER, Some("neuron_device")),
        node_efas: count(EFA_DRIVER, None),
        node,
        neurons,
        efas,
        results,
        config,
    }
}

/// EFA interfaces a profile with `devices` devices and `efa: true` gets on this type.
fn efa_count(instance_type: &str, devices: usize) -> usize {
    if instance_type == "trn1.32xlarge" { devices.div_ceil(2) } else { devices }
}

/// Checks that `got` keeps `promise` (with fallbacks: the choice the scheduler took); the error names the first
/// broken promise.
pub fn check(promise: &Promise, got: &Allocation) -> Result<(), String> {
    let fail = |what: String| Err(format!("on {} ({}): {what}", got.node, got.instance_type));
    let promise = match promise.chosen(got) {
        Ok(chosen) => chosen,
        Err(what) => return fail(what),
    };
    if let Some(t) = &promise.instance_type
        && &got.instance_type != t
    {
        return fail(format!("instance type pinned to {t}"));
    }
    let expected_type = if promise.ultra_server_nodes.is_some() { "neuron_node" } else { "neuron_device" };
    for device in &got.neurons {
        if string_attr(device, "resourceType").as_deref() != Some(expected_type) {
            return fail(format!("{} is not a {expected_type}", device.name));
        }
        if let Some(t) = &promise.instance_type
            && string_attr(device, "instanceType").as_ref() != Some(t)
        {
            return fail(format!("{} has another instanceType", device.name));
        }
        if let Some(v) = &promise.neuron_driver_version
            && string_attr(device, "neuronDriverVersion").as_ref() != Some(v)
        {
            return fail(format!("{} runs another Neuron driver than {v}", device.name));
        }
    }
    let wanted = match (promise.ultra_server_nodes, promise.devices) {
        (Some(_), _) => 1,
        (None, Some(n)) => n as usize,
        (None, None) => got.node_neuron_devices,
    };
    if got.neurons.len() != wanted {
        return fail(format!("{} Neuron entries allocated, {wanted} promised", got.neurons.len()));
    }
    let wanted_efa = match (promise.efa, promise.devices) {
        (false, _) => 0,
        (true, Some(n)) => efa_count(&got.instance_type, n as usize),
        (true, None) => got.node_efas,
    };
    if got.efas.len() != wanted_efa {
        return fail(format!("{} EFA interfaces allocated, {wanted_efa} promised", got.efas.len()));
    }
    // Connected: every Neuron device and EFA in one group of the promised size.
    let group = match promise.devices {
        Some(n @ (4 | 8 | 16)) => Some(n),
        Some(1) if promise.efa => Some(1),
        _ => None,
    };
    if let Some(n) = group {
        let key = format!("resource.aws.com/devicegroup{n}_id");
        let ids: std::collections::BTreeSet<Option<String>> =
            got.neurons.iter().chain(&got.efas).map(|d| string_attr(d, &key)).collect();
        if ids.len() != 1 || ids.contains(&None) {
            return fail(format!("devices and EFAs span several {key} values: {ids:?}"));
        }
    }
    let has_config = |kind: &str, field: &str, value: i64| {
        got.config.iter().any(|p| p["kind"] == kind && p[field].as_i64() == Some(value))
    };
    if let Some(lnc) = promise.logical_neuron_core
        && !has_config("NeuronConfig", "logicalNeuronCore", lnc)
    {
        return fail(format!("no NeuronConfig logicalNeuronCore={lnc} in the allocation: {:?}", got.config));
    }
    // Only the chosen alternative's setting reaches the driver, and none when it sets none.
    let neuron_configs = got.config.iter().filter(|p| p["kind"] == "NeuronConfig").count();
    if neuron_configs != usize::from(promise.logical_neuron_core.is_some()) {
        return fail(format!("{neuron_configs} NeuronConfigs in the allocation: {:?}", got.config));
    }
    if let Some(nodes) = promise.ultra_server_nodes
        && !has_config("UltraServerConfig", "ultraserverMode", nodes)
    {
        return fail(format!("no UltraServerConfig ultraserverMode={nodes} in the allocation: {:?}", got.config));
    }
    Ok(())
}
