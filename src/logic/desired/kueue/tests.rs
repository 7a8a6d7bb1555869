//! The Kueue mapping: names, flavors, one budget per ClusterQueue as a hard cap, and Kueue's own name limits.

use serde_json::{Value, json};

use super::*;
use crate::cli::parse_config;
use crate::logic::desired::Allocator;
use crate::logic::validate::validate;

fn config(spec: Value) -> ValidatedConfig {
    let doc = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "pool"}, "spec": spec,
    });
    validate(&parse_config(&serde_json::to_string(&doc).unwrap()).expect("parses")).expect("valid")
}

fn budgets() -> Value {
    json!([
        {"namespaces": ["team-b", "team-a"], "devices": 16},
        {"namespaces": ["team-a", "team-c"], "devices": 4},
        {"namespaceSelector": {"matchLabels": {"team": "yes"}}, "devices": 8},
    ])
}

#[test]
fn maps_the_device_class_to_a_resource_named_after_it() {
    let objects = build_kueue(&config(json!({"quotas": budgets()}))).unwrap();
    let configuration = serde_json::to_value(&objects.configuration).unwrap();
    assert_eq!(
        configuration,
        json!({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "featureGates": {"KueueDRAIntegration": true},
            "resources": {"deviceClassMappings": [
                {"name": "neuron.aws.com/devices", "deviceClassNames": ["neuron.aws.com"]},
                {"name": "neuron.aws.com/ultraserver-nodes", "deviceClassNames": ["ultraserver-nodes.neuron.aws.com"]},
            ]},
        })
    );
}

#[test]
fn an_extended_resource_names_the_mapping_and_adds_its_class_and_gate() {
    let spec = json!({"deviceClassName": "trn", "extendedResourceName": "aws.amazon.com/neuron", "quotas": budgets()});
    let objects = build_kueue(&config(spec)).unwrap();
    assert_eq!(objects.configuration.feature_gates.get("KueueDRAIntegrationExtendedResource"), Some(&true));
    let mapping = &objects.configuration.resources.device_class_mappings[0];
    assert_eq!(mapping.name, "aws.amazon.com/neuron");
    assert_eq!(mapping.device_class_names, ["trn", "devices.trn"]);
    let queue = &objects.cluster_queues[0].spec;
    assert_eq!(
        queue["resourceGroups"][0]["coveredResources"],
        json!(["aws.amazon.com/neuron", "trn/ultraserver-nodes"])
    );
}

#[test]
fn one_cluster_queue_and_local_queue_per_named_namespace_the_first_budget_winning() {
    let objects = build_kueue(&config(json!({"quotas": budgets()}))).unwrap();
    let queues: Vec<(&str, &Value)> = objects
        .cluster_queues
        .iter()
        .map(|q| (q.metadata.name.as_str(), &q.spec["resourceGroups"][0]["flavors"][0]["resources"][0]))
        .collect();
    let quota = |n: i64| json!({"name": "neuron.aws.com/devices", "nominalQuota": n, "borrowingLimit": 0});
    assert_eq!(queues, [("neuron-team-a", &quota(16)), ("neuron-team-b", &quota(16)), ("neuron-team-c", &quota(4))]);
    let team_a = &objects.cluster_queues[0].spec;
    assert_eq!(team_a["cohortName"], "pool", "borrowingLimit needs a cohort");
    assert_eq!(team_a["namespaceSelector"], json!({"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}));
    let local: Vec<(Option<&str>, &str, &Value)> = objects
        .local_queues
        .iter()
        .map(|q| (q.metadata.namespace.as_deref(), q.metadata.name.as_str(), &q.spec["clusterQueue"]))
        .collect();
    assert_eq!(local[0], (Some("team-a"), "neuron", &json!("neuron-team-a")));
    assert_eq!(local.len(), 3);
    assert_eq!(objects.notes.len(), 1, "the selector budget is skipped with a note: {:?}", objects.notes);
    assert!(objects.notes[0].contains("spec.quotas[2].namespaceSelector"));
}

#[test]
fn several_instance_types_share_one_flavor_so_the_budget_stays_a_hard_cap() {
    let objects = build_kueue(&config(json!({"quotas": budgets()}))).unwrap();
    assert_eq!(objects.flavors.len(), 1);
    assert_eq!(objects.flavors[0].metadata.name, "neuron-pool");
    assert_eq!(objects.flavors[0].spec, json!({}));
    let flavors = &objects.cluster_queues[0].spec["resourceGroups"][0]["flavors"];
    assert_eq!(flavors.as_array().unwrap().len(), 1);
}

#[test]
fn a_node_selector_naming_one_type_gives_that_types_flavor() {
    let selector = json!({"matchExpressions": [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["trn2.48xlarge", "inf2.xlarge"]},
        {"key": "pool", "operator": "Exists"}]});
    let objects = build_kueue(&config(json!({"nodeSelector": selector, "quotas": budgets()}))).unwrap();
    assert_eq!(objects.flavors[0].metadata.name, "trn2-48xlarge");
    assert_eq!(objects.flavors[0].spec, json!({"nodeLabels": {"node.kubernetes.io/instance-type": "trn2.48xlarge"}}));
    assert_eq!(objects.cluster_queues[0].spec["resourceGroups"][0]["flavors"][0]["name"], "trn2-48xlarge");
}

#[test]
fn instance_types_follow_the_selectors_instance_type_requirements() {
    let types = |selector: Value| instance_types(&config(json!({"nodeSelector": selector})));
    assert_eq!(types(json!({"matchLabels": {"node.kubernetes.io/instance-type": "trn1.2xlarge"}})), ["trn1.2xlarge"]);
    assert_eq!(types(json!({"matchLabels": {"pool": "a"}})).len(), TRAINIUM_TYPES.len());
    let not_in = json!({"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "NotIn",
        "values": ["trn1.2xlarge"]}]});
    assert_eq!(types(not_in).len(), TRAINIUM_TYPES.len() - 1);
}

