//! Reconcile tests without a cluster: caches from fixtures, a mock API server, and the exact requests a reconcile
//! sends. The real-server behaviour is covered by `tests/controller.rs`; these pin down the decisions.

mod fence;
mod fixtures;
mod foreign;
mod logs;
mod outcome;
mod plan;
mod reads;
mod remediation;
mod shape;
mod steps;
mod unparseable;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::FINALIZER;
use crate::api::NeuronDRAConfig;
use crate::api::labels::ANNOTATION_SPEC_HASH;
use crate::devtools::simulate::fleet::{self, FleetSpec};
use crate::logic::desired::{self, Desired};
use crate::logic::validate::validate;
use fixtures::{Fixture, World};

const STATUS: &str = "PATCH /apis/neurondra.io/v1alpha1/neurondraconfigs/c/status";
const EVENT: &str = "POST /apis/events.k8s.io/v1/namespaces/default/events";
const SERVICE_ACCOUNT: &str = "PATCH /api/v1/namespaces/neuron-dra-driver/serviceaccounts/neuron-dra-c";
const CLUSTER_ROLE_BINDING: &str = "PATCH /apis/rbac.authorization.k8s.io/v1/clusterrolebindings/neuron-dra-c";
const DEVICE_CLASS: &str = "PATCH /apis/resource.k8s.io/v1/deviceclasses/neuron.aws.com";
const DAEMON_SET: &str = "/apis/apps/v1/namespaces/neuron-dra-driver/daemonsets/neuron-dra-c";
const TEMPLATE: &str = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates/pretrain";
/// Templates the cache does not hold are created, not applied.
const CREATE_TEMPLATE: &str = "POST /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates";

/// A config named `name`, created at `created`, with the cleanup finalizer, putting one template in team-a.
fn config_at(name: &str, created: &str, spec: Value) -> NeuronDRAConfig {
    let mut base = json!({"templates": {"namespaces": ["team-a"]},
        "profiles": [{"name": "pretrain", "training": {"instanceType": "trn2.48xlarge", "devices": 4}}]});
    base.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
            "creationTimestamp": created, "finalizers": [FINALIZER]},
        "spec": base,
    }))
    .unwrap()
}

/// `config` with its deletion begun now.
fn being_deleted(config: &NeuronDRAConfig) -> NeuronDRAConfig {
    let mut deleted = config.clone();
    deleted.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::logic::status::now()));
    deleted
}

fn config(spec: Value) -> NeuronDRAConfig {
    config_at("c", "2026-01-02T00:00:00Z", spec)
}

fn desired(config: &NeuronDRAConfig) -> Desired {
    desired::build(&validate(config).unwrap(), &["team-a".to_string()])
}

fn nodes(count: usize) -> Vec<Node> {
    let spec = FleetSpec {
        prefix: "n".into(),
        count,
        instance_type: "trn2.48xlarge".into(),
        dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
        neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
    };
    (0..count).map(|i| fleet::node(&spec, i)).collect()
}

/// The cluster holds everything `config` wants.
fn converged(config: &NeuronDRAConfig) -> World {
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(config), 0);
    world.configs.push(config.clone());
    world
}

/// `config` with the status its last reconcile wrote.
fn with_written_status(config: &NeuronDRAConfig, fixture: &Fixture) -> NeuronDRAConfig {
    let mut next = config.clone();
    next.status = Some(serde_json::from_value(fixture.last_status().expect("a status was written")).unwrap());
    // As the cache shows it once the write's event arrived: a newer version.
    next.metadata.resource_version = Some("2".into());
    next
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let conditions = status["conditions"].as_array().unwrap();
    let c = conditions.iter().find(|c| c["type"] == type_).unwrap_or_else(|| panic!("no {type_} in {status}"));
    let text = |key: &str| c[key].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

#[tokio::test]
async fn a_converged_config_writes_its_status_once_and_then_nothing() {
    let c = config(json!({}));
    let fixture = Fixture::new(&converged(&c));
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [STATUS], "the cache holds every object: only the status is new");
    assert_eq!(condition(&fixture.last_status().unwrap(), "Ready").0, "True");

    let settled = with_written_status(&c, &fixture);
    fixture.clear();
    fixture.reconcile(&settled).await.unwrap();
    assert_eq!(fixture.lines(), Vec::<String>::new(), "idle: not one request");
}

