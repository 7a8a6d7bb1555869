//! One test per profile compile rule, and the driver defaults of AWS's chart (docs/neuron-driver.md).

use k8s_openapi::api::resource::v1::{DeviceClaim, DeviceRequest, ResourceClaimTemplate};
use serde_json::{Value, json};

use super::*;
use crate::api::labels::{ANNOTATION_SPEC_HASH, LABEL_CONFIG, LABEL_MANAGED_BY, LABEL_PROFILE, LABEL_SHARED, MANAGER};
use crate::cli::parse_config;
use crate::logic::validate::{ValidatedConfig, validate};

fn config(profiles: Value) -> ValidatedConfig {
    config_with(json!({ "profiles": profiles }))
}

fn config_with(spec: Value) -> ValidatedConfig {
    let doc = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "pool", "uid": "1234"}, "spec": spec,
    });
    let parsed = parse_config(&serde_json::to_string(&doc).unwrap()).expect("parses");
    validate(&parsed).expect("valid")
}

/// The templates as a server that searches combinations gets them: each count as the profile writes it
/// (`whole_node.rs` has the form of every device of a node on an older server).
fn templates(profiles: Value) -> Vec<ResourceClaimTemplate> {
    build_with(&config(profiles), &["team-a".to_string()], OwnClasses::BOTH, Allocator::Combinations).templates
}

fn devices(template: &ResourceClaimTemplate) -> &DeviceClaim {
    template.spec.spec.devices.as_ref().unwrap()
}

fn request<'a>(template: &'a ResourceClaimTemplate, name: &str) -> &'a DeviceRequest {
    devices(template).requests.iter().flatten().find(|r| r.name == name).expect("request present")
}

fn selectors(request: &DeviceRequest) -> Vec<String> {
    request.exactly.as_ref().unwrap().selectors.iter().flatten().map(|s| s.cel.clone().unwrap().expression).collect()
}

fn opaque_params(template: &ResourceClaimTemplate) -> Vec<Value> {
    devices(template).config.iter().flatten().map(|c| c.opaque.clone().unwrap().parameters.0).collect()
}

#[test]
fn training_four_devices_is_exact_count_with_devicegroup4_constraint() {
    let t = templates(json!([{"name": "ft", "training": {"instanceType": "trn2.48xlarge", "devices": 4}}]));
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].metadata.name.as_deref(), Some("ft"));
    let requests = devices(&t[0]).requests.clone().unwrap();
    assert_eq!(requests.len(), 1, "only the neurons request");
    let neurons = request(&t[0], "neurons").exactly.clone().unwrap();
    assert_eq!(neurons.device_class_name, "neuron.aws.com");
    assert_eq!(neurons.allocation_mode.as_deref(), Some("ExactCount"));
    assert_eq!(neurons.count, Some(4));
    assert!(
        selectors(request(&t[0], "neurons"))
            .contains(&"device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'".to_string())
    );
    let constraints = devices(&t[0]).constraints.clone().unwrap();
    assert_eq!(constraints.len(), 1);
    assert_eq!(constraints[0].match_attribute.as_deref(), Some("resource.aws.com/devicegroup4_id"));
    assert_eq!(constraints[0].requests, Some(vec!["neurons".to_string()]));
    assert!(devices(&t[0]).config.is_none(), "no opaque config without LNC");
}

#[test]
fn devices_all_is_allocation_mode_all_without_constraint() {
    let t = templates(json!([{"name": "p", "training": {"instanceType": "trn2.48xlarge"}}]));
    let neurons = request(&t[0], "neurons").exactly.clone().unwrap();
    assert_eq!(neurons.allocation_mode.as_deref(), Some("All"));
    assert_eq!(neurons.count, None);
    assert!(devices(&t[0]).constraints.is_none());
}

