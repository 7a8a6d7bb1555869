//! #50.1: the plugin's DaemonSet only in the shape the operator renders.

use crate::*;

/// Rules of #50.1: the plugin's DaemonSet only in the shape the operator renders, each attack of the issue one rule
/// broken (with the operator's token, in a driver namespace, with an allowed image and the plugin's own account).
pub(super) const SHAPE_ATTACKS: [(&str, &str, &str, &str); 19] = [
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
pub(super) const POD: &str = "/spec/template/spec";
pub(super) const CONTAINER: &str = "/spec/template/spec/containers/0";
pub(super) const MOUNT: &str = "/spec/template/spec/containers/0/volumeMounts/0";
pub(super) const POD_FIELDS_RULE: &str = "the operator may only write the plugin pod's own fields";
pub(super) const CONTAINER_FIELDS_RULE: &str = "the operator may only write the plugin container's own fields";
pub(super) const COMMAND_RULE: &str =
    "the operator may only run the plugin's own command, k8s-neuron-dra-driver, with no args";
pub(super) const ENV_RULE: &str = "may only set the plugin's environment from values or the downward API";
pub(super) const MOUNT_RULE: &str = "the operator may only mount the plugin's volumes by name and path";
pub(super) const POD_SECURITY_RULE: &str = "the operator may not set the plugin pod's securityContext";
pub(super) const ANNOTATION_RULE: &str = "the operator may not annotate the plugin's pods";
pub(super) const TOLERATION_RULE: &str = "the operator may only give the plugin tolerations that name a key";
pub(super) const PRIORITY_RULE: &str =
    "the operator may only give the plugin a priority class of the install's priorityClasses";
pub(super) const RESOURCES_RULE: &str = "the operator may only request or limit cpu up to 1 and memory up to 1Gi";

/// `object` with `change` merged into the object at the JSON pointer `at`.
pub(super) fn changed(object: &Value, at: &str, change: &str) -> Value {
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
    let driver_namespace = with_kind(&desired::namespace(&config), "v1", "Namespace");
    accepted_create("create the driver namespace", &operator, &driver_namespace).await;
    let rendered = with_kind(&desired::daemon_set(&config), "apps/v1", "DaemonSet");
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
