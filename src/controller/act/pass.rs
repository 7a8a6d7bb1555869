//! pass: the one owner of every object a config creates. A `Pass` records each object the plan claims (and applies
//! it unless the watch cache already holds it), deletes the plugin pods a rollout step replaces, then deletes
//! whatever carries the config's label but was not claimed, for every kind at once: that is orphan deletion in a
//! normal pass and everything in a cleanup pass. A paused pass writes nothing and only judges which templates are
//! in place. Every write goes through the `Applier`, so none is sent again before the cache shows it.

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::apply::shared_manager;
use super::operands::{Operand, spec_hash};
use crate::api::labels::{LABEL_CONFIG, MANAGER};
use crate::cluster::taint_rule::TaintRuleView;
use crate::controller::pure::failure::ApplyError;
use crate::controller::pure::plan::Mode;
use crate::controller::pure::report::{Applied, Report, Written, key};
use crate::controller::{Context, kinds};
use crate::logic::rollout::Eviction;

fn written<K: Operand>(dt: &K::DynamicType, object: &K) -> Written {
    Written { kind: K::kind(dt).into_owned(), key: key(object) }
}

/// One reconcile's writes for one config.
pub struct Pass<'a> {
    ctx: &'a Context,
    config: String,
    uid: Option<String>,
    /// False in a paused pass.
    writes: bool,
    /// Every object claimed in this pass.
    claimed: BTreeSet<Written>,
    pub report: Report,
}

impl<'a> Pass<'a> {
    pub fn new(ctx: &'a Context, config: &str, uid: Option<String>, mode: Mode) -> Self {
        let writes = mode != Mode::Paused;
        Self { ctx, config: config.into(), uid, writes, claimed: BTreeSet::new(), report: Report::default() }
    }

    /// A second pass for the same config, to write beside this one at the same time; `join` takes it back.
    pub fn fork(&self) -> Self {
        let (ctx, uid) = (self.ctx, self.uid.clone());
        Self {
            ctx,
            config: self.config.clone(),
            uid,
            writes: self.writes,
            claimed: BTreeSet::new(),
            report: Report::default(),
        }
    }

    /// Takes back what a forked pass claimed and did.
    pub fn join(&mut self, fork: Pass<'a>) {
        self.claimed.extend(fork.claimed);
        self.report.absorb(fork.report);
    }

    /// Claims `desired` without writing it: what exists is kept as it is.
    pub fn claim<K: Operand>(&mut self, desired: &K) {
        if let Some(dt) = K::served(self.ctx) {
            self.claimed.insert(written(&dt, desired));
        }
    }

    /// Claims `desired` and applies it under `manager` unless the cache already holds it (a failure goes to the
    /// report). Returns false when the write found the object's namespace being deleted (the cache had not shown it
    /// yet), or the server serves no such kind.
    pub async fn ensure<K: Operand>(&mut self, desired: &K, manager: &str) -> bool {
        let Some(dt) = K::served(self.ctx) else { return false };
        let what = written(&dt, desired);
        self.claimed.insert(what.clone());
        if !self.writes {
            return true;
        }
        let namespace = desired.meta().namespace.as_deref();
        let existing = K::cached(&self.ctx.stores, &desired.name_any(), namespace);
        let api = K::api(&self.ctx.client, &dt, namespace);
        match self.ctx.applier.ensure_as(&dt, &api, desired, existing.as_deref(), manager, K::OWNERSHIP).await {
            Err(error) if namespace_terminating(&error) => {
                self.report.namespace_terminating = true;
                false
            }
            outcome => {
                self.report.record(what, outcome);
                true
            }
        }
    }

    /// Deletes this config's binding of the plugin's rights when it binds another role than `desired` does, and
    /// claims it: a binding's roleRef cannot change (the operator once bound a ClusterRole of its own per config;
    /// the plugin's role is now installed with it). The next pass creates it anew. True when it went.
    pub async fn delete_rebound(&mut self, desired: &ClusterRoleBinding) -> bool {
        let cached = ClusterRoleBinding::cached(&self.ctx.stores, &desired.name_any(), None);
        let Some(current) = cached.filter(|current| current.role_ref != desired.role_ref) else { return false };
        self.claimed.insert(written(&(), desired));
        if !self.writes {
            return false;
        }
        let api = ClusterRoleBinding::api(&self.ctx.client, &(), None);
        let outcome = self.ctx.applier.delete_as(&(), &api, current.as_ref()).await;
        self.report.record_delete(written(&(), current.as_ref()), outcome);
        true
    }

