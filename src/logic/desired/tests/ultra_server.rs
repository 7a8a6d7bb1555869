//! UltraServer node entries: a DeviceClass of their own, so that a budget counts them on a quota key of their own,
//! carved out of its devices at the catalog's devices per node entry.

use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::resource::v1::DeviceClass;
use serde_json::{Value, json};

use super::*;
use crate::api::labels::{LABEL_MANAGED_BY, LABEL_SHARED, MANAGER};
use crate::api::{NODE_ENTRIES_OVER_DEVICES, NODE_ENTRIES_WITHIN_DEVICES};
use crate::cli::parse_config;
use crate::logic::catalog::ULTRA_SERVER_NODE_DEVICES;
use crate::logic::validate::{InvalidConfig, ValidatedConfig, validate};

fn check(spec: Value) -> Result<ValidatedConfig, InvalidConfig> {
    let doc = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "pool", "uid": "1234"}, "spec": spec,
    });
    validate(&parse_config(&doc.to_string()).expect("parses"))
}

fn expressions(class: &DeviceClass) -> Vec<String> {
    class.spec.selectors.iter().flatten().map(|s| s.cel.clone().unwrap().expression).collect()
}

fn hard(quota: &ResourceQuota) -> Vec<(String, String)> {
    quota.spec.clone().unwrap().hard.unwrap().into_iter().map(|(k, v)| (k, v.0)).collect()
}

