//! rollout (pure): which plugin version each node runs, and, with a `driver.rollout` policy, the stepped rollout's
//! next move: wait for the current step, halt it, or move the next nodes (delete their old plugin pods).
//!
//! Nothing here is remembered between reconciles but what the status says: the rollout's start, the step's nodes,
//! start and soak times, the last good revision, and a halt or rollback, all under the target controller revision.
//! Which node runs what comes from the plugin pods' `controller-revision-hash` label against the target revision, so
//! an operator restart (or a new leader) picks the rollout up where the cluster shows it.

mod check;
mod counts;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};

pub use counts::versions;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::{NodeIssue, OnFailure, RolloutPolicy, RolloutState, RolloutStatus, StepNode};
use crate::logic::text::first_of;
pub use state::{DEVICES_MISSING, MAX_VERSIONS, NOT_REPUBLISHED, NodeState, PodState, Revision};

pub const MAX_FAILED: usize = 50;

/// What one reconcile knows for planning a step.
pub struct Inputs<'a> {
    pub policy: &'a RolloutPolicy,
    pub nodes: &'a [NodeState],
    /// The DaemonSet's current template.
    pub target: &'a Revision,
    /// The `draDriverVersion` the new slices must carry (the image's semver tag), if the image has one.
    pub slice_version: Option<String>,
    /// The plugin template the spec asks for, hashed (kept in the status: a halt holds while it is unchanged).
    pub template: String,
    /// While a failed rollout is rolled back: the last good template, once the DaemonSet runs it again.
    pub held: Option<Held<'a>>,
    /// The rollout as the stored status has it.
    pub previous: Option<&'a RolloutStatus>,
    /// Now, in seconds.
    pub now: i64,
    /// False when paused: steps are judged but no new one starts.
    pub acting: bool,
}

/// The last good template as the DaemonSet holds it during a halt or rollback.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    pub revision: &'a Revision,
    pub slice_version: Option<&'a str>,
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
    Step {
        step: i32,
        nodes: Vec<String>,
    },
    Halted,
    Complete,
    /// A rollback step: these nodes move back to the last good version.
    Back {
        nodes: Vec<String>,
    },
    RolledBack,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: RolloutStatus,
    pub evict: Vec<Eviction>,
    pub change: Option<Change>,
}

impl Decision {
    fn unchanged(status: RolloutStatus) -> Decision {
        Decision { status, evict: Vec::new(), change: None }
    }
}

/// Whether a halt or a rollback holds the DaemonSet on the last good template: until the spec's template changes.
pub fn holds(status: &RolloutStatus, template: &str) -> bool {
    status.state.halted()
        && status.template.as_deref() == Some(template)
        && status.previous_revision.as_ref().is_some_and(|p| *p != status.revision)
}

/// The next move of the rollout toward `target`.
pub fn plan(inputs: &Inputs) -> Decision {
    let target = inputs.target;
    let previous = inputs.previous.filter(|p| p.revision == target.hash);
    let mut status = previous.cloned().unwrap_or_else(|| fresh(inputs));
    status.template = Some(inputs.template.clone());
    match status.state {
        // A halt holds until the template changes (a new revision starts a new rollout).
        RolloutState::Halted | RolloutState::RolledBack => Decision::unchanged(status),
        RolloutState::RollingBack => back(status, inputs),
        RolloutState::Progressing | RolloutState::Complete => forward(status, inputs),
    }
}

/// A new rollout toward the target, remembering the last good revision (what most other nodes run).
fn fresh(inputs: &Inputs) -> RolloutStatus {
    let target = &inputs.target.hash;
    let previous_revision = match inputs.previous {
        Some(p) if p.state == RolloutState::Complete => Some(p.revision.clone()),
        Some(p) => p.previous_revision.clone(),
        None => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for hash in inputs.nodes.iter().filter_map(NodeState::running) {
                *counts.entry(hash).or_default() += 1;
            }
            counts.into_iter().filter(|(h, _)| h != target).max_by_key(|(_, n)| *n).map(|(h, _)| h.to_string())
        }
    };
    RolloutStatus {
        revision: target.clone(),
        version: inputs.target.version(),
        template: None,
        previous_revision: previous_revision.filter(|p| p != target),
        state: RolloutState::Progressing,
        start_time: None,
        step: 0,
        step_start_time: None,
        soak_start_time: None,
        step_nodes: Vec::new(),
        failed_nodes: Vec::new(),
    }
}

