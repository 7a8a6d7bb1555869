//! The fleet's fill before the timed pods: claims the bench allocates itself (status written directly), which the
//! scheduler counts as devices in use exactly as it counts its own allocations. So a 1,000-node fleet is at 50% or
//! 100% after a few hundred timed pods, without scheduling thousands first. A uniform fill comes in units of the
//! kind's device count, aligned to its device groups and spread round-robin over the nodes; each unit holds its
//! devices' EFA interfaces for EFA kinds and the node entry for UltraServer kinds. The busy fills are what other
//! jobs leave on a real fleet: one device in use on every node or every other one, one EFA interface held in an
//! otherwise free group, one device tainted.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use neuron_dra_operator::devtools::simulate::fleet::{self, FleetSpec};
use neuron_dra_operator::logic::desired::{EFA_DEVICE_CLASS, NEURON_DRIVER, ultra_server_node_class_name};
use serde_json::{Value, json};

use super::kinds::{DEVICE_CLASS, Kind};

pub const NAMESPACE: &str = "bench-sched-occupy";
const DEVICES_PER_NODE: usize = 16;
/// The device a small job holds: the first of the slice, the one the scheduler would give it.
const HELD_DEVICE: usize = 0;
const TAINT_KEY: &str = "bench.neurondra.io/busy";

/// A fill of the fleet before the timed pods (BENCH_SCHED_FILLS: numbers, `held-all`, `held-half`, `held-efa`,
/// `tainted`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// This share (0..=1) of the fleet's devices held in units of the kind's size.
    Units(f64),
    /// One device in use on every node, or on every other node.
    HeldAll,
    HeldHalf,
    /// One EFA interface held on every node, the Neuron devices of its group free (EFA kinds only).
    HeldEfa,
    /// One device of every node tainted `NoSchedule`.
    Tainted,
}

impl Fill {
    pub fn parse(name: &str) -> Fill {
        match name {
            "held-all" => Fill::HeldAll,
            "held-half" => Fill::HeldHalf,
            "held-efa" => Fill::HeldEfa,
            "tainted" => Fill::Tainted,
            share => Fill::Units(share.parse().unwrap_or_else(|_| panic!("BENCH_SCHED_FILLS: unknown fill {share:?}"))),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Fill::Units(share) => format!("{:.0}%", share * 100.0),
            Fill::HeldAll => "1 held on every node".into(),
            Fill::HeldHalf => "1 held on half".into(),
            Fill::HeldEfa => "1 EFA held on every node".into(),
            Fill::Tainted => "1 tainted on every node".into(),
        }
    }

    /// Whether the fill means anything for `kind` (an EFA hold only for kinds that take EFAs).
    pub fn applies_to(&self, kind: &Kind) -> bool {
        *self != Fill::HeldEfa || kind.efa
    }
}

/// How a run fills the fleet: `occupied` units held before the pods, `timed` pods that bring it to the fill.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub occupied: usize,
    pub timed: usize,
}

/// The plan for `fill` of a fleet of `nodes`, timing at most `max_pods` pods: a uniform fill times the pods that
/// bring it to its share, a busy fill `max_pods` on top of its holds.
pub fn plan(kind: &Kind, nodes: usize, fill: Fill, max_pods: usize) -> Plan {
    let Fill::Units(share) = fill else { return Plan { occupied: 0, timed: max_pods } };
    let units = nodes * DEVICES_PER_NODE / kind.devices as usize;
    let target = (units as f64 * share).round() as usize;
    let timed = target.min(max_pods);
    Plan { occupied: target - timed, timed }
}

/// Makes a busy fill on the fleet (nothing for a uniform one, which `occupy` makes).
pub async fn busy(client: &Client, spec: &FleetSpec, fill: Fill) {
    let nodes: Vec<usize> = match fill {
        Fill::Units(_) => return,
        Fill::Tainted => return taint(client, spec, true).await,
        Fill::HeldHalf => (0..spec.count).step_by(2).collect(),
        Fill::HeldAll | Fill::HeldEfa => (0..spec.count).collect(),
    };
    allocate(client, nodes.into_iter().map(|node| small_job(spec, node, fill == Fill::HeldEfa)).collect()).await;
}

/// Undoes a busy fill: its claims (`release`) and its taints.
pub async fn unbusy(client: &Client, spec: &FleetSpec, fill: Fill) {
    release(client).await;
    if fill == Fill::Tainted {
        taint(client, spec, false).await;
    }
}

