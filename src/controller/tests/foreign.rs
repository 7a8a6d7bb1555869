//! Objects another tool made under a name a config wants, or carrying its label without its uid: looked at, reported,
//! never applied over or deleted.

use serde_json::json;

use super::fixtures::{Fixture, World};
use super::{
    CREATE_TEMPLATE, DEVICE_CLASS, EVENT, STATUS, TEMPLATE, being_deleted, condition, config, converged, desired,
    with_written_status,
};

/// Hardening #26 item 3: a template another tool made under the same name is reported and left alone.
#[tokio::test]
async fn a_template_another_tool_made_is_left_alone_and_reported() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(&c), 0);
    world.templates.clear();
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.fail(CREATE_TEMPLATE, 409, "resourceclaimtemplates \"pretrain\" already exists", 1);
    fixture.store(
        TEMPLATE,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "pretrain", "namespace": "team-a",
            "managedFields": [{"manager": "ultraserver-operator", "operation": "Apply"}]},
        "spec": {"spec": {}}}),
    );
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(
        fixture.lines(),
        [CREATE_TEMPLATE, &format!("GET {TEMPLATE}"), STATUS, EVENT],
        "no apply, no delete; one Warning"
    );
    let (ok, reason, message) = condition(&fixture.last_status().unwrap(), "TemplatesReady");
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "ForeignObject"));
    assert!(message.contains("team-a/pretrain") && message.contains("ultraserver-operator"), "{message}");
    assert_eq!(fixture.event_reasons(), ["ForeignObject"]);

    // Already reported: the next pass looks again, and says nothing new.
    let reported = with_written_status(&c, &fixture);
    fixture.clear();
    fixture.fail(CREATE_TEMPLATE, 409, "resourceclaimtemplates \"pretrain\" already exists", 1);
    fixture.reconcile(&reported).await.unwrap();
    assert!(fixture.event_reasons().is_empty(), "{:?}", fixture.lines());
}

/// Hardening #26 item 3: a DeviceClass another tool made (AWS's chart) is not applied over; the rest is applied.
#[tokio::test]
async fn a_device_class_another_tool_made_is_left_alone_and_reported() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(&c), 0);
    world.device_classes.retain(|class| class.metadata.name.as_deref() != Some("neuron.aws.com"));
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    let path = DEVICE_CLASS.trim_start_matches("PATCH ");
    fixture.store(
        path,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "neuron.aws.com", "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "managedFields": [{"manager": "helm", "operation": "Update"}]},
        "spec": {}}),
    );
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [format!("GET {path}").as_str(), STATUS, EVENT], "looked at, never written");
    let (ok, reason, message) = condition(&fixture.last_status().unwrap(), "ConfigValid");
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "ForeignObject"));
    assert!(message.contains("DeviceClass neuron.aws.com") && message.contains("helm"), "{message}");
}

/// #28: a template with `efa: true` claims from the EFA driver's DeviceClass; without it the status says so (and
/// one Warning), instead of leaving the pods Pending with nothing but the scheduler's word; with it, Ready. The
/// class is read from the cache of every DeviceClass, never by a request of its own.
#[tokio::test]
async fn a_missing_efa_device_class_is_reported_on_the_templates_that_need_it() {
    let c = config(json!({"profiles": [
        {"name": "pretrain", "training": {"instanceType": "trn2.48xlarge", "devices": 4, "efa": true}}]}));
    let fixture = Fixture::new(&World { no_efa_driver: true, ..super::converged(&c) });
    fixture.reconcile(&c).await.unwrap();
    let (ok, reason, message) = condition(&fixture.last_status().unwrap(), "TemplatesReady");
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "DeviceClassMissing"));
    assert!(message.contains("pretrain") && message.contains("efa.networking.k8s.aws"), "{message}");
    assert_eq!(fixture.event_reasons(), ["DeviceClassMissing"]);

    assert_eq!(fixture.lines(), [STATUS, EVENT], "no request of its own");

    let fixture = Fixture::new(&super::converged(&c));
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(condition(&fixture.last_status().unwrap(), "TemplatesReady").1, "Applied");
}

/// Only what the config owns goes: the config's label is a filter anyone who may label an object can set, so an
/// object carrying it without the config's uid among its owners is left alone, in a normal pass and in cleanup.
#[tokio::test]
async fn a_look_alike_with_the_configs_label_but_not_its_uid_is_never_deleted() {
    let c = config(json!({}));
    let mut world = converged(&c);
    let mut look_alike = world.templates[0].clone();
    look_alike.metadata.name = Some("look-alike".into());
    look_alike.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-someone-else".into();
    let mut unowned = world.templates[0].clone();
    unowned.metadata.name = Some("unowned".into());
    unowned.metadata.owner_references = None;
    world.templates.extend([look_alike, unowned]);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    assert!(!fixture.lines().iter().any(|l| l.starts_with("DELETE")), "{:#?}", fixture.lines());

    let deleted = being_deleted(&c);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&deleted).await.unwrap();
    let lines = fixture.lines();
    assert!(lines.contains(&format!("DELETE {TEMPLATE}")), "its own template goes: {lines:#?}");
    assert!(!lines.iter().any(|l| l.ends_with("/look-alike") || l.ends_with("/unowned")), "{lines:#?}");
}
