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
