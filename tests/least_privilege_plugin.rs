//! Least privilege the API server enforces (#38), for the kubelet plugin: its real tokens on the real control plane.
//! The operator's token starts a plugin as the operator does (driver namespace, ServiceAccount, the binding of the
//! installed role `neuron-dra-plugin`, the DaemonSet as rendered) on two simulated nodes; the DaemonSet controller
//! creates the pods and the scheduler binds them. Then, with the token a plugin pod is given (bound to the pod, so
//! naming the pod and its node), a node-bound token and an unbound one: each write refused with the fence's rule,
//! each legitimate one accepted. Last, who may start a pod or DaemonSet that runs the plugin's ServiceAccount.

mod support {
    pub mod attack;
    pub mod cluster;
    pub mod scenario;
}

use std::path::{Path, PathBuf};

use kube::Client;
use neuron_dra_operator::devtools::simulate::fleet::{self, FleetSpec, SIMULATED_LABEL, slice_name};
use neuron_dra_operator::devtools::simulate::{self as simulate};
use neuron_dra_operator::logic::desired::{self, NEURON_DRIVER};
use neuron_dra_operator::logic::validate::validate;
use serde_json::{Value, json};
use support::attack::{
    accepted_create, assert_accepted, assert_refused, create, delete, patch, patch_status, refused_create,
};
use support::cluster::{client_from, eventually, kubectl, kubectl_with, token, token_kubeconfig};
use support::scenario::{Scenario, TIMEOUT};

const POD_BOUND_RULE: &str = "the kubelet plugin's token must be the one its pod was given";
const POD_RULE: &str = "only the DaemonSet controller may create a pod that runs the kubelet plugin ServiceAccount";
const DAEMON_SET_RULE: &str = "only the operator may create or change a DaemonSet that runs the kubelet plugin";

/// A plugin the operator's token started on two simulated nodes, and its pod on the first.
struct Plugin {
    s: Scenario,
    prefix: String,
    namespace: String,
    account: String,
    daemon_set: Value,
    /// The node its pod runs on, and the other.
    own: String,
    other: String,
    /// The plugin's pod on `own`.
    pod: String,
}

impl Plugin {
    async fn start(name: &str) -> Plugin {
        let s = Scenario::new(name).await;
        let prefix = format!("{}-trn2", s.id);
        let spec = FleetSpec {
            prefix: prefix.clone(),
            count: 2,
            instance_type: "trn2.48xlarge".into(),
            dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
            neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
            kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
        };
        simulate::create_fleet(&s.client, &spec).await.unwrap();
        let (own, other) = (spec.node_name(0), spec.node_name(1));

        let document = s.config(
            &s.id,
            json!({"nodeSelector": {"matchLabels": {SIMULATED_LABEL: prefix}},
            "profiles": [{"name": "train", "training": {"devices": 4}}]}),
        );
        let config = validate(&serde_json::from_value(document).unwrap()).expect("a valid config");
        let (namespace, account) = (s.driver_namespace(), desired::plugin_name(&s.id));
        let operator = support::attack::operator(&s.id).await;
        accepted_create("the driver namespace", &operator, &typed(&desired::namespace(&config), "v1", "Namespace"))
            .await;
        let service_account = typed(&desired::service_account(&config), "v1", "ServiceAccount");
        assert_accepted("the plugin's ServiceAccount", create(&operator, &service_account).await);
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": account, "labels": {"app.kubernetes.io/managed-by": "neuron-dra-operator"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "neuron-dra-plugin"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]});
        assert_accepted("the plugin's binding", create(&operator, &binding).await);
        let daemon_set = typed(&desired::daemon_set(&config), "apps/v1", "DaemonSet");
        assert_accepted("the plugin's DaemonSet", create(&operator, &daemon_set).await);

        let pods = format!("jsonpath={{range .items[?(@.spec.nodeName==\"{own}\")]}}{{.metadata.name}}{{end}}");
        let pod = eventually(TIMEOUT, &format!("the plugin's pod bound to {own}"), || async {
            let name = kubectl(&["get", "pods", "-n", &namespace, "-o", &pods]);
            (!name.trim().is_empty()).then(|| name.trim().to_string())
        })
        .await;
        Plugin { s, prefix, namespace, account, daemon_set, own, other, pod }
    }

