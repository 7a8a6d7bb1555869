//! The watch caches of everything the reconcile reads.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::core::DeserializeGuard;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;

use crate::api::NeuronDRAConfig;
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView};

/// The config as watched: one that cannot be parsed is still delivered, as an error, and reported.
pub type GuardedConfig = DeserializeGuard<NeuronDRAConfig>;

/// Watch caches of everything the reconcile reads. Owned kinds are watched by the managed-by label only.
#[derive(Clone)]
pub struct Stores {
    pub configs: Store<GuardedConfig>,
    pub nodes: Store<NodeView>,
    /// Only labels and deletion are read: metadata alone.
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub daemon_sets: Store<DaemonSet>,
    pub templates: Store<ResourceClaimTemplate>,
    pub service_accounts: Store<ServiceAccount>,
    pub cluster_roles: Store<ClusterRole>,
    pub cluster_role_bindings: Store<ClusterRoleBinding>,
    pub admission_policies: Store<ValidatingAdmissionPolicy>,
    pub admission_policy_bindings: Store<ValidatingAdmissionPolicyBinding>,
    pub device_classes: Store<DeviceClass>,
    /// The Neuron driver's ResourceSlices, trimmed to what health and capacity read.
    pub slices: Store<SliceView>,
    /// The EFA driver's ResourceSlices, for capacity (EFA alignment).
    pub efa_slices: Store<SliceView>,
    /// Every ResourceClaim, trimmed to labels, allocated devices and consumers: what is in use, and by whom.
    pub claims: Store<ClaimView>,
    /// In the version the server serves; empty (and ready) where it serves none.
    pub taint_rules: Store<TaintRuleView>,
    /// The kubelet-plugin pods of every config.
    pub plugin_pods: Store<PodView>,
    /// The plugin DaemonSets' ControllerRevisions (their templates), for the rollout.
    pub revisions: Store<ControllerRevision>,
    /// Each cached config validated once per generation (for conflict checks between configs).
    pub validations: Arc<super::validations::Validations>,
}

impl Stores {
    /// Waits until every cache but the configs' has listed once, so a reconcile never mistakes "not loaded" for
    /// "absent". The configs' cache is the controller's own: its runner starts no reconcile before that cache is
    /// ready, and it waits on it itself. A store wakes only the latest of its waiters, so a second waiter on that
    /// cache here could sleep forever, and with it every reconcile.
    pub async fn wait_ready(&self) {
        let _ = futures::join!(
            self.nodes.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.daemon_sets.wait_until_ready(),
            self.templates.wait_until_ready(),
            self.service_accounts.wait_until_ready(),
            self.cluster_roles.wait_until_ready(),
            self.cluster_role_bindings.wait_until_ready(),
            self.admission_policies.wait_until_ready(),
            self.admission_policy_bindings.wait_until_ready(),
            self.device_classes.wait_until_ready(),
            self.slices.wait_until_ready(),
            self.efa_slices.wait_until_ready(),
            self.claims.wait_until_ready(),
            self.taint_rules.wait_until_ready(),
            self.plugin_pods.wait_until_ready(),
            self.revisions.wait_until_ready(),
        );
    }
}
