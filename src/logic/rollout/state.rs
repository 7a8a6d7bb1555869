//! What a rollout reads of each node and revision, shared by the judge (`mod.rs`), its checks and its counts.

/// Entries kept in `status.driver.versions` and in `failedNodes`.
pub const MAX_VERSIONS: usize = 10;

pub const DEVICES_MISSING: &str = "DevicesMissing";

pub const NOT_REPUBLISHED: &str = "SliceNotRepublished";

/// One template of the plugin DaemonSet (a ControllerRevision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub hash: String,
    pub number: i64,
    pub image: Option<String>,
}

impl Revision {
    /// How the status names it: the image tag or digest.
    pub fn version(&self) -> String {
        self.image.as_deref().map(crate::logic::image::label).unwrap_or_else(|| self.hash.clone())
    }
}

/// A plugin pod as the rollout reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    pub name: String,
    pub uid: Option<String>,
    /// Its `controller-revision-hash` label.
    pub revision: Option<String>,
    pub ready: bool,
    pub terminating: bool,
    /// When it was created, in seconds.
    pub created: Option<i64>,
}

/// One node that should run the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub pod: Option<PodState>,
    /// Neuron devices its ResourceSlices publish now, and the `draDriverVersion`s they carry.
    pub devices: usize,
    pub versions: Vec<String>,
    /// Its Neuron ResourceSlices' names, creation times and generations, hashed: changes whenever one is written
    /// with another spec, or created again.
    pub slices: String,
    /// When the Node was created, in seconds.
    pub created: Option<i64>,
}

impl NodeState {
    /// The revision its plugin runs, unless the pod is going away.
    pub(super) fn running(&self) -> Option<&str> {
        self.pod.as_ref().filter(|p| !p.terminating).and_then(|p| p.revision.as_deref())
    }
}
