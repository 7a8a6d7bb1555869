//! #50 acceptance: each rule of the operator's policy is the one that refuses its attack.

use super::objects::*;
use super::shape::*;
use crate::*;

/// #50 acceptance, "each test fails when its rule is removed", tried on the server: a copy of the shipped operator
/// policy that matches a stand-in account (bound to the operator's ClusterRole, its namespaces `<id>-*`) refuses
/// each attack above with the same rule, and the same copy without that one rule lets the attack through. The
/// copy is the shipped file's, so a rule that refuses nothing, or an attack another rule catches first, fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shape_rule_alone_refuses_its_attack() {
    let s = Scenario::new("lpminus").await;
    let admin = s.client.clone();
    let mutant_ns = s.namespace("mutant", &[("resource.kubernetes.io/admin-access", "true")]).await;
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mutant", "namespace": mutant_ns}});
    assert_accepted("the stand-in account", create(&admin, &account).await);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{}-mutant", s.id)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "neuron-dra-operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "mutant", "namespace": mutant_ns}]});
    assert_accepted("the operator's rights to it", create(&admin, &role).await);
    let mutant = support::attack::client_with(&token(&mutant_ns, "mutant", &[]), &format!("{}-mutant", s.id)).await;

    let shipped = std::fs::read_to_string(support::cluster::repo("config/rbac/operator_policy.yaml")).unwrap();
    let shipped: Value = serde_yaml::from_str(&shipped).unwrap();
    let policy_name = format!("{}-minus", s.id);
    let user = format!("system:serviceaccount:{mutant_ns}:mutant");
    let apply_without = |skip: Option<usize>| {
        let mut policy = shipped.clone();
        policy["metadata"] = json!({"name": policy_name});
        policy["spec"]["matchConditions"][0]["expression"] = json!(format!("request.userInfo.username == '{user}'"));
        for variable in policy["spec"]["variables"].as_array_mut().unwrap() {
            if variable["name"] == "namespacePatterns" {
                variable["expression"] = json!(format!("['{}-*']", s.id));
            }
        }
        if let Some(index) = skip {
            policy["spec"]["validations"].as_array_mut().unwrap().remove(index);
        }
        let args = ["apply", "--server-side", "--force-conflicts", "-f", "-"];
        kubectl_with(&support::cluster::kubeconfig(), &args, Some(&policy.to_string())).unwrap();
    };
    apply_without(None);
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name}, "spec": {"policyName": policy_name, "validationActions": ["Deny"]}});
    assert_accepted("bind the copy", create(&admin, &binding).await);

    let config = config(&s);
    let mut rendered = with_kind(&desired::daemon_set(&config), "apps/v1", "DaemonSet");
    rendered["metadata"]["namespace"] = json!(mutant_ns);
    let mut attacks: Vec<(&str, Value)> = Vec::new();
    for (suffix, at, change, rule) in SHAPE_ATTACKS {
        if attacks.iter().any(|(r, _)| *r == rule) {
            continue;
        }
        let mut ds = changed(&rendered, at, change);
        let name = format!("neuron-dra-{}-{suffix}", s.id);
        ds["metadata"]["name"] = json!(name);
        ds["spec"]["template"]["spec"]["serviceAccountName"] = json!(name);
        attacks.push((rule, ds));
    }
    let mut every = with_kind(&desired::device_class(&config), "resource.k8s.io/v1", "DeviceClass");
    every["metadata"]["name"] = json!(format!("{}-every.neuron.aws.com", s.id));
    every["spec"]["selectors"] = json!([{"cel": {"expression": "true"}}]);
    attacks.push((CLASS_RULE, every));
    attacks.push((
        ADMIN_ACCESS_RULE,
        ours(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "all", "namespace": mutant_ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "all", "exactly": {"deviceClassName": "neuron.aws.com",
            "allocationMode": "All", "adminAccess": true}}]}}}})),
    ));
    attacks.push((
        QUOTA_RULE,
        ours(json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "gpu", "namespace": mutant_ns}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}})),
    ));
    let mut named = with_kind(&desired::device_class(&config), "resource.k8s.io/v1", "DeviceClass");
    named["metadata"]["name"] = json!(format!("{}.gpu.nvidia.com", s.id));
    attacks.push((CLASS_NAME_RULE, named));
    attacks.push((
        NAMESPACE_LABEL_RULE,
        ours(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": format!("{}-admin", s.id), "labels": {"resource.kubernetes.io/admin-access": "true"}}})),
    ));

    let validations = shipped["spec"]["validations"].as_array().unwrap().clone();
    // The rule whose message starts as `rule` does (a message made of variables, the resources', is matched by
    // its start), exactly one.
    let index_of = |rule: &str| {
        let start: String = rule.chars().take(48).collect();
        let found: Vec<usize> = (0..validations.len())
            .filter(|&i| {
                let v = &validations[i];
                let text = v["message"].as_str().or(v["messageExpression"].as_str()).unwrap_or_default();
                text.replace("\\'", "'").contains(&start)
            })
            .collect();
        assert_eq!(found.len(), 1, "operator_policy.yaml has not one rule that says {rule:?}: {found:?}");
        found[0]
    };
    for (rule, object) in &attacks {
        apply_without(None);
        refused_create(&format!("with every rule: {rule}"), &mutant, &admin, object, rule).await;
        apply_without(Some(index_of(rule)));
        accepted_create(&format!("without the rule {rule:?}"), &mutant, object).await;
        delete(&admin, object).await.unwrap();
    }

    // The config's spec: a patch, not a create.
    let rule = "the operator may change a NeuronDRAConfig only in its finalizers and status";
    let ndc = s.config(&s.id, json!({"profiles": [{"name": "train", "training": {"devices": 4}}]}));
    assert_accepted("the admin's config", create(&admin, &ndc).await);
    let image =
        |tag: &str| json!({"spec": {"driver": {"image": format!("public.ecr.aws/neuron/neuron-dra-driver:{tag}")}}});
    let (refused_image, accepted_image) = (image("9.9.9"), image("9.9.8"));
    apply_without(None);
    support::attack::refused("with every rule: the config's spec", || patch(&mutant, &ndc, &refused_image), rule).await;
    apply_without(Some(index_of(rule)));
    accepted("without the rule: the config's spec", || patch(&mutant, &ndc, &accepted_image)).await;
    for object in [&ndc, &binding, &role, &account] {
        delete(&admin, object).await.unwrap();
    }
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name}});
    delete(&admin, &policy).await.unwrap();
    delete(&admin, &namespace(&mutant_ns)).await.unwrap();
}
