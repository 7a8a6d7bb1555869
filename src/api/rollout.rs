//! The stepped plugin rollout: the `driver.rollout` policy and what `status.driver` says about versions and steps.
//! Doc comments become `kubectl explain`; the CEL rules here are repeated in `rollout_problems` (`driver.rs`, which holds the policy) for offline `render`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::issue::NodeIssue;

/// Most nodes one step may move: each is listed in `status.driver.rollout.stepNodes`, so the status stays small.
pub const MAX_STEP_NODES: usize = 100;
pub const DEFAULT_CANARY: u32 = 1;
pub const DEFAULT_MAX_UNAVAILABLE: &str = "10%";
pub const DEFAULT_TIMEOUT: &str = "5m";
pub const DEFAULT_SOAK: &str = "2m";
/// Shortest and longest step timeout, in seconds.
const TIMEOUT_RANGE: (u64, u64) = (10, 24 * 3600);
/// The longest duration any field takes (24h).
pub(crate) const MAX_DURATION: u64 = 24 * 3600;
/// The duration syntax of every duration field (`1h30m`, `90s`), for CEL; `parse_duration` reads it.
pub(crate) const TIMEOUT_PATTERN: &str = r"^([0-9]{1,3}h)?([0-9]{1,5}m)?([0-9]{1,6}s)?$";

fn default_canary() -> u32 {
    DEFAULT_CANARY
}
fn default_max_unavailable() -> IntOrString {
    IntOrString::String(DEFAULT_MAX_UNAVAILABLE.into())
}
fn default_timeout() -> String {
    DEFAULT_TIMEOUT.into()
}
fn default_soak() -> String {
    DEFAULT_SOAK.into()
}

/// The `driver.rollout` policy (documented on the field, which is what `kubectl explain` shows).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutPolicy {
    /// Nodes in the first step (the canary), 1 to 100; default 1.
    #[serde(default = "default_canary")]
    #[schemars(default = "default_canary", range(min = 1, max = 100))]
    pub canary: u32,

    /// Nodes moved together in each step after the canary: a count (1 to 100) or a percentage of the config's
    /// plugin nodes ("1%" to "100%", rounded up; at most 100 nodes); default "10%".
    #[serde(default = "default_max_unavailable")]
    #[schemars(default = "default_max_unavailable")]
    #[x_kube(validation = Rule::new("type(self) == int ? (self >= 1 && self <= 100) : self.matches('^(100|[1-9][0-9]?)%$')").message("must be a count from 1 to 100 or a percentage from 1% to 100%"))]
    pub max_unavailable: IntOrString,

    /// How long each step's nodes have to pass their checks (plugin pod Ready, ResourceSlice published again with
    /// its devices), as a duration such as `90s`, `5m` or `1h30m`, from 10s to 24h; default `5m`.
    #[serde(default = "default_timeout")]
    #[schemars(default = "default_timeout", length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new(format!("self.matches('{TIMEOUT_PATTERN}') && duration(self) >= duration('10s') && duration(self) <= duration('24h')")).message("must be a duration from 10s to 24h such as 90s, 5m or 1h30m"))]
    pub timeout: String,

    /// How long every moved node must stay healthy once a step's nodes have passed their checks, before the next
    /// step starts (or the rollout completes), as a duration such as `30s`, `2m` or `1h`, from 0s to 24h; default
    /// `2m`. A moved node that fails its checks during the soak halts the rollout at once, and so does a node moved
    /// by an earlier step, until the rollout completes.
    #[serde(default = "default_soak")]
    #[schemars(default = "default_soak", length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new(format!("self.matches('{TIMEOUT_PATTERN}') && duration(self) <= duration('24h')")).message("must be a duration from 0s to 24h such as 30s, 2m or 1h"))]
    pub soak: String,

    /// What a halted rollout does with the nodes it moved. `Halt` (the default) leaves them on the new version for
    /// inspection; `Rollback` moves them back to the last good version, in the same steps and checks. Either way,
    /// while the rollout is halted or rolled back the DaemonSet's template is the last good one, so nodes that join
    /// get the last good version; a new plugin template ends it.
    #[serde(default)]
    #[schemars(default)]
    pub on_failure: OnFailure,
}

/// What a halted rollout does with the nodes it moved.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnFailure {
    /// Leave them on the new version.
    #[default]
    Halt,
    /// Move them back to the last good version.
    Rollback,
}

impl Default for RolloutPolicy {
    fn default() -> Self {
        Self {
            canary: DEFAULT_CANARY,
            max_unavailable: default_max_unavailable(),
            timeout: default_timeout(),
            soak: default_soak(),
            on_failure: OnFailure::Halt,
        }
    }
}

