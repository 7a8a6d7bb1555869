//! `simulate fault`: a device tainted or gone, a slice missing, a node condition or kubelet version that the
//! operator reports, a plugin pod NotReady, and `clear` to undo them all.

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, DeviceTaint, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::fleet;
use super::kubelet::set_plugin_ready;
use super::marks::{FAULT_TAINT_KEY, apply_params};
use super::nodes::{apply_slices, fleet_of};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Taint a device in the node's slice.
    Taint,
    /// Drop a device from the node's slice.
    DropDevice,
    /// Remove the node's slice (plugin not publishing).
    NoSlice,
    /// Report the legacy Neuron device plugin's resources on the node.
    LegacyPlugin,
    /// Set the node problem detector's NeuronHealth condition.
    NeuronHealth,
    /// Set the EKS node monitoring agent's AcceleratedHardwareReady condition to False.
    AcceleratedHardwareNotReady,
    /// Report the node's plugin pod NotReady.
    PluginNotReady,
    /// Report kubelet v1.34.1 (DRA regression kubernetes/kubernetes#133920).
    OldKubelet,
    /// Undo every fault on the node.
    Clear,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "PascalCase")]
pub enum TaintEffect {
    NoSchedule,
    NoExecute,
}

impl TaintEffect {
    fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

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
    let pick = |devices: &[Device]| -> anyhow::Result<String> {
        match device {
            Some(d) if devices.iter().any(|x| x.name == d) => Ok(d.to_string()),
            Some(d) => bail!("--device {d}: {node_name} has no such device"),
            None => devices.first().map(|d| d.name.clone()).context("the slice has no devices"),
        }
    };
    match kind {
        FaultKind::Taint | FaultKind::DropDevice => {
            let mut slice = slices.get(&slice_name).await.with_context(|| format!("slice of {node_name}"))?;
            slice.metadata = ObjectMeta { name: Some(slice_name.clone()), ..ObjectMeta::default() };
            let devices = slice.spec.devices.get_or_insert_with(Vec::new);
            let target = pick(devices)?;
            if kind == FaultKind::Taint {
                add_fault_taint(devices.iter_mut().find(|d| d.name == target).expect("picked from the list"), effect);
            } else {
                devices.retain(|d| d.name != target);
            }
            slice.spec.pool.generation += 1;
            slices.patch(&slice_name, &apply_params(), &Patch::Apply(&slice)).await?;
        }
        FaultKind::NoSlice => {
            let _ = slices.delete(&slice_name, &DeleteParams::default()).await;
        }
        FaultKind::LegacyPlugin => {
            let devices = fleet::expected_devices(&spec.instance_type).unwrap_or(1).to_string();
            let mut status = fleet::node_status(&spec);
            status["capacity"]["aws.amazon.com/neuron"] = json!(devices);
            status["allocatable"]["aws.amazon.com/neuron"] = json!(devices);
            patch_node_status(&nodes, node_name, status).await?;
        }
        FaultKind::NeuronHealth => {
            let mut status = fleet::node_status(&spec);
            status["conditions"].as_array_mut().unwrap().push(json!({
                "type": "NeuronHealth", "status": "True", "reason": "NeuronHasError_NC_UNCORRECTABLE_ERROR",
                "message": "NeuronCore uncorrectable error detected",
                "lastHeartbeatTime": crate::logic::status::now().to_string(),
                "lastTransitionTime": crate::logic::status::now().to_string(),
            }));
            patch_node_status(&nodes, node_name, status).await?;
        }
        FaultKind::AcceleratedHardwareNotReady => {
            let mut status = fleet::node_status(&spec);
            status["conditions"].as_array_mut().unwrap().push(json!({
                "type": "AcceleratedHardwareReady", "status": "False", "reason": "NeuronHBMUncorrectableError",
                "message": "Neuron device HBM uncorrectable error",
                "lastHeartbeatTime": crate::logic::status::now().to_string(),
                "lastTransitionTime": crate::logic::status::now().to_string(),
            }));
            patch_node_status(&nodes, node_name, status).await?;
        }
        FaultKind::OldKubelet => {
            let mut status = fleet::node_status(&spec);
            status["nodeInfo"]["kubeletVersion"] = json!("v1.34.1");
            patch_node_status(&nodes, node_name, status).await?;
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

/// Marks `device` faulty with the simulated driver's taint, in place of an earlier one.
fn add_fault_taint(device: &mut Device, effect: TaintEffect) {
    let taint = DeviceTaint {
        key: FAULT_TAINT_KEY.into(),
        value: Some("NC_UNCORRECTABLE_ERROR".into()),
        effect: effect.as_str().into(),
        time_added: Some(Time(crate::logic::status::now())),
    };
    let taints = device.taints.get_or_insert_with(Vec::new);
    taints.retain(|t| t.key != FAULT_TAINT_KEY);
    taints.push(taint);
}

/// Applies the whole simulated status (this manager owns all of it, so removed fields go away).
async fn patch_node_status(nodes: &Api<Node>, name: &str, status: serde_json::Value) -> anyhow::Result<()> {
    let patch = json!({"apiVersion": "v1", "kind": "Node", "status": status});
    nodes.patch_status(name, &apply_params(), &Patch::Apply(&patch)).await?;
    Ok(())
}
