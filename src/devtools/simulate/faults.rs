//! The faults `simulate fault` injects, and what each changes of a simulated node's slice or status.

use anyhow::{Context as _, bail};
use k8s_openapi::api::resource::v1::{Device, DeviceTaint, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::json;

use super::fleet::{self, FleetSpec};

/// Taint key the simulated driver uses for a faulty device.
pub const FAULT_TAINT_KEY: &str = "neuron.aws.com/unhealthy";

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

/// The node's slice as this manager applies it with a `Taint` or `DropDevice` fault on `device` (default: the
/// first), in a new pool generation.
pub(super) fn faulty_slice(
    mut slice: ResourceSlice,
    kind: FaultKind,
    node_name: &str,
    device: Option<&str>,
    effect: TaintEffect,
) -> anyhow::Result<ResourceSlice> {
    slice.metadata = ObjectMeta { name: Some(fleet::slice_name(node_name)), ..ObjectMeta::default() };
    let devices = slice.spec.devices.get_or_insert_with(Vec::new);
    let target = pick(devices, node_name, device)?;
    if kind == FaultKind::Taint {
        let taint = DeviceTaint {
            key: FAULT_TAINT_KEY.into(),
            value: Some("NC_UNCORRECTABLE_ERROR".into()),
            effect: effect.as_str().into(),
            time_added: Some(Time(crate::logic::status::now())),
        };
        let d = devices.iter_mut().find(|d| d.name == target).expect("picked from the list");
        let taints = d.taints.get_or_insert_with(Vec::new);
        taints.retain(|t| t.key != FAULT_TAINT_KEY);
        taints.push(taint);
    } else {
        devices.retain(|d| d.name != target);
    }
    slice.spec.pool.generation += 1;
    Ok(slice)
}

/// The device a slice fault hits: the one named, which the slice must have, else its first.
fn pick(devices: &[Device], node_name: &str, device: Option<&str>) -> anyhow::Result<String> {
    match device {
        Some(d) if devices.iter().any(|x| x.name == d) => Ok(d.to_string()),
        Some(d) => bail!("--device {d}: {node_name} has no such device"),
        None => devices.first().map(|d| d.name.clone()).context("the slice has no devices"),
    }
}

/// The node's whole simulated status with a node fault (`LegacyPlugin`, `NeuronHealth`,
/// `AcceleratedHardwareNotReady`, `OldKubelet`); for any other kind, as the fleet has it (what `Clear` applies).
pub(super) fn faulty_node_status(kind: FaultKind, spec: &FleetSpec) -> serde_json::Value {
    let mut status = fleet::node_status(spec);
    match kind {
        FaultKind::LegacyPlugin => {
            let devices = fleet::expected_devices(&spec.instance_type).unwrap_or(1).to_string();
            status["capacity"]["aws.amazon.com/neuron"] = json!(devices);
            status["allocatable"]["aws.amazon.com/neuron"] = json!(devices);
        }
        FaultKind::NeuronHealth => {
            status["conditions"].as_array_mut().unwrap().push(json!({
                "type": "NeuronHealth", "status": "True", "reason": "NeuronHasError_NC_UNCORRECTABLE_ERROR",
                "message": "NeuronCore uncorrectable error detected",
                "lastHeartbeatTime": crate::logic::status::now().to_string(),
                "lastTransitionTime": crate::logic::status::now().to_string(),
            }));
        }
        FaultKind::AcceleratedHardwareNotReady => {
            status["conditions"].as_array_mut().unwrap().push(json!({
                "type": "AcceleratedHardwareReady", "status": "False", "reason": "NeuronHBMUncorrectableError",
                "message": "Neuron device HBM uncorrectable error",
                "lastHeartbeatTime": crate::logic::status::now().to_string(),
                "lastTransitionTime": crate::logic::status::now().to_string(),
            }));
        }
        FaultKind::OldKubelet => status["nodeInfo"]["kubeletVersion"] = json!("v1.34.1"),
        FaultKind::Taint
        | FaultKind::DropDevice
        | FaultKind::NoSlice
        | FaultKind::PluginNotReady
        | FaultKind::Clear => {}
    }
    status
}
