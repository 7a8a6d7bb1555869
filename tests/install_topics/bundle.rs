//! The OLM bundle: what `make bundle` generates, its CRD, CSV and alm-examples, and a broken bundle caught.

use crate::*;

#[test]
fn the_checked_in_bundle_is_what_make_bundle_generates() {
    let expected = bundle::generate(&repo("")).unwrap();
    let drift = bundle::check(&expected, &repo("bundle")).unwrap();
    let list: Vec<String> = drift.iter().map(|d| format!("  bundle/{d}")).collect();
    assert!(
        drift.is_empty(),
        "bundle/ is out of date with config/, crds/ or samples/: run `make bundle`\n{}",
        list.join("\n")
    );

    // `make bundle` runs the CLI with `--output bundle`; the CLI writes the same files.
    let (recipe, _) = sh_ok("make --no-print-directory -n bundle");
    assert!(recipe.trim().ends_with("-- bundle --output bundle"), "{recipe}");
    let dir = temp_dir("cli");
    let devtools = env!("CARGO_BIN_EXE_neuron-dra-devtools");
    let out = Command::new(devtools).args(["bundle", "--output"]).arg(&dir).current_dir(repo("")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(bundle::check(&expected, &dir).unwrap(), []);
}

#[test]
fn the_bundle_crd_is_the_crd_in_crds() {
    let crds = std::fs::read_to_string(repo("crds/neurondra.io_neurondraconfigs.yaml")).unwrap();
    let in_bundle = std::fs::read_to_string(repo(&format!("bundle/{}", bundle::CRD_FILE))).unwrap();
    assert!(in_bundle == crds, "bundle/{} differs from crds/: run `make bundle`", bundle::CRD_FILE);
}

/// Compared with what `kubectl kustomize config/default` builds (real kustomize, image resolved), not with the
/// generator's own reading of `config/`.
#[test]
fn the_csv_permissions_and_deployment_are_config_default() {
    let objects = kustomize("config/default");
    let csv = checked_in_csv();
    let install = &csv["spec"]["install"]["spec"];
    let account = find(&objects, "ServiceAccount", "neuron-dra-operator");
    let role = find(&objects, "Role", "neuron-dra-operator-leader-election");
    let deployment = find(&objects, "Deployment", "neuron-dra-operator");
    // The operator's own ClusterRole and the metrics-auth one (TokenReviews, SubjectAccessReviews), both bound to
    // its ServiceAccount, are its cluster permissions.
    let mut rules = Vec::new();
    for name in ["neuron-dra-operator", "neuron-dra-operator-metrics-auth"] {
        rules.extend(find(&objects, "ClusterRole", name)["rules"].as_array().unwrap().clone());
        let binding = find(&objects, "ClusterRoleBinding", name);
        assert_eq!(binding["roleRef"]["name"], name);
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": cluster::OPERATOR_NAMESPACE}])
        );
    }

    assert_eq!(install["clusterPermissions"].as_array().unwrap().len(), 1);
    assert_eq!(install["clusterPermissions"][0]["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(install["clusterPermissions"][0]["rules"], json!(rules));
    assert_eq!(install["permissions"].as_array().unwrap().len(), 1);
    assert_eq!(install["permissions"][0]["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(install["permissions"][0]["rules"], role["rules"]);
    // The kustomize bindings grant those roles to that account; OLM makes its own bindings from the CSV.
    for binding in ["ClusterRoleBinding", "RoleBinding"] {
        let subjects = &objects.iter().find(|o| o["kind"] == binding).unwrap()["subjects"];
        assert_eq!(subjects[0]["name"], account["metadata"]["name"], "{binding}");
    }

    let deployments = install["deployments"].as_array().unwrap();
    assert_eq!(deployments.len(), 1);
    assert_eq!(deployments[0]["name"], deployment["metadata"]["name"]);
    assert_eq!(deployments[0]["spec"], deployment["spec"]);
    let image = &deployment["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(csv["metadata"]["annotations"]["containerImage"], *image);
    assert!(!image.as_str().unwrap().starts_with("neuron-dra-operator"), "image not resolved: {image}");

    let mut service = find(&objects, "Service", "neuron-dra-operator-metrics").clone();
    service["metadata"].as_object_mut().unwrap().remove("namespace");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::SERVICE_FILE)), service);
    let mut budget = find(&objects, "PodDisruptionBudget", "neuron-dra-operator").clone();
    budget["metadata"].as_object_mut().unwrap().remove("namespace");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::DISRUPTION_BUDGET_FILE)), budget);
    // The metrics reader, bound by whoever scrapes, ships as a ClusterRole of its own; so does the kubelet plugin's,
    // which the operator binds (and may bind, by name, and nothing else).
    let reader = find(&objects, "ClusterRole", "neuron-dra-operator-metrics-reader");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::METRICS_READER_FILE)), *reader);
    let plugin = find(&objects, "ClusterRole", "neuron-dra-plugin");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::PLUGIN_ROLE_FILE)), *plugin);
    assert!(rules.iter().any(|r| r["resources"] == json!(["clusterroles"])
        && r["resourceNames"] == json!(["neuron-dra-plugin"])
        && r["verbs"] == json!(["bind"])));
}

