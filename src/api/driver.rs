//! `spec.driver`: the kubelet-plugin DaemonSet.

use super::names::{DNS_LABEL, IMAGE_REF};
use super::rollout::RolloutPolicy;

pub const DEFAULT_DRIVER_IMAGE: &str = "public.ecr.aws/neuron/neuron-dra-driver:1.1.0";
pub const DEFAULT_DRIVER_NAMESPACE: &str = "neuron-dra-driver";

fn default_driver_image() -> String {
    DEFAULT_DRIVER_IMAGE.to_string()
}
fn default_driver_namespace() -> String {
    DEFAULT_DRIVER_NAMESPACE.to_string()
}

/// Where kubelets keep their root directory unless told otherwise.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

fn default_kubelet_dir() -> String {
    DEFAULT_KUBELET_DIR.to_string()
}

/// `driver.kubeletDir`: absolute, no empty, `.` or `..` component, no trailing slash (the DaemonSet's host paths and
/// the fences compare it as a string, so one directory has one spelling).
const KUBELET_DIR_RULE: &str = "self.matches('^(/[^/]+)+$') && !self.matches('(^|/)[.][.]?(/|$)')";
const KUBELET_DIR_MESSAGE: &str =
    "must be an absolute directory path without a trailing slash, '//', '.' or '..' (e.g. /var/lib/kubelet)";

/// `KUBELET_DIR_RULE`, for `render` (offline): the reason when `dir` breaks it.
pub fn kubelet_dir_problem(dir: &str) -> Option<&'static str> {
    let components: Vec<&str> = dir.split('/').collect();
    let ok = components.len() >= 2
        && components[0].is_empty()
        && components[1..].iter().all(|c| !c.is_empty() && *c != "." && *c != "..");
    (!ok).then_some(KUBELET_DIR_MESSAGE)
}
use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

/// The kubelet-plugin DaemonSet. Lists here are added to AWS's defaults; scalar fields replace them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.rollout) || !has(self.updateStrategy)").message("must not be set with updateStrategy (the operator steps the rollout itself)").field_path(".rollout"))]
pub struct DriverSpec {
    /// Kubelet plugin image, `public.ecr.aws/neuron/neuron-dra-driver:<semver>` or a mirror of it. The tag is
    /// compared with the `draDriverVersion` the nodes publish.
    #[serde(default = "default_driver_image")]
    #[schemars(default = "default_driver_image")]
    #[validate(length(min = 1, max = 512), regex(path = *IMAGE_REF))]
    pub image: String,

    /// When the kubelet pulls the image.
    #[serde(default)]
    #[schemars(default)]
    pub image_pull_policy: ImagePullPolicy,

    /// Namespace of the plugin DaemonSet and its ServiceAccount; created if missing.
    #[serde(default = "default_driver_namespace")]
    #[schemars(default = "default_driver_namespace")]
    #[validate(length(min = 1, max = 63), regex(path = *DNS_LABEL))]
    pub namespace: String,

    /// The kubelet's root directory on the nodes (its `--root-dir`): the plugin registers in `plugins_registry` and
    /// serves in `plugins` below it. `/var/lib/kubelet` unless the distribution moves it (k0s:
    /// `/var/lib/k0s/kubelet`, MicroK8s: `/var/snap/microk8s/common/var/lib/kubelet`). The install's fences allow
    /// only the directories they list (`kubeletDirs`).
    #[serde(default = "default_kubelet_dir")]
    #[schemars(default = "default_kubelet_dir")]
    #[x_kube(validation = Rule::new(KUBELET_DIR_RULE).message(KUBELET_DIR_MESSAGE))]
    #[validate(length(min = 2, max = 256))]
    pub kubelet_dir: String,

    /// Secrets for pulling the image from a private mirror.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// PriorityClass of the plugin pods (for example `system-node-critical`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Tolerations added to the defaults (CriticalAddonsOnly, aws.amazon.com/neuron, SageMaker node health).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Container resources; replaces the default requests 10m/128Mi and limits 20m/256Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Environment variables added to the plugin container; a name that matches a default replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Rolling-update settings; default maxUnavailable 0, maxSurge 1 (seamless plugin upgrade). Excludes `rollout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,

    /// A plugin rollout in checked steps, driven by the operator instead of the DaemonSet controller (absent: the
    /// DaemonSet controller rolls out by `updateStrategy`; `{}` takes every default). The DaemonSet gets
    /// `updateStrategy: OnDelete`; the operator moves nodes to a new plugin template by deleting their old plugin
    /// pods, first `canary` nodes, then `maxUnavailable` nodes per step. After each step every moved node must run a
    /// Ready plugin pod of the new template and publish its ResourceSlice again, from the new version, with at least
    /// as many Neuron devices as before, within `timeout`. Otherwise the rollout halts (DriverReady=False, reason
    /// RolloutHalted) and the other nodes keep their version until the plugin's template changes again: a fixed
    /// image resumes, the old image rolls back, both in the same steps. Excludes `updateStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPolicy>,
}

impl Default for DriverSpec {
    fn default() -> Self {
        Self {
            image: default_driver_image(),
            image_pull_policy: ImagePullPolicy::default(),
            namespace: default_driver_namespace(),
            kubelet_dir: default_kubelet_dir(),
            image_pull_secrets: Vec::new(),
            priority_class_name: None,
            tolerations: Vec::new(),
            resources: None,
            env: Vec::new(),
            update_strategy: None,
            rollout: None,
        }
    }
}

/// Image pull policy of the plugin container.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    #[default]
    IfNotPresent,
    Never,
}

impl ImagePullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// Rolling-update settings of the plugin DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateStrategy {
    /// Nodes whose plugin may be unavailable during an update (count or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Nodes that may run an old and a new plugin pod at once during an update (count or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// The CEL rules of the policy and of `driver`, for `render` (field path, reason).
pub fn rollout_problems(driver: &DriverSpec) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let Some(policy) = &driver.rollout else { return found };
    let path = "spec.driver.rollout";
    if driver.update_strategy.is_some() {
        found.push((
            path.to_string(),
            "must not be set with updateStrategy (the operator steps the rollout itself)".into(),
        ));
    }
    if !(1..=100).contains(&policy.canary) {
        found.push((format!("{path}.canary"), "must be between 1 and 100".into()));
    }
    let step_ok = match &policy.max_unavailable {
        IntOrString::Int(count) => (1..=100).contains(count),
        IntOrString::String(text) => {
            text.strip_suffix('%').and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| (1..=100).contains(&p))
                && !text.starts_with('0')
        }
    };
    if !step_ok {
        found.push((
            format!("{path}.maxUnavailable"),
            "must be a count from 1 to 100 or a percentage from 1% to 100%".into(),
        ));
    }
    if policy.timeout_seconds().is_none() {
        found.push((format!("{path}.timeout"), "must be a duration from 10s to 24h such as 90s, 5m or 1h30m".into()));
    }
    if policy.soak_seconds().is_none() {
        found.push((format!("{path}.soak"), "must be a duration from 0s to 24h such as 30s, 2m or 1h".into()));
    }
    found
}
