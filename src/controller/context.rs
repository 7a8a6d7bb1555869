//! What every reconcile shares: the client, the caches, the recorder and metrics, and what is remembered between
//! reconciles.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};

use super::Stores;
use super::capabilities::Capabilities;
use super::expectations::{Applier, config_key};
use super::pure::events::Remembered;
use crate::api::NeuronDRAConfig;
use crate::logic::validate::ValidatedConfig;
use crate::runtime::telemetry::Metrics;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// Server-side apply and delete, with the writes the cache has not shown yet.
    pub applier: Applier,
    pub stores: Stores,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// What the API server supports beyond the base DRA API (probed on first need).
    pub capabilities: Capabilities,
    /// The DeviceTaintRule version the server serves (found at start), for writing rules; None where it serves none.
    pub taint_rules: Option<kube::core::ApiResource>,
    /// What is kept about each config between its passes, by config name: one entry, dropped as one.
    pub(super) memory: Mutex<HashMap<String, ConfigMemory>>,
    /// True once every cache has listed once (see `Context::synced`).
    pub(super) synced: tokio::sync::watch::Receiver<bool>,
}

/// What is kept about one config between its passes.
#[derive(Default)]
pub(super) struct ConfigMemory {
    /// Consecutive failed passes, for the retry's exponential backoff.
    failures: u32,
    /// The parse error last reported, so that each is reported once, not on every event.
    unparseable: Option<String>,
    /// What the last pass's events found (unhealthy devices, claims on them, nodes held back), so that events
    /// mark changes, not every pass.
    seen: Remembered,
}

impl Context {
    /// `name`'s memory, for one short change under the lock (made when there is none).
    fn with_memory<T>(&self, name: &str, f: impl FnOnce(&mut ConfigMemory) -> T) -> T {
        f(self.memory.lock().expect("not poisoned").entry(name.to_string()).or_default())
    }

    /// A read of `name`'s memory under the lock (an empty one when there is none: a read makes no entry).
    fn read_memory<T>(&self, name: &str, f: impl FnOnce(&ConfigMemory) -> T) -> T {
        f(self.memory.lock().expect("not poisoned").get(name).unwrap_or(&ConfigMemory::default()))
    }

    /// A change to `name`'s memory when it has one (a reset needs no entry).
    fn reset_memory(&self, name: &str, f: impl FnOnce(&mut ConfigMemory)) {
        if let Some(memory) = self.memory.lock().expect("not poisoned").get_mut(name) {
            f(memory);
        }
    }

    /// Waits until every cache has listed once, so a reconcile never mistakes "not loaded" for "absent".
    pub(super) async fn synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|ready| *ready).await;
    }

    pub(super) fn reset_failures(&self, name: &str) {
        self.reset_memory(name, |memory| memory.failures = 0);
    }

    /// Counts one more failed pass over `name`, and says how many in a row.
    pub(super) fn failed_again(&self, name: &str) -> u32 {
        self.with_memory(name, |memory| {
            memory.failures = memory.failures.saturating_add(1);
            memory.failures
        })
    }

    /// Whether this exact parse error was already reported for this config.
    pub(super) fn already_reported(&self, name: &str, error: &str) -> bool {
        self.read_memory(name, |memory| memory.unparseable.as_deref() == Some(error))
    }

    /// Remembers a parse error once its status is written, so it is reported once, not on every event.
    pub(super) fn reported_unparseable(&self, name: &str, error: &str) {
        self.with_memory(name, |memory| memory.unparseable = Some(error.to_string()));
    }

    /// Drops everything kept about a config that is gone: its metric series and its entries here.
    pub(super) fn forget(&self, config: &NeuronDRAConfig) {
        let validated = crate::logic::validate::validate(config).ok();
        self.forget_named(&config.name_any(), config.metadata.uid.as_deref(), validated.as_ref());
    }

    /// `forget` by name and uid, also for a config that cannot be parsed: without its spec its per-template series
    /// are unknown and stay until the operator restarts.
    pub(super) fn forget_named(&self, name: &str, uid: Option<&str>, validated: Option<&ValidatedConfig>) {
        self.memory.lock().expect("not poisoned").remove(name);
        self.applier.expectations.forget(&config_key(name));
        if let Some(uid) = uid {
            self.stores.validations.forget(uid);
        }
        self.metrics.forget(name, validated);
    }

    /// What the events of earlier passes over `name` found (`events::Remembered`).
    pub(super) fn remembered(&self, name: &str) -> Remembered {
        self.read_memory(name, |memory| memory.seen.clone())
    }

    /// Keeps what a pass over `name` found, for the next pass's events (None, or a None part: nothing new).
    pub(super) fn remember(&self, name: &str, remembered: Option<Remembered>) {
        let Some(Remembered { unhealthy, in_use, held_back }) = remembered else { return };
        self.with_memory(name, |memory| {
            let seen = &mut memory.seen;
            seen.unhealthy = unhealthy.or(seen.unhealthy.take());
            seen.in_use = in_use.or(seen.in_use.take());
            seen.held_back = held_back.or(seen.held_back.take());
        });
    }

    pub(super) fn parsed_again(&self, name: &str) {
        self.reset_memory(name, |memory| memory.unparseable = None);
    }
}
