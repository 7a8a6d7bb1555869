//! kueue (pure): a config's device budgets (`spec.quotas`) as Kueue v0.19 objects, which `render --kueue` prints
//! for an admin who queues jobs with Kueue: the `Configuration` fragment that maps the config's DeviceClasses to
//! two quota resources (devices, and UltraServer node entries), the ResourceFlavors, a ClusterQueue per named budget
//! namespace and a LocalQueue in it. The operator never applies them. docs/kueue.md explains the mapping and what
//! Kueue can admit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::device_class::ultra_server_node_class_name;
use super::quotas::{Allowance, named_budgets};
use crate::api::labels::LABEL_CONFIG;
use crate::logic::catalog::TRAINIUM_TYPES;
use crate::logic::nodes::INSTANCE_TYPE_LABEL;
use crate::logic::validate::{FieldError, ValidatedConfig};

/// The API of Kueue's ClusterQueue, LocalQueue and ResourceFlavor (the storage version since Kueue 0.16).
pub const KUEUE_API_VERSION: &str = "kueue.x-k8s.io/v1beta2";
/// The API of Kueue's manager configuration file (not served: the manager reads it at start).
pub const KUEUE_CONFIG_API_VERSION: &str = "config.kueue.x-k8s.io/v1beta2";
/// Kueue's feature gate for counting DRA devices (0.18 renamed `DynamicResourceAllocation` to it).
pub const DRA_GATE: &str = "KueueDRAIntegration";
/// Kueue's feature gate for pods that ask for a DeviceClass's extended resource (was `DRAExtendedResources`).
pub const DRA_EXTENDED_RESOURCE_GATE: &str = "KueueDRAIntegrationExtendedResource";
/// The LocalQueue each budget namespace gets; jobs name it in the label `kueue.x-k8s.io/queue-name`.
pub const LOCAL_QUEUE: &str = "neuron";
/// Kueue's limits on a `deviceClassMappings` entry (`pkg/config/validation.go`).
pub const MAX_MAPPED_CLASSES: usize = 8;
const MAX_RESOURCE_NAME: usize = 253;

/// Metadata of a printed object: its name, namespace and the config it came from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Meta {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// One printed object: `apiVersion`, `kind`, `metadata`, `spec`, in that order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    pub spec: serde_json::Value,
}

/// Kueue's `Configuration` with only the fields that DRA needs (the rest keeps Kueue's defaults).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    pub api_version: String,
    pub kind: String,
    pub feature_gates: BTreeMap<String, bool>,
    pub resources: Resources,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    pub device_class_mappings: Vec<DeviceClassMapping>,
}

/// Kueue counts the devices that claims ask for from any of `device_class_names` as the quota resource `name`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClassMapping {
    pub name: String,
    pub device_class_names: Vec<String>,
}

/// Everything `render --kueue` prints, and the notes it writes to standard error.
#[derive(Debug, Clone, PartialEq)]
pub struct KueueObjects {
    pub configuration: Configuration,
    pub flavors: Vec<Object>,
    pub cluster_queues: Vec<Object>,
    pub local_queues: Vec<Object>,
    /// What was left out and why, one line each (budgets that select namespaces by label).
    pub notes: Vec<String>,
}

impl KueueObjects {
    /// A multi-document YAML stream: the Configuration, then flavors, ClusterQueues and LocalQueues (the order an
    /// admin applies them in: a ClusterQueue names flavors, a LocalQueue names a ClusterQueue).
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let mut out = format!("---\n{}", serde_yaml::to_string(&self.configuration)?);
        for object in self.flavors.iter().chain(&self.cluster_queues).chain(&self.local_queues) {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(object)?);
        }
        Ok(out)
    }
}

/// The quota resource the DeviceClasses map to: the extended resource when the config names one (what pods ask
/// for, and the name Kueue charges them under with `KueueDRAIntegrationExtendedResource`), else `<deviceClassName>/devices`.
pub fn resource_name(config: &ValidatedConfig) -> String {
    match &config.spec.extended_resource_name {
        Some(resource) => resource.clone(),
        None => format!("{}/devices", config.spec.device_class_name),
    }
}

/// The quota resource of UltraServer node entries: `<deviceClassName>/ultraserver-nodes`. Kueue, like a
/// ResourceQuota, counts a node entry as one, so node entries get a resource of their own, as they get a quota key.
pub fn node_resource_name(config: &ValidatedConfig) -> String {
    format!("{}/ultraserver-nodes", config.spec.device_class_name)
}

/// The config's DeviceClasses: its own, and `devices.<name>` with an extended resource.
pub fn device_class_names(config: &ValidatedConfig) -> Vec<String> {
    let class = &config.spec.device_class_name;
    let mut classes = vec![class.clone()];
    if config.spec.extended_resource_name.is_some() {
        classes.push(format!("devices.{class}"));
    }
    classes
}

