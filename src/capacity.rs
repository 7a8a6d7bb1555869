//! capacity (pure): how many more claims of each template fit on a config's nodes now, and how many hold devices.
//!
//! The count follows the allocator's rules for the requests the compiler writes (see `TemplateCapacity` in the
//! API for the exact definition): claims of N connected devices take whole `devicegroup<N>` groups, EFA requests
//! take the interfaces that carry the same group id, `All` takes a whole node, UltraServer claims take a
//! `neuron_node` entry. Groups are disjoint, so counting free groups packs claims exactly as the scheduler can.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1alpha3::DeviceTaintRule;

use crate::build::{EFA_DRIVER, EFA_PCI_DEVICE, LABEL_CLAIM_TEMPLATE, LABEL_CONFIG, NEURON_DRIVER};
use kube::ResourceExt;

use crate::api::TemplateCapacity;
use crate::health::taint_of;
use crate::nodes::NodeFilter;
use crate::validate::{ClaimKind, ClaimSpec, Count, ValidatedConfig};
use crate::view::{AllocatedDeviceView, ClaimView, DeviceView, NodeView, SliceView};

/// A device and whether a new claim could get it.
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    pub device: &'a DeviceView,
    pub free: bool,
}

/// The Neuron devices (and node entries) and EFA interfaces of one node.
#[derive(Debug, Default)]
pub struct NodeDevices<'a> {
    pub neuron: Vec<Slot<'a>>,
    pub efa: Vec<Slot<'a>>,
}

/// A device by (driver, pool, device name), borrowed from the caches.
pub type DeviceKey<'a> = (&'a str, &'a str, &'a str);

/// Every device some claim holds.
pub fn allocated_devices(claims: &[Arc<ClaimView>]) -> HashSet<DeviceKey<'_>> {
    claims
        .iter()
        .flat_map(|c| c.devices().iter().map(|d: &AllocatedDeviceView| (&*d.driver, &*d.pool, &*d.device)))
        .collect()
}

/// One node's devices from its Neuron and EFA slices, each marked free or not.
pub fn node_devices<'a>(
    slices: impl IntoIterator<Item = &'a SliceView>,
    allocated: &HashSet<DeviceKey>,
    taint_rules: &[Arc<DeviceTaintRule>],
) -> NodeDevices<'a> {
    let mut node = NodeDevices::default();
    for slice in slices {
        for device in &slice.spec.devices {
            let key = (slice.spec.driver.as_str(), slice.spec.pool.name.as_str(), device.name.as_str());
            let free = !allocated.contains(&key) && taint_of(slice, device, taint_rules).is_none();
            let slot = Slot { device, free };
            match slice.spec.driver.as_str() {
                NEURON_DRIVER => node.neuron.push(slot),
                EFA_DRIVER if device.attributes.pci_device.as_deref() == Some(EFA_PCI_DEVICE) => node.efa.push(slot),
                _ => {}
            }
        }
    }
    node
}

/// Whether a Neuron entry matches the template's selectors.
fn matches(claim: &ClaimSpec, device: &DeviceView, resource_type: &str) -> bool {
    let pinned = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
    device.resource_type() == Some(resource_type)
        && pinned(&claim.instance_type, &device.attributes.instance_type)
        && pinned(&claim.neuron_driver_version, &device.attributes.neuron_driver_version)
}

/// How many more claims of `claim` the nodes can take now.
pub fn available(claim: &ClaimSpec, nodes: &[NodeDevices]) -> i64 {
    nodes.iter().map(|node| available_on(claim, node)).sum()
}

