//! apply: server-side apply of desired objects, skipping those the cluster already holds as wanted, and deletion of
//! what is no longer wanted. A reconcile that changes nothing sends no write.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::labels::MANAGER;
use crate::controller::expectations::{Applier, object_key, object_key_as};
use crate::controller::pure::failure::ApplyError;
use crate::controller::pure::report::Applied;
pub use drift::{holds, stamped};

/// What the watch cache of a kind tells about who made an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The cache holds only what carries the operator's label: a name it lacks may still be taken by someone else.
    Labelled,
    /// The cache holds every object of the kind: one it holds without the label is someone else's.
    Everything,
    /// An existing object is taken as it is, whoever made it (the driver namespace).
    Adopted,
}

/// Field manager for objects several configs share: one per config, so each config's owner reference is its own.
pub fn shared_manager(config: &str) -> String {
    format!("{MANAGER}.{config}")
}

/// The writes of the `Applier` (its expectations are `controller/expectations.rs`'s, which the context holds).
impl Applier {
    /// Server-side applies `desired` (of the kind `dt` names, e.g. DeviceTaintRules in the version the server
    /// serves) unless `existing` (from the watch cache) already holds it. An object the operator did not make is left
    /// alone (`Applied::Foreign`) unless the kind is `Ownership::Adopted`.
    pub async fn ensure_as<K>(
        &self,
        dt: &K::DynamicType,
        api: &Api<K>,
        desired: &K,
        existing: Option<&K>,
        manager: &str,
        ownership: Ownership,
    ) -> Result<Applied, ApplyError>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    {
        self.ensure_with(dt, api, desired, existing, manager, false, ownership).await
    }

    /// `ensure_as`; with `create_absent`, an object the cache lacks is created rather than applied.
    #[allow(clippy::too_many_arguments)]
    async fn ensure_with<K>(
        &self,
        dt: &K::DynamicType,
        api: &Api<K>,
        desired: &K,
        existing: Option<&K>,
        manager: &str,
        create_absent: bool,
        ownership: Ownership,
    ) -> Result<Applied, ApplyError>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    {
        let key = object_key_as::<K>(dt, &desired.name_any(), desired.meta().namespace.as_deref());
        if !self.expectations.settled(&key, existing.and_then(|e| e.meta().resource_version.as_deref())) {
            return Ok(Applied::Pending);
        }
        let foreign = |e: &&K| ownership != Ownership::Adopted && !owner::ours(e.meta());
        if let Some(existing) = existing.filter(foreign) {
            return Ok(Applied::Foreign(owner::managers(existing.meta())));
        }
        let applied = drift::Applied::of(desired, manager);
        if existing.is_some_and(|existing| applied.held_by(existing)) {
            return Ok(Applied::Unchanged);
        }
        let desired = &applied.stamp(desired);
        if create_absent && existing.is_none() {
            return self.create_as(dt, api, desired, None, manager).await;
        }
        // Force only over an object the operator made. Over none there is nothing to take: without force, one made
        // meanwhile by someone else is not taken either.
        let mut force = existing.is_some();
        if existing.is_none() && ownership == Ownership::Labelled {
            match owner::look(&K::kind(dt), api, &desired.name_any()).await? {
                owner::Found::Foreign(managers) => return Ok(Applied::Foreign(managers)),
                owner::Found::Ours => force = true,
                owner::Found::Absent => {}
            }
        }
        let before = existing.and_then(|e| e.meta().resource_version.clone());
        self.apply_as(dt, api, desired, before, manager, force).await?;
        Ok(if existing.is_some() { Applied::Updated } else { Applied::Created })
    }

