//! capacity (pure): how many more claims of each template fit on a config's nodes now, and how many hold devices.
//!
//! The count follows the allocator's rules for the requests the compiler writes (see `TemplateCapacity` in the
//! API for the exact definition): claims of N connected devices take whole `devicegroup<N>` groups, EFA requests
//! take the interfaces that carry the same group id, `All` takes a whole node, UltraServer claims take a
//! `neuron_node` entry. Groups are disjoint, so counting free groups packs claims exactly as the scheduler can.

use std::collections::HashMap;
use std::sync::Arc;

use crate::build::{EFA_DRIVER, EFA_PCI_DEVICE, LABEL_CLAIM_TEMPLATE, LABEL_CONFIG, NEURON_DRIVER};
use kube::ResourceExt;

use crate::api::TemplateCapacity;
use crate::health::taint_of;
use crate::nodes::NodeFilter;
use crate::taint_rule::TaintRuleView;
use crate::validate::{Choice, ClaimKind, ClaimSpec, Count, ValidatedConfig};
use crate::view::{AllocatedDeviceView, ClaimView, DEVICE_GROUP_SIZES, DeviceView, GroupId, NodeView, SliceView};

/// What a Neuron slice entry is (its `resourceType`), read once per device rather than once per template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Device,
    /// An UltraServer node entry.
    Node,
    Other,
}

/// A device, whether a new claim could get it, and its connected groups. Kept small: every template walks every
/// slot of every node.
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    pub device: &'a DeviceView,
    pub free: bool,
    pub entry: Entry,
    /// For each size of `DEVICE_GROUP_SIZES`, the index of the device's group among its node's groups of that
    /// size: group ids are compared once per node here, not once per template. A node has at most 16 groups.
    groups: [Option<u8>; DEVICE_GROUP_SIZES.len()],
}

/// The Neuron devices (and node entries) and EFA interfaces of one node.
#[derive(Debug, Default)]
pub struct NodeDevices<'a> {
    pub neuron: Vec<Slot<'a>>,
    pub efa: Vec<Slot<'a>>,
    /// The node's distinct group ids of each size; a slot's `groups` index into these.
    group_ids: [Vec<GroupId>; DEVICE_GROUP_SIZES.len()],
}

/// Which connected-group sizes (flags in `DEVICE_GROUP_SIZES` order) some template counts by.
pub type GroupSizes = [bool; DEVICE_GROUP_SIZES.len()];

/// The sizes the templates of `claims` count by: only their group ids are compared, node by node.
pub fn group_sizes(claims: &[ClaimSpec]) -> GroupSizes {
    let mut sizes = [false; DEVICE_GROUP_SIZES.len()];
    for size in claims.iter().flat_map(|c| &c.choices).filter_map(group_size) {
        sizes[size] = true;
    }
    sizes
}

/// The index in `DEVICE_GROUP_SIZES` of the group size a choice is counted by: N connected devices, or (one device
/// with EFA) the device and its own EFA. None for choices counted without groups, or of a size no group has.
fn group_size(choice: &Choice) -> Option<usize> {
    match &choice.kind {
        ClaimKind::Devices { count: Count::Exactly(n), efa } if *n > 1 || efa.is_some() => {
            DEVICE_GROUP_SIZES.iter().position(|s| s == n)
        }
        _ => None,
    }
}

impl<'a> NodeDevices<'a> {
    /// The slot of `device`, its group ids of the `sizes` wanted turned into indices (Neuron devices and EFA
    /// interfaces share ids).
    fn slot(&mut self, device: &'a DeviceView, free: bool, sizes: &GroupSizes) -> Slot<'a> {
        let mut groups = [None; DEVICE_GROUP_SIZES.len()];
        for (size, index) in groups.iter_mut().enumerate().filter(|(size, _)| sizes[*size]) {
            let Some(id) = device.attributes.device_groups[size] else { continue };
            let ids = &mut self.group_ids[size];
            let position = ids.iter().position(|known| *known == id).unwrap_or_else(|| {
                ids.push(id);
                ids.len() - 1
            });
            *index = u8::try_from(position).ok();
        }
        // The templates select on `resourceType`: an entry without one is never allocated.
        let entry = match device.resource_type() {
            Some("neuron_device") => Entry::Device,
            Some("neuron_node") => Entry::Node,
            _ => Entry::Other,
        };
        Slot { device, free, entry, groups }
    }
}

/// Every device some claim holds, by pool (a node-local pool is named after its node): (driver, device name).
/// A node's few allocated devices are then found with one lookup and a short scan.
#[derive(Debug, Default)]
pub struct Allocated<'a>(HashMap<&'a str, Vec<(&'a str, &'a str)>>);

impl<'a> Allocated<'a> {
    pub fn new(claims: &'a [Arc<ClaimView>]) -> Self {
        let mut by_pool: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
        for device in claims.iter().flat_map(|c| c.devices()) {
            let device: &AllocatedDeviceView = device;
            by_pool.entry(&device.pool).or_default().push((&device.driver, &device.device));
        }
        Allocated(by_pool)
    }

    fn in_pool(&self, pool: &str) -> &[(&'a str, &'a str)] {
        self.0.get(pool).map(Vec::as_slice).unwrap_or_default()
    }
}

