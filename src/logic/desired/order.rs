//! order: the one apply order of a config's objects. `render` prints them in it, and the act layer writes them in
//! it (`controller/act`): a stage starts once the stages it waits for are written.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use serde::Serialize;

use super::Desired;

/// When an object is written, in this order. The stages between `Namespace` and `Plugin` are written at the same
/// time, each in the order of its objects; the templates and
/// budgets go beside all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// The driver namespace: nothing can be written into it before it exists.
    Namespace,
    /// The plugin's ServiceAccount, in the driver namespace.
    Identity,
    /// The binding of the plugin's installed ClusterRole. The plugin does not wait for it to be written without
    /// error: it retries its calls until its rights come.
    Rights,
    /// The DeviceClasses, shared between configs.
    Class,
    /// The plugin's DaemonSet, once the stages before it are written.
    Plugin,
    /// The templates: no object waits for them, nor they for one.
    Templates,
    /// The device budgets, beside the templates.
    Quotas,
}

impl Stage {
    /// The stages written at the same time, after the namespace and before the plugin.
    pub const BEFORE_PLUGIN: [Stage; 3] = [Stage::Identity, Stage::Rights, Stage::Class];

    /// Whether the stage writes into the driver namespace (nothing is, while that namespace is being deleted).
    pub fn in_driver_namespace(self) -> bool {
        matches!(self, Stage::Identity | Stage::Plugin)
    }
}

/// One object of a `Desired`, of any kind it holds; it serializes as the object.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum Object<'a> {
    Namespace(&'a Namespace),
    ServiceAccount(&'a ServiceAccount),
    ClusterRoleBinding(&'a ClusterRoleBinding),
    DeviceClass(&'a DeviceClass),
    DaemonSet(&'a DaemonSet),
    Template(&'a ResourceClaimTemplate),
    Quota(&'a ResourceQuota),
}

impl Desired {
    /// Every object with its stage, in apply order: the one place where that order is written.
    pub fn in_order(&self) -> Vec<(Stage, Object<'_>)> {
        let mut objects = vec![
            (Stage::Namespace, Object::Namespace(&self.namespace)),
            (Stage::Identity, Object::ServiceAccount(&self.service_account)),
            (Stage::Rights, Object::ClusterRoleBinding(&self.cluster_role_binding)),
            (Stage::Class, Object::DeviceClass(&self.device_class)),
        ];
        objects.push((Stage::Class, Object::DeviceClass(&self.ultra_server_node_class)));
        objects.extend(self.extended_resource_class.iter().map(|class| (Stage::Class, Object::DeviceClass(class))));
        objects.push((Stage::Plugin, Object::DaemonSet(&self.daemon_set)));
        objects.extend(self.templates.iter().map(|template| (Stage::Templates, Object::Template(template))));
        objects.extend(self.quotas.iter().map(|quota| (Stage::Quotas, Object::Quota(quota))));
        objects
    }

    /// The objects of one stage, in order.
    pub fn stage(&self, stage: Stage) -> Vec<Object<'_>> {
        self.in_order().into_iter().filter(|(of, _)| *of == stage).map(|(_, object)| object).collect()
    }

    /// The objects as one multi-document YAML stream, in apply order.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let mut out = String::new();
        for (_, object) in self.in_order() {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&object)?);
        }
        Ok(out)
    }
}
