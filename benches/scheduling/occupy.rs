//! The fleet's fill before the timed pods: claims the bench allocates itself (status written directly), which the
//! scheduler counts as devices in use exactly as it counts its own allocations. So a 1,000-node fleet is at 50% or
//! 100% after a few hundred timed pods, without scheduling thousands first. Occupancy comes in units of the kind's
//! device count, aligned to its device groups and spread round-robin over the nodes; each unit holds its devices'
//! EFA interfaces for EFA kinds and the node entry for UltraServer kinds.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use neuron_dra_operator::devtools::simulate::fleet::{self, FleetSpec};
use neuron_dra_operator::logic::desired::{EFA_DEVICE_CLASS, ultra_server_node_class_name};
use serde_json::{Value, json};

use super::kinds::{DEVICE_CLASS, Kind};

pub const NAMESPACE: &str = "bench-sched-occupy";
const DEVICES_PER_NODE: usize = 16;

/// How a run fills the fleet: `occupied` units held before the pods, `timed` pods that bring it to the fill.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub occupied: usize,
    pub timed: usize,
}

/// The plan for `fill` (0..=1) of a fleet of `nodes`, timing at most `max_pods` pods.
pub fn plan(kind: &Kind, nodes: usize, fill: f64, max_pods: usize) -> Plan {
    let units = nodes * DEVICES_PER_NODE / kind.devices as usize;
    let target = (units as f64 * fill).round() as usize;
    let timed = target.min(max_pods);
    Plan { occupied: target - timed, timed }
}

/// Holds `plan.occupied` units of `kind` on the fleet: one allocated claim per node that has any.
pub async fn occupy(client: &Client, kind: &Kind, spec: &FleetSpec, plan: Plan) {
    let per_node = DEVICES_PER_NODE / kind.devices as usize;
    let mut slots: Vec<Vec<usize>> = vec![Vec::new(); spec.count];
    for unit in 0..plan.occupied {
        slots[unit % spec.count].push(unit / spec.count);
    }
    assert!(slots.iter().all(|s| s.len() <= per_node), "occupancy beyond the fleet");
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(slots.into_iter().enumerate().filter(|(_, s)| !s.is_empty()))
        .map(|(node, slots)| {
            let claims = claims.clone();
            async move {
                let (claim, status) = held(kind, spec, node, &slots);
                let name = claim["metadata"]["name"].as_str().unwrap().to_string();
                let claim: ResourceClaim = serde_json::from_value(claim).unwrap();
                claims.create(&PostParams::default(), &claim).await?;
                claims.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("occupancy claims");
}

/// The claim that holds `slots` of node `node`, and the status that allocates it.
fn held(kind: &Kind, spec: &FleetSpec, node: usize, slots: &[usize]) -> (Value, Value) {
    let size = kind.devices as usize;
    let ids: Vec<usize> = slots.iter().flat_map(|s| s * size..(s + 1) * size).collect();
    let neuron = fleet::resource_slice(spec, node, None);
    let pool = neuron.spec.pool.name.clone();
    let result = |request: &str, driver: &str, device: &str| json!({"request": request, "driver": driver, "pool": pool, "device": device});
    let mut results: Vec<Value> =
        ids.iter().map(|k| result("neurons", &neuron.spec.driver, &format!("neuron-device-{k}"))).collect();
    let mut requests = vec![request("neurons", DEVICE_CLASS, ids.len())];
    if kind.efa {
        let efa = fleet::efa_slice(spec, node, None).expect("the type has EFA");
        let wanted: Vec<String> = ids.iter().map(|k| format!("efa{k}")).collect();
        let devices = efa.spec.devices.iter().flatten().filter(|d| {
            let subsystem = d.attributes.as_ref().and_then(|a| a.get(&format!("{}/pciSubsystem", efa.spec.driver)));
            subsystem.and_then(|s| s.string.as_ref()).is_some_and(|s| wanted.contains(s))
        });
        results.extend(devices.map(|d| result("efa", &efa.spec.driver, &d.name)));
        requests.push(request("efa", EFA_DEVICE_CLASS, ids.len()));
    }
    if kind.ultra {
        results.push(result("node", &neuron.spec.driver, "neuron-node-0"));
        requests.push(request("node", &ultra_server_node_class_name(DEVICE_CLASS), 1));
    }
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": spec.node_name(node), "namespace": NAMESPACE},
        "spec": {"devices": {"requests": requests}},
    });
    (claim, json!({"status": {"allocation": {"devices": {"results": results}}}}))
}

fn request(name: &str, class: &str, count: usize) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count}})
}

/// Releases every occupancy claim and waits until the API server has none left.
pub async fn release(client: &Client) {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    claims.delete_collection(&DeleteParams::default(), &ListParams::default()).await.expect("release occupancy");
    while !claims.list(&ListParams::default().limit(1)).await.unwrap().items.is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Whether the fleet's slices are all published (the scheduler would otherwise see fewer devices).
pub async fn slices(client: &Client, prefix: &str) -> usize {
    let selector = format!("{}={prefix}", fleet::SIMULATED_LABEL);
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    slices.list_metadata(&ListParams::default().labels(&selector)).await.unwrap().items.len()
}
