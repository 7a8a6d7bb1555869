//! A release on the control plane: install, upgrade, uninstall, and a refused first install.

use crate::*;

fn helm_release(release: &str, namespace: &str) -> Value {
    let out = helm(&["list", "-n", namespace, "-o", "json", "--filter", &format!("^{release}$")]).ok("helm list");
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(list.len(), 1, "{out}");
    list[0].clone()
}

/// The driver namespace of a release's configs in these tests: in the cluster's allow-list (`*-driver`, the tests'
/// widening of it), and the only one in the release's. The cluster's plugin fences are the shared ones
/// `cluster::install` applied (one set per cluster: the release leaves them out, `fence.clusterObjects=false`): the
/// release's operator reads its allow-list there, and may start a plugin only once `neuron-dra-plugin-pods` names
/// its ServiceAccount among `operators` (`also_operator`); its own policy keeps it to the release's allow-list.
fn release_driver_namespace(s: &Scenario) -> String {
    format!("{}-driver", s.id)
}

/// The samples, each made this test's own: its namespaces, the test label, a node selector no node matches, the
/// release's driver namespace.
async fn sample_configs(s: &Scenario) -> Vec<Value> {
    let mut configs = Vec::new();
    let samples = kustomize("config/samples").into_iter().filter(|o| o["kind"] == "NeuronDRAConfig");
    for (index, sample) in samples.enumerate() {
        let namespace = s.namespace(&index.to_string(), &[]).await;
        let mut spec = sample["spec"].clone();
        let fields = spec.as_object_mut().unwrap();
        fields.remove("nodeSelector");
        fields.insert("templates".into(), json!({"namespaces": [namespace]}));
        let driver = fields.entry("driver").or_insert(json!({}));
        driver.as_object_mut().unwrap().insert("namespace".into(), json!(release_driver_namespace(s)));
        let name = format!("{}-{}", s.id, sample["metadata"]["name"].as_str().unwrap());
        configs.push(s.config(&name, spec));
    }
    configs
}

async fn wait_gone(kind: &str, name: &str, namespace: Option<&str>) {
    cluster::eventually(Duration::from_secs(60), &format!("{kind} {name} deleted"), || async {
        get(kind, name, namespace).err().filter(|e| e.contains("NotFound")).map(|_| ())
    })
    .await;
}

