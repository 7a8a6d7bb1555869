//! `neuron-dra-devtools simulate`: a Trainium fleet for tests, benchmarks and the demo. Nodes, the Neuron driver's
//! ResourceSlices and the EFA driver's ResourceSlices (with its DeviceClass) as the real drivers publish them, faults
//! on demand, and a stand-in kubelet that reports the pods the scheduler bound to simulated nodes as running (and
//! confirms their deletion). Everything is idempotent (server-side apply).

pub mod devices;
mod faults;
pub mod fleet;
mod kubelet;
pub mod lease;

pub use faults::{FAULT_TAINT_KEY, FaultKind, TaintEffect};
use kubelet::{force_delete, pod_node, set_plugin_ready};
pub use kubelet::{kubelet, kubelet_pass, kubelet_with};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use kube::{Client, ResourceExt};
use serde_json::json;

use fleet::{FleetSpec, SIMULATED_LABEL};

const MANAGER: &str = "neuron-dra-simulator";
/// Node annotation: whether the stand-in kubelet reports the plugin pod Ready.
pub const PLUGIN_READY_ANNOTATION: &str = "neurondra.io/sim-plugin-ready";
const DRA_VERSION_ANNOTATION: &str = "neurondra.io/sim-dra-driver-version";
const NEURON_VERSION_ANNOTATION: &str = "neurondra.io/sim-neuron-driver-version";
const KUBELET_VERSION_ANNOTATION: &str = "neurondra.io/sim-kubelet-version";
const PLUGIN_POD_LABEL: &str = "app.kubernetes.io/name=neuron-dra-driver";
/// A plugin image tag ending in this never becomes Ready (with `kubelet --plugin`).
pub const NOT_READY_TAG: &str = "-notready";
/// A plugin image tag ending in this publishes one Neuron device fewer than the node has (with `kubelet --plugin`).
pub const FEWER_DEVICES_TAG: &str = "-fewer";
/// A plugin image tag ending in this gets Ready but never publishes its node's slice (with `kubelet --plugin`).
pub const NO_PUBLISH_TAG: &str = "-nopublish";
const PARALLEL: usize = 32;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum SimulateCommand {
    /// Create (or update) nodes `P-0` … `P-(N-1)` of one instance type, with their ResourceSlices.
    Fleet {
        #[arg(long)]
        count: usize,
        #[arg(long)]
        instance_type: String,
        #[arg(long, default_value = "sim")]
        prefix: String,
        /// DRA driver version the slices report (`draDriverVersion`).
        #[arg(long, default_value = fleet::DEFAULT_DRA_DRIVER_VERSION)]
        driver_version: String,
        /// Host Neuron driver version (`neuronDriverVersion`).
        #[arg(long, default_value = fleet::DEFAULT_NEURON_DRIVER_VERSION)]
        neuron_driver_version: String,
        #[arg(long, default_value = fleet::DEFAULT_KUBELET_VERSION)]
        kubelet_version: String,
    },
    /// Inject a fault on a node, or `clear` its faults.
    Fault {
        kind: FaultKind,
        #[arg(long)]
        node: String,
        /// Device for `taint` and `drop-device`; default: the node's first device.
        #[arg(long)]
        device: Option<String>,
        #[arg(long, default_value = "NoSchedule")]
        effect: TaintEffect,
    },
    /// Report the pods bound to simulated nodes as running (plugin pods Ready or not, per node) and confirm their
    /// deletion, as kubelets would. Binding is the scheduler's job.
    Kubelet {
        /// One pass instead of watching.
        #[arg(long)]
        once: bool,
        /// Also play the kubelet plugin: a starting plugin pod publishes its node's slice from its image tag, and a
        /// tag ending in `-notready` never gets Ready, one ending in `-fewer` publishes a device fewer.
        #[arg(long)]
        plugin: bool,
    },
    /// Print, as JSON keyed by instance type, the Neuron devices node `P-I` publishes (every Trainium type by
    /// default). Reads no cluster; the stand-in kubelet plugin's image is built from it.
    Devices {
        #[arg(long)]
        instance_type: Option<String>,
        #[arg(long, default_value = "node")]
        prefix: String,
        #[arg(long, default_value_t = 0)]
        index: usize,
    },
    /// Remove every simulated node and slice (or those of one prefix).
    Clear {
        #[arg(long)]
        prefix: Option<String>,
    },
}

