//! Conflicts between configs (pure): two configs that select the same node, put the same template name in the
//! same namespace, or serve different extended resources through the same DeviceClass (`devices.<class>`, which
//! both would otherwise force-apply with their own `extendedResourceName` forever). The older config (creation
//! time, then name) wins; the newer one applies nothing that conflicts and keeps what it already runs there. The
//! controller adds what other configs run as claimants older than all (`controller::pure::plan`), so what runs is never
//! taken over.

use std::collections::{BTreeMap, BTreeSet};

use crate::logic::text::first_of;

/// What one config needs, for comparing with others.
#[derive(Debug, Clone)]
pub struct Claimant {
    pub name: String,
    /// Sort key: older first.
    pub created: (i64, String),
    pub nodes: BTreeSet<String>,
    /// (namespace, template name)
    pub templates: BTreeSet<(String, String)>,
    /// (`deviceClassName`, `extendedResourceName`) when the config serves an extended resource.
    pub extended_resource: Option<(String, String)>,
}

/// A DeviceClass an older config already serves another extended resource through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassConflict {
    /// `deviceClassName`.
    pub class: String,
    /// The older config's `extendedResourceName`, and that config.
    pub resource: String,
    pub owner: String,
}

/// What a newer config must leave alone, and to whom.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conflicts {
    /// Nodes an older config's plugin already runs on, with that config's name.
    pub nodes: BTreeMap<String, String>,
    /// (namespace, template) an older config already owns, with that config's name.
    pub templates: BTreeMap<(String, String), String>,
    /// The extended-resource DeviceClass, when an older config maps it to another resource.
    pub extended_resource: Option<ClassConflict>,
}

impl Conflicts {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.templates.is_empty() && self.extended_resource.is_none()
    }

    /// One message naming (a bounded number of) the nodes and templates, and the configs that hold them.
    pub fn message(&self) -> String {
        const SHOWN: usize = 10;
        let mut parts = Vec::new();
        let winners = |names: &mut dyn Iterator<Item = &String>| -> String {
            names.collect::<BTreeSet<_>>().into_iter().map(String::as_str).collect::<Vec<_>>().join(", ")
        };
        if !self.nodes.is_empty() {
            parts.push(format!(
                "nodes {} are already selected by {}; the plugin DaemonSet is kept as it is, not created or updated",
                first_of(self.nodes.keys(), SHOWN, ", "),
                winners(&mut self.nodes.values())
            ));
        }
        if !self.templates.is_empty() {
            parts.push(format!(
                "templates {} already belong to {}; they are not written (one of this config's own is kept)",
                first_of(self.templates.keys().map(|(ns, t)| format!("{ns}/{t}")), SHOWN, ", "),
                winners(&mut self.templates.values())
            ));
        }
        if let Some(ClassConflict { class, resource, owner }) = &self.extended_resource {
            parts.push(format!(
                "deviceClassName {class} already serves extendedResourceName {resource} for {owner}; \
                 the DeviceClass devices.{class} is not applied"
            ));
        }
        parts.join("; ")
    }
}

/// The conflicts `me` has with every older claimant.
pub fn find_conflicts(me: &Claimant, others: &[Claimant]) -> Conflicts {
    let mut conflicts = Conflicts::default();
    for other in others.iter().filter(|o| o.name != me.name && o.created < me.created) {
        for node in me.nodes.intersection(&other.nodes) {
            conflicts.nodes.entry(node.clone()).or_insert_with(|| other.name.clone());
        }
        for template in me.templates.intersection(&other.templates) {
            conflicts.templates.entry(template.clone()).or_insert_with(|| other.name.clone());
        }
        if let (Some((class, mine)), Some((their_class, theirs))) = (&me.extended_resource, &other.extended_resource)
            && class == their_class
            && mine != theirs
            && conflicts.extended_resource.is_none()
        {
            let owner = other.name.clone();
            conflicts.extended_resource = Some(ClassConflict { class: class.clone(), resource: theirs.clone(), owner });
        }
    }
    conflicts
}

#[cfg(test)]
mod tests;
