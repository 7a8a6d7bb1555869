//! The local control plane is real: the API server serves DRA, enforces our CRD's schema and CEL rules, and the
//! namespace and garbage-collector controllers run.

mod support {
    pub mod cluster;
    pub mod fixtures;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use neuron_dra_operator::api::NeuronDRAConfig;
use serde_json::json;
use support::cluster::{self, eventually, kubeconfig, kubectl, kubectl_with};
use support::fixtures::invalid_cases;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_server_is_a_supported_kubernetes_with_dra_served() {
    let client = cluster::admin().await;
    let version = client.apiserver_version().await.unwrap();
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap();
    assert_eq!(version.major, "1");
    assert!((34..=37).contains(&minor), "server {}", version.git_version);

    let resources = kubectl(&["api-resources", "--api-group=resource.k8s.io", "-o", "wide"]);
    // DeviceTaintRule: alpha in 1.34 (switched on here), beta in 1.36, GA in 1.37.
    let rules = if minor >= 37 { "resource.k8s.io/v1" } else { "resource.k8s.io/v1alpha3" };
    for (resource, version) in [
        ("resourceclaimtemplates", "resource.k8s.io/v1"),
        ("resourceslices", "resource.k8s.io/v1"),
        ("deviceclasses", "resource.k8s.io/v1"),
        ("devicetaintrules", rules),
    ] {
        assert!(
            resources.lines().any(|l| l.starts_with(resource) && l.contains(version)),
            "{resource} ({version}) not served:\n{resources}"
        );
    }
}

#[tokio::test]
async fn the_crd_is_established_and_explained() {
    cluster::install();
    let status = kubectl(&[
        "get",
        "crd",
        "neurondraconfigs.neurondra.io",
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Established')].status}",
    ]);
    assert_eq!(status, "True");
    // The CRD's OpenAPI document is published a few seconds after it is Established.
    let explained = eventually(TIMEOUT, "kubectl explain ndc.spec.profiles", || async {
        kubectl_with(&kubeconfig(), &["explain", "ndc.spec.profiles"], None).ok()
    })
    .await;
    assert!(explained.contains("Workload profiles."), "{explained}");
    assert!(explained.contains("longContextInference"), "{explained}");
    let short = kubectl(&["api-resources", "--api-group=neurondra.io"]);
    assert!(short.contains("ndc") && short.contains("NeuronDRAConfig"), "{short}");
}

#[tokio::test]
async fn the_server_rejects_what_the_schema_and_cel_forbid_naming_the_field() {
    cluster::install();
    let cases = invalid_cases();
    let mut rejected = 0;
    for (index, case) in cases.iter().enumerate() {
        let name = cluster::unique(&format!("inv{index}"));
        let document = serde_json::to_string(&case.document(&name)).unwrap();
        let result = kubectl_with(&kubeconfig(), &["create", "--dry-run=server", "-f", "-"], Some(&document));
        match case.server.as_str() {
            "rejects" => {
                let message = result.expect_err(&format!("{}: the server accepted it", case.case));
                // The server writes list-map keys as [0] too; unknown fields as quoted paths.
                assert!(
                    message.contains(&case.field),
                    "{}: the server's message does not name {}:\n{message}",
                    case.case,
                    case.field
                );
                rejected += 1;
            }
            _ => {
                result.unwrap_or_else(|e| {
                    panic!("{}: only the operator should catch this, but the server said {e}", case.case)
                });
            }
        }
    }
    assert!(rejected >= 15, "{rejected} cases exercise the server's rules");
}

#[tokio::test]
async fn a_valid_config_round_trips_without_pruning() {
    let client = cluster::admin().await;
    let text = std::fs::read_to_string(cluster::repo("samples/mixed.yaml")).unwrap();
    let mut document: serde_json::Value = serde_yaml::from_str(&text).unwrap();
    let name = cluster::unique("roundtrip");
    document["metadata"]["name"] = json!(name);
    // Every optional field set once.
    document["spec"]["nodeSelector"] =
        json!({"matchLabels": {"pool": "a"}, "matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]});
    document["spec"]["driver"]["imagePullSecrets"] = json!([{"name": "mirror"}]);
    document["spec"]["driver"]["tolerations"] =
        json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]);
    document["spec"]["driver"]["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    document["spec"]["driver"]["env"] =
        json!([{"name": "A", "value": "b"}, {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]);
    document["spec"]["driver"]["updateStrategy"] = json!({"maxUnavailable": "10%", "maxSurge": 0});
    document["spec"]["paused"] = json!(true);
    document["spec"]["profiles"].as_array_mut().unwrap().push(json!({"name": "elastic", "training": {
        "instanceType": "trn2.48xlarge", "devices": 16, "allowLncChange": true,
        "fallbacks": [
            {"instanceType": "trn1.32xlarge", "devices": 16, "neuronDriverVersion": "2.25.4.0"},
            {"devices": 8, "logicalNeuronCore": 1},
        ],
    }}));
    let config: NeuronDRAConfig = serde_json::from_value(document.clone()).unwrap();
    let api: Api<NeuronDRAConfig> = Api::all(client);
    let stored = api.create(&PostParams::default(), &config).await.unwrap();
    let stored_spec = serde_json::to_value(&stored.spec).unwrap();
    assert!(
        neuron_dra_operator::controller::act::apply::holds(&stored_spec, &document["spec"]),
        "fields were pruned or changed:\nsent {}\ngot  {}",
        document["spec"],
        stored_spec
    );
    assert_eq!(stored.spec, config.spec);
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn schema_defaults_are_applied_by_the_server() {
    let client = cluster::admin().await;
    let name = cluster::unique("defaults");
    let config: NeuronDRAConfig = serde_json::from_value(json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "metadata": {"name": name}, "spec": {}
    }))
    .unwrap();
    // Send only what the user wrote, so the defaults come from the server.
    let raw = kubectl_with(
        &kubeconfig(),
        &["create", "-o", "json", "-f", "-"],
        Some(&format!("{{\"apiVersion\":\"neurondra.io/v1alpha1\",\"kind\":\"NeuronDRAConfig\",\"metadata\":{{\"name\":\"{name}\"}},\"spec\":{{}}}}")),
    )
    .unwrap();
    let stored: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(stored["spec"]["deviceClassName"], "neuron.aws.com");
    assert_eq!(stored["spec"]["driver"]["image"], neuron_dra_operator::api::DEFAULT_DRIVER_IMAGE);
    assert_eq!(stored["spec"]["driver"]["namespace"], "neuron-dra-driver");
    assert_eq!(stored["spec"]["driver"]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(config.spec.device_class_name, "neuron.aws.com", "the Rust defaults agree");
    Api::<NeuronDRAConfig>::all(client).delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn namespace_deletion_completes_and_owned_objects_are_collected() {
    let client = cluster::admin().await;
    let name = cluster::unique("gc");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = maps.create(&PostParams::default(), &owner).await.unwrap();
    let mut dependent: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dependent"}})).unwrap();
    dependent.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    maps.create(&PostParams::default(), &dependent).await.unwrap();

    maps.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually(TIMEOUT, "the dependent is garbage-collected", || async {
        maps.get_opt("dependent").await.ok()?.is_none().then_some(())
    })
    .await;

    namespaces.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually(TIMEOUT, "the namespace is gone", || async {
        namespaces.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(owner.uid().is_some());
}
