//! Upgrades from the earlier layout (per-config plugin objects): the chart's and kustomize's, leaving nothing per config.

use crate::*;

/// The objects `config/rbac` installs once for every plugin: (kind, name) of each document of its plugin files.
fn plugin_objects() -> Vec<(String, String, Value)> {
    let mut objects = Vec::new();
    for file in ["plugin_role.yaml", "plugin_fence.yaml", "plugin_fence_binding.yaml"] {
        let text = std::fs::read_to_string(repo(&format!("config/rbac/{file}"))).unwrap();
        for object in cluster::documents(&text) {
            let kind = object["kind"].as_str().unwrap().to_lowercase();
            objects.push((kind, object["metadata"]["name"].as_str().unwrap().to_string(), object));
        }
    }
    objects
}

/// Whether `live` holds everything `expected` says (the API server adds defaults, never drops a field).
fn holds(live: &Value, expected: &Value) -> bool {
    match (live, expected) {
        (Value::Object(live), Value::Object(expected)) => {
            expected.iter().all(|(k, v)| live.get(k).is_some_and(|l| holds(l, v)))
        }
        (Value::Array(live), Value::Array(expected)) => {
            live.len() == expected.len() && live.iter().zip(expected).all(|(l, e)| holds(l, e))
        }
        _ => live == expected,
    }
}

/// A policy spec with its install variables' expressions blanked: what `config/rbac`'s file fixes.
fn fixed_part(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for variable in spec["variables"].as_array_mut().into_iter().flatten() {
        if variable["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)) {
            variable["expression"] = json!("");
        }
    }
    spec
}

/// The expression of a policy's variable `name`.
fn variable(policy: &Value, name: &str) -> String {
    let variables = policy["spec"]["variables"].as_array().unwrap();
    let found = variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no variable {name}: {policy}"));
    found["expression"].as_str().unwrap().to_string()
}

/// The plugin's ClusterRole and fences in the cluster as `config/rbac` has them, but for the install variables;
/// `neuron-dra-plugin-pods` lets `operator` (a user) start plugins, and neither fence reads parameters.
fn assert_plugin_objects_installed(operator: &str) {
    for (kind, name, object) in plugin_objects() {
        let live =
            cluster::get(&kind, &name, None).unwrap_or_else(|e| panic!("no {kind} {name} after the upgrade: {e}"));
        match kind.as_str() {
            "clusterrole" => assert_eq!(live["rules"], object["rules"], "{name}"),
            "validatingadmissionpolicy" => {
                let (live_spec, spec) = (fixed_part(&live["spec"]), fixed_part(&object["spec"]));
                assert!(holds(&live_spec, &spec), "{name}: {}", live["spec"]);
                assert!(live["spec"].get("paramKind").is_none(), "{name}: {}", live["spec"]);
                if name == "neuron-dra-plugin-pods" {
                    assert!(variable(&live, "operators").contains(&format!("'{operator}'")), "{name}: {live}");
                }
            }
            _ => {
                assert_eq!(live["spec"]["validationActions"], json!(["Deny"]), "{name}");
                assert!(live["spec"].get("paramRef").is_none(), "{name}: {}", live["spec"]);
            }
        }
    }
}

/// The operator's policy (named `name`) checks content against the allow-list written into it: its
/// `namespacePatterns` is `namespaces` (a CEL list); the policy takes no parameters and its binding, as in the
/// earlier layout, reads none.
fn assert_operator_policy_holds_the_allow_list(name: &str, namespaces: &str) {
    let policy = get("validatingadmissionpolicy", name, None);
    assert!(policy["spec"].get("paramKind").is_none(), "{name}: {policy}");
    assert_eq!(variable(&policy, "namespacePatterns"), namespaces, "{name}");
    variable(&policy, "imagePatterns");
    let binding = get("validatingadmissionpolicybinding", name, None);
    assert!(binding["spec"].get("paramRef").is_none(), "{name}'s binding: {binding}");
}

