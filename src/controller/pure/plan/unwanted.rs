//! unwanted: what a pass removes, decided with the rest of the plan from the snapshot: every object labelled as the
//! config's and owned by it that the plan does not want, kind by kind (a cleanup wants nothing, so everything goes),
//! and the wanted templates whose spec changed, which are replaced (deleted, then created: a template's spec is
//! immutable). The act layer carries it out (`Pass::remove`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::{Resource, ResourceExt};

use crate::api::labels::{ANNOTATION_SPEC_HASH, LABEL_CONFIG};
use crate::cluster::taint_rule::{KIND as TAINT_RULE, TaintRuleView};
use crate::controller::kinds::Release;
use crate::controller::pure::report::key;
use crate::controller::pure::snapshot::Owned;
use crate::logic::desired::{Desired, Object};

/// (kind, `namespace/name`) of every object a pass claims: kept, whether it writes it or not.
pub type Wanted = BTreeSet<(String, String)>;

/// One object of the config's that is not wanted.
#[derive(Debug, Clone)]
pub enum Going<K> {
    Delete(Arc<K>),
    /// A shared object another config owns too: only this config's fields and owner reference go.
    Release(Arc<K>),
}

macro_rules! unwanted_objects {
    ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
        /// What goes, per kind, in name order.
        #[derive(Debug, Clone, Default)]
        pub struct Unwanted {
            $(pub $store: Vec<Going<$ty>>,)*
            pub taint_rules: Vec<Going<TaintRuleView>>,
        }

        impl Unwanted {
            /// What of `owned` the config `config` (with `uid`) has and does not want.
            pub fn of(owned: &Owned, config: &str, uid: Option<&str>, wanted: &Wanted) -> Self {
                Unwanted {
                    $($store: going(&owned.$store, &<$ty>::kind(&()), config, uid, wanted, Release::$release),)*
                    taint_rules: going(&owned.taint_rules, TAINT_RULE, config, uid, wanted, Release::Delete),
                }
            }
        }
    };
}
owned_kinds!(unwanted_objects);

/// The objects of one kind (`kind`) that go. The config's label is only a filter: anyone who may label an object
/// could put it there; what goes is what this config owns (its uid in the owner references). A shared kind's
/// objects (several configs own one) go with their last owner, found by owner alone.
fn going<K: Resource>(
    objects: &[Arc<K>],
    kind: &str,
    config: &str,
    uid: Option<&str>,
    wanted: &Wanted,
    release: Release,
) -> Vec<Going<K>> {
    let Some(uid) = uid else { return Vec::new() };
    let owned_by_us = |o: &Arc<K>| o.owner_references().iter().any(|r| r.uid == uid);
    let labelled = |o: &Arc<K>| o.labels().get(LABEL_CONFIG).map(String::as_str) == Some(config);
    let unwanted = |o: &Arc<K>| !wanted.contains(&(kind.to_string(), key(o.as_ref())));
    // In name order: the cache's order is not the same from one pass to the next.
    let mut mine: Vec<&Arc<K>> = objects.iter().filter(|o| owned_by_us(o) && unwanted(o)).collect();
    mine.sort_by_key(|o| key(o.as_ref()));
    match release {
        Release::Delete => mine.into_iter().filter(|o| labelled(o)).map(|o| Going::Delete(o.clone())).collect(),
        Release::Shared => mine
            .into_iter()
            .map(|o| match o.owner_references().iter().all(|r| r.uid == uid) {
                true => Going::Delete(o.clone()),
                false => Going::Release(o.clone()),
            })
            .collect(),
    }
}

/// Every object of `desired`, the templates kept for a conflict and remediation's rules.
pub fn wanted<'a>(
    desired: &Desired,
    kept_templates: &[ResourceClaimTemplate],
    rules: impl Iterator<Item = &'a TaintRuleView>,
) -> Wanted {
    fn of<K: Resource<DynamicType = ()>>(object: &K) -> (String, String) {
        (K::kind(&()).into_owned(), key(object))
    }
    let mut wanted: Wanted = desired
        .in_order()
        .into_iter()
        .map(|(_, object)| match object {
            Object::Namespace(o) => of(o),
            Object::ServiceAccount(o) => of(o),
            Object::ClusterRoleBinding(o) => of(o),
            Object::DeviceClass(o) => of(o),
            Object::DaemonSet(o) => of(o),
            Object::Template(o) => of(o),
            Object::Quota(o) => of(o),
        })
        .collect();
    wanted.extend(kept_templates.iter().map(of));
    wanted.extend(rules.map(|rule| (TAINT_RULE.to_string(), key(rule))));
    wanted
}

/// The hash of a template's spec, which the operator stamps on what it writes.
pub fn spec_hash(template: &ResourceClaimTemplate) -> Option<&String> {
    template.annotations().get(ANNOTATION_SPEC_HASH)
}

/// The wanted templates as `cached` holds them, by `namespace/name`: those whose spec changed (to be replaced, with
/// the cached copy that goes), and those in place as wanted.
pub fn templates_as_cached(
    templates: &[ResourceClaimTemplate],
    cached: &[Arc<ResourceClaimTemplate>],
) -> (BTreeMap<String, Arc<ResourceClaimTemplate>>, BTreeSet<String>) {
    let by_key: BTreeMap<String, &Arc<ResourceClaimTemplate>> = cached.iter().map(|t| (key(t.as_ref()), t)).collect();
    let (mut replaced, mut in_place) = (BTreeMap::new(), BTreeSet::new());
    for template in templates {
        let Some(existing) = by_key.get(&key(template)) else { continue };
        if spec_hash(existing) == spec_hash(template) {
            in_place.insert(key(template));
        } else {
            replaced.insert(key(template), Arc::clone(existing));
        }
    }
    (replaced, in_place)
}
