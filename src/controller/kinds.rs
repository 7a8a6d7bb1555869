//! kinds: the one table of what the operator owns. Each row is a kind, its cache in `Stores`, its scope, what its
//! watch events trigger, how an unwanted object of it goes, and whether it is one of a config's own driver objects.
//! From the table come the caches and their readiness (`stores.rs`), the watches (`controller/mod.rs`), each kind's
//! cache lookup and API (`act/operands.rs`), the delete order (the table backwards, `act/pass.rs`), the count of a
//! config's driver objects, and the RBAC the operator needs (checked against `config/rbac/role.yaml` and the table
//! in docs/architecture.md). Adding a kind is one row here, its builder in `logic/build`, and its place in
//! `Desired::in_order` (`logic/build/order.rs`), where the apply order and its stages are written once.
//!
//! The kinds read but not owned (nodes, slices, claims, plugin pods, revisions, DeviceTaintRules, namespaces) are
//! watched as compact views or found by discovery, each its own way (`controller/mod.rs`); `READ` lists them with
//! the verbs they need.

use kube::Resource;

/// What the watch events of a kind trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The reconcile of the config its label names.
    Owner,
    /// A reconcile of every config (objects several configs share).
    All,
}

/// How an unclaimed object of the kind goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Deleted.
    Delete,
    /// Deleted with its last owner; otherwise only this config's fields and owner reference go.
    Shared,
}

/// Calls `$generate!` with the table, in apply order (`Desired::in_order`), except the shared DeviceClass, which
/// comes first so that it is released last: `Type => cache: scope, trigger, release, driver object;`.
macro_rules! owned_kinds {
    ($generate:ident) => {
        $generate! {
            k8s_openapi::api::resource::v1::DeviceClass => device_classes: cluster, All, Shared, false;
            k8s_openapi::api::core::v1::ServiceAccount => service_accounts: namespaced, Owner, Delete, true;
            k8s_openapi::api::rbac::v1::ClusterRoleBinding => cluster_role_bindings: cluster, Owner, Delete, true;
            k8s_openapi::api::apps::v1::DaemonSet => daemon_sets: namespaced, Owner, Delete, true;
            k8s_openapi::api::resource::v1::ResourceClaimTemplate => templates: namespaced, Owner, Delete, false;
            k8s_openapi::api::core::v1::ResourceQuota => resource_quotas: namespaced, Owner, Delete, false;
        }
    };
}

/// One kind as RBAC and the docs name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindInfo {
    pub kind: String,
    /// The API group ("" for the core group).
    pub group: String,
    pub plural: String,
    pub verbs: &'static [&'static str],
}

/// What the operator does with every kind it owns: watch, apply (a PATCH that may create; templates are created
/// with a POST) and delete.
pub const OWNED_VERBS: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];

macro_rules! kind_infos {
    ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
        /// Every owned kind, in apply order.
        pub fn owned() -> Vec<KindInfo> {
            vec![$(KindInfo {
                kind: <$ty>::kind(&()).into_owned(),
                group: <$ty>::group(&()).into_owned(),
                plural: <$ty>::plural(&()).into_owned(),
                verbs: OWNED_VERBS,
            },)*]
        }

        /// A config's own driver objects (they carry its label, and are not templates): `managed_objects` counts
        /// them beside the templates in place.
        pub const DRIVER_OBJECTS: usize = 0 $(+ $driver as usize)*;
    };
}
owned_kinds!(kind_infos);

