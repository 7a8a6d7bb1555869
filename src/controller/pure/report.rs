//! What one pass did, for the status and the events: every write by outcome, and every write that failed.

use std::collections::BTreeSet;
use std::fmt;

use kube::{Resource, ResourceExt};

use super::failure::ApplyError;

/// What one write did to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Unchanged,
    Created,
    Updated,
    /// Written by an earlier reconcile, and the watch cache has not shown that write yet: left alone.
    Pending,
    /// Made by someone else (these field managers): left as it is.
    Foreign(String),
}

/// `namespace/name`, or `name` for cluster-scoped objects.
pub fn key<K: Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// One object a pass wrote: its kind and `namespace/name` (`name` when cluster-scoped).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Written {
    pub kind: String,
    pub key: String,
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.key)
    }
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct Report {
    pub created: Vec<Written>,
    pub updated: Vec<Written>,
    pub replaced: Vec<Written>,
    pub deleted: Vec<Written>,
    pub errors: Vec<ApplyError>,
    /// Objects the pass wanted that someone else made, with their field managers: left as they are.
    pub foreign: Vec<(Written, String)>,
    /// (namespace/name) of claimed templates now in place.
    pub templates_in_place: BTreeSet<String>,
    /// Some earlier write has not reached the cache yet: look again shortly.
    pub pending: bool,
    /// A write found the driver namespace being deleted (the cache had not shown it yet).
    pub namespace_terminating: bool,
}

impl Report {
    /// Records an apply's outcome; false when it failed.
    pub fn record(&mut self, what: Written, outcome: Result<Applied, ApplyError>) -> bool {
        match outcome {
            Ok(Applied::Created) => self.created.push(what),
            Ok(Applied::Updated) => self.updated.push(what),
            Ok(Applied::Unchanged) => {}
            Ok(Applied::Pending) => self.pending = true,
            Ok(Applied::Foreign(managers)) => {
                self.foreign.push((what, managers));
                return false;
            }
            Err(error) => {
                self.errors.push(error);
                return false;
            }
        }
        true
    }

    /// Adds what another pass of the same reconcile did.
    pub fn absorb(&mut self, other: Report) {
        self.created.extend(other.created);
        self.updated.extend(other.updated);
        self.replaced.extend(other.replaced);
        self.deleted.extend(other.deleted);
        self.errors.extend(other.errors);
        self.foreign.extend(other.foreign);
        self.templates_in_place.extend(other.templates_in_place);
        self.pending |= other.pending;
        self.namespace_terminating |= other.namespace_terminating;
    }

    pub fn record_delete(&mut self, what: Written, outcome: Result<bool, ApplyError>) {
        match outcome {
            Ok(true) => self.deleted.push(what),
            Ok(false) => self.pending = true,
            Err(error) => self.errors.push(error),
        }
    }

    /// The objects of `kind` created (or deleted, with `deleted`) by name.
    pub fn names_of<'a>(written: &'a [Written], kind: &'a str) -> impl Iterator<Item = &'a str> {
        written.iter().filter(move |w| w.kind == kind).map(|w| w.key.as_str())
    }

    /// One line per object left alone because someone else made it, for the status: templates (`templates`) or
    /// the rest.
    pub fn foreign_lines(&self, templates: bool) -> Vec<String> {
        self.foreign
            .iter()
            .filter(|(what, _)| (what.kind == "ResourceClaimTemplate") == templates)
            .map(|(what, managers)| format!("{what} was made by {managers}, not this operator: left as it is"))
            .collect()
    }

    /// Names of the objects of `kind` whose apply failed.
    pub fn failed_applies(&self, kind: &str) -> BTreeSet<String> {
        self.errors
            .iter()
            .filter_map(|e| match e {
                ApplyError::Apply { kind: k, name, .. } if k == kind => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}