#[test]
fn node_entries_and_devices_have_a_device_class_each() {
    let desired = build(&check(json!({"deviceClassName": "trn.example.com"})).unwrap(), &[]);
    let attribute = "device.attributes['neuron.aws.com'].resourceType";
    assert_eq!(
        expressions(&desired.device_class),
        [format!("device.driver == 'neuron.aws.com' && {attribute} == 'neuron_device'")],
        "the config's class never hands out a node entry, which its quota key would count as one device"
    );
    let nodes = &desired.ultra_server_node_class;
    assert_eq!(nodes.metadata.name.as_deref(), Some("ultraserver-nodes.trn.example.com"));
    assert_eq!(expressions(nodes), [format!("device.driver == 'neuron.aws.com' && {attribute} == 'neuron_node'")]);
    assert_eq!(nodes.spec.extended_resource_name, None);
    // The operator's own, shared like the config's class (the operator's admission policy checks the label).
    let labels = nodes.metadata.labels.clone().unwrap();
    assert_eq!((labels[LABEL_MANAGED_BY].as_str(), labels[LABEL_SHARED].as_str()), (MANAGER, "true"));
    assert_eq!(nodes.metadata.owner_references.as_ref().unwrap()[0].controller, Some(false));
    let classes: Vec<&str> = desired
        .stage(Stage::Class)
        .into_iter()
        .filter_map(|o| match o {
            Object::DeviceClass(c) => c.metadata.name.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(classes, ["trn.example.com", "ultraserver-nodes.trn.example.com"]);
}

#[test]
fn a_node_entry_template_claims_from_the_node_entries_class() {
    let config = check(json!({"deviceClassName": "trn.example.com", "profiles": [
        {"name": "us", "longContextInference": {"instanceType": "trn2u.48xlarge", "ultraServerNodes": 4}},
        {"name": "one", "training": {"instanceType": "trn2u.48xlarge", "devices": 1}},
    ]}))
    .unwrap();
    let desired = build(&config, &["team".to_string()]);
    let class_of = |t: &ResourceClaimTemplate| request(t, "neurons").exactly.clone().unwrap().device_class_name;
    assert_eq!(class_of(&desired.templates[0]), "ultraserver-nodes.trn.example.com");
    assert_eq!(class_of(&desired.templates[1]), "trn.example.com");
}

#[test]
fn a_budget_carves_its_node_entries_out_of_its_devices() {
    let config = check(json!({"quotas": [
        {"namespaces": ["team-us"], "devices": 48, "ultraServerNodes": 2},
        {"namespaces": ["team-small"], "devices": 4},
    ]}))
    .unwrap();
    let budgets = named_budgets(&config);
    assert_eq!(
        budgets,
        [
            ("team-small".to_string(), Allowance { devices: 4, ultra_server_nodes: 0 }),
            ("team-us".to_string(), Allowance { devices: 48, ultra_server_nodes: 2 }),
        ]
    );
    let quotas = build(&config, &[]).with_quotas(&config, &budgets).quotas;
    let key = |class: &str| format!("{class}.deviceclass.resource.k8s.io/devices");
    // No node entries: the node key is there with 0, since a key left out would let node entries through uncapped.
    assert_eq!(
        hard(&quotas[0]),
        [(key("neuron.aws.com"), "4".into()), (key("ultraserver-nodes.neuron.aws.com"), "0".into())]
    );
    assert_eq!(
        hard(&quotas[1]),
        [(key("neuron.aws.com"), "16".into()), (key("ultraserver-nodes.neuron.aws.com"), "2".into())]
    );
    // The extended resource's keys get what devices get.
    let extended = check(json!({"extendedResourceName": "aws.amazon.com/neuron"})).unwrap();
    let quota = build(&extended, &[])
        .with_quotas(&extended, &[("team".to_string(), Allowance { devices: 32, ultra_server_nodes: 1 })])
        .quotas
        .remove(0);
    assert_eq!(
        hard(&quota),
        [
            (key("devices.neuron.aws.com"), "16".into()),
            (key("neuron.aws.com"), "16".into()),
            ("requests.aws.amazon.com/neuron".into(), "16".into()),
            (key("ultraserver-nodes.neuron.aws.com"), "1".into()),
        ]
    );
    // Every key is one the operator's admission policy lets it write.
    assert!(
        hard(&quota)
            .iter()
            .all(|(k, _)| k.ends_with(".deviceclass.resource.k8s.io/devices") || k.starts_with("requests."))
    );
}

#[test]
fn node_entries_past_the_budgets_devices_are_refused_with_the_field_named() {
    let budget = |devices: i64, nodes: i64| {
        check(json!({"quotas": [{"namespaces": ["team"], "devices": devices, "ultraServerNodes": nodes}]}))
    };
    assert!(budget(16, 1).is_ok() && budget(32, 2).is_ok() && budget(0, 0).is_ok());
    let InvalidConfig(errors) = budget(31, 2).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].to_string(), format!("spec.quotas[0].ultraServerNodes: {NODE_ENTRIES_OVER_DEVICES}"));
    assert!(!errors[0].to_string().contains('\n'), "one line");
    // The CRD's CEL rule and its message say the catalog's figure (the API layer cannot read the catalog).
    assert!(NODE_ENTRIES_WITHIN_DEVICES.contains(&format!("self.ultraServerNodes * {ULTRA_SERVER_NODE_DEVICES} <=")));
    assert!(NODE_ENTRIES_OVER_DEVICES.contains(&format!("takes {ULTRA_SERVER_NODE_DEVICES} of")));
    assert!(NODE_ENTRIES_OVER_DEVICES.contains(&format!("at least {ULTRA_SERVER_NODE_DEVICES} x")));
}

#[test]
fn the_device_class_name_leaves_room_for_the_node_entries_quota_key() {
    // Labels of 63 characters, as a DNS subdomain allows.
    let name = |len: usize| (0..len).map(|i| if i % 64 == 63 { '.' } else { 'a' }).collect::<String>();
    assert!(check(json!({"deviceClassName": name(207)})).is_ok());
    let InvalidConfig(errors) = check(json!({"deviceClassName": name(208)})).unwrap_err();
    assert_eq!(errors[0].path, "spec.deviceClassName");
    // At 207 the longest key the operator writes still has a DNS subdomain (at most 253 characters) before its `/`.
    let key = device_quota_key(&ultra_server_node_class_name(&name(207)));
    assert_eq!(key.split_once('/').unwrap().0.len(), 253);
}