/// What the earlier operator wrote for a config (its `build::driver` and `build::fence`): a ClusterRole with the
/// plugin's rules, a ValidatingAdmissionPolicy and its binding, and a ClusterRoleBinding of that ClusterRole to the
/// plugin's ServiceAccount, all named `neuron-dra-<config>`, labelled as the config's, owned by it.
fn earlier_operator_objects(config: &Value) -> Vec<Value> {
    let config_name = config["metadata"]["name"].as_str().unwrap();
    let name = format!("neuron-dra-{config_name}");
    let driver_namespace = config["spec"]["driver"]["namespace"].as_str().unwrap();
    let metadata = json!({
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "neuron-dra-operator", "neurondra.io/config": config_name},
        "ownerReferences": [{"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "name": config_name,
            "uid": config["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}],
    });
    let user = format!("system:serviceaccount:{driver_namespace}:{name}");
    let rules = plugin_objects().into_iter().find(|(kind, ..)| kind == "clusterrole").unwrap().2["rules"].clone();
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata, "rules": rules}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": metadata,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["resourceslices"]}]},
            "matchConditions": [{"name": "plugin-service-account",
                "expression": format!("request.userInfo.username == '{user}'")}],
            "validations": [{"expression": "request.userInfo.extra[?'authentication.kubernetes.io/node-name'][0].orValue('') != ''",
                "message": "the kubelet plugin's token names no node", "reason": "Forbidden"}],
        }}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": metadata, "spec": {"policyName": name, "validationActions": ["Deny"]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": driver_namespace}]}),
    ]
}

/// Objects of the same kinds the cleanup must leave: another tool's, labelled with a config's name, and one
/// labelled as the operator's but of no config.
fn bystanders(id: &str) -> Vec<Value> {
    let role = |name: String, labels: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels}, "rules": []})
    };
    vec![
        role(format!("{id}-another-tools"), json!({"app.kubernetes.io/managed-by": "Helm", "neurondra.io/config": id})),
        role(format!("{id}-no-config"), json!({"app.kubernetes.io/managed-by": "neuron-dra-operator"})),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{id}-another-tools"), "labels": {"neurondra.io/config": id}},
            "spec": {"policyName": format!("{id}-no-such-policy"), "validationActions": ["Deny"]}}),
    ]
}

fn create(objects: &[Value]) {
    for object in objects {
        kubectl_with(&cluster::kubeconfig(), &["create", "-f", "-"], Some(&object.to_string()))
            .unwrap_or_else(|e| panic!("creating {} {}: {e}", object["kind"], object["metadata"]["name"]));
    }
}

fn kind_and_name(object: &Value) -> (String, String) {
    (object["kind"].as_str().unwrap().to_lowercase(), object["metadata"]["name"].as_str().unwrap().to_string())
}

/// The cluster as the earlier layout left it: no plugin ClusterRole or fences (`config/rbac`'s, which
/// `cluster::install` applied for every test, are deleted here). When dropped: uninstalls the release, if any, and
/// deletes its namespace, then applies `config/rbac` again and the tests' allow-list over it
/// (`cluster::allow_test_drivers`), so every later test finds it as `cluster::install` left it.
struct EarlierLayout {
    /// A release and its namespace.
    release: Option<(String, String)>,
}

impl EarlierLayout {
    fn new() -> EarlierLayout {
        cluster::install();
        for (kind, name, _) in plugin_objects() {
            kubectl(&["delete", &kind, &name, "--ignore-not-found", "--wait=true"]);
        }
        EarlierLayout { release: None }
    }
}

impl Drop for EarlierLayout {
    fn drop(&mut self) {
        let admin = cluster::kubeconfig();
        if let Some((release, namespace)) = &self.release {
            let _ = helm(&["uninstall", release, "-n", namespace, "--wait", "--timeout", "60s"]);
            let _ = kubectl_with(&admin, &["delete", "namespace", namespace, "--wait=false"], None);
        }
        let rbac = repo("config/rbac");
        let _ = kubectl_with(&admin, &["apply", "-k", rbac.to_str().unwrap()], None);
        cluster::allow_test_drivers();
    }
}

/// The earlier chart: this one with the earlier operator's ClusterRole rules and policy, its policy template (a
/// binding without parameters) and its Deployment template (no allow-list), and without the plugin's ClusterRole,
/// fences and allow-list.
fn previous_layout_chart() -> PathBuf {
    let dir = temp_dir("previous-layout-chart").join("neuron-dra-operator");
    let copied = std::process::Command::new("cp").arg("-r").arg(repo(CHART)).arg(&dir).status().unwrap();
    assert!(copied.success());
    for file in ["templates/fence.yaml", "files/plugin_role.yaml", "files/plugin_fence.yaml"] {
        std::fs::remove_file(dir.join(file)).unwrap();
    }
    for (fixture, file) in [
        ("role.yaml", "files/role.yaml"),
        ("operator_policy.yaml", "files/operator_policy.yaml"),
        ("chart-operator-policy.yaml", "templates/operator-policy.yaml"),
        ("chart-deployment.yaml", "templates/deployment.yaml"),
    ] {
        std::fs::copy(repo(&format!("{PREVIOUS}/{fixture}")), dir.join(file)).unwrap();
    }
    dir
}

