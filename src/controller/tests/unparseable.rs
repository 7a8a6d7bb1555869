//! A config the API server stored but this build cannot parse: reported once per error, its rollout kept.

use serde_json::json;

use super::fixtures::Fixture;
use super::{EVENT, STATUS, condition, config, converged};
use crate::api::NeuronDRAConfig;
use crate::controller::FINALIZER;

const READ_CONFIG: &str = "GET /apis/neurondra.io/v1alpha1/neurondraconfigs/c";

#[tokio::test]
async fn an_unparseable_config_is_reported_again_when_its_status_write_failed() {
    let invalid = kube::core::error_boundary::InvalidObject {
        error: "spec.profiles[0].training.devices: invalid value: 300".into(),
        metadata: serde_json::from_value(json!({"name": "c", "uid": "uid-c", "generation": 1})).unwrap(),
    };
    let guarded = std::sync::Arc::new(kube::core::DeserializeGuard::<NeuronDRAConfig>(Err(invalid)));
    let mut world = converged(&config(json!({})));
    // The stored object (as a plain read sees it) has a halted rollout, which must outlive the unreadable spec.
    let halted = json!({"revision": "new222", "version": "1.2.0", "state": "Halted", "step": 1});
    let mut stored = config(json!({}));
    stored.status = Some(serde_json::from_value(json!({"driver": {"rollout": halted}})).unwrap());
    world.configs.retain(|c| c.metadata.name.as_deref() != Some("c"));
    world.configs.push(stored);
    let fixture = Fixture::new(&world);
    fixture.fail(STATUS, 500, "etcd is away", 1);
    let reconcile = || crate::controller::reconcile::reconcile(guarded.clone(), fixture.ctx.clone());
    assert!(reconcile().await.is_err(), "the failed status write fails the reconcile");
    fixture.clear();
    reconcile().await.unwrap();
    assert_eq!(fixture.lines(), [READ_CONFIG, STATUS, EVENT], "reported after all");
    assert_eq!(fixture.last_status().unwrap()["driver"]["rollout"], halted, "the halt is kept");
    let (valid, reason, message) = condition(&fixture.last_status().unwrap(), "ConfigValid");
    assert_eq!((valid.as_str(), reason.as_str()), ("False", "Unparseable"));
    assert!(message.contains("devices: invalid value: 300"), "{message}");
    assert_eq!(fixture.last_status().unwrap()["phase"], "Degraded");
    fixture.clear();
    reconcile().await.unwrap();
    assert_eq!(fixture.lines(), Vec::<String>::new(), "reported once per distinct error");
}

/// Deleted while unparseable: what it owns goes (found by label and uid, no spec needed), then our finalizer,
/// removed only if the list is still the one read, and no status is written; without this the config would hang
/// in deletion until an operator that can parse it came along.
#[tokio::test]
async fn an_unparseable_config_being_deleted_is_cleaned_up_and_let_go() {
    let c = config(json!({}));
    let invalid = kube::core::error_boundary::InvalidObject {
        error: "spec.profiles[0].training.devices: invalid value: 300".into(),
        metadata: serde_json::from_value(json!({"name": "c", "uid": "uid-c", "generation": 2,
            "deletionTimestamp": "2026-01-03T00:00:00Z", "finalizers": ["example.com/other", FINALIZER]}))
        .unwrap(),
    };
    let guarded = std::sync::Arc::new(kube::core::DeserializeGuard::<NeuronDRAConfig>(Err(invalid)));
    let fixture = Fixture::new(&converged(&c));
    crate::controller::reconcile::reconcile(guarded, fixture.ctx.clone()).await.unwrap();
    let lines = fixture.lines();
    for owned in ["/daemonsets/neuron-dra-c", "/resourceclaimtemplates/pretrain", "/clusterrolebindings/neuron-dra-c"] {
        assert!(lines.iter().any(|l| l.starts_with("DELETE") && l.ends_with(owned)), "{owned} not deleted: {lines:?}");
    }
    assert!(!lines.iter().any(|l| l.ends_with("/status")), "no status for a config that is going: {lines:?}");
    assert_eq!(
        lines.last().unwrap(),
        "PATCH /apis/neurondra.io/v1alpha1/neurondraconfigs/c",
        "the finalizer goes last"
    );
    let patch = fixture.sent().last().unwrap().body.clone();
    assert_eq!(
        patch,
        json!([{"op": "test", "path": "/metadata/finalizers", "value": ["example.com/other", FINALIZER]},
            {"op": "replace", "path": "/metadata/finalizers", "value": ["example.com/other"]}])
    );
}
