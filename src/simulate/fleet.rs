//! Pure builders of a simulated Trainium node and the ResourceSlice the Neuron DRA driver publishes for it
//! (NEURON.md "What the driver publishes").

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::build::NEURON_DRIVER;
use crate::catalog::{self, InstanceType};

/// Label on every simulated node, so `simulate clear` finds them.
pub const SIMULATED_LABEL: &str = "neurondra.io/simulated";
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
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
            "lastHeartbeatTime": crate::status::now().to_string(), "lastTransitionTime": crate::status::now().to_string(),
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

/// Every Neuron device of a node, with the attributes the driver publishes for its type.
pub fn devices(fleet: &FleetSpec, node_index: usize) -> Vec<Device> {
    let instance = catalog::lookup(&fleet.instance_type);
    let count = devices_of(&fleet.instance_type);
    let efa_interfaces = instance.map_or(0, |t| t.efa_interfaces);
    let efa_of = |device: u32| -> Option<String> {
        (efa_interfaces > 0).then(|| efa_address(node_index, device * efa_interfaces / count.max(1)))
    };
    let ultra = instance.is_some_and(|t| t.ultra_server);
    let capacity_block = format!("cr-{}-{:04}", fleet.prefix, node_index / ULTRASERVER_NODES);
    let layer = |n: usize, width: usize| format!("nn-{n}-{:04}", node_index / width);

    let mut list: Vec<Device> = (0..count)
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
            if let Some(efa) = efa_of(k) {
                attributes.insert("resource.aws.com/devicegroup1_id".into(), attr_string(efa));
                for n in [4, 8, 16].into_iter().filter(|n| *n <= count) {
                    let group = k / n;
                    let mut members: Vec<String> = (group * n..(group + 1) * n).filter_map(efa_of).collect();
                    members.dedup();
                    attributes
                        .insert(format!("resource.aws.com/devicegroup{n}_id"), attr_string(group_id(&mut members)));
                }
            }
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

    fn attr<'a>(device: &'a Device, key: &str) -> &'a DeviceAttribute {
        device.attributes.as_ref().unwrap().get(key).unwrap_or_else(|| panic!("{} lacks {key}", device.name))
    }

    #[test]
    fn trn2_48xlarge_has_sixteen_devices_on_a_4x4_grid_with_efa_groups() {
        let devices = devices(&fleet("trn2.48xlarge"), 0);
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
        let devices = devices(&fleet("trn1.32xlarge"), 0);
        let efa = |d: &Device| attr(d, "resource.aws.com/devicegroup1_id").string.clone();
        assert_eq!(efa(&devices[0]), efa(&devices[1]));
        assert_ne!(efa(&devices[1]), efa(&devices[2]));
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
        let devices = devices(&fleet("trn2u.48xlarge"), 5);
        assert_eq!(devices.len(), 17);
        let entry = devices.last().unwrap();
        assert_eq!(attr(entry, "resourceType").string.as_deref(), Some("neuron_node"));
        assert_eq!(attr(entry, "capacityBlockId").string, attr(&devices[0], "capacityBlockId").string);
        assert!(devices[0].attributes.as_ref().unwrap().get("topology_x").is_none());
        let node = node(&fleet("trn2u.48xlarge"), 5);
        assert_eq!(node.metadata.labels.unwrap()["neuron.amazonaws.com/ultraserver-server-id-4"], "sim-us4-1");
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