/// Everything `config/default` installs comes with OLM too: as a file of the bundle, from the CSV (the operator's
/// ServiceAccount, Deployment and permissions, which OLM binds itself), from OLM (the namespace), or, for the kinds
/// OLM does not install, from docs/install.md's commands beside it (the fences; the NetworkPolicy's file).
#[test]
fn every_object_config_default_installs_comes_with_olm_or_the_documented_commands_beside_it() {
    let mut bundled: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(repo("bundle/manifests")).unwrap() {
        let object = read_yaml(&format!("bundle/manifests/{}", entry.unwrap().file_name().to_string_lossy()));
        bundled.push((object["kind"].as_str().unwrap().into(), object["metadata"]["name"].as_str().unwrap().into()));
    }
    let fence_files: Vec<&str> =
        DOC_APPLY_FENCES.split(' ').collect::<Vec<_>>().windows(2).filter(|w| w[0] == "-f").map(|w| w[1]).collect();
    let mut applied = Vec::new();
    for file in &fence_files {
        for object in documents(&std::fs::read_to_string(repo(file)).unwrap()) {
            applied.push((
                object["kind"].as_str().unwrap().to_string(),
                object["metadata"]["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    let csv = checked_in_csv();
    let install = &csv["spec"]["install"]["spec"];
    let mut missing = Vec::new();
    for object in kustomize("config/default") {
        let (kind, name) = (object["kind"].as_str().unwrap(), object["metadata"]["name"].as_str().unwrap());
        let key = (kind.to_string(), name.to_string());
        let from_csv = match kind {
            "ServiceAccount" => install["clusterPermissions"][0]["serviceAccountName"] == name,
            "Deployment" => install["deployments"][0]["name"] == name,
            // OLM binds the CSV's permissions (their rules are compared with these roles above).
            "ClusterRoleBinding" | "RoleBinding" | "Role" => true,
            "ClusterRole" => {
                object["metadata"]["name"] == "neuron-dra-operator"
                    || object["metadata"]["name"] == "neuron-dra-operator-metrics-auth"
            }
            // OLM installs into a namespace of the user's (the suggested one).
            "Namespace" => csv["metadata"]["annotations"]["operatorframework.io/suggested-namespace"] == name,
            // Documented in "With OLM": its file, with the namespace set.
            "NetworkPolicy" => true,
            _ => false,
        };
        if !(from_csv || bundled.contains(&key) || applied.contains(&key)) {
            missing.push(format!("{kind} {name}"));
        }
        if kind.starts_with("ValidatingAdmissionPolicy") {
            assert!(applied.contains(&key), "{kind} {name}: not applied by docs/install.md's OLM command");
        }
    }
    assert!(missing.is_empty(), "config/default installs what OLM does not: {missing:?}");
    // And nothing else: the command applies admission objects only, each one config/default's.
    assert!(applied.iter().all(|(kind, _)| kind.starts_with("ValidatingAdmissionPolicy")), "{applied:?}");
}

#[test]
fn alm_examples_are_the_samples_and_config_samples_lists_them_all() {
    let mut samples: Vec<Value> = std::fs::read_dir(repo("samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| serde_yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    let by_name = |a: &Value, b: &Value| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str());
    samples.sort_by(by_name);
    let mut examples: Vec<Value> =
        serde_json::from_str(checked_in_csv()["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
    examples.sort_by(by_name);
    assert_eq!(examples, samples, "alm-examples are not samples/*.yaml: run `make bundle`");
    // config/samples is the set that works together: every sample but mixed.yaml, the one-config alternative that
    // selects the same nodes as the others (tests/samples.rs applies the set).
    let mut wired: Vec<Value> =
        kustomize("config/samples").into_iter().filter(|o| o["kind"] == "NeuronDRAConfig").collect();
    wired.sort_by(by_name);
    samples.retain(|s| s["metadata"]["name"] != "trainium");
    assert_eq!(wired, samples, "samples/Kustomization must list every samples/*.yaml but mixed.yaml");
}

#[test]
fn config_crd_is_the_crd_in_crds() {
    let built = kustomize("config/crd");
    let crd = read_yaml("crds/neurondra.io_neurondraconfigs.yaml");
    assert!(built.len() == 1 && same_numbers(&built[0]) == same_numbers(&crd), "config/crd does not build crds/");
}

/// Numbers as floats: kustomize prints `2.0` as `2`.
fn same_numbers(value: &Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(items) => items.iter().map(same_numbers).collect(),
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), same_numbers(v))).collect(),
        other => other.clone(),
    }
}

#[test]
fn a_bundle_with_a_missing_file_a_changed_crd_or_a_stray_file_is_caught_by_file_name() {
    let expected = bundle::generate(&repo("")).unwrap();
    let dir = temp_dir("broken");
    bundle::write(&expected, &dir).unwrap();
    assert_eq!(bundle::check(&expected, &dir).unwrap(), []);

    std::fs::remove_file(dir.join(bundle::ANNOTATIONS_FILE)).unwrap();
    let crd = dir.join(bundle::CRD_FILE);
    let older = std::fs::read_to_string(&crd).unwrap().replace("neurondra.io/operator-version: ", "x: ");
    std::fs::write(&crd, older).unwrap();
    std::fs::write(dir.join("manifests/leftover.yaml"), "kind: ConfigMap\n").unwrap();

    let drift = bundle::check(&expected, &dir).unwrap();
    assert_eq!(
        drift,
        [
            Drift::Stale { file: bundle::CRD_FILE.into() },
            Drift::Missing { file: bundle::ANNOTATIONS_FILE.into() },
            Drift::Unexpected { file: "manifests/leftover.yaml".into() },
        ]
    );
    let text: Vec<String> = drift.iter().map(ToString::to_string).collect();
    assert_eq!(text[0], "manifests/neurondra.io_neurondraconfigs.yaml: differs from what `make bundle` generates");
    assert_eq!(text[1], "metadata/annotations.yaml: missing");
}