#[test]
fn eight_and_sixteen_devices_use_their_group_attribute_and_one_uses_none() {
    for (n, attribute) in
        [(8, Some("resource.aws.com/devicegroup8_id")), (16, Some("resource.aws.com/devicegroup16_id")), (1, None)]
    {
        let t = templates(json!([{"name": "p", "training": {"devices": n}}]));
        let found = devices(&t[0]).constraints.iter().flatten().next().and_then(|c| c.match_attribute.clone());
        assert_eq!(found.as_deref(), attribute, "devices {n}");
        assert_eq!(request(&t[0], "neurons").exactly.as_ref().unwrap().count, Some(n));
    }
}

#[test]
fn no_instance_type_means_no_selector_as_the_own_class_selects_device_entries() {
    let t = templates(json!([{"name": "p", "training": {"devices": 4}}]));
    assert_eq!(request(&t[0], "neurons").exactly.as_ref().unwrap().selectors, None, "the class selects devices");
}

#[test]
fn driver_version_pins_a_selector() {
    let t = templates(json!([{"name": "p", "training": {"devices": 1, "neuronDriverVersion": "2.25.4.0"}}]));
    assert!(
        selectors(request(&t[0], "neurons"))
            .contains(&"device.attributes['neuron.aws.com'].neuronDriverVersion == '2.25.4.0'".to_string())
    );
}

#[test]
fn logical_neuron_core_adds_neuron_config_for_the_neurons_request() {
    let t = templates(json!([{"name": "p", "training": {"instanceType": "trn2.48xlarge", "logicalNeuronCore": 1}}]));
    let config = devices(&t[0]).config.clone().unwrap();
    assert_eq!(config.len(), 1);
    assert_eq!(config[0].requests, Some(vec!["neurons".to_string()]));
    let opaque = config[0].opaque.clone().unwrap();
    assert_eq!(opaque.driver, "neuron.aws.com");
    assert_eq!(
        opaque.parameters.0,
        json!({"apiVersion": "neuron.aws.com/v1", "kind": "NeuronConfig", "logicalNeuronCore": 1})
    );
}

#[test]
fn efa_adds_a_request_with_the_same_count_under_one_constraint() {
    let t = templates(json!([{"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": 8, "efa": true}}]));
    let efa = request(&t[0], "efa").exactly.clone().unwrap();
    assert_eq!(efa.device_class_name, "efa.networking.k8s.aws");
    assert_eq!(efa.allocation_mode.as_deref(), Some("ExactCount"));
    assert_eq!(efa.count, Some(8));
    let constraints = devices(&t[0]).constraints.clone().unwrap();
    assert_eq!(constraints.len(), 1);
    assert_eq!(constraints[0].match_attribute.as_deref(), Some("resource.aws.com/devicegroup8_id"));
    assert_eq!(constraints[0].requests, Some(vec!["neurons".to_string(), "efa".to_string()]));
    let order: Vec<&str> = devices(&t[0]).requests.iter().flatten().map(|r| r.name.as_str()).collect();
    assert_eq!(order, ["neurons", "efa"], "the EFAs first stall the scheduler (docs/decisions.md)");
}

#[test]
fn efa_with_all_devices_claims_all_efas() {
    let t = templates(json!([{"name": "p", "training": {"instanceType": "trn2.48xlarge", "efa": true}}]));
    assert_eq!(request(&t[0], "efa").exactly.as_ref().unwrap().allocation_mode.as_deref(), Some("All"));
}

#[test]
fn efa_on_trn1_32xlarge_counts_one_efa_per_two_devices() {
    let t =
        templates(json!([{"name": "p", "training": {"instanceType": "trn1.32xlarge", "devices": 16, "efa": true}}]));
    assert_eq!(request(&t[0], "efa").exactly.as_ref().unwrap().count, Some(8));
}

#[test]
fn single_device_with_efa_pairs_through_devicegroup1() {
    let t = templates(json!([{"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": 1, "efa": true}}]));
    let constraint = devices(&t[0]).constraints.clone().unwrap().remove(0);
    assert_eq!(constraint.match_attribute.as_deref(), Some("resource.aws.com/devicegroup1_id"));
}

