//! whole_node (pure): the form a request for every device of a node takes on each Kubernetes minor
//! (docs/decisions.md, "Whole nodes on a busy fleet").
//!
//! Up to 1.35, kube-scheduler's allocator looks for an exact count by trying the orderings of a node's free devices,
//! and nothing stops it early when fewer are free than asked for: 16 devices on a node with 15 free exhaust the
//! scheduler's filter time (10 s) on that node, which is then rejected with "timed out trying to allocate devices",
//! and a request's fallbacks are never tried. `allocationMode: All` fails such a node at its first device in use.
//! 1.36 tries combinations instead (kubernetes#133678), where the same exact count fails in milliseconds; there an
//! exact count is kept, which Kueue can count and a ResourceQuota charges as what it holds (16, where `All` is
//! charged 32).

use super::device_class::NEURON_DRIVER;
use crate::logic::catalog::TRAINIUM_TYPES;
use crate::logic::validate::{Choice, ClaimKind, Count, ValidatedConfig};

/// How long the server's version is trusted before a pass reads it again: a control plane upgraded under a running
/// operator (to 1.36, where exact counts are cheap) has its templates recompiled within this time of the upgrade. A
/// config whose templates could change form is looked at again as often.
pub const VERSION_RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// How the server's scheduler searches a node for an exact count of devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Allocator {
    /// Kubernetes 1.34 and 1.35: through the orderings of the free devices. The default, the form that works on
    /// every supported version (`render` without `--kubernetes-version`).
    #[default]
    Orderings,
    /// Kubernetes 1.36 and later: through their combinations.
    Combinations,
}

impl Allocator {
    /// The first minor whose allocator tries combinations.
    pub const COMBINATIONS_FROM_MINOR: u32 = 36;

    pub fn of_minor(minor: u32) -> Allocator {
        match minor >= Self::COMBINATIONS_FROM_MINOR {
            true => Allocator::Combinations,
            false => Allocator::Orderings,
        }
    }

    /// The allocator of a Kubernetes version written `1.37`, `v1.34.4` or as the API server's `/version` gives
    /// its minor (`34`, `35+`).
    pub fn of_version(version: &str) -> Option<Allocator> {
        let version = version.trim().trim_start_matches('v');
        let minor = match version.split_once('.') {
            Some(("1", rest)) => rest.split('.').next()?,
            Some(_) => return None,
            None => version,
        };
        minor.trim_end_matches('+').parse().ok().map(Allocator::of_minor)
    }
}

/// A request for every device of a node, as `All`: the instance types it may take (their every device is the count
/// asked for) and the selector that keeps it to them, `None` where the choice already names its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeNode {
    pub selector: Option<String>,
}

/// Whether `count` devices of `choice` (at `rank` among a claim's choices) is asked for as `All`: on an allocator
/// that tries orderings, when the count is every device of each instance type the choice can take. Only the
/// preferred choice: up to 1.35 an `All` subrequest after the first is allocated with the first one's data
/// (fixed in 1.36 by kubernetes#137347).
pub fn whole_node(choice: &Choice, count: u32, rank: usize, allocator: Allocator) -> Option<WholeNode> {
    if allocator != Allocator::Orderings || rank > 0 || count < 2 {
        return None;
    }
    if let Some(named) = &choice.instance_type {
        let devices = crate::logic::catalog::lookup(named)?.devices?;
        return (devices == count).then_some(WholeNode { selector: None });
    }
    let types: Vec<String> =
        TRAINIUM_TYPES.iter().filter(|t| t.devices == Some(count)).map(|t| format!("'{}'", t.name)).collect();
    (!types.is_empty()).then(|| WholeNode {
        selector: Some(format!("device.attributes['{NEURON_DRIVER}'].instanceType in [{}]", types.join(", "))),
    })
}

/// Whether some template of `config` takes another form once an older server is upgraded to one that searches
/// combinations: the config is then looked at again every `VERSION_RECHECK`.
pub fn changes_with_the_allocator(config: &ValidatedConfig) -> bool {
    config.claims.iter().any(|claim| match claim.first().kind {
        ClaimKind::Devices { count: Count::Exactly(n), .. } => {
            whole_node(claim.first(), n, 0, Allocator::Orderings).is_some()
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests;
