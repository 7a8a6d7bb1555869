//! The plugin's fences, installed with the operator, must be in place before the operator starts or changes a plugin:
//! otherwise the DaemonSet is kept as it is (neither created, updated nor deleted) and DriverReady says why.

use serde_json::json;

use super::fixtures::{Fixture, World};
use super::{CLUSTER_ROLE_BINDING, DAEMON_SET, SERVICE_ACCOUNT, condition, config, converged, desired};
use crate::logic::desired::PLUGIN_CLUSTER_ROLE;

const UNFENCED: &str = "the kubelet plugin's fence neuron-dra-plugin-fence is missing (ValidatingAdmissionPolicy)";

#[tokio::test]
async fn without_its_fence_no_plugin_is_created_and_the_status_says_why() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    world.configs.push(c.clone());
    world.fence = Some(UNFENCED.into());
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let lines = fixture.lines();
    assert!(lines.iter().any(|l| l == SERVICE_ACCOUNT), "the rest is applied: {lines:#?}");
    assert!(!lines.iter().any(|l| l.ends_with(DAEMON_SET)), "no DaemonSet without its fence: {lines:#?}");
    let status = fixture.last_status().unwrap();
    let (ready, reason, message) = condition(&status, "DriverReady");
    assert_eq!((ready.as_str(), reason.as_str(), message.as_str()), ("False", "Unfenced", UNFENCED));
    assert_eq!(condition(&status, "Stalled").0, "True", "only an administrator can restore it");
}

#[tokio::test]
async fn without_its_fence_a_running_plugin_is_neither_changed_nor_deleted() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(&c), 2);
    world.configs.push(c.clone());
    world.fence = Some(UNFENCED.into());
    // A new image would change the DaemonSet: it waits for the fence.
    let changed = config(json!({"driver": {"image": "public.ecr.aws/neuron/neuron-dra-driver:1.2.0"}}));
    let fixture = Fixture::new(&world);
    fixture.reconcile(&changed).await.unwrap();
    let lines = fixture.lines();
    assert!(!lines.iter().any(|l| l.ends_with(DAEMON_SET)), "neither updated nor deleted: {lines:#?}");
}

#[tokio::test]
async fn a_binding_of_the_old_per_config_role_is_deleted_then_created_anew() {
    let c = config(json!({}));
    let mut world = converged(&c);
    world.cluster_role_bindings[0].role_ref.name = "neuron-dra-c".into();
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let delete = CLUSTER_ROLE_BINDING.replace("PATCH", "DELETE");
    assert!(fixture.lines().contains(&delete), "{:#?}", fixture.lines());
    assert!(!fixture.lines().contains(&CLUSTER_ROLE_BINDING.to_string()), "its roleRef cannot change in place");

    // The next pass, the cache without it, creates it bound to the installed role.
    let mut world = converged(&c);
    world.cluster_role_bindings.clear();
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let sent = fixture.sent();
    let applied = sent.iter().find(|s| s.line() == CLUSTER_ROLE_BINDING).expect("applied");
    assert_eq!(applied.body["roleRef"]["name"], PLUGIN_CLUSTER_ROLE);
}
