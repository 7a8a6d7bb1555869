//! What the operator keeps and reads of each kind it watches by the thousand, and the DeviceTaintRules' cache in
//! the version the server serves.

use futures::Stream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use super::{watch, without_errors};
use crate::cluster::taint_rule::TaintRuleView;
use crate::cluster::{ClaimView, NodeView, PodView, SliceView};

/// For `cached_read` of views, which are parsed trimmed (see `view`): what is left to drop is what only the watch
/// itself reads. The watcher has taken an object's resourceVersion (to resume from) before the cache sees it, and
/// nodes, slices and claims are never written by uid (`changes` then tells objects apart by name). Two strings
/// fewer per object, and two fewer in the cache's key, which copies them.
pub fn forget_versions<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.resource_version = None;
    meta.uid = None;
}

/// What the operator reads of each kind it watches by the thousand (see `view`), for `cached_read`.
pub mod per_kind {
    use super::super::changes::fingerprint;
    use super::*;

    pub fn node(node: &NodeView) -> u64 {
        fingerprint(&(node.labels(), &node.status))
    }
    pub fn slice(slice: &SliceView) -> u64 {
        fingerprint(&(slice.labels(), &slice.spec))
    }
    pub fn claim(claim: &ClaimView) -> u64 {
        fingerprint(&(claim.labels(), &claim.status))
    }
    pub fn pod(pod: &PodView) -> u64 {
        fingerprint(&(pod.labels(), pod.metadata.deletion_timestamp.is_some(), &pod.spec, &pod.status))
    }
    pub fn namespace(namespace: &PartialObjectMeta<Namespace>) -> u64 {
        fingerprint(&(namespace.labels(), namespace.metadata.deletion_timestamp.is_some()))
    }
    /// Whose a DeviceClass is: its labels (the managed-by label).
    pub fn device_class(class: &PartialObjectMeta<DeviceClass>) -> u64 {
        fingerprint(class.labels())
    }
}

/// DeviceTaintRules in the most stable version the server serves (see `taint_rule`), or an empty, ready cache where
/// it serves none. Found once at start: a server upgrade that changes the version restarts the operator's pod anyway
/// (it runs on the upgraded nodes) or is picked up by the next restart.
pub async fn taint_rules_cache(
    client: &Client,
) -> (
    Store<TaintRuleView>,
    Option<impl Stream<Item = Result<TaintRuleView, watcher::Error>> + Send + use<>>,
    Option<kube::core::ApiResource>,
) {
    match crate::cluster::taint_rule::served(client).await {
        Some(resource) => {
            tracing::info!(version = %resource.api_version, "watching DeviceTaintRules");
            let api = Api::<TaintRuleView>::all_with(client.clone(), &resource);
            let writer = reflector::store::Writer::new(resource.clone());
            let store = writer.as_reader();
            // Owner references stay: remediation compares its own rules with what it wants.
            let trim = |rule: &mut TaintRuleView| rule.metadata.managed_fields = None;
            let events = watch(api, watcher::Config::default()).modify(trim);
            let touched = reflector::reflector(writer, events).touched_objects();
            (store, Some(without_errors(resource.kind.clone(), touched)), Some(resource))
        }
        None => {
            tracing::info!("the server serves no DeviceTaintRules: only slice taints count");
            let mut writer = reflector::store::Writer::new(crate::cluster::taint_rule::v1_resource());
            writer.apply_watcher_event(&watcher::Event::InitDone);
            (writer.as_reader(), None, None)
        }
    }
}