/// The documented `helm install` (one sample as the chart's own NeuronDRAConfig, the others applied as a user
/// would); the operator, running under the chart's ServiceAccount, reconciles every sample to Ready. The documented
/// `helm upgrade`s turn monitoring on, change the Deployment and drop the chart's config; the documented
/// `helm uninstall` removes everything but the CRD. Release and namespace are this test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_and_uninstall_on_the_control_plane() {
    let mut s = Scenario::new("helm").await;
    tools::install_prometheus_crds();
    let (release, namespace) = (s.id.clone(), s.id.clone());
    let fullname = format!("{release}-neuron-dra-operator");
    let mut configs = sample_configs(&s).await;
    let chart_config = configs.remove(0);
    let chart_config_name = chart_config["metadata"]["name"].as_str().unwrap().to_string();
    let values = json!({
        "neuronDRAConfig": {
            "enabled": true,
            "name": chart_config_name,
            "labels": chart_config["metadata"]["labels"],
            "spec": chart_config["spec"],
        },
        "fence": {"clusterObjects": false, "driverNamespaces": [release_driver_namespace(&s)]},
    });
    let values_file = temp_dir(&format!("helm-{release}")).join("values.json");
    std::fs::write(&values_file, values.to_string()).unwrap();

    // Every test shares the CRD cluster::install applied: this release leaves it alone (tests/helm_upgrade.rs has a
    // release of its own manage it).
    let installed = helm_doc(
        docs::HELM_INSTALL,
        &release,
        &release,
        &["-f", values_file.to_str().unwrap(), "--set", "crds.enabled=false"],
    );
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert_eq!(helm_release(&release, &namespace)["status"], "deployed");
    let deployment = get("deployment", &fullname, Some(&namespace)).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    let config = get("ndc", &chart_config_name, None).unwrap();
    assert_eq!(config["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm");
    assert_eq!(config["metadata"]["labels"][TEST_LABEL], s.id.as_str());
    // The release's allow-list, in its policy's install variables; no parameters, no ConfigMap.
    let policy = get("validatingadmissionpolicy", &fullname, None).unwrap();
    assert_eq!(install_variables(&policy)["namespacePatterns"], format!("['{}']", release_driver_namespace(&s)));
    assert!(policy["spec"].get("paramKind").is_none(), "{policy}");
    let binding = get("validatingadmissionpolicybinding", &fullname, None).unwrap();
    assert!(binding["spec"].get("paramRef").is_none(), "{binding}");
    assert!(get("configmap", "neuron-dra-fence", Some(&namespace)).is_err(), "an allow-list ConfigMap");
    // The cluster's fences let this release's operator start plugins too.
    cluster::also_operator(&format!("system:serviceaccount:{namespace}:{fullname}"));

    // No kubelet runs pods here: the operator runs as a process with a token of the chart's ServiceAccount and its
    // Lease in the release namespace, so only the chart's RBAC lets it work.
    let options = OperatorOptions { test_id: &s.id, lease: &s.id, extra: &[] };
    s.operator = Some(Operator::start_as(options, &namespace, &fullname));
    let mut names = vec![chart_config_name.clone()];
    for config in &configs {
        s.apply(config).await.unwrap();
        names.push(config["metadata"]["name"].as_str().unwrap().to_string());
    }
    assert_eq!(names.len(), 3);
    for name in &names {
        let status = s.wait_ready(name).await.status.unwrap();
        assert!(status.templates.unwrap().count > 0, "{name}");
    }
    let lease = get("lease", &s.id, Some(&namespace)).unwrap();
    assert!(lease["spec"]["holderIdentity"].is_string(), "{lease}");

    // Monitoring on: the ServiceMonitor, the PrometheusRule and the dashboard appear.
    helm_doc(docs::HELM_MONITORING, &release, &release, &[]);
    get("servicemonitor", &fullname, Some(&namespace)).expect("the ServiceMonitor");
    let rule = get("prometheusrule", &fullname, Some(&namespace)).expect("the PrometheusRule");
    assert!(rule["spec"]["groups"][0]["rules"].as_array().unwrap().len() >= 5, "{rule}");
    let dashboard = get("configmap", &format!("{fullname}-dashboard"), Some(&namespace)).unwrap();
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");

    // Changed values: the Deployment follows; the earlier values stay.
    let set = "replicas=1,tolerations[0].key=dedicated,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule";
    helm_doc(docs::HELM_UPGRADE, &release, &release, &["--set", set]);
    let deployment = get("deployment", &fullname, Some(&namespace)).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    );
    get("servicemonitor", &fullname, Some(&namespace)).expect("the ServiceMonitor stays");
    assert_eq!(helm_release(&release, &namespace)["revision"], "3");

    // Dropping the chart's config deletes it; the operator (still allowed to) cleans up and lets it go.
    // docs/install.md's upgrade, from a chart package: the values given before (crds.enabled=false) carry over.
    let upgrade = docs::with_package(docs::HELM_UPGRADE_RELEASE, &tools::packaged_chart());
    helm_doc(&upgrade, &release, &release, &["--set", "neuronDRAConfig.enabled=false"]);
    wait_gone("ndc", &chart_config_name, None).await;
    s.wait_ready(&names[1]).await;

    // The user's configs go before the operator's permissions do.
    kubectl(&["delete", "ndc", "-l", &format!("{TEST_LABEL}={}", s.id), "--wait=true", "--timeout=60s"]);

    let uninstalled = helm_doc(docs::HELM_UNINSTALL, &release, &release, &["--wait", "--timeout", "60s"]);
    assert!(uninstalled.contains("uninstalled"), "{uninstalled}");
    for (kind, name, ns) in [
        ("deployment", fullname.clone(), Some(namespace.as_str())),
        ("service", format!("{fullname}-metrics"), Some(namespace.as_str())),
        ("serviceaccount", fullname.clone(), Some(namespace.as_str())),
        ("role", format!("{fullname}-leader-election"), Some(namespace.as_str())),
        ("rolebinding", format!("{fullname}-leader-election"), Some(namespace.as_str())),
        ("servicemonitor", fullname.clone(), Some(namespace.as_str())),
        ("prometheusrule", fullname.clone(), Some(namespace.as_str())),
        ("networkpolicy", format!("{fullname}-allow-metrics"), Some(namespace.as_str())),
        ("clusterrole", fullname.clone(), None),
        ("clusterrolebinding", fullname.clone(), None),
        ("clusterrole", format!("{fullname}-metrics-auth"), None),
        ("clusterrolebinding", format!("{fullname}-metrics-auth"), None),
        ("clusterrole", format!("{fullname}-metrics-reader"), None),
        ("validatingadmissionpolicy", fullname.clone(), None),
        ("validatingadmissionpolicybinding", fullname.clone(), None),
    ] {
        wait_gone(kind, &name, ns).await;
    }
    let list = helm(&["list", "-n", &namespace, "-q"]).ok("helm list");
    assert!(!list.lines().any(|l| l == release), "{list}");
    // The CRD was not the release's (crds.enabled=false): it stays.
    get("crd", "neurondraconfigs.neurondra.io", None).expect("the CRD stays");
    // Nor were the plugin's ClusterRole and fences (fence.clusterObjects=false).
    for (kind, name) in [
        ("clusterrole", "neuron-dra-plugin"),
        ("validatingadmissionpolicy", "neuron-dra-plugin-fence"),
        ("validatingadmissionpolicybinding", "neuron-dra-plugin-pods"),
    ] {
        get(kind, name, None).unwrap_or_else(|e| panic!("the cluster's {kind} {name} went with the release: {e}"));
    }
    // The cluster's fences as `cluster::install` left them: its operator alone.
    cluster::allow_test_drivers();
    let _ = kubectl_with(&cluster::kubeconfig(), &["delete", "namespace", &namespace, "--wait=false"], None);
}

