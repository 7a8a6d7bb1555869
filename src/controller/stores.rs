//! The watch caches of everything the reconcile reads.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::core::DeserializeGuard;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;

use crate::api::NeuronDRAConfig;
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView};

/// The config as watched: one that cannot be parsed is still delivered, as an error, and reported.
pub type GuardedConfig = DeserializeGuard<NeuronDRAConfig>;

macro_rules! owned_stores {
    ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
        /// The caches of the kinds the operator owns (`kinds.rs`), watched by the managed-by label only.
        #[derive(Clone)]
        pub struct Owned {
            $(pub $store: Store<$ty>,)*
        }

        impl Owned {
            async fn wait_ready(&self) {
                let _ = futures::join!($(self.$store.wait_until_ready(),)*);
            }
        }
    };
}
owned_kinds!(owned_stores);

/// Watch caches of everything the reconcile reads.
#[derive(Clone)]
pub struct Stores {
    pub configs: Store<GuardedConfig>,
    pub nodes: Store<NodeView>,
    /// Only labels and deletion are read: metadata alone.
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub owned: Owned,
    /// Every DeviceClass, whoever made it (`owned` holds only the operator's), metadata alone: whether a class the
    /// templates name is another tool's (`plan::own_classes`).
    pub every_device_class: Store<PartialObjectMeta<DeviceClass>>,
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
            self.owned.wait_ready(),
            self.every_device_class.wait_until_ready(),
            self.slices.wait_until_ready(),
            self.efa_slices.wait_until_ready(),
            self.claims.wait_until_ready(),
            self.taint_rules.wait_until_ready(),
            self.plugin_pods.wait_until_ready(),
            self.revisions.wait_until_ready(),
        );
    }
}
