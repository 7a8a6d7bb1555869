//! How many nodes run each plugin version, for `status.driver.versions`.

use std::collections::{BTreeMap, HashMap};

use super::{MAX_VERSIONS, NodeState, Revision};
use crate::api::VersionCount;

/// The plugin versions the nodes run: per revision, its nodes and ready nodes; most nodes first, bounded.
pub fn versions(nodes: &[NodeState], revisions: &[Revision], current: Option<&str>) -> Vec<VersionCount> {
    let by_hash: HashMap<&str, &Revision> = revisions.iter().map(|r| (r.hash.as_str(), r)).collect();
    let mut counts: BTreeMap<&str, (i32, i32)> = BTreeMap::new();
    for node in nodes {
        if let Some(hash) = node.running() {
            let entry = counts.entry(hash).or_default();
            entry.0 += 1;
            entry.1 += i32::from(node.pod.as_ref().is_some_and(|p| p.ready));
        }
    }
    let mut list: Vec<VersionCount> = counts
        .into_iter()
        .map(|(hash, (nodes, ready))| VersionCount {
            version: by_hash.get(hash).map_or_else(|| hash.to_string(), |r| r.version()),
            revision: hash.to_string(),
            current: Some(hash) == current,
            nodes,
            ready,
        })
        .collect();
    list.sort_by(|a, b| b.nodes.cmp(&a.nodes).then_with(|| b.current.cmp(&a.current)).then(a.version.cmp(&b.version)));
    list.truncate(MAX_VERSIONS);
    list
}