/// A small job's claim on node `node`: one Neuron device, or one EFA interface (the one wired to that device).
fn small_job(spec: &FleetSpec, node: usize, efa: bool) -> (Value, Value) {
    let slice = if efa {
        fleet::efa_slice(spec, node, None).expect("the type has EFA")
    } else {
        fleet::resource_slice(spec, node, None)
    };
    let device = if efa {
        let wired = format!("efa{HELD_DEVICE}");
        let devices = slice.spec.devices.iter().flatten();
        let mut wired_devices = devices.filter(|d| {
            let key = format!("{}/pciSubsystem", slice.spec.driver);
            d.attributes.as_ref().and_then(|a| a.get(&key)).and_then(|v| v.string.as_ref()) == Some(&wired)
        });
        wired_devices.next().expect("the EFA of the held device").name.clone()
    } else {
        format!("neuron-device-{HELD_DEVICE}")
    };
    let class = if efa { EFA_DEVICE_CLASS } else { DEVICE_CLASS };
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": format!("small-{}", spec.node_name(node)), "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request("job", class, 1)]}},
    });
    let result = json!({"request": "job", "driver": slice.spec.driver, "pool": slice.spec.pool.name, "device": device});
    (claim, json!({"status": {"allocation": {"devices": {"results": [result]}}}}))
}

/// Taints (or untaints) the held device of every node of the fleet in its slice, and checks the server kept the
/// taint (it drops the field where device taints are off).
async fn taint(client: &Client, spec: &FleetSpec, on: bool) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let selector = format!("{}={}", fleet::SIMULATED_LABEL, spec.prefix);
    let list = slices.list(&ListParams::default().labels(&selector)).await.expect("listing slices");
    let held = format!("neuron-device-{HELD_DEVICE}");
    for slice in list.items.into_iter().filter(|s| s.spec.driver == NEURON_DRIVER) {
        let mut value = serde_json::to_value(&slice).unwrap();
        for device in value["spec"]["devices"].as_array_mut().into_iter().flatten() {
            if device["name"] == held.as_str() {
                device["taints"] = if on { json!([{"key": TAINT_KEY, "effect": "NoSchedule"}]) } else { Value::Null };
            }
        }
        let name = value["metadata"]["name"].as_str().unwrap().to_string();
        let replaced: ResourceSlice = serde_json::from_value(value).unwrap();
        let kept = slices.replace(&name, &PostParams::default(), &replaced).await.expect("tainting a slice");
        let tainted = kept.spec.devices.iter().flatten().any(|d| d.taints.as_ref().is_some_and(|t| !t.is_empty()));
        assert_eq!(tainted, on, "the server did not keep the device taint of {name}: device taints off?");
    }
}

/// Lists every Neuron slice's devices in reverse: an order no driver publishes, so allocation that depends on the
/// order shows (BENCH_SCHED_ORDERS=driver,reversed).
pub async fn reverse(client: &Client, spec: &FleetSpec) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let selector = format!("{}={}", fleet::SIMULATED_LABEL, spec.prefix);
    let list = slices.list(&ListParams::default().labels(&selector)).await.expect("listing slices");
    for mut slice in list.items.into_iter().filter(|s| s.spec.driver == NEURON_DRIVER) {
        if let Some(devices) = slice.spec.devices.as_mut() {
            devices.reverse();
        }
        let name = slice.metadata.name.clone().unwrap();
        slices.replace(&name, &PostParams::default(), &slice).await.expect("reordering a slice");
    }
}

/// Holds `plan.occupied` units of `kind` on the fleet: one allocated claim per node that has any.
pub async fn occupy(client: &Client, kind: &Kind, spec: &FleetSpec, plan: Plan) {
    let per_node = DEVICES_PER_NODE / kind.devices as usize;
    let mut slots: Vec<Vec<usize>> = vec![Vec::new(); spec.count];
    for unit in 0..plan.occupied {
        slots[unit % spec.count].push(unit / spec.count);
    }
    assert!(slots.iter().all(|s| s.len() <= per_node), "occupancy beyond the fleet");
    let held_by = slots.into_iter().enumerate().filter(|(_, s)| !s.is_empty());
    allocate(client, held_by.map(|(node, slots)| held(kind, spec, node, &slots)).collect()).await;
}

/// Creates each claim and writes its allocation (status) as the scheduler would, 32 at a time.
async fn allocate(client: &Client, claims_and_statuses: Vec<(Value, Value)>) {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(claims_and_statuses)
        .map(|(claim, status)| {
            let claims = claims.clone();
            async move {
                let name = claim["metadata"]["name"].as_str().unwrap().to_string();
                let claim: ResourceClaim = serde_json::from_value(claim).unwrap();
                claims.create(&PostParams::default(), &claim).await?;
                claims.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("allocated claims");
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
