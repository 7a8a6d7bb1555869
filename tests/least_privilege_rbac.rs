//! Least privilege the API server enforces (#38): what RBAC alone refuses the operator's token, because admission
//! never sees it. The API server does not send writes of admission policies and bindings through admission, so no
//! fence can protect itself: only the operator's ClusterRole, which holds no write on them, on roles, Nodes or
//! ResourceSlices, and `bind` only on the installed plugin role. Checked in the shipped file, with the API server's
//! own answer (`kubectl auth can-i`), and with the real token. Also: the installed fences type-check on this server.
//! tests/least_privilege.rs tries what the operator's policy refuses, tests/least_privilege_plugin.rs the plugin.

mod support {
    pub mod attack;
    pub mod cluster;
    pub mod scenario;
}

use neuron_dra_operator::logic::desired::NEURON_DRIVER;
use serde_json::{Value, json};
use support::attack::{LOADED, assert_accepted, assert_refused, create, delete, operator, ours, patch};
use support::cluster::{
    OPERATOR_NAMESPACE, OPERATOR_SA, documents, eventually, get, install, kubeconfig, kubectl, kubectl_with, repo,
    unique,
};
use support::scenario::Scenario;

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// #38.1-3: with the operator's token, no admission object, ClusterRole, Node or ResourceSlice can be written:
/// RBAC refuses before any policy (the API server never sends admission objects through admission, so nothing but
/// RBAC could). Beside each, a read the operator does need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_cannot_touch_fences_roles_nodes_or_slices() {
    let s = Scenario::new("lpadmission").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let vap = |kind: &str, name: &str| json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}});
    let cannot = |verb: &str, resource: &str| format!("cannot {verb} resource \"{resource}\"");

    let own_binding = vap("ValidatingAdmissionPolicyBinding", "neuron-dra-operator");
    let refused = delete(&operator, &own_binding).await;
    assert_refused("delete its own fence's binding", refused, &cannot("delete", "validatingadmissionpolicybindings"));
    let audit = json!({"spec": {"validationActions": ["Audit"]}});
    let refused = patch(&operator, &own_binding, &audit).await;
    assert_refused("weaken its own fence to Audit", refused, &cannot("patch", "validatingadmissionpolicybindings"));
    let plugin_fence = vap("ValidatingAdmissionPolicyBinding", "neuron-dra-plugin-fence");
    let refused = delete(&operator, &plugin_fence).await;
    assert_refused("delete the plugin's fence", refused, &cannot("delete", "validatingadmissionpolicybindings"));
    let mut policy = vap("ValidatingAdmissionPolicy", &format!("{}-allow", s.id));
    policy["spec"] = json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["configmaps"]}]}, "validations": [{"expression": "true"}]});
    let refused = create(&operator, &ours(policy)).await;
    assert_refused("create a policy", refused, &cannot("create", "validatingadmissionpolicies"));
    // Positive: it reads the plugin's fences (it checks them before it starts a plugin).
    assert!(support::attack::get(&operator, &plugin_fence).await.is_some(), "the operator reads the plugin's fence");
    let policy = vap("ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert!(support::attack::get(&operator, &policy).await.is_some(), "the operator reads the plugin's pod fence");

    // A role that the aggregation controller would copy into `view`: every viewer would patch Nodes.
    let aggregated = ours(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{}-view", s.id),
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]}));
    assert_refused(
        "create an aggregated role",
        create(&operator, &aggregated).await,
        &cannot("create", "clusterroles"),
    );
    let plugin_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "neuron-dra-plugin"}});
    let widen = json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    let refused = patch(&operator, &plugin_role, &widen).await;
    assert_refused("widen the plugin's role it may bind", refused, &cannot("patch", "clusterroles"));

    // Nodes and ResourceSlices: read, never written.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("{}-node", s.id)}});
    assert_accepted("the admin creates a node", create(&admin, &node).await);
    let label = json!({"metadata": {"labels": {"example.com/stolen": "yes"}}});
    assert_refused("label a node", patch(&operator, &node, &label).await, &cannot("patch", "nodes"));
    assert!(support::attack::get(&operator, &node).await.is_some(), "the operator reads nodes");
    let slice = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-slice", s.id)},
        "spec": {"driver": NEURON_DRIVER, "nodeName": format!("{}-node", s.id),
            "pool": {"name": format!("{}-node", s.id), "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "neuron-device-0"}]}});
    assert_refused("publish a slice", create(&operator, &slice).await, &cannot("create", "resourceslices"));
    // A namespace, even its own: never deleted.
    let refused = delete(&operator, &namespace(OPERATOR_NAMESPACE)).await;
    assert_refused("delete a namespace", refused, &cannot("delete", "namespaces"));
    delete(&admin, &node).await.unwrap();
}

/// Whether the API server lets the operator's ServiceAccount do `args` (`kubectl auth can-i ... --as`).
fn operator_can(args: &[&str]) -> bool {
    let user = format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SA}");
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(["auth", "can-i"])
        .args(args)
        .args(["--as", &user])
        .output()
        .expect("kubectl runs");
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => true,
        "no" => false,
        other => panic!("can-i {}: {other} {}", args.join(" "), String::from_utf8_lossy(&out.stderr)),
    }
}

