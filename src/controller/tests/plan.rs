//! The plan as a plain value: what a reconcile decides from the caches, before it writes anything.

use serde_json::json;

use super::fixtures::World;
use super::{config, config_at, nodes};
use crate::controller::pure::plan::{Driver, Mode, NamespaceState, Plan, Refusal};
use crate::logic::status::Validity;

/// The plans' clock: any time after the fixtures' configs were created.
pub const NOW: i64 = 1_767_400_000;

fn terminating(name: &str) -> k8s_openapi::api::core::v1::Namespace {
    let deleted = json!({"name": name, "deletionTimestamp": "2026-01-01T00:00:00Z"});
    serde_json::from_value(json!({"metadata": deleted, "status": {"phase": "Terminating"}})).unwrap()
}

#[test]
fn a_plain_config_applies_everything_into_existing_namespaces() {
    let c = config(json!({"templates": {"namespaces": ["team-a", "absent"]}}));
    let world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!((plan.mode, plan.driver, plan.driver_namespace), (Mode::Normal, Driver::Apply, NamespaceState::Exists));
    assert_eq!(plan.namespaces, ["team-a"]);
    assert_eq!(plan.missing_namespaces, ["absent"]);
    assert_eq!(plan.desired.templates.len(), 1);
    assert_eq!(plan.validity(), Validity::Valid);
}

#[test]
fn the_namespaces_decide_where_templates_go_and_whether_the_driver_waits() {
    let c = config(json!({"paused": true, "templates": {"namespaces": ["team-a", "going"],
        "namespaceSelector": {"matchLabels": {"ml": "yes"}}}}));
    let mut world = World::with_namespaces(&["team-a"]);
    world.namespaces.push(terminating("going"));
    world.namespaces.push(terminating("neuron-dra-driver"));
    world
        .namespaces
        .push(serde_json::from_value(json!({"metadata": {"name": "picked", "labels": {"ml": "yes"}}})).unwrap());
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.mode, Mode::Paused);
    assert_eq!((plan.driver, plan.driver_namespace), (Driver::WaitingForNamespace, NamespaceState::Terminating));
    assert_eq!(plan.namespaces, ["picked", "team-a"], "terminating namespaces get no templates");
    assert!(plan.missing_namespaces.is_empty());

    let plan = Plan::new(&c, &World::with_namespaces(&["team-a"]).snapshot(), NOW).unwrap();
    assert_eq!((plan.driver, plan.driver_namespace), (Driver::Apply, NamespaceState::Missing));
}

#[test]
fn an_older_config_keeps_its_nodes_and_templates() {
    let older = config_at("old", "2026-01-01T00:00:00Z", json!({}));
    let newer = config(json!({"templates": {"namespaces": ["team-a", "team-b"]}}));
    let mut world = World::with_namespaces(&["team-a", "team-b", "neuron-dra-driver"]);
    world.configs = vec![older.clone(), newer.clone()];
    world.nodes = nodes(2);
    let plan = Plan::new(&newer, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.driver, Driver::BlockedByConflict);
    assert_eq!(plan.conflicts.nodes.len(), 2);
    let templates: Vec<String> = plan.desired.templates.iter().map(crate::controller::pure::report::key).collect();
    assert_eq!(templates, ["team-b/pretrain"], "team-a/pretrain is the older config's");
    assert!(matches!(plan.validity(), Validity::Conflict(_)));
    let plan = Plan::new(&older, &world.snapshot(), NOW).unwrap();
    assert_eq!((plan.driver, plan.conflicts.is_empty()), (Driver::Apply, true), "the older one wins");
}

#[test]
fn an_invalid_spec_plans_nothing() {
    let c = config(
        json!({"profiles": [{"name": "p", "training": {"instanceType": "trn1.32xlarge", "logicalNeuronCore": 2}}]}),
    );
    let error = Plan::new(&c, &World::default().snapshot(), NOW).unwrap_err();
    assert!(error.to_string().contains("logicalNeuronCore"), "{error}");
}

/// The older config `old` turned invalid while its plugin runs on n-0 and its template is in team-a: what runs.
fn an_invalid_older_config_running(world: &mut World) {
    let valid_before = config_at("old", "2026-01-01T00:00:00Z", json!({}));
    let mut invalid = valid_before.clone();
    invalid.spec.profiles = serde_json::from_value(
        json!([{"name": "p", "training": {"instanceType": "trn1.32xlarge", "logicalNeuronCore": 2}}]),
    )
    .unwrap();
    world.configs.insert(0, invalid);
    let before = super::desired(&valid_before);
    let mut daemon_set = before.daemon_set;
    daemon_set.metadata.uid = Some("uid-ds-old".into());
    world.daemon_sets.push(daemon_set);
    world.templates.extend(before.templates);
    world.plugin_pods.push(
        serde_json::from_value(json!({
            "metadata": {"name": "plugin-old-n-0", "namespace": "neuron-dra-driver", "uid": "uid-pod",
                "labels": {"neurondra.io/config": "old"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "neuron-dra-old",
                    "uid": "uid-ds-old", "controller": true}]},
            "spec": {"nodeName": "n-0"},
        }))
        .unwrap(),
    );
}