#[test]
fn ultra_server_nodes_claims_one_node_entry_with_ultraserver_config() {
    let t = templates(json!([{"name": "us", "longContextInference": {
        "instanceType": "trn2u.48xlarge", "ultraServerNodes": 2, "logicalNeuronCore": 1}}]));
    let neurons = request(&t[0], "neurons").exactly.clone().unwrap();
    assert_eq!(neurons.allocation_mode.as_deref(), Some("ExactCount"));
    assert_eq!(neurons.count, Some(1));
    assert_eq!(neurons.device_class_name, "ultraserver-nodes.neuron.aws.com", "the node entries' own class");
    // The node entries' class selects `neuron_node`; the request only pins the type.
    let sel = selectors(request(&t[0], "neurons"));
    assert_eq!(sel, ["device.attributes['neuron.aws.com'].instanceType == 'trn2u.48xlarge'"]);
    assert_eq!(
        opaque_params(&t[0]),
        vec![
            json!({"apiVersion": "neuron.aws.com/v1", "kind": "UltraServerConfig", "ultraserverMode": 2}),
            json!({"apiVersion": "neuron.aws.com/v1", "kind": "NeuronConfig", "logicalNeuronCore": 1}),
        ]
    );
    assert!(devices(&t[0]).constraints.is_none());
}

#[test]
fn disaggregated_gives_prefill_and_decode_templates() {
    let t = templates(json!([{"name": "serve", "disaggregated": {
        "prefill": {"instanceType": "trn2.48xlarge", "devices": 8, "efa": true},
        "decode": {"instanceType": "trn2.48xlarge", "devices": 4}}}]));
    let names: Vec<_> = t.iter().map(|t| t.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["serve-prefill", "serve-decode"]);
    assert_eq!(request(&t[0], "neurons").exactly.as_ref().unwrap().count, Some(8));
    assert!(devices(&t[0]).requests.iter().flatten().any(|r| r.name == "efa"));
    assert_eq!(request(&t[1], "neurons").exactly.as_ref().unwrap().count, Some(4));
    assert!(!devices(&t[1]).requests.iter().flatten().any(|r| r.name == "efa"));
    for template in &t {
        assert_eq!(template.metadata.labels.as_ref().unwrap()[LABEL_PROFILE], "serve");
    }
}

#[test]
fn an_extended_resource_gets_its_own_devices_only_class() {
    let without = build(&config(json!([{"name": "p", "training": {}}])), &[]);
    assert_eq!(without.extended_resource_class, None);
    let desired = build(
        &config_with(
            json!({"extendedResourceName": "aws.amazon.com/neuron", "profiles": [{"name": "p", "training": {}}]}),
        ),
        &[],
    );
    let class = desired.extended_resource_class.expect("a class for the extended resource");
    assert_eq!(class.metadata.name.as_deref(), Some("devices.neuron.aws.com"));
    assert_eq!(class.spec.extended_resource_name.as_deref(), Some("aws.amazon.com/neuron"));
    let selectors: Vec<String> = class.spec.selectors.unwrap().into_iter().map(|s| s.cel.unwrap().expression).collect();
    assert_eq!(
        selectors,
        ["device.driver == 'neuron.aws.com' && device.attributes['neuron.aws.com'].resourceType == 'neuron_device'"]
    );
    // Shared like the main class: garbage-collected with its last owner.
    assert_eq!(class.metadata.owner_references.unwrap()[0].controller, Some(false));
    assert_eq!(desired.device_class.spec.extended_resource_name, None);
}

#[test]
fn device_class_name_flows_into_requests_and_the_device_class() {
    let desired = build(
        &config_with(json!({"deviceClassName": "neuron.example.com", "profiles": [{"name": "p", "training": {}}]})),
        &["team-a".to_string()],
    );
    assert_eq!(desired.device_class.metadata.name.as_deref(), Some("neuron.example.com"));
    let selector = desired.device_class.spec.selectors.clone().unwrap().remove(0).cel.unwrap().expression;
    assert!(selector.starts_with("device.driver == 'neuron.aws.com' && "), "{selector}");
    assert_eq!(
        request(&desired.templates[0], "neurons").exactly.as_ref().unwrap().device_class_name,
        "neuron.example.com"
    );
}

