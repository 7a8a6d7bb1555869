use k8s_openapi::api::resource::v1::{CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector};

use super::meta::shared_meta;
use crate::logic::validate::ValidatedConfig;

/// The DRA driver name the kubelet plugin publishes under.
pub const NEURON_DRIVER: &str = "neuron.aws.com";

/// The prefix of the DeviceClass of UltraServer node entries: `ultraserver-nodes.<deviceClassName>`.
pub const ULTRA_SERVER_NODES_PREFIX: &str = "ultraserver-nodes.";

/// The resource type of a Neuron device, and of the entry that stands for a whole UltraServer node.
pub(super) const NEURON_DEVICE: &str = "neuron_device";
pub(super) const NEURON_NODE: &str = "neuron_node";

/// The DeviceClass that selects every Neuron device, and never an UltraServer node entry: a node entry holds a whole
/// node, and Kubernetes' quota would count it as one device of this class (docs/teams.md). Shared by all configs
/// that name it.
pub fn device_class(config: &ValidatedConfig) -> DeviceClass {
    DeviceClass {
        metadata: shared_meta(config, &config.spec.device_class_name),
        spec: DeviceClassSpec { selectors: Some(selectors(NEURON_DEVICE)), ..DeviceClassSpec::default() },
    }
}

/// The name of the DeviceClass of UltraServer node entries for the config's class.
pub fn ultra_server_node_class_name(device_class: &str) -> String {
    format!("{ULTRA_SERVER_NODES_PREFIX}{device_class}")
}

/// The DeviceClass `ultraserver-nodes.<deviceClassName>` that selects UltraServer node entries only
/// (`resourceType == 'neuron_node'`). Claims of node entries name it, so that a budget counts them on a quota key of
/// their own (`ultraServerNodes`), each node entry charged as its node's devices.
pub fn ultra_server_node_class(config: &ValidatedConfig) -> DeviceClass {
    DeviceClass {
        metadata: shared_meta(config, &ultra_server_node_class_name(&config.spec.device_class_name)),
        spec: DeviceClassSpec { selectors: Some(selectors(NEURON_NODE)), ..DeviceClassSpec::default() },
    }
}

/// With `extendedResourceName`: the DeviceClass `devices.<deviceClassName>` that serves that extended resource. It
/// selects devices only, like the config's class: a pod asking for 4 `aws.amazon.com/neuron` means 4 Neuron devices,
/// never an UltraServer node entry.
pub fn extended_resource_class(config: &ValidatedConfig) -> Option<DeviceClass> {
    let resource = config.spec.extended_resource_name.clone()?;
    Some(DeviceClass {
        metadata: shared_meta(config, &format!("devices.{}", config.spec.device_class_name)),
        spec: DeviceClassSpec {
            selectors: Some(selectors(NEURON_DEVICE)),
            extended_resource_name: Some(resource),
            ..DeviceClassSpec::default()
        },
    })
}

/// The driver's devices of one resource type, as one CEL expression. The driver test comes first: `&&` stops at a
/// false side, so other drivers' devices, which lack the attribute, never reach the second. One expression rather
/// than two selectors: the scheduler converts the device and runs a CEL program per selector and per candidate
/// device, so two selectors cost twice as much for the same answer (docs/decisions.md, "The DeviceClass's
/// selectors are one expression"). The templates rely on it: a request of this class selects no `resourceType`.
fn selectors(resource_type: &str) -> Vec<DeviceSelector> {
    let expression = format!(
        "device.driver == '{NEURON_DRIVER}' && device.attributes['{NEURON_DRIVER}'].resourceType == '{resource_type}'"
    );
    vec![DeviceSelector { cel: Some(CELDeviceSelector { expression }) }]
}
