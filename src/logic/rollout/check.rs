//! A moved node's checks: a Ready plugin pod of the revision it moved to, its ResourceSlices written again since
//! (and by that version, when the image has a semver tag), with the devices it had.

use super::{DEVICES_MISSING, NOT_REPUBLISHED, NodeState, Revision};
use crate::api::{NodeIssue, PLUGIN_NOT_READY, RolloutStatus, StepNode};

/// The revision nodes move to and the `draDriverVersion` its slices carry, if known.
pub(super) struct Toward<'a> {
    pub revision: &'a Revision,
    pub slice_version: Option<&'a str>,
}

fn issue(node: &NodeState, reason: &str, message: String) -> NodeIssue {
    NodeIssue { node: node.name.clone(), reason: reason.into(), message }
}

/// A Ready plugin pod of the revision, and slices that carry its version: what every moved node must keep.
fn running(node: &NodeState, toward: &Toward) -> Option<NodeIssue> {
    let version = toward.revision.version();
    match &node.pod {
        None => return Some(issue(node, PLUGIN_NOT_READY, format!("no plugin pod of {version}"))),
        Some(pod) if pod.terminating || pod.revision.as_deref() != Some(toward.revision.hash.as_str()) => {
            let message = format!("no plugin pod of {version} yet ({} is being replaced)", pod.name);
            return Some(issue(node, PLUGIN_NOT_READY, message));
        }
        Some(pod) if !pod.ready => {
            return Some(issue(node, PLUGIN_NOT_READY, format!("plugin pod {} of {version} is not Ready", pod.name)));
        }
        Some(_) => {}
    }
    if let Some(expected) = toward.slice_version
        && (node.versions.is_empty() || node.versions.iter().any(|v| v != expected))
    {
        let seen = if node.versions.is_empty() { "none".into() } else { node.versions.join(", ") };
        let message = format!("ResourceSlice not published again by {expected} (published by {seen})");
        return Some(issue(node, NOT_REPUBLISHED, message));
    }
    None
}

/// Why a node of the current step has not passed its checks yet, or None when it has. Without a semver tag the
/// version cannot tell new slices from old ones: then a slice that was there before the node moved never counts
/// as published again. (With one, the slices must carry it; a node kept slices of that very version only when it
/// ran it before, and the kubelet keeps a driver's slices across a quick restart when nothing in them changed.)
pub(super) fn step_node(moved: &StepNode, node: &NodeState, toward: &Toward) -> Option<NodeIssue> {
    if let Some(failed) = running(node, toward) {
        return Some(failed);
    }
    if toward.slice_version.is_none() && moved.slices.as_deref() == Some(node.slices.as_str()) {
        let message = format!("ResourceSlice not published again by {} since the plugin was replaced", version(toward));
        return Some(issue(node, NOT_REPUBLISHED, message));
    }
    if (node.devices as i32) < moved.devices {
        let message =
            format!("{} publishes {} Neuron devices, {} before", version(toward), node.devices, moved.devices);
        return Some(issue(node, DEVICES_MISSING, message));
    }
    None
}

fn version(toward: &Toward) -> String {
    toward.revision.version()
}

/// The nodes earlier steps of this rollout moved that no longer pass: each runs the target revision in a pod
/// created since the rollout started, on a node that was there before it (nodes that join later are not moved).
pub(super) fn earlier(status: &RolloutStatus, toward: &Toward, nodes: &[NodeState]) -> Vec<NodeIssue> {
    let Some(start) = status.start_time.as_ref().map(|t| t.0.as_second()) else { return Vec::new() };
    nodes
        .iter()
        .filter(|n| n.created.is_none_or(|c| c < start))
        .filter(|n| !status.step_nodes.iter().any(|m| m.node == n.name))
        .filter(|n| {
            n.pod.as_ref().is_some_and(|p| {
                !p.terminating
                    && p.revision.as_deref() == Some(toward.revision.hash.as_str())
                    && p.created.is_some_and(|c| c >= start)
            })
        })
        .filter_map(|n| running(n, toward))
        .collect()
}
