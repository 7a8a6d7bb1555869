//! The remediation policy: `spec.remediation` and what `status.remediation` reports. Doc comments become
//! `kubectl explain`; the CEL rules here are repeated in `remediation_problems` for offline `render`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rollout::{MAX_DURATION, TIMEOUT_PATTERN, parse_duration};

pub const DEFAULT_MAX_NODES: &str = "10%";
/// Largest `maxNodes` count.
pub const MAX_NODES_LIMIT: i32 = 10_000;

fn default_max_nodes() -> IntOrString {
    IntOrString::String(DEFAULT_MAX_NODES.into())
}

pub const DEFAULT_PROBLEM_FOR: &str = "1m";
pub const DEFAULT_CLEAR_FOR: &str = "5m";

fn default_problem_for() -> String {
    DEFAULT_PROBLEM_FOR.into()
}

fn default_clear_for() -> String {
    DEFAULT_CLEAR_FOR.into()
}

/// The `remediation` policy (documented on the field, which is what `kubectl explain` shows).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemediationPolicy {
    /// The taint's effect: `NoSchedule` (the default; no new claims get the node's devices, running pods stay),
    /// `NoExecute` (also evicts the pods whose claims hold them) or `None` (a preview: the devices stay usable and
    /// the status lists what NoExecute would evict; Kubernetes 1.35 or newer).
    #[serde(default)]
    #[schemars(default)]
    pub effect: RemediationEffect,

    /// Most nodes remediated at once: a count (1 to 10000) or a percentage of the selected nodes ("1%" to
    /// "100%", rounded up, at least 1); default "10%". Nodes beyond it are listed as held back.
    #[serde(default = "default_max_nodes")]
    // Not nullable: a null is pruned and defaulted by the server, rather than stored where it cannot be parsed.
    #[schemars(default = "default_max_nodes", extend("nullable" = false))]
    #[x_kube(validation = Rule::new("type(self) == int ? (self >= 1 && self <= 10000) : self.matches('^(100|[1-9][0-9]?)%$')").message("must be a count from 1 to 10000 or a percentage from 1% to 100%"))]
    pub max_nodes: IntOrString,

    /// How long a node must report its Neuron hardware problem before its devices are tainted, as a duration such
    /// as `30s`, `1m` or `5m`, from 0s to 24h; default `1m`. A condition that flaps for less taints nothing.
    #[serde(default = "default_problem_for")]
    #[schemars(default = "default_problem_for", length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new(format!("self.matches('{TIMEOUT_PATTERN}') && duration(self) <= duration('24h')")).message("must be a duration from 0s to 24h such as 30s, 1m or 5m"))]
    pub problem_for: String,

    /// How long a remediated node's condition must stay clear before its rule is deleted, as a duration from 0s to
    /// 24h; default `5m`. A node that recovers and fails again within it keeps its taint throughout.
    #[serde(default = "default_clear_for")]
    #[schemars(default = "default_clear_for", length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new(format!("self.matches('{TIMEOUT_PATTERN}') && duration(self) <= duration('24h')")).message("must be a duration from 0s to 24h such as 1m, 5m or 1h"))]
    pub clear_for: String,
}

impl Default for RemediationPolicy {
    fn default() -> Self {
        Self {
            effect: RemediationEffect::default(),
            max_nodes: default_max_nodes(),
            problem_for: default_problem_for(),
            clear_for: default_clear_for(),
        }
    }
}

impl RemediationPolicy {
    /// `problemFor` in seconds, or None when it is not a duration from 0s to 24h.
    pub fn problem_seconds(&self) -> Option<u64> {
        parse_duration(&self.problem_for).filter(|s| *s <= MAX_DURATION)
    }

    /// `clearFor` in seconds, or None when it is not a duration from 0s to 24h.
    pub fn clear_seconds(&self) -> Option<u64> {
        parse_duration(&self.clear_for).filter(|s| *s <= MAX_DURATION)
    }

    /// The budget in nodes for `selected` selected nodes: at least 1 (while any node is selected).
    pub fn budget(&self, selected: usize) -> usize {
        let budget = match &self.max_nodes {
            IntOrString::Int(count) => usize::try_from(*count).unwrap_or(1),
            IntOrString::String(text) => {
                let percent: usize = text.trim_end_matches('%').parse().unwrap_or(10);
                (selected * percent).div_ceil(100)
            }
        };
        budget.max(1)
    }
}

/// What the DeviceTaintRule's taint does to a remediated node's devices.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum RemediationEffect {
    #[default]
    NoSchedule,
    NoExecute,
    None,
}

impl RemediationEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
            Self::None => "None",
        }
    }
}

/// The CEL rule of the policy, for `render` (field path, reason).
pub fn remediation_problems(policy: Option<&RemediationPolicy>) -> Vec<(String, String)> {
    let Some(policy) = policy else { return Vec::new() };
    let ok = match &policy.max_nodes {
        IntOrString::Int(count) => (1..=MAX_NODES_LIMIT).contains(count),
        IntOrString::String(text) => text
            .strip_suffix('%')
            .filter(|n| !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| (1..=100).contains(&n)),
    };
    let mut found = Vec::new();
    if !ok {
        found.push((
            "spec.remediation.maxNodes".into(),
            "must be a count from 1 to 10000 or a percentage from 1% to 100%".into(),
        ));
    }
    if policy.problem_seconds().is_none() {
        found.push((
            "spec.remediation.problemFor".into(),
            "must be a duration from 0s to 24h such as 30s, 1m or 5m".into(),
        ));
    }
    if policy.clear_seconds().is_none() {
        found.push((
            "spec.remediation.clearFor".into(),
            "must be a duration from 0s to 24h such as 1m, 5m or 1h".into(),
        ));
    }
    found
}

/// What the remediation policy does now.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStatus {
    /// The effect of the operator's taints.
    pub effect: String,
    /// The budget in nodes (`maxNodes` over the selected nodes).
    pub max_nodes: i64,
    /// Selected nodes that report a Neuron hardware problem.
    pub failing_nodes: i64,
    /// Nodes whose devices the operator taints now.
    pub remediated: i64,
    /// Failing nodes left untainted because the budget is spent.
    pub held_back: i64,
    /// Failing nodes whose problem has not lasted `problemFor` yet.
    #[serde(default)]
    pub waiting: i64,
    /// The remediated nodes (bounded; oldest problem first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remediated_nodes: Vec<RemediatedNode>,
    /// The held-back nodes (bounded; the next to be remediated first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back_nodes: Vec<RemediatedNode>,
    /// The waiting nodes (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_nodes: Vec<RemediatedNode>,
    /// Remediated nodes whose problem cleared less than `clearFor` ago: they keep their rule until then (bounded;
    /// counted in `remediated`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clearing_nodes: Vec<String>,
}

/// One failing node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediatedNode {
    pub node: String,
    /// The node condition that reports the problem: `NeuronHealth` or `AcceleratedHardwareReady`.
    pub condition: String,
    /// That condition's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When the condition last changed (the problem's start, as the node reports it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When the operator first observed the problem: the budget's order (the node's own `since` could be forged by
    /// whoever writes its conditions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<Time>,
    /// The DeviceTaintRule that taints its devices (remediated nodes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}
