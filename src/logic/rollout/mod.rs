//! rollout (pure): which plugin version each node runs, and, with a `driver.rollout` policy, the stepped rollout's
//! next move: wait for the current step, halt it, or move the next nodes (delete their old plugin pods).
//!
//! Nothing here is remembered between reconciles but what the status says: the step's nodes and start time, and a
//! halt, all under the target controller revision. Which node runs what comes from the plugin pods'
//! `controller-revision-hash` label against the DaemonSet's newest ControllerRevision, so an operator restart (or a
//! new leader) picks the rollout up where the cluster shows it.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::{NodeIssue, PLUGIN_NOT_READY, RolloutPolicy, RolloutState, RolloutStatus, StepNode, VersionCount};
use crate::logic::text::first_of;

/// Entries kept in `status.driver.versions` and in `failedNodes`.
pub const MAX_VERSIONS: usize = 10;
pub const MAX_FAILED: usize = 50;

pub const DEVICES_MISSING: &str = "DevicesMissing";
pub const NOT_REPUBLISHED: &str = "SliceNotRepublished";

/// One template of the plugin DaemonSet (a ControllerRevision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub hash: String,
    pub number: i64,
    pub image: Option<String>,
}

impl Revision {
    /// How the status names it: the image tag or digest.
    pub fn version(&self) -> String {
        self.image.as_deref().map(crate::logic::image::label).unwrap_or_else(|| self.hash.clone())
    }
}

/// A plugin pod as the rollout reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    pub name: String,
    pub uid: Option<String>,
    /// Its `controller-revision-hash` label.
    pub revision: Option<String>,
    pub ready: bool,
    pub terminating: bool,
}

/// One node that should run the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub pod: Option<PodState>,
    /// Neuron devices its ResourceSlices publish now, and the `draDriverVersion`s they carry.
    pub devices: usize,
    pub versions: Vec<String>,
}

impl NodeState {
    /// The revision its plugin runs, unless the pod is going away.
    fn running(&self) -> Option<&str> {
        self.pod.as_ref().filter(|p| !p.terminating).and_then(|p| p.revision.as_deref())
    }
}

/// The plugin versions the nodes run: per revision, its nodes and ready nodes; most nodes first, bounded.
pub fn versions(nodes: &[NodeState], revisions: &[Revision], current: Option<&str>) -> Vec<VersionCount> {
    let by_hash: HashMap<&str, &Revision> = revisions.iter().map(|r| (r.hash.as_str(), r)).collect();
    let mut counts: BTreeMap<&str, (i32, i32)> = BTreeMap::new();
    for node in nodes {
        if let Some(hash) = node.running() {
            let entry = counts.entry(hash).or_default();
            entry.0 += 1;
            entry.1 += i32::from(node.pod.as_ref().is_some_and(|p| p.ready));
        }
    }
    let mut list: Vec<VersionCount> = counts
        .into_iter()
        .map(|(hash, (nodes, ready))| VersionCount {
            version: by_hash.get(hash).map_or_else(|| hash.to_string(), |r| r.version()),
            revision: hash.to_string(),
            current: Some(hash) == current,
            nodes,
            ready,
        })
        .collect();
    list.sort_by(|a, b| b.nodes.cmp(&a.nodes).then_with(|| b.current.cmp(&a.current)).then(a.version.cmp(&b.version)));
    list.truncate(MAX_VERSIONS);
    list
}

/// What one reconcile knows for planning a step.
pub struct Inputs<'a> {
    pub policy: &'a RolloutPolicy,
    pub nodes: &'a [NodeState],
    /// The DaemonSet's current template.
    pub target: &'a Revision,
    /// The `draDriverVersion` the new slices must carry (the image's semver tag), if the image has one.
    pub slice_version: Option<String>,
    /// The rollout as the stored status has it.
    pub previous: Option<&'a RolloutStatus>,
    /// Now, in seconds.
    pub now: i64,
    /// False when paused: steps are judged but no new one starts.
    pub acting: bool,
}

/// A plugin pod to delete, so that the DaemonSet controller recreates it from the new template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub node: String,
    pub pod: String,
    pub uid: Option<String>,
}

/// What changed in this reconcile, for events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Step { step: i32, nodes: Vec<String> },
    Halted,
    Complete,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: RolloutStatus,
    pub evict: Vec<Eviction>,
    pub change: Option<Change>,
}

