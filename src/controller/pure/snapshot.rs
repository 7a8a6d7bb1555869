//! snapshot: what one reconcile reads of the cluster, taken from the caches once at its start, and what the server
//! answered before planning. The plan is computed from this and nothing else, so it is a pure function of a value
//! a test can build from fixtures.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::ResourceExt;
use kube::core::{ApiResource, PartialObjectMeta};

use crate::api::labels::{LABEL_CONFIG, ours};
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView};
use crate::controller::stores::{GuardedConfig, Stores};
use crate::controller::validations::Validations;
use crate::logic::desired::{Allocator, EFA_DEVICE_CLASS, plugin_name};
use crate::logic::fence::Allowed;
use crate::logic::health;
use crate::logic::nodes::NodeFilter;
use crate::logic::validate::ValidatedConfig;

/// The caches as one reconcile reads them.
pub struct Snapshot {
    /// Each config validated once per generation: a memo shared by every pass, not a view of the cluster.
    pub validations: Arc<Validations>,
    /// The DeviceTaintRule version the server serves (found at start); None where it serves none.
    pub taint_rule_resource: Option<ApiResource>,
    /// What the API server answered before planning.
    pub probes: Probes,
    nodes: Vec<Arc<NodeView>>,
    /// The Neuron driver's slices and the EFA driver's, by node name.
    slices: HashMap<String, Vec<Arc<SliceView>>>,
    efa_slices: HashMap<String, Vec<Arc<SliceView>>>,
    claims: Vec<Arc<ClaimView>>,
    plugin_pods: Vec<Arc<PodView>>,
    /// Namespaces (their metadata) by name.
    namespaces: BTreeMap<String, Arc<PartialObjectMeta<Namespace>>>,
    configs: Vec<Arc<GuardedConfig>>,
    /// What the operator owns, of every config: each owned kind (the plugin DaemonSets, the templates, ...) and the
    /// DeviceTaintRules.
    owned: Owned,
    /// The plugin DaemonSets' ControllerRevisions.
    revisions: Vec<Arc<ControllerRevision>>,
    /// The DeviceClasses another tool made (without the operator's label), by name: a template that names one keeps
    /// the selectors the operator's own class would guarantee (`plan::own_classes`).
    pub foreign_device_classes: BTreeSet<String>,
    /// Whether the EFA driver's DeviceClass exists, which `efa: true` templates claim from (a watched cache: an EFA
    /// driver installed later brings a pass at once).
    pub efa_class: bool,
    /// What rollout, remediation, health and capacity each need of one config, worked out once (a walk over the
    /// whole fleet each): its selected nodes and its plugin pods, with the config's name.
    selected: OnceLock<(String, Selected)>,
    config_pods: OnceLock<(String, PluginPods)>,
}

macro_rules! owned_objects {
    ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
        /// The cached objects of every owned kind (`kinds.rs`) and the DeviceTaintRules, as a pass found them.
        #[derive(Clone, Default)]
        pub struct Owned {
            $(pub $store: Vec<Arc<$ty>>,)*
            pub taint_rules: Vec<Arc<TaintRuleView>>,
        }

        impl Owned {
            /// The caches as they are now.
            pub fn read(stores: &Stores) -> Self {
                Owned { $($store: stores.owned.$store.state(),)* taint_rules: stores.taint_rules.state() }
            }
        }
    };
}
owned_kinds!(owned_objects);

/// What one pass asks the API server before planning (`Capabilities::probe`): answers no cache holds.
#[derive(Debug, Clone)]
pub struct Probes {
    /// The kubelet plugin's fences as judged (`logic::fence::judge`): what the install allows a plugin DaemonSet
    /// when they are in place as shipped, else why not.
    pub fence: Result<Allowed, String>,
    /// Why this server cannot serve the spec (one line naming the field), if it cannot.
    pub unsupported: Option<String>,
    /// How this server's scheduler searches for devices, which decides the templates' form (`whole_node`).
    pub allocator: Allocator,
}

