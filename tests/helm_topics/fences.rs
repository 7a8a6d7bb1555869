//! The fences and allow-list the chart installs: config/rbac's, with the release's install variables.

use crate::*;

/// A policy spec with what the install sets blanked: its install variables' expressions and, for the operator's
/// policy, the first match condition (the operator's user). What is left is config/rbac's file, whatever the values.
fn fixed_part(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for variable in spec["variables"].as_array_mut().into_iter().flatten() {
        if variable["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)) {
            variable["expression"] = json!("");
        }
    }
    if let Some(operator) = spec["matchConditions"].as_array_mut().and_then(|c| c.first_mut())
        && operator["name"] == "operator"
    {
        operator["expression"] = json!("");
    }
    spec
}

/// The policies of `file` (config/rbac), by name.
fn config_policies(file: &str) -> BTreeMap<String, Value> {
    documents(&std::fs::read_to_string(repo(file)).unwrap())
        .into_iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), o))
        .collect()
}

/// The install's allow-list is the `fence.*` values, written as CEL lists into the install variables of both
/// policies that enforce it (the operator's and `neuron-dra-plugin-pods`, which the operator reads it from), with
/// this release's ServiceAccount as `operators`; every other part of each policy is config/rbac's. No parameter
/// object, no binding parameters, nothing in the operator's environment.
#[test]
fn the_allow_list_is_the_fence_values_in_the_policies_install_variables() {
    let render_in = |namespace: &str, sets: &[&str]| {
        let mut args = vec!["template", "x", CHART, "-n", namespace, "--skip-tests"];
        for set in sets {
            args.extend(["--set", set]);
        }
        documents(&helm(&args).ok("helm template"))
    };
    let find = |objects: &[Value], kind: &str, name: &str| {
        let found = objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        found.unwrap_or_else(|| panic!("no {kind} {name}")).clone()
    };
    let objects = render_in(
        "ml-system",
        &["fence.driverNamespaces={neuron-dra-driver,team-*,*-plugins}", "fence.imageRepositories={a.io/x,b.io/y/*}"],
    );
    let namespaces = "['neuron-dra-driver', 'team-*', '*-plugins']";
    let images = "['a.io/x', 'b.io/y/*']";
    let user = "system:serviceaccount:ml-system:x-neuron-dra-operator";
    let operator = find(&objects, "ValidatingAdmissionPolicy", "x-neuron-dra-operator");
    assert_eq!(
        install_variables(&operator),
        BTreeMap::from([
            ("imagePatterns".into(), images.into()),
            ("kubeletDirs".into(), "['/var/lib/kubelet']".into()),
            ("namespacePatterns".into(), namespaces.into()),
        ])
    );
    // The operator's policy applies to this release's ServiceAccount (its first match condition).
    assert_eq!(operator["spec"]["matchConditions"][0]["expression"], format!("request.userInfo.username == '{user}'"));
    let pods = find(&objects, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert_eq!(
        install_variables(&pods),
        BTreeMap::from([
            ("imagePatterns".into(), images.into()),
            ("kubeletDirs".into(), "['/var/lib/kubelet']".into()),
            ("namespacePatterns".into(), namespaces.into()),
            ("operators".into(), format!("['{user}']")),
        ])
    );
    // Everything else is config/rbac's, byte for byte.
    let shipped = config_policies("config/rbac/operator_policy.yaml").remove("neuron-dra-operator").unwrap();
    assert_eq!(
        serde_json::to_string(&fixed_part(&operator["spec"])).unwrap(),
        serde_json::to_string(&fixed_part(&shipped["spec"])).unwrap(),
        "the operator's policy differs from config/rbac/operator_policy.yaml beyond its install variables"
    );
    let shipped = config_policies("config/rbac/plugin_fence.yaml").remove("neuron-dra-plugin-pods").unwrap();
    assert_eq!(
        serde_json::to_string(&fixed_part(&pods["spec"])).unwrap(),
        serde_json::to_string(&fixed_part(&shipped["spec"])).unwrap(),
        "neuron-dra-plugin-pods differs from config/rbac/plugin_fence.yaml beyond its install variables"
    );
    // One fence of the defaults: config/rbac's own lists (the release's ServiceAccount as the operator).
    let default = render_in("ml-system", &[]);
    let pods = find(&default, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert_eq!(install_variables(&pods)["namespacePatterns"], "['neuron-dra-driver']");
    assert_eq!(install_variables(&pods)["imagePatterns"], "['public.ecr.aws/neuron/neuron-dra-driver']");

    // No parameters anywhere: a binding whose parameter object is missing denies all its policy matches.
    for object in objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("ValidatingAdmission"))) {
        assert!(object["spec"].get("paramKind").is_none(), "{object}");
        assert!(object["spec"].get("paramRef").is_none(), "{object}");
    }
    assert!(!objects.iter().any(|o| o["kind"] == "ConfigMap"), "a ConfigMap by default");
    // Nor in the operator's environment or pod template: it reads the allow-list from the plugin-pods fence.
    let deployment = find(&objects, "Deployment", "x-neuron-dra-operator");
    let text = deployment.to_string();
    for stale in ["DRIVER_NAMESPACES", "DRIVER_IMAGE_REPOSITORIES", "configMapKeyRef", "fence-checksum"] {
        assert!(!text.contains(stale), "the Deployment still has {stale}: {deployment}");
    }
    assert_eq!(
        deployment["spec"]["template"],
        find(&default, "Deployment", "x-neuron-dra-operator")["spec"]["template"],
        "the allow-list changes the pod template"
    );

    // Where the cluster has its plugin ClusterRole and fences already, the release leaves them out, and keeps its
    // own policy with its allow-list.
    let without = render_in("ml-system", &["fence.clusterObjects=false", "fence.driverNamespaces={a,b*}"]);
    let kinds: Vec<String> = without
        .iter()
        .filter(|o| o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("neuron-dra-plugin")))
        .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, Vec::<String>::new(), "fence.clusterObjects=false");
    let operator = find(&without, "ValidatingAdmissionPolicy", "x-neuron-dra-operator");
    assert_eq!(install_variables(&operator)["namespacePatterns"], "['a', 'b*']");
    find(&without, "ValidatingAdmissionPolicyBinding", "x-neuron-dra-operator");
}

