//! expectations: the writes of this process that the watch cache has not shown yet, by object, and the `Applier`
//! that keeps them (its writes are `act::apply`'s). The context holds them, so a reconcile that starts before the
//! cache shows the last one's writes, or a config's own status write, waits instead of acting on the older copy.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;

/// How long a write may take to show up in the watch cache before the cache is trusted again anyway.
const EXPECTATION_TTL: Duration = Duration::from_secs(10);

/// Writes not yet seen in the watch cache (the "expectations" pattern of upstream controllers). Without them, a
/// reconcile that runs right after another would act on a stale cache: re-create what was just created, or delete a
/// template that was just replaced.
#[derive(Default)]
pub struct Expectations {
    /// `Kind/namespace/name` → the resourceVersion the cache held before our write (None: absent), and when.
    written: Mutex<HashMap<String, (Option<String>, Instant)>>,
}

impl Expectations {
    /// True when nothing is awaited for `key`, or the cache (at `cached_version`) has moved past the state our write
    /// replaced: it shows our write or something newer.
    pub fn settled(&self, key: &str, cached_version: Option<&str>) -> bool {
        let mut written = self.written.lock().expect("not poisoned");
        match written.get(key) {
            None => true,
            Some((before, at)) if before.as_deref() != cached_version || at.elapsed() > EXPECTATION_TTL => {
                written.remove(key);
                true
            }
            Some(_) => false,
        }
    }

    /// Stops waiting for `key` (its object is gone for good).
    pub fn forget(&self, key: &str) {
        self.written.lock().expect("not poisoned").remove(key);
    }

    /// Records a write that replaced the cached state `before` (its resourceVersion; None where it was absent).
    pub fn wrote(&self, key: String, before: Option<String>) {
        self.written.lock().expect("not poisoned").insert(key, (before, Instant::now()));
    }
}

/// `Kind/namespace/name` of an object.
pub fn object_key<K: Resource>(name: &str, namespace: Option<&str>) -> String
where
    K::DynamicType: Default,
{
    object_key_as::<K>(&K::DynamicType::default(), name, namespace)
}

/// `Kind/namespace/name` of an object of a kind known at run time (`dt`).
pub fn object_key_as<K: Resource>(dt: &K::DynamicType, name: &str, namespace: Option<&str>) -> String {
    format!("{}/{}/{name}", K::kind(dt), namespace.unwrap_or(""))
}

/// The expectations key of a config.
pub fn config_key(name: &str) -> String {
    object_key::<crate::api::NeuronDRAConfig>(name, None)
}

/// Server-side apply and delete, remembering each write until the watch cache shows it (the writes are
/// `act::apply`'s `impl Applier`).
#[derive(Default)]
pub struct Applier {
    pub expectations: Expectations,
}

#[cfg(test)]
mod tests;
