//! A node's devices as the templates see them: each Neuron device (or node entry) and EFA interface read once into a
//! small `Slot` (free or not, its kind, its pinned attributes and connected groups as positions), and the `Selector`
//! a template's choice matches slots with.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{AllocatedDeviceView, ClaimView, DEVICE_GROUP_SIZES, DeviceView, GroupId, SliceView};
use crate::logic::desired::{EFA_DRIVER, EFA_PCI_DEVICE, NEURON_DRIVER};
use crate::logic::health::taint_of;
use crate::logic::validate::{Choice, ClaimKind, ClaimSpec, Count};

/// What a Neuron slice entry is (its `resourceType`), read once per device rather than once per template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Device,
    /// An UltraServer node entry.
    Node,
    Other,
}

/// A device as the templates see it: whether a new claim could get it, what it is, and its connected groups.
/// Self-contained and eight bytes: every template walks every slot of every node, and reading the device itself
/// there (its strings live elsewhere on the heap) cost more than the counting.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub free: bool,
    pub entry: Entry,
    /// The device's instance type and Neuron driver version as positions among the values the config's templates
    /// pin (`Pins`); None when no template pins that value.
    instance_type: Option<u16>,
    neuron_driver_version: Option<u16>,
    /// For each size of `DEVICE_GROUP_SIZES`, the index of the device's group among its node's groups of that
    /// size: group ids are compared once per node here, not once per template. A node has at most 16 groups.
    pub(super) groups: [Option<u8>; DEVICE_GROUP_SIZES.len()],
}

/// The Neuron devices (and node entries) and EFA interfaces of one node.
#[derive(Debug, Default)]
pub struct NodeDevices {
    pub neuron: Vec<Slot>,
    pub efa: Vec<Slot>,
    /// The node's distinct group ids of each size; a slot's `groups` index into these.
    pub(super) group_ids: [Vec<GroupId>; DEVICE_GROUP_SIZES.len()],
}

/// What a config's templates read of a device, gathered once per config: the connected-group sizes they count by
/// (flags in `DEVICE_GROUP_SIZES` order) and the instance types and driver versions they pin.
#[derive(Debug, Default)]
pub struct Pins<'c> {
    sizes: [bool; DEVICE_GROUP_SIZES.len()],
    instance_types: Vec<&'c str>,
    neuron_driver_versions: Vec<&'c str>,
}

impl<'c> Pins<'c> {
    pub fn of(claims: &'c [ClaimSpec]) -> Self {
        let mut pins = Pins::default();
        for choice in claims.iter().flat_map(|c| &c.choices) {
            if let Some(size) = group_size(choice) {
                pins.sizes[size] = true;
            }
            remember(&mut pins.instance_types, choice.instance_type.as_deref());
            remember(&mut pins.neuron_driver_versions, choice.neuron_driver_version.as_deref());
        }
        pins
    }

    /// A choice's selectors as positions, resolved once per choice rather than once per slot.
    fn selector(&self, choice: &Choice, entry: Entry) -> Selector {
        let position = |values: &[&str], want: &Option<String>| {
            want.as_deref().map(|want| values.iter().position(|v| *v == want).and_then(|p| u16::try_from(p).ok()))
        };
        Selector {
            entry,
            instance_type: position(&self.instance_types, &choice.instance_type),
            neuron_driver_version: position(&self.neuron_driver_versions, &choice.neuron_driver_version),
        }
    }
}

fn remember<'c>(values: &mut Vec<&'c str>, value: Option<&'c str>) {
    if let Some(value) = value.filter(|v| !values.contains(v)) {
        values.push(value);
    }
}

/// Which slots a choice takes: an entry kind, and for each pinned selector (Some) the position it must hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct Selector {
    entry: Entry,
    instance_type: Option<Option<u16>>,
    neuron_driver_version: Option<Option<u16>>,
}

impl Selector {
    pub(super) fn matches(&self, slot: &Slot) -> bool {
        let pinned =
            |want: Option<Option<u16>>, have: Option<u16>| want.is_none_or(|want| want.is_some() && want == have);
        slot.entry == self.entry
            && pinned(self.instance_type, slot.instance_type)
            && pinned(self.neuron_driver_version, slot.neuron_driver_version)
    }
}