/// The kinds read (some written too) but not owned: (group, resource, verbs).
pub const READ: &[(&str, &str, &[&str])] = &[
    ("neurondra.io", "neurondraconfigs", &["get", "list", "watch", "patch"]),
    ("neurondra.io", "neurondraconfigs/status", &["patch"]),
    ("", "namespaces", &["get", "list", "watch", "create", "patch"]),
    ("", "nodes", &["get", "list", "watch"]),
    ("resource.k8s.io", "resourceslices", &["get", "list", "watch"]),
    ("resource.k8s.io", "resourceclaims", &["get", "list", "watch"]),
    ("resource.k8s.io", "devicetaintrules", &["get", "list", "watch", "create", "patch", "delete"]),
    ("rbac.authorization.k8s.io", "clusterroles", &["bind"]),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies", &["get"]),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings", &["get"]),
    ("", "pods", &["get", "list", "watch", "delete"]),
    ("apps", "controllerrevisions", &["get", "list", "watch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
];

/// The RBAC table of docs/architecture.md: one row per resource, owned kinds first in apply order.
pub fn rbac_table() -> String {
    let mut table = String::from("| group | resource | verbs | owned |\n|---|---|---|---|\n");
    let owned = owned().into_iter().map(|k| (k.group, k.plural, k.verbs, "yes"));
    let read = READ.iter().map(|(group, resource, verbs)| (group.to_string(), resource.to_string(), *verbs, "no"));
    for (group, resource, verbs, owned) in owned.chain(read) {
        let group = if group.is_empty() { "core".to_string() } else { group };
        table.push_str(&format!("| {group} | {resource} | {} | {owned} |\n", verbs.join(", ")));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (group, resource, verb) the table needs is granted by some rule of the shipped ClusterRole.
    #[test]
    fn the_shipped_role_grants_what_the_table_needs() {
        let role: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string("config/rbac/role.yaml").unwrap()).unwrap();
        let rules = role["rules"].as_sequence().unwrap();
        let has = |list: &serde_yaml::Value, item: &str| {
            list.as_sequence().unwrap().iter().any(|v| v.as_str() == Some(item) || v.as_str() == Some("*"))
        };
        let owned = owned().into_iter().map(|k| (k.group, k.plural, k.verbs));
        let read = READ.iter().map(|(group, resource, verbs)| (group.to_string(), resource.to_string(), *verbs));
        for (group, resource, verbs) in owned.chain(read) {
            for verb in verbs {
                let granted = rules.iter().any(|rule| {
                    has(&rule["apiGroups"], &group) && has(&rule["resources"], &resource) && has(&rule["verbs"], verb)
                });
                assert!(granted, "config/rbac/role.yaml does not grant {verb} on {group}/{resource}");
            }
        }
    }

    #[test]
    fn the_docs_list_exactly_the_kinds_of_the_table() {
        let docs = std::fs::read_to_string("docs/architecture.md").unwrap();
        let table = rbac_table();
        assert!(docs.contains(&table), "docs/architecture.md must hold this table, as it is:\n{table}");
    }

    #[test]
    fn the_table_follows_the_apply_order() {
        let yaml = "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: pool}\n\
                    spec: {profiles: [{name: p, training: {devices: 4}}]}";
        let config = crate::logic::validate::validate(&crate::cli::parse_config(yaml).unwrap()).unwrap();
        let desired =
            crate::logic::build::build(&config, &["team".to_string()]).with_quotas(&config, &[("team".into(), 8)]);
        let mut applied: Vec<String> = Vec::new();
        for (_, object) in desired.in_order() {
            let kind = serde_json::to_value(object).unwrap()["kind"].as_str().unwrap().to_string();
            if !applied.contains(&kind) && kind != "Namespace" && kind != "DeviceClass" {
                applied.push(kind);
            }
        }
        let table: Vec<String> = owned().into_iter().map(|k| k.kind).filter(|k| k != "DeviceClass").collect();
        assert_eq!(applied, table);
    }

    #[test]
    fn a_config_owns_three_driver_objects_and_its_templates() {
        assert_eq!(DRIVER_OBJECTS, 3);
        let kinds: Vec<String> = owned().into_iter().map(|k| k.kind).collect();
        assert_eq!(kinds.first().map(String::as_str), Some("DeviceClass"), "released last");
        assert_eq!(kinds.last().map(String::as_str), Some("ResourceQuota"), "deleted first");
    }
}