/// The supported instance types that `spec.nodeSelector` can select, judged by its instance-type requirements
/// alone (other labels cannot be known offline); every supported type without such a requirement.
pub fn instance_types(config: &ValidatedConfig) -> Vec<&'static str> {
    let Some(selector) = &config.spec.node_selector else {
        return TRAINIUM_TYPES.iter().map(|t| t.name).collect();
    };
    let labels = selector.match_labels.iter().flatten().filter(|(key, _)| *key == INSTANCE_TYPE_LABEL);
    let expressions = selector.match_expressions.iter().flatten().filter(|e| e.key == INSTANCE_TYPE_LABEL);
    TRAINIUM_TYPES
        .iter()
        .map(|t| t.name)
        .filter(|name| {
            labels.clone().all(|(_, value)| value == name)
                && expressions.clone().all(|e| {
                    let listed = e.values.iter().flatten().any(|v| v == name);
                    match e.operator.as_str() {
                        "In" => listed,
                        "NotIn" => !listed,
                        "Exists" => true,
                        _ => false, // DoesNotExist: no instance type at all
                    }
                })
        })
        .collect()
}

/// The flavors: one per instance type when the config selects a single type (Kueue then pins admitted pods to
/// it), else one flavor without node labels for all of them. Kueue charges each flavor on its own, so a budget
/// repeated on several flavors would let a team hold it once per type; one flavor keeps the budget a hard cap.
pub fn flavors(config: &ValidatedConfig) -> Vec<Object> {
    let types = instance_types(config);
    let flavor = |name: String, node_labels: serde_json::Value| Object {
        api_version: KUEUE_API_VERSION.to_string(),
        kind: "ResourceFlavor".to_string(),
        metadata: meta(config, name, None),
        spec: node_labels,
    };
    match types.as_slice() {
        [single] => vec![flavor(flavor_name(single), serde_json::json!({"nodeLabels": {INSTANCE_TYPE_LABEL: single}}))],
        _ => vec![flavor(format!("neuron-{}", config.name), serde_json::json!({}))],
    }
}

/// A flavor named after an instance type: `trn2.48xlarge` -> `trn2-48xlarge`.
pub fn flavor_name(instance_type: &str) -> String {
    instance_type.replace('.', "-")
}

/// The ClusterQueue of one budget namespace.
pub fn cluster_queue_name(namespace: &str) -> String {
    format!("neuron-{namespace}")
}

fn meta(config: &ValidatedConfig, name: String, namespace: Option<&str>) -> Meta {
    Meta {
        name,
        namespace: namespace.map(str::to_string),
        labels: BTreeMap::from([(LABEL_CONFIG.to_string(), config.name.clone())]),
    }
}

/// Every Kueue object for the config's named budgets; problems when a name breaks Kueue's validation.
pub fn build_kueue(config: &ValidatedConfig) -> Result<KueueObjects, Vec<FieldError>> {
    let resources = QuotaResources::of(config);
    let problems = name_problems(config, &resources);
    if !problems.is_empty() {
        return Err(problems);
    }
    let flavors = flavors(config);
    let budgets = named_budgets(config);
    let notes = notes(config, budgets.is_empty());
    let cluster_queues = budgets
        .iter()
        .map(|(namespace, allowance)| cluster_queue(config, &resources, &flavors, namespace, allowance))
        .collect();
    let local_queues = budgets.iter().map(|(namespace, _)| local_queue(config, namespace)).collect();
    let configuration = configuration(config, resources);
    Ok(KueueObjects { configuration, flavors, cluster_queues, local_queues, notes })
}

/// The two quota resources and the DeviceClasses each counts.
struct QuotaResources {
    /// Devices (`resource_name`), from the config's DeviceClasses.
    devices: String,
    classes: Vec<String>,
    /// UltraServer node entries (`node_resource_name`), from the node entries' DeviceClass.
    nodes: String,
    node_class: String,
}

impl QuotaResources {
    fn of(config: &ValidatedConfig) -> Self {
        QuotaResources {
            devices: resource_name(config),
            classes: device_class_names(config),
            nodes: node_resource_name(config),
            node_class: ultra_server_node_class_name(&config.spec.device_class_name),
        }
    }
}

/// The names Kueue would reject, and a selector of no supported instance type (no flavor to charge).
fn name_problems(config: &ValidatedConfig, resources: &QuotaResources) -> Vec<FieldError> {
    let mut problems = Vec::new();
    for name in [&resources.devices, &resources.nodes] {
        if let Err(reason) = check_label_key(name) {
            problems.push(problem("spec.deviceClassName", format!("Kueue's resource name {name:?} {reason}")));
        }
    }
    for class in resources.classes.iter().chain([&resources.node_class]) {
        if let Err(reason) = check_label_key(class) {
            problems.push(problem("spec.deviceClassName", format!("Kueue cannot map DeviceClass {class:?}: {reason}")));
        }
    }
    if instance_types(config).is_empty() {
        problems.push(problem("spec.nodeSelector", "selects no supported Trainium instance type"));
    }
    problems
}