/// #38 acceptance: the operator's ClusterRole (config/rbac/role.yaml; the chart and the bundle are checked equal to
/// it elsewhere) has no write verb on admission objects, roles, Nodes or ResourceSlices, `bind` only on
/// `neuron-dra-plugin`, no `escalate` or `impersonate`; and the API server answers so for the installed role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_role_writes_no_fence_role_node_or_slice() {
    const WRITES: [&str; 8] =
        ["create", "update", "patch", "delete", "deletecollection", "escalate", "impersonate", "*"];
    const GUARDED: [&str; 14] = [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "clusterroles",
        "roles",
        "rolebindings",
        "nodes",
        "nodes/status",
        "resourceslices",
        "serviceaccounts/token",
        "*",
    ];
    let text = std::fs::read_to_string(repo("config/rbac/role.yaml")).unwrap();
    let role = documents(&text).into_iter().find(|d| d["kind"] == "ClusterRole").expect("role.yaml has the role");
    assert_eq!(role["metadata"]["name"], "neuron-dra-operator");
    let strings = |rule: &Value, field: &str| -> Vec<String> {
        rule[field].as_array().into_iter().flatten().map(|v| v.as_str().unwrap().to_string()).collect()
    };
    let (mut binds, mut writes) = (0, 0);
    for rule in role["rules"].as_array().unwrap() {
        let (resources, verbs) = (strings(rule, "resources"), strings(rule, "verbs"));
        assert!(!strings(rule, "apiGroups").contains(&"*".to_string()), "a wildcard group: {rule}");
        for resource in resources.iter().filter(|r| GUARDED.contains(&r.as_str())) {
            let held: Vec<&String> = verbs.iter().filter(|v| WRITES.contains(&v.as_str())).collect();
            assert!(held.is_empty(), "the operator may {held:?} {resource}: {rule}");
        }
        assert!(!verbs.iter().any(|v| ["escalate", "impersonate", "*"].contains(&v.as_str())), "{rule}");
        if verbs.contains(&"bind".to_string()) {
            binds += 1;
            assert_eq!(
                (resources, strings(rule, "resourceNames")),
                (vec!["clusterroles".into()], vec!["neuron-dra-plugin".into()])
            );
        } else {
            writes += verbs.iter().filter(|v| WRITES.contains(&v.as_str())).count();
        }
    }
    assert!(binds == 1 && writes > 0, "the role binds the plugin's role and writes operands: {role}");

    install();
    let refused: [&[&str]; 12] = [
        &["delete", "validatingadmissionpolicybindings"],
        &["create", "validatingadmissionpolicies"],
        &["patch", "clusterroles"],
        &["create", "roles", "-n", "kube-system"],
        &["patch", "nodes"],
        &["patch", "nodes", "--subresource", "status"],
        &["create", "resourceslices"],
        &["bind", "clusterroles/cluster-admin"],
        &["escalate", "clusterroles"],
        &["impersonate", "users"],
        &["create", "serviceaccounts", "--subresource", "token", "-n", "kube-system"],
        &["create", "pods", "-n", "kube-system"],
    ];
    for args in refused {
        assert!(!operator_can(args), "the operator may {}", args.join(" "));
    }
    let allowed: [&[&str]; 4] = [
        &["bind", "clusterroles/neuron-dra-plugin"],
        &["create", "clusterrolebindings"],
        &["create", "daemonsets", "-n", "kube-system"],
        &["get", "validatingadmissionpolicies/neuron-dra-plugin-fence"],
    ];
    for args in allowed {
        assert!(operator_can(args), "the operator may not {}", args.join(" "));
    }
}