#[test]
fn templates_go_to_every_namespace_sorted_with_labels_owner_and_hash() {
    let cfg = config(json!([{"name": "a", "training": {}}, {"name": "b", "training": {"devices": 4}}]));
    let desired = build(&cfg, &["z".to_string(), "m".to_string(), "z".to_string()]);
    let placed: Vec<_> = desired
        .templates
        .iter()
        .map(|t| format!("{}/{}", t.metadata.namespace.clone().unwrap(), t.metadata.name.clone().unwrap()))
        .collect();
    assert_eq!(placed, ["m/a", "m/b", "z/a", "z/b"]);
    let meta = &desired.templates[0].metadata;
    let labels = meta.labels.clone().unwrap();
    assert_eq!(labels[LABEL_MANAGED_BY], MANAGER);
    assert_eq!(labels[LABEL_CONFIG], "pool");
    assert_eq!(labels[LABEL_PROFILE], "a");
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("NeuronDRAConfig", "1234", Some(true)));
    // The hash follows the spec: same spec, same hash; different spec, different hash.
    let hash = |t: &ResourceClaimTemplate| t.metadata.annotations.clone().unwrap()[ANNOTATION_SPEC_HASH].clone();
    assert_eq!(hash(&desired.templates[0]), hash(&desired.templates[2]));
    assert_ne!(hash(&desired.templates[0]), hash(&desired.templates[1]));
}

#[test]
fn shared_objects_carry_a_non_controller_owner_reference() {
    let desired = build(&config(json!([])), &[]);
    let meta = &desired.device_class.metadata;
    assert_eq!(meta.labels.clone().unwrap()[LABEL_SHARED], "true");
    assert_eq!(meta.owner_references.as_ref().unwrap()[0].controller, Some(false));
    // The namespace may hold other things: never owned, so garbage collection cannot take it.
    assert_eq!(desired.namespace.metadata.labels.clone().unwrap()[LABEL_SHARED], "true");
    assert!(desired.namespace.metadata.owner_references.is_none());
}

#[test]
fn a_budget_caps_the_class_and_with_an_extended_resource_its_pods_too() {
    let plain = config(json!([{"name": "a", "training": {"devices": 4}}]));
    let quota = build(&plain, &[]).with_quotas(&plain, &[("team-a".into(), 16)]).quotas.remove(0);
    let meta = &quota.metadata;
    assert_eq!((meta.name.as_deref(), meta.namespace.as_deref()), (Some("neuron-dra-pool"), Some("team-a")));
    let hard = |q: &k8s_openapi::api::core::v1::ResourceQuota| {
        q.spec.clone().unwrap().hard.unwrap().into_iter().map(|(k, v)| (k, v.0)).collect::<Vec<_>>()
    };
    assert_eq!(
        hard(&quota),
        [
            ("neuron.aws.com.deviceclass.resource.k8s.io/devices".into(), "16".into()),
            ("ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices".into(), "0".into()),
        ]
    );
    assert!(quota.spec.unwrap().scopes.is_none(), "a scoped quota never matches claims");
    assert_eq!(quota.metadata.labels.unwrap()[LABEL_CONFIG], "pool");
    let extended = config_with(json!({"extendedResourceName": "aws.amazon.com/neuron",
        "profiles": [{"name": "a", "training": {"devices": 4}}]}));
    let quota = build(&extended, &[]).with_quotas(&extended, &[("team-a".into(), 8)]).quotas.remove(0);
    assert_eq!(
        hard(&quota),
        [
            ("devices.neuron.aws.com.deviceclass.resource.k8s.io/devices".to_string(), "8".to_string()),
            ("neuron.aws.com.deviceclass.resource.k8s.io/devices".to_string(), "8".to_string()),
            ("requests.aws.amazon.com/neuron".to_string(), "8".to_string()),
            ("ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices".to_string(), "0".to_string()),
        ]
    );
}

