//! The plugin's part of the plan: which version each node runs and, with `driver.rollout`, this reconcile's step
//! (`crate::logic::rollout` decides; this reads its inputs from the snapshot).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};
use kube::ResourceExt;

use super::Mode;
use crate::api::{NeuronDRAConfigStatus, RolloutState, RolloutStatus, VersionCount};
use crate::cluster::REVISION_LABEL;
use crate::controller::pure::snapshot::Snapshot;
use crate::logic::desired::short_hash;
use crate::logic::rollout::{self, Change, Eviction, Held, NodeState, PodState, Revision};
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
    /// A step is waiting for its checks or its soak (or for the DaemonSet controller): look again then even if
    /// nothing changes.
    pub recheck: Option<Duration>,
    /// While a halt or rollback holds: the last good template, which the DaemonSet gets instead of the spec's, so
    /// that nodes that join run the last good version (the moved nodes keep theirs: the DaemonSet is `OnDelete`).
    pub hold: Option<PodTemplateSpec>,
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
    let Some(ds) = snapshot.daemon_set(&desired.name_any(), &desired.namespace().unwrap_or_default()) else {
        return Step::default();
    };
    let all = snapshot.revisions();
    let revisions = revisions_of(ds, all);
    let current = revisions.iter().max_by_key(|r| r.number).cloned();
    let nodes = node_states(config, snapshot);
    let versions = rollout::versions(&nodes, &revisions, current.as_ref().map(|r| r.hash.as_str()));
    let previous = previous.and_then(|s| s.driver.as_ref()).and_then(|d| d.rollout.as_ref());
    let Some(policy) = &config.spec.driver.rollout else {
        return Step { versions, ..Step::default() };
    };
    let template = short_hash(&desired.spec.as_ref().map(|s| &s.template));
    let seen = ds.status.as_ref().and_then(|s| s.observed_generation) >= ds.metadata.generation;
    // A halt or rollback of this very template keeps the DaemonSet on the last good one: its revision becomes the
    // newest, so the rollout's target is the one the status names.
    let holding = previous.filter(|p| rollout::holds(p, &template));
    let hold = holding.and_then(|p| template_of(ds, all, p.previous_revision.as_deref()?));
    // Act only on what the DaemonSet controller has seen: the newest revision must be the spec's template.
    let image = &config.spec.driver.image;
    let target = match holding {
        Some(p) => revisions.iter().find(|r| r.hash == p.revision).cloned(),
        None => current.clone().filter(|c| seen && c.image.as_ref() == Some(image)),
    };
    let Some(target) = target else {
        let recheck = holding.is_none().then_some(Duration::from_secs(2));
        return Step { versions, status: previous.cloned(), recheck, hold, ..Step::default() };
    };
    let held_revision = current.filter(|c| holding.is_some() && hold.is_some() && seen && c.hash != target.hash);
    let held_version = held_revision.as_ref().and_then(|r| crate::logic::image::semver(r.image.as_deref()?));
    let decision = rollout::plan(&rollout::Inputs {
        policy,
        nodes: &nodes,
        target: &target,
        slice_version: crate::logic::image::semver(target.image.as_deref().unwrap_or(image)),
        template,
        held: held_revision.as_ref().map(|revision| Held { revision, slice_version: held_version.as_deref() }),
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
    let recheck = waiting_for(&decision.status, policy, now);
    // The halt or rollback decided in this pass holds from now on.
    let hold = hold.or_else(|| {
        let status = &decision.status;
        let template = status.template.as_deref()?;
        rollout::holds(status, template).then(|| template_of(ds, all, status.previous_revision.as_deref()?))?
    });
    Step {
        versions,
        status: Some(decision.status),
        evict: decision.evict,
        change: decision.change,
        revision: Some(revision),
        recheck,
        hold,
    }
}

/// The pod template of one of the DaemonSet's revisions, as the DaemonSet controller stored it (the template under
/// `spec`, marked `$patch: replace`).
fn template_of(ds: &DaemonSet, all: &[Arc<ControllerRevision>], hash: &str) -> Option<PodTemplateSpec> {
    let uid = ds.uid();
    let revision = all.iter().find(|r| {
        r.namespace() == ds.namespace()
            && r.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref())
            && r.labels().get(REVISION_LABEL).map(String::as_str) == Some(hash)
    })?;
    let mut template = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    template.as_object_mut()?.remove("$patch");
    serde_json::from_value(template).ok()
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
    let stepped = config.spec.driver.rollout.is_some();
    let mut nodes: Vec<NodeState> = snapshot
        .selected_nodes(config)
        .iter()
        .map(|n| {
            let name = n.name_any();
            let slices = snapshot.slices_of(&name);
            // One pass over the devices: their count and the few versions they publish.
            let (mut devices, mut versions) = (0, Vec::<&str>::new());
            for device in slices.iter().flat_map(|s| s.spec.devices.iter()) {
                if !device.is_neuron_device() {
                    continue;
                }
                devices += 1;
                if let Some(version) = device.dra_driver_version().filter(|v| !versions.contains(v)) {
                    versions.push(version);
                }
            }
            versions.sort_unstable();
            let versions = versions.into_iter().map(String::from).collect();
            let pod = pods.get(&name).map(|pod| PodState {
                name: pod.name_any(),
                uid: pod.uid(),
                revision: pod.labels().get(REVISION_LABEL).cloned(),
                ready: pod.ready(),
                terminating: pod.metadata.deletion_timestamp.is_some(),
                created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            });
            // The cache keeps no uids or resource versions (see `watch::reads`): a slice written again shows as a
            // new generation (its spec changed) or a new creation time (deleted and created again). Only a
            // rollout's checks read it.
            let slices = if stepped {
                let mut stamps: Vec<(Option<&str>, Option<i64>, Option<i64>)> = slices
                    .iter()
                    .map(|s| {
                        let meta = &s.metadata;
                        let created = meta.creation_timestamp.as_ref().map(|t| t.0.as_second());
                        (meta.name.as_deref(), created, meta.generation)
                    })
                    .collect();
                stamps.sort();
                short_hash(&stamps)
            } else {
                String::new()
            };
            let created = n.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second());
            NodeState { pod, devices, versions, slices, created, name }
        })
        .collect();
    nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// When a step's soak ends, or its timeout passes if it is waiting for its checks.
fn waiting_for(status: &RolloutStatus, policy: &crate::api::RolloutPolicy, now: i64) -> Option<Duration> {
    let moving = matches!(status.state, RolloutState::Progressing | RolloutState::RollingBack);
    if !moving || status.step_nodes.is_empty() {
        return None;
    }
    let (since, length) = match &status.soak_start_time {
        Some(soak) => (soak.0.as_second(), policy.soak_seconds().unwrap_or(120) as i64),
        None => (status.step_start_time.as_ref()?.0.as_second(), policy.timeout_seconds().unwrap_or(300) as i64),
    };
    Some(Duration::from_secs((since + length - now).clamp(1, length.max(1)) as u64 + 1))
}