    /// Claims the templates and applies them in parallel (bounded); a template whose spec changed is deleted and
    /// created again (its spec is immutable). A paused pass only notes which are in place.
    pub async fn ensure_templates(&mut self, templates: &[ResourceClaimTemplate]) {
        use futures::StreamExt;
        // In flight at once: the local API server takes 250 creates about as fast at 8 as at 64 (`make bench`'s
        // sweep picks among them by noise); 32 stays well inside a server's mutating-request limit (200 by default).
        const PARALLEL: usize = 32;
        for template in templates {
            self.claim(template);
        }
        if !self.writes {
            for template in templates {
                let existing = ResourceClaimTemplate::cached(
                    &self.ctx.stores,
                    &template.name_any(),
                    template.namespace().as_deref(),
                );
                if existing.is_some_and(|e| spec_hash(&e) == spec_hash(template)) {
                    self.report.templates_in_place.insert(key(template));
                }
            }
            return;
        }
        let ctx = self.ctx;
        let outcomes: Vec<(String, bool, Result<Applied, ApplyError>)> =
            futures::stream::iter(templates.iter().cloned())
                .map(|template| apply_template(template, ctx))
                .buffer_unordered(PARALLEL)
                .collect()
                .await;
        for (what, replaced, outcome) in outcomes {
            let written = Written { kind: "ResourceClaimTemplate".into(), key: what.clone() };
            let ok = match outcome {
                Ok(Applied::Created) if replaced => {
                    self.report.replaced.push(written);
                    true
                }
                outcome => self.report.record(written, outcome),
            };
            if ok {
                self.report.templates_in_place.insert(what);
            }
        }
    }

