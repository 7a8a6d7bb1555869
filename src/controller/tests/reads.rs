//! What a reconcile reads: which config changes trigger one, and the snapshot's selection per config.

use kube::ResourceExt;
use kube::runtime::Predicate;
use serde_json::json;

use super::fixtures::{self, World};
use super::{being_deleted, config, config_at, nodes};
use crate::api::NeuronDRAConfig;
use crate::logic::validate::validate;

/// A config's own status write (a new resourceVersion and status) triggers no reconcile; a spec, label or deletion
/// change does.
#[test]
fn only_what_a_reconcile_reads_triggers_one() {
    let reads = crate::controller::what_a_reconcile_reads();
    let key = |config: &NeuronDRAConfig| reads.hash_property(&fixtures::guarded(config.clone()));
    let original = config(json!({}));
    let mut status_written = original.clone();
    status_written.metadata.resource_version = Some("2".into());
    status_written.status =
        Some(crate::api::NeuronDRAConfigStatus { observed_generation: Some(1), ..Default::default() });
    assert_eq!(key(&original), key(&status_written));

    let mut spec_changed = original.clone();
    spec_changed.metadata.generation = Some(2);
    let mut relabelled = original.clone();
    relabelled.labels_mut().insert("shard".into(), "a".into());
    let deleted = being_deleted(&original);
    for changed in [spec_changed, relabelled, deleted] {
        assert_ne!(key(&original), key(&changed));
    }
}

/// One snapshot asked for two configs gives each its own nodes: the selection is kept for the first only.
#[test]
fn a_snapshot_selects_each_config_s_own_nodes() {
    let mut world = World { nodes: nodes(3), ..World::default() };
    world.nodes[0].labels_mut().insert("pool".into(), "a".into());
    let everything = validate(&config(json!({}))).unwrap();
    let pool_a =
        validate(&config_at("a", "2026-01-01T00:00:00Z", json!({"nodeSelector": {"matchLabels": {"pool": "a"}}})))
            .unwrap();
    let snapshot = world.snapshot();
    let names = |config| snapshot.selected_nodes(config).iter().map(|n| n.name_any()).collect::<Vec<_>>();
    assert_eq!(names(&everything).len(), 3);
    assert_eq!(names(&pool_a), ["n-0"]);
    assert_eq!(names(&everything).len(), 3, "the first config's selection is kept");
}
