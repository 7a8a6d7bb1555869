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

pub use crate::logic::build::EFA_DRIVER;
use crate::logic::build::{EFA_DEVICE_CLASS, EFA_PCI_DEVICE, NEURON_DRIVER};
use crate::logic::catalog::{self, InstanceType};

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
mod tests {
    use super::*;

    fn fleet(instance_type: &str) -> FleetSpec {
        FleetSpec {
            prefix: "sim".into(),
            count: 4,
            instance_type: instance_type.into(),
            dra_driver_version: DEFAULT_DRA_DRIVER_VERSION.into(),
            neuron_driver_version: DEFAULT_NEURON_DRIVER_VERSION.into(),
            kubelet_version: DEFAULT_KUBELET_VERSION.into(),
        }
    }

    /// The node's devices by deviceId (node entries last), whatever order the slice lists them in.
    fn by_id(mut devices: Vec<Device>) -> Vec<Device> {
        devices.sort_by_key(|d| d.attributes.as_ref().and_then(|a| a.get("deviceId")?.int).unwrap_or(i64::MAX));
        devices
    }

    fn attr<'a>(device: &'a Device, key: &str) -> &'a DeviceAttribute {
        device.attributes.as_ref().unwrap().get(key).unwrap_or_else(|| panic!("{} lacks {key}", device.name))
    }

    #[test]
    fn trn2_48xlarge_has_sixteen_devices_on_a_4x4_grid_with_efa_groups() {
        let devices = by_id(devices(&fleet("trn2.48xlarge"), 0));
        assert_eq!(devices.len(), 16);
        let d5 = &devices[5];
        assert_eq!(d5.name, "neuron-device-5");
        assert_eq!(attr(d5, "deviceId").int, Some(5));
        assert_eq!(attr(d5, "topology_x").int, Some(1));
        assert_eq!(attr(d5, "topology_y").int, Some(1));
        assert_eq!(attr(d5, "topology8_id").int, Some(0));
        assert_eq!(attr(d5, "draDriverVersion").version.as_deref(), Some("1.1.0"));
        assert_eq!(attr(d5, "resourceType").string.as_deref(), Some("neuron_device"));
        // Devices 4..8 share devicegroup4_id; 0..8 share devicegroup8_id; each has its own EFA.
        let g4 = |d: &Device| attr(d, "resource.aws.com/devicegroup4_id").string.clone();
        assert_eq!(g4(&devices[4]), g4(&devices[7]));
        assert_ne!(g4(&devices[3]), g4(&devices[4]));
        assert_eq!(g4(&devices[4]).unwrap().len(), 16);
        let g8 = |d: &Device| attr(d, "resource.aws.com/devicegroup8_id").string.clone();
        assert_eq!(g8(&devices[0]), g8(&devices[7]));
        assert_ne!(g8(&devices[7]), g8(&devices[8]));
        let efa = |d: &Device| attr(d, "resource.aws.com/devicegroup1_id").string.clone();
        assert_ne!(efa(&devices[0]), efa(&devices[1]));
        assert!(d5.attributes.as_ref().unwrap().get("capacityBlockId").is_none());
    }

    #[test]
    fn trn1_32xlarge_pairs_two_devices_per_efa() {
        let devices = by_id(devices(&fleet("trn1.32xlarge"), 0));
        let efa = |d: &Device| attr(d, "resource.aws.com/devicegroup1_id").string.clone();
        assert_eq!(efa(&devices[0]), efa(&devices[1]));
        assert_ne!(efa(&devices[1]), efa(&devices[2]));
    }

    #[test]
    fn devices_are_not_listed_group_by_group() {
        let listed: Vec<String> = devices(&fleet("trn2.48xlarge"), 0).iter().take(4).map(|d| d.name.clone()).collect();
        assert_eq!(listed, ["neuron-device-0", "neuron-device-4", "neuron-device-8", "neuron-device-12"]);
        assert_eq!(publication_order(1).collect::<Vec<_>>(), [0]);
        assert_eq!(publication_order(16).count(), 16);
    }

    #[test]
    fn trn1_2xlarge_has_one_device_without_topology_or_efa() {
        let devices = devices(&fleet("trn1.2xlarge"), 0);
        assert_eq!(devices.len(), 1);
        let keys: Vec<&String> = devices[0].attributes.as_ref().unwrap().keys().collect();
        assert!(!keys.iter().any(|k| k.starts_with("topology") || k.starts_with("resource.aws.com/")), "{keys:?}");
    }

    #[test]
    fn trn2u_adds_a_neuron_node_entry_and_capacity_blocks() {
        let devices = by_id(devices(&fleet("trn2u.48xlarge"), 5));
        assert_eq!(devices.len(), 17);
        let entry = devices.last().unwrap();
        assert_eq!(attr(entry, "resourceType").string.as_deref(), Some("neuron_node"));
        assert_eq!(attr(entry, "capacityBlockId").string, attr(&devices[0], "capacityBlockId").string);
        assert!(devices[0].attributes.as_ref().unwrap().get("topology_x").is_none());
        let node = node(&fleet("trn2u.48xlarge"), 5);
        assert_eq!(node.metadata.labels.unwrap()["neuron.amazonaws.com/ultraserver-server-id-4"], "sim-us4-1");
    }

    fn string<'a>(device: &'a Device, key: &str) -> &'a str {
        attr(device, key).string.as_deref().unwrap_or_else(|| panic!("{key} is not a string"))
    }

    /// Every EFA interface carries the group ids of the Neuron devices wired to it.
    fn assert_efa_aligned(instance_type: &str, interfaces: usize, devices_per_efa: usize) {
        let fleet = fleet(instance_type);
        let neurons = by_id(devices(&fleet, 3));
        let slice = efa_slice(&fleet, 3, None).expect("an EFA slice");
        assert_eq!(slice.spec.driver, "dra.net");
        assert_eq!(slice.spec.pool.name, "sim-3");
        assert_eq!(slice.metadata.name.as_deref(), Some("sim-3-dra.net"));
        let mut efas = slice.spec.devices.unwrap();
        efas.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(efas.len(), interfaces);
        for (d, neuron) in neurons.iter().enumerate().filter(|(_, n)| n.name.starts_with("neuron-device-")) {
            let efa = &efas[d / devices_per_efa];
            for key in ["1", "4", "8", "16"].map(|n| format!("resource.aws.com/devicegroup{n}_id")) {
                assert_eq!(string(neuron, &key), string(efa, &key), "{} vs {} on {key}", neuron.name, efa.name);
            }
            assert_eq!(string(efa, "resource.aws.com/devicegroup1_id"), string(efa, "dra.net/pciAddress"));
        }
        let names: std::collections::BTreeSet<&String> = efas.iter().map(|e| &e.name).collect();
        assert_eq!(names.len(), interfaces, "device names are unique");
    }

    #[test]
    fn trn2_efa_interfaces_pair_one_to_one_with_devices() {
        assert_efa_aligned("trn2.48xlarge", 16, 1);
        assert_efa_aligned("trn2u.48xlarge", 16, 1);
        assert_efa_aligned("trn1n.32xlarge", 16, 1);
    }

    #[test]
    fn trn1_efa_interfaces_serve_two_devices_each() {
        assert_efa_aligned("trn1.32xlarge", 8, 2);
    }

    #[test]
    fn types_without_efa_publish_no_efa_slice() {
        assert!(efa_slice(&fleet("trn1.2xlarge"), 0, None).is_none());
        assert!(efa_slice(&fleet("trn2.3xlarge"), 0, None).is_none());
    }

    #[test]
    fn the_efa_class_selects_efa_devices_of_the_efa_driver() {
        let class = efa_device_class();
        assert_eq!(class.metadata.name.as_deref(), Some("efa.networking.k8s.aws"));
        let selectors = class.spec.selectors.unwrap();
        let expression = &selectors[0].cel.as_ref().unwrap().expression;
        assert!(expression.contains("device.driver == 'dra.net'") && expression.contains("pciDevice"), "{expression}");
    }

    #[test]
    fn the_slice_is_one_pool_named_after_the_node() {
        let slice = resource_slice(&fleet("trn2.48xlarge"), 2, Some("uid".into()));
        assert_eq!(slice.spec.driver, "neuron.aws.com");
        assert_eq!(slice.spec.node_name.as_deref(), Some("sim-2"));
        assert_eq!(slice.spec.pool.name, "sim-2");
        assert_eq!(slice.spec.pool.resource_slice_count, 1);
        assert_eq!(slice.metadata.owner_references.unwrap()[0].kind, "Node");
    }
}
