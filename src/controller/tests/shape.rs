//! The templates' shape follows whose DeviceClasses the cluster holds: a request leaves its `resourceType` selector
//! to a class the operator made (or is about to make), and keeps it where another tool made the class. And it
//! follows the server's scheduler: every device of a node is `All` before 1.36, a count from then on.

use k8s_openapi::api::resource::v1::DeviceClass;
use kube::ResourceExt;
use serde_json::json;

use super::fixtures::{Fixture, World};
use super::plan::NOW;
use super::{CREATE_TEMPLATE, EVENT, STATUS, TEMPLATE, config, converged, desired};
use crate::api::labels::ANNOTATION_SPEC_HASH;
use crate::controller::pure::plan::Plan;
use crate::logic::desired::{Allocator, OwnClasses, VERSION_RECHECK, build_with};
use crate::logic::validate::validate;

/// A DeviceClass of `name` as AWS's chart makes it: Helm's label, selecting by driver alone.
fn helms(name: &str) -> DeviceClass {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]}}))
    .unwrap()
}

#[test]
fn a_class_is_the_operators_unless_another_tool_made_one_of_its_name() {
    let c = config(json!({"profiles": [
        {"name": "pretrain", "training": {"instanceType": "trn2.48xlarge", "devices": 4}},
        {"name": "us", "longContextInference": {"instanceType": "trn2u.48xlarge", "ultraServerNodes": 1}},
    ]}));
    let shaped = |own| build_with(&validate(&c).unwrap(), &["team-a".to_string()], own, Allocator::default()).templates;
    let planned = |world: &World| Plan::new(&c, &world.snapshot(), NOW).unwrap().desired.templates;
    let absent = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    assert_eq!(planned(&absent), shaped(OwnClasses::BOTH), "absent: this pass creates them");
    let ours = absent.clone().holding(&desired(&c), 0);
    assert_eq!(planned(&ours), shaped(OwnClasses::BOTH));

    let mut theirs = absent.clone();
    theirs.foreign_device_classes.push(helms("neuron.aws.com"));
    assert_eq!(planned(&theirs), shaped(OwnClasses { devices: false, nodes: true }));
    theirs.foreign_device_classes.push(helms("ultraserver-nodes.neuron.aws.com"));
    assert_eq!(planned(&theirs), shaped(OwnClasses::NEITHER));
}

/// The upgrade that dropped the selector: a template in the earlier shape is replaced once (its spec is immutable),
/// then left alone.
#[tokio::test]
async fn a_template_in_the_earlier_shape_is_replaced_once() {
    let c = config(json!({}));
    let mut world = converged(&c);
    let earlier =
        build_with(&validate(&c).unwrap(), &["team-a".to_string()], OwnClasses::NEITHER, Allocator::default());
    let earlier_hash = earlier.templates[0].annotations()[ANNOTATION_SPEC_HASH].clone();
    world.templates[0].spec = earlier.templates[0].spec.clone();
    world.templates[0].annotations_mut().insert(ANNOTATION_SPEC_HASH.into(), earlier_hash);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [format!("DELETE {TEMPLATE}"), CREATE_TEMPLATE.into(), STATUS.into(), EVENT.into()]);
    let created = &fixture.sent()[1].body;
    let selectors = &created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"];
    assert_eq!(
        *selectors,
        json!([{"cel": {"expression": "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"}}])
    );

    let fixture = Fixture::new(&converged(&c));
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [STATUS], "in the new shape: nothing to write");
}

/// A server upgraded across 1.36 under the operator: the whole-node template, `All` so far, is replaced by its exact
/// count (a template's spec is immutable); until then the config is looked at again every `VERSION_RECHECK`, as
/// no event announces an upgrade; afterwards nothing more is written and nothing waits for a version.
#[tokio::test]
async fn a_whole_node_template_is_replaced_by_its_count_once_the_server_searches_combinations() {
    let c =
        config(json!({"profiles": [{"name": "node", "training": {"instanceType": "trn2.48xlarge", "devices": 16}}]}));
    let on_older = build_with(&validate(&c).unwrap(), &["team-a".to_string()], OwnClasses::BOTH, Allocator::Orderings);
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&on_older, 0);
    world.configs.push(c.clone());
    let plan = Plan::new(&c, &world.snapshot(), NOW).unwrap();
    assert_eq!(plan.desired.templates, on_older.templates, "converged on the older server");
    let fixture = Fixture::new(&world);
    let action = fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [STATUS]);
    assert_eq!(action, kube::runtime::controller::Action::requeue(VERSION_RECHECK));

    world.allocator = Allocator::Combinations;
    let fixture = Fixture::new(&world);
    let action = fixture.reconcile(&c).await.unwrap();
    let node_template = TEMPLATE.replace("/pretrain", "/node");
    assert_eq!(
        fixture.lines(),
        [format!("DELETE {node_template}"), CREATE_TEMPLATE.into(), STATUS.into(), EVENT.into()]
    );
    let created = &fixture.sent()[1].body["spec"]["spec"]["devices"]["requests"][0]["exactly"];
    assert_eq!((&created["allocationMode"], &created["count"]), (&json!("ExactCount"), &json!(16)));
    let status = fixture.last_status().unwrap();
    assert_eq!(
        status["profiles"][0]["requests"],
        json!([{"template": "node", "allocationMode": "ExactCount", "charge": 16}])
    );
    assert_ne!(action, kube::runtime::controller::Action::requeue(VERSION_RECHECK));
}