    /// A token of the plugin's ServiceAccount (`bound`: `kubectl create token` arguments), as a client, and the
    /// kubeconfig it is in.
    async fn token(&self, what: &str, bound: &[&str]) -> (Client, PathBuf) {
        let path = std::env::temp_dir().join(format!("{}-{what}.kubeconfig", self.s.id));
        let kubeconfig = token_kubeconfig(&path, &token(&self.namespace, &self.account, bound));
        (client_from(&kubeconfig).await, kubeconfig)
    }

    async fn pod_bound(&self) -> (Client, PathBuf) {
        self.token("pod", &["--bound-object-kind", "Pod", "--bound-object-name", &self.pod]).await
    }

    async fn stop(&self) {
        simulate::clear(&self.s.client, Some(&self.prefix)).await.unwrap();
        kubectl(&["delete", "clusterrolebinding", &self.account, "--ignore-not-found"]);
        kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

/// A typed object as JSON, with its `apiVersion` and `kind`.
fn typed<T: serde::Serialize>(object: &T, api_version: &str, kind: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    value
}

async fn client(token: &str, name: &str) -> Client {
    support::attack::client_with(token, name).await
}

/// What the API server authenticates a token as (`kubectl auth whoami`): its `extra`.
fn extra(kubeconfig: &Path) -> Value {
    let review = kubectl_with(kubeconfig, &["auth", "whoami", "-o", "json"], None).unwrap();
    serde_json::from_str::<Value>(&review).unwrap()["status"]["userInfo"]["extra"].clone()
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
}

/// A one-device slice of `node` (driver and pool given), as AWS's driver publishes one.
fn slice(name: &str, node: &str, driver: &str, pool: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "neuron-device-0"}]}})
}

