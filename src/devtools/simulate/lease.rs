//! The simulated nodes' heartbeats. A kubelet renews its node's Lease in `kube-node-lease` every few seconds; the
//! control plane's node-lifecycle controller counts a node whose Lease (and Ready condition) stopped changing for
//! `--node-monitor-grace-period` as unreachable, taints it `node.kubernetes.io/unreachable` and evicts its pods. The
//! stand-in kubelet renews the Lease of every simulated node so they stay as alive as real ones.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, Patch};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};

use super::marks::{PARALLEL, apply_params};

/// How often: well inside the local control plane's grace period (hack/controlplane.sh), as a kubelet's renewal is
/// a quarter of its Lease's duration.
pub const RENEW_EVERY: Duration = Duration::from_secs(3);
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// What a kubelet declares (its default `nodeLeaseDurationSeconds`).
const LEASE_SECONDS: i32 = 40;

/// The Lease a kubelet keeps for `node`, renewed now; owned by the Node so it goes with it.
pub fn node_lease(node: &Node) -> Lease {
    let name = node.name_any();
    let owner = node.meta().uid.clone().map(|uid| OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.clone(),
        uid,
        ..OwnerReference::default()
    });
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NODE_LEASE_NAMESPACE.into()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    }
}

/// Renews every node's Lease once; returns how many failed (logged).
pub async fn renew_all(client: &Client, nodes: Vec<std::sync::Arc<Node>>) -> usize {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let results: Vec<bool> = futures::stream::iter(nodes)
        .map(|node| {
            let leases = leases.clone();
            async move {
                let name = node.name_any();
                let patch = Patch::Apply(node_lease(&node));
                match leases.patch(&name, &apply_params(), &patch).await {
                    Ok(_) => true,
                    Err(error) => {
                        tracing::warn!(node = %name, %error, "renewing the simulated node's Lease");
                        false
                    }
                }
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    results.into_iter().filter(|ok| !ok).count()
}

/// Set to `off` where no node-lifecycle controller would miss the heartbeats (`make bench` starts its control plane
/// with an hour's grace period): thousands of simulated nodes would otherwise cost the API server a Lease write per
/// node every few seconds, which is not what a benchmark measures.
pub const HEARTBEAT_ENV: &str = "NEURON_DRA_SIMULATE_HEARTBEAT";

/// Renews the Leases of the nodes in `nodes` (the simulated ones) every `RENEW_EVERY`, until dropped.
pub async fn heartbeat(client: Client, nodes: Store<Node>) {
    if std::env::var(HEARTBEAT_ENV).is_ok_and(|v| v == "off") {
        return;
    }
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        renew_all(&client, nodes.state()).await;
    }
}
