use super::csv::{base64, descriptors};
use super::release::REPOSITORY;
use super::sources::{read_yaml, set_image};
use super::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn generated_csv() -> Value {
    serde_yaml::from_str(&generate(root()).unwrap()[CSV_FILE]).unwrap()
}

#[test]
fn generation_is_deterministic() {
    assert_eq!(generate(root()).unwrap(), generate(root()).unwrap());
}

#[test]
fn the_dockerfile_labels_are_the_annotations() {
    let files = generate(root()).unwrap();
    let labels: BTreeMap<String, String> = files[DOCKERFILE]
        .lines()
        .filter_map(|l| l.strip_prefix("LABEL "))
        .map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
        .collect();
    let annotations: BTreeMap<String, BTreeMap<String, String>> =
        serde_yaml::from_str(&files[ANNOTATIONS_FILE]).unwrap();
    assert_eq!(labels, annotations["annotations"]);
    assert!(files[DOCKERFILE].contains("COPY manifests /manifests/\nCOPY metadata /metadata/\n"));
}

#[test]
fn the_csv_is_versioned_cluster_wide_and_needs_kubernetes_1_34() {
    let csv = generated_csv();
    assert_eq!(csv["metadata"]["name"], format!("neuron-dra-operator.v{VERSION}"));
    assert_eq!(csv["spec"]["version"], VERSION);
    assert_eq!(csv["spec"]["minKubeVersion"], "1.34.0");
    assert_eq!(csv["metadata"]["annotations"]["olm.skipRange"], format!("<{VERSION}"));
    let supported: Vec<&str> = csv["spec"]["installModes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["supported"] == true)
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(supported, ["AllNamespaces"]);
    assert_eq!(
        csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["image"],
        csv["metadata"]["annotations"]["containerImage"]
    );
}

#[test]
fn descriptors_describe_real_fields() {
    let owned = &generated_csv()["spec"]["customresourcedefinitions"]["owned"][0];
    assert_eq!(owned["name"], "neurondraconfigs.neurondra.io");
    for list in ["specDescriptors", "statusDescriptors"] {
        for descriptor in owned[list].as_array().unwrap() {
            assert!(descriptor["description"].as_str().is_some_and(|d| !d.is_empty()), "{descriptor}");
        }
    }
    let paths: Vec<&str> =
        owned["statusDescriptors"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    for path in ["phase", "conditions", "devices.healthy"] {
        assert!(paths.contains(&path), "{path}");
    }
    let crd: Value = serde_yaml::from_str(&crate::runtime::crd::crd_yaml()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let error = descriptors(schema, "status", &[("devices.broken", "X", &[])]).unwrap_err();
    assert_eq!(error.to_string(), "descriptor status.devices.broken is not in the CRD schema");
}

#[test]
fn channels_follow_olm_conventions_and_the_annotation_lists_them() {
    assert_eq!(CHANNELS.join(","), CHANNELS_ANNOTATION);
    assert!(CHANNELS.contains(&DEFAULT_CHANNEL));
    let annotations = generated_csv()["metadata"]["annotations"].clone();
    for key in ["createdAt", "repository", "support", "containerImage", "categories", "capabilities"] {
        assert!(annotations[key].as_str().is_some_and(|v| !v.is_empty()), "{key}");
    }
}

/// The licence a reviewer looks for: the repository's LICENSE, named by the CSV's links.
#[test]
fn the_csv_links_the_licence() {
    let links = generated_csv()["spec"]["links"].clone();
    let license = links.as_array().unwrap().iter().find(|l| l["name"] == "License (Apache-2.0)").unwrap();
    assert_eq!(license["url"], format!("{REPOSITORY}/blob/main/LICENSE"));
    let text = std::fs::read_to_string(root().join("LICENSE")).unwrap();
    assert!(text.contains("Apache License") && text.contains("Version 2.0, January 2004"));
}

/// The operator may review /metrics callers; whoever scrapes gets the metrics-reader ClusterRole, bound by the
/// cluster's admin (OLM binds only what the CSV's permissions list).
#[test]
fn the_metrics_auth_rules_are_cluster_permissions_and_the_reader_role_ships_unbound() {
    let files = generate(root()).unwrap();
    let csv: Value = serde_yaml::from_str(&files[CSV_FILE]).unwrap();
    let rules = csv["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"].as_array().unwrap().clone();
    for (group, resource) in
        [("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")]
    {
        let rule = json!({"apiGroups": [group], "resources": [resource], "verbs": ["create"]});
        assert!(rules.contains(&rule), "no {rule} in {rules:?}");
    }
    assert!(rules.iter().any(|r| r["resources"] == json!(["neurondraconfigs"])), "the operator's own rules");
    assert!(!rules.iter().any(|r| r.get("nonResourceURLs").is_some()), "the operator does not read /metrics");
    let reader: Value = serde_yaml::from_str(&files[METRICS_READER_FILE]).unwrap();
    assert_eq!(reader["kind"], "ClusterRole");
    assert_eq!(reader["rules"], json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]));
}

/// The kubelet plugin's ClusterRole, which the operator only binds, ships in the bundle as `config/rbac` has it; the
/// admission policies, a kind OLM does not install from a bundle, do not. The operator holds `bind` on that one ClusterRole, and no write on
/// ClusterRoles or admission objects.
#[test]
fn the_plugin_role_ships_and_the_operator_may_only_bind_it() {
    let files = generate(root()).unwrap();
    let role: Value = serde_yaml::from_str(&files[PLUGIN_ROLE_FILE]).unwrap();
    assert_eq!(
        (role["kind"].as_str(), role["metadata"]["name"].as_str()),
        (Some("ClusterRole"), Some("neuron-dra-plugin"))
    );
    let source = &read_yaml(&root().join("config/rbac/plugin_role.yaml")).unwrap()[0];
    assert_eq!(role, *source);
    for (file, text) in &files {
        assert!(!text.contains("kind: ValidatingAdmissionPolicy"), "{file}: OLM installs no admission policy");
    }

    let csv = generated_csv();
    let rules = csv["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"].as_array().unwrap().clone();
    let on = |resource: &str| -> Vec<&Value> {
        rules.iter().filter(|r| r["resources"].as_array().unwrap().iter().any(|x| x == resource)).collect()
    };
    assert_eq!(
        on("clusterroles"),
        [&json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
            "resourceNames": ["neuron-dra-plugin"], "verbs": ["bind"]})]
    );
    for resource in ["validatingadmissionpolicies", "validatingadmissionpolicybindings"] {
        for rule in on(resource) {
            assert_eq!(rule["verbs"], json!(["get"]), "{resource}: {rule}");
            assert!(rule["resourceNames"].is_array(), "{resource}: {rule}");
        }
    }
}

#[test]
fn base64_is_rfc_4648() {
    let cases = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
    for (plain, encoded) in cases {
        assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
    }
    assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
}

#[test]
fn images_resolve_like_kustomize() {
    let mut deployment = json!({"spec": {"template": {"spec": {"containers": [
        {"image": "op"}, {"image": "op:1"}, {"image": "other:1"}, {"image": "localhost:5000/op:2"},
    ]}}}});
    set_image(&mut deployment, &json!({"name": "op", "newName": "r.example/op", "newTag": "9"}));
    set_image(&mut deployment, &json!({"name": "localhost:5000/op", "digest": "sha256:ab"}));
    let images: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(images, ["r.example/op:9", "r.example/op:9", "other:1", "localhost:5000/op@sha256:ab"]);
}