fn condition(type_: &str, status: &str) -> Value {
    json!({"status": {"conditions": [{"type": type_, "status": status, "reason": "LeastPrivilegeTest",
        "message": "least privilege test", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
}

fn labels(key: &str, value: Value) -> Value {
    json!({"metadata": {"labels": {key: value}}})
}

/// #38.3: the pod-bound token (as the kubelet mounts it) writes its own node's slices, the driver's labels and
/// conditions on its own Node, and nothing else: not another node's slice or Node, no taint, no `unschedulable`,
/// no kubelet-reserved or other labels, no annotation, no capacity, no condition of the kubelet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_plugin_token_writes_only_its_own_nodes_slices_driver_labels_and_conditions() {
    let p = Plugin::start("lpplugin").await;
    let (plugin, kubeconfig) = p.pod_bound().await;
    let (own, other, admin) = (&p.own, &p.other, &p.s.client);
    // The fence's premise: the API server names the pod and its node in a pod-bound token's user info.
    let extra = extra(&kubeconfig);
    assert_eq!(extra["authentication.kubernetes.io/pod-name"], json!([p.pod]), "{extra}");
    assert_eq!(extra["authentication.kubernetes.io/node-name"], json!([own]), "{extra}");
    assert!(extra["authentication.kubernetes.io/pod-uid"][0].is_string(), "{extra}");

    let foreign = slice(&format!("{}-foreign", p.s.id), other, NEURON_DRIVER, other);
    let slices_rule = format!("the kubelet plugin on node {own} may only write the ResourceSlices of its own node");
    refused_create("another node's slice", &plugin, admin, &foreign, &slices_rule).await;
    let name = format!("{}-own", p.s.id);
    let refused = create(&plugin, &slice(&name, own, "gpu.example.com", own)).await;
    assert_refused("another driver's slice", refused, "may only publish ResourceSlices of driver neuron.aws.com");
    let refused = create(&plugin, &slice(&name, own, NEURON_DRIVER, other)).await;
    assert_refused("a pool named after another node", refused, "may only publish the pool named after its node");
    let mine = slice(&name, own, NEURON_DRIVER, own);
    assert_accepted("its own node's slice", create(&plugin, &mine).await);
    assert_accepted("updated", patch(&plugin, &mine, &labels("example.com/x", json!("y"))).await);
    assert_accepted("deleted", delete(&plugin, &mine).await);
    let theirs = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": slice_name(other)}});
    let refused = patch(&plugin, &theirs, &labels("example.com/x", json!("y"))).await;
    assert_refused("update another node's published slice", refused, &slices_rule);
    assert_refused("delete it", delete(&plugin, &theirs).await, &slices_rule);

    let (own_node, other_node) = (node(own), node(other));
    let driver_label = labels("neuron.aws.com/least-privilege", json!("yes"));
    let refused = patch(&plugin, &other_node, &driver_label).await;
    assert_refused(
        "label another node",
        refused,
        &format!("the kubelet plugin on node {own} may only write its own Node"),
    );
    let refused = patch_status(&plugin, &other_node, &condition("NeuronHealth", "False")).await;
    assert_refused("set another node's condition", refused, "may only write its own Node");
    let spec_rule = "the kubelet plugin may not change its Node's spec";
    let taint = json!({"spec": {"taints": [{"key": "example.com/evil", "effect": "NoExecute"}]}});
    assert_refused("taint its node", patch(&plugin, &own_node, &taint).await, spec_rule);
    let cordon = json!({"spec": {"unschedulable": true}});
    assert_refused("cordon its node", patch(&plugin, &own_node, &cordon).await, spec_rule);
    for key in ["node-role.kubernetes.io/x", "node-restriction.kubernetes.io/x", "example.com/x"] {
        let refused = patch(&plugin, &own_node, &labels(key, json!("yes"))).await;
        let rule =
            format!("may change only its driver's labels (neuron.aws.com/, resource.aws.com/) on its Node, not {key}");
        assert_refused(&format!("label its node {key}"), refused, &rule);
    }
    let annotate = json!({"metadata": {"annotations": {"example.com/x": "yes"}}});
    let refused = patch(&plugin, &own_node, &annotate).await;
    assert_refused("annotate its node", refused, "may not change its Node's annotations");
    // An owner that does not exist: the garbage collector would delete the Node.
    let owned = json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "gone",
        "uid": "00000000-0000-0000-0000-000000000000"}]}});
    let rule = "may not change its Node's owner references or finalizers";
    assert_refused("give its node an owner", patch(&plugin, &own_node, &owned).await, rule);
    let finalized = json!({"metadata": {"finalizers": ["example.com/stay"]}});
    assert_refused("give its node a finalizer", patch(&plugin, &own_node, &finalized).await, rule);
    let version = json!({"status": {"nodeInfo": {"kubeletVersion": "v9.9.9"}}});
    let rule = "may not change its Node's nodeInfo or daemonEndpoints";
    assert_refused("rewrite its kubelet version", patch_status(&plugin, &own_node, &version).await, rule);
    let resources = json!({"aws.amazon.com/neuron": "64"});
    let addresses = json!([{"type": "InternalIP", "address": "10.255.0.1"}]);
    for (field, value) in [("capacity", &resources), ("allocatable", &resources), ("addresses", &addresses)] {
        let refused = patch_status(&plugin, &own_node, &json!({"status": {field: value}})).await;
        assert_refused(
            &format!("change its {field}"),
            refused,
            "may not change its Node's capacity, allocatable or addresses",
        );
    }
    // #50.5: what the kubelet reports of images and volumes (the scheduler favours nodes holding a pod's images).
    let images = json!([{"names": ["registry.example.com/bait:1"], "sizeBytes": 1}]);
    let volumes = json!(["kubernetes.io/csi/example^vol-1"]);
    let attached = json!([{"name": "kubernetes.io/csi/example^vol-1", "devicePath": "/dev/x"}]);
    for (field, value) in [("images", &images), ("volumesInUse", &volumes), ("volumesAttached", &attached)] {
        let refused = patch_status(&plugin, &own_node, &json!({"status": {field: value}})).await;
        let rule = "may not change its Node's images, volumesInUse or volumesAttached";
        assert_refused(&format!("change its {field}"), refused, rule);
    }
    let refused = patch_status(&plugin, &own_node, &condition("Ready", "False")).await;
    let rule = "may set only its driver's conditions (AcceleratedHardwareReady, NeuronHealth) on its Node";
    assert_refused("set its node NotReady", refused, rule);
    assert_refused("delete its node", delete(&plugin, &own_node).await, "cannot delete resource \"nodes\"");

    // What AWS's driver does on its node goes through.
    assert_accepted("a driver label", patch(&plugin, &own_node, &driver_label).await);
    assert_accepted("another", patch(&plugin, &own_node, &labels("resource.aws.com/x", json!("y"))).await);
    assert_accepted("removed again", patch(&plugin, &own_node, &labels("resource.aws.com/x", Value::Null)).await);
    for type_ in ["NeuronHealth", "AcceleratedHardwareReady"] {
        assert_accepted(type_, patch_status(&plugin, &own_node, &condition(type_, "True")).await);
    }
    let stored = support::attack::get(admin, &other_node).await.unwrap();
    assert!(stored["metadata"]["labels"].get("neuron.aws.com/least-privilege").is_none(), "{stored}");
    p.stop().await;
}