/// The installed fences compile, and the API server's type checker finds nothing wrong in them but lookups of fields
/// another matched kind has (each such expression is guarded by the kind it is for, `request.resource.resource`).
/// The installed policies match every version (`apiVersions: ["*"]`), which the checker skips: their own
/// `status.typeChecking` is always empty. So copies pinned to `v1` are checked, bound to nothing (they decide
/// nothing); and a copy with a type error beside them shows that the checker reports one on this server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_fences_type_check_but_for_fields_of_other_kinds() {
    install();
    let id = unique("typecheck");
    let built = kubectl(&["kustomize", repo("config/rbac").to_str().unwrap()]);
    let mut copies = Vec::new();
    for policy in documents(&built).into_iter().filter(|d| d["kind"] == "ValidatingAdmissionPolicy") {
        let name = policy["metadata"]["name"].as_str().unwrap().to_string();
        let binding = get("validatingadmissionpolicybinding", &name, None).unwrap();
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]), "{name} is bound to deny");
        let mut copy = policy.clone();
        copy["metadata"] = json!({"name": format!("{id}-{name}")});
        for rule in copy["spec"]["matchConstraints"]["resourceRules"].as_array_mut().unwrap() {
            rule["apiVersions"] = json!(["v1"]);
        }
        copies.push((name, copy));
    }
    assert_eq!(
        copies.len(),
        4,
        "config/rbac installs the operator's policy, the plugin's two and the operator token's"
    );
    let mut broken = copies[0].1.clone();
    broken["metadata"]["name"] = json!(format!("{id}-broken"));
    broken["spec"]["validations"] = json!([{"expression": "object.metadata.name + 1 == 2"}]);
    copies.push(("broken".into(), broken));

    let mut problems = Vec::new();
    for (name, copy) in &copies {
        kubectl_with(&kubeconfig(), &["create", "-f", "-"], Some(&copy.to_string())).unwrap();
        let copy_name = copy["metadata"]["name"].as_str().unwrap();
        let checked = eventually(LOADED, &format!("{copy_name} type-checked"), || async {
            let found = get("validatingadmissionpolicy", copy_name, None).ok()?;
            let checked = found["status"].get("typeChecking")?.clone();
            (found["status"]["observedGeneration"] == found["metadata"]["generation"]).then_some(checked)
        })
        .await;
        kubectl(&["delete", "validatingadmissionpolicy", copy_name]);
        for warning in checked["expressionWarnings"].as_array().into_iter().flatten() {
            let text = warning["warning"].as_str().unwrap();
            for error in text.lines().filter(|l| l.contains("ERROR:") && !l.contains("undefined field")) {
                problems.push(format!("{name} {}: {}", warning["fieldRef"].as_str().unwrap(), error.trim()));
            }
        }
    }
    let (controls, found): (Vec<String>, Vec<String>) = problems.into_iter().partition(|p| p.starts_with("broken "));
    assert!(
        controls.iter().any(|p| p.contains("no matching overload")),
        "the checker reported no type error: {controls:?}"
    );
    assert!(found.is_empty(), "type errors in config/rbac's fences: {}", found.join("; "));
}
