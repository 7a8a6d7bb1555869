//! owner: whether an object that exists was made by this operator. The owned kinds' caches hold only what carries
//! the operator's label, so an object they lack may still exist, made by another tool (AWS's chart, the UltraServer
//! operator, a user). Such an object is reported and left as it is: never applied over with force (that would take
//! its fields over, and its deletion would follow the config's), never deleted.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::Api;
use serde::de::DeserializeOwned;

use super::ApplyError;
pub use crate::api::labels::ours;

/// What the server holds under a name the cache lacks.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    Absent,
    /// Ours, and the cache has not shown it yet.
    Ours,
    /// Made by someone else: its field managers.
    Foreign(String),
}

/// The field managers that wrote an object, for a report naming who made it.
pub fn managers(meta: &ObjectMeta) -> String {
    let mut names: Vec<&str> = meta.managed_fields.iter().flatten().filter_map(|m| m.manager.as_deref()).collect();
    names.dedup();
    if names.is_empty() { "unknown".into() } else { names.join(", ") }
}

/// Reads `name` from the server to tell whether it is absent, ours or someone else's.
pub async fn look<K>(kind: &str, api: &Api<K>, name: &str) -> Result<Found, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let found =
        api.get_opt(name).await.map_err(|source| ApplyError::Apply { kind: kind.into(), name: name.into(), source })?;
    Ok(match found {
        None => Found::Absent,
        Some(object) if ours(object.meta()) => Found::Ours,
        Some(object) => Found::Foreign(managers(object.meta())),
    })
}

#[cfg(test)]
mod tests;