impl RolloutPolicy {
    /// The step timeout in seconds, or None when `timeout` is not a duration in range.
    pub fn timeout_seconds(&self) -> Option<u64> {
        let seconds = parse_duration(&self.timeout)?;
        (TIMEOUT_RANGE.0..=TIMEOUT_RANGE.1).contains(&seconds).then_some(seconds)
    }

    /// The soak in seconds, or None when `soak` is not a duration from 0s to 24h.
    pub fn soak_seconds(&self) -> Option<u64> {
        parse_duration(&self.soak).filter(|s| *s <= TIMEOUT_RANGE.1)
    }

    /// Nodes per step after the canary, for a fleet of `nodes`: at least 1, at most `MAX_STEP_NODES`.
    pub fn step_size(&self, nodes: usize) -> usize {
        let size = match &self.max_unavailable {
            IntOrString::Int(count) => usize::try_from(*count).unwrap_or(1),
            IntOrString::String(text) => {
                let percent: usize = text.trim_end_matches('%').parse().unwrap_or(10);
                (nodes * percent).div_ceil(100)
            }
        };
        size.clamp(1, MAX_STEP_NODES)
    }

    /// Nodes in the canary step.
    pub fn canary_size(&self) -> usize {
        (self.canary as usize).clamp(1, MAX_STEP_NODES)
    }
}

/// `1h30m`, `90s`, `5m` to seconds; None for anything else.
pub(crate) fn parse_duration(text: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut number = String::new();
    let mut units = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let scale = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        // Each unit at most once, in the order h, m, s.
        if number.is_empty() || units.contains(c) || units.chars().any(|u| "hms".find(u) > "hms".find(c)) {
            return None;
        }
        units.push(c);
        total = total.checked_add(number.parse::<u64>().ok()?.checked_mul(scale)?)?;
        number.clear();
    }
    (number.is_empty() && !units.is_empty()).then_some(total)
}

/// What `status.driver` says about one plugin version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionCount {
    /// The image tag (or digest) of the plugin template.
    pub version: String,
    /// The DaemonSet's controller revision hash of that template.
    pub revision: String,
    /// Whether it is the DaemonSet's current template.
    #[serde(default)]
    pub current: bool,
    /// Nodes whose plugin pod runs it.
    pub nodes: i32,
    /// Of those, nodes whose plugin pod is ready.
    pub ready: i32,
}

/// Where a stepped rollout stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutState {
    /// Moving nodes in steps.
    #[default]
    Progressing,
    /// A step failed its checks: nothing more is moved until the plugin's spec changes.
    Halted,
    /// Every node runs the current template.
    Complete,
    /// A step failed its checks (`onFailure: Rollback`): its nodes move back to the last good version, in steps.
    RollingBack,
    /// The failed rollout's nodes run the last good version again; nothing more moves until the plugin's spec
    /// changes.
    RolledBack,
}

impl RolloutState {
    /// Whether a step failed (halted, rolling back or rolled back): nothing moves forward until a new template.
    pub fn halted(self) -> bool {
        matches!(self, Self::Halted | Self::RollingBack | Self::RolledBack)
    }
}

/// The stepped rollout (`driver.rollout`) toward the DaemonSet's current template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The controller revision hash of the template the rollout moves nodes to.
    pub revision: String,
    /// Its version (image tag).
    pub version: String,
    /// The plugin template the spec asked for (hashed): a halt or rollback holds while it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The revision the nodes ran before (the last good one): a halted or rolled back rollout keeps it as the
    /// DaemonSet's template, and `onFailure: Rollback` moves the failed nodes back to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_revision: Option<String>,
    pub state: RolloutState,
    /// When the first step started: nodes created later joined during the rollout, and only moved nodes are
    /// re-checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// The current step; 1 is the canary, 0 before the first.
    #[serde(default)]
    pub step: i32,
    /// When the current step started; its nodes must pass their checks within the timeout from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_start_time: Option<Time>,
    /// When every node of the current step had passed its checks: the step soaks from here (`soak`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_start_time: Option<Time>,
    /// The nodes the current step moved, each with the Neuron devices it published before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_nodes: Vec<StepNode>,
    /// Why the rollout halted: each node that failed, with what failed (at most 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<NodeIssue>,
}

/// A node moved in the current step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepNode {
    pub node: String,
    /// Neuron devices it published before its plugin was replaced: the new version must publish as many.
    pub devices: i32,
    /// Its Neuron ResourceSlices before its plugin was replaced (names, creation times and generations, hashed):
    /// without a semver tag, a slice counts as published again only once this has changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<String>,
}

#[cfg(test)]
mod tests;