/// docs/install.md's cleanup, as it shows it, against the local control plane.
fn run_documented_cleanup() -> String {
    let words: Vec<&str> = docs::UPGRADE_CLEANUP.split(' ').collect();
    assert_eq!(words[0], "kubectl");
    kubectl(&words[1..])
}

/// After the new operator took over the config (its binding now of the installed ClusterRole) and the documented
/// cleanup ran: nothing of the earlier operator's per-config kinds is left, the bystanders and the installed
/// objects are all there.
async fn cleanup_leaves_nothing_per_config(s: &Scenario, config: &Value, earlier: &[Value], operator: &str) {
    let config_name = config["metadata"]["name"].as_str().unwrap();
    let binding = format!("neuron-dra-{config_name}");
    cluster::eventually(Duration::from_secs(60), "the config's plugin bound to neuron-dra-plugin", || async {
        let live = cluster::get("clusterrolebinding", &binding, None).ok()?;
        (live["roleRef"]["name"] == "neuron-dra-plugin").then_some(())
    })
    .await;

    let deleted = run_documented_cleanup();
    for object in earlier {
        let (kind, name) = kind_and_name(object);
        if PER_CONFIG_KINDS.contains(&kind.as_str()) {
            assert!(deleted.contains(&name), "the cleanup did not delete {kind} {name}: {deleted}");
        }
    }
    let selector = format!("neurondra.io/config={config_name}");
    for kind in PER_CONFIG_KINDS {
        let left = kubectl(&["get", kind, "-l", &selector, "-o", "name"]);
        assert!(left.trim().is_empty(), "left behind: {left}");
    }
    // The config's binding stays, of the installed ClusterRole, for its plugin alone.
    let live = get("clusterrolebinding", &binding, None);
    assert_eq!(live["roleRef"]["name"], "neuron-dra-plugin");
    assert_eq!(live["subjects"][0]["name"], binding.as_str());
    for object in bystanders(&s.id) {
        let (kind, name) = kind_and_name(&object);
        cluster::get(&kind, &name, None).unwrap_or_else(|e| panic!("the cleanup deleted {kind} {name}: {e}"));
        kubectl(&["delete", &kind, &name]);
    }
    assert_plugin_objects_installed(operator);
}

/// A config of this test in its own driver namespace, created as a user would (no operator runs yet), with its uid.
async fn config_in_place(s: &Scenario) -> Value {
    let templates = s.namespace("team", &[]).await;
    let spec = json!({"templates": {"namespaces": [templates]}, "profiles": [
        {"name": "finetune", "training": {"instanceType": "trn2.48xlarge", "devices": 4}}]});
    let name = format!("{}-config", s.id);
    s.apply(&s.config(&name, spec)).await.unwrap();
    get("ndc", &name, None)
}