/// The next move of the rollout toward `target`.
pub fn plan(inputs: &Inputs) -> Decision {
    let target = inputs.target;
    let previous = inputs.previous.filter(|p| p.revision == target.hash);
    let mut status = previous.cloned().unwrap_or_else(|| RolloutStatus {
        revision: target.hash.clone(),
        version: target.version(),
        state: RolloutState::Progressing,
        step: 0,
        step_start_time: None,
        step_nodes: Vec::new(),
        failed_nodes: Vec::new(),
    });
    let unchanged = |status: RolloutStatus| Decision { status, evict: Vec::new(), change: None };
    // A halt holds until the template changes (a new revision starts a new rollout).
    if status.state == RolloutState::Halted {
        return unchanged(status);
    }

    let by_name: HashMap<&str, &NodeState> = inputs.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let failures: Vec<NodeIssue> =
        status.step_nodes.iter().filter_map(|moved| check(moved, by_name.get(moved.node.as_str())?, inputs)).collect();
    if !failures.is_empty() {
        let started = status.step_start_time.as_ref().map(|t| t.0.as_second());
        let Some(started) = started else {
            // The step's start was not recorded (its status write failed): its clock starts now.
            status.step_start_time = Some(time(inputs.now));
            return unchanged(status);
        };
        let timeout = inputs.policy.timeout_seconds().unwrap_or(300) as i64;
        if inputs.now >= started + timeout {
            status.state = RolloutState::Halted;
            status.failed_nodes = failures.into_iter().take(MAX_FAILED).collect();
            return Decision { status, evict: Vec::new(), change: Some(Change::Halted) };
        }
        // A step node whose old pod is still there (its deletion failed): delete it again.
        let again = status.step_nodes.iter().filter_map(|m| by_name.get(m.node.as_str())).copied();
        let evict = if inputs.acting { evictions(again.filter(|n| old(n, target))) } else { Vec::new() };
        return Decision { status, evict, change: None };
    }

    // The step passed (or none ran yet): move the next nodes, unhealthy ones first.
    let mut remaining: Vec<&NodeState> = inputs.nodes.iter().filter(|n| old(n, target)).collect();
    if remaining.is_empty() {
        // Only a rollout that moved nodes is announced (a fresh install is complete at once).
        let change = (status.state != RolloutState::Complete && status.step > 0).then_some(Change::Complete);
        status.state = RolloutState::Complete;
        status.step_nodes.clear();
        status.step_start_time = None;
        return Decision { status, evict: Vec::new(), change };
    }
    if !inputs.acting {
        return unchanged(status);
    }
    remaining.sort_by_key(|n| (n.pod.as_ref().is_some_and(|p| p.ready), n.name.clone()));
    let size = if status.step == 0 { inputs.policy.canary_size() } else { inputs.policy.step_size(inputs.nodes.len()) };
    let next: Vec<&NodeState> = remaining.into_iter().take(size).collect();
    status.step += 1;
    status.state = RolloutState::Progressing;
    status.step_start_time = Some(time(inputs.now));
    status.step_nodes = next.iter().map(|n| StepNode { node: n.name.clone(), devices: n.devices as i32 }).collect();
    let evict = evictions(next.iter().copied());
    let change = Change::Step { step: status.step, nodes: next.iter().map(|n| n.name.clone()).collect() };
    Decision { status, evict, change: Some(change) }
}

/// Whether the node's plugin runs another template than the target.
fn old(node: &NodeState, target: &Revision) -> bool {
    node.running().is_some_and(|hash| hash != target.hash)
}

fn evictions<'a>(nodes: impl Iterator<Item = &'a NodeState>) -> Vec<Eviction> {
    nodes
        .filter_map(|n| {
            let pod = n.pod.as_ref()?;
            Some(Eviction { node: n.name.clone(), pod: pod.name.clone(), uid: pod.uid.clone() })
        })
        .collect()
}

/// Why a moved node has not passed its checks yet, or None when it has: a Ready plugin pod of the target revision,
/// and slices republished by the target version with at least the devices it had before.
fn check(moved: &StepNode, node: &NodeState, inputs: &Inputs) -> Option<NodeIssue> {
    let fail =
        |reason: &str, message: String| Some(NodeIssue { node: node.name.clone(), reason: reason.into(), message });
    let version = inputs.target.version();
    match &node.pod {
        None => return fail(PLUGIN_NOT_READY, format!("no plugin pod of {version}")),
        Some(pod) if pod.terminating || pod.revision.as_deref() != Some(inputs.target.hash.as_str()) => {
            return fail(PLUGIN_NOT_READY, format!("no plugin pod of {version} yet ({} is being replaced)", pod.name));
        }
        Some(pod) if !pod.ready => {
            return fail(PLUGIN_NOT_READY, format!("plugin pod {} of {version} is not Ready", pod.name));
        }
        Some(_) => {}
    }
    if let Some(expected) = &inputs.slice_version
        && (node.versions.is_empty() || node.versions.iter().any(|v| v != expected))
    {
        let seen = if node.versions.is_empty() { "none".into() } else { node.versions.join(", ") };
        return fail(NOT_REPUBLISHED, format!("ResourceSlice not published again by {expected} (published by {seen})"));
    }
    if (node.devices as i32) < moved.devices {
        return fail(
            DEVICES_MISSING,
            format!("{version} publishes {} Neuron devices, {} before", node.devices, moved.devices),
        );
    }
    None
}

fn time(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The halt as one line for the DriverReady message: the nodes (the first 5) and what failed on each.
pub fn halt_message(status: &RolloutStatus) -> String {
    let failed = first_of(status.failed_nodes.iter().map(|f| format!("{}: {}", f.node, f.message)), 5, "; ");
    format!(
        "rollout to {} halted at step {}: {failed}; the other nodes keep their version until the plugin template \
         changes (driver.image)",
        status.version, status.step,
    )
}