/// Forward: judge the step and re-check the nodes earlier steps moved; after the soak, move the next nodes.
fn forward(mut status: RolloutStatus, inputs: &Inputs) -> Decision {
    let target = inputs.target;
    let toward = check::Toward { revision: target, slice_version: inputs.slice_version.as_deref() };
    let rechecks = check::earlier(&status, &toward, inputs.nodes);
    if !rechecks.is_empty() {
        return halt(status, rechecks, inputs);
    }
    match judge(&mut status, &toward, inputs) {
        Verdict::Failed(failures) => return halt(status, failures, inputs),
        Verdict::Waiting(evict) => return Decision { status, evict, change: None },
        Verdict::Soaking => return Decision::unchanged(status),
        Verdict::Passed => {}
    }
    let remaining: Vec<&NodeState> = inputs.nodes.iter().filter(|n| old(n, &target.hash)).collect();
    if remaining.is_empty() {
        // Only a rollout that moved nodes is announced (a fresh install is complete at once).
        let change = (status.state != RolloutState::Complete && status.step > 0).then_some(Change::Complete);
        status.state = RolloutState::Complete;
        clear_step(&mut status);
        return Decision { status, evict: Vec::new(), change };
    }
    if !inputs.acting {
        return Decision::unchanged(status);
    }
    let size = if status.step == 0 { inputs.policy.canary_size() } else { inputs.policy.step_size(inputs.nodes.len()) };
    let (evict, nodes) = next_step(&mut status, remaining, size, inputs.now);
    status.state = RolloutState::Progressing;
    status.start_time.get_or_insert_with(|| time(inputs.now));
    let change = Change::Step { step: status.step, nodes };
    Decision { status, evict, change: Some(change) }
}

/// Rolling back: the failed revision's nodes move back to the last good one (which the DaemonSet holds), in steps
/// with the same checks; a step that fails them halts.
fn back(mut status: RolloutStatus, inputs: &Inputs) -> Decision {
    // Nothing moves until the DaemonSet controller runs the last good template again.
    let Some(held) = inputs.held else { return Decision::unchanged(status) };
    let toward = check::Toward { revision: held.revision, slice_version: held.slice_version };
    match judge(&mut status, &toward, inputs) {
        Verdict::Failed(failures) => {
            status.state = RolloutState::Halted;
            status.failed_nodes = failures.into_iter().take(MAX_FAILED).collect();
            return Decision { status, evict: Vec::new(), change: Some(Change::Halted) };
        }
        Verdict::Waiting(evict) => return Decision { status, evict, change: None },
        Verdict::Soaking => return Decision::unchanged(status),
        Verdict::Passed => {}
    }
    let failed = &inputs.target.hash;
    let remaining: Vec<&NodeState> = inputs.nodes.iter().filter(|n| n.running() == Some(failed.as_str())).collect();
    if remaining.is_empty() {
        status.state = RolloutState::RolledBack;
        clear_step(&mut status);
        return Decision { status, evict: Vec::new(), change: Some(Change::RolledBack) };
    }
    if !inputs.acting {
        return Decision::unchanged(status);
    }
    // The step number stays the one that failed, which the status and messages name.
    let failed_at = status.step;
    let (evict, nodes) = next_step(&mut status, remaining, inputs.policy.step_size(inputs.nodes.len()), inputs.now);
    status.step = failed_at;
    Decision { status, evict, change: Some(Change::Back { nodes }) }
}

/// How the current step stands.
enum Verdict {
    /// Its nodes have until the timeout; these old pods (whose deletion failed) are deleted again.
    Waiting(Vec<Eviction>),
    Failed(Vec<NodeIssue>),
    /// Every node passed; the soak has not ended.
    Soaking,
    /// Passed and soaked (or no step ran yet).
    Passed,
}

