//! kinds: the one table of what the operator owns. Each row is a kind, its cache in `Stores`, its scope, what its
//! watch events trigger, how an unwanted object of it goes, and whether it is one of a config's own driver objects.
//! From the table come the caches and their readiness (`stores.rs`), the watches (`controller/mod.rs`), each kind's
//! cache lookup and API (`act/operands.rs`), the delete order (the table backwards, `act/pass.rs`), the count of a
//! config's driver objects, the RBAC the operator needs (checked against `config/rbac/role.yaml` and the table
//! in docs/architecture.md), the OLM bundle's list of what a config makes (`devtools/bundle/csv.rs`) and the
//! kinds an uninstall leaves none of (tests/install_eks.rs, which holds docs/install-eks.md's recovery commands to
//! them). Adding a kind is one row here, its builder in `logic/desired`, and its place in
//! `Desired::in_order` (`logic/desired/order.rs`), where the apply order and its stages are written once.
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

/// One kind as RBAC, the docs, the OLM bundle and the tests name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindInfo {
    pub kind: String,
    /// The API group ("" for the core group).
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespaced: bool,
    /// `Delete` kinds carry the config's label (`neurondra.io/config`); `Shared` ones the shared label instead.
    pub release: Release,
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
                version: <$ty>::version(&()).into_owned(),
                plural: <$ty>::plural(&()).into_owned(),
                namespaced: stringify!($scope) == "namespaced",
                release: Release::$release,
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
mod tests;
