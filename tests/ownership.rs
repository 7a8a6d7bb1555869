//! Who owns what, on the real control plane: objects another tool made under a name a config wants are reported
//! and left alone (never applied over, never deleted), and a conflict never tears down a plugin that runs.

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{TEST_LABEL, eventually};
use support::fleet::Fleet;
use support::scenario::{Scenario, TIMEOUT};

fn condition(config: &neuron_dra_operator::api::NeuronDRAConfig, type_: &str) -> (String, String, String) {
    let c = config.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == type_).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn train_only(namespace: &str) -> serde_json::Value {
    json!({"templates": {"namespaces": [namespace]},
        "profiles": [{"name": "train", "training": {"instanceType": "trn2.48xlarge", "devices": 4}}]})
}

/// The field managers that wrote an object.
fn managers<K: kube::Resource>(object: &K) -> Vec<String> {
    object.meta().managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect()
}

async fn wait_config_gone(s: &Scenario, name: &str) {
    eventually(TIMEOUT, "config gone", || async { s.configs().get_opt(name).await.ok()?.is_none().then_some(()) })
        .await;
}

/// Hardening #26 item 3: a DeviceClass of the config's name that another tool made (AWS's chart, say) is named in
/// `ConfigValid`, never applied over, and kept when the config goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_class_another_tool_made_is_reported_and_never_taken_over_or_deleted() {
    let s = Scenario::with_operator("foreign-class").await;
    let ns = s.namespace("a", &[]).await;
    let class = format!("{}.example.com", s.id);
    let theirs = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]}});
    let classes: Api<DeviceClass> = Api::all(s.client.clone());
    classes.patch(&class, &PatchParams::apply("helm"), &Patch::Apply(&theirs)).await.unwrap();
    let mut spec = train_only(&ns);
    spec["deviceClassName"] = json!(class);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let config = s.wait_condition(&s.id, "ConfigValid", "False").await;
    let (_, reason, message) = condition(&config, "ConfigValid");
    assert_eq!(reason, "ForeignObject", "{message}");
    assert!(message.contains(&format!("DeviceClass {class}")) && message.contains("helm"), "{message}");
    // The rest is applied.
    s.wait_condition(&s.id, "TemplatesReady", "True").await;
    let untouched = |c: &DeviceClass| {
        c.labels().get("app.kubernetes.io/managed-by").map(String::as_str) == Some("Helm")
            && c.owner_references().is_empty()
            && managers(c) == ["helm"]
    };
    let kept = classes.get(&class).await.unwrap();
    assert!(untouched(&kept), "{:?}", kept.metadata);
    s.delete_config(&s.id).await;
    wait_config_gone(&s, &s.id).await;
    let kept = classes.get_opt(&class).await.unwrap().expect("their DeviceClass outlives the config");
    assert!(untouched(&kept), "{:?}", kept.metadata);
    classes.delete(&class, &Default::default()).await.unwrap();
}

/// Hardening #26 item 3: a template of a profile's name that another tool made (AWS's UltraServer operator, say)
/// is named in `TemplatesReady`, left as it is, and kept when the config goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_another_tool_made_is_reported_and_never_taken_over_or_deleted() {
    let s = Scenario::with_operator("foreign-template").await;
    let ns = s.namespace("a", &[]).await;
    let theirs = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "ultraserver",
            "exactly": {"deviceClassName": "ultraserver.example.com"}}]}}}});
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(s.client.clone(), &ns);
    templates.patch("train", &PatchParams::apply("ultraserver-operator"), &Patch::Apply(&theirs)).await.unwrap();
    s.apply(&s.config(&s.id, train_only(&ns))).await.unwrap();
    let config = s.wait_condition(&s.id, "TemplatesReady", "False").await;
    let config = match condition(&config, "TemplatesReady").1.as_str() {
        "ForeignObject" => config,
        // A first pass may report it missing before its write found the name taken.
        _ => {
            eventually(TIMEOUT, "TemplatesReady ForeignObject", || async {
                let c = s.configs().get(&s.id).await.ok()?;
                (condition(&c, "TemplatesReady").1 == "ForeignObject").then_some(c)
            })
            .await
        }
    };
    let (_, _, message) = condition(&config, "TemplatesReady");
    assert!(message.contains(&format!("{ns}/train")) && message.contains("ultraserver-operator"), "{message}");
    let untouched = |t: &ResourceClaimTemplate| {
        t.labels().is_empty()
            && managers(t) == ["ultraserver-operator"]
            && t.spec
                .spec
                .devices
                .as_ref()
                .and_then(|d| d.requests.as_ref())
                .is_some_and(|r| r[0].name == "ultraserver")
    };
    assert!(untouched(&templates.get("train").await.unwrap()));
    s.delete_config(&s.id).await;
    wait_config_gone(&s, &s.id).await;
    let kept = templates.get_opt("train").await.unwrap().expect("their template outlives the config");
    assert!(untouched(&kept), "{:?}", kept.metadata);
}

/// A trn2 Node with `labels`, which only this test's configs select.
async fn node(s: &Scenario, name: &str, labels: &[(&str, &str)]) {
    let mut all: std::collections::BTreeMap<&str, &str> = labels.iter().copied().collect();
    all.insert(TEST_LABEL, &s.id);
    all.insert("node.kubernetes.io/instance-type", "trn2.48xlarge");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all}});
    let node: Node = serde_json::from_value(node).unwrap();
    Api::<Node>::all(s.client.clone()).create(&PostParams::default(), &node).await.unwrap();
}

