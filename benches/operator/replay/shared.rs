//! What the replay server's parts share: the fleet's model, the kinds it generates, the watch logs and the
//! operator's plugins as the generated pods name them.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};

use axum::body::Bytes;
use kube::Client;
use neuron_dra_operator::devtools::simulate::FAULT_TAINT_KEY;
use neuron_dra_operator::devtools::simulate::fleet::{self, FleetSpec};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The kinds the replay generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nodes,
    NeuronSlices,
    EfaSlices,
    Claims,
    Pods,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Nodes, Kind::NeuronSlices, Kind::EfaSlices, Kind::Claims, Kind::Pods];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Nodes => "nodes",
            Kind::NeuronSlices => "neuron slices",
            Kind::EfaSlices => "efa slices",
            Kind::Claims => "claims",
            Kind::Pods => "plugin pods",
        }
    }
}

/// The replayed fleet: `nodes` nodes of one instance type, named `<prefix>-<i>`.
#[derive(Debug, Clone)]
pub struct FleetModel {
    pub nodes: usize,
    pub prefix: String,
    pub instance_type: String,
}

impl FleetModel {
    pub fn trn2(nodes: usize, prefix: &str) -> FleetModel {
        FleetModel { nodes, prefix: prefix.into(), instance_type: "trn2.48xlarge".into() }
    }

    pub fn spec(&self) -> FleetSpec {
        FleetSpec {
            prefix: self.prefix.clone(),
            count: self.nodes,
            instance_type: self.instance_type.clone(),
            dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
            neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
            kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
        }
    }
}

/// The watch events of one kind after `start` (older versions get a 410).
#[derive(Default)]
pub(super) struct Log {
    pub(super) start: u64,
    pub(super) events: Vec<(u64, Bytes)>,
}

/// Events kept per kind; a watch from an older version is told 410.
pub(super) const LOG_EVENTS: usize = 10_000;
/// The version every generated object starts at.
pub(super) const BASE_VERSION: u64 = 1;

/// The open watches and the kind each watches.
pub(super) type Watches = Vec<(Kind, mpsc::UnboundedSender<Bytes>)>;
/// One node's device taints: the version of its slice, and (device index, effect) per taint.
pub type Taints = (u64, Vec<(u32, String)>);

pub struct Shared {
    pub(super) model: FleetModel,
    pub(super) spec: FleetSpec,
    /// The version counter and, under the same lock, each kind's log and open watches.
    pub(super) logs: Mutex<(u64, Vec<Log>, Watches)>,
    /// Device taints per node index: (version, device index, effect).
    pub(super) taints: Mutex<BTreeMap<usize, Taints>>,
    /// Claims by `namespace/name`, with their version set.
    pub(super) claims: Mutex<BTreeMap<String, Value>>,
    pub(super) plugins: Mutex<Vec<Plugin>>,
    /// Each node's unchanging objects (node, untainted Neuron slice, EFA slice) as served, rendered on first use: a
    /// cold start is then served at the cost of a copy, not of building ~25 KB of JSON per node again.
    pub(super) rendered: [Vec<OnceLock<Bytes>>; 3],
    pub(super) list_bytes: [AtomicU64; 5],
    pub(super) watch_bytes: [AtomicU64; 5],
    pub(super) forwarded_bytes: AtomicU64,
    pub(super) upstream: Client,
}

impl Shared {
    pub(super) fn version(&self) -> u64 {
        self.logs.lock().unwrap().0
    }

    /// Sends one event to every open watch of `kind` and logs it; returns the object's new version.
    pub(super) fn emit(&self, kind: Kind, event: &str, mut object: Value) -> u64 {
        let mut logs = self.logs.lock().unwrap();
        logs.0 += 1;
        let version = logs.0;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        let mut line = serde_json::to_vec(&json!({"type": event, "object": object})).unwrap();
        line.push(b'\n');
        let line = Bytes::from(line);
        let log = &mut logs.1[kind as usize];
        log.events.push((version, line.clone()));
        if log.events.len() > LOG_EVENTS {
            log.events.drain(..LOG_EVENTS / 2);
            log.start = log.events[0].0 - 1;
        }
        logs.2.retain(|(k, tx)| *k != kind || tx.send(line.clone()).is_ok());
        version
    }

    /// Forgets `kind`'s log: its open watches get a 410 and end, and so relist.
    pub(super) fn expire(&self, kind: Kind) {
        let mut logs = self.logs.lock().unwrap();
        logs.0 += 1;
        let version = logs.0;
        logs.1[kind as usize] = Log { start: version, events: Vec::new() };
        let gone = gone_line();
        logs.2.retain(|(k, tx)| {
            if *k == kind {
                let _ = tx.send(gone.clone());
            }
            *k != kind
        });
    }
}

/// One of the operator's DaemonSets as its generated pods name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plugin {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub config: String,
    pub hash: String,
    pub version: u64,
    /// Its pods' JSON, made once per revision (`serve::pod_template`).
    pub pod: String,
}

/// The ERROR event the API server sends a watch from a version it no longer holds.
pub fn gone_line() -> Bytes {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410});
    let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": status})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

pub const TAINT_KEY: &str = FAULT_TAINT_KEY;
