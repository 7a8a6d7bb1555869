//! Least privilege the API server enforces (#38), tried with the operator's real token on the real control plane:
//! every attack of the issue refused with the rule that refuses it, and beside each the same token doing what the
//! operator does, so no refusal is the token's or the server's general failure. Here: what config/rbac's policy
//! `neuron-dra-operator` refuses (its messages). What RBAC alone refuses the token (admission objects, roles, Nodes,
//! ResourceSlices) is in tests/least_privilege_rbac.rs; the plugin's tokens and pods in
//! tests/least_privilege_plugin.rs.

mod support {
    pub mod attack;
    pub mod cluster;
    pub mod scenario;
}

use neuron_dra_operator::api::RemediationEffect;
use neuron_dra_operator::api::labels::{LABEL_MANAGED_BY, MANAGER};
use neuron_dra_operator::logic::desired;
use neuron_dra_operator::logic::remediation::{self, Problem};
use neuron_dra_operator::logic::validate::{ValidatedConfig, validate};
use serde_json::{Value, json};
use support::attack::{
    accepted, accepted_create, answer, api, assert_accepted, assert_refused, create, delete, operator, ours, patch,
    patch_strategic, refused_create,
};
use support::cluster::{OPERATOR_NAMESPACE, OPERATOR_SA, kubectl_with, served_version, token, token_kubeconfig};
use support::scenario::Scenario;

const LABELLED_RULE: &str =
    "the operator may only write objects labelled app.kubernetes.io/managed-by=neuron-dra-operator";
const DAEMON_SET_RULE: &str =
    "may only write a DaemonSet named neuron-dra-<config> that runs the ServiceAccount of its own name";
const PRIVILEGE_RULE: &str = "the operator may not run privileged containers or add capabilities";
const QUOTA_RULE: &str = "the operator may only budget devices";
const BINDING_RULE: &str = "may only bind the ClusterRole neuron-dra-plugin, and only to kubelet plugin ServiceAccounts (neuron-dra-*) in driver namespaces";

/// This test's config (its driver namespace `<id>-driver`, a node selector no node matches), as the operator
/// validates it.
fn config(s: &Scenario) -> ValidatedConfig {
    let spec = json!({"profiles": [{"name": "train", "training": {"devices": 4}}]});
    validate(&serde_json::from_value(s.config(&s.id, spec)).unwrap()).expect("a valid config")
}

fn with_kind<T: serde::Serialize>(object: &T, api_version: &str, kind: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    value
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn service_account(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
}

fn binding(name: &str, role: &str, subjects: Value) -> Value {
    ours(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects}))
}

fn plugin_subject(namespace: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "name": name, "namespace": namespace})
}