#[tokio::test]
async fn a_new_config_is_applied_with_the_plugin_last() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let daemon_set = format!("PATCH {DAEMON_SET}");
    let all = fixture.lines();
    // Each object the cache lacks is looked up before it is applied: the name may be another tool's.
    for write in [SERVICE_ACCOUNT, CLUSTER_ROLE_BINDING, DEVICE_CLASS, &daemon_set] {
        let look = write.replacen("PATCH", "GET", 1);
        let at = |line: &str| all.iter().position(|l| l == line);
        assert!(at(&look).is_some() && at(&look) < at(write), "{look} before {write}: {all:#?}");
    }
    let lines: Vec<String> = all.into_iter().filter(|l| !l.starts_with("GET ")).collect();
    let at = |line: &str| lines.iter().position(|l| l == line).unwrap_or_else(|| panic!("no {line} in {lines:#?}"));
    // Written at the same time, in no fixed order among themselves: the templates, and the plugin's identity, the
    // binding of its installed role and the class. The plugin waits for them. The operator writes no role and no
    // admission object.
    for before in [SERVICE_ACCOUNT, CLUSTER_ROLE_BINDING, DEVICE_CLASS] {
        assert!(at(before) < at(&daemon_set), "{before} before the DaemonSet: {lines:#?}");
    }
    assert!(!lines.iter().any(|l| l.contains("/clusterroles/") || l.contains("admissionregistration")), "{lines:#?}");
    assert!(lines.iter().any(|l| l == CREATE_TEMPLATE), "{lines:#?}");
    assert_eq!(lines.len(), 8, "{lines:#?}");
    assert_eq!(lines[6..], [STATUS, EVENT], "the change event goes out with the status");
    assert_eq!(fixture.event_reasons(), ["Created"]);
}

#[tokio::test]
async fn a_template_that_exists_though_the_cache_lacks_it_is_applied_over() {
    let c = config(json!({}));
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]).holding(&desired(&c), 0);
    world.templates.clear();
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.fail(CREATE_TEMPLATE, 409, "resourceclaimtemplates \"pretrain\" already exists", 1);
    // Ours, made by an earlier pass whose write the cache has not shown yet.
    let ours = serde_json::to_value(&desired(&c).templates[0]).unwrap();
    fixture.store(TEMPLATE, ours);
    fixture.reconcile(&c).await.unwrap();
    let (get, patch) = (format!("GET {TEMPLATE}"), format!("PATCH {TEMPLATE}"));
    assert_eq!(fixture.lines(), [CREATE_TEMPLATE, &get, &patch, STATUS, EVENT]);
    let status = fixture.last_status().unwrap();
    assert_eq!(condition(&status, "TemplatesReady").0, "True", "ours, so applied over and in place");
}

#[tokio::test]
async fn a_config_without_the_finalizer_gets_it_first_and_is_applied_in_the_same_pass() {
    let mut c = config(json!({}));
    c.metadata.finalizers = Some(vec!["example.com/other".into()]);
    let mut world = World::with_namespaces(&["team-a", "neuron-dra-driver"]);
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let sent = fixture.sent();
    assert_eq!(sent[0].line(), "PATCH /apis/neurondra.io/v1alpha1/neurondraconfigs/c");
    assert_eq!(
        sent[0].body,
        json!([{"op": "test", "path": "/metadata/finalizers", "value": ["example.com/other"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}]),
        "added beside the other finalizer, only if the list is still the one read"
    );
    let lines = fixture.lines();
    assert!(lines.iter().any(|l| l == CREATE_TEMPLATE), "{lines:#?}");
    assert_eq!(lines[lines.len() - 2..], [STATUS, EVENT], "{lines:#?}");
    assert_eq!(lines.iter().filter(|l| l.contains("/neurondraconfigs/c")).count(), 2, "finalizer and status only");
}

#[tokio::test]
async fn paused_writes_the_status_and_nothing_else() {
    let c = config(json!({"paused": true}));
    let mut world = converged(&c);
    // Drift everywhere: a hand-edited DaemonSet, a missing template, an orphan template of this config.
    world.daemon_sets[0].spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image =
        Some("edited:1".into());
    let mut orphan = world.templates.remove(0);
    orphan.metadata.name = Some("orphan".into());
    world.templates.push(orphan);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [STATUS]);
    let status = fixture.last_status().unwrap();
    assert_eq!(status["phase"], "Paused");
    assert_eq!(condition(&status, "TemplatesReady").1, "Missing");
}