/// `simulate devices`: reads no cluster, so it runs without one.
pub fn print_devices(instance_type: Option<&str>, prefix: &str, index: usize) -> anyhow::Result<()> {
    let devices = devices::by_instance_type(instance_type, prefix, index);
    println!("{}", serde_json::to_string(&devices)?);
    Ok(())
}

pub async fn run(client: Client, command: SimulateCommand) -> anyhow::Result<()> {
    match command {
        SimulateCommand::Fleet {
            count,
            instance_type,
            prefix,
            driver_version,
            neuron_driver_version,
            kubelet_version,
        } => {
            let spec = FleetSpec {
                prefix,
                count,
                instance_type,
                dra_driver_version: driver_version,
                neuron_driver_version,
                kubelet_version,
            };
            create_fleet(&client, &spec).await?;
            println!("fleet {}: {} {} nodes with ResourceSlices", spec.prefix, spec.count, spec.instance_type);
        }
        SimulateCommand::Fault { kind, node, device, effect } => {
            fault(&client, kind, &node, device.as_deref(), effect).await?;
            println!("fault {kind:?} on {node}");
        }
        SimulateCommand::Kubelet { once, plugin } => {
            if once {
                let handled = kubelet_pass(&client).await?;
                println!("kubelet: {handled} pods on simulated nodes reported");
            } else {
                kubelet_with(client, plugin).await?;
            }
        }
        SimulateCommand::Devices { instance_type, prefix, index } => {
            print_devices(instance_type.as_deref(), &prefix, index)?
        }
        SimulateCommand::Clear { prefix } => {
            let removed = clear(&client, prefix.as_deref()).await?;
            println!("removed {removed} simulated nodes");
        }
    }
    Ok(())
}

fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// Creates or updates the fleet's nodes (Ready, untainted) and slices, and the EFA driver's DeviceClass.
pub async fn create_fleet(client: &Client, spec: &FleetSpec) -> anyhow::Result<()> {
    if fleet::expected_devices(&spec.instance_type).is_none() {
        bail!("--instance-type {}: not a Trainium type the simulator knows", spec.instance_type);
    }
    let class = fleet::efa_device_class();
    Api::<DeviceClass>::all(client.clone())
        .patch(&class.name_any(), &apply_params(), &Patch::Apply(&class))
        .await
        .context("applying the EFA DeviceClass")?;
    futures::stream::iter(0..spec.count)
        .map(|index| create_node(client, spec, index))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn create_node(client: &Client, spec: &FleetSpec, index: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node = fleet::node(spec, index);
    node.metadata.annotations = Some(
        [
            (DRA_VERSION_ANNOTATION.to_string(), spec.dra_driver_version.clone()),
            (NEURON_VERSION_ANNOTATION.to_string(), spec.neuron_driver_version.clone()),
            (KUBELET_VERSION_ANNOTATION.to_string(), spec.kubelet_version.clone()),
            (PLUGIN_READY_ANNOTATION.to_string(), "true".to_string()),
        ]
        .into(),
    );
    let name = node.name_any();
    let created = nodes.patch(&name, &apply_params(), &Patch::Apply(&node)).await.context("applying node")?;
    // Admission taints new nodes not-ready; with no node-lifecycle controller, the simulator clears it.
    if created.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| !t.is_empty()) {
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": null}}))).await?;
    }
    let status = json!({"apiVersion": "v1", "kind": "Node", "status": fleet::node_status(spec)});
    nodes.patch_status(&name, &apply_params(), &Patch::Apply(&status)).await.context("node status")?;
    apply_slices(client, spec, index, created.uid()).await
}

/// The node's Neuron slice and, where the type has EFA, its EFA slice.
async fn apply_slices(client: &Client, spec: &FleetSpec, index: usize, uid: Option<String>) -> anyhow::Result<()> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let neuron = fleet::resource_slice(spec, index, uid.clone());
    slices.patch(&neuron.name_any(), &apply_params(), &Patch::Apply(&neuron)).await.context("applying slice")?;
    if let Some(efa) = fleet::efa_slice(spec, index, uid) {
        slices.patch(&efa.name_any(), &apply_params(), &Patch::Apply(&efa)).await.context("applying EFA slice")?;
    }
    Ok(())
}

