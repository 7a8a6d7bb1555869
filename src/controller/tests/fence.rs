//! The plugin's fence is installed with the operator, never written by it: while it is missing, does not deny or is
//! not the shipped one, no plugin is created or changed, and DriverReady says why. The plugin's binding moves to the
//! installed ClusterRole; orphans go by owner uid, never by label alone.

use serde_json::json;

use super::fixtures::{Fixture, World};
use super::{CLUSTER_ROLE_BINDING, DAEMON_SET, SERVICE_ACCOUNT, condition, config, desired};
use crate::logic::fence::installed;

fn weakened_binding() -> (
    Option<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>,
    Option<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>,
) {
    let (policy, mut binding) = installed();
    binding.spec.as_mut().unwrap().validation_actions = Some(vec!["Audit".into()]);
    (Some(policy), Some(binding))
}

#[tokio::test]
async fn a_missing_or_weakened_fence_keeps_the_plugin_from_being_written() {
    for (fence, why) in [
        ((None, installed().1.into()), "ValidatingAdmissionPolicy neuron-dra-plugin is missing"),
        (weakened_binding(), "does not deny (validationActions: [Audit])"),
    ] {
        let c = config(json!({}));
        let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
        world.configs.push(c.clone());
        world.fence = Some(fence);
        let fixture = Fixture::new(&world);
        fixture.reconcile(&c).await.unwrap();
        let lines = fixture.lines();
        assert!(lines.iter().any(|l| l == SERVICE_ACCOUNT), "the rest is applied: {lines:#?}");
        assert!(!lines.iter().any(|l| l.ends_with(DAEMON_SET)), "no plugin without its fence: {lines:#?}");
        let (status, reason, message) = condition(&fixture.last_status().unwrap(), "DriverReady");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Unfenced"), "{message}");
        assert!(message.contains(why) && !message.contains('\n'), "{message}");
    }
}

#[tokio::test]
async fn a_missing_fence_leaves_a_running_plugin_in_place() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    let mut running = desired(&c).daemon_set;
    running.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image =
        Some("public.ecr.aws/neuron/neuron-dra-driver:1.0.0".into());
    world.daemon_sets.push(running);
    world.configs.push(c.clone());
    world.fence = Some((None, None));
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let lines = fixture.lines();
    assert!(!lines.iter().any(|l| l.ends_with(DAEMON_SET)), "neither updated nor deleted: {lines:#?}");
}

/// The layout before the plugin's ClusterRole was installed with the operator bound a per-config ClusterRole;
/// a binding's roleRef cannot change, so the binding is deleted and made anew for the installed role.
#[tokio::test]
async fn a_binding_of_the_old_per_config_role_is_replaced() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(&c), 1);
    world.cluster_role_bindings[0].role_ref.name = "neuron-dra-c".into();
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let delete = CLUSTER_ROLE_BINDING.replacen("PATCH", "DELETE", 1);
    assert!(fixture.lines().contains(&delete), "{:#?}", fixture.lines());
    // Once the cache shows it gone, the binding of the installed role is applied.
    world.cluster_role_bindings.clear();
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let lines = fixture.lines();
    assert!(lines.iter().any(|l| l == CLUSTER_ROLE_BINDING) && !lines.contains(&delete), "{lines:#?}");
}

/// An object that carries the config's labels but is owned by something else (a copied label) is never deleted.
#[tokio::test]
async fn an_object_with_the_configs_label_but_another_owner_is_not_deleted() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(&c), 1);
    let mut copied = world.service_accounts[0].clone();
    copied.metadata.name = Some("neuron-dra-lookalike".into());
    copied.metadata.owner_references = None;
    world.service_accounts.push(copied);
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let lines = fixture.lines();
    assert!(!lines.iter().any(|l| l.starts_with("DELETE") && l.ends_with("lookalike")), "{lines:#?}");
}
