//! `neuron-dra-devtools simulate`: a Trainium fleet for tests, benchmarks and the demo. Nodes, the Neuron driver's
//! ResourceSlices and the EFA driver's ResourceSlices (with its DeviceClass) as the real drivers publish them, faults
//! on demand, and a stand-in kubelet that reports the pods the scheduler bound to simulated nodes as running (and
//! confirms their deletion). Everything is idempotent (server-side apply).

pub mod devices;
mod fault;
pub mod fleet;
mod kubelet;
pub mod lease;
mod marks;
mod nodes;

pub use fault::{FaultKind, TaintEffect, fault};
use kubelet::{force_delete, pod_node};
pub use kubelet::{kubelet, kubelet_pass, kubelet_with};
use marks::PARALLEL;
pub use marks::{FAULT_TAINT_KEY, FEWER_DEVICES_TAG, NO_PUBLISH_TAG, NOT_READY_TAG, PLUGIN_READY_ANNOTATION};
pub use nodes::create_fleet;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};

use fleet::{FleetSpec, SIMULATED_LABEL};

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