#[test]
fn objects_go_stage_by_stage() {
    let cfg = config_with(json!({"extendedResourceName": "aws.amazon.com/neuron",
        "profiles": [{"name": "a", "training": {"devices": 4}}]}));
    let desired = build(&cfg, &["ns1".to_string(), "ns2".to_string()]).with_quotas(&cfg, &[("ns1".into(), 8)]);
    let stages: Vec<Stage> = desired.in_order().into_iter().map(|(stage, _)| stage).collect();
    assert!(stages.is_sorted(), "{stages:?}");
    assert!(Stage::BEFORE_PLUGIN.is_sorted());
    assert!(Stage::BEFORE_PLUGIN.iter().all(|stage| *stage > Stage::Namespace && *stage < Stage::Plugin));
    assert_eq!(desired.stage(Stage::Class).len(), 3, "the node entries' and the extended resource's classes too");
    assert_eq!(desired.stage(Stage::Templates).len(), 2);
    assert_eq!(desired.stage(Stage::Quotas).len(), 1);
}

#[test]
fn render_output_is_deterministic_and_in_apply_order() {
    let cfg = config(json!([{"name": "a", "training": {"devices": 4}}]));
    let first = build(&cfg, &["ns1".to_string()]).to_yaml().unwrap();
    let second = build(&cfg, &["ns1".to_string()]).to_yaml().unwrap();
    assert_eq!(first, second);
    let kinds: Vec<&str> = first.lines().filter_map(|l| l.strip_prefix("kind: ")).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRoleBinding",
            "DeviceClass",
            "DeviceClass",
            "DaemonSet",
            "ResourceClaimTemplate"
        ]
    );
}

#[test]
fn offline_render_has_no_owner_references() {
    let mut cfg = config(json!([{"name": "a", "training": {}}]));
    cfg.uid = None;
    let desired = build(&cfg, &["ns".to_string()]);
    assert!(desired.templates[0].metadata.owner_references.is_none());
    assert!(desired.daemon_set.metadata.owner_references.is_none());
}

mod driver;
mod fallbacks;
mod shape;
mod ultra_server;

/// Before 1.36 every device of a node is `All`, EFA interfaces with it; a type the catalog knows no device count of,
/// and a count below the node's, keep the count.
#[test]
fn before_1_36_every_device_of_a_node_is_all_with_every_efa() {
    let on_orderings = |profiles: Value| {
        build_with(&config(profiles), &["team-a".to_string()], OwnClasses::BOTH, Allocator::Orderings).templates
    };
    let t =
        on_orderings(json!([{"name": "p", "training": {"instanceType": "trn2.48xlarge", "devices": 16, "efa": true}}]));
    let (neurons, efa) =
        (request(&t[0], "neurons").exactly.clone().unwrap(), request(&t[0], "efa").exactly.clone().unwrap());
    assert_eq!((neurons.allocation_mode.as_deref(), neurons.count), (Some("All"), None));
    assert_eq!((efa.allocation_mode.as_deref(), efa.count), (Some("All"), None));
    assert_eq!(
        selectors(request(&t[0], "neurons")),
        ["device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"]
    );
    let group = devices(&t[0]).constraints.clone().unwrap().remove(0);
    assert_eq!(group.match_attribute.as_deref(), Some("resource.aws.com/devicegroup16_id"));
    for kept in [
        json!({"instanceType": "trn2.48xlarge", "devices": 8}),
        json!({"instanceType": "trn3e.24xlarge", "devices": 16}),
    ] {
        let t = on_orderings(json!([{"name": "p", "training": kept}]));
        assert_eq!(request(&t[0], "neurons").exactly.as_ref().unwrap().allocation_mode.as_deref(), Some("ExactCount"));
    }
}