async fn delete_nodes(s: &Scenario, names: &[&str]) {
    for name in names {
        Api::<Node>::all(s.client.clone()).delete(name, &DeleteParams::default()).await.unwrap();
    }
}

/// A config selecting the nodes labelled `pool=<id>` with one template in `namespace`.
fn pool_spec(s: &Scenario, pool: &str, namespace: &str) -> serde_json::Value {
    let mut spec = train_only(namespace);
    spec["nodeSelector"] = json!({"matchLabels": {format!("neurondra.io/test-{pool}"): s.id}});
    spec
}

/// Hardening #26 item 11: a node that newly falls under an older config too does not take the newer config's
/// plugin off its other nodes: its DaemonSet is kept as it runs (not deleted, not updated), and the overlap is
/// reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newly_overlapping_node_keeps_the_newer_configs_plugin_running() {
    let s = Scenario::with_operator("overlap-later").await;
    let (a, b) = (s.namespace("a", &[]).await, s.namespace("b", &[]).await);
    let (shared, own) = (format!("{}-shared", s.id), format!("{}-own", s.id));
    node(&s, &shared, &[("neurondra.io/test-new", &s.id)]).await;
    node(&s, &own, &[("neurondra.io/test-new", &s.id)]).await;
    let (old, new) = (format!("{}-old", s.id), format!("{}-new", s.id));
    s.apply(&s.config(&old, pool_spec(&s, "old", &a))).await.unwrap();
    s.wait_condition(&old, "ConfigValid", "True").await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // creation times are in seconds
    s.apply(&s.config(&new, pool_spec(&s, "new", &b))).await.unwrap();
    s.wait_condition(&new, "ConfigValid", "True").await;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let plugin = format!("neuron-dra-{new}");
    let running =
        eventually(TIMEOUT, "the newer config's plugin", || async { daemon_sets.get_opt(&plugin).await.ok()? }).await;

    // The older config's selector now matches one of the newer config's nodes.
    let label = json!({"metadata": {"labels": {"neurondra.io/test-old": s.id}}});
    Api::<Node>::all(s.client.clone()).patch(&shared, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let config = s.wait_condition(&new, "ConfigValid", "False").await;
    let (_, reason, message) = condition(&config, "ConfigValid");
    assert_eq!(reason, "Conflict");
    assert!(message.contains(&shared) && message.contains(&old) && !message.contains(&own), "{message}");
    // A few passes later the plugin is still the one that ran, unchanged.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = daemon_sets.get_opt(&plugin).await.unwrap().expect("the newer config's plugin is kept");
    assert_eq!((kept.uid(), kept.metadata.generation), (running.uid(), running.metadata.generation));
    assert_eq!(condition(&s.configs().get(&old).await.unwrap(), "ConfigValid").0, "True", "the older one wins");
    delete_nodes(&s, &[&shared, &own]).await;
}

/// Hardening #26 item 11: an older config whose spec turned invalid keeps what it runs: a newer config that
/// overlaps it creates no second plugin on its nodes and does not take its templates over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_older_config_keeps_its_plugin_nodes_and_templates() {
    // A simulated node, on which the older config's plugin pod runs.
    let f = Fleet::start("invalid-older", &[("trn2.48xlarge", 1)]).await;
    let s = &f.scenario;
    let a = s.namespace("a", &[]).await;
    let node_name = f.node("trn2.48xlarge", 0);
    let on_the_fleet = |namespace: &str| {
        let mut spec = train_only(namespace);
        spec["nodeSelector"] = f.node_selector();
        spec
    };
    let (old, new) = (format!("{}-old", s.id), format!("{}-new", s.id));
    s.apply(&s.config(&old, on_the_fleet(&a))).await.unwrap();
    s.wait_condition(&old, "TemplatesReady", "True").await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    eventually(TIMEOUT, "the older config's plugin pod", || async {
        let list = pods.list(&ListParams::default().labels(&format!("neurondra.io/config={old}"))).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    // Valid by the schema, refused by the catalog: trn1 has no logical NeuronCore setting.
    let mut invalid = on_the_fleet(&a);
    invalid["profiles"] =
        json!([{"name": "train", "training": {"instanceType": "trn1.32xlarge", "logicalNeuronCore": 2}}]);
    s.apply(&s.config(&old, invalid)).await.unwrap();
    let refused = s.wait_condition(&old, "ConfigValid", "False").await;
    assert_eq!(condition(&refused, "ConfigValid").1, "InvalidSpec");

    tokio::time::sleep(Duration::from_millis(1100)).await; // creation times are in seconds
    s.apply(&s.config(&new, on_the_fleet(&a))).await.unwrap();
    let config = s.wait_condition(&new, "ConfigValid", "False").await;
    let (_, reason, message) = condition(&config, "ConfigValid");
    assert_eq!(reason, "Conflict", "{message}");
    assert!(
        message.contains(&node_name) && message.contains(&format!("{a}/train")) && message.contains(&old),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    assert!(daemon_sets.get_opt(&format!("neuron-dra-{new}")).await.unwrap().is_none(), "no second plugin");
    assert!(daemon_sets.get_opt(&format!("neuron-dra-{old}")).await.unwrap().is_some(), "the running one kept");
    let train = s.templates(&a).get("train").await.unwrap();
    assert_eq!(train.labels()["neurondra.io/config"], old, "not taken over");
    f.clear().await;
}
