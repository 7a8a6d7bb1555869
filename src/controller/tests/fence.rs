//! The plugin's fence goes first: the DaemonSet is written only once the admission policy and its binding are.

use serde_json::json;

use super::fixtures::{Fixture, World};
use super::{DAEMON_SET, POLICY, POLICY_BINDING, SERVICE_ACCOUNT, config, desired, with_written_status};

#[tokio::test]
async fn a_failed_fence_write_keeps_the_plugin_from_being_written() {
    for failing in [POLICY, POLICY_BINDING] {
        let c = config(json!({}));
        let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
        world.configs.push(c.clone());
        let fixture = Fixture::new(&world);
        fixture.fail(failing, 500, "etcd is away", 1);
        let error = fixture.reconcile(&c).await.unwrap_err();
        assert!(error.to_string().contains("ValidatingAdmissionPolicy"), "{error}");
        let lines = fixture.lines();
        assert!(lines.iter().any(|l| l == SERVICE_ACCOUNT), "the rest is applied: {lines:#?}");
        assert!(!lines.iter().any(|l| l.ends_with(DAEMON_SET)), "no DaemonSet without its fence: {lines:#?}");

        // The next pass writes what failed of the fence, then the plugin.
        let next = with_written_status(&c, &fixture);
        fixture.clear();
        fixture.reconcile(&next).await.unwrap();
        let lines = fixture.lines();
        let at = |line: &str| lines.iter().position(|l| l == line).unwrap_or_else(|| panic!("{line}: {lines:#?}"));
        assert!(at(failing) < at(&format!("PATCH {DAEMON_SET}")), "{lines:#?}");
    }
}

#[tokio::test]
async fn a_failed_fence_write_leaves_a_running_plugin_in_place() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    world.daemon_sets.push(desired(&c).daemon_set);
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.fail(POLICY, 403, "forbidden", 1);
    fixture.reconcile(&c).await.unwrap_err();
    let lines = fixture.lines();
    assert!(!lines.iter().any(|l| l.ends_with(DAEMON_SET)), "neither updated nor deleted: {lines:#?}");
}