/// The index in `DEVICE_GROUP_SIZES` of the group size a choice is counted by: N connected devices, or (one device
/// with EFA) the device and its own EFA. None for choices counted without groups, or of a size no group has.
pub(super) fn group_size(choice: &Choice) -> Option<usize> {
    match &choice.kind {
        ClaimKind::Devices { count: Count::Exactly(n), efa } if *n > 1 || efa.is_some() => {
            DEVICE_GROUP_SIZES.iter().position(|s| s == n)
        }
        _ => None,
    }
}

impl NodeDevices {
    /// The slot of `device`: its group ids of the sizes wanted turned into indices (Neuron devices and EFA
    /// interfaces share ids), its pinned attributes into positions.
    fn slot(&mut self, device: &DeviceView, free: bool, pins: &Pins) -> Slot {
        let mut groups = [None; DEVICE_GROUP_SIZES.len()];
        for (size, index) in groups.iter_mut().enumerate().filter(|(size, _)| pins.sizes[*size]) {
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
        let position = |values: &[&str], have: Option<&str>| {
            let have = have?;
            values.iter().position(|v| *v == have).and_then(|p| u16::try_from(p).ok())
        };
        Slot {
            free,
            entry,
            instance_type: position(&pins.instance_types, device.instance_type()),
            neuron_driver_version: position(&pins.neuron_driver_versions, device.neuron_driver_version()),
            groups,
        }
    }
}

/// Every device some claim holds, by pool (a node-local pool is named after its node): (driver, device name).
/// A node's few allocated devices are then found with one lookup and a short scan.
#[derive(Debug, Default)]
pub struct Allocated<'a>(HashMap<&'a str, Vec<(&'a str, &'a str)>>);

impl<'a> Allocated<'a> {
    pub fn new(claims: &'a [Arc<ClaimView>]) -> Self {
        let mut by_pool: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
        for device in claims.iter().flat_map(|c| c.taken_devices()) {
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
    pins: &Pins,
) -> NodeDevices {
    let mut node = NodeDevices::default();
    node.fill(slices, allocated, taint_rules, pins);
    node
}

impl NodeDevices {
    /// Replaces the slots with those of another node, keeping the buffers: `assess` reads nodes one at a time.
    pub(super) fn fill<'a>(
        &mut self,
        slices: impl IntoIterator<Item = &'a SliceView>,
        allocated: &Allocated,
        taint_rules: &[Arc<TaintRuleView>],
        pins: &Pins,
    ) {
        self.neuron.clear();
        self.efa.clear();
        self.group_ids.iter_mut().for_each(Vec::clear);
        // An UltraServer node's `neuron_node` entry and its `neuron_device` entries are the same hardware: a claim
        // on the entry holds every device, a claim on a device leaves no whole node (docs/neuron-driver.md).
        let (mut node_taken, mut device_taken) = (false, false);
        for slice in slices {
            let driver: &str = &slice.spec.driver;
            let neuron = match driver {
                NEURON_DRIVER => true,
                EFA_DRIVER => false,
                _ => continue,
            };
            // The few devices claims hold in this pool, of this slice's driver.
            let held = allocated.in_pool(&slice.spec.pool.name);
            let held = || held.iter().filter(|(d, _)| *d == driver).map(|(_, name)| *name);
            for device in &slice.spec.devices {
                if !neuron && device.pci_device() != Some(EFA_PCI_DEVICE) {
                    continue;
                }
                let taken = held().any(|name| name == &*device.name);
                let free = !taken && taint_of(slice, device, taint_rules).is_none();
                let slot = self.slot(device, free, pins);
                if neuron {
                    node_taken |= taken && slot.entry == Entry::Node;
                    device_taken |= taken && slot.entry == Entry::Device;
                    self.neuron.push(slot);
                } else {
                    self.efa.push(slot);
                }
            }
        }
        for slot in &mut self.neuron {
            let held_by_the_other_kind = match slot.entry {
                Entry::Device => node_taken,
                Entry::Node => device_taken,
                Entry::Other => false,
            };
            slot.free &= !held_by_the_other_kind;
        }
    }
}

/// The slots a choice takes: UltraServer claims take node entries, all others devices.
pub(super) fn selector(choice: &Choice, pins: &Pins) -> Selector {
    let entry = match choice.kind {
        ClaimKind::Devices { .. } => Entry::Device,
        ClaimKind::UltraServerNode { .. } => Entry::Node,
    };
    pins.selector(choice, entry)
}
