//! Values thousands of cached objects share (device names, attribute sets, kubelet versions), held once per process.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex};

use serde::Deserialize;
use serde::de::Deserializer;

/// A string many devices share (a device name repeats on every node of a type), held once per process.
pub type Shared = Arc<str>;

/// The one copy of `value` in `pool`. Distinct values are few (names, types, versions, the devices of an instance
/// type); past `limit` of them (a driver publishing something unexpected) values are no longer pooled, so a pool
/// cannot grow without bound.
pub(super) fn interned<T: Eq + Hash + ?Sized>(
    pool: &Mutex<HashSet<Arc<T>>>,
    value: impl Borrow<T> + Into<Arc<T>>,
    limit: usize,
) -> Arc<T> {
    let mut pool = pool.lock().expect("not poisoned");
    if let Some(known) = pool.get(value.borrow()) {
        return known.clone();
    }
    let new: Arc<T> = value.into();
    if pool.len() < limit {
        pool.insert(new.clone());
    }
    new
}

pub(super) fn shared_str(value: &str) -> Shared {
    static POOL: LazyLock<Mutex<HashSet<Shared>>> = LazyLock::new(Mutex::default);
    interned(&POOL, value, 4096)
}

pub(super) fn interned_str<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Shared, D::Error> {
    let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
    Ok(shared_str(&name))
}