/// The operator refuses to start a plugin unless the fences it finds apply the policies it was built with
/// (config/rbac/plugin_fence.yaml, but for the install variables): the chart renders them, and the plugin's
/// ClusterRole, as the files have them, under their own names whatever the release, with the release's
/// ServiceAccount as `operators`, and its operator may bind that ClusterRole and no other.
#[test]
fn the_plugin_fences_and_role_are_config_rbacs_whatever_the_release() {
    let file_documents = |path: &str| documents(&std::fs::read_to_string(repo(path)).unwrap());
    let mut args = vec!["template", "some-release", CHART, "-n", "elsewhere", "--skip-tests"];
    args.extend(["--set", "fullnameOverride=renamed"]);
    let objects = documents(&helm(&args).ok("helm template"));
    let rendered = |kind: &str, name: &str| {
        let found = objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        found.unwrap_or_else(|| panic!("the chart renders no {kind} {name}")).clone()
    };
    let policies = file_documents("config/rbac/plugin_fence.yaml");
    assert_eq!(policies.len(), 3, "the plugin's two fences and the operator token's");
    for policy in &policies {
        let name = policy["metadata"]["name"].as_str().unwrap();
        let rendered_policy = rendered("ValidatingAdmissionPolicy", name);
        // The same JSON, byte for byte, as the file's spec, but for the install variables.
        assert_eq!(
            serde_json::to_string(&fixed_part(&rendered_policy["spec"])).unwrap(),
            serde_json::to_string(&fixed_part(&policy["spec"])).unwrap(),
            "{name}'s spec differs from config/rbac/plugin_fence.yaml"
        );
        // The fence that says who may start a plugin names this release's operator.
        if let Some(operators) = install_variables(&rendered_policy).get("operators") {
            assert_eq!(operators, "['system:serviceaccount:elsewhere:renamed']", "{name}");
        }
        let binding = rendered("ValidatingAdmissionPolicyBinding", name);
        assert_eq!(binding["spec"]["policyName"], name);
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        for (key, value) in policy["metadata"]["labels"].as_object().unwrap() {
            assert_eq!(&binding["metadata"]["labels"][key], value, "{name}'s binding");
        }
    }
    let role = &file_documents("config/rbac/plugin_role.yaml")[0];
    let name = role["metadata"]["name"].as_str().unwrap();
    assert_eq!(rendered("ClusterRole", name)["rules"], role["rules"]);
    // The operator's own ClusterRole (files/role.yaml) binds exactly that ClusterRole.
    let operator = rendered("ClusterRole", "renamed");
    let binds: Vec<&Value> =
        operator["rules"].as_array().unwrap().iter().filter(|r| r["verbs"].to_string().contains("\"bind\"")).collect();
    assert_eq!(
        binds,
        [
            &json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": [name], "verbs": ["bind"]})
        ]
    );
}

