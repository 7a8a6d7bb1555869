//! #50.2 and #50.3: classes, templates, namespaces and configs as the operator writes them; the operator's token
//! minted only by the kubelet.

use super::shape::changed;
use crate::*;

pub(super) const CLASS_RULE: &str = "the operator may only write DeviceClasses that select Neuron devices or node entries of neuron.aws.com as it renders them";
pub(super) const CLASS_NAME_RULE: &str =
    "the operator may only write DeviceClasses named as the install's deviceClassPatterns allow";
pub(super) const ADMIN_ACCESS_RULE: &str = "the operator may not write a ResourceClaimTemplate with adminAccess";
pub(super) const NAMESPACE_LABEL_RULE: &str = "the operator may only label a namespace with its own labels";

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
    let devices = class(desired::device_class(&config), "devices");
    let every =
        changed(&class(desired::device_class(&config), "every"), "/spec/selectors/0/cel", r#"{"expression": "true"}"#);
    refused_create("a class of every device of every driver", &operator, &admin, &every, CLASS_RULE).await;
    let gpu = r#"{"expression": "device.driver == 'gpu.nvidia.com'"}"#;
    let gpu = changed(&class(desired::device_class(&config), "gpu"), "/spec/selectors/0/cel", gpu);
    assert_refused("a class of another driver's devices", create(&operator, &gpu).await, CLASS_RULE);
    let mut configured = class(desired::device_class(&config), "configured");
    configured["spec"]["config"] = json!([{"opaque": {"driver": "neuron.aws.com", "parameters": {"x": 1}}}]);
    assert_refused("a class with a config", create(&operator, &configured).await, CLASS_RULE);
    let mut none = class(desired::device_class(&config), "none");
    none["spec"]["selectors"] = json!([]);
    assert_refused("a class with no selector", create(&operator, &none).await, CLASS_RULE);
    let mut gpu_named = class(desired::device_class(&config), "x");
    gpu_named["metadata"]["name"] = json!(format!("{}.gpu.nvidia.com", s.id));
    assert_refused("a class under another driver's name", create(&operator, &gpu_named).await, CLASS_NAME_RULE);
    assert_accepted("the class as rendered", create(&operator, &devices).await);
    let nodes = class(desired::ultra_server_node_class(&config), "nodes");
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
    let rendered = with_kind(&desired::namespace(&config), "v1", "Namespace");
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