/// #38.2: DaemonSets, ServiceAccounts and Namespaces only in a driver namespace, and a DaemonSet only as the
/// plugin's: its own-named plugin ServiceAccount, allowed images, the plugin's host paths, no host namespaces,
/// privilege or capabilities. The plugin's DaemonSet as the operator renders it goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_runs_only_the_plugin_daemon_set_in_a_driver_namespace() {
    let s = Scenario::new("lpds").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let config = config(&s);

    // Namespaces: a driver namespace (the tests' allow-list has `*-driver`), no other.
    let elsewhere = ours(namespace(&format!("{}-elsewhere", s.id)));
    let rule = "the operator may write namespaces only in a driver namespace";
    refused_create("create a namespace that is not a driver namespace", &operator, &admin, &elsewhere, rule).await;
    let driver_namespace = with_kind(&desired::namespace(&config), "v1", "Namespace");
    accepted_create("create the driver namespace", &operator, &driver_namespace).await;
    let account = with_kind(&desired::service_account(&config), "v1", "ServiceAccount");
    assert_accepted("create the plugin's ServiceAccount", create(&operator, &account).await);
    let mut elsewhere_account = account.clone();
    elsewhere_account["metadata"]["namespace"] = json!("kube-system");
    let refused = create(&operator, &elsewhere_account).await;
    assert_refused("a ServiceAccount in kube-system", refused, "may write serviceaccounts only in a driver namespace");

    // The plugin's DaemonSet as the operator renders it, and variants of it, each one rule broken.
    let rendered = with_kind(&desired::daemon_set(&config), "apps/v1", "DaemonSet");
    let named = |suffix: &str| {
        let mut ds = rendered.clone();
        let name = format!("neuron-dra-{}-{suffix}", s.id);
        ds["metadata"]["name"] = json!(name);
        ds["spec"]["template"]["spec"]["serviceAccountName"] = json!(name);
        ds
    };
    let mut kube_system = rendered.clone();
    kube_system["metadata"]["namespace"] = json!("kube-system");
    let rule = "the operator may write daemonsets only in a driver namespace (the install's namespacePatterns); kube-system is not one";
    assert_refused("a DaemonSet in kube-system", create(&operator, &kube_system).await, rule);

    let pod = "/spec/template/spec";
    let container = "/spec/template/spec/containers/0";
    // The operator's policy and the plugin-pods fence both refuse a foreign image, in either order: both say so.
    let images =
        "may only run images from public.ecr.aws/neuron/neuron-dra-driver, localhost/neuron-dra/neuron-dra-driver";
    let host_paths = "the operator may only mount the kubelet plugin's host paths (/var/lib/kubelet/plugins, \
        /var/lib/ndra-kubelet/plugins, /var/lib/kubelet/plugins_registry, /var/lib/ndra-kubelet/plugins_registry, \
        /var/run/cdi)";
    let attacks: [(&str, &str, Value, &str); 10] = [
        ("hostpid", pod, json!({"hostPID": true}), "the operator may not run a DaemonSet with hostPID or hostIPC"),
        ("hostipc", pod, json!({"hostIPC": true}), "the operator may not run a DaemonSet with hostPID or hostIPC"),
        ("privileged", container, json!({"securityContext": {"privileged": true}}), PRIVILEGE_RULE),
        ("caps", container, json!({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}), PRIVILEGE_RULE),
        ("image", container, json!({"image": "example.com/evil:1"}), images),
        ("lookalike", container, json!({"image": "public.ecr.aws/neuron/neuron-dra-driver-evil:1"}), images),
        ("init", pod, json!({"initContainers": [{"name": "x", "image": "example.com/evil:1"}]}), images),
        ("root", "/spec/template/spec/volumes/0", json!({"hostPath": {"path": "/"}}), host_paths),
        // Another kubelet directory than the install's kubeletDirs.
        (
            "kubelet",
            "/spec/template/spec/volumes/0",
            json!({"hostPath": {"path": "/var/lib/k0s/kubelet/plugins"}}),
            host_paths,
        ),
        ("account", pod, json!({"serviceAccountName": "default"}), DAEMON_SET_RULE),
    ];
    for (suffix, at, change, rule) in attacks {
        let mut ds = named(suffix);
        let target = ds.pointer_mut(at).unwrap().as_object_mut().unwrap();
        target.extend(change.as_object().unwrap().clone());
        let refused = create(&operator, &ds).await;
        assert_refused(&format!("a DaemonSet with {change}"), refused, rule);
    }
    let mut foreign_name = named("x");
    foreign_name["metadata"]["name"] = json!(format!("{}-evil", s.id));
    let refused = create(&operator, &foreign_name).await;
    assert_refused("a DaemonSet not named neuron-dra-*", refused, DAEMON_SET_RULE);
    let mut other_plugin = named("x");
    other_plugin["spec"]["template"]["spec"]["serviceAccountName"] = json!(format!("neuron-dra-{}-other", s.id));
    let refused = create(&operator, &other_plugin).await;
    assert_refused("a DaemonSet that runs another plugin's ServiceAccount", refused, DAEMON_SET_RULE);

    assert_accepted("the plugin's DaemonSet as rendered", create(&operator, &rendered).await);
    // Changed later into one of the refused: refused as well.
    let widen = json!({"spec": {"template": {"spec": {"hostPID": true}}}});
    let refused = patch(&operator, &rendered, &widen).await;
    assert_refused("patch the plugin's DaemonSet to hostPID", refused, "may not run a DaemonSet with hostPID");
    delete(&operator, &rendered).await.expect("the operator deletes its plugin DaemonSet");
    delete(&admin, &driver_namespace).await.unwrap();
}

