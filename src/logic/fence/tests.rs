use serde_json::json;

use super::*;

/// The fences as the API server stores them: the shipped objects with the defaults it adds.
fn stored() -> Vec<Found> {
    let defaults = json!({"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}});
    shipped(POLICIES)
        .into_iter()
        .zip(shipped(BINDINGS))
        .map(|(mut policy, mut binding)| {
            let constraints = policy["spec"]["matchConstraints"].as_object_mut().unwrap();
            constraints.extend(defaults.as_object().unwrap().clone());
            for rule in constraints["resourceRules"].as_array_mut().unwrap() {
                rule["scope"] = json!("*");
            }
            binding["spec"]["matchResources"] = defaults.clone();
            Found { policy: Some(policy), binding: Some(binding) }
        })
        .collect()
}

#[test]
fn patterns_read_as_the_policies_read_them() {
    assert!(namespace_matches("neuron-dra-driver", "neuron-dra-driver"));
    assert!(!namespace_matches("neuron-dra-driver", "neuron-dra-driver2"));
    assert!(namespace_matches("*-driver", "team-a-driver"));
    assert!(namespace_matches("drv-*", "drv-1"));
    assert!(!namespace_matches("*-driver", "kube-system"));
    let repo = "public.ecr.aws/neuron/neuron-dra-driver";
    assert!(image_matches(repo, "public.ecr.aws/neuron/neuron-dra-driver:1.1.0"));
    assert!(image_matches(repo, "public.ecr.aws/neuron/neuron-dra-driver@sha256:00"));
    assert!(!image_matches(repo, "public.ecr.aws/neuron/neuron-dra-driver-evil:1"));
    assert!(!image_matches(repo, "example.com/evil:1"));
    assert!(image_matches("localhost/neuron-dra/*", "localhost/neuron-dra/neuron-dra-driver:1.1.0"));
}

#[test]
fn a_driver_outside_the_install_is_refused_field_by_field() {
    let allowed = Allowed {
        driver_namespaces: vec!["neuron-dra-driver".into()],
        image_repositories: vec!["public.ecr.aws/neuron/neuron-dra-driver".into()],
        kubelet_dirs: vec!["/var/lib/kubelet".into()],
    };
    let driver: DriverSpec = serde_json::from_value(json!({})).unwrap();
    assert!(allowed.refusals(&driver).is_empty(), "the defaults are allowed");
    let driver: DriverSpec = serde_json::from_value(
        json!({"namespace": "kube-system", "image": "example.com/evil:1", "kubeletDir": "/etc"}),
    )
    .unwrap();
    let refusals = allowed.refusals(&driver);
    assert_eq!(
        refusals.iter().map(|(path, _)| *path).collect::<Vec<_>>(),
        ["spec.driver.namespace", "spec.driver.image", "spec.driver.kubeletDir"]
    );
    assert_eq!(
        refusals[2].1,
        "/etc is not a kubelet directory this install allows (/var/lib/kubelet; the fences' kubeletDirs)"
    );
    assert!(refusals[0].1.starts_with("kube-system is not a driver namespace this install allows (neuron-dra-driver;"));
    assert!(Allowed::default().refusals(&driver).is_empty(), "no lists, no checks");
}

#[test]
fn the_shipped_fences_as_stored_pass() {
    assert_eq!(names(), ["neuron-dra-plugin-fence", "neuron-dra-plugin-pods", "neuron-dra-operator-token"]);
    let allowed = judge(&stored()).unwrap();
    assert_eq!(allowed.driver_namespaces, ["neuron-dra-driver"]);
    assert_eq!(allowed.image_repositories, ["public.ecr.aws/neuron/neuron-dra-driver"]);
    assert_eq!(allowed.kubelet_dirs, ["/var/lib/kubelet"]);
}

/// The install sets its own namespaces, repositories and operator; the operator reads them, and refuses what it
/// cannot read as a list of strings.
#[test]
fn the_install_variables_may_differ_and_are_read() {
    let set = |found: &mut Vec<Found>, name: &str, expression: &str| {
        let variables = found[1].policy.as_mut().unwrap()["spec"]["variables"].as_array_mut().unwrap();
        let variable = variables.iter_mut().find(|v| v["name"] == name).unwrap();
        variable["expression"] = json!(expression);
    };
    let mut found = stored();
    set(&mut found, "namespacePatterns", "['neuron-dra-driver', \"*-driver\"]");
    set(&mut found, "operators", "['system:serviceaccount:ops:operator']");
    set(&mut found, "kubeletDirs", "['/var/lib/kubelet', '/var/lib/k0s/kubelet']");
    let allowed = judge(&found).unwrap();
    assert_eq!(allowed.driver_namespaces, ["neuron-dra-driver", "*-driver"]);
    assert_eq!(allowed.kubelet_dirs, ["/var/lib/kubelet", "/var/lib/k0s/kubelet"]);
    set(&mut found, "imagePatterns", "['a'].map(r, r + 'b')");
    let error = judge(&found).unwrap_err();
    assert!(
        error.contains("sets variable imagePatterns to \"['a'].map(r, r + 'b')\", not a list of strings"),
        "{error}"
    );
}

fn refused(change: impl Fn(&mut Vec<Found>)) -> String {
    let mut found = stored();
    change(&mut found);
    judge(&found).expect_err("a weakened fence is refused")
}

#[test]
fn a_missing_fence_or_binding_is_named() {
    let error = refused(|f| f[1].policy = None);
    assert!(error.starts_with("the kubelet plugin's fence neuron-dra-plugin-pods is missing"), "{error}");
    let error = refused(|f| f[0].binding = None);
    assert!(error.contains("neuron-dra-plugin-fence has no ValidatingAdmissionPolicyBinding"), "{error}");
}

#[test]
fn a_fence_that_only_warns_or_audits_is_refused() {
    let error = refused(|f| f[0].binding.as_mut().unwrap()["spec"]["validationActions"] = json!(["Warn", "Audit"]));
    assert!(error.contains("is not enforced"), "{error}");
    let more =
        |f: &mut Vec<Found>| f[0].binding.as_mut().unwrap()["spec"]["validationActions"] = json!(["Deny", "Audit"]);
    let mut found = stored();
    more(&mut found);
    assert!(judge(&found).is_ok(), "Deny with more actions still denies");
}

#[test]
fn a_rewritten_or_narrowed_fence_is_refused() {
    let error = refused(|f| f[0].policy.as_mut().unwrap()["spec"]["failurePolicy"] = json!("Ignore"));
    assert!(error.contains("(spec.failurePolicy differs)"), "{error}");
    let error = refused(|f| {
        f[0].policy.as_mut().unwrap()["spec"]["validations"].as_array_mut().unwrap().pop();
    });
    assert!(error.contains("spec.validations differs"), "{error}");
    let error = refused(|f| {
        f[0].policy.as_mut().unwrap()["spec"]["matchConstraints"]["namespaceSelector"] =
            json!({"matchLabels": {"fenced": "yes"}})
    });
    assert!(error.contains("is narrowed (spec.matchConstraints.namespaceSelector is set)"), "{error}");
    let error = refused(|f| {
        f[1].binding.as_mut().unwrap()["spec"]["matchResources"]["excludeResourceRules"] =
            json!([{"resources": ["pods"], "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["*"]}])
    });
    assert!(error.contains("binding spec.matchResources.excludeResourceRules is set"), "{error}");
    let error = refused(|f| {
        f[1].policy.as_mut().unwrap()["spec"]["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"})
    });
    assert!(error.contains("spec.paramKind is set"), "{error}");
    let error = refused(|f| f[0].binding.as_mut().unwrap()["spec"]["policyName"] = json!("other"));
    assert!(error.contains("binding spec.policyName differs"), "{error}");
}

/// #50.3: the operator token's fence is checked like the plugin's two, and its own install variables (the
/// operator, the token minters) are not taken for the plugin's allow-list.
#[test]
fn the_operator_token_fence_is_judged_and_does_not_replace_the_allow_list() {
    let error = refused(|f| f[2].policy = None);
    assert!(error.starts_with("the kubelet plugin's fence neuron-dra-operator-token is missing"), "{error}");
    let error = refused(|f| f[2].binding.as_mut().unwrap()["spec"]["validationActions"] = json!(["Audit"]));
    assert!(error.contains("neuron-dra-operator-token is not enforced"), "{error}");
    let mut found = stored();
    let variables = found[2].policy.as_mut().unwrap()["spec"]["variables"].as_array_mut().unwrap();
    variables.iter_mut().find(|v| v["name"] == "tokenMinters").unwrap()["expression"] = json!("['admin']");
    let allowed = judge(&found).unwrap();
    assert_eq!(allowed.driver_namespaces, ["neuron-dra-driver"], "the plugin's allow-list is still read");
}
