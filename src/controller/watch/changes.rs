//! changes: which watch events are worth a reconcile. A busy cluster rewrites its objects all the time for reasons
//! the operator never reads (node heartbeats, pod status details, resourceVersion bumps, fields the views drop);
//! an event triggers only when what the operator reads of the object changed, the object is deleted, or a relist
//! lost track of some object. The caches still take every event: only the triggering is filtered.

use std::collections::HashMap;
use std::hash::Hasher;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::watcher::{self, Event};
use serde::Serialize;

/// What one event asks of the controller.
#[derive(Debug, PartialEq)]
pub enum Touched<K> {
    /// What the operator reads of this object changed, or it was deleted.
    Changed(K),
    /// A relist finished and some objects known before were gone from it (deleted while the watch was down).
    Relisted,
}

/// A hash of what the operator reads of an object: equal hashes, nothing to reconcile.
pub fn fingerprint<T: Serialize + ?Sized>(read: &T) -> u64 {
    struct HashWriter(std::hash::DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = HashWriter(std::hash::DefaultHasher::new());
    // Serializing views (plain data) into a hasher cannot fail; a failure would only cost a spurious trigger.
    let _ = serde_json::to_writer(&mut writer, read);
    writer.0.finish()
}

/// The identity of an object across its versions: a hash of its uid, or of namespace/name where it has none (views
/// of nodes, slices and claims drop it; a name reused by a new object then triggers only if what is read of it
/// differs, which is all the operator would see). A number rather than the uid's string keeps this map small at
/// 100,000 objects; two objects sharing a 64-bit hash would at worst cost a missed or a spurious trigger.
fn identity<K: Resource>(object: &K) -> u64 {
    let meta = object.meta();
    match &meta.uid {
        Some(uid) => fingerprint(uid),
        None => fingerprint(&(&meta.namespace, &meta.name)),
    }
}

/// The events of a watch (after its reflector) as triggers: `read` hashes what the operator reads of an object.
/// Costs one hash per object held.
pub fn changes<K, S>(
    events: S,
    read: impl Fn(&K) -> u64 + Send + 'static,
) -> impl Stream<Item = Result<Touched<K>, watcher::Error>> + Send
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let mut seen: HashMap<u64, u64> = HashMap::new();
    // During a relist: what it has listed so far.
    let mut listing: Option<HashMap<u64, u64>> = None;
    events.filter_map(move |event| {
        let touched = match event {
            Err(error) => Some(Err(error)),
            Ok(Event::Apply(object)) => {
                let hash = read(&object);
                (seen.insert(identity(&object), hash) != Some(hash)).then_some(Ok(Touched::Changed(object)))
            }
            Ok(Event::Delete(object)) => {
                seen.remove(&identity(&object));
                Some(Ok(Touched::Changed(object)))
            }
            Ok(Event::Init) => {
                listing = Some(HashMap::new());
                None
            }
            Ok(Event::InitApply(object)) => {
                let hash = read(&object);
                let key = identity(&object);
                let changed = seen.get(&key) != Some(&hash);
                listing.get_or_insert_default().insert(key, hash);
                changed.then_some(Ok(Touched::Changed(object)))
            }
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                let lost = seen.keys().any(|key| !listed.contains_key(key));
                seen = listed;
                lost.then_some(Ok(Touched::Relisted))
            }
        };
        std::future::ready(touched)
    })
}

/// The changed objects alone, for mapping to the configs that own them (a relist's losses are left to the owners'
/// own watches).
pub fn changed_objects<K>(
    touched: impl Stream<Item = Result<Touched<K>, watcher::Error>> + Send,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Send,
{
    touched.filter_map(|touched| {
        std::future::ready(match touched {
            Ok(Touched::Changed(object)) => Some(Ok(object)),
            Ok(Touched::Relisted) => None,
            Err(error) => Some(Err(error)),
        })
    })
}

#[cfg(test)]
mod tests;