/// #38.2: ClusterRoleBindings only of the installed role `neuron-dra-plugin`, only to plugin ServiceAccounts in
/// driver namespaces. `cluster-admin` is refused by RBAC itself (the operator may `bind` no other role), a role
/// whose rights it holds (`system:basic-user`) by the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_binds_only_the_plugin_role_to_plugin_service_accounts() {
    let s = Scenario::new("lpcrb").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let (driver, plugin) = (s.driver_namespace(), desired::plugin_name(&s.id));
    let name = |suffix: &str| format!("{}-{suffix}", s.id);

    let tenant = binding(&name("basic"), "system:basic-user", json!([plugin_subject("default", "default")]));
    refused_create("bind a role it holds to another ServiceAccount", &operator, &admin, &tenant, BINDING_RULE).await;
    let admin_binding = binding(&name("admin"), "cluster-admin", json!([plugin_subject(&driver, &plugin)]));
    let refused = create(&operator, &admin_binding).await;
    assert_refused("bind cluster-admin", refused, "is attempting to grant RBAC permissions not currently held");
    let attacks = [
        ("default", json!([plugin_subject(&driver, "default")])),
        ("kube-system", json!([plugin_subject("kube-system", &plugin)])),
        ("user", json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}])),
        ("mixed", json!([plugin_subject(&driver, &plugin), plugin_subject("kube-system", "default")])),
        ("none", json!([])),
    ];
    for (suffix, subjects) in attacks {
        let refused = create(&operator, &binding(&name(suffix), "neuron-dra-plugin", subjects)).await;
        assert_refused(&format!("bind the plugin's role to {suffix}"), refused, BINDING_RULE);
    }
    let mut unlabelled = binding(&name("unlabelled"), "neuron-dra-plugin", json!([plugin_subject(&driver, &plugin)]));
    unlabelled["metadata"]["labels"] = json!({});
    assert_refused("an unlabelled binding", create(&operator, &unlabelled).await, LABELLED_RULE);

    let plugin_binding = binding(&name("plugin"), "neuron-dra-plugin", json!([plugin_subject(&driver, &plugin)]));
    accepted_create("bind the plugin's role to the plugin", &operator, &plugin_binding).await;
    let widen = json!({"subjects": [plugin_subject(&driver, &plugin), plugin_subject("kube-system", "default")]});
    let refused = patch(&operator, &plugin_binding, &widen).await;
    assert_refused("add a subject to the plugin's binding", refused, BINDING_RULE);
    delete(&operator, &plugin_binding).await.expect("the operator deletes its binding");
}

