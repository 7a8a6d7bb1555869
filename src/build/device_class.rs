use k8s_openapi::api::resource::v1::{CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector};

use super::shared_meta;
use crate::validate::ValidatedConfig;

/// The DRA driver name the kubelet plugin publishes under.
pub const NEURON_DRIVER: &str = "neuron.aws.com";

/// The DeviceClass that selects every Neuron device; shared by all configs that name it.
pub fn device_class(config: &ValidatedConfig) -> DeviceClass {
    DeviceClass {
        metadata: shared_meta(config, &config.spec.device_class_name),
        spec: DeviceClassSpec {
            selectors: Some(vec![DeviceSelector {
                cel: Some(CELDeviceSelector { expression: format!("device.driver == '{NEURON_DRIVER}'") }),
            }]),
            ..DeviceClassSpec::default()
        },
    }
}