/// Helm maps every object of a release to its API before it creates any, so a first install cannot bring the CRD
/// and the chart's own config together: where Helm can look the cluster up, the chart refuses that in one line that
/// names the values and the way out. `helm template`, `helm lint` and Argo CD's render (the cluster's APIs as
/// `--api-versions`, no lookup) render the config as ever. The control plane serves the shared CRD, which no test
/// may take over or remove, so the refusal is checked with a copy of the chart that asks for a kind the cluster
/// lacks, in server-side dry runs that create nothing.
#[test]
fn a_first_install_of_the_crd_and_the_charts_config_together_is_refused_in_one_line() {
    const API: &str = "\"neurondra.io/v1alpha1/NeuronDRAConfig\"";
    let config = ["--set", "neuronDRAConfig.enabled=true", "--show-only", "templates/neurondraconfig.yaml"];
    for extra in [&[][..], &["--api-versions", "v1/Namespace"]] {
        let mut args = vec!["template", "x", CHART, "--skip-tests"];
        args.extend(config);
        args.extend(extra);
        let out = helm(&args).ok("helm template with the chart's config");
        assert_eq!(documents(&out)[0]["kind"], "NeuronDRAConfig", "{extra:?}: {out}");
    }

    cluster::install();
    let copy = temp_dir("helm-crd-first").join("chart");
    let copied = std::process::Command::new("cp").arg("-r").arg(repo(CHART)).arg(&copy).status().unwrap();
    assert!(copied.success());
    let template = copy.join("templates/neurondraconfig.yaml");
    let text = std::fs::read_to_string(&template).unwrap();
    assert_eq!(text.matches(API).count(), 1, "the config's template checks for its API once:\n{text}");
    std::fs::write(&template, text.replace(API, "\"neurondra.io/v1alpha1/NoSuchKind\"")).unwrap();
    let release = cluster::unique("crd-first");
    let name = format!("neuronDRAConfig.name={release}");
    // The cluster's plugin ClusterRole and fences are the shared ones `cluster::install` applied, not a release's.
    let dry_run = |chart: &str, set: &str| {
        let shared = "fence.clusterObjects=false";
        helm(&[
            "install",
            &release,
            chart,
            "-n",
            "default",
            "--dry-run=server",
            "--set",
            set,
            "--set",
            &name,
            "--set",
            shared,
        ])
    };
    let copy = copy.to_str().unwrap();
    for (set, way_out) in [
        ("neuronDRAConfig.enabled=true", "install with neuronDRAConfig.enabled=false, then helm upgrade"),
        ("neuronDRAConfig.enabled=true,crds.enabled=false", "apply the CRD first"),
    ] {
        let out = dry_run(copy, set);
        assert!(!out.success, "{set}: a first install without the CRD was not refused:\n{}", out.stdout);
        let line = out.stderr.lines().find(|l| l.contains("the cluster has no NeuronDRAConfig CRD"));
        let line = line.unwrap_or_else(|| panic!("{set}: {}", out.stderr));
        assert!(line.contains("neuronDRAConfig.enabled=true") && line.contains(way_out), "{set}: {line}");
        assert!(line.contains("then helm upgrade with neuronDRAConfig.enabled=true"), "{set}: {line}");
    }
    // The chart itself, where the CRD is served: installed as before (crds.enabled=false: the shared CRD is not
    // this dry run's to take over).
    dry_run(CHART, "neuronDRAConfig.enabled=true,crds.enabled=false").ok("a first install where the CRD is served");
}