/// One node's devices from its Neuron and EFA slices, each marked free or not.
pub fn node_devices<'a>(
    slices: impl IntoIterator<Item = &'a SliceView>,
    allocated: &Allocated,
    taint_rules: &[Arc<TaintRuleView>],
    sizes: &GroupSizes,
) -> NodeDevices<'a> {
    let mut node = NodeDevices::default();
    for slice in slices {
        let driver = slice.spec.driver.as_str();
        let held = allocated.in_pool(&slice.spec.pool.name);
        for device in &slice.spec.devices {
            let taken = held.iter().any(|&(d, name)| d == driver && name == device.name);
            let free = !taken && taint_of(slice, device, taint_rules).is_none();
            match driver {
                NEURON_DRIVER => {
                    let slot = node.slot(device, free, sizes);
                    node.neuron.push(slot);
                }
                EFA_DRIVER if device.attributes.pci_device.as_deref() == Some(EFA_PCI_DEVICE) => {
                    let slot = node.slot(device, free, sizes);
                    node.efa.push(slot);
                }
                _ => {}
            }
        }
    }
    node
}

/// Whether a Neuron entry is of `entry` and matches the choice's selectors.
fn matches(choice: &Choice, slot: &Slot, entry: Entry) -> bool {
    let pinned = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
    slot.entry == entry
        && pinned(&choice.instance_type, &slot.device.attributes.instance_type)
        && pinned(&choice.neuron_driver_version, &slot.device.attributes.neuron_driver_version)
}

/// How many more claims of `claim` the nodes can take now.
pub fn available(claim: &ClaimSpec, nodes: &[NodeDevices]) -> i64 {
    match claim.choices.as_slice() {
        [only] => nodes.iter().map(|node| available_on(only, node)).sum(),
        choices => {
            let mut taken = Vec::new();
            nodes.iter().map(|node| fallbacks::available_on(choices, node, &mut taken)).sum()
        }
    }
}

fn available_on(choice: &Choice, node: &NodeDevices) -> i64 {
    let (count, efa) = match &choice.kind {
        ClaimKind::UltraServerNode { .. } => {
            return node.neuron.iter().filter(|s| s.free && matches(choice, s, Entry::Node)).count() as i64;
        }
        ClaimKind::Devices { count, efa } => (*count, efa.is_some()),
    };
    let devices = || node.neuron.iter().filter(|s| matches(choice, s, Entry::Device));
    match count {
        Count::All => {
            let whole = devices().next().is_some() && devices().all(|s| s.free);
            let efas_free = !efa || (!node.efa.is_empty() && node.efa.iter().all(|s| s.free));
            i64::from(whole && efas_free)
        }
        Count::Exactly(1) if !efa => devices().filter(|s| s.free).count() as i64,
        Count::Exactly(n) => {
            let efa_per_claim = match &choice.kind {
                ClaimKind::Devices { efa: Some(Count::Exactly(e)), .. } => *e as usize,
                _ => 0,
            };
            let Some(size) = group_size(choice) else { return 0 };
            let groups = node.group_ids[size].len();
            free_groups(devices(), &node.efa, (size, groups), n as usize, efa_per_claim)
        }
    }
}

/// Claims of `per_claim` devices and `efa_per_claim` EFA interfaces that fit, each in one group of one size
/// (`(size index, groups of that size on the node)`): per group, as many claims as its free devices and free EFAs
/// allow.
fn free_groups<'a>(
    devices: impl Iterator<Item = &'a Slot<'a>>,
    efa: &[Slot],
    (size, groups): (usize, usize),
    per_claim: usize,
    efa_per_claim: usize,
) -> i64 {
    // (free devices, free EFAs) per group
    let mut free = vec![(0usize, 0usize); groups];
    for group in devices.filter(|s| s.free).filter_map(|s| s.groups[size]) {
        free[usize::from(group)].0 += 1;
    }
    if efa_per_claim > 0 {
        for group in efa.iter().filter(|s| s.free).filter_map(|s| s.groups[size]) {
            free[usize::from(group)].1 += 1;
        }
    }
    free.iter()
        .map(|&(free_devices, free_efas)| {
            let by_devices = free_devices / per_claim;
            free_efas.checked_div(efa_per_claim).map_or(by_devices, |by_efas| by_devices.min(by_efas))
        })
        .sum::<usize>() as i64
}

/// What capacity is computed from, for one config.
pub struct Inputs<'a> {
    pub config: &'a ValidatedConfig,
    pub nodes: &'a [Arc<NodeView>],
    /// The Neuron driver's slices, by node name.
    pub slices: &'a HashMap<String, Vec<Arc<SliceView>>>,
    /// The EFA driver's slices, by node name.
    pub efa_slices: &'a HashMap<String, Vec<Arc<SliceView>>>,
    pub claims: &'a [Arc<ClaimView>],
    pub taint_rules: &'a [Arc<TaintRuleView>],
}

/// Claims and room for every template of the config, in template order.
pub fn assess(inputs: &Inputs) -> Vec<TemplateCapacity> {
    let filter = NodeFilter::new(&inputs.config.spec);
    let allocated = Allocated::new(inputs.claims);
    let sizes = group_sizes(&inputs.config.claims);
    let nodes: Vec<NodeDevices> = inputs
        .nodes
        .iter()
        .filter(|n| filter.selects(n.labels()))
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let neuron = inputs.slices.get(name).into_iter().flatten();
            let efa = inputs.efa_slices.get(name).into_iter().flatten();
            let slices = neuron.chain(efa).map(Arc::as_ref);
            node_devices(slices, &allocated, inputs.taint_rules, &sizes)
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

#[path = "capacity_fallbacks.rs"]
mod fallbacks;

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