    /// `ensure` for objects whose spec never changes once created (ResourceClaimTemplates): one the cache does not
    /// hold is created with a POST, which costs the API server much less than an apply that creates (`make bench`).
    pub async fn ensure_created<K>(
        &self,
        api: &Api<K>,
        desired: &K,
        existing: Option<&K>,
        manager: &str,
    ) -> Result<Applied, ApplyError>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        self.ensure_with(&K::DynamicType::default(), api, desired, existing, manager, true, Ownership::Labelled).await
    }

    /// Creates `desired` with a POST under `manager`; one that exists after all is server-side applied instead if
    /// the operator made it (not in the cache yet), and left alone (`Applied::Foreign`) if someone else did. `before`
    /// is the resourceVersion the cache holds (a replaced object's, until its deletion shows).
    pub async fn create<K>(
        &self,
        api: &Api<K>,
        desired: &K,
        before: Option<String>,
        manager: &str,
    ) -> Result<Applied, ApplyError>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        let desired = &drift::stamped(desired, manager);
        self.create_as(&K::DynamicType::default(), api, desired, before, manager).await
    }

    async fn create_as<K>(
        &self,
        dt: &K::DynamicType,
        api: &Api<K>,
        desired: &K,
        before: Option<String>,
        manager: &str,
    ) -> Result<Applied, ApplyError>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    {
        let name = desired.name_any();
        let params = PostParams { field_manager: Some(manager.into()), ..PostParams::default() };
        match api.create(&params, desired).await {
            Ok(_) => {
                self.expectations.wrote(object_key_as::<K>(dt, &name, desired.meta().namespace.as_deref()), before);
                Ok(Applied::Created)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => match owner::look(&K::kind(dt), api, &name).await? {
                owner::Found::Foreign(managers) => Ok(Applied::Foreign(managers)),
                // Gone meanwhile, or ours: the apply creates or takes back our own fields.
                _ => self.apply_as(dt, api, desired, before, manager, true).await.map(|()| Applied::Created),
            },
            Err(source) => Err(ApplyError::Apply { kind: K::kind(dt).into_owned(), name, source }),
        }
    }

    /// Server-side applies without looking at the cache; `before` is the resourceVersion the cache holds (if any).
    async fn apply_as<K>(
        &self,
        dt: &K::DynamicType,
        api: &Api<K>,
        desired: &K,
        before: Option<String>,
        manager: &str,
        force: bool,
    ) -> Result<(), ApplyError>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    {
        let name = desired.name_any();
        let params = if force { PatchParams::apply(manager).force() } else { PatchParams::apply(manager) };
        let applied = api.patch(&name, &params, &Patch::Apply(desired)).await.map_err(|source| ApplyError::Apply {
            kind: K::kind(dt).into_owned(),
            name: name.clone(),
            source,
        })?;
        // An apply that changed nothing leaves the version as it was: nothing to wait for.
        if applied.meta().resource_version != before {
            let key = object_key_as::<K>(dt, &name, desired.meta().namespace.as_deref());
            self.expectations.wrote(key, before);
        }
        Ok(())
    }

    /// Deletes `cached` in the background; one that is already gone counts as deleted. Returns false (and sends
    /// nothing) while an earlier delete of it has not reached the cache.
    pub async fn delete<K>(&self, api: &Api<K>, cached: &K) -> Result<bool, ApplyError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        self.delete_as(&K::DynamicType::default(), api, cached).await
    }

    /// `delete` for a kind known at run time (`dt`).
    pub async fn delete_as<K>(&self, dt: &K::DynamicType, api: &Api<K>, cached: &K) -> Result<bool, ApplyError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let name = cached.name_any();
        let key = object_key_as::<K>(dt, &name, cached.meta().namespace.as_deref());
        if !self.expectations.settled(&key, cached.meta().resource_version.as_deref()) {
            return Ok(false);
        }
        delete_as(dt, api, &name).await?;
        self.expectations.wrote(key, cached.meta().resource_version.clone());
        Ok(true)
    }

    /// Deletes plugin pod `name` if it is still the pod `uid` (one gone or replaced meanwhile counts as done).
    /// Returns false (and sends nothing) while an earlier eviction of that pod has not reached the cache: the cache
    /// keeps no resourceVersion of pods, so the uid stands for the state the eviction replaced.
    pub async fn evict(
        &self,
        api: &Api<Pod>,
        namespace: &str,
        name: &str,
        uid: Option<String>,
    ) -> Result<bool, ApplyError> {
        let key = object_key::<Pod>(name, Some(namespace));
        if !self.expectations.settled(&key, uid.as_deref()) {
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            // Already gone (or replaced): the DaemonSet controller is on it.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(source) => return Err(ApplyError::Evict { name: name.into(), source }),
        }
        self.expectations.wrote(key, uid);
        Ok(true)
    }
}

/// Deletes an object in the background; one that is already gone counts as deleted.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    delete_as(&K::DynamicType::default(), api, name).await
}

async fn delete_as<K>(dt: &K::DynamicType, api: &Api<K>, name: &str) -> Result<(), ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Delete { kind: K::kind(dt).into_owned(), name: name.into(), source }),
    }
}

mod drift;
pub mod owner;
#[cfg(test)]
mod tests;