/// #38.7: a token of the plugin's ServiceAccount bound to a Node (anyone who may create tokens in the driver
/// namespace can mint one for any node), to a Secret, or to nothing, is refused every write with the fence's first
/// rule; the pod-bound one beside it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_token_not_bound_to_its_pod_writes_nothing() {
    let p = Plugin::start("lpnodebound").await;
    let admin = &p.s.client;
    let (node_bound, kubeconfig) =
        p.token("node", &["--bound-object-kind", "Node", "--bound-object-name", &p.other]).await;
    // A node-bound token names the node, and no pod.
    let extra = extra(&kubeconfig);
    assert_eq!(extra["authentication.kubernetes.io/node-name"], json!([p.other]), "{extra}");
    assert!(extra.get("authentication.kubernetes.io/pod-name").is_none(), "{extra}");
    kubectl(&["create", "secret", "generic", "bound", "-n", &p.namespace]);
    let (secret_bound, _) = p.token("secret", &["--bound-object-kind", "Secret", "--bound-object-name", "bound"]).await;
    let (unbound, _) = p.token("unbound", &[]).await;
    let (pod_bound, _) = p.pod_bound().await;

    let tokens =
        [("node-bound", &node_bound, &p.other), ("secret-bound", &secret_bound, &p.own), ("unbound", &unbound, &p.own)];
    for (what, client, target) in tokens {
        let object = slice(&format!("{}-{what}", p.s.id), target, NEURON_DRIVER, target);
        refused_create(&format!("{what}: a slice of {target}"), client, admin, &object, POD_BOUND_RULE).await;
        let label = labels("neuron.aws.com/least-privilege", json!("yes"));
        let refused = patch(client, &node(target), &label).await;
        assert_refused(&format!("{what}: label {target}"), refused, POD_BOUND_RULE);
        let refused = patch_status(client, &node(target), &condition("NeuronHealth", "False")).await;
        assert_refused(&format!("{what}: a condition on {target}"), refused, POD_BOUND_RULE);
    }
    let own = slice(&format!("{}-pod", p.s.id), &p.own, NEURON_DRIVER, &p.own);
    assert_accepted("pod-bound: its own node's slice", create(&pod_bound, &own).await);
    assert_accepted("and deleted", delete(&pod_bound, &own).await);
    p.stop().await;
}

