//! The plugin's objects: its namespace, DaemonSet and RBAC.

use super::*;

#[test]
fn the_driver_namespace_admits_privileged_pods_for_the_plugins_host_paths() {
    let desired = build(&config(json!([])), &[]);
    let labels = desired.namespace.metadata.labels.clone().unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged");
    let volumes = desired.daemon_set.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert!(volumes.iter().any(|v| v.host_path.is_some()), "the reason for the label");
}

#[test]
fn daemon_set_has_every_chart_default() {
    let ds = build(&config(json!([])), &[]).daemon_set;
    let value = serde_json::to_value(&ds).unwrap();
    let spec = &value["spec"];
    assert_eq!(ds.metadata.namespace.as_deref(), Some("neuron-dra-driver"));
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    );
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["hostNetwork"], json!(true));
    assert_eq!(pod["serviceAccountName"], json!("neuron-dra-pool"));
    let container = &pod["containers"][0];
    assert_eq!(container["image"], json!(crate::api::DEFAULT_DRIVER_IMAGE));
    assert_eq!(container["imagePullPolicy"], json!("IfNotPresent"));
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "10m", "memory": "128Mi"}, "limits": {"cpu": "20m", "memory": "256Mi"}})
    );
    assert!(container.get("securityContext").is_none());
    assert_eq!(
        container["livenessProbe"],
        json!({"grpc": {"port": 51515, "service": "liveness"}, "initialDelaySeconds": 30, "periodSeconds": 10,
               "timeoutSeconds": 5, "failureThreshold": 3})
    );
    assert_eq!(
        container["readinessProbe"],
        json!({"grpc": {"port": 51515, "service": "liveness"}, "periodSeconds": 5, "timeoutSeconds": 5,
               "failureThreshold": 1})
    );
    let env = &container["env"];
    assert_eq!(env[0], json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}));
    assert_eq!(env[1], json!({"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}));
    assert_eq!(env[2], json!({"name": "CDI_ROOT", "value": "/var/run/cdi"}));
    assert_eq!(
        env[3],
        json!({"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": "/var/lib/kubelet/plugins_registry"})
    );
    assert_eq!(env[4], json!({"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": "/var/lib/kubelet/plugins"}));
    assert_eq!(env[5], json!({"name": "HEALTHCHECK_PORT", "value": "51515"}));
    let host_paths: Vec<_> = pod["volumes"].as_array().unwrap().iter().map(|v| v["hostPath"]["path"].clone()).collect();
    assert_eq!(
        host_paths,
        [json!("/var/lib/kubelet/plugins"), json!("/var/lib/kubelet/plugins_registry"), json!("/var/run/cdi")]
    );
    let tolerations = pod["tolerations"].as_array().unwrap();
    assert_eq!(tolerations.len(), 3);
    assert_eq!(tolerations[0], json!({"key": "CriticalAddonsOnly", "operator": "Exists"}));
    assert_eq!(tolerations[1], json!({"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}));
    assert_eq!(
        tolerations[2],
        json!({"key": "sagemaker.amazonaws.com/node-health-status", "operator": "Equal", "value": "Unschedulable", "effect": "NoSchedule"})
    );
    let terms = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let requirements = terms[0]["matchExpressions"].as_array().unwrap();
    assert_eq!(requirements[0]["key"], json!("node.kubernetes.io/instance-type"));
    assert_eq!(requirements[0]["operator"], json!("In"));
    let types = requirements[0]["values"].as_array().unwrap();
    assert!(types.contains(&json!("trn2.48xlarge")) && types.contains(&json!("trn1.2xlarge")));
    assert!(!types.iter().any(|t| t.as_str().unwrap().starts_with("inf")), "the chart drops Inferentia for DRA");
    assert_eq!(
        requirements[1],
        json!({"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate", "hybrid", "auto"]})
    );
    // The selector matches the pod labels.
    let selector = spec["selector"]["matchLabels"].as_object().unwrap();
    for (key, value) in selector {
        assert_eq!(&spec["template"]["metadata"]["labels"][key], value);
    }
}

#[test]
fn a_rollout_policy_hands_the_pods_to_the_operator() {
    let cfg = config_with(json!({"driver": {"rollout": {}}, "profiles": []}));
    let value = serde_json::to_value(build(&cfg, &[]).daemon_set).unwrap();
    // The DaemonSet controller only recreates what the operator deletes; no rollingUpdate settings are sent.
    assert_eq!(value["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    let policy = cfg.spec.driver.rollout.unwrap();
    assert_eq!((policy.canary, policy.timeout.as_str()), (1, "5m"), "the documented defaults");
}

#[test]
fn driver_overrides_merge_on_top_of_the_defaults() {
    let cfg = config_with(json!({
        "nodeSelector": {"matchLabels": {"pool": "a"}, "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["x"]}]},
        "driver": {
            "image": "mirror.example.com/neuron-dra-driver:1.2.0", "imagePullPolicy": "Always", "namespace": "kube-neuron",
            "imagePullSecrets": [{"name": "mirror"}], "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                            {"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "resources": {"requests": {"cpu": "50m"}},
            "env": [{"name": "HEALTHCHECK_PORT", "value": "6000"}, {"name": "LOG_LEVEL", "value": "debug"}],
            "updateStrategy": {"maxUnavailable": "10%"}
        },
        "profiles": []
    }));
    let desired = build(&cfg, &[]);
    let value = serde_json::to_value(&desired.daemon_set).unwrap();
    let pod = &value["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], json!("mirror.example.com/neuron-dra-driver:1.2.0"));
    assert_eq!(container["imagePullPolicy"], json!("Always"));
    assert_eq!(container["resources"], json!({"requests": {"cpu": "50m"}}));
    let env = container["env"].as_array().unwrap();
    assert_eq!(env.len(), 7);
    assert_eq!(env[5], json!({"name": "HEALTHCHECK_PORT", "value": "6000"}), "replaced in place");
    assert_eq!(env[6], json!({"name": "LOG_LEVEL", "value": "debug"}));
    assert_eq!(pod["tolerations"].as_array().unwrap().len(), 4, "a duplicate default is not repeated");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "mirror"}]));
    assert_eq!(pod["priorityClassName"], json!("system-node-critical"));
    assert_eq!(value["spec"]["updateStrategy"]["rollingUpdate"], json!({"maxUnavailable": "10%", "maxSurge": 1}));
    let requirements = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        [0]["matchExpressions"];
    assert_eq!(requirements[2], json!({"key": "pool", "operator": "In", "values": ["a"]}));
    assert_eq!(requirements[3], json!({"key": "zone", "operator": "NotIn", "values": ["x"]}));
    assert_eq!(desired.daemon_set.metadata.namespace.as_deref(), Some("kube-neuron"));
    assert_eq!(desired.namespace.metadata.name.as_deref(), Some("kube-neuron"));
    let subject = &desired.cluster_role_binding.subjects.as_ref().unwrap()[0];
    assert_eq!(subject.namespace.as_deref(), Some("kube-neuron"));
}

/// The plugin's ClusterRole is installed with the operator (config/rbac/plugin_role.yaml), exactly AWS's chart's
/// rules; a config only binds it to its own ServiceAccount.
#[test]
fn plugin_rbac_is_exactly_what_the_driver_needs() {
    let role: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string("config/rbac/plugin_role.yaml").unwrap()).unwrap();
    assert_eq!(role["metadata"]["name"], crate::logic::desired::PLUGIN_CLUSTER_ROLE);
    let rules: Vec<(String, String, Vec<String>)> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let words = |v: &serde_json::Value| -> Vec<String> {
                v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
            };
            (words(&r["apiGroups"]).join(","), words(&r["resources"]).join(","), words(&r["verbs"]))
        })
        .collect();
    let verbs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        vec![
            (
                "resource.k8s.io".into(),
                "resourceslices".into(),
                verbs(&["get", "list", "watch", "create", "update", "patch", "delete"])
            ),
            ("resource.k8s.io".into(), "resourceclaims".into(), verbs(&["get", "list", "watch"])),
            ("resource.k8s.io".into(), "deviceclasses".into(), verbs(&["get", "list", "watch"])),
            ("".into(), "nodes".into(), verbs(&["get", "list", "watch", "patch", "update"])),
            ("".into(), "nodes/status".into(), verbs(&["patch"])),
        ]
    );
    let desired = build(&config(json!([])), &[]);
    assert_eq!(desired.cluster_role_binding.role_ref.name, crate::logic::desired::PLUGIN_CLUSTER_ROLE);
    assert_eq!(desired.cluster_role_binding.metadata.name.as_deref(), Some("neuron-dra-pool"));
    let subjects = desired.cluster_role_binding.subjects.unwrap();
    assert_eq!((subjects.len(), subjects[0].name.as_str()), (1, "neuron-dra-pool"));
    assert_eq!(desired.service_account.metadata.name.as_deref(), Some("neuron-dra-pool"));
}