fn available_on(claim: &ClaimSpec, node: &NodeDevices) -> i64 {
    let (count, efa) = match &claim.kind {
        ClaimKind::UltraServerNode { .. } => {
            return node.neuron.iter().filter(|s| s.free && matches(claim, s.device, "neuron_node")).count() as i64;
        }
        ClaimKind::Devices { count, efa } => (*count, efa.is_some()),
    };
    let devices: Vec<&Slot> = node.neuron.iter().filter(|s| matches(claim, s.device, "neuron_device")).collect();
    match count {
        Count::All => {
            let whole = !devices.is_empty() && devices.iter().all(|s| s.free);
            let efas_free = !efa || (!node.efa.is_empty() && node.efa.iter().all(|s| s.free));
            i64::from(whole && efas_free)
        }
        Count::Exactly(1) if !efa => devices.iter().filter(|s| s.free).count() as i64,
        Count::Exactly(n) => {
            // Group size: N connected devices, or (one device with EFA) the device and its own EFA.
            let size = if n == 1 { 1 } else { n };
            let efa_per_claim = match &claim.kind {
                ClaimKind::Devices { efa: Some(Count::Exactly(e)), .. } => *e as usize,
                _ => 0,
            };
            free_groups(&devices, &node.efa, size, n as usize, efa_per_claim)
        }
    }
}

/// Claims of `devices` devices and `efas` EFA interfaces that fit, each in one group of `size`: per group id,
/// as many claims as its free devices and free EFAs allow.
fn free_groups(devices: &[&Slot], efa: &[Slot], size: u32, per_claim: usize, efa_per_claim: usize) -> i64 {
    let mut groups: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for slot in devices.iter().filter(|s| s.free) {
        if let Some(id) = slot.device.device_group(size) {
            groups.entry(id).or_default().0 += 1;
        }
    }
    if efa_per_claim > 0 {
        for slot in efa.iter().filter(|s| s.free) {
            if let Some(entry) = slot.device.device_group(size).and_then(|id| groups.get_mut(id)) {
                entry.1 += 1;
            }
        }
    }
    groups
        .values()
        .map(|(free_devices, free_efas)| {
            let by_devices = free_devices / per_claim;
            free_efas.checked_div(efa_per_claim).map_or(by_devices, |by_efas| by_devices.min(by_efas))
        })
        .sum::<usize>() as i64
}

/// What capacity is computed from, for one config.
pub struct Inputs<'a> {
    pub config: &'a ValidatedConfig,
    pub nodes: &'a [Arc<NodeView>],
    /// The Neuron and EFA slices, by node name.
    pub slices: &'a HashMap<String, Vec<Arc<SliceView>>>,
    pub claims: &'a [Arc<ClaimView>],
    pub taint_rules: &'a [Arc<DeviceTaintRule>],
}

/// Claims and room for every template of the config, in template order.
pub fn assess(inputs: &Inputs) -> Vec<TemplateCapacity> {
    let filter = NodeFilter::new(&inputs.config.spec);
    let allocated = allocated_devices(inputs.claims);
    let nodes: Vec<NodeDevices> = inputs
        .nodes
        .iter()
        .filter(|n| filter.selects(n.labels()))
        .map(|n| {
            let slices = inputs.slices.get(&n.name_any()).into_iter().flatten().map(Arc::as_ref);
            node_devices(slices, &allocated, inputs.taint_rules)
        })
        .collect();
    let counts = allocated_by_template(&inputs.config.name, inputs.claims);
    inputs
        .config
        .claims
        .iter()
        .map(|claim| TemplateCapacity {
            template: claim.template.clone(),
            allocated: counts.get(&claim.template).copied().unwrap_or(0),
            available: available(claim, &nodes),
        })
        .collect()
}

/// Allocated claims per template of one config.
pub fn allocated_by_template(config: &str, claims: &[Arc<ClaimView>]) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for claim in claims.iter().filter(|c| !c.devices().is_empty()) {
        let labels = claim.metadata.labels.as_ref();
        let of = |key: &str| labels.and_then(|l| l.get(key));
        if of(LABEL_CONFIG).is_some_and(|c| c == config)
            && let Some(template) = of(LABEL_CLAIM_TEMPLATE)
        {
            *counts.entry(template.clone()).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