/// The fleet a simulated node belongs to, recovered from its labels and annotations.
pub(super) async fn fleet_of(client: &Client, node_name: &str) -> anyhow::Result<(FleetSpec, usize, Node)> {
    let node = Api::<Node>::all(client.clone()).get(node_name).await.with_context(|| format!("node {node_name}"))?;
    let labels = node.labels();
    let prefix = labels.get(SIMULATED_LABEL).with_context(|| format!("{node_name} is not a simulated node"))?;
    let index = node_name
        .strip_prefix(&format!("{prefix}-"))
        .and_then(|i| i.parse().ok())
        .with_context(|| format!("{node_name} is not named {prefix}-<index>"))?;
    let annotation = |key: &str, default: &str| node.annotations().get(key).cloned().unwrap_or_else(|| default.into());
    let spec = FleetSpec {
        prefix: prefix.clone(),
        count: index + 1,
        instance_type: labels.get(fleet::INSTANCE_TYPE_LABEL).cloned().unwrap_or_default(),
        dra_driver_version: annotation(DRA_VERSION_ANNOTATION, fleet::DEFAULT_DRA_DRIVER_VERSION),
        neuron_driver_version: annotation(NEURON_VERSION_ANNOTATION, fleet::DEFAULT_NEURON_DRIVER_VERSION),
        kubelet_version: annotation(KUBELET_VERSION_ANNOTATION, fleet::DEFAULT_KUBELET_VERSION),
    };
    Ok((spec, index, node))
}

/// Injects a fault on a simulated node, or clears its faults (`Clear`).
pub async fn fault(
    client: &Client,
    kind: FaultKind,
    node_name: &str,
    device: Option<&str>,
    effect: TaintEffect,
) -> anyhow::Result<()> {
    let (spec, index, node) = fleet_of(client, node_name).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let slice_name = fleet::slice_name(node_name);
    match kind {
        FaultKind::Taint | FaultKind::DropDevice => {
            let slice = slices.get(&slice_name).await.with_context(|| format!("slice of {node_name}"))?;
            let slice = faults::faulty_slice(slice, kind, node_name, device, effect)?;
            slices.patch(&slice_name, &apply_params(), &Patch::Apply(&slice)).await?;
        }
        FaultKind::NoSlice => {
            let _ = slices.delete(&slice_name, &DeleteParams::default()).await;
        }
        FaultKind::LegacyPlugin
        | FaultKind::NeuronHealth
        | FaultKind::AcceleratedHardwareNotReady
        | FaultKind::OldKubelet => {
            patch_node_status(&nodes, node_name, faults::faulty_node_status(kind, &spec)).await?;
        }
        FaultKind::PluginNotReady => {
            set_plugin_ready(client, node_name, false).await?;
        }
        FaultKind::Clear => {
            apply_slices(client, &spec, index, node.uid()).await?;
            patch_node_status(&nodes, node_name, fleet::node_status(&spec)).await?;
            set_plugin_ready(client, node_name, true).await?;
        }
    }
    Ok(())
}

/// Applies the whole simulated status (this manager owns all of it, so removed fields go away).
async fn patch_node_status(nodes: &Api<Node>, name: &str, status: serde_json::Value) -> anyhow::Result<()> {
    let patch = json!({"apiVersion": "v1", "kind": "Node", "status": status});
    nodes.patch_status(name, &apply_params(), &Patch::Apply(&patch)).await?;
    Ok(())
}

/// Deletes simulated nodes and their slices.
pub async fn clear(client: &Client, prefix: Option<&str>) -> anyhow::Result<usize> {
    let selector = match prefix {
        Some(p) => format!("{SIMULATED_LABEL}={p}"),
        None => SIMULATED_LABEL.to_string(),
    };
    let params = ListParams::default().labels(&selector);
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let removed: std::collections::HashSet<String> =
        nodes.list_metadata(&params).await?.items.iter().map(|n| n.name_any()).collect();
    slices.delete_collection(&DeleteParams::default(), &params).await?;
    nodes.delete_collection(&DeleteParams::default(), &params).await?;
    // With their nodes gone no kubelet will confirm the pods' deletion: do it here.
    let pods: Api<Pod> = Api::all(client.clone());
    let orphans: Vec<Pod> = pods
        .list(&ListParams::default().fields("spec.nodeName!="))
        .await?
        .items
        .into_iter()
        .filter(|p| pod_node(p).is_some_and(|n| removed.contains(&n)))
        .collect();
    futures::stream::iter(orphans)
        .map(|pod| async move {
            let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
            force_delete(&api, &pod.name_any()).await
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(removed.len())
}