/// docs/install.md's upgrade of a Helm release of the earlier layout: the documented `helm upgrade` to this chart's
/// package, then, once the config is Ready again, the documented cleanup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_the_earlier_layout_upgrades_in_place_and_leaves_nothing_per_config() {
    let _serial = SERIAL.lock().await;
    let mut s = Scenario::new("layouthelm").await;
    let mut layout = EarlierLayout::new();
    let (release, namespace) = (s.id.clone(), s.id.clone());
    let fullname = format!("{release}-neuron-dra-operator");

    // The earlier release (the shared CRD is not its to manage), and what its operator made for a config.
    let chart = previous_layout_chart();
    let installed = helm(&[
        "install",
        &release,
        chart.to_str().unwrap(),
        "-n",
        &namespace,
        "--create-namespace",
        "--set",
        "crds.enabled=false",
    ]);
    layout.release = Some((release.clone(), namespace.clone()));
    assert!(installed.ok("helm install of the earlier chart").contains("STATUS: deployed"));
    assert!(get("validatingadmissionpolicybinding", &fullname, None)["spec"].get("paramRef").is_none());
    let config = config_in_place(&s).await;
    let earlier = earlier_operator_objects(&config);
    create(&earlier);
    create(&bystanders(&s.id));

    // The documented upgrade; the release's allow-list names the config's driver namespace, and the admin who mints
    // the new operator's token below (as the kubelet would for its pod) is among the token fence's minters.
    let allow = format!("fence.driverNamespaces={{{}}},fence.tokenMinters={{admin}}", s.driver_namespace());
    let upgrade = docs::with_package(docs::HELM_UPGRADE_RELEASE, &tools::packaged_chart());
    let upgraded = helm_doc(&upgrade, &release, &namespace, &["--set", &allow]);
    assert!(upgraded.contains("STATUS: deployed"), "{upgraded}");
    let user = format!("system:serviceaccount:{namespace}:{fullname}");
    assert_plugin_objects_installed(&user);
    assert_operator_policy_holds_the_allow_list(&fullname, &format!("['{}']", s.driver_namespace()));
    let pods = get("validatingadmissionpolicy", "neuron-dra-plugin-pods", None);
    assert_eq!(variable(&pods, "namespacePatterns"), format!("['{}']", s.driver_namespace()));
    assert_eq!(variable(&pods, "operators"), format!("['{user}']"));
    let role = cluster::documents(&std::fs::read_to_string(repo("config/rbac/role.yaml")).unwrap()).remove(0);
    assert_eq!(get("clusterrole", &fullname, None)["rules"], role["rules"]);
    let plugin_role = get("clusterrole", "neuron-dra-plugin", None);
    assert_eq!(plugin_role["metadata"]["annotations"]["meta.helm.sh/release-name"], release.as_str());

    // The new operator, under the upgraded release's RBAC, takes the config over; then the documented cleanup.
    let id = s.id.clone();
    let options = OperatorOptions { test_id: &id, lease: &id, extra: &[] };
    s.operator = Some(Operator::start_as(options, &namespace, &fullname));
    let name = config["metadata"]["name"].as_str().unwrap();
    s.wait_ready(name).await;
    cleanup_leaves_nothing_per_config(&s, &config, &earlier, &user).await;

    // The config goes while its operator runs (its finalizer); the release goes with `layout`.
    s.delete_config(name).await;
    cluster::eventually(Duration::from_secs(60), "the config deleted by the operator", || async {
        s.configs().get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// docs/install.md's upgrade of a kustomize install of the earlier layout (its ClusterRole, policy and binding as
/// `kubectl apply -k config/default` of that version left them): the documented `kubectl apply -k config/default`,
/// then, once the config is Ready again, the documented cleanup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kustomize_install_of_the_earlier_layout_upgrades_in_place_and_leaves_nothing_per_config() {
    let _serial = SERIAL.lock().await;
    let mut s = Scenario::new("layoutkust").await;
    let _layout = EarlierLayout::new();
    let system = cluster::OPERATOR_NAMESPACE;
    let previous: Vec<String> = ["role.yaml", "operator_policy.yaml", "operator_policy_binding.yaml"]
        .iter()
        .map(|f| repo(&format!("{PREVIOUS}/{f}")).to_str().unwrap().to_string())
        .collect();
    kubectl(&["apply", "-f", &previous[0], "-f", &previous[1], "-f", &previous[2]]);
    assert!(get("validatingadmissionpolicybinding", "neuron-dra-operator", None)["spec"].get("paramRef").is_none());
    let config = config_in_place(&s).await;
    let earlier = earlier_operator_objects(&config);
    create(&earlier);
    create(&bystanders(&s.id));

    // The documented upgrade, `kubectl apply -k config/default` (tests/install.rs runs it as the doc shows it): the
    // shipped allow-list, which the tests widen again for their driver namespaces.
    kubectl(&["apply", "-k", repo("config/default").to_str().unwrap()]);
    let user = format!("system:serviceaccount:{system}:neuron-dra-operator");
    assert_plugin_objects_installed(&user);
    assert_operator_policy_holds_the_allow_list("neuron-dra-operator", "['neuron-dra-driver']");
    cluster::allow_test_drivers();
    let role = cluster::documents(&std::fs::read_to_string(repo("config/rbac/role.yaml")).unwrap()).remove(0);
    assert_eq!(get("clusterrole", "neuron-dra-operator", None)["rules"], role["rules"]);

    // The new operator, under the upgraded RBAC, takes the config over; then the documented cleanup.
    s.operator = Some(s.start_operator(&[]));
    let name = config["metadata"]["name"].as_str().unwrap();
    s.wait_ready(name).await;
    cleanup_leaves_nothing_per_config(&s, &config, &earlier, &user).await;
    s.delete_config(name).await;
    cluster::eventually(Duration::from_secs(60), "the config deleted by the operator", || async {
        s.configs().get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
    // The Deployment's pods never ran here; on a node added later (`make test-node`) they would, and an operator
    // that manages every config would fight the tests' own.
    kubectl(&["delete", "deployment", "neuron-dra-operator", "-n", system, "--wait=false"]);
}
