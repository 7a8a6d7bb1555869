//! capabilities: what the API server supports beyond the DRA API every supported version serves, found by asking
//! it once, when a config first needs it, and what no cache holds (the plugin's fences). One pass asks it all before
//! planning (`probe`); the plan refuses a spec that needs what the server lacks, so nothing is applied.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::ApiResource;
use tokio::sync::{Mutex, OnceCell};

use super::pure::snapshot::Probes;
use crate::api::{NeuronDRAConfigSpec, RemediationEffect};
use crate::logic::desired::{Allocator, VERSION_RECHECK};
use crate::logic::fence::{self, Allowed};
use crate::logic::validate::ValidatedConfig;

#[derive(Default)]
pub struct Capabilities {
    extended_resources: OnceCell<bool>,
    informational_taints: OnceCell<bool>,
    /// The server's allocator as read from its version, and when.
    allocator: Mutex<Option<(std::time::Instant, Allocator)>>,
    /// A judgement that is never read again (the reconcile tests' world, which has no admission objects).
    fixed_fence: Option<Result<Allowed, String>>,
    /// An allocator that is never read again (the reconcile tests' world, which serves no `/version`).
    fixed_allocator: Option<Allocator>,
}

impl Capabilities {
    /// Everything a pass asks the server before planning: the fences (on every pass), and for a spec that
    /// validates (`validated`), what it needs beyond the base API (asked once).
    pub async fn probe(
        &self,
        client: &Client,
        taint_rules: Option<&ApiResource>,
        validated: Option<&ValidatedConfig>,
    ) -> Result<Probes, kube::Error> {
        let fence = self.fence(client).await?;
        let Some(validated) = validated else {
            // A spec that does not validate is refused before the server's answers matter: nothing more is asked.
            return Ok(Probes { fence, unsupported: None, allocator: Allocator::default() });
        };
        let unsupported = self.missing(client, taint_rules, &validated.spec).await?;
        let allocator = self.allocator(client).await?;
        Ok(Probes { fence, unsupported, allocator })
    }

    /// The server's allocator, from its `/version` (read again after `VERSION_RECHECK`). A minor this build cannot
    /// read is taken for the older allocator, whose template form every supported server allocates.
    async fn allocator(&self, client: &Client) -> Result<Allocator, kube::Error> {
        if let Some(fixed) = self.fixed_allocator {
            return Ok(fixed);
        }
        let mut held = self.allocator.lock().await;
        if let Some((read, allocator)) = *held
            && read.elapsed() < VERSION_RECHECK
        {
            return Ok(allocator);
        }
        let version = client.apiserver_version().await?;
        let allocator = Allocator::of_version(&version.minor).unwrap_or_default();
        *held = Some((std::time::Instant::now(), allocator));
        Ok(allocator)
    }

    /// Why the server cannot serve `spec` (one line naming the field), or `None` when it can. `taint_rules` is the
    /// DeviceTaintRule version the server serves, if any.
    async fn missing(
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
    /// Capabilities whose fences are judged once and for all, `verdict`, on a server whose scheduler is `allocator`.
    #[cfg(test)]
    pub fn fixed(verdict: Result<Allowed, String>, allocator: Allocator) -> Self {
        Capabilities { fixed_fence: Some(verdict), fixed_allocator: Some(allocator), ..Capabilities::default() }
    }

    /// Whether the kubelet plugin's fences are in place as shipped (`logic::fence`), and then what the install
    /// allows a plugin; read by name on every pass, since a fence is only as good as the moment it is checked. A
    /// fence the operator may not read counts as missing. The GETs go one at a time: where API Priority and Fairness
    /// gives the operator a level that runs one request at a time, GETs sent at once are answered 429 beyond what
    /// the client's few retries absorb, and every pass would fail before it plans.
    async fn fence(&self, client: &Client) -> Result<Result<Allowed, String>, kube::Error> {
        if let Some(fixed) = &self.fixed_fence {
            return Ok(fixed.clone());
        }
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
        let mut found = Vec::new();
        for name in fence::names() {
            let policy = read(&policies, &name).await?;
            let binding = read(&bindings, &name).await?;
            found.push(fence::Found { policy, binding });
        }
        let verdict = fence::judge(&found);
        if let Err(problem) = &verdict {
            tracing::warn!(%problem, "the kubelet plugin's fence is not in place");
        }
        Ok(verdict)
    }
}

/// An object as JSON, None when it does not exist (or the operator may not read it: either way it cannot vouch for
/// it).
async fn read<K>(api: &Api<K>, name: &str) -> Result<Option<serde_json::Value>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.get(name).await {
        Ok(object) => Ok(Some(serde_json::to_value(object).expect("k8s objects serialize"))),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => Ok(None),
        Err(error) => Err(error),
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
