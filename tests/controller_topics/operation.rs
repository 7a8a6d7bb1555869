//! Several configs, pausing, bad configs, an idle or killed operator, two replicas, metrics and events.

use crate::*;

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
        "neuron_dra_operator_api_requests_total{verb=\"create\",resource=\"resourceclaimtemplates\",code=\"201\"}",
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
