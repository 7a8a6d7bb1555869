//! Pure builders of a simulated Trainium node, the ResourceSlice the Neuron DRA driver publishes for it, and the
//! ResourceSlice of its EFA interfaces as the EFA DRA driver publishes it (docs/neuron-driver.md and
//! docs/efa-driver.md say what each attribute means and where it comes from). Over 400 lines because the node,
//! both slices, the EFA DeviceClass and their tests describe one simulated machine and change together.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, Device, DeviceAttribute, DeviceClass, DeviceClassSpec, DeviceSelector, ResourcePool,
    ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::logic::catalog::{self, InstanceType};
pub use crate::logic::desired::EFA_DRIVER;
use crate::logic::desired::{EFA_DEVICE_CLASS, EFA_PCI_DEVICE, NEURON_DRIVER};

/// Label on every simulated node, so `simulate clear` finds them.
pub const SIMULATED_LABEL: &str = "neurondra.io/simulated";
pub use crate::logic::nodes::INSTANCE_TYPE_LABEL;
pub const DEFAULT_DRA_DRIVER_VERSION: &str = "1.1.0";
pub const DEFAULT_NEURON_DRIVER_VERSION: &str = "2.25.4.0";
pub const DEFAULT_KUBELET_VERSION: &str = "v1.34.2";
/// Nodes per UltraServer (trn2u and trn3 join 4 nodes).
pub const ULTRASERVER_NODES: usize = 4;

/// What a simulated fleet looks like.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub prefix: String,
    pub count: usize,
    pub instance_type: String,
    pub dra_driver_version: String,
    pub neuron_driver_version: String,
    pub kubelet_version: String,
}

impl FleetSpec {
    pub fn node_name(&self, index: usize) -> String {
        format!("{}-{index}", self.prefix)
    }
}

fn devices_of(instance_type: &str) -> u32 {
    catalog::lookup(instance_type).and_then(|t| t.devices).unwrap_or(1)
}

/// The Node as a kubelet on that instance would register it (labels, capacity, Ready, kubelet version).
pub fn node(fleet: &FleetSpec, index: usize) -> Node {
    let name = fleet.node_name(index);
    let mut labels = BTreeMap::from([
        (SIMULATED_LABEL.to_string(), fleet.prefix.clone()),
        (INSTANCE_TYPE_LABEL.to_string(), fleet.instance_type.clone()),
        ("kubernetes.io/hostname".to_string(), name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("topology.kubernetes.io/zone".to_string(), "us-east-2a".to_string()),
    ]);
    if catalog::lookup(&fleet.instance_type).is_some_and(|t| t.ultra_server) {
        let server = index / ULTRASERVER_NODES;
        labels.insert("neuron.amazonaws.com/ultraserver-server-id-4".into(), format!("{}-us4-{server}", fleet.prefix));
        labels.insert(
            "neuron.amazonaws.com/ultraserver-server-id-2".into(),
            format!("{}-us2-{}", fleet.prefix, index / 2),
        );
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": format!("aws:///us-east-2a/i-{:017x}", index)},
    }))
    .expect("a valid Node")
}

/// The Node's status as its kubelet reports it.
pub fn node_status(fleet: &FleetSpec) -> serde_json::Value {
    json!({
        "capacity": {"cpu": "192", "memory": "2097152Mi", "pods": "737"},
        "allocatable": {"cpu": "191", "memory": "2000000Mi", "pods": "737"},
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
            "lastHeartbeatTime": crate::logic::status::now().to_string(), "lastTransitionTime": crate::logic::status::now().to_string(),
        }],
        "nodeInfo": {
            "kubeletVersion": fleet.kubelet_version, "kubeProxyVersion": fleet.kubelet_version,
            "containerRuntimeVersion": "containerd://1.7.27", "operatingSystem": "linux", "architecture": "amd64",
            "osImage": "Amazon Linux 2023", "kernelVersion": "6.1.0", "machineID": "sim", "systemUUID": "sim",
            "bootID": "sim",
        },
    })
}

/// The ResourceSlice name for a node.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{NEURON_DRIVER}")
}

fn attr_int(value: i64) -> DeviceAttribute {
    DeviceAttribute { int: Some(value), ..DeviceAttribute::default() }
}
fn attr_string(value: impl Into<String>) -> DeviceAttribute {
    DeviceAttribute { string: Some(value.into()), ..DeviceAttribute::default() }
}
fn attr_version(value: impl Into<String>) -> DeviceAttribute {
    DeviceAttribute { version: Some(value.into()), ..DeviceAttribute::default() }
}

/// PCI address of EFA interface `k` on a node (stable per node).
fn efa_address(node_index: usize, k: u32) -> String {
    format!("0000:{:02x}:{:02x}.0", 0x10 + (node_index % 200), 0x20 + k)
}

