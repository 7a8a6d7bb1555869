use k8s_openapi::api::resource::v1::{CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector};

use super::shared_meta;
use crate::logic::validate::ValidatedConfig;

/// The DRA driver name the kubelet plugin publishes under.
pub const NEURON_DRIVER: &str = "neuron.aws.com";

/// The DeviceClass that selects every Neuron device; shared by all configs that name it.
pub fn device_class(config: &ValidatedConfig) -> DeviceClass {
    DeviceClass {
        metadata: shared_meta(config, &config.spec.device_class_name),
        spec: DeviceClassSpec { selectors: Some(selectors(&[])), ..DeviceClassSpec::default() },
    }
}

/// With `extendedResourceName`: the DeviceClass `devices.<deviceClassName>` that serves that extended resource. It
/// selects devices only: a pod asking for 4 `aws.amazon.com/neuron` means 4 Neuron devices, never an UltraServer
/// node entry (which the shared class also matches).
pub fn extended_resource_class(config: &ValidatedConfig) -> Option<DeviceClass> {
    let resource = config.spec.extended_resource_name.clone()?;
    Some(DeviceClass {
        metadata: shared_meta(config, &format!("devices.{}", config.spec.device_class_name)),
        spec: DeviceClassSpec {
            selectors: Some(selectors(&[format!(
                "device.attributes['{NEURON_DRIVER}'].resourceType == 'neuron_device'"
            )])),
            extended_resource_name: Some(resource),
            ..DeviceClassSpec::default()
        },
    })
}

fn selectors(extra: &[String]) -> Vec<DeviceSelector> {
    std::iter::once(format!("device.driver == '{NEURON_DRIVER}'"))
        .chain(extra.iter().cloned())
        .map(|expression| DeviceSelector { cel: Some(CELDeviceSelector { expression }) })
        .collect()
}
