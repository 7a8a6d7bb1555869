//! watches: every watch the controller runs, and the caches they fill. Each watch retries on its own and logs its
//! failures; none reaches the controller. The controller backs off its whole trigger stream on any error it sees,
//! and that stream is what polls every watch: one failed watch would stop every cache from updating for as long as
//! the backoff lasts (after an API server restart, the watches' "410 Gone" answers, drained one by one, held every
//! cache stale for over a minute).

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

pub mod changes;
pub mod reads;
pub mod sampling;

use crate::runtime::client::{brief, refusal};

/// A watch of `api` that retries after a failure with kube's default backoff (0.8 s doubling to 30 s, as
/// client-go's reflectors do), but not after "410 Gone": that only says the server no longer holds the version to
/// resume from, and the watcher's answer, a new list, is the recovery rather than another attempt at what failed.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config).filter(|event| std::future::ready(!gone(event))).default_backoff()
}

/// "410 Gone": the server no longer holds the version the watch would resume from.
fn gone<T>(event: &Result<T, watcher::Error>) -> bool {
    matches!(event, Err(watcher::Error::WatchError(status)) if status.code == 410)
}

/// The stream's items with its errors logged (one line each) and dropped; the item type stays a `Result` for
/// kube's `watches_stream`.
pub fn without_errors<T: Send>(
    kind: String,
    stream: impl Stream<Item = Result<T, watcher::Error>> + Send,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send {
    stream.filter_map(move |item| {
        std::future::ready(match item {
            Ok(item) => Some(Ok(item)),
            Err(error) => {
                tracing::warn!(kind, error = %watch_error(&error), "watch failed; retrying");
                None
            }
        })
    })
}

/// A watch failure in one line: the server's message, not the debug dump of its `Status`.
fn watch_error(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e) => format!("listing: {}", brief(e)),
        watcher::Error::WatchStartFailed(e) => format!("starting the watch: {}", brief(e)),
        watcher::Error::WatchFailed(e) => format!("watching: {}", brief(e)),
        watcher::Error::WatchError(status) => format!("the server ended the watch: {}", refusal(status)),
        other => other.to_string(),
    }
}

/// A watch stream that fills a cache; touched (applied or deleted) objects trigger reconciles.
pub fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    // Managed fields are the bulk of most objects and never read here.
    let events = watch(api, config).modify(|o: &mut K| o.meta_mut().managed_fields = None);
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    (store, without_errors(kind, reflector::reflector(writer, events).touched_objects()))
}

/// Like `cached`, for a kind watched by the thousand: `trim` drops what the operator never reads before an object
/// enters the cache, and events trigger only when what the operator reads of an object (`read`, see `changes`)
/// changed. `every_event` (benchmarks' "before") triggers on every event.
pub fn cached_read<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
    read: fn(&K) -> u64,
    every_event: bool,
) -> (Store<K>, impl Stream<Item = Result<changes::Touched<K>, watcher::Error>> + Send)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let events = reflector::reflector(writer, watch(api, config).modify(trim));
    let counted = std::sync::atomic::AtomicU64::new(0);
    let read = move |object: &K| match every_event {
        true => counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed), // never the same twice
        false => read(object),
    };
    (store, without_errors(kind, changes::changes(events, read)))
}

#[cfg(test)]
mod tests;