/// The nodes a config selects, in the cache's order.
pub type Selected = Arc<[Arc<NodeView>]>;
/// A config's plugin pod on each node, by node name.
pub type PluginPods = Arc<HashMap<String, Arc<PodView>>>;

/// The value memoized for `name`, or one worked out afresh for another config.
fn memo<T: Clone>(cell: &OnceLock<(String, T)>, name: &str, compute: impl FnOnce() -> T) -> T {
    match cell.get() {
        Some((held, value)) if held == name => value.clone(),
        Some(_) => compute(),
        None => cell.get_or_init(|| (name.to_string(), compute())).1.clone(),
    }
}

fn by_node(slices: Vec<Arc<SliceView>>) -> HashMap<String, Vec<Arc<SliceView>>> {
    // Sized up front: a fleet's map is built once per reconcile, and growing it rehashes every key.
    let mut by_node: HashMap<String, Vec<Arc<SliceView>>> = HashMap::with_capacity(slices.len());
    for slice in slices {
        if let Some(node) = slice.spec.node_name.clone() {
            by_node.entry(node).or_default().push(slice);
        }
    }
    by_node
}

impl Snapshot {
    /// The caches as they are now, with the server's answers (there is no default: a snapshot without them would
    /// have to guess whether the plugin is fenced).
    pub fn new(stores: &Stores, taint_rule_resource: Option<ApiResource>, probes: Probes) -> Self {
        let device_classes = stores.every_device_class.state();
        Snapshot {
            validations: stores.validations.clone(),
            taint_rule_resource,
            probes,
            nodes: stores.nodes.state(),
            slices: by_node(stores.slices.state()),
            efa_slices: by_node(stores.efa_slices.state()),
            claims: stores.claims.state(),
            plugin_pods: stores.plugin_pods.state(),
            namespaces: stores.namespaces.state().into_iter().map(|ns| (ns.name_any(), ns)).collect(),
            configs: stores.configs.state(),
            owned: Owned::read(stores),
            revisions: stores.revisions.state(),
            foreign_device_classes: device_classes
                .iter()
                .filter(|class| !ours(&class.metadata))
                .map(|class| class.name_any())
                .collect(),
            efa_class: device_classes.iter().any(|class| class.name_any() == EFA_DEVICE_CLASS),
            selected: OnceLock::new(),
            config_pods: OnceLock::new(),
        }
    }

    /// With the fences' judgement alone.
    #[cfg(test)]
    pub fn with_fence(mut self, fence: Result<Allowed, String>) -> Self {
        self.probes.fence = fence;
        self
    }

    /// A namespace by name.
    pub fn namespace(&self, name: &str) -> Option<&PartialObjectMeta<Namespace>> {
        self.namespaces.get(name).map(Arc::as_ref)
    }

    /// Every namespace, by name.
    pub fn namespaces(&self) -> impl Iterator<Item = &PartialObjectMeta<Namespace>> {
        self.namespaces.values().map(Arc::as_ref)
    }

    /// Every config, in the cache's order (one that cannot be parsed too).
    pub fn configs(&self) -> &[Arc<GuardedConfig>] {
        &self.configs
    }

    /// The plugin DaemonSet `name` in `namespace`, if cached.
    pub fn daemon_set(&self, name: &str, namespace: &str) -> Option<&DaemonSet> {
        let found = self
            .owned
            .daemon_sets
            .iter()
            .find(|ds| ds.name_any() == name && ds.namespace().as_deref() == Some(namespace));
        found.map(Arc::as_ref)
    }

    /// Every config's plugin DaemonSet.
    pub fn daemon_sets(&self) -> &[Arc<DaemonSet>] {
        &self.owned.daemon_sets
    }

    /// The plugin DaemonSets' ControllerRevisions.
    pub fn revisions(&self) -> &[Arc<ControllerRevision>] {
        &self.revisions
    }

    /// Every config's ResourceClaimTemplates.
    pub fn templates(&self) -> &[Arc<ResourceClaimTemplate>] {
        &self.owned.templates
    }

    /// What the operator owns, of every config, kind by kind.
    pub fn owned(&self) -> &Owned {
        &self.owned
    }