#[test]
fn a_selector_of_no_supported_type_is_refused() {
    let selector = json!({"matchLabels": {"node.kubernetes.io/instance-type": "trn9.large"}});
    let problems = build_kueue(&config(json!({"nodeSelector": selector}))).unwrap_err();
    assert_eq!(problems[0].path, "spec.nodeSelector");
}

#[test]
fn class_names_past_kueues_63_characters_are_refused() {
    // The longest class name made from it, `ultraserver-nodes.<name>`, must fit Kueue's 63 characters.
    let fits = "a".repeat(45);
    assert!(build_kueue(&config(json!({"deviceClassName": fits}))).is_ok());
    let spec = json!({"deviceClassName": fits, "extendedResourceName": "aws.amazon.com/neuron"});
    assert!(build_kueue(&config(spec)).is_ok());
    let problems = build_kueue(&config(json!({"deviceClassName": "a".repeat(46)}))).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].reason.contains("DeviceClass \"ultraserver-nodes.aaaa"), "{problems:?}");
}

#[test]
fn node_entries_are_a_resource_of_their_own_carved_out_of_the_devices() {
    let quotas = json!([{"namespaces": ["team-a"], "devices": 48, "ultraServerNodes": 2}]);
    let objects = build_kueue(&config(json!({"quotas": quotas}))).unwrap();
    let group = &objects.cluster_queues[0].spec["resourceGroups"][0];
    assert_eq!(group["coveredResources"], json!(["neuron.aws.com/devices", "neuron.aws.com/ultraserver-nodes"]));
    assert_eq!(
        group["flavors"][0]["resources"],
        json!([
            {"name": "neuron.aws.com/devices", "nominalQuota": 16, "borrowingLimit": 0},
            {"name": "neuron.aws.com/ultraserver-nodes", "nominalQuota": 2, "borrowingLimit": 0},
        ]),
        "the ResourceQuota's two keys"
    );
}

#[test]
fn label_keys_follow_kueues_rule() {
    assert!(check_label_key("neuron.aws.com/devices").is_ok());
    assert!(check_label_key("neuron.aws.com").is_ok());
    assert!(check_label_key(&"a".repeat(64)).is_err());
    assert!(check_label_key("Bad_Prefix/x").is_err());
    assert!(check_label_key("a/b/c").is_err());
    assert!(check_label_key(&format!("{}/devices", "a.".repeat(124) + "a")).is_err(), "longer than 253");
}

#[test]
fn yaml_starts_with_the_configuration_and_orders_queues_after_flavors() {
    let yaml = build_kueue(&config(json!({"quotas": budgets()}))).unwrap().to_yaml().unwrap();
    let kinds: Vec<String> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str::<Value>(d).unwrap()["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["Configuration", "ResourceFlavor", "ClusterQueue", "ClusterQueue", "ClusterQueue"]
            .into_iter()
            .chain(["LocalQueue"; 3])
            .collect::<Vec<_>>()
    );
    assert!(yaml.starts_with("---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"));
}

#[test]
fn says_per_profile_whether_kueue_can_count_its_templates() {
    let config = config(json!({"profiles": [
        {"name": "quad", "training": {"devices": 4, "logicalNeuronCore": 2}},
        {"name": "node", "training": {"instanceType": "trn2.48xlarge"}},
        {"name": "any-node", "training": {"devices": "All"}},
        {"name": "elastic", "training": {"devices": 16, "fallbacks": [{"devices": 8}]}},
        {"name": "efa", "training": {"devices": 4, "efa": true}},
    ]}));
    let verdict = |profile: &str| admission::kueue_admission(&config, profile, Allocator::Combinations);
    // Selectors, constraints and opaque config: Kueue 0.19 counts them.
    assert_eq!(verdict("quad"), crate::api::KueueAdmission { admissible: true, reason: None });
    let reason = |profile: &str| {
        let v = verdict(profile);
        assert!(!v.admissible, "{profile}");
        v.reason.unwrap()
    };
    assert_eq!(
        reason("node"),
        "template node: request neurons asks for every device of a node (allocationMode All), which Kueue cannot \
         count; ask for devices: 16 (every device of a trn2.48xlarge) instead"
    );
    assert!(
        reason("any-node").ends_with("ask for the instance type's device count (devices: 16 on trn2.48xlarge) instead")
    );
    assert_eq!(
        reason("elastic"),
        "template elastic: request neurons has fallbacks (firstAvailable), which Kueue does not count"
    );
    assert_eq!(
        reason("efa"),
        "template efa: request efa asks for DeviceClass efa.networking.k8s.aws, which the Kueue Configuration does not map"
    );
}

/// Before 1.36 every device of a node is `All` even where the profile gives the count: Kueue cannot count it, and
/// the advice is not the count it would be compiled away from.
#[test]
fn before_1_36_a_whole_node_is_all_and_kueue_is_told_so() {
    let config = config(json!({"profiles": [
        {"name": "node16", "training": {"instanceType": "trn2.48xlarge", "devices": 16}},
        {"name": "quad", "training": {"devices": 4}},
    ]}));
    let verdict = |profile: &str| admission::kueue_admission(&config, profile, Allocator::Orderings);
    assert!(verdict("quad").admissible);
    let node16 = verdict("node16");
    assert!(!node16.admissible);
    let reason = node16.reason.unwrap();
    assert!(reason.contains("(allocationMode All), which Kueue cannot count; before Kubernetes 1.36"), "{reason}");
    assert!(admission::kueue_admission(&config, "node16", Allocator::Combinations).admissible);
}
