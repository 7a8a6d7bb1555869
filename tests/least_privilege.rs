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
use neuron_dra_operator::logic::build;
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
    let driver_namespace = with_kind(&build::namespace(&config), "v1", "Namespace");
    accepted_create("create the driver namespace", &operator, &driver_namespace).await;
    let account = with_kind(&build::service_account(&config), "v1", "ServiceAccount");
    assert_accepted("create the plugin's ServiceAccount", create(&operator, &account).await);
    let mut elsewhere_account = account.clone();
    elsewhere_account["metadata"]["namespace"] = json!("kube-system");
    let refused = create(&operator, &elsewhere_account).await;
    assert_refused("a ServiceAccount in kube-system", refused, "may write serviceaccounts only in a driver namespace");

    // The plugin's DaemonSet as the operator renders it, and variants of it, each one rule broken.
    let rendered = with_kind(&build::daemon_set(&config), "apps/v1", "DaemonSet");
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
    let (driver, plugin) = (s.driver_namespace(), build::plugin_name(&s.id));
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
    let key = build::device_quota_key(&config.spec.device_class_name);
    let scoped = quota(
        &team,
        "scoped",
        json!({"hard": {key.clone(): "4"}, "scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
    );
    assert_refused("a scoped quota", create(&operator, &scoped).await, quota_rule);
    let budget = with_kind(&build::resource_quota(&config, &team, 4.into()), "v1", "ResourceQuota");
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

/// Rules of #50.1: the plugin's DaemonSet only in the shape the operator renders, each attack of the issue one rule
/// broken (with the operator's token, in a driver namespace, with an allowed image and the plugin's own account).
const SHAPE_ATTACKS: [(&str, &str, &str, &str); 19] = [
    ("hostport", CONTAINER, r#"{"ports": [{"containerPort": 10250, "hostPort": 10250}]}"#, CONTAINER_FIELDS_RULE),
    ("command", CONTAINER, r#"{"command": ["/bin/sh", "-c", "id"]}"#, COMMAND_RULE),
    ("args", CONTAINER, r#"{"args": ["--debug"]}"#, CONTAINER_FIELDS_RULE),
    ("runasuser", POD, r#"{"securityContext": {"runAsUser": 0}}"#, POD_SECURITY_RULE),
    ("seccomp", POD, r#"{"securityContext": {"seccompProfile": {"type": "Unconfined"}}}"#, POD_SECURITY_RULE),
    ("apparmor", POD, r#"{"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}"#, POD_SECURITY_RULE),
    (
        "escalation",
        CONTAINER,
        r#"{"securityContext": {"allowPrivilegeEscalation": true, "runAsUser": 0}}"#,
        CONTAINER_FIELDS_RULE,
    ),
    (
        "annotation",
        "/spec/template/metadata",
        r#"{"annotations": {"container.apparmor.security.beta.kubernetes.io/kubelet-plugin": "unconfined"}}"#,
        ANNOTATION_RULE,
    ),
    ("propagation", MOUNT, r#"{"mountPropagation": "HostToContainer"}"#, MOUNT_RULE),
    ("subpath", MOUNT, r#"{"subPath": "x"}"#, MOUNT_RULE),
    ("tolerate", POD, r#"{"tolerations": [{"operator": "Exists"}]}"#, TOLERATION_RULE),
    ("priority", POD, r#"{"priorityClassName": "system-cluster-critical"}"#, PRIORITY_RULE),
    (
        "requests",
        CONTAINER,
        r#"{"resources": {"requests": {"cpu": "60", "memory": "200Gi"}, "limits": {"cpu": "60", "memory": "200Gi"}}}"#,
        RESOURCES_RULE,
    ),
    ("gpu", CONTAINER, r#"{"resources": {"limits": {"cpu": "20m", "nvidia.com/gpu": "1"}}}"#, RESOURCES_RULE),
    (
        "secretenv",
        CONTAINER,
        r#"{"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}"#,
        ENV_RULE,
    ),
    ("envfrom", CONTAINER, r#"{"envFrom": [{"secretRef": {"name": "s"}}]}"#, CONTAINER_FIELDS_RULE),
    ("claims", POD, r#"{"resourceClaims": [{"name": "all", "resourceClaimTemplateName": "admin"}]}"#, POD_FIELDS_RULE),
    ("runtime", POD, r#"{"runtimeClassName": "unconfined"}"#, POD_FIELDS_RULE),
    (
        "init",
        POD,
        r#"{"initContainers": [{"name": "x", "image": "public.ecr.aws/neuron/neuron-dra-driver:1.1.0"}]}"#,
        POD_FIELDS_RULE,
    ),
];
const POD: &str = "/spec/template/spec";
const CONTAINER: &str = "/spec/template/spec/containers/0";
const MOUNT: &str = "/spec/template/spec/containers/0/volumeMounts/0";
const POD_FIELDS_RULE: &str = "the operator may only write the plugin pod's own fields";
const CONTAINER_FIELDS_RULE: &str = "the operator may only write the plugin container's own fields";
const COMMAND_RULE: &str = "the operator may only run the plugin's own command, k8s-neuron-dra-driver, with no args";
const ENV_RULE: &str = "may only set the plugin's environment from values or the downward API";
const MOUNT_RULE: &str = "the operator may only mount the plugin's volumes by name and path";
const POD_SECURITY_RULE: &str = "the operator may not set the plugin pod's securityContext";
const ANNOTATION_RULE: &str = "the operator may not annotate the plugin's pods";
const TOLERATION_RULE: &str = "the operator may only give the plugin tolerations that name a key";
const PRIORITY_RULE: &str = "the operator may only give the plugin a priority class of the install's priorityClasses";
const RESOURCES_RULE: &str = "the operator may only request or limit cpu up to 1 and memory up to 1Gi";

/// `object` with `change` merged into the object at the JSON pointer `at`.
fn changed(object: &Value, at: &str, change: &str) -> Value {
    let mut object = object.clone();
    let change: Value = serde_json::from_str(change).unwrap();
    let target = object.pointer_mut(at).unwrap_or_else(|| panic!("no {at}")).as_object_mut().unwrap();
    target.extend(change.as_object().unwrap().clone());
    object
}

/// #50.1: beyond the rules of #38, every field of the plugin's pod outside what the operator renders is refused,
/// on create and on update; the rendered DaemonSet (with the config's own env, tolerations and resources) goes
/// through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_writes_the_plugin_daemon_set_only_as_rendered() {
    let s = Scenario::new("lpshape").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let spec = json!({"profiles": [{"name": "train", "training": {"devices": 4}}],
        "driver": {"env": [{"name": "LOG_LEVEL", "value": "debug"}],
            "tolerations": [{"key": "example.com/maintenance", "operator": "Exists"}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}});
    let config = validate(&serde_json::from_value(s.config(&s.id, spec)).unwrap()).expect("a valid config");
    let driver_namespace = with_kind(&build::namespace(&config), "v1", "Namespace");
    accepted_create("create the driver namespace", &operator, &driver_namespace).await;
    let rendered = with_kind(&build::daemon_set(&config), "apps/v1", "DaemonSet");
    for (suffix, at, change, rule) in SHAPE_ATTACKS {
        let mut ds = changed(&rendered, at, change);
        let name = format!("neuron-dra-{}-{suffix}", s.id);
        ds["metadata"]["name"] = json!(name);
        ds["spec"]["template"]["spec"]["serviceAccountName"] = json!(name);
        assert_refused(&format!("a DaemonSet with {change}"), create(&operator, &ds).await, rule);
    }
    assert_accepted("the plugin's DaemonSet as rendered", create(&operator, &rendered).await);
    // The same shape on update: changed later into one of the refused.
    for (what, change, rule) in [
        (
            "a shell",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "kubelet-plugin",
            "command": ["/bin/sh", "-c", "id"]}]}}}}),
            COMMAND_RULE,
        ),
        (
            "a priority class",
            json!({"spec": {"template": {"spec": {"priorityClassName": "system-cluster-critical"}}}}),
            PRIORITY_RULE,
        ),
        ("a runtime class", json!({"spec": {"template": {"spec": {"runtimeClassName": "x"}}}}), POD_FIELDS_RULE),
    ] {
        let refused = patch_strategic(&operator, &rendered, &change).await;
        assert_refused(&format!("patch the plugin's DaemonSet to {what}"), refused, rule);
    }
    delete(&operator, &rendered).await.expect("the operator deletes its plugin DaemonSet");
    delete(&admin, &driver_namespace).await.unwrap();
}

const CLASS_RULE: &str = "the operator may only write DeviceClasses that select Neuron devices or node entries of neuron.aws.com as it renders them";
const QUOTA_RULE: &str = "the operator may only budget devices";
const CLASS_NAME_RULE: &str =
    "the operator may only write DeviceClasses named as the install's deviceClassPatterns allow";
const ADMIN_ACCESS_RULE: &str = "the operator may not write a ResourceClaimTemplate with adminAccess";
const NAMESPACE_LABEL_RULE: &str = "the operator may only label a namespace with its own labels";

/// #50.2: DeviceClasses only with the selectors the operator renders (one over every device of every driver, or
/// another driver's, would be claimed outside every budget), no ResourceClaimTemplate with adminAccess (every
/// device of every driver, in use or not), and a namespace only with the operator's own labels: never
/// `resource.kubernetes.io/admin-access` or another Pod Security label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_writes_classes_templates_and_namespaces_only_as_rendered() {
    let s = Scenario::new("lpclass").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let config = config(&s);
    let class = |object: k8s_openapi::api::resource::v1::DeviceClass, suffix: &str| {
        let mut class = with_kind(&object, "resource.k8s.io/v1", "DeviceClass");
        class["metadata"]["name"] = json!(format!("{}-{suffix}.neuron.aws.com", s.id));
        class
    };
    let devices = class(build::device_class(&config), "devices");
    let every =
        changed(&class(build::device_class(&config), "every"), "/spec/selectors/0/cel", r#"{"expression": "true"}"#);
    refused_create("a class of every device of every driver", &operator, &admin, &every, CLASS_RULE).await;
    let gpu = r#"{"expression": "device.driver == 'gpu.nvidia.com'"}"#;
    let gpu = changed(&class(build::device_class(&config), "gpu"), "/spec/selectors/0/cel", gpu);
    assert_refused("a class of another driver's devices", create(&operator, &gpu).await, CLASS_RULE);
    let mut configured = class(build::device_class(&config), "configured");
    configured["spec"]["config"] = json!([{"opaque": {"driver": "neuron.aws.com", "parameters": {"x": 1}}}]);
    assert_refused("a class with a config", create(&operator, &configured).await, CLASS_RULE);
    let mut none = class(build::device_class(&config), "none");
    none["spec"]["selectors"] = json!([]);
    assert_refused("a class with no selector", create(&operator, &none).await, CLASS_RULE);
    let mut gpu_named = class(build::device_class(&config), "x");
    gpu_named["metadata"]["name"] = json!(format!("{}.gpu.nvidia.com", s.id));
    assert_refused("a class under another driver's name", create(&operator, &gpu_named).await, CLASS_NAME_RULE);
    assert_accepted("the class as rendered", create(&operator, &devices).await);
    let nodes = class(build::ultra_server_node_class(&config), "nodes");
    assert_accepted("the node entries' class as rendered", create(&operator, &nodes).await);
    let widen = json!({"spec": {"selectors": [{"cel": {"expression": "true"}}]}});
    assert_refused("widen its class to every device", patch(&operator, &devices, &widen).await, CLASS_RULE);

    // The attacker's namespace as it would need to be for adminAccess (labelled by the admin here: the token may
    // not, below).
    let team = s.namespace("team", &[("resource.kubernetes.io/admin-access", "true")]).await;
    let template = |name: &str, exactly: Value| {
        ours(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": team},
            "spec": {"spec": {"devices": {"requests": [{"name": "all", "exactly": exactly}]}}}}))
    };
    let class_name = devices["metadata"]["name"].clone();
    let all = template("all", json!({"deviceClassName": class_name, "allocationMode": "All", "adminAccess": true}));
    refused_create("a template with adminAccess", &operator, &admin, &all, ADMIN_ACCESS_RULE).await;
    let plain = template("plain", json!({"deviceClassName": class_name, "allocationMode": "ExactCount", "count": 1}));
    assert_accepted("a template without", create(&operator, &plain).await);
    delete(&operator, &plain).await.unwrap();

    // Namespaces: the driver namespace as rendered, and never a label it does not render.
    let rendered = with_kind(&build::namespace(&config), "v1", "Namespace");
    for (key, value) in [
        ("resource.kubernetes.io/admin-access", "true"),
        ("pod-security.kubernetes.io/warn", "privileged"),
        ("pod-security.kubernetes.io/enforce-version", "v1.0"),
        ("example.com/other", "x"),
    ] {
        let mut labelled = rendered.clone();
        labelled["metadata"]["labels"][key] = json!(value);
        refused_create(
            &format!("a driver namespace labelled {key}"),
            &operator,
            &admin,
            &labelled,
            NAMESPACE_LABEL_RULE,
        )
        .await;
    }
    let mut baseline = rendered.clone();
    baseline["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = json!("baseline");
    assert_refused("another enforce level", create(&operator, &baseline).await, NAMESPACE_LABEL_RULE);
    accepted_create("the driver namespace as rendered", &operator, &rendered).await;
    let admin_access = json!({"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}});
    let refused = patch(&operator, &rendered, &admin_access).await;
    assert_refused("label the driver namespace for admin access", refused, NAMESPACE_LABEL_RULE);
    for object in [&devices, &nodes] {
        delete(&operator, object).await.unwrap();
    }
    for name in [&team, &s.driver_namespace()] {
        delete(&admin, &namespace(name)).await.unwrap();
    }
}

/// #50.3: the operator's token changes a config only in its finalizers and status: a spec it wrote would outlive
/// the revoked token, and the real operator would roll it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_operator_token_changes_a_config_only_in_finalizers_and_status() {
    let s = Scenario::new("lpconfig").await;
    let (operator, admin) = (operator(&s.id).await, s.client.clone());
    let spec = json!({"profiles": [{"name": "train", "training": {"devices": 4}}]});
    let config = s.config(&s.id, spec);
    assert_accepted("the admin's config", create(&admin, &config).await);
    let rule = "the operator may change a NeuronDRAConfig only in its finalizers and status, never its spec";
    let image = json!({"spec": {"driver": {"image": "public.ecr.aws/neuron/neuron-dra-driver:9.9.9"}}});
    let refused = patch(&operator, &config, &image).await;
    assert_refused("change the config's driver image", refused, rule);
    let label = json!({"metadata": {"labels": {"neurondra.io/test": "elsewhere"}}});
    assert_refused("relabel the config", patch(&operator, &config, &label).await, rule);
    let finalizer = json!({"metadata": {"finalizers": ["neurondra.io/cleanup"]}});
    assert_accepted("add the finalizer", patch(&operator, &config, &finalizer).await);
    let status = json!({"status": {"observedGeneration": 1}});
    let api = api(&operator, &config).await;
    let written = api.patch_status(&s.id, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await;
    assert_accepted("write the status", answer(written));
    let removed = json!({"metadata": {"finalizers": null}});
    assert_accepted("remove the finalizer", patch(&operator, &config, &removed).await);
    delete(&admin, &config).await.unwrap();
}

/// #50.3: `edit` in the operator's namespace (serviceaccounts/token create) no longer makes one the operator: only
/// the kubelet mints tokens of the operator's ServiceAccount; the same holder mints another account's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_holder_in_the_operators_namespace_mints_no_operator_token() {
    let s = Scenario::new("lptoken").await;
    let admin = s.client.clone();
    let editor = format!("{}-editor", s.id);
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": editor, "namespace": OPERATOR_NAMESPACE}});
    assert_accepted("the editor's account", create(&admin, &account).await);
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": editor, "namespace": OPERATOR_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": editor, "namespace": OPERATOR_NAMESPACE}]});
    assert_accepted("edit in the operator's namespace", create(&admin, &binding).await);
    let kubeconfig = token_kubeconfig(
        &std::env::temp_dir().join(format!("{editor}.kubeconfig")),
        &token(OPERATOR_NAMESPACE, &editor, &[]),
    );
    let mint = |name: &str| {
        kubectl_with(&kubeconfig, &["create", "token", name, "-n", OPERATOR_NAMESPACE, "--duration=10m"], None)
    };
    // kubectl says "is forbidden" where the API server answered 403.
    let forbidden = |e: String| if e.contains("is forbidden") { format!("403 {}", e.trim()) } else { e };
    let refused = mint(OPERATOR_SA).map(|_| ()).map_err(forbidden);
    let rule = format!(
        "only the kubelet may mint a token for the operator's ServiceAccount {OPERATOR_NAMESPACE}/{OPERATOR_SA}"
    );
    assert_refused("mint the operator's token", refused, &rule);
    // RBAC lets it: the refusal is the policy's. Its own account's token it mints.
    accepted("mint its own account's token", || async { mint(&editor).map(|_| ()) }).await;
    delete(&admin, &binding).await.unwrap();
    delete(&admin, &account).await.unwrap();
}

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
    let mut rendered = with_kind(&build::daemon_set(&config), "apps/v1", "DaemonSet");
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
    let mut every = with_kind(&build::device_class(&config), "resource.k8s.io/v1", "DeviceClass");
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
    let mut named = with_kind(&build::device_class(&config), "resource.k8s.io/v1", "DeviceClass");
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