    /// Deletes the plugin pods of a rollout step, each only if it is still the pod the plan saw (its uid), and not
    /// again while the cache has not shown an earlier deletion. Stops at the first failure.
    pub async fn evict(&mut self, evictions: &[Eviction], namespace: &str) {
        if !self.writes {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), namespace);
        for eviction in evictions {
            match self.ctx.applier.evict(&api, namespace, &eviction.pod, eviction.uid.clone()).await {
                Ok(true) => {
                    tracing::info!(node = %eviction.node, pod = %eviction.pod, "replacing plugin pod");
                }
                Ok(false) => self.report.pending = true,
                Err(error) => {
                    self.report.errors.push(error);
                    return;
                }
            }
        }
    }

    /// Deletes every object labelled as this config's that this pass did not claim, in every kind, and releases the
    /// DeviceClasses it owns but did not claim. Nothing in a paused pass.
    pub async fn delete_unclaimed(&mut self) {
        if !self.writes {
            return;
        }
        // The owned kinds, the table backwards: what uses another object goes before it.
        type Release<'p> = BoxFuture<'p, ()>;
        let mut kinds: Vec<for<'p, 'c> fn(&'p mut Pass<'c>) -> Release<'p>> = Vec::new();
        macro_rules! releases {
            ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
                $(kinds.push(|pass| Box::pin(pass.release_unclaimed_of::<$ty>(kinds::Release::$release)));)*
            };
        }
        owned_kinds!(releases);
        for release in kinds.into_iter().rev() {
            release(self).await;
        }
        self.release_unclaimed_of::<TaintRuleView>(kinds::Release::Delete).await;
    }

    async fn release_unclaimed_of<K: Operand>(&mut self, release: kinds::Release) {
        match release {
            kinds::Release::Delete => self.delete_unclaimed_of::<K>().await,
            kinds::Release::Shared => self.release_shared::<K>().await,
        }
    }

    async fn delete_unclaimed_of<K: Operand>(&mut self) {
        let Some(dt) = K::served(self.ctx) else { return };
        let config = self.config.as_str();
        let uid = self.uid.as_deref();
        let mut mine = K::deletable(&self.ctx.stores)
            .into_iter()
            .filter(|o| o.labels().get(LABEL_CONFIG).map(String::as_str) == Some(config))
            // The label is only a filter: anyone who may label an object could put it there. What goes is what
            // this config owns (its uid in the owner references).
            .filter(|o| uid.is_some_and(|uid| o.owner_references().iter().any(|r| r.uid == uid)))
            .filter(|o| !self.claimed.contains(&written(&dt, o.as_ref())))
            .collect::<Vec<_>>();
        mine.sort_by_key(|o| key(o.as_ref()));
        for object in mine {
            let api = K::api(&self.ctx.client, &dt, object.meta().namespace.as_deref());
            let outcome = self.ctx.applier.delete_as(&dt, &api, object.as_ref()).await;
            self.report.record_delete(written(&dt, object.as_ref()), outcome);
        }
    }

    /// Unclaimed shared objects this config owns: deleted when no other config owns them, otherwise only this
    /// config's fields and owner reference are released.
    async fn release_shared<K: Operand>(&mut self) {
        let (Some(uid), Some(dt)) = (self.uid.clone(), K::served(self.ctx)) else { return };
        // In name order, as orphans go: the cache's order is not the same from one pass to the next.
        let mut shared = K::deletable(&self.ctx.stores);
        shared.sort_by_key(|o| key(o.as_ref()));
        for object in shared {
            let owners = object.owner_references();
            if self.claimed.contains(&written(&dt, object.as_ref())) || !owners.iter().any(|o| o.uid == uid) {
                continue;
            }
            let api = K::api(&self.ctx.client, &dt, object.meta().namespace.as_deref());
            if owners.iter().all(|o| o.uid == uid) {
                let outcome = self.ctx.applier.delete_as(&dt, &api, object.as_ref()).await;
                self.report.record_delete(written(&dt, object.as_ref()), outcome);
            } else {
                // Applying an empty object under this config's manager drops the fields only it owned.
                let empty = json!({"apiVersion": K::api_version(&dt), "kind": K::kind(&dt),
                    "metadata": {"name": object.name_any()}});
                let params = PatchParams::apply(&shared_manager(&self.config)).force();
                if let Err(source) = api.patch(&object.name_any(), &params, &Patch::Apply(&empty)).await {
                    let kind = K::kind(&dt).into_owned();
                    self.report.errors.push(ApplyError::Apply { kind, name: object.name_any(), source });
                }
            }
        }
    }
}

/// One template: (namespace/name, whether it was replaced, outcome).
async fn apply_template(template: ResourceClaimTemplate, ctx: &Context) -> (String, bool, Result<Applied, ApplyError>) {
    let ns = template.namespace().unwrap_or_default();
    let api = Api::<ResourceClaimTemplate>::namespaced(ctx.client.clone(), &ns);
    let existing = ResourceClaimTemplate::cached(&ctx.stores, &template.name_any(), Some(&ns));
    let stale = existing.as_ref().filter(|e| spec_hash(e) != spec_hash(&template));
    let Some(stale) = stale else {
        let outcome = ctx.applier.ensure_created(&api, &template, existing.as_deref(), MANAGER).await;
        return (key(&template), false, outcome);
    };
    // Its spec is immutable: delete, then create anew.
    let outcome = match ctx.applier.delete(&api, stale.as_ref()).await {
        Ok(true) => {
            let before = stale.metadata.resource_version.clone();
            ctx.applier.create(&api, &template, before, MANAGER).await
        }
        Ok(false) => Ok(Applied::Pending),
        Err(error) => Err(error),
    };
    (key(&template), true, outcome)
}

/// The namespace is being deleted, or already gone while the cache still shows it.
fn namespace_terminating(error: &ApplyError) -> bool {
    match error.source_error() {
        kube::Error::Api(status) if status.code == 403 => status.message.contains("is being terminated"),
        kube::Error::Api(status) if status.code == 404 => {
            status.details.as_ref().is_some_and(|d| d.kind == "namespaces")
        }
        _ => false,
    }
}
