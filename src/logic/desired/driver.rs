//! The kubelet plugin: its Namespace, ServiceAccount, the binding of its installed ClusterRole, and DaemonSet, as
//! AWS's chart renders them (docs/neuron-driver.md), with the config's overrides merged on top.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, GRPCAction, HostPathVolumeSource, Namespace, ObjectFieldSelector, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, ServiceAccount, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::meta::{config_labels, owned_meta, shared_meta};
use crate::api::labels::LABEL_CONFIG;
use crate::logic::validate::ValidatedConfig;

pub const HEALTHCHECK_PORT: i32 = 51515;
const CONTAINER_NAME: &str = "kubelet-plugin";
const PLUGIN_BINARY: &str = "k8s-neuron-dra-driver";
const APP_LABEL: &str = "app.kubernetes.io/name";
const APP_NAME: &str = "neuron-dra-driver";
const CDI_ROOT: &str = "/var/run/cdi";

/// The kubelet directories the plugin registers through (below `driver.kubeletDir`) and the CDI specs it writes,
/// as (volume name, host path). Mounted at the same paths in the container: the plugin tells the kubelet its
/// socket's path, which the kubelet opens on the host.
fn host_paths(kubelet_dir: &str) -> [(&'static str, String); 3] {
    [
        ("plugins", format!("{kubelet_dir}/plugins")),
        ("plugins-registry", format!("{kubelet_dir}/plugins_registry")),
        ("cdi", CDI_ROOT.to_string()),
    ]
}

/// The kubelet plugin's ClusterRole (AWS's chart's rules), installed once with the operator (config/rbac/
/// plugin_role.yaml). The operator never writes it: it only binds it to each config's plugin ServiceAccount, which
/// RBAC lets it do by `bind` on this one role, so it never holds the plugin's Node and ResourceSlice writes itself.
pub const PLUGIN_CLUSTER_ROLE: &str = "neuron-dra-plugin";

/// Name of the per-config ServiceAccount, ClusterRoleBinding and DaemonSet.
pub fn plugin_name(config_name: &str) -> String {
    format!("neuron-dra-{config_name}")
}

/// The Pod Security Admission label the driver namespace carries, and its level: the plugin mounts kubelet
/// directories from the host (hostPath), which only `privileged` admits, so a stricter cluster default cannot
/// refuse its pods, and the namespace says plainly what it allows.
pub const POD_SECURITY_ENFORCE: (&str, &str) = ("pod-security.kubernetes.io/enforce", "privileged");

/// The driver namespace. No owner reference: it may hold other things, so the operator only deletes one it created
/// once no config uses it.
pub fn namespace(config: &ValidatedConfig) -> Namespace {
    let mut metadata = shared_meta(config, &config.spec.driver.namespace);
    metadata.owner_references = None;
    let (key, level) = POD_SECURITY_ENFORCE;
    metadata.labels.get_or_insert_default().insert(key.into(), level.into());
    Namespace { metadata, ..Namespace::default() }
}

pub fn service_account(config: &ValidatedConfig) -> ServiceAccount {
    ServiceAccount {
        metadata: owned_meta(config, &plugin_name(&config.name), Some(&config.spec.driver.namespace)),
        ..ServiceAccount::default()
    }
}

/// Binds the installed plugin ClusterRole to this config's plugin ServiceAccount.
pub fn cluster_role_binding(config: &ValidatedConfig) -> ClusterRoleBinding {
    let name = plugin_name(&config.name);
    ClusterRoleBinding {
        metadata: owned_meta(config, &name, None),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: PLUGIN_CLUSTER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name,
            namespace: Some(config.spec.driver.namespace.clone()),
            ..Subject::default()
        }]),
    }
}

/// Labels that select this config's plugin pods.
fn pod_selector_labels(config: &ValidatedConfig) -> BTreeMap<String, String> {
    BTreeMap::from([(APP_LABEL.to_string(), APP_NAME.to_string()), (LABEL_CONFIG.to_string(), config.name.clone())])
}