/// First 16 hex characters of SHA-256 over the sorted addresses, as the driver computes group ids.
fn group_id(addresses: &mut [String]) -> String {
    addresses.sort();
    let digest = Sha256::digest(addresses.join(",").as_bytes());
    hex::encode(&digest[..8])
}

/// The EFA interface wired to Neuron device `device` (trn1.32xlarge: one per two devices), if the type has EFA.
fn efa_of_device(instance_type: &str, device: u32) -> Option<u32> {
    let interfaces = catalog::lookup(instance_type).map_or(0, |t| t.efa_interfaces);
    (interfaces > 0).then(|| device * interfaces / devices_of(instance_type).max(1))
}

/// The `resource.aws.com/devicegroup{1,4,8,16}_id` attributes of Neuron device `device` and of the EFA interface(s)
/// wired to it: devicegroup1 is the EFA's PCI address, devicegroupN the id of the N-device group `device / N`.
fn device_groups(instance_type: &str, node_index: usize, device: u32) -> Vec<(String, DeviceAttribute)> {
    let count = devices_of(instance_type);
    let address = |d: u32| efa_of_device(instance_type, d).map(|k| efa_address(node_index, k));
    let Some(own) = address(device) else { return Vec::new() };
    let mut groups = vec![("resource.aws.com/devicegroup1_id".to_string(), attr_string(own))];
    for n in [4, 8, 16].into_iter().filter(|n| *n <= count) {
        let group = device / n;
        let mut members: Vec<String> = (group * n..(group + 1) * n).filter_map(address).collect();
        members.dedup();
        groups.push((format!("resource.aws.com/devicegroup{n}_id"), attr_string(group_id(&mut members))));
    }
    groups
}

/// The order devices are listed in a slice: strided (0, 4, 8, 12, 1, 5, …), not by group. A driver promises no
/// order, and with this one an allocator that ignored the `devicegroup` constraint would pick devices from several
/// groups, so the allocation tests prove the constraint is there.
fn publication_order(count: u32) -> impl Iterator<Item = u32> {
    let stride = if count.is_multiple_of(4) { 4 } else { 1 };
    (0..stride).flat_map(move |offset| (offset..count).step_by(stride as usize))
}

/// Every Neuron device of a node, with the attributes the driver publishes for its type.
pub fn devices(fleet: &FleetSpec, node_index: usize) -> Vec<Device> {
    let instance = catalog::lookup(&fleet.instance_type);
    let count = devices_of(&fleet.instance_type);
    let ultra = instance.is_some_and(|t| t.ultra_server);
    let capacity_block = format!("cr-{}-{:04}", fleet.prefix, node_index / ULTRASERVER_NODES);
    let layer = |n: usize, width: usize| format!("nn-{n}-{:04}", node_index / width);

    let mut list: Vec<Device> = publication_order(count)
        .map(|k| {
            let mut attributes = BTreeMap::from([
                ("deviceId".to_string(), attr_int(k as i64)),
                ("instanceType".to_string(), attr_string(&fleet.instance_type)),
                ("neuronDriverVersion".to_string(), attr_string(&fleet.neuron_driver_version)),
                ("draDriverVersion".to_string(), attr_version(&fleet.dra_driver_version)),
                ("resourceType".to_string(), attr_string("neuron_device")),
                ("networkNodeLayer1".to_string(), attr_string(layer(1, 256))),
                ("networkNodeLayer2".to_string(), attr_string(layer(2, 32))),
                ("networkNodeLayer3".to_string(), attr_string(layer(3, 4))),
            ]);
            if !ultra && count > 1 && instance.is_some() {
                attributes.insert("topology_x".into(), attr_int((k / 4) as i64));
                attributes.insert("topology_y".into(), attr_int((k % 4) as i64));
                attributes.insert("topology4_id".into(), attr_int((k / 4) as i64));
                if count >= 8 {
                    attributes.insert("topology8_id".into(), attr_int((k / 8) as i64));
                }
            }
            if ultra {
                attributes.insert("capacityBlockId".into(), attr_string(&capacity_block));
            }
            attributes.extend(device_groups(&fleet.instance_type, node_index, k));
            Device { name: format!("neuron-device-{k}"), attributes: Some(attributes), ..Device::default() }
        })
        .collect();
    if ultra {
        // The entry that stands for the whole node in UltraServer mode.
        let attributes = BTreeMap::from([
            ("instanceType".to_string(), attr_string(&fleet.instance_type)),
            ("neuronDriverVersion".to_string(), attr_string(&fleet.neuron_driver_version)),
            ("draDriverVersion".to_string(), attr_version(&fleet.dra_driver_version)),
            ("resourceType".to_string(), attr_string("neuron_node")),
            ("capacityBlockId".to_string(), attr_string(&capacity_block)),
            ("networkNodeLayer1".to_string(), attr_string(layer(1, 256))),
            ("networkNodeLayer2".to_string(), attr_string(layer(2, 32))),
            ("networkNodeLayer3".to_string(), attr_string(layer(3, 4))),
        ]);
        list.push(Device { name: "neuron-node-0".into(), attributes: Some(attributes), ..Device::default() });
    }
    list
}

