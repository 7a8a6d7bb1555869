//! capabilities: what the API server supports beyond the DRA API every supported version serves, found by asking
//! it once, when a config first needs it. A spec that needs what the server lacks is refused before anything is
//! applied.

use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::OnceCell;

use crate::api::NeuronDRAConfigSpec;

#[derive(Default)]
pub struct Capabilities {
    extended_resources: OnceCell<bool>,
}

impl Capabilities {
    /// Why the server cannot serve `spec` (one line naming the field), or `None` when it can.
    pub async fn missing(&self, client: &Client, spec: &NeuronDRAConfigSpec) -> Result<Option<String>, kube::Error> {
        if spec.extended_resource_name.is_some()
            && !*self.extended_resources.get_or_try_init(|| extended_resources(client)).await?
        {
            return Ok(Some(
                "spec.extendedResourceName: this Kubernetes server does not map extended resources to DRA \
                 (DeviceClass extendedResourceName, feature DRAExtendedResource: on by default from 1.36); remove \
                 the field or upgrade the cluster"
                    .into(),
            ));
        }
        Ok(None)
    }
}

/// Whether DeviceClasses keep `extendedResourceName`: a server without the feature accepts the field and drops it,
/// so a dry-run create (nothing is stored) shows which.
async fn extended_resources(client: &Client) -> Result<bool, kube::Error> {
    let probe = DeviceClass {
        metadata: ObjectMeta { generate_name: Some("neurondra-probe-".into()), ..ObjectMeta::default() },
        spec: DeviceClassSpec {
            extended_resource_name: Some("neurondra.io/probe".into()),
            ..DeviceClassSpec::default()
        },
    };
    let params = PostParams { dry_run: true, ..PostParams::default() };
    let created = Api::<DeviceClass>::all(client.clone()).create(&params, &probe).await?;
    let supported = created.spec.extended_resource_name.is_some();
    tracing::info!(supported, "probed extended-resource mapping (DeviceClass extendedResourceName)");
    Ok(supported)
}
