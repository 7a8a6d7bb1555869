//! apply: server-side apply of desired objects, skipping those the cluster already holds as wanted, and deletion of
//! what is no longer wanted. A reconcile that changes nothing sends no write.

use std::fmt::Debug;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::build::MANAGER;

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Created,
    Updated,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("applying {kind} {name}: {source}")]
    Apply { kind: String, name: String, source: kube::Error },
    #[error("deleting {kind} {name}: {source}")]
    Delete { kind: String, name: String, source: kube::Error },
}

impl ApplyError {
    pub fn source_error(&self) -> &kube::Error {
        match self {
            Self::Apply { source, .. } | Self::Delete { source, .. } => source,
        }
    }
}

/// Field manager for objects several configs share: one per config, so each config's owner reference is its own.
pub fn shared_manager(config: &str) -> String {
    format!("{MANAGER}.{config}")
}

/// True when every field of `desired` is present in `existing` with the same value. Objects compare key by key,
/// lists element by element (same length), so server-side defaults and other managers' extra fields do not count
/// as drift. Owner references only need to contain the desired ones (shared objects have several owners).
pub fn holds(existing: &Value, desired: &Value) -> bool {
    match (desired, existing) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, want_value)| {
            let have_value = have.get(key).unwrap_or(&Value::Null);
            if key == "ownerReferences" { contains_all(have_value, want_value) } else { holds(have_value, want_value) }
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| holds(h, w))
        }
        (Value::Null, _) => true,
        (want, have) => want == have,
    }
}

fn contains_all(have: &Value, want: &Value) -> bool {
    let have = have.as_array().map(Vec::as_slice).unwrap_or_default();
    want.as_array().into_iter().flatten().all(|w| have.iter().any(|h| holds(h, w)))
}

/// Server-side applies `desired` unless `existing` (from the watch cache) already holds it.
pub async fn ensure<K>(api: &Api<K>, desired: &K, existing: Option<&K>, manager: &str) -> Result<Outcome, ApplyError>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    K::DynamicType: Default,
{
    if let Some(existing) = existing {
        let have = serde_json::to_value(existing).expect("k8s objects serialize");
        let want = serde_json::to_value(desired).expect("k8s objects serialize");
        if holds(&have, &want) {
            return Ok(Outcome::Unchanged);
        }
    }
    let name = desired.name_any();
    api.patch(&name, &PatchParams::apply(manager).force(), &Patch::Apply(desired)).await.map_err(|source| {
        ApplyError::Apply { kind: K::kind(&K::DynamicType::default()).into_owned(), name: name.clone(), source }
    })?;
    Ok(if existing.is_some() { Outcome::Updated } else { Outcome::Created })
}

/// Deletes an object in the background; one that is already gone counts as deleted.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let params = DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Delete {
            kind: K::kind(&K::DynamicType::default()).into_owned(),
            name: name.into(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_defaults_and_extra_fields_are_not_drift() {
        let desired = json!({"spec": {"template": {"containers": [{"name": "c", "image": "a:1"}]}}});
        let existing = json!({"spec": {"revisionHistoryLimit": 10,
            "template": {"containers": [{"name": "c", "image": "a:1", "terminationMessagePath": "/dev/x"}]}}});
        assert!(holds(&existing, &desired));
    }

    #[test]
    fn a_changed_value_or_list_is_drift() {
        let desired = json!({"spec": {"template": {"containers": [{"name": "c", "image": "a:1"}]}}});
        assert!(!holds(&json!({"spec": {"template": {"containers": [{"name": "c", "image": "a:2"}]}}}), &desired));
        assert!(!holds(&json!({"spec": {"template": {"containers": []}}}), &desired));
        assert!(!holds(&json!({}), &desired));
        assert!(!holds(&json!({"metadata": {"labels": {"a": "b"}}}), &json!({"metadata": {"labels": {"a": "c"}}})));
    }

    #[test]
    fn owner_references_need_only_contain_ours() {
        let ours = json!({"uid": "1", "name": "a"});
        let desired = json!({"metadata": {"ownerReferences": [ours]}});
        assert!(holds(&json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, ours]}}), &desired));
        assert!(!holds(&json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}), &desired));
    }
}
