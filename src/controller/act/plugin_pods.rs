//! rollout (the thin side-effect layer of `crate::logic::rollout`): reads the plugin's DaemonSet, its ControllerRevisions,
//! pods and slices from the caches, asks the pure planner for the next move, deletes the old plugin pods of a new
//! step (the DaemonSet controller recreates them from the new template) and says what changed in events.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType};

use super::operands::cached;
use crate::api::labels::LABEL_CONFIG;
use crate::api::{NeuronDRAConfigStatus, RolloutState, RolloutStatus, VersionCount};
use crate::cluster::REVISION_LABEL;
use crate::controller::plan::{Driver, Mode, Plan};
use crate::controller::snapshot::Snapshot;
use crate::controller::{Context, Error};
use crate::logic::nodes::NodeFilter;
use crate::logic::rollout::{self, Change, Decision, NodeState, PodState, Revision};

/// What `status.driver` gains from this layer, and when to look again.
#[derive(Debug, Default)]
pub struct Driven {
    pub versions: Vec<VersionCount>,
    pub rollout: Option<RolloutStatus>,
    /// A step is waiting for its checks: its timeout must be judged even if nothing changes.
    pub recheck: Option<Duration>,
    /// A plugin pod could not be deleted: the reconcile fails (after the status is written) and retries.
    pub failed: Option<Error>,
}

/// The plugin's versions per node and, with `driver.rollout`, the rollout's next move.
pub async fn drive(
    plan: &Plan,
    driver: Driver,
    previous: Option<&NeuronDRAConfigStatus>,
    snapshot: &Snapshot,
    ctx: &Context,
    reference: &ObjectReference,
) -> Driven {
    let desired = &plan.desired.daemon_set;
    let Some(ds) = cached::<DaemonSet>(&ctx.stores, &desired.name_any(), desired.namespace().as_deref())
        .filter(|_| driver == Driver::Apply)
    else {
        return Driven::default();
    };
    let revisions = revisions_of(&ds, &ctx.stores.revisions.state());
    let current = revisions.iter().max_by_key(|r| r.number).cloned();
    let nodes = node_states(plan, snapshot, ctx);
    let versions = rollout::versions(&nodes, &revisions, current.as_ref().map(|r| r.hash.as_str()));
    let previous = previous.and_then(|s| s.driver.as_ref()).and_then(|d| d.rollout.as_ref());
    let Some(policy) = &plan.config.spec.driver.rollout else {
        return Driven { versions, ..Driven::default() };
    };
    // Act only on what the DaemonSet controller has seen: the newest revision must be the spec's template.
    let image = &plan.config.spec.driver.image;
    let seen = ds.status.as_ref().and_then(|s| s.observed_generation) >= ds.metadata.generation;
    let Some(target) = current.filter(|c| seen && c.image.as_ref() == Some(image)) else {
        let recheck = Some(Duration::from_secs(2));
        return Driven { versions, rollout: previous.cloned(), recheck, failed: None };
    };
    let decision = rollout::plan(&rollout::Inputs {
        policy,
        nodes: &nodes,
        target: &target,
        slice_version: crate::logic::image::semver(image),
        previous,
        now: crate::logic::status::now().as_second(),
        acting: plan.mode == Mode::Normal,
    });
    let failed = evict(&decision, &plan.config.spec.driver.namespace, ctx).await.err();
    announce(&decision, &ds, ctx, reference).await;
    let recheck = waiting_for(&decision.status, policy.timeout_seconds().unwrap_or(300));
    Driven { versions, rollout: Some(decision.status), recheck, failed }
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
fn node_states(plan: &Plan, snapshot: &Snapshot, ctx: &Context) -> Vec<NodeState> {
    let config = &plan.config.name;
    let pods: HashMap<String, PodState> = ctx
        .stores
        .plugin_pods
        .state()
        .iter()
        .filter(|pod| pod.labels().get(LABEL_CONFIG) == Some(config))
        .filter_map(|pod| {
            let state = PodState {
                name: pod.name_any(),
                uid: pod.uid(),
                revision: pod.labels().get(REVISION_LABEL).cloned(),
                ready: pod.ready(),
                terminating: pod.metadata.deletion_timestamp.is_some(),
            };
            // Of two pods on a node (one going away), the live one counts.
            Some((pod.node()?, state))
        })
        .fold(HashMap::new(), |mut by_node, (node, state)| {
            let keep = by_node.get(&node).is_some_and(|p: &PodState| !p.terminating);
            if !keep {
                by_node.insert(node, state);
            }
            by_node
        });
    let filter = NodeFilter::new(&plan.config.spec);
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
            NodeState { pod: pods.get(&name).cloned(), devices: devices.len(), versions, name }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// Deletes the old plugin pods of a new step, each only if it is still the pod the plan saw.
async fn evict(decision: &Decision, namespace: &str, ctx: &Context) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    for eviction in &decision.evict {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: eviction.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&eviction.pod, &params).await {
            Ok(_) => tracing::info!(node = %eviction.node, pod = %eviction.pod, "replacing plugin pod"),
            // Already gone (or replaced): the DaemonSet controller is on it.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(error) => return Err(Error::Evict(error)),
        }
    }
    Ok(())
}

/// One event per step, halt and completion. The recorder folds events of one reason, action and related object
/// into a series that keeps the first note, so each names the target revision (related) and its step (action).
async fn announce(decision: &Decision, ds: &DaemonSet, ctx: &Context, reference: &ObjectReference) {
    let status = &decision.status;
    let (type_, reason, action, note) = match &decision.change {
        None => return,
        Some(Change::Step { step, nodes }) => {
            let what = if *step == 1 { "canary".to_string() } else { format!("step {step}") };
            let note = format!("{what}: moving {} to {}", nodes.join(", "), status.version);
            (EventType::Normal, "RolloutStep", format!("Step{step}"), note)
        }
        Some(Change::Halted) => (EventType::Warning, "RolloutHalted", "Halt".into(), rollout::halt_message(status)),
        Some(Change::Complete) => {
            let note = format!("every node runs the plugin {}", status.version);
            (EventType::Normal, "RolloutComplete", "Complete".into(), note)
        }
    };
    let revision = ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("ControllerRevision".into()),
        namespace: ds.namespace(),
        name: Some(format!("{}-{}", ds.name_any(), status.revision)),
        ..ObjectReference::default()
    };
    let event = Event { type_, reason: reason.into(), note: Some(note), action, secondary: Some(revision) };
    crate::controller::act::publish::send(ctx, reference, &event).await;
}

/// When a step's timeout passes, if it is waiting for its checks.
fn waiting_for(status: &RolloutStatus, timeout: u64) -> Option<Duration> {
    if status.state != RolloutState::Progressing || status.step_nodes.is_empty() {
        return None;
    }
    let started = status.step_start_time.as_ref()?.0.as_second();
    let left = started + timeout as i64 - crate::logic::status::now().as_second();
    Some(Duration::from_secs(left.clamp(1, timeout as i64) as u64 + 1))
}
