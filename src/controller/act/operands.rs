//! operands: the one owner of every object a config creates. A `Pass` records each object the plan claims (and
//! applies it unless the watch cache already holds it), then deletes whatever carries the config's label but was
//! not claimed, for every kind at once: that is orphan deletion in a normal pass and everything in a cleanup pass.
//! A paused pass writes nothing and only judges which templates are in place.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::labels::{ANNOTATION_SPEC_HASH, LABEL_CONFIG, MANAGER};
use crate::controller::act::apply::{ApplyError, Outcome, shared_manager};
use crate::controller::plan::Mode;
use crate::controller::{Context, Stores};

/// A kind the operator owns: what its cache holds and which API writes it.
pub trait Operand:
    Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// The cached copy of one object.
    fn cached(stores: &Stores, reference: &ObjectRef<Self>) -> Option<Arc<Self>>;
    /// Every cached object of the kind that the operator may delete.
    fn deletable(stores: &Stores) -> Vec<Arc<Self>>;
    fn api(client: &kube::Client, namespace: Option<&str>) -> Api<Self>;
}

macro_rules! operands {
    (namespaced: $($n:ty => $nstore:ident),*; cluster: $($c:ty => $cstore:ident),*) => {
        $(impl Operand for $n {
            fn cached(stores: &Stores, reference: &ObjectRef<Self>) -> Option<Arc<Self>> {
                stores.$nstore.get(reference)
            }
            fn deletable(stores: &Stores) -> Vec<Arc<Self>> { stores.$nstore.state() }
            fn api(client: &kube::Client, namespace: Option<&str>) -> Api<Self> {
                Api::namespaced(client.clone(), namespace.unwrap_or_default())
            }
        })*
        $(impl Operand for $c {
            fn cached(stores: &Stores, reference: &ObjectRef<Self>) -> Option<Arc<Self>> {
                stores.$cstore.get(reference)
            }
            fn deletable(stores: &Stores) -> Vec<Arc<Self>> { stores.$cstore.state() }
            fn api(client: &kube::Client, _: Option<&str>) -> Api<Self> { Api::all(client.clone()) }
        })*
    };
}

operands!(
    namespaced: ServiceAccount => service_accounts, DaemonSet => daemon_sets, ResourceClaimTemplate => templates;
    cluster: ClusterRole => cluster_roles, ClusterRoleBinding => cluster_role_bindings,
        DeviceClass => device_classes, ValidatingAdmissionPolicy => admission_policies,
        ValidatingAdmissionPolicyBinding => admission_policy_bindings
);

/// The driver's namespace: created when missing, never deleted (it may hold more than the plugin). Namespaces are
/// cached as metadata, all a Namespace the operator writes has.
impl Operand for Namespace {
    fn cached(stores: &Stores, reference: &ObjectRef<Self>) -> Option<Arc<Self>> {
        let meta = stores.namespaces.get(&ObjectRef::new(&reference.name))?;
        Some(Arc::new(Namespace { metadata: meta.metadata.clone(), ..Namespace::default() }))
    }
    fn deletable(_: &Stores) -> Vec<Arc<Self>> {
        Vec::new()
    }
    fn api(client: &kube::Client, _: Option<&str>) -> Api<Self> {
        Api::all(client.clone())
    }
}

fn api_for<K: Operand>(client: &kube::Client, object: &K) -> Api<K> {
    K::api(client, object.meta().namespace.as_deref())
}

/// The cached copy of an object.
pub fn cached<K: Operand>(stores: &Stores, name: &str, namespace: Option<&str>) -> Option<Arc<K>> {
    let reference = ObjectRef::new(name);
    K::cached(
        stores,
        &match namespace {
            Some(ns) => reference.within(ns),
            None => reference,
        },
    )
}

/// `namespace/name`, or `name` for cluster-scoped objects.
pub fn key<K: Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

fn kind_key<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!("{} {}", K::kind(&()), key(object))
}

pub fn spec_hash(template: &ResourceClaimTemplate) -> Option<&String> {
    template.annotations().get(ANNOTATION_SPEC_HASH)
}

/// What one pass did, for events and the status.
#[derive(Debug, Default)]
pub struct Report {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub replaced: Vec<String>,
    pub deleted: Vec<String>,
    pub errors: Vec<ApplyError>,
    /// (namespace/name) of claimed templates now in place.
    pub templates_in_place: BTreeSet<String>,
    /// Some earlier write has not reached the cache yet: look again shortly.
    pub pending: bool,
}

impl Report {
    fn record(&mut self, what: String, outcome: Result<Outcome, ApplyError>) -> bool {
        match outcome {
            Ok(Outcome::Created) => self.created.push(what),
            Ok(Outcome::Updated) => self.updated.push(what),
            Ok(Outcome::Unchanged) => {}
            Ok(Outcome::Pending) => self.pending = true,
            Err(error) => {
                self.errors.push(error);
                return false;
            }
        }
        true
    }

    /// Adds what another pass of the same reconcile did.
    fn absorb(&mut self, other: Report) {
        self.created.extend(other.created);
        self.updated.extend(other.updated);
        self.replaced.extend(other.replaced);
        self.deleted.extend(other.deleted);
        self.errors.extend(other.errors);
        self.templates_in_place.extend(other.templates_in_place);
        self.pending |= other.pending;
    }

    fn record_delete(&mut self, what: String, outcome: Result<bool, ApplyError>) {
        match outcome {
            Ok(true) => self.deleted.push(what),
            Ok(false) => self.pending = true,
            Err(error) => self.errors.push(error),
        }
    }
}

