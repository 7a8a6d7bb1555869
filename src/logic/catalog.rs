//! What the operator knows about Trainium instance types (sources in docs/neuron-driver.md). Unknown types still
//! work: they are simply not checked. Rows the sources leave open are marked *inferred*, to be easy to revisit.

/// One instance type as the DRA driver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceType {
    pub name: &'static str,
    /// Neuron devices per node; `None` where unknown.
    pub devices: Option<u32>,
    /// Whether the driver honours the Logical NeuronCore opaque config on this type.
    pub lnc: bool,
    /// EFA interfaces per node (0 = no EFA).
    pub efa_interfaces: u32,
    /// Whether nodes of this type form UltraServers and publish `neuron_node` entries.
    pub ultra_server: bool,
}

const fn row(
    name: &'static str,
    devices: Option<u32>,
    lnc: bool,
    efa_interfaces: u32,
    ultra_server: bool,
) -> InstanceType {
    InstanceType { name, devices, lnc, efa_interfaces, ultra_server }
}

/// Every Trainium type the DRA driver supports, in the order AWS lists them.
pub const TRAINIUM_TYPES: &[InstanceType] = &[
    row("trn1.2xlarge", Some(1), false, 0, false),
    row("trn1.32xlarge", Some(16), false, 8, false),
    row("trn1n.32xlarge", Some(16), false, 16, false),
    // EFA on trn2.3xlarge is inferred: none.
    row("trn2.3xlarge", Some(1), true, 0, false),
    row("trn2.48xlarge", Some(16), true, 16, false),
    row("trn2u.48xlarge", Some(16), true, 16, true),
    // Trn3 UltraServers join 4 nodes through NeuronSwitch; EFA count per node is inferred from trn2.
    row("trn3.48xlarge", Some(16), true, 16, true),
    // trn3e.24xlarge: device count unknown, so counts are not checked.
    row("trn3e.24xlarge", None, true, 0, false),
];

/// The devices one UltraServer node entry (`resourceType == 'neuron_node'`) stands for: the most devices of any
/// UltraServer type of the catalog (16 on trn2u.48xlarge and trn3.48xlarge). A device budget charges each node
/// entry this many devices (docs/teams.md).
pub const ULTRA_SERVER_NODE_DEVICES: i64 = ultra_server_node_devices();

const fn ultra_server_node_devices() -> i64 {
    let mut most = 0;
    let mut index = 0;
    while index < TRAINIUM_TYPES.len() {
        let row = &TRAINIUM_TYPES[index];
        if let (true, Some(devices)) = (row.ultra_server, row.devices)
            && devices as i64 > most
        {
            most = devices as i64;
        }
        index += 1;
    }
    most
}

/// Inferentia types are Neuron hardware but the DRA driver does not support them.
pub fn is_inferentia(name: &str) -> bool {
    name.starts_with("inf")
}

pub fn lookup(name: &str) -> Option<&'static InstanceType> {
    TRAINIUM_TYPES.iter().find(|t| t.name == name)
}

/// The Logical NeuronCore size the runtime uses on Trainium2 and later when a claim sets none (AWS: "On Trn2, each
/// Trainium accelerator has 8 NeuronCores (default 4 Logical NeuronCores)"; Trn3 *inferred* alike).
pub const DEFAULT_LNC: u32 = 2;

impl InstanceType {
    /// Physical NeuronCores per device: 2 NeuronCore-v2 on Trainium1, 8 NeuronCore-v3 on Trainium2 and 8
    /// NeuronCore-v4 on Trainium3 (AWS's architecture pages, docs/workloads.md).
    pub fn physical_cores(&self) -> u32 {
        if self.name.starts_with("trn1") { 2 } else { 8 }
    }

    /// The NeuronCores the runtime shows per device (what `--nproc-per-node` counts): the physical cores on
    /// Trainium1, which has no LNC; on later types the physical cores grouped by `lnc` (default 2).
    pub fn cores_per_device(&self, lnc: Option<u32>) -> u32 {
        if self.lnc { self.physical_cores() / lnc.unwrap_or(DEFAULT_LNC) } else { self.physical_cores() }
    }

    /// EFA interfaces that pair with `devices` Neuron devices (trn1.32xlarge shares one EFA between two devices).
    pub fn efa_for(&self, devices: u32) -> u32 {
        match self.devices {
            Some(total) if total > 0 && self.efa_interfaces > 0 => (devices * self.efa_interfaces).div_ceil(total),
            _ => devices,
        }
    }
}

#[cfg(test)]
mod tests;
