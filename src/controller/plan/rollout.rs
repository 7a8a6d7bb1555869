//! The plugin's part of the plan: which version each node runs and, with `driver.rollout`, this reconcile's step
//! (`crate::logic::rollout` decides; this reads its inputs from the snapshot).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::Mode;
use crate::api::{NeuronDRAConfigStatus, RolloutState, RolloutStatus, VersionCount};
use crate::cluster::REVISION_LABEL;
use crate::controller::snapshot::Snapshot;
use crate::logic::nodes::NodeFilter;
use crate::logic::rollout::{self, Change, Eviction, NodeState, PodState, Revision};
use crate::logic::validate::ValidatedConfig;

/// What `status.driver` gains, the plugin pods to delete, and when to look again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub versions: Vec<VersionCount>,
    pub status: Option<RolloutStatus>,
    /// Old plugin pods to delete (the DaemonSet controller recreates them from the new template).
    pub evict: Vec<Eviction>,
    /// What changed, for the events.
    pub change: Option<Change>,
    /// The target ControllerRevision, which the events name.
    pub revision: Option<ObjectReference>,
    /// A step is waiting for its checks (or for the DaemonSet controller): look again then even if nothing changes.
    pub recheck: Option<Duration>,
}

/// The plugin's versions per node and, with `driver.rollout`, the rollout's next move. Nothing while the plugin's
/// DaemonSet is not in the cache.
pub fn step(
    config: &ValidatedConfig,
    desired: &DaemonSet,
    mode: Mode,
    previous: Option<&NeuronDRAConfigStatus>,
    snapshot: &Snapshot,
    now: i64,
) -> Step {
    let reference = ObjectRef::new(&desired.name_any()).within(&desired.namespace().unwrap_or_default());
    let Some(ds) = snapshot.stores.owned.daemon_sets.get(&reference) else {
        return Step::default();
    };
    let revisions = revisions_of(&ds, &snapshot.stores.revisions.state());
    let current = revisions.iter().max_by_key(|r| r.number).cloned();
    let nodes = node_states(config, snapshot);
    let versions = rollout::versions(&nodes, &revisions, current.as_ref().map(|r| r.hash.as_str()));
    let previous = previous.and_then(|s| s.driver.as_ref()).and_then(|d| d.rollout.as_ref());
    let Some(policy) = &config.spec.driver.rollout else {
        return Step { versions, ..Step::default() };
    };
    // Act only on what the DaemonSet controller has seen: the newest revision must be the spec's template.
    let image = &config.spec.driver.image;
    let seen = ds.status.as_ref().and_then(|s| s.observed_generation) >= ds.metadata.generation;
    let Some(target) = current.filter(|c| seen && c.image.as_ref() == Some(image)) else {
        let recheck = Some(Duration::from_secs(2));
        return Step { versions, status: previous.cloned(), recheck, ..Step::default() };
    };
    let decision = rollout::plan(&rollout::Inputs {
        policy,
        nodes: &nodes,
        target: &target,
        slice_version: crate::logic::image::semver(image),
        previous,
        now,
        acting: mode == Mode::Normal,
    });
    let revision = ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("ControllerRevision".into()),
        namespace: ds.namespace(),
        name: Some(format!("{}-{}", ds.name_any(), decision.status.revision)),
        ..ObjectReference::default()
    };
    let recheck = waiting_for(&decision.status, policy.timeout_seconds().unwrap_or(300), now);
    Step {
        versions,
        status: Some(decision.status),
        evict: decision.evict,
        change: decision.change,
        revision: Some(revision),
        recheck,
    }
}

/// The DaemonSet's templates: its ControllerRevisions, each with the plugin image it runs.
fn revisions_of(ds: &DaemonSet, all: &[Arc<ControllerRevision>]) -> Vec<Revision> {
    let uid = ds.uid();
    all.iter()
        .filter(|r| r.namespace() == ds.namespace())
        .filter(|r| r.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
        .filter_map(|r| {
            let image = r.data.as_ref().and_then(|d| {
                d.0.pointer("/spec/template/spec/containers/0/image").and_then(|i| i.as_str()).map(String::from)
            });
            Some(Revision { hash: r.labels().get(REVISION_LABEL)?.clone(), number: r.revision, image })
        })
        .collect()
}

/// Every node the config selects, with its plugin pod and what its slices publish.
fn node_states(config: &ValidatedConfig, snapshot: &Snapshot) -> Vec<NodeState> {
    let pods = snapshot.plugin_pods_of(config);
    let filter = NodeFilter::new(&config.spec);
    let mut nodes: Vec<NodeState> = snapshot
        .nodes()
        .iter()
        .filter(|n| filter.selects(n.labels()))
        .map(|n| {
            let name = n.name_any();
            let devices: Vec<_> = snapshot
                .slices_of(&name)
                .iter()
                .flat_map(|s| s.spec.devices.iter())
                .filter(|d| d.resource_type().is_none_or(|t| t == "neuron_device"))
                .collect();
            let mut versions: Vec<String> =
                devices.iter().filter_map(|d| d.dra_driver_version().map(String::from)).collect();
            versions.sort();
            versions.dedup();
            let pod = pods.get(&name).map(|pod| PodState {
                name: pod.name_any(),
                uid: pod.uid(),
                revision: pod.labels().get(REVISION_LABEL).cloned(),
                ready: pod.ready(),
                terminating: pod.metadata.deletion_timestamp.is_some(),
            });
            NodeState { pod, devices: devices.len(), versions, name }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// When a step's timeout passes, if it is waiting for its checks.
fn waiting_for(status: &RolloutStatus, timeout: u64, now: i64) -> Option<Duration> {
    if status.state != RolloutState::Progressing || status.step_nodes.is_empty() {
        return None;
    }
    let started = status.step_start_time.as_ref()?.0.as_second();
    let left = started + timeout as i64 - now;
    Some(Duration::from_secs(left.clamp(1, timeout as i64) as u64 + 1))
}