/// #38.3: in a driver namespace only the DaemonSet controller creates pods that run a plugin ServiceAccount, and only
/// the operator creates or changes a DaemonSet that runs one: not an admin, not a Deployment's or Job's controller
/// (their pods are refused). Pods of another ServiceAccount there, and the plugin's name elsewhere, are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_daemon_set_controller_starts_plugin_pods_and_only_the_operator_plugin_daemon_sets() {
    let p = Plugin::start("lppods").await;
    let (admin, namespace, account) = (&p.s.client, &p.namespace, &p.account);
    let pod = |name: &str, namespace: &str, spec: Value| {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "registry.k8s.io/pause:3.10"}]);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    };
    let plugin_pod = pod("spoof", namespace, json!({"serviceAccountName": account, "nodeName": p.own}));
    let rule = format!("{POD_RULE} {account} in driver namespace {namespace}");
    refused_create("the admin's pod that runs the plugin's account", admin, admin, &plugin_pod, &rule).await;
    let deprecated = pod("deprecated", namespace, json!({"serviceAccount": account}));
    assert_refused("named by the deprecated field", create(admin, &deprecated).await, &rule);
    assert_accepted("a pod of another account", create(admin, &pod("other", namespace, json!({}))).await);
    let tenant = p.s.namespace("tenant", &[]).await;
    kubectl(&["create", "serviceaccount", account, "-n", &tenant]);
    let elsewhere = pod("elsewhere", &tenant, json!({"serviceAccountName": account}));
    accepted_create("the plugin's name outside a driver namespace", admin, &elsewhere).await;
    // ... runs with no plugin rights: the operator binds the plugin's role only in driver namespaces.
    let bound = ["--bound-object-kind", "Pod", "--bound-object-name", "elsewhere"];
    let tenant_plugin = client(&token(&tenant, account, &bound), &format!("{}-tenant", p.s.id)).await;
    let refused = create(&tenant_plugin, &slice(&format!("{}-tenant", p.s.id), &p.own, NEURON_DRIVER, &p.own)).await;
    assert_refused(
        "a slice with the tenant's look-alike account",
        refused,
        "cannot create resource \"resourceslices\"",
    );

    // Controllers: a Deployment's and a Job's pods that run the plugin's account are refused; with another account
    // the same controllers create theirs.
    let template = |account: &str| {
        json!({"metadata": {"labels": {"app": "x"}}, "spec": {"serviceAccountName": account, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    };
    for (kind, name, account) in [
        ("Deployment", "deploy", account.as_str()),
        ("Deployment", "deploy-ok", "default"),
        ("Job", "job", account.as_str()),
        ("Job", "job-ok", "default"),
    ] {
        let mut spec = json!({"template": template(account)});
        if kind == "Deployment" {
            spec["selector"] = json!({"matchLabels": {"app": "x"}});
            spec["template"]["spec"]["restartPolicy"] = json!("Always");
        }
        let api_version = if kind == "Job" { "batch/v1" } else { "apps/v1" };
        let object = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec});
        assert_accepted(&format!("the {kind} {name}"), create(admin, &object).await);
    }
    let refusals = eventually(TIMEOUT, "the controllers' pod creates refused", || async {
        let events = kubectl(&[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "reason=FailedCreate",
            "-o",
            "jsonpath={range .items[*]}{.involvedObject.kind}/{.involvedObject.name}: {.message}{\"\\n\"}{end}",
        ]);
        let refused = |kind: &str, name: &str| {
            events.lines().any(|l| l.starts_with(&format!("{kind}/{name}")) && l.contains(&rule))
        };
        (refused("ReplicaSet", "deploy-") && refused("Job", "job:")).then_some(events)
    })
    .await;
    assert!(!refusals.contains("deploy-ok") && !refusals.contains("job-ok"), "{refusals}");
    eventually(TIMEOUT, "the other account's pods created", || async {
        let names = kubectl(&["get", "pods", "-n", namespace, "-o", "name"]);
        (names.contains("pod/deploy-ok-") && names.contains("pod/job-ok-")).then_some(())
    })
    .await;
    // Every pod that runs the plugin's account is the DaemonSet's.
    let owners = format!(
        "jsonpath={{range .items[?(@.spec.serviceAccountName==\"{account}\")]}}{{.metadata.name}}={{.metadata.ownerReferences[0].kind}} {{end}}"
    );
    let owners = kubectl(&["get", "pods", "-n", namespace, "-o", &owners]);
    assert!(!owners.is_empty() && owners.split_whitespace().all(|o| o.ends_with("=DaemonSet")), "{owners}");

    // DaemonSets: the admin can neither create one that runs a plugin account nor change the operator's.
    let mut admin_set = p.daemon_set.clone();
    admin_set["metadata"]["name"] = json!(format!("{account}-admin"));
    let rule = format!("{DAEMON_SET_RULE} ServiceAccount {account} in driver namespace {namespace}");
    refused_create("the admin's plugin DaemonSet", admin, admin, &admin_set, &rule).await;
    let widen = json!({"spec": {"template": {"spec": {"nodeSelector": null}}}});
    assert_refused("the admin changes the operator's", patch(admin, &p.daemon_set, &widen).await, &rule);
    let mut other_set = admin_set.clone();
    other_set["spec"]["template"]["spec"]["serviceAccountName"] = json!("default");
    assert_accepted("the admin's DaemonSet of another account", create(admin, &other_set).await);
    kubectl(&["delete", "namespace", &tenant, "--wait=false"]);
    p.stop().await;
}