/// The `Configuration` fragment: the feature gates and the DeviceClasses mapped to the two quota resources.
fn configuration(config: &ValidatedConfig, resources: QuotaResources) -> Configuration {
    // Both beta and on by default since Kueue 0.19; printed anyway, so the fragment says what it relies on.
    let mut feature_gates = BTreeMap::from([(DRA_GATE.to_string(), true)]);
    if config.spec.extended_resource_name.is_some() {
        feature_gates.insert(DRA_EXTENDED_RESOURCE_GATE.to_string(), true);
    }
    let QuotaResources { devices, classes, nodes, node_class } = resources;
    Configuration {
        api_version: KUEUE_CONFIG_API_VERSION.to_string(),
        kind: "Configuration".to_string(),
        feature_gates,
        resources: Resources {
            device_class_mappings: vec![
                DeviceClassMapping { name: devices, device_class_names: classes },
                DeviceClassMapping { name: nodes, device_class_names: vec![node_class] },
            ],
        },
    }
}

/// What gets no queue and why: budgets that select namespaces by label, or no budget naming a namespace.
fn notes(config: &ValidatedConfig, no_named_budget: bool) -> Vec<String> {
    let mut notes = Vec::new();
    for (index, quota) in config.spec.quotas.iter().enumerate() {
        if quota.namespace_selector.is_some() {
            notes.push(format!(
                "note: spec.quotas[{index}].namespaceSelector needs the cluster to resolve: no Kueue queues for the \
                 namespaces it selects"
            ));
        }
    }
    if no_named_budget {
        notes.push("note: spec.quotas names no namespace: no ClusterQueue or LocalQueue".to_string());
    }
    notes
}

/// The ClusterQueue of one budget namespace: its allowance on every flavor, without borrowing.
fn cluster_queue(
    config: &ValidatedConfig,
    resources: &QuotaResources,
    flavors: &[Object],
    namespace: &str,
    allowance: &Allowance,
) -> Object {
    let (resource, node_resource) = (&resources.devices, &resources.nodes);
    // The ResourceQuota's two keys: devices less the node entries' devices, and the node entries.
    let quota_flavors: Vec<serde_json::Value> = flavors
        .iter()
        .map(|f| {
            serde_json::json!({"name": f.metadata.name, "resources": [
                {"name": resource, "nominalQuota": allowance.device_claims(), "borrowingLimit": 0},
                {"name": node_resource, "nominalQuota": allowance.ultra_server_nodes, "borrowingLimit": 0}]})
        })
        .collect();
    Object {
        api_version: KUEUE_API_VERSION.to_string(),
        kind: "ClusterQueue".to_string(),
        metadata: meta(config, cluster_queue_name(namespace), None),
        spec: serde_json::json!({
            "cohortName": config.name,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": [resource, node_resource], "flavors": quota_flavors}],
        }),
    }
}

/// The LocalQueue jobs of one budget namespace name, pointing at its ClusterQueue.
fn local_queue(config: &ValidatedConfig, namespace: &str) -> Object {
    Object {
        api_version: KUEUE_API_VERSION.to_string(),
        kind: "LocalQueue".to_string(),
        metadata: meta(config, LOCAL_QUEUE.to_string(), Some(namespace)),
        spec: serde_json::json!({"clusterQueue": cluster_queue_name(namespace)}),
    }
}

fn problem(path: &str, reason: impl Into<String>) -> FieldError {
    FieldError { path: path.to_string(), reason: reason.into() }
}

/// Kueue's check of mapping and class names (`content.IsLabelKey`, at most 253 characters): an optional DNS
/// subdomain prefix and `/`, then a name of at most 63 characters.
pub fn check_label_key(key: &str) -> Result<(), String> {
    static NAME: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").unwrap());
    static PREFIX: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap()
    });
    if key.len() > MAX_RESOURCE_NAME {
        return Err(format!("is longer than {MAX_RESOURCE_NAME} characters"));
    }
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty() || prefix.len() > 253 || !PREFIX.is_match(prefix))
    {
        return Err(format!("has a prefix {prefix:?} that is not a DNS subdomain"));
    }
    if name.is_empty() || name.len() > 63 || !NAME.is_match(name) {
        return Err(format!("needs a name part {name:?} of at most 63 characters (alphanumerics, '-', '_', '.')"));
    }
    Ok(())
}

pub mod admission;

#[cfg(test)]
mod tests;