/// Hardening #26 item 11: an older config that turned invalid still holds what it runs: a newer config creates no
/// second plugin on its nodes and does not take its templates over.
#[test]
fn what_an_invalid_older_config_runs_is_not_taken_over() {
    let newer = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    world.configs = vec![newer.clone()];
    world.nodes = nodes(2);
    an_invalid_older_config_running(&mut world);
    let plan = Plan::new(&newer, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.driver, Driver::BlockedByConflict, "{:?}", plan.conflicts);
    assert_eq!(plan.conflicts.nodes.keys().collect::<Vec<_>>(), ["n-0"], "n-1 runs no plugin");
    assert!(plan.conflicts.templates.contains_key(&("team-a".into(), "pretrain".into())));
    assert!(plan.desired.templates.is_empty(), "team-a/pretrain is the older config's");

    // Once the newer config runs its own plugin (the older one's nodes overlapped later), it keeps it and updates it.
    world.daemon_sets.push(super::desired(&newer).daemon_set);
    let plan = Plan::new(&newer, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.driver, Driver::Apply, "{:?}", plan.conflicts);
}

/// A driver outside what the install allows (the install variables of its fences) is refused before
/// anything is planned, one line per field; the fences' judgement decides whether the plugin is written.
#[test]
fn the_install_decides_where_and_what_a_plugin_may_run() {
    use crate::logic::fence::Allowed;
    let allowed = Allowed {
        driver_namespaces: vec!["neuron-dra-driver".into()],
        image_repositories: vec!["public.ecr.aws/neuron/neuron-dra-driver".into()],
        kubelet_dirs: vec!["/var/lib/kubelet".into()],
    };
    let world = World::with_namespaces(&["team-a", "neuron-dra-driver", "kube-system"]);
    let outside = config(json!({"driver": {"namespace": "kube-system", "image": "example.com/evil:1"}}));
    let refused = Plan::new(&outside, &world.snapshot().with_fence(Ok(allowed.clone())), NOW).unwrap_err();
    let Refusal::InvalidSpec(refused) = refused else { panic!("refused as invalid: {refused}") };
    let paths: Vec<&str> = refused.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["spec.driver.namespace", "spec.driver.image"]);

    let inside = config(json!({}));
    let plan = Plan::new(&inside, &world.snapshot().with_fence(Ok(allowed.clone())), NOW).unwrap();
    assert_eq!((plan.driver, plan.unfenced), (Driver::Apply, None));
    let unfenced = world.snapshot().with_fence(Err("the fence is missing".into()));
    let plan = Plan::new(&inside, &unfenced, NOW).unwrap();
    assert_eq!((plan.driver, plan.unfenced.as_deref()), (Driver::Unfenced, Some("the fence is missing")));
}

/// Plugin pods trigger their config's reconcile only from its driver namespace: a tenant's pod with the same
/// labels elsewhere triggers nothing.
#[test]
fn only_plugin_pods_in_the_driver_namespace_trigger_their_config() {
    let world = World { configs: vec![config(json!({}))], ..World::default() };
    let owner = crate::controller::plugin_pod_owner(&world.stores().configs);
    let pod = |namespace: &str| -> crate::cluster::PodView {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "neuron-dra-operator", "neurondra.io/config": "c"}}}))
        .unwrap()
    };
    assert_eq!(owner(pod("neuron-dra-driver")).map(|c| c.name), Some("c".to_string()));
    assert_eq!(owner(pod("team-a")), None);
}

#[test]
fn the_plan_decides_what_goes_and_which_templates_are_replaced() {
    use crate::api::labels::ANNOTATION_SPEC_HASH;
    use crate::controller::pure::plan::Going;
    use crate::controller::pure::report::key;
    use kube::ResourceExt;
    let c = config(json!({}));
    let mut world = super::converged(&c);
    // An orphan (a template of a profile the config no longer has), one that only carries its label (owned by
    // another config), and a wanted template whose spec changed.
    let mut orphan = world.templates[0].clone();
    orphan.metadata.name = Some("gone".into());
    let mut look_alike = orphan.clone();
    look_alike.metadata.name = Some("look-alike".into());
    look_alike.metadata.owner_references.iter_mut().flatten().for_each(|r| r.uid = "another".into());
    world.templates[0].annotations_mut().insert(ANNOTATION_SPEC_HASH.into(), "older".into());
    world.templates.extend([orphan, look_alike]);
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    let going: Vec<String> = plan
        .unwanted
        .templates
        .iter()
        .map(|g| match g {
            Going::Delete(t) => format!("delete {}", key(t.as_ref())),
            Going::Release(t) => format!("release {}", key(t.as_ref())),
        })
        .collect();
    assert_eq!(going, ["delete team-a/gone"]);
    assert!(plan.unwanted.daemon_sets.is_empty() && plan.unwanted.device_classes.is_empty());
    let replaced: Vec<&String> = plan.replaced_templates.keys().collect();
    assert_eq!(replaced, [&key(&plan.desired.templates[0])]);
    assert!(plan.templates_in_place.is_empty());

    let paused = config(json!({"paused": true}));
    let plan = Plan::new(&paused, &world.snapshot(), NOW).unwrap();
    assert!(plan.unwanted.templates.is_empty(), "a paused pass removes nothing");
}