/// Hardening #26 item 11: a node that newly overlaps an older config's keeps the newer config's plugin running on
/// every other node: its DaemonSet is neither deleted nor updated, and its conflicting template is kept.
#[tokio::test]
async fn a_node_conflict_keeps_a_running_daemon_set_and_its_templates_as_they_are() {
    let older = config_at("old", "2026-01-01T00:00:00Z", json!({"templates": {"namespaces": ["team-b"]}}));
    let newer = config(json!({"templates": {"namespaces": ["team-a", "team-b"]}}));
    let mut world = World::with_namespaces(&["team-a", "team-b", "neuron-dra-driver"]).holding(&desired(&newer), 0);
    world.configs = vec![older, newer.clone()];
    world.nodes = nodes(1);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&newer).await.unwrap();
    let lines = fixture.lines();
    assert!(!lines.iter().any(|l| l.contains("daemonsets")), "the running plugin is left alone: {lines:#?}");
    assert!(!lines.iter().any(|l| l.starts_with("DELETE")), "nothing of the newer config is deleted: {lines:#?}");
    assert!(fixture.event_reasons().contains(&"Conflict".to_string()));
    let status = fixture.last_status().unwrap();
    let (valid, reason, message) = condition(&status, "ConfigValid");
    assert_eq!((valid.as_str(), reason.as_str()), ("False", "Conflict"));
    assert!(message.contains("nodes n-0 are already selected by old"), "{message}");
    assert!(message.contains("team-b/pretrain already belong to old"), "{message}");
    assert_eq!(condition(&status, "DriverReady").1, "NotApplied");
}

#[tokio::test]
async fn a_failed_status_write_is_retried() {
    let c = config(json!({}));
    let fixture = Fixture::new(&converged(&c));
    fixture.fail(STATUS, 500, "etcd is away", 1);
    let error = fixture.reconcile(&c).await.unwrap_err();
    assert_eq!(error.category().as_str(), "StatusFailed");
    let action = super::error_policy(std::sync::Arc::new(fixtures::guarded(c.clone())), &error, fixture.ctx.clone());
    assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1)));
    assert_eq!(fixture.lines(), [STATUS, EVENT]);
    assert_eq!(fixture.event_reasons(), ["StatusFailed"]);

    fixture.clear();
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [STATUS], "the retry writes the status again");
}

#[tokio::test]
async fn a_changed_template_is_deleted_then_created() {
    let c = config(json!({}));
    let mut world = converged(&c);
    world.templates[0].annotations_mut().insert(ANNOTATION_SPEC_HASH.into(), "an-older-spec".into());
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [format!("DELETE {TEMPLATE}"), CREATE_TEMPLATE.into(), STATUS.into(), EVENT.into()]);
    assert_eq!(fixture.event_reasons(), ["Replaced"]);
    let created = &fixture.sent()[1].body;
    assert_eq!(
        created["metadata"]["annotations"][ANNOTATION_SPEC_HASH],
        json!(desired(&c).templates[0].annotations()[ANNOTATION_SPEC_HASH])
    );
}

#[tokio::test]
async fn a_removed_profile_loses_its_template_and_cleanup_removes_everything() {
    let c = config(json!({}));
    let mut world = converged(&c);
    let mut orphan = world.templates[0].clone();
    orphan.metadata.name = Some("dropped".into());
    world.templates.push(orphan);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let dropped = "DELETE /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates/dropped";
    assert_eq!(fixture.lines(), [dropped, STATUS, EVENT]);
    assert_eq!(fixture.event_reasons(), ["Deleted"]);

    let deleted = being_deleted(&c);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&deleted).await.unwrap();
    let lines = fixture.lines();
    let expected = [
        dropped.to_string(),
        format!("DELETE {TEMPLATE}"),
        format!("DELETE {DAEMON_SET}"),
        "DELETE /apis/rbac.authorization.k8s.io/v1/clusterrolebindings/neuron-dra-c".into(),
        "DELETE /api/v1/namespaces/neuron-dra-driver/serviceaccounts/neuron-dra-c".into(),
        "DELETE /apis/resource.k8s.io/v1/deviceclasses/neuron.aws.com".into(),
        "DELETE /apis/resource.k8s.io/v1/deviceclasses/ultraserver-nodes.neuron.aws.com".into(),
        EVENT.into(),
        "PATCH /apis/neurondra.io/v1alpha1/neurondraconfigs/c".into(),
    ];
    assert_eq!(lines, expected, "the driver namespace stays; the finalizer goes last");
}

#[tokio::test]
async fn templates_left_to_an_older_config_do_not_count_as_missing() {
    let older = config_at("old", "2026-01-01T00:00:00Z", json!({"nodeSelector": {"matchLabels": {"pool": "old"}}}));
    let newer = config(json!({"templates": {"namespaces": ["team-a", "team-b"]}}));
    let mut world = World::with_namespaces(&["team-a", "team-b", "neuron-dra-driver"]);
    world.configs = vec![older, newer.clone()];
    let fixture = Fixture::new(&world);
    fixture.reconcile(&newer).await.unwrap();
    let lines = fixture.lines();
    assert!(
        !lines.iter().any(|l| l.contains("team-a/resourceclaimtemplates")),
        "team-a/pretrain is the older config's"
    );
    let status = fixture.last_status().unwrap();
    assert_eq!(condition(&status, "ConfigValid").1, "Conflict");
    let (ready, reason, message) = condition(&status, "TemplatesReady");
    assert_eq!((ready.as_str(), reason.as_str()), ("True", "Applied"), "{message}");
    assert_eq!((&status["templates"]["namespaces"], &status["templates"]["count"]), (&json!(1), &json!(1)));
}

