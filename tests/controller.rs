//! The controller on the real control plane, running as a process with the RBAC `config/rbac` ships.

mod support {
    pub mod cluster;
    pub mod scenario;
    pub mod tools;
}

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use support::cluster::{TEST_LABEL, eventually, kubectl};
use support::scenario::{Scenario, TIMEOUT};
use support::tools::kstatus;

fn condition(config: &neuron_dra_operator::api::NeuronDRAConfig, type_: &str) -> (String, String, String) {
    let c = config.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == type_).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn sample(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(support::cluster::repo(&format!("samples/{name}.yaml"))).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_reaches_ready_and_kubectl_shows_the_columns() {
    let s = Scenario::with_operator("samples").await;
    let mut configs = Vec::new();
    for (index, file) in ["training", "long-context-inference", "disaggregated", "mixed"].iter().enumerate() {
        let doc = sample(file);
        // The sample's profiles and driver settings, in namespaces of its own (samples share profile names).
        let a = s.namespace(&format!("{index}a"), &[]).await;
        let b = s.namespace(&format!("{index}b"), &[]).await;
        let selector_value = format!("{}-{index}", s.id);
        let selected = s.namespace(&format!("{index}s"), &[("neurondra.io/templates", &selector_value)]).await;
        let mut spec = doc["spec"].clone();
        spec.as_object_mut().unwrap().remove("nodeSelector");
        spec["templates"] = json!({"namespaces": [a, b], "namespaceSelector": {"matchLabels": {"neurondra.io/templates": selector_value}}});
        if let Some(driver) = spec.get_mut("driver") {
            driver.as_object_mut().unwrap().remove("namespace");
        }
        let name = format!("{}-{}", s.id, doc["metadata"]["name"].as_str().unwrap());
        s.apply(&s.config(&name, spec)).await.unwrap();
        let parsed = neuron_dra_operator::cli::parse_config(&serde_yaml::to_string(&doc).unwrap()).unwrap();
        let expected: Vec<String> = neuron_dra_operator::logic::validate::validate(&parsed)
            .unwrap()
            .claims
            .into_iter()
            .map(|c| c.template)
            .collect();
        configs.push((name, vec![a, b, selected], expected));
    }
    for (name, namespaces, expected) in &configs {
        let config = s.wait_ready(name).await;
        let status = config.status.unwrap();
        assert_eq!(status.templates.unwrap().count as usize, expected.len() * 3, "{name}");
        assert!(status.profiles.iter().all(|p| p.namespaces == 3), "{name}: {:?}", status.profiles);
        for ns in namespaces {
            let mut want: Vec<&str> = expected.iter().map(String::as_str).collect();
            want.sort();
            assert_eq!(s.template_names(ns).await, want, "{name} in {ns}");
        }
        let ds: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
        assert!(ds.get_opt(&format!("neuron-dra-{name}")).await.unwrap().is_some(), "{name}: DaemonSet");
    }
    assert!(Api::<DeviceClass>::all(s.client.clone()).get_opt("neuron.aws.com").await.unwrap().is_some());

    let table = kubectl(&["get", "ndc", "-l", &format!("{TEST_LABEL}={}", s.id)]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "NODES", "DEVICES", "HEALTHY", "TEMPLATES", "ROOM", "AGE"]);
    assert_eq!(table.lines().count(), 5, "{table}");
    assert!(table.lines().skip(1).all(|l| l.split_whitespace().nth(1) == Some("Ready")), "{table}");
}