/// #38.2: DeviceTaintRules only for driver `neuron.aws.com` (a rule over every device would evict every DRA
/// workload of every driver) and ResourceQuotas only on device keys, unscoped (`pods: 0` in kube-system would stop
/// the cluster). The rule and the budget the operator renders go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_taints_only_neuron_devices_and_budgets_only_devices() {
    let s = Scenario::new("lpquota").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let config = config(&s);
    let version = served_version("devicetaintrules").expect("the control plane serves DeviceTaintRules");
    let problem = Problem {
        node: format!("{}-nowhere", s.id),
        condition: "NeuronHealth".into(),
        reason: "Test".into(),
        since: None,
        observed: 0,
    };
    let rule =
        serde_json::to_value(remediation::rule(&config, &version, &problem, RemediationEffect::NoSchedule)).unwrap();
    let taint_rule = "the operator may only taint devices of driver neuron.aws.com";
    let mut everything = rule.clone();
    everything["metadata"]["name"] = json!(format!("{}-all", s.id));
    everything["spec"]["deviceSelector"] = json!({});
    refused_create("taint every device", &operator, &admin, &everything, taint_rule).await;
    let mut other = rule.clone();
    other["metadata"]["name"] = json!(format!("{}-gpu", s.id));
    other["spec"]["deviceSelector"]["driver"] = json!("gpu.example.com");
    assert_refused("taint another driver's devices", create(&operator, &other).await, taint_rule);
    assert_accepted("taint a Neuron node's devices", create(&operator, &rule).await);
    let widen = json!({"spec": {"deviceSelector": {"driver": null}}});
    assert_refused("widen its rule to every driver", patch(&operator, &rule, &widen).await, taint_rule);
    delete(&operator, &rule).await.expect("the operator deletes its rule");

    let team = s.namespace("team", &[]).await;
    let quota_rule = QUOTA_RULE;
    let quota = |namespace: &str, name: &str, spec: Value| {
        ours(json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": format!("{}-{name}", s.id), "namespace": namespace}, "spec": spec}))
    };
    let pods = quota("kube-system", "pods", json!({"hard": {"pods": "0"}}));
    refused_create("no pods in kube-system", &operator, &admin, &pods, quota_rule).await;
    // #50.2: another driver's device class or extended resource (an ordinary GPU pod there would be refused).
    let gpu_class = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices";
    for (name, hard) in [
        ("cpu", json!({"requests.cpu": "0"})),
        ("count", json!({"count/pods": "0"})),
        ("gpu", json!({"requests.nvidia.com/gpu": "0"})),
        ("eni", json!({"requests.vpc.amazonaws.com/pod-eni": "0"})),
        ("gpuclass", json!({gpu_class: "0"})),
    ] {
        let refused = create(&operator, &quota(&team, name, json!({"hard": hard}))).await;
        assert_refused(&format!("a quota of {hard}"), refused, quota_rule);
    }
    let key = desired::device_quota_key(&config.spec.device_class_name);
    let scoped = quota(
        &team,
        "scoped",
        json!({"hard": {key.clone(): "4"}, "scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
    );
    assert_refused("a scoped quota", create(&operator, &scoped).await, quota_rule);
    let budget = with_kind(&desired::resource_quota(&config, &team, 4.into()), "v1", "ResourceQuota");
    assert_accepted("the team's device budget as rendered", create(&operator, &budget).await);
    delete(&operator, &budget).await.expect("the operator deletes its budget");
    delete(&admin, &namespace(&team)).await.unwrap();
}

/// #38.5 and #26.5: the token writes only what is labelled the operator's: it cannot create, adopt (by labelling),
/// change or delete anything else; and not even a labelled object outside a driver namespace (a tenant's pod that
/// copies the label).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_writes_only_what_is_labelled_the_operators() {
    let s = Scenario::new("lplabel").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let driver = s.namespace("driver", &[]).await;
    let tenant = s.namespace("tenant", &[]).await;

    let unlabelled = service_account(&driver, &format!("{}-foreign", s.id));
    refused_create("an unlabelled ServiceAccount", &operator, &admin, &unlabelled, LABELLED_RULE).await;
    assert_accepted("the admin's ServiceAccount", create(&admin, &unlabelled).await);
    let adopt = json!({"metadata": {"labels": {LABEL_MANAGED_BY: MANAGER}}});
    assert_refused("adopt it by labelling", patch(&operator, &unlabelled, &adopt).await, LABELLED_RULE);
    assert_refused("delete it", delete(&operator, &unlabelled).await, LABELLED_RULE);
    let labelled = ours(service_account(&driver, &format!("{}-ours", s.id)));
    assert_accepted("a labelled ServiceAccount", create(&operator, &labelled).await);
    let disown = json!({"metadata": {"labels": {LABEL_MANAGED_BY: null}}});
    assert_refused("take the label off", patch(&operator, &labelled, &disown).await, LABELLED_RULE);

    // Pods: deleted only in a driver namespace (a rollout step deletes plugin pods), whatever their labels say.
    let pod = |namespace: &str, name: &str| {
        ours(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))
    };
    let victim = pod(&tenant, "victim");
    accepted_create("the tenant's pod", &admin, &victim).await;
    let refused = delete(&operator, &victim).await;
    assert_refused("delete a tenant's pod that copies the label", refused, "may write pods only in a driver namespace");
    let plugin_pod = pod(&driver, "plugin");
    accepted_create("a pod in the driver namespace", &admin, &plugin_pod).await;
    accepted("delete a labelled pod in the driver namespace", || delete(&operator, &plugin_pod)).await;
    let mut unlabelled_pod = pod(&driver, "other");
    unlabelled_pod["metadata"]["labels"] = json!({});
    accepted_create("an unlabelled pod in the driver namespace", &admin, &unlabelled_pod).await;
    assert_refused("delete an unlabelled pod", delete(&operator, &unlabelled_pod).await, LABELLED_RULE);
    for name in [&driver, &tenant] {
        delete(&admin, &namespace(name)).await.unwrap();
    }
}

/// The tests of #50, one topic each, in `tests/least_privilege_topics/`.
mod least_privilege_topics {
    mod minus;
    mod objects;
    mod shape;
}