/// An allow-list entry that is no name or pattern (empty, all names, a list in one entry, a tag or digest, a quote
/// or backslash that would break out of the policies' CEL lists, no entry at all) is refused by the values schema in one line that names it.
#[test]
fn a_bad_allow_list_entry_is_refused_in_one_line_naming_it() {
    let dir = temp_dir("helm-fence-values");
    let cases: &[(&str, &str, &str)] = &[
        ("driverNamespaces", "[\"\"]", "/fence/driverNamespaces/0': ''"),
        ("driverNamespaces", "[neuron-dra-driver, \"*\"]", "/fence/driverNamespaces/1': '*'"),
        ("driverNamespaces", "[\"a,b\"]", "/fence/driverNamespaces/0': 'a,b'"),
        ("driverNamespaces", "[Team-A]", "/fence/driverNamespaces/0': 'Team-A'"),
        ("driverNamespaces", "[]", "/fence/driverNamespaces': minItems"),
        ("imageRepositories", "[\"\"]", "/fence/imageRepositories/0': ''"),
        (
            "imageRepositories",
            "[\"registry.example.com/x@sha256:00\"]",
            "/fence/imageRepositories/0': 'registry.example.com/x@sha256:00'",
        ),
        ("imageRepositories", "[\"*/neuron\"]", "/fence/imageRepositories/0': '*/neuron'"),
        ("imageRepositories", "[\"a b\"]", "/fence/imageRepositories/0': 'a b'"),
        // A quote or a backslash would end the CEL string literal the chart writes the entry into.
        ("imageRepositories", "[\"a.io/x', 'b\"]", "/fence/imageRepositories/0'"),
        ("imageRepositories", "['a.io/\\x']", "/fence/imageRepositories/0'"),
        ("imageRepositories", "['a.io/\"x']", "/fence/imageRepositories/0'"),
        ("driverNamespaces", "[\"team-a' || true || '\"]", "/fence/driverNamespaces/0'"),
    ];
    for (index, (key, list, line)) in cases.iter().enumerate() {
        let values = dir.join(format!("{index}.yaml"));
        std::fs::write(&values, format!("fence:\n  {key}: {list}\n")).unwrap();
        let out = helm(&["template", "x", CHART, "-f", values.to_str().unwrap()]);
        assert!(!out.success, "fence.{key}: {list} was accepted");
        let named: Vec<&str> = out.stderr.lines().filter(|l| l.contains("/fence/")).collect();
        assert_eq!(named.len(), 1, "fence.{key}: {list}: {}", out.stderr);
        assert!(named[0].contains(line), "fence.{key}: {list}: {}", named[0]);
    }
    helm(&["template", "x", CHART, "--set", "fence.driverNamespaces={team-*,*-plugins,x}"]).ok("patterns");
    helm(&["template", "x", CHART, "--set", "fence.imageRepositories={registry.example.com:5000/neuron/*}"])
        .ok("a mirror");
}