/// The node's ResourceSlice, owned by the Node (as the driver's kubelet plugin does) so it goes with it.
pub fn resource_slice(fleet: &FleetSpec, node_index: usize, node_uid: Option<String>) -> ResourceSlice {
    let node = fleet.node_name(node_index);
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(&node)),
            labels: Some(BTreeMap::from([(SIMULATED_LABEL.to_string(), fleet.prefix.clone())])),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.clone(),
                    uid,
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: NEURON_DRIVER.into(),
            node_name: Some(node.clone()),
            pool: ResourcePool { name: node, generation: 1, resource_slice_count: 1 },
            devices: Some(devices(fleet, node_index)),
            ..ResourceSliceSpec::default()
        },
    }
}

/// The node's EFA interfaces as the EFA DRA driver publishes them: one device per interface, carrying the same
/// `devicegroup` ids as the Neuron devices it is wired to, so one `matchAttribute` aligns both. `None` for types
/// without EFA.
pub fn efa_slice(fleet: &FleetSpec, node_index: usize, node_uid: Option<String>) -> Option<ResourceSlice> {
    let interfaces = catalog::lookup(&fleet.instance_type).map_or(0, |t| t.efa_interfaces);
    if interfaces == 0 {
        return None;
    }
    let count = devices_of(&fleet.instance_type);
    // Listed last to first, so an allocator that ignored the group constraint would pick unaligned interfaces.
    let devices = (0..interfaces)
        .rev()
        .map(|k| {
            // The first Neuron device wired to interface k carries the interface's group ids.
            let neuron = (0..count).find(|d| efa_of_device(&fleet.instance_type, *d) == Some(k));
            let address = efa_address(node_index, k);
            // What DRANET publishes for an EFA PCI function (it has no netdev, so no ifName, mac or type).
            let mut attributes = BTreeMap::from([
                (format!("{EFA_DRIVER}/pciAddress"), attr_string(&address)),
                (format!("{EFA_DRIVER}/pciVendor"), attr_string("Amazon.com, Inc.")),
                (format!("{EFA_DRIVER}/pciDevice"), attr_string(EFA_PCI_DEVICE)),
                (format!("{EFA_DRIVER}/pciSubsystem"), attr_string(format!("efa{k}"))),
                (format!("{EFA_DRIVER}/numaNode"), attr_int(i64::from(k * 2 / interfaces))),
                (format!("{EFA_DRIVER}/rdma"), DeviceAttribute { bool: Some(true), ..DeviceAttribute::default() }),
                (format!("{EFA_DRIVER}/rdmaDevice"), attr_string(format!("rdmap{}s{}", 16 + k, 0x20 + k))),
                ("resource.kubernetes.io/pcieRoot".to_string(), attr_string(format!("pci0000:{:02x}", 0x10 + k))),
            ]);
            if let Some(neuron) = neuron {
                attributes.extend(device_groups(&fleet.instance_type, node_index, neuron));
            }
            Device { name: efa_device_name(&address), attributes: Some(attributes), ..Device::default() }
        })
        .collect();
    let mut slice = resource_slice(fleet, node_index, node_uid);
    let node = fleet.node_name(node_index);
    slice.metadata.name = Some(efa_slice_name(&node));
    slice.spec.driver = EFA_DRIVER.into();
    slice.spec.devices = Some(devices);
    Some(slice)
}

/// DRANET names a device after its PCI address, with the characters a device name may not hold replaced.
fn efa_device_name(address: &str) -> String {
    format!("pci-{}", address.replace([':', '.'], "-"))
}

pub fn efa_slice_name(node: &str) -> String {
    format!("{node}-{EFA_DRIVER}")
}

/// The DeviceClass AWS's EFA driver chart installs: the driver's devices whose PCI device is an EFA.
pub fn efa_device_class() -> DeviceClass {
    let expression =
        format!("device.driver == '{EFA_DRIVER}' && device.attributes['{EFA_DRIVER}'].pciDevice == '{EFA_PCI_DEVICE}'");
    DeviceClass {
        metadata: ObjectMeta { name: Some(EFA_DEVICE_CLASS.into()), ..ObjectMeta::default() },
        spec: DeviceClassSpec {
            selectors: Some(vec![DeviceSelector { cel: Some(CELDeviceSelector { expression }) }]),
            ..DeviceClassSpec::default()
        },
    }
}

/// Expected Neuron devices (not node entries) for a type, where known.
pub fn expected_devices(instance_type: &str) -> Option<u32> {
    catalog::lookup(instance_type).and_then(|t: &InstanceType| t.devices)
}

#[cfg(test)]
mod tests;