/// Conflicts between two templates of different configs in the same namespace would make the samples test racy,
/// so the keep-it-so tests each use one small config.
fn small_spec(namespaces: &[&str]) -> serde_json::Value {
    json!({
        "templates": {"namespaces": namespaces},
        "profiles": [
            {"name": "train", "training": {"instanceType": "trn2.48xlarge", "devices": 4}},
            {"name": "serve", "disaggregated": {"prefill": {"devices": 8}, "decode": {"devices": 4}}},
        ],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_template_comes_back() {
    let s = Scenario::with_operator("deltmpl").await;
    let ns = s.namespace("a", &[]).await;
    s.apply(&s.config(&s.id, small_spec(&[&ns]))).await.unwrap();
    s.wait_templates(&ns, &["train", "serve-prefill", "serve-decode"]).await;
    let before = s.templates(&ns).get("train").await.unwrap().uid().unwrap();
    s.templates(&ns).delete("train", &DeleteParams::default()).await.unwrap();
    let after = eventually(TIMEOUT, "train re-created", || async {
        let t = s.templates(&ns).get_opt("train").await.ok()??;
        (t.uid()? != before).then_some(t)
    })
    .await;
    assert_eq!(after.labels()["neurondra.io/profile"], "train");
}

/// The plugin's DaemonSet is the operator's alone: its fence (`neuron-dra-plugin-pods`) refuses even an
/// administrator's edit, naming the rule. What others may still edit is restored: a binding widened to another
/// subject binds the plugin's ServiceAccount alone again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_plugin_is_refused_and_a_widened_binding_is_restored() {
    let s = Scenario::with_operator("dsedit").await;
    s.apply(&s.config(&s.id, small_spec(&[]))).await.unwrap();
    s.wait_ready(&s.id).await;
    let ds_name = format!("neuron-dra-{}", s.id);
    let api: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "kubelet-plugin", "image": "example.com/evil:1"}]}}}});
    match api.patch(&ds_name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status.message.contains("only the operator may create or change a DaemonSet"),
                "{}",
                status.message
            );
        }
        other => panic!("an administrator changed the plugin's DaemonSet: {other:?}"),
    }

    let bindings: Api<ClusterRoleBinding> = Api::all(s.client.clone());
    let widened = json!({"subjects": [
        {"kind": "ServiceAccount", "name": ds_name, "namespace": s.driver_namespace()},
        {"kind": "ServiceAccount", "name": "default", "namespace": "default"},
    ]});
    bindings.patch(&ds_name, &PatchParams::default(), &Patch::Merge(&widened)).await.unwrap();
    eventually(TIMEOUT, "the binding narrowed again", || async {
        let binding = bindings.get(&ds_name).await.ok()?;
        let subjects = binding.subjects.unwrap_or_default();
        (subjects.len() == 1 && subjects[0].name == ds_name).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_gains_and_loses_templates_with_the_selector_label() {
    let s = Scenario::with_operator("nslabel").await;
    let ns = s.namespace("x", &[]).await;
    let key = "neurondra.io/templates";
    let mut spec = small_spec(&[]);
    spec["templates"] = json!({"namespaceSelector": {"matchLabels": {key: s.id}}});
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_ready(&s.id).await;
    assert!(s.template_names(&ns).await.is_empty());
    s.label_namespace(&ns, key, Some(&s.id)).await;
    s.wait_templates(&ns, &["train", "serve-prefill", "serve-decode"]).await;
    s.label_namespace(&ns, key, None).await;
    s.wait_templates(&ns, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_profile_loses_its_templates_everywhere() {
    let s = Scenario::with_operator("rmprof").await;
    let a = s.namespace("a", &[]).await;
    let b = s.namespace("b", &[]).await;
    s.apply(&s.config(&s.id, small_spec(&[&a, &b]))).await.unwrap();
    s.wait_templates(&a, &["train", "serve-prefill", "serve-decode"]).await;
    let mut spec = small_spec(&[&a, &b]);
    spec["profiles"].as_array_mut().unwrap().remove(1);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&a, &["train"]).await;
    s.wait_templates(&b, &["train"]).await;
    let config = s.wait_ready(&s.id).await;
    assert_eq!(config.status.unwrap().templates.unwrap().count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_device_count_recreates_the_template() {
    let s = Scenario::with_operator("devcount").await;
    let ns = s.namespace("a", &[]).await;
    s.apply(&s.config(&s.id, small_spec(&[&ns]))).await.unwrap();
    s.wait_ready(&s.id).await;
    let before = s.templates(&ns).get("train").await.unwrap();
    let mut spec = small_spec(&[&ns]);
    spec["profiles"][0]["training"]["devices"] = json!(8);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let after = eventually(TIMEOUT, "train re-created with 8 devices", || async {
        let t = s.templates(&ns).get_opt("train").await.ok()??;
        let count = t.spec.spec.devices.as_ref()?.requests.as_ref()?[0].exactly.as_ref()?.count;
        (count == Some(8)).then_some(t)
    })
    .await;
    assert_ne!(after.uid(), before.uid(), "a template's spec is immutable: it must be a new object");
    let constraint = after.spec.spec.devices.unwrap().constraints.unwrap().remove(0);
    assert_eq!(constraint.match_attribute.as_deref(), Some("resource.aws.com/devicegroup8_id"));
    // The other templates were left alone.
    s.wait_ready(&s.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_config_removes_everything_it_created() {
    let s = Scenario::with_operator("cleanup").await;
    let a = s.namespace("a", &[]).await;
    let b = s.namespace("b", &[]).await;
    let class = format!("{}.example.com", s.id);
    let mut spec = small_spec(&[&a, &b]);
    spec["deviceClassName"] = json!(class);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let config = s.wait_ready(&s.id).await;
    assert!(config.finalizers().contains(&neuron_dra_operator::controller::FINALIZER.to_string()));
    let plugin = format!("neuron-dra-{}", s.id);
    s.delete_config(&s.id).await;
    eventually(TIMEOUT, "config gone", || async { s.configs().get_opt(&s.id).await.ok()?.is_none().then_some(()) })
        .await;
    for ns in [&a, &b] {
        assert!(s.template_names(ns).await.is_empty(), "templates left in {ns}");
    }
    let driver_ns = s.driver_namespace();
    assert!(Api::<DaemonSet>::namespaced(s.client.clone(), &driver_ns).get_opt(&plugin).await.unwrap().is_none());
    assert!(Api::<ServiceAccount>::namespaced(s.client.clone(), &driver_ns).get_opt(&plugin).await.unwrap().is_none());
    assert!(Api::<ClusterRoleBinding>::all(s.client.clone()).get_opt(&plugin).await.unwrap().is_none());
    // The plugin's ClusterRole is the install's, shared by every config: it stays.
    let role = neuron_dra_operator::logic::desired::PLUGIN_CLUSTER_ROLE;
    assert!(Api::<ClusterRole>::all(s.client.clone()).get_opt(role).await.unwrap().is_some());
    // Its DeviceClass had no other owner: it goes too.
    assert!(Api::<DeviceClass>::all(s.client.clone()).get_opt(&class).await.unwrap().is_none());
    // The driver namespace stays (another config may want it at any moment), empty of this config's objects.
    let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(s.client.clone()).get_opt(&driver_ns).await.unwrap();
    assert!(ns.is_some_and(|n| n.meta().deletion_timestamp.is_none()));
}

/// The tests of one topic each, in `tests/controller_topics/`.
mod controller_topics {
    mod operation;
}
