//! pass: every write of one reconcile for one config. A `Pass` applies each object the plan wants unless the watch
//! cache already holds it, replaces the templates the plan found changed, deletes the plugin pods a rollout step
//! replaces, then removes what the plan found unwanted (`Unwanted`), every kind in the table's reverse order: that
//! is orphan deletion in a normal pass and everything in a cleanup pass. A paused pass writes nothing. Every write
//! goes through the `Applier`, so none is sent again before the cache shows it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::apply::shared_manager;
use super::operands::Operand;
use crate::api::labels::MANAGER;
use crate::controller::Context;
use crate::controller::pure::failure::ApplyError;
use crate::controller::pure::plan::{Going, Mode, Unwanted};
use crate::controller::pure::report::{Applied, Report, Written, key};
use crate::logic::rollout::Eviction;

fn written<K: Operand>(dt: &K::DynamicType, object: &K) -> Written {
    Written { kind: K::kind(dt).into_owned(), key: key(object) }
}

/// One reconcile's writes for one config.
pub struct Pass<'a> {
    ctx: &'a Context,
    config: String,
    /// False in a paused pass.
    writes: bool,
    pub report: Report,
}

impl<'a> Pass<'a> {
    pub fn new(ctx: &'a Context, config: &str, mode: Mode) -> Self {
        let writes = mode != Mode::Paused;
        Self { ctx, config: config.into(), writes, report: Report::default() }
    }

    /// A second pass for the same config, to write beside this one at the same time; `join` takes it back.
    pub fn fork(&self) -> Self {
        Self { ctx: self.ctx, config: self.config.clone(), writes: self.writes, report: Report::default() }
    }

    /// Takes back what a forked pass did.
    pub fn join(&mut self, fork: Pass<'a>) {
        self.report.absorb(fork.report);
    }

    /// Applies `desired` under `manager` unless the cache already holds it (a failure goes to the report). Returns
    /// false when the write found the object's namespace being deleted (the cache had not shown it yet), or the
    /// server serves no such kind.
    pub async fn ensure<K: Operand>(&mut self, desired: &K, manager: &str) -> bool {
        let Some(dt) = K::served(self.ctx) else { return false };
        let what = written(&dt, desired);
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

    /// Deletes this config's binding of the plugin's rights when it binds another role than `desired` does: a
    /// binding's roleRef cannot change (the operator once bound a ClusterRole of its own per config;
    /// the plugin's role is now installed with it). The next pass creates it anew. True when it went.
    pub async fn delete_rebound(&mut self, desired: &ClusterRoleBinding) -> bool {
        let cached = ClusterRoleBinding::cached(&self.ctx.stores, &desired.name_any(), None);
        let Some(current) = cached.filter(|current| current.role_ref != desired.role_ref) else { return false };
        if !self.writes {
            return false;
        }
        let api = ClusterRoleBinding::api(&self.ctx.client, &(), None);
        let outcome = self.ctx.applier.delete_as(&(), &api, current.as_ref()).await;
        self.report.record_delete(written(&(), current.as_ref()), outcome);
        true
    }

    /// Applies the templates in parallel (bounded); those whose spec changed (`replaced`, with the cached copy, as
    /// the plan found them) are deleted and created again (a template's spec is immutable). A paused pass writes
    /// nothing and reports those the plan found in place (`in_place`).
    pub async fn ensure_templates(
        &mut self,
        templates: &[ResourceClaimTemplate],
        replaced: &BTreeMap<String, Arc<ResourceClaimTemplate>>,
        in_place: &BTreeSet<String>,
    ) {
        use futures::StreamExt;
        // In flight at once: the local API server takes 250 creates about as fast at 8 as at 64 (`make bench`'s
        // sweep picks among them by noise); 32 stays well inside a server's mutating-request limit (200 by default).
        const PARALLEL: usize = 32;
        if !self.writes {
            self.report.templates_in_place.extend(in_place.iter().cloned());
            return;
        }
        let ctx = self.ctx;
        let outcomes: Vec<(String, bool, Result<Applied, ApplyError>)> =
            futures::stream::iter(templates.iter().cloned())
                .map(|template| {
                    let stale = replaced.get(&key(&template)).cloned();
                    apply_template(template, stale, ctx)
                })
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

    /// Removes what the plan found unwanted: the owned kinds in the table's reverse order (what uses another object
    /// goes before it), then remediation's rules. Nothing in a paused pass.
    pub async fn remove(&mut self, unwanted: &Unwanted) {
        if !self.writes {
            return;
        }
        type Removal<'p> = BoxFuture<'p, ()>;
        let mut kinds: Vec<for<'p, 'c> fn(&'p mut Pass<'c>, &'p Unwanted) -> Removal<'p>> = Vec::new();
        macro_rules! removals {
            ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
                $(kinds.push(|pass, unwanted| Box::pin(pass.remove_of(&unwanted.$store)));)*
            };
        }
        owned_kinds!(removals);
        for removal in kinds.into_iter().rev() {
            removal(self, unwanted).await;
        }
        self.remove_of(&unwanted.taint_rules).await;
    }

    /// Deletes or lets go of the objects of one kind.
    async fn remove_of<K: Operand>(&mut self, going: &[Going<K>]) {
        let Some(dt) = K::served(self.ctx) else { return };
        for object in going {
            match object {
                Going::Delete(object) => {
                    let api = K::api(&self.ctx.client, &dt, object.meta().namespace.as_deref());
                    let outcome = self.ctx.applier.delete_as(&dt, &api, object.as_ref()).await;
                    self.report.record_delete(written(&dt, object.as_ref()), outcome);
                }
                Going::Release(object) => self.release::<K>(&dt, object.as_ref()).await,
            }
        }
    }

    /// Lets go of a shared object another config owns too: applying an empty object under this config's manager
    /// drops the fields only it owned.
    async fn release<K: Operand>(&mut self, dt: &K::DynamicType, object: &K) {
        let api = K::api(&self.ctx.client, dt, object.meta().namespace.as_deref());
        let empty = json!({"apiVersion": K::api_version(dt), "kind": K::kind(dt),
            "metadata": {"name": object.name_any()}});
        let params = PatchParams::apply(&shared_manager(&self.config)).force();
        if let Err(source) = api.patch(&object.name_any(), &params, &Patch::Apply(&empty)).await {
            let kind = K::kind(dt).into_owned();
            self.report.errors.push(ApplyError::Apply { kind, name: object.name_any(), source });
        }
    }
}

/// One template, replacing `stale` (the cached copy whose spec changed) if any: (namespace/name, whether it was
/// replaced, outcome).
async fn apply_template(
    template: ResourceClaimTemplate,
    stale: Option<Arc<ResourceClaimTemplate>>,
    ctx: &Context,
) -> (String, bool, Result<Applied, ApplyError>) {
    let ns = template.namespace().unwrap_or_default();
    let api = Api::<ResourceClaimTemplate>::namespaced(ctx.client.clone(), &ns);
    let Some(stale) = stale else {
        let existing = ResourceClaimTemplate::cached(&ctx.stores, &template.name_any(), Some(&ns));
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
