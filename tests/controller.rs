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
    let role = neuron_dra_operator::logic::build::PLUGIN_CLUSTER_ROLE;
    assert!(Api::<ClusterRole>::all(s.client.clone()).get_opt(role).await.unwrap().is_some());
    // Its DeviceClass had no other owner: it goes too.
    assert!(Api::<DeviceClass>::all(s.client.clone()).get_opt(&class).await.unwrap().is_none());
    // The driver namespace stays (another config may want it at any moment), empty of this config's objects.
    let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(s.client.clone()).get_opt(&driver_ns).await.unwrap();
    assert!(ns.is_some_and(|n| n.meta().deletion_timestamp.is_none()));
}

/// A Node of a supported type that only this test's configs select.
async fn node(s: &Scenario, name: &str) -> Node {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {TEST_LABEL: s.id, "node.kubernetes.io/instance-type": "trn2.48xlarge"}},
    }))
    .unwrap();
    Api::<Node>::all(s.client.clone()).create(&PostParams::default(), &node).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_configs_that_overlap_do_not_fight_the_older_wins() {
    let s = Scenario::with_operator("conflict").await;
    let ns = s.namespace("a", &[]).await;
    let node_name = format!("{}-node", s.id);
    node(&s, &node_name).await;
    let old = format!("{}-old", s.id);
    let new = format!("{}-new", s.id);
    let class = format!("{}.example.com", s.id);
    let mut old_spec = small_spec(&[&ns]);
    old_spec["deviceClassName"] = json!(class);
    s.apply(&s.config(&old, old_spec)).await.unwrap();
    s.wait_condition(&old, "ConfigValid", "True").await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // creation times are in seconds
    let mut spec = small_spec(&[&ns]);
    spec["profiles"] = json!([{"name": "train", "training": {"devices": 16}}, {"name": "other", "training": {}}]);
    spec["deviceClassName"] = json!(class);
    s.apply(&s.config(&new, spec)).await.unwrap();
    let newer = s.wait_condition(&new, "ConfigValid", "False").await;
    let (_, reason, message) = condition(&newer, "ConfigValid");
    assert_eq!(reason, "Conflict");
    assert!(message.contains(&node_name), "{message}");
    assert!(message.contains(&format!("{ns}/train")), "{message}");
    assert!(message.contains(&old), "{message}");
    // The older config keeps its template and its DaemonSet; the newer applies only what does not conflict.
    let train = s.templates(&ns).get("train").await.unwrap();
    assert_eq!(train.labels()["neurondra.io/config"], old);
    s.wait_templates(&ns, &["train", "serve-prefill", "serve-decode", "other"]).await;
    let ds: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    assert!(ds.get_opt(&format!("neuron-dra-{old}")).await.unwrap().is_some());
    assert!(ds.get_opt(&format!("neuron-dra-{new}")).await.unwrap().is_none());
    let older = s.configs().get(&old).await.unwrap();
    assert_eq!(condition(&older, "ConfigValid").0, "True");
    // Both own the shared DeviceClass.
    let classes: Api<DeviceClass> = Api::all(s.client.clone());
    eventually(TIMEOUT, "two owners of the DeviceClass", || async {
        (classes.get_opt(&class).await.ok()??.owner_references().len() == 2).then_some(())
    })
    .await;
    // Removing the older config hands everything to the newer one; the DeviceClass stays for it.
    s.delete_config(&old).await;
    s.wait_condition(&new, "ConfigValid", "True").await;
    eventually(TIMEOUT, "the DeviceClass kept for the remaining config", || async {
        let owners = classes.get_opt(&class).await.ok()??.owner_references().to_vec();
        (owners.len() == 1 && owners[0].name == new).then_some(())
    })
    .await;
    eventually(TIMEOUT, "train taken over", || async {
        let t = s.templates(&ns).get_opt("train").await.ok()??;
        (t.labels().get("neurondra.io/config") == Some(&new)).then_some(())
    })
    .await;
    Api::<Node>::all(s.client.clone()).delete(&node_name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_stops_writes_and_shows_paused() {
    let s = Scenario::with_operator("paused").await;
    let ns = s.namespace("a", &[]).await;
    s.apply(&s.config(&s.id, small_spec(&[&ns]))).await.unwrap();
    s.wait_ready(&s.id).await;
    let mut spec = small_spec(&[&ns]);
    spec["paused"] = json!(true);
    s.apply(&s.config(&s.id, spec.clone())).await.unwrap();
    eventually(TIMEOUT, "phase Paused", || async {
        let c = s.configs().get(&s.id).await.ok()?;
        (c.status?.phase == Some(neuron_dra_operator::api::Phase::Paused)).then_some(())
    })
    .await;
    let writes = s.operator().writes();
    s.templates(&ns).delete("train", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(s.templates(&ns).get_opt("train").await.unwrap().is_none(), "paused: the template stays deleted");
    // At most the status write that reports the missing template.
    assert!(s.operator().writes() <= writes + 1, "paused config was written to");
    spec["paused"] = json!(false);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&ns, &["train", "serve-prefill", "serve-decode"]).await;
    s.wait_ready(&s.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_or_unreadable_config_does_not_stop_the_others() {
    let s = Scenario::with_operator("malformed").await;
    let ns = s.namespace("a", &[]).await;
    // Accepted by the API server (int-or-string), but no 32-bit count: the operator cannot parse it.
    let mut unreadable = small_spec(&[]);
    unreadable["driver"] = json!({"updateStrategy": {"maxSurge": 99_999_999_999_i64}});
    let bad = format!("{}-bad", s.id);
    // Through kubectl: the typed client itself cannot read the server's answer.
    let document = serde_json::to_string(&s.config(&bad, unreadable)).unwrap();
    support::cluster::kubectl_with(
        &support::cluster::kubeconfig(),
        &["apply", "--server-side", "-f", "-"],
        Some(&document),
    )
    .unwrap();
    // Accepted by the API server, refused by the catalog.
    let mut invalid = small_spec(&[&ns]);
    invalid["profiles"][0]["training"] = json!({"instanceType": "trn1.32xlarge", "logicalNeuronCore": 2});
    let wrong = format!("{}-wrong", s.id);
    s.apply(&s.config(&wrong, invalid)).await.unwrap();
    let good = format!("{}-good", s.id);
    let mut spec = small_spec(&[&ns]);
    spec["profiles"] = json!([{"name": "fine", "training": {}}]);
    s.apply(&s.config(&good, spec)).await.unwrap();

    s.wait_ready(&good).await;
    let wrong_config = s.wait_condition(&wrong, "ConfigValid", "False").await;
    let (_, reason, message) = condition(&wrong_config, "ConfigValid");
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("spec.profiles[0].training.logicalNeuronCore"), "{message}");
    assert!(s.templates(&ns).get_opt("serve-prefill").await.unwrap().is_none(), "nothing half-applied");
    // As GitOps tools read them (docs/gitops.md): kstatus itself over the stored objects says the refused config
    // failed and the good one is current.
    assert_eq!(condition(&wrong_config, "Stalled").0, "True");
    let objects = kubectl(&["get", "ndc", &wrong, &good, "-o", "json"]);
    let items: serde_json::Value = serde_json::from_str(&objects).unwrap();
    let stream: String = items["items"].as_array().unwrap().iter().map(|o| format!("{o}\n")).collect();
    let verdicts = kstatus(&stream);
    assert!(verdicts.contains(&format!("NeuronDRAConfig/{wrong} Failed spec.profiles[0]")), "{verdicts}");
    assert!(verdicts.contains(&format!("NeuronDRAConfig/{good} Current")), "{verdicts}");
    // A config no operator selects has only the CRD's default status: in progress, never Current.
    let mut unseen = s.config(&format!("{}-unseen", s.id), small_spec(&[&ns]));
    unseen["metadata"]["labels"][TEST_LABEL] = json!(format!("{}-nobody", s.id));
    s.apply(&unseen).await.unwrap();
    let unseen = kubectl(&["get", "ndc", &format!("{}-unseen", s.id), "-o", "json"]);
    let verdict = kstatus(&unseen);
    assert!(
        verdict.contains(" InProgress NeuronDRAConfig generation is 1, but latest observed generation is 0"),
        "{verdict}"
    );
    s.delete_config(&format!("{}-unseen", s.id)).await;
    let bad_config = eventually(TIMEOUT, "bad config reported", || async {
        let value: serde_json::Value = serde_json::from_str(&kubectl(&["get", "ndc", &bad, "-o", "json"])).ok()?;
        let conditions = value["status"]["conditions"].as_array()?.clone();
        conditions.into_iter().find(|c| c["type"] == "ConfigValid" && c["reason"] == "Unparseable")
    })
    .await;
    assert_eq!(bad_config["status"], "False");
    let events =
        kubectl(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={wrong}"), "-o", "json"]);
    assert!(events.contains("InvalidSpec"), "a Warning event names the problem");
    // Fixing it (as the same field manager) makes it work.
    let fixed = serde_json::to_string(&s.config(&bad, small_spec(&[]))).unwrap();
    support::cluster::kubectl_with(
        &support::cluster::kubeconfig(),
        &["apply", "--server-side", "-f", "-"],
        Some(&fixed),
    )
    .unwrap();
    s.wait_ready(&bad).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_operator_writes_nothing() {
    let s = Scenario::with_operator("idle").await;
    let ns = s.namespace("a", &[]).await;
    s.apply(&s.config(&s.id, small_spec(&[&ns]))).await.unwrap();
    s.wait_ready(&s.id).await;
    tokio::time::sleep(Duration::from_secs(3)).await; // let the DaemonSet controller's status settle
    let before = s.operator().writes();
    assert!(before > 0, "the counter sees the writes that created everything");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = s.operator().writes();
    assert_eq!(after, before, "writes while idle:\n{}", s.operator().metrics());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_rollout_the_next_start_converges() {
    let mut s = Scenario::with_operator("killed").await;
    let mut namespaces = Vec::new();
    for i in 0..20 {
        namespaces.push(s.namespace(&format!("n{i}"), &[]).await);
    }
    let refs: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    s.apply(&s.config(&s.id, small_spec(&refs))).await.unwrap();
    // Kill it as soon as the rollout has started but not finished.
    eventually(TIMEOUT, "rollout under way", || async {
        let mut present = 0;
        for ns in &namespaces {
            present += s.template_names(ns).await.len();
        }
        (present > 0).then_some(())
    })
    .await;
    s.operator.as_mut().unwrap().kill();
    s.operator = Some(s.start_operator(&[]));
    let config = s.wait_ready(&s.id).await;
    assert_eq!(config.status.unwrap().templates.unwrap().count, 60);
    for ns in &namespaces {
        assert_eq!(s.template_names(ns).await, ["serve-decode", "serve-prefill", "train"], "{ns}");
    }
    let ds: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let all = ds.list(&Default::default()).await.unwrap();
    assert_eq!(all.items.len(), 1, "one DaemonSet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_replicas_only_the_leader_writes_and_the_other_takes_over() {
    let mut s = Scenario::with_operator("replicas").await;
    let ns = s.namespace("a", &[]).await;
    eventually(TIMEOUT, "first replica leads", || async {
        s.operator().log_text().contains("became the leader").then_some(())
    })
    .await;
    let mut standby = s.start_operator(&[]);
    eventually(TIMEOUT, "standby serves /healthz", || async { (standby.http_get("/healthz")?.0 == 200).then_some(()) })
        .await;
    s.apply(&s.config(&s.id, small_spec(&[&ns]))).await.unwrap();
    s.wait_ready(&s.id).await;
    assert!(s.operator().writes() > 0);
    assert_eq!(standby.writes(), 0, "the standby wrote:\n{}", standby.metrics());
    assert!(!standby.log_text().contains("became the leader"));
    assert_eq!(s.operator().http_get("/readyz").map(|r| r.0), Some(200));

    // A graceful stop releases the lease: the standby takes over and acts on the next change.
    let status = s.operator.as_mut().unwrap().terminate().unwrap();
    assert!(status.success(), "SIGTERM is a clean exit: {status:?}");
    eventually(TIMEOUT, "standby leads", || async { standby.log_text().contains("became the leader").then_some(()) })
        .await;
    let mut spec = small_spec(&[&ns]);
    spec["profiles"].as_array_mut().unwrap().push(json!({"name": "extra", "training": {"devices": 1}}));
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&ns, &["train", "serve-prefill", "serve-decode", "extra"]).await;
    assert!(standby.writes() > 0);
    assert!(standby.is_running());
    s.operator = Some(standby);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_events_report_the_work() {
    let s = Scenario::with_operator("metrics").await;
    let ns = s.namespace("a", &[]).await;
    s.apply(&s.config(&s.id, small_spec(&[&ns]))).await.unwrap();
    s.wait_ready(&s.id).await;
    let metrics = s.operator().metrics();
    for family in [
        "neuron_dra_operator_reconciles_total",
        "neuron_dra_operator_reconcile_duration_seconds_bucket",
        "neuron_dra_operator_managed_objects",
        "neuron_dra_operator_api_requests_total{verb=\"create\",resource=\"resourceclaimtemplates\"}",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    // The change event is published while the status is written, so it may land just after Ready.
    let selector = format!("involvedObject.name={}", s.id);
    let created = format!("ResourceClaimTemplate {ns}/");
    eventually(TIMEOUT, "a Created event naming the templates", || async {
        let events = kubectl(&["get", "events", "-A", "--field-selector", &selector]);
        (events.contains("Created") && events.contains(&created)).then_some(())
    })
    .await;
    s.templates(&ns).delete("train", &DeleteParams::default()).await.unwrap();
    s.wait_templates(&ns, &["train", "serve-prefill", "serve-decode"]).await;
    let mut spec = small_spec(&[&ns]);
    spec["profiles"].as_array_mut().unwrap().remove(0);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    s.wait_templates(&ns, &["serve-prefill", "serve-decode"]).await;
    eventually(TIMEOUT, "a Deleted event", || async {
        let events = kubectl(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={}", s.id)]);
        events.contains("Deleted").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_driver_namespace_is_waited_for_and_created_again() {
    let s = Scenario::with_operator("nsterm").await;
    s.apply(&s.config(&s.id, small_spec(&[]))).await.unwrap();
    s.wait_ready(&s.id).await;
    // Someone deletes the driver namespace: while it terminates nothing can be created in it.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(s.client.clone());
    let driver_ns = s.driver_namespace();
    let before = namespaces.get(&driver_ns).await.unwrap().uid().unwrap();
    namespaces.delete(&driver_ns, &DeleteParams::default()).await.unwrap();
    s.wait_condition(&s.id, "DriverReady", "False").await;
    // Once it is gone the operator creates it anew, with the plugin, and is Ready again.
    let config = s.wait_ready(&s.id).await;
    let ns = namespaces.get(&driver_ns).await.unwrap();
    assert_ne!(ns.uid().unwrap(), before, "a new namespace");
    // The plugin mounts host paths: the namespace the operator creates admits privileged pods, and says so.
    assert_eq!(ns.labels().get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("privileged"));
    let ds: Api<DaemonSet> = Api::namespaced(s.client.clone(), &driver_ns);
    assert!(ds.get_opt(&format!("neuron-dra-{}", s.id)).await.unwrap().is_some());
    assert_eq!(condition(&config, "DriverReady").1, "RolloutComplete");
    // Waiting is not failing: no Warning events.
    let events =
        kubectl(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={},type=Warning", s.id)]);
    assert!(!events.contains(&s.id), "{events}");
}
