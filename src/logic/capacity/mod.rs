//! capacity (pure): how many more claims of each template fit on a config's nodes now, and how many hold devices.
//!
//! The count follows the allocator's rules for the requests the compiler writes (see `TemplateCapacity` in the
//! API for the exact definition): claims of N connected devices take whole `devicegroup<N>` groups, EFA requests
//! take the interfaces that carry the same group id, `All` takes a whole node, UltraServer claims take a
//! `neuron_node` entry. Groups are disjoint, so counting free groups packs claims exactly as the scheduler can.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::TemplateCapacity;
use crate::api::labels::{LABEL_CLAIM_TEMPLATE, LABEL_CONFIG};
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, SliceView};
use crate::logic::validate::{Choice, ClaimKind, ClaimSpec, Count, ValidatedConfig};

mod fallbacks;
mod slots;

pub use slots::{Allocated, Entry, NodeDevices, Pins, Slot, node_devices};
use slots::{Selector, group_size, selector};

/// How many more claims of `claim` the nodes can take now (`pins` from the config's claims).
pub fn available(claim: &ClaimSpec, pins: &Pins, nodes: &[NodeDevices]) -> i64 {
    let selectors: Vec<Selector> = claim.choices.iter().map(|c| selector(c, pins)).collect();
    let mut scratch = Vec::new();
    nodes.iter().map(|node| available_on_node(claim, &selectors, node, &mut scratch)).sum()
}

/// Claims of `claim` (its choices' `selectors` beside) that fit on one node. `scratch` is reused across nodes.
fn available_on_node(claim: &ClaimSpec, selectors: &[Selector], node: &NodeDevices, scratch: &mut Vec<bool>) -> i64 {
    match (claim.choices.as_slice(), selectors) {
        ([only], [selector]) => available_on(only, *selector, node),
        (choices, selectors) => fallbacks::available_on(choices, selectors, node, scratch),
    }
}

fn available_on(choice: &Choice, selector: Selector, node: &NodeDevices) -> i64 {
    let (count, efa) = match &choice.kind {
        ClaimKind::UltraServerNode { .. } => {
            return node.neuron.iter().filter(|s| s.free && selector.matches(s)).count() as i64;
        }
        ClaimKind::Devices { count, efa } => (*count, efa.is_some()),
    };
    let devices = || node.neuron.iter().filter(|s| selector.matches(s));
    match count {
        Count::All => {
            let whole = devices().next().is_some() && devices().all(|s| s.free);
            let efas_free = !efa || (!node.efa.is_empty() && node.efa.iter().all(|s| s.free));
            i64::from(whole && efas_free)
        }
        Count::Exactly(1) if !efa => devices().filter(|s| s.free).count() as i64,
        Count::Exactly(n) => {
            let efa_per_claim = match &choice.kind {
                ClaimKind::Devices { efa: Some(Count::Exactly(e)), .. } => *e as usize,
                _ => 0,
            };
            let Some(size) = group_size(choice) else { return 0 };
            let groups = node.group_ids[size].len();
            free_groups(devices(), &node.efa, (size, groups), n as usize, efa_per_claim)
        }
    }
}

/// Claims of `per_claim` devices and `efa_per_claim` EFA interfaces that fit, each in one group of one size
/// (`(size index, groups of that size on the node)`): per group, as many claims as its free devices and free EFAs
/// allow.
fn free_groups<'a>(
    devices: impl Iterator<Item = &'a Slot>,
    efa: &[Slot],
    (size, groups): (usize, usize),
    per_claim: usize,
    efa_per_claim: usize,
) -> i64 {
    // (free devices, free EFAs) per group
    let mut free = vec![(0usize, 0usize); groups];
    for group in devices.filter(|s| s.free).filter_map(|s| s.groups[size]) {
        free[usize::from(group)].0 += 1;
    }
    if efa_per_claim > 0 {
        for group in efa.iter().filter(|s| s.free).filter_map(|s| s.groups[size]) {
            free[usize::from(group)].1 += 1;
        }
    }
    free.iter()
        .map(|&(free_devices, free_efas)| {
            let by_devices = free_devices / per_claim;
            free_efas.checked_div(efa_per_claim).map_or(by_devices, |by_efas| by_devices.min(by_efas))
        })
        .sum::<usize>() as i64
}

/// What capacity is computed from, for one config.
pub struct Inputs<'a> {
    pub config: &'a ValidatedConfig,
    /// The nodes the config selects (`NodeFilter`).
    pub nodes: &'a [Arc<NodeView>],
    /// The Neuron driver's slices, by node name.
    pub slices: &'a HashMap<String, Vec<Arc<SliceView>>>,
    /// The EFA driver's slices, by node name.
    pub efa_slices: &'a HashMap<String, Vec<Arc<SliceView>>>,
    pub claims: &'a [Arc<ClaimView>],
    pub taint_rules: &'a [Arc<TaintRuleView>],
}

/// Claims and room for every template of the config, in template order. Nodes are read one at a time into one
/// buffer, and every template counted on it while its slots are in cache.
pub fn assess(inputs: &Inputs) -> Vec<TemplateCapacity> {
    let claims = &inputs.config.claims;
    let allocated = Allocated::new(inputs.claims);
    let pins = Pins::of(claims);
    let selectors: Vec<Vec<Selector>> =
        claims.iter().map(|claim| claim.choices.iter().map(|c| selector(c, &pins)).collect()).collect();
    let mut available = vec![0; claims.len()];
    let (mut node, mut scratch) = (NodeDevices::default(), Vec::new());
    // A node that is not Ready is tainted against new pods (node-lifecycle controller): none of its room counts.
    for name in inputs.nodes.iter().filter(|n| n.not_ready().is_none()).filter_map(|n| n.metadata.name.as_deref()) {
        let neuron = inputs.slices.get(name).into_iter().flatten();
        let efa = inputs.efa_slices.get(name).into_iter().flatten();
        node.fill(neuron.chain(efa).map(Arc::as_ref), &allocated, inputs.taint_rules, &pins);
        for ((claim, selectors), sum) in claims.iter().zip(&selectors).zip(&mut available) {
            *sum += available_on_node(claim, selectors, &node, &mut scratch);
        }
    }
    let counts = allocated_by_template(&inputs.config.name, inputs.claims);
    claims
        .iter()
        .zip(available)
        .map(|(claim, available)| TemplateCapacity {
            template: claim.template.clone(),
            allocated: counts.get(&claim.template).copied().unwrap_or(0),
            available,
        })
        .collect()
}

/// Allocated claims per template of one config.
pub fn allocated_by_template(config: &str, claims: &[Arc<ClaimView>]) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for claim in claims.iter().filter(|c| !c.devices().is_empty()) {
        let labels = claim.metadata.labels.as_ref();
        let of = |key: &str| labels.and_then(|l| l.get(key));
        if of(LABEL_CONFIG).is_some_and(|c| c == config)
            && let Some(template) = of(LABEL_CLAIM_TEMPLATE)
        {
            *counts.entry(template.clone()).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests;