fn judge(status: &mut RolloutStatus, toward: &check::Toward, inputs: &Inputs) -> Verdict {
    // The step's few nodes, found in one pass over the fleet.
    let moved: HashSet<&str> = status.step_nodes.iter().map(|m| m.node.as_str()).collect();
    let by_name: HashMap<&str, &NodeState> =
        inputs.nodes.iter().filter(|n| moved.contains(n.name.as_str())).map(|n| (n.name.as_str(), n)).collect();
    let failures: Vec<NodeIssue> = status
        .step_nodes
        .iter()
        .filter_map(|moved| check::step_node(moved, by_name.get(moved.node.as_str())?, toward))
        .collect();
    if !failures.is_empty() {
        // Nodes that had passed and fail during the soak halt at once.
        if status.soak_start_time.is_some() {
            return Verdict::Failed(failures);
        }
        let Some(started) = status.step_start_time.as_ref().map(|t| t.0.as_second()) else {
            // The step's start was not recorded (its status write failed): its clock starts now.
            status.step_start_time = Some(time(inputs.now));
            return Verdict::Waiting(Vec::new());
        };
        let timeout = inputs.policy.timeout_seconds().unwrap_or(300) as i64;
        if inputs.now >= started + timeout {
            return Verdict::Failed(failures);
        }
        // A step node whose old pod is still there (its deletion failed): delete it again.
        let again = status.step_nodes.iter().filter_map(|m| by_name.get(m.node.as_str())).copied();
        let stale = again.filter(|n| old(n, &toward.revision.hash));
        return Verdict::Waiting(if inputs.acting { evictions(stale) } else { Vec::new() });
    }
    if status.step_nodes.is_empty() {
        return Verdict::Passed;
    }
    let soak = inputs.policy.soak_seconds().unwrap_or(120) as i64;
    match status.soak_start_time.as_ref().map(|t| t.0.as_second()) {
        None if soak > 0 => {
            status.soak_start_time = Some(time(inputs.now));
            Verdict::Soaking
        }
        Some(since) if inputs.now < since + soak => Verdict::Soaking,
        _ => Verdict::Passed,
    }
}

/// Halts, or with `onFailure: Rollback` (and a last good revision to go back to) starts rolling back.
fn halt(mut status: RolloutStatus, failures: Vec<NodeIssue>, inputs: &Inputs) -> Decision {
    status.failed_nodes = failures.into_iter().take(MAX_FAILED).collect();
    clear_step(&mut status);
    let rollback = inputs.policy.on_failure == OnFailure::Rollback && status.previous_revision.is_some();
    status.state = if rollback { RolloutState::RollingBack } else { RolloutState::Halted };
    Decision { status, evict: Vec::new(), change: Some(Change::Halted) }
}

fn clear_step(status: &mut RolloutStatus) {
    status.step_nodes.clear();
    status.step_start_time = None;
    status.soak_start_time = None;
}

/// Starts the next step with `size` of the `remaining` nodes, unhealthy ones first (they have nothing to lose).
fn next_step(
    status: &mut RolloutStatus,
    mut remaining: Vec<&NodeState>,
    size: usize,
    now: i64,
) -> (Vec<Eviction>, Vec<String>) {
    remaining.sort_by_key(|n| (n.pod.as_ref().is_some_and(|p| p.ready), n.name.clone()));
    let next: Vec<&NodeState> = remaining.into_iter().take(size).collect();
    status.step += 1;
    status.step_start_time = Some(time(now));
    status.soak_start_time = None;
    status.step_nodes = next
        .iter()
        .map(|n| StepNode { node: n.name.clone(), devices: n.devices as i32, slices: Some(n.slices.clone()) })
        .collect();
    (evictions(next.iter().copied()), next.iter().map(|n| n.name.clone()).collect())
}

/// Whether the node's plugin runs another template than the target.
fn old(node: &NodeState, target: &str) -> bool {
    node.running().is_some_and(|hash| hash != target)
}

fn evictions<'a>(nodes: impl Iterator<Item = &'a NodeState>) -> Vec<Eviction> {
    nodes
        .filter_map(|n| {
            let pod = n.pod.as_ref()?;
            Some(Eviction { node: n.name.clone(), pod: pod.name.clone(), uid: pod.uid.clone() })
        })
        .collect()
}

fn time(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The halt as one line for the DriverReady message: the nodes (the first 5) and what failed on each.
pub fn halt_message(status: &RolloutStatus) -> String {
    let failed = first_of(status.failed_nodes.iter().map(|f| format!("{}: {}", f.node, f.message)), 5, "; ");
    let then = match status.state {
        RolloutState::RollingBack => "moving its nodes back to the last good version; nothing moves forward",
        RolloutState::RolledBack => "its nodes run the last good version again",
        _ => "the other nodes keep their version",
    };
    format!(
        "rollout to {} halted at step {}: {failed}; {then} until the plugin template changes (driver.image)",
        status.version, status.step,
    )
}
