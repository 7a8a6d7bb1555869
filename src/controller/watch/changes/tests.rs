use super::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use std::collections::BTreeMap;

fn object(name: &str, uid: &str, data: &str, version: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), data.to_string())])),
        ..ConfigMap::default()
    }
}

/// What the tests' "operator" reads of a ConfigMap: its data, not its resourceVersion.
fn read(map: &ConfigMap) -> u64 {
    fingerprint(&map.data)
}

async fn triggers(events: Vec<Event<ConfigMap>>) -> Vec<String> {
    let stream = futures::stream::iter(events.into_iter().map(Ok));
    changes(stream, read)
        .map(|t| match t.unwrap() {
            Touched::Changed(o) => format!("{}:{}", o.metadata.name.unwrap(), o.metadata.resource_version.unwrap()),
            Touched::Relisted => "relisted".into(),
        })
        .collect()
        .await
}

#[tokio::test]
async fn a_write_that_changes_nothing_read_triggers_nothing() {
    let seen = triggers(vec![
        Event::Apply(object("a", "1", "x", "1")),
        Event::Apply(object("a", "1", "x", "2")),
        Event::Apply(object("a", "1", "y", "3")),
        Event::Apply(object("b", "2", "y", "4")),
    ])
    .await;
    assert_eq!(seen, ["a:1", "a:3", "b:4"]);
}

#[tokio::test]
async fn deletions_always_trigger_and_a_recreated_object_is_new() {
    let seen = triggers(vec![
        Event::Apply(object("a", "1", "x", "1")),
        Event::Delete(object("a", "1", "x", "2")),
        Event::Apply(object("a", "3", "x", "3")),
    ])
    .await;
    assert_eq!(seen, ["a:1", "a:2", "a:3"]);
}

#[tokio::test]
async fn a_relist_triggers_for_what_changed_or_vanished_while_the_watch_was_down() {
    let first_list = vec![
        Event::Init,
        Event::InitApply(object("a", "1", "x", "1")),
        Event::InitApply(object("b", "2", "x", "1")),
        Event::InitDone,
    ];
    let relist_same = vec![
        Event::Init,
        Event::InitApply(object("a", "1", "x", "5")),
        Event::InitApply(object("b", "2", "x", "5")),
        Event::InitDone,
    ];
    let relist_changed_and_lost = vec![Event::Init, Event::InitApply(object("a", "1", "z", "9")), Event::InitDone];
    let events = [first_list, relist_same, relist_changed_and_lost].concat();
    assert_eq!(triggers(events).await, ["a:1", "b:1", "a:9", "relisted"]);
}

#[test]
fn the_fingerprint_follows_content_only() {
    assert_eq!(read(&object("a", "1", "x", "1")), read(&object("b", "2", "x", "7")));
    assert_ne!(read(&object("a", "1", "x", "1")), read(&object("a", "1", "y", "1")));
}