/// One reconcile's writes for one config.
pub struct Pass<'a> {
    ctx: &'a Context,
    config: String,
    uid: Option<String>,
    /// False in a paused pass.
    writes: bool,
    /// `Kind namespace/name` of every object claimed in this pass.
    claimed: BTreeSet<String>,
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
        self.claimed.insert(kind_key(desired));
    }

    /// Claims `desired` and applies it under `manager` unless the cache already holds it. Returns false when the
    /// write found the object's namespace being deleted (the cache had not shown it yet).
    pub async fn ensure<K: Operand>(&mut self, desired: &K, manager: &str) -> bool {
        self.claim(desired);
        if !self.writes {
            return true;
        }
        let existing = cached::<K>(&self.ctx.stores, &desired.name_any(), desired.meta().namespace.as_deref());
        let api = api_for(&self.ctx.client, desired);
        match self.ctx.applier.ensure(&api, desired, existing.as_deref(), manager).await {
            Err(error) if namespace_terminating(&error) => false,
            outcome => {
                self.report.record(kind_key(desired), outcome);
                true
            }
        }
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
                let existing = cached::<ResourceClaimTemplate>(
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
        let outcomes: Vec<(String, bool, Result<Outcome, ApplyError>)> =
            futures::stream::iter(templates.iter().cloned())
                .map(|template| apply_template(template, ctx))
                .buffer_unordered(PARALLEL)
                .collect()
                .await;
        for (what, replaced, outcome) in outcomes {
            let ok = match outcome {
                Ok(Outcome::Created) if replaced => {
                    self.report.replaced.push(format!("ResourceClaimTemplate {what}"));
                    true
                }
                outcome => self.report.record(format!("ResourceClaimTemplate {what}"), outcome),
            };
            if ok {
                self.report.templates_in_place.insert(what);
            }
        }
    }

    /// Deletes every object labelled as this config's that this pass did not claim, in every kind, and releases the
    /// DeviceClasses it owns but did not claim. Nothing in a paused pass.
    pub async fn delete_unclaimed(&mut self) {
        if !self.writes {
            return;
        }
        self.delete_unclaimed_of::<ResourceClaimTemplate>().await;
        self.delete_unclaimed_of::<DaemonSet>().await;
        self.delete_unclaimed_of::<ValidatingAdmissionPolicyBinding>().await;
        self.delete_unclaimed_of::<ValidatingAdmissionPolicy>().await;
        self.delete_unclaimed_of::<ClusterRoleBinding>().await;
        self.delete_unclaimed_of::<ClusterRole>().await;
        self.delete_unclaimed_of::<ServiceAccount>().await;
        self.release_device_classes().await;
    }

    async fn delete_unclaimed_of<K: Operand>(&mut self) {
        let config = self.config.as_str();
        let mut mine = K::deletable(&self.ctx.stores)
            .into_iter()
            .filter(|o| o.labels().get(LABEL_CONFIG).map(String::as_str) == Some(config))
            .filter(|o| !self.claimed.contains(&kind_key(o.as_ref())))
            .collect::<Vec<_>>();
        mine.sort_by_key(|o| key(o.as_ref()));
        for object in mine {
            let outcome = self.ctx.applier.delete(&api_for(&self.ctx.client, object.as_ref()), object.as_ref()).await;
            self.report.record_delete(kind_key(object.as_ref()), outcome);
        }
    }

    /// Unclaimed DeviceClasses this config owns: deleted when no other config owns them, otherwise only this
    /// config's owner reference is released.
    async fn release_device_classes(&mut self) {
        let Some(uid) = self.uid.clone() else { return };
        let api = Api::<DeviceClass>::all(self.ctx.client.clone());
        for class in self.ctx.stores.device_classes.state() {
            let owners = class.owner_references();
            if self.claimed.contains(&kind_key(class.as_ref())) || !owners.iter().any(|o| o.uid == uid) {
                continue;
            }
            if owners.iter().all(|o| o.uid == uid) {
                let outcome = self.ctx.applier.delete(&api, class.as_ref()).await;
                self.report.record_delete(kind_key(class.as_ref()), outcome);
            } else {
                // Applying an empty object under this config's manager drops the fields only it owned.
                let empty = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": class.name_any()}});
                let params = PatchParams::apply(&shared_manager(&self.config)).force();
                if let Err(source) = api.patch(&class.name_any(), &params, &Patch::Apply(&empty)).await {
                    let error = ApplyError::Apply { kind: "DeviceClass".into(), name: class.name_any(), source };
                    self.report.errors.push(error);
                }
            }
        }
    }
}

/// One template: (namespace/name, whether it was replaced, outcome).
async fn apply_template(template: ResourceClaimTemplate, ctx: &Context) -> (String, bool, Result<Outcome, ApplyError>) {
    let ns = template.namespace().unwrap_or_default();
    let api = Api::<ResourceClaimTemplate>::namespaced(ctx.client.clone(), &ns);
    let existing = cached::<ResourceClaimTemplate>(&ctx.stores, &template.name_any(), Some(&ns));
    let stale = existing.as_ref().filter(|e| spec_hash(e) != spec_hash(&template));
    let Some(stale) = stale else {
        let outcome = ctx.applier.ensure_created(&api, &template, existing.as_deref(), MANAGER).await;
        return (key(&template), false, outcome);
    };
    // Its spec is immutable: delete, then create anew.
    let outcome = match ctx.applier.delete(&api, stale.as_ref()).await {
        Ok(true) => {
            let before = stale.metadata.resource_version.clone();
            ctx.applier.create(&api, &template, before, MANAGER).await.map(|()| Outcome::Created)
        }
        Ok(false) => Ok(Outcome::Pending),
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