#[tokio::test]
async fn every_failed_write_reaches_the_events_and_the_error() {
    let c = config(json!({"templates": {"namespaces": ["team-a", "team-b"]}}));
    let mut world = World::with_namespaces(&["team-a", "team-b", "neuron-dra-driver"]);
    world.configs.push(c.clone());
    let fixture = Fixture::new(&world);
    fixture.fail(CREATE_TEMPLATE, 422, "team-a says no", 1);
    fixture.fail("POST /apis/resource.k8s.io/v1/namespaces/team-b/", 403, "team-b is forbidden", 1);
    let error = fixture.reconcile(&c).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("team-a says no") && text.contains("team-b is forbidden"), "{text}");
    let reasons = fixture.event_reasons();
    assert!(reasons.contains(&"Rejected".to_string()) && reasons.contains(&"Forbidden".to_string()), "{reasons:?}");
    let message = condition(&fixture.last_status().unwrap(), "TemplatesReady").2;
    assert!(message.contains("team-a/pretrain") && message.contains("team-b/pretrain"), "{message}");
}

#[tokio::test]
async fn a_deleted_config_leaves_no_metric_series_and_no_state() {
    let c = config(json!({}));
    let fixture = Fixture::new(&converged(&c));
    fixture.fail(STATUS, 500, "etcd is away", 1);
    let error = fixture.reconcile(&c).await.unwrap_err();
    super::error_policy(std::sync::Arc::new(fixtures::guarded(c.clone())), &error, fixture.ctx.clone());
    fixture.reconcile(&c).await.unwrap();
    assert!(fixture.ctx.metrics.encode().contains("config=\"c\""));

    let mut deleted = being_deleted(&c);
    deleted.metadata.resource_version = Some("3".into());
    fixture.reconcile(&deleted).await.unwrap();
    let metrics = fixture.ctx.metrics.encode();
    assert!(!metrics.contains("config=\"c\""), "{metrics}");
    assert!(fixture.ctx.memory.lock().unwrap().is_empty(), "the config's memory is dropped");
    assert!(fixture.ctx.applier.expectations.settled("NeuronDRAConfig//c", Some("1")), "no write awaited");
}

#[tokio::test]
async fn a_pass_waits_until_the_cache_shows_its_own_status_write() {
    let c = config(json!({}));
    let fixture = Fixture::new(&converged(&c));
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [STATUS]);
    let settled = with_written_status(&c, &fixture);
    fixture.clear();
    // A trigger (a plugin pod's event, say) before the status write's own event: the cache still holds `c`.
    let action = fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), Vec::<String>::new(), "nothing done twice from the older copy");
    assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1)));
    // The event arrived: the pass runs, and finds nothing to do.
    fixture.reconcile(&settled).await.unwrap();
    assert_eq!(fixture.lines(), Vec::<String>::new());
    assert_eq!(fixture.ctx.metrics.encode().matches("neuron_dra_operator_reconciles_total{config=\"c\"} 2").count(), 1);
}

#[test]
fn retries_back_off_from_one_second_to_five_minutes() {
    let delays: Vec<u64> = (1..=12).map(|failures| super::backoff(failures).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
}

/// The controller's runner waits on the configs' cache; the caches' own readiness must not depend on a second
/// waiter there (a store wakes only its latest waiter), or no reconcile would ever run.
#[tokio::test]
async fn the_caches_become_ready_while_the_runner_waits_on_the_configs_cache() {
    use kube::runtime::{reflector, watcher};
    let mut stores = World::default().stores();
    let (configs, mut configs_writer) = reflector::store();
    stores.configs = configs.clone();
    let ours = tokio::spawn(async move { stores.wait_ready().await });
    tokio::task::yield_now().await;
    let runner = tokio::spawn(async move { configs.wait_until_ready().await });
    tokio::task::yield_now().await;
    configs_writer.apply_watcher_event(&watcher::Event::InitDone);
    let within = std::time::Duration::from_secs(5);
    tokio::time::timeout(within, runner).await.expect("the runner starts").unwrap().unwrap();
    tokio::time::timeout(within, ours).await.expect("the other caches are ready").unwrap();
}