pub fn daemon_set(config: &ValidatedConfig) -> DaemonSet {
    let driver = &config.spec.driver;
    let name = plugin_name(&config.name);
    let mut pod_labels = config_labels(config);
    pod_labels.extend(pod_selector_labels(config));

    DaemonSet {
        metadata: owned_meta(config, &name, Some(&driver.namespace)),
        spec: Some(DaemonSetSpec {
            selector: LabelSelector { match_labels: Some(pod_selector_labels(config)), ..LabelSelector::default() },
            update_strategy: Some(update_strategy(driver)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(pod_labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    service_account_name: Some(name),
                    host_network: Some(true),
                    priority_class_name: driver.priority_class_name.clone(),
                    image_pull_secrets: Some(driver.image_pull_secrets.clone()).filter(|s| !s.is_empty()),
                    tolerations: Some(tolerations(&driver.tolerations)),
                    affinity: Some(crate::logic::nodes::affinity(&config.spec)),
                    containers: vec![container(config)],
                    volumes: Some(
                        host_paths(&driver.kubelet_dir)
                            .into_iter()
                            .map(|(name, path)| Volume {
                                name: name.to_string(),
                                host_path: Some(HostPathVolumeSource { path, type_: Some("DirectoryOrCreate".into()) }),
                                ..Volume::default()
                            })
                            .collect(),
                    ),
                    ..PodSpec::default()
                }),
            },
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}

/// With a rollout policy the operator replaces the pods itself, step by step (`rollout`): the DaemonSet controller
/// only recreates the pods it deletes (`OnDelete`). Otherwise the DaemonSet controller rolls out.
fn update_strategy(driver: &crate::api::DriverSpec) -> DaemonSetUpdateStrategy {
    if driver.rollout.is_some() {
        return DaemonSetUpdateStrategy { type_: Some("OnDelete".into()), rolling_update: None };
    }
    let update = driver.update_strategy.clone().unwrap_or_default();
    DaemonSetUpdateStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDaemonSet {
            max_unavailable: Some(update.max_unavailable.unwrap_or(IntOrString::Int(0))),
            max_surge: Some(update.max_surge.unwrap_or(IntOrString::Int(1))),
        }),
    }
}

fn container(config: &ValidatedConfig) -> Container {
    let driver = &config.spec.driver;
    Container {
        name: CONTAINER_NAME.into(),
        image: Some(driver.image.clone()),
        image_pull_policy: Some(driver.image_pull_policy.as_str().into()),
        command: Some(vec![PLUGIN_BINARY.into()]),
        env: Some(merge_env(default_env(&driver.kubelet_dir), &driver.env)),
        resources: Some(driver.resources.clone().unwrap_or_else(default_resources)),
        liveness_probe: Some(Probe {
            grpc: Some(GRPCAction { port: HEALTHCHECK_PORT, service: Some("liveness".into()) }),
            initial_delay_seconds: Some(30),
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        // AWS's chart has no readiness probe, so a plugin container counts as Ready the moment it starts, even one
        // that exits before it registers; a stepped rollout would pass such a version on that instant. The same
        // health service answers SERVING only once the plugin has registered with the kubelet and publishes.
        readiness_probe: Some(Probe {
            grpc: Some(GRPCAction { port: HEALTHCHECK_PORT, service: Some("liveness".into()) }),
            period_seconds: Some(5),
            timeout_seconds: Some(5),
            failure_threshold: Some(1),
            ..Probe::default()
        }),
        volume_mounts: Some(
            host_paths(&driver.kubelet_dir)
                .into_iter()
                .map(|(name, path)| VolumeMount { name: name.to_string(), mount_path: path, ..VolumeMount::default() })
                .collect(),
        ),
        ..Container::default()
    }
}

fn field_ref(path: &str) -> Option<EnvVarSource> {
    Some(EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..ObjectFieldSelector::default() }),
        ..EnvVarSource::default()
    })
}

fn default_env(kubelet_dir: &str) -> Vec<EnvVar> {
    let value = |name: &str, value: &str| EnvVar { name: name.into(), value: Some(value.into()), value_from: None };
    vec![
        EnvVar { name: "NODE_NAME".into(), value: None, value_from: field_ref("spec.nodeName") },
        EnvVar { name: "POD_UID".into(), value: None, value_from: field_ref("metadata.uid") },
        value("CDI_ROOT", CDI_ROOT),
        value("KUBELET_REGISTRAR_DIRECTORY_PATH", &format!("{kubelet_dir}/plugins_registry")),
        value("KUBELET_PLUGINS_DIRECTORY_PATH", &format!("{kubelet_dir}/plugins")),
        value("HEALTHCHECK_PORT", &HEALTHCHECK_PORT.to_string()),
    ]
}

/// User variables replace defaults of the same name (in place) and are appended otherwise.
fn merge_env(mut env: Vec<EnvVar>, overrides: &[EnvVar]) -> Vec<EnvVar> {
    for var in overrides {
        match env.iter_mut().find(|existing| existing.name == var.name) {
            Some(existing) => *existing = var.clone(),
            None => env.push(var.clone()),
        }
    }
    env
}

fn default_resources() -> ResourceRequirements {
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(memory.into()))])
    };
    ResourceRequirements {
        requests: Some(quantities("10m", "128Mi")),
        limits: Some(quantities("20m", "256Mi")),
        ..ResourceRequirements::default()
    }
}

/// AWS's defaults, then the config's own (a user toleration equal to a default is not repeated).
fn tolerations(extra: &[Toleration]) -> Vec<Toleration> {
    let mut all = vec![
        Toleration { key: Some("CriticalAddonsOnly".into()), operator: Some("Exists".into()), ..Toleration::default() },
        Toleration {
            key: Some("aws.amazon.com/neuron".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        },
        Toleration {
            key: Some("sagemaker.amazonaws.com/node-health-status".into()),
            operator: Some("Equal".into()),
            value: Some("Unschedulable".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        },
    ];
    for toleration in extra {
        if !all.contains(toleration) {
            all.push(toleration.clone());
        }
    }
    all
}
