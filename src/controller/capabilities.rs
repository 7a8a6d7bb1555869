//! capabilities: what the API server supports beyond the DRA API every supported version serves, found by asking
//! it once, when a config first needs it. A spec that needs what the server lacks is refused before anything is
//! applied.

use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::ApiResource;
use tokio::sync::OnceCell;

use crate::api::{NeuronDRAConfigSpec, RemediationEffect};

#[derive(Default)]
pub struct Capabilities {
    extended_resources: OnceCell<bool>,
    informational_taints: OnceCell<bool>,
    /// Whether the EFA driver's DeviceClass exists, and when that was read: installed or removed at any time, so
    /// read again after `EFA_CLASS_TTL` rather than watched.
    efa_class: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

/// How long the answer about the EFA DeviceClass is kept; a config that lacks it is looked at again after this.
pub const EFA_CLASS_TTL: std::time::Duration = std::time::Duration::from_secs(60);

impl Capabilities {
    /// Why the server cannot serve `spec` (one line naming the field), or `None` when it can. `taint_rules` is the
    /// DeviceTaintRule version the server serves, if any.
    pub async fn missing(
        &self,
        client: &Client,
        taint_rules: Option<&ApiResource>,
        spec: &NeuronDRAConfigSpec,
    ) -> Result<Option<String>, kube::Error> {
        if let Some(policy) = &spec.remediation {
            let Some(resource) = taint_rules else {
                return Ok(Some(
                    "spec.remediation: this Kubernetes server serves no DeviceTaintRules (resource.k8s.io; feature \
                     gates DRADeviceTaints and, from 1.35, DRADeviceTaintRules; on by default from 1.37); remove \
                     the field or enable them"
                        .into(),
                ));
            };
            if policy.effect == RemediationEffect::None
                && !*self.informational_taints.get_or_try_init(|| informational_taints(client, resource)).await?
            {
                return Ok(Some(
                    "spec.remediation.effect: this Kubernetes server does not accept taints with effect None \
                     (informational taints arrived in 1.35); use NoSchedule or NoExecute, or upgrade the cluster"
                        .into(),
                ));
            }
        }
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

impl Capabilities {
    /// Whether the DeviceClass `efa: true` templates claim EFA interfaces from (AWS's EFA DRA driver installs it)
    /// exists; read at most once per `EFA_CLASS_TTL`.
    pub async fn efa_class(&self, client: &Client) -> Result<bool, kube::Error> {
        let cached = *self.efa_class.lock().expect("not poisoned");
        if let Some((_, exists)) = cached.filter(|(read, _)| read.elapsed() < EFA_CLASS_TTL) {
            return Ok(exists);
        }
        let class = crate::logic::build::EFA_DEVICE_CLASS;
        let exists = match Api::<DeviceClass>::all(client.clone()).get(class).await {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(error) => return Err(error),
        };
        *self.efa_class.lock().expect("not poisoned") = Some((std::time::Instant::now(), exists));
        Ok(exists)
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

/// Whether DeviceTaintRules may carry `effect: None`: a server without it refuses the value (422), so a dry-run
/// create (nothing is stored) shows which.
async fn informational_taints(client: &Client, resource: &ApiResource) -> Result<bool, kube::Error> {
    let probe = serde_json::json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"generateName": "neurondra-probe-"},
        "spec": {"deviceSelector": {"driver": "probe.neurondra.io"}, "taint": {"key": "neurondra.io/probe", "effect": "None"}},
    });
    let probe: kube::core::DynamicObject = serde_json::from_value(probe).expect("a valid object");
    let params = PostParams { dry_run: true, ..PostParams::default() };
    let supported =
        match Api::<kube::core::DynamicObject>::all_with(client.clone(), resource).create(&params, &probe).await {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 422 => false,
            Err(error) => return Err(error),
        };
    tracing::info!(supported, "probed informational device taints (effect None)");
    Ok(supported)
}
