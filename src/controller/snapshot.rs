//! What health, capacity and the rollout read of the fleet, taken from the caches once per reconcile.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;

use super::Stores;
use crate::api::labels::LABEL_CONFIG;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView};
use crate::logic::health;
use crate::logic::validate::ValidatedConfig;

/// What health and capacity both read, taken from the caches once per reconcile.
pub struct Snapshot {
    nodes: Vec<Arc<NodeView>>,
    /// The Neuron driver's slices and the EFA driver's, by node name.
    slices: HashMap<String, Vec<Arc<SliceView>>>,
    efa_slices: HashMap<String, Vec<Arc<SliceView>>>,
    claims: Vec<Arc<ClaimView>>,
    taint_rules: Vec<Arc<crate::cluster::taint_rule::TaintRuleView>>,
}

fn by_node(slices: Vec<Arc<SliceView>>) -> HashMap<String, Vec<Arc<SliceView>>> {
    let mut by_node: HashMap<String, Vec<Arc<SliceView>>> = HashMap::new();
    for slice in slices {
        if let Some(node) = slice.spec.node_name.clone() {
            by_node.entry(node).or_default().push(slice);
        }
    }
    by_node
}

impl Snapshot {
    pub fn nodes(&self) -> &[Arc<NodeView>] {
        &self.nodes
    }

    /// The Neuron driver's slices of one node.
    pub fn slices_of(&self, node: &str) -> &[Arc<SliceView>] {
        self.slices.get(node).map(Vec::as_slice).unwrap_or_default()
    }

    pub fn new(stores: &Stores) -> Self {
        Snapshot {
            nodes: stores.nodes.state(),
            slices: by_node(stores.slices.state()),
            efa_slices: by_node(stores.efa_slices.state()),
            claims: stores.claims.state(),
            taint_rules: stores.taint_rules.state(),
        }
    }

    /// Device and node health over the nodes this config selects.
    pub fn health(&self, config: &ValidatedConfig, plugin_expected: bool, stores: &Stores) -> health::Assessment {
        let plugin_pods: HashMap<String, Arc<PodView>> = stores
            .plugin_pods
            .state()
            .into_iter()
            .filter(|pod| pod.labels().get(LABEL_CONFIG) == Some(&config.name))
            .filter_map(|pod| Some((pod.node()?, pod)))
            .collect();
        let holders = health::holders(&self.claims);
        health::assess(&health::Inputs {
            spec: &config.spec,
            nodes: &self.nodes,
            slices: &self.slices,
            plugin_pods: &plugin_pods,
            taint_rules: &self.taint_rules,
            plugin_expected,
            holders: &holders,
        })
    }

    /// Claims and room per template over the nodes this config selects.
    pub fn capacity(&self, config: &ValidatedConfig) -> Vec<crate::api::TemplateCapacity> {
        crate::logic::capacity::assess(&crate::logic::capacity::Inputs {
            config,
            nodes: &self.nodes,
            slices: &self.slices,
            efa_slices: &self.efa_slices,
            claims: &self.claims,
            taint_rules: &self.taint_rules,
        })
    }
}
