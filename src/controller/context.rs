//! What every reconcile shares: the client, the caches, the recorder and metrics, and what is remembered between
//! reconciles.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};

use super::Stores;
use super::events::Remembered;
use crate::api::NeuronDRAConfig;
use crate::logic::validate::ValidatedConfig;
use crate::runtime::telemetry::Metrics;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// Server-side apply and delete, with the writes the cache has not shown yet.
    pub applier: crate::controller::act::apply::Applier,
    pub stores: Stores,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// What the API server supports beyond the base DRA API (probed on first need).
    pub capabilities: super::capabilities::Capabilities,
    /// The DeviceTaintRule version the server serves (found at start), for writing rules; None where it serves none.
    pub taint_rules: Option<kube::core::ApiResource>,
    /// Consecutive failures per config, for exponential backoff.
    pub(super) failures: Mutex<HashMap<String, u32>>,
    /// Configs reported as unparseable, with the error: reported once, not on every event.
    pub(super) unparseable: Mutex<HashMap<String, String>>,
    /// Unhealthy devices per config at the last reconcile, so events mark changes, not every reconcile.
    pub(super) unhealthy_seen: Mutex<HashMap<String, std::collections::BTreeSet<(String, String)>>>,
    /// Nodes held back by the remediation budget per config at the last reconcile, likewise.
    pub(super) held_back_seen: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// Claims on unhealthy devices per config at the last reconcile, likewise.
    pub(super) in_use_seen: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// True once every cache has listed once (see `Context::synced`).
    pub(super) synced: tokio::sync::watch::Receiver<bool>,
}

impl Context {
    /// Waits until every cache has listed once, so a reconcile never mistakes "not loaded" for "absent".
    pub(super) async fn synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|ready| *ready).await;
    }

    pub(super) fn reset_failures(&self, name: &str) {
        self.failures.lock().expect("not poisoned").remove(name);
    }

    /// Whether this exact parse error was already reported for this config.
    pub(super) fn already_reported(&self, name: &str, error: &str) -> bool {
        self.unparseable.lock().expect("not poisoned").get(name).map(String::as_str) == Some(error)
    }

    /// Remembers a parse error once its status is written, so it is reported once, not on every event.
    pub(super) fn reported_unparseable(&self, name: &str, error: &str) {
        self.unparseable.lock().expect("not poisoned").insert(name.to_string(), error.to_string());
    }

    /// Drops everything kept about a config that is gone: its metric series and its entries here.
    pub(super) fn forget(&self, config: &NeuronDRAConfig) {
        let validated = crate::logic::validate::validate(config).ok();
        self.forget_named(&config.name_any(), config.metadata.uid.as_deref(), validated.as_ref());
    }

    /// `forget` by name and uid, also for a config that cannot be parsed: without its spec its per-template series
    /// are unknown and stay until the operator restarts.
    pub(super) fn forget_named(&self, name: &str, uid: Option<&str>, validated: Option<&ValidatedConfig>) {
        self.failures.lock().expect("not poisoned").remove(name);
        self.unparseable.lock().expect("not poisoned").remove(name);
        self.unhealthy_seen.lock().expect("not poisoned").remove(name);
        self.in_use_seen.lock().expect("not poisoned").remove(name);
        self.held_back_seen.lock().expect("not poisoned").remove(name);
        self.applier.expectations.forget(&crate::controller::act::apply::config_key(name));
        if let Some(uid) = uid {
            self.stores.validations.forget(uid);
        }
        self.metrics.forget(name, validated);
    }

    /// What the events of earlier passes over `name` found (`events::Remembered`).
    pub(super) fn remembered(&self, name: &str) -> Remembered {
        Remembered {
            unhealthy: self.unhealthy_seen.lock().expect("not poisoned").get(name).cloned(),
            in_use: self.in_use_seen.lock().expect("not poisoned").get(name).cloned(),
            held_back: self.held_back_seen.lock().expect("not poisoned").get(name).cloned(),
        }
    }

    /// Keeps what a pass over `name` found, for the next pass's events (None: nothing new).
    pub(super) fn remember(&self, name: &str, remembered: Option<Remembered>) {
        let Some(Remembered { unhealthy, in_use, held_back }) = remembered else { return };
        keep(&self.unhealthy_seen, name, unhealthy);
        keep(&self.in_use_seen, name, in_use);
        keep(&self.held_back_seen, name, held_back);
    }

    pub(super) fn parsed_again(&self, name: &str) {
        self.unparseable.lock().expect("not poisoned").remove(name);
    }
}

/// `value` as `name`'s entry of `map`, when there is one (None leaves the entry as it was).
fn keep<T>(map: &Mutex<HashMap<String, T>>, name: &str, value: Option<T>) {
    if let Some(value) = value {
        map.lock().expect("not poisoned").insert(name.to_string(), value);
    }
}