    /// Every node, in the cache's order.
    pub fn nodes(&self) -> &[Arc<NodeView>] {
        &self.nodes
    }

    /// Every plugin pod of every config.
    pub fn plugin_pods(&self) -> &[Arc<PodView>] {
        &self.plugin_pods
    }

    /// The nodes a config selects (`NodeFilter`).
    pub fn selected_nodes(&self, config: &ValidatedConfig) -> Selected {
        memo(&self.selected, &config.name, || {
            let filter = NodeFilter::new(&config.spec);
            self.nodes.iter().filter(|n| filter.selects(n.labels())).cloned().collect()
        })
    }

    /// The Neuron driver's slices of one node.
    pub fn slices_of(&self, node: &str) -> &[Arc<SliceView>] {
        self.slices.get(node).map(Vec::as_slice).unwrap_or_default()
    }

    /// A config's DeviceTaintRules, by name.
    pub fn taint_rules_of(&self, config: &str) -> Vec<Arc<TaintRuleView>> {
        rules_of(&self.owned.taint_rules, config)
    }

    /// A config's plugin pod on each node: only pods its DaemonSet controls (by uid) in the driver namespace count,
    /// since any tenant who may create pods can copy their labels and node pin. Of two pods on one node (the old
    /// one going away while its replacement starts), the one not being deleted is the node's.
    pub fn plugin_pods_of(&self, config: &ValidatedConfig) -> PluginPods {
        memo(&self.config_pods, &config.name, || Arc::new(self.find_plugin_pods(config)))
    }

    fn find_plugin_pods(&self, config: &ValidatedConfig) -> HashMap<String, Arc<PodView>> {
        let namespace = config.spec.driver.namespace.as_str();
        let Some(uid) = self.daemon_set(&plugin_name(&config.name), namespace).and_then(|ds| ds.uid()) else {
            return HashMap::new();
        };
        let mut by_node: HashMap<String, Arc<PodView>> = HashMap::with_capacity(self.plugin_pods.len());
        let ours = |pod: &&Arc<PodView>| {
            pod.metadata.namespace.as_deref() == Some(namespace)
                && pod.controller_uid() == Some(uid.as_str())
                && pod.labels().get(LABEL_CONFIG) == Some(&config.name)
        };
        for pod in self.plugin_pods.iter().filter(ours) {
            let Some(node) = pod.node() else { continue };
            let live = |p: &PodView| p.metadata.deletion_timestamp.is_none();
            if by_node.get(&node).is_none_or(|kept| !live(kept)) {
                by_node.insert(node, pod.clone());
            }
        }
        by_node
    }

    /// Device and node health over the nodes this config selects.
    pub fn health(&self, config: &ValidatedConfig, plugin_expected: bool) -> health::Assessment {
        let plugin_pods = self.plugin_pods_of(config);
        let holders = health::holders(&self.claims);
        health::assess(&health::Inputs {
            spec: &config.spec,
            nodes: &self.selected_nodes(config),
            slices: &self.slices,
            plugin_pods: &plugin_pods,
            taint_rules: &self.owned.taint_rules,
            plugin_expected,
            holders: &holders,
        })
    }

    /// Claims and room per template over the nodes this config selects.
    pub fn capacity(&self, config: &ValidatedConfig) -> Vec<crate::api::TemplateCapacity> {
        crate::logic::capacity::assess(&crate::logic::capacity::Inputs {
            config,
            nodes: &self.selected_nodes(config),
            slices: &self.slices,
            efa_slices: &self.efa_slices,
            claims: &self.claims,
            taint_rules: &self.owned.taint_rules,
        })
    }
}

/// The DeviceTaintRules of one config among `rules`, by name.
pub fn rules_of(rules: &[Arc<TaintRuleView>], config: &str) -> Vec<Arc<TaintRuleView>> {
    let mut mine: Vec<Arc<TaintRuleView>> =
        rules.iter().filter(|r| r.labels().get(LABEL_CONFIG).map(String::as_str) == Some(config)).cloned().collect();
    mine.sort_by_key(|r| r.name_any());
    mine
}
