//! Leader election on a Lease (kube-lease-manager): only the holder runs the controller; losing the lease stops it.

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Lease this replica competes for.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    /// Seconds a leader's lease lasts without renewal.
    pub duration: u64,
    /// Identity in the Lease; default: the host name. The process id is appended.
    pub identity: Option<String>,
}

/// Held leadership: a channel that turns false when the lease is lost.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Leadership {
    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Resolves when the lease is lost (or the election task ends).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut state = self.state.clone();
        async move {
            let _ = state.wait_for(|leader| !*leader).await;
        }
    }

    /// Gives the lease up so a standby takes over at once instead of after it expires.
    pub async fn release(self) {
        drop(self.state);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("released the leader lease"),
            Ok(Err(error)) => tracing::warn!(%error, "releasing the leader lease"),
            Err(error) => tracing::warn!(%error, "leader election task"),
        }
    }
}

fn identity(lease: &LeaseSettings) -> String {
    let base = lease
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "neuron-dra-operator".to_string());
    format!("{base}-{}", std::process::id())
}

/// Refuses to start when the Lease's namespace does not exist (a local run against a cluster without the install),
/// saying in one line how to run instead.
pub async fn check_namespace(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let found = Api::<Namespace>::all(client.clone()).get_opt(namespace).await;
    match found {
        Ok(Some(_)) => Ok(()),
        Ok(None) => anyhow::bail!(
            "namespace {namespace} (where the leader-election Lease lives) does not exist: create it, pick another \
             with --lease-namespace NAMESPACE, or run a single replica with --leader-elect=false"
        ),
        Err(kube::Error::Api(status)) => {
            anyhow::bail!("reading namespace {namespace} for the leader-election Lease: {}", status.message)
        }
        Err(error) => anyhow::bail!("reading namespace {namespace} for the leader-election Lease: {error}"),
    }
}

/// Waits until this replica holds the lease; `None` if asked to stop first.
pub async fn acquire(
    client: &Client,
    lease: &LeaseSettings,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<Leadership>> {
    let identity = identity(lease);
    let manager = LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&identity)
        .with_duration(lease.duration)
        .with_grace(lease.duration.div_ceil(3).max(2))
        .build()
        .await?;
    let (mut state, task) = manager.watch().await;
    tracing::info!(%identity, lease = %lease.name, namespace = %lease.namespace, "waiting for leadership");
    let became_leader = tokio::select! {
        result = state.wait_for(|leader| *leader) => { result?; true }
        _ = stop.wait_for(|stop| *stop) => false,
    };
    if !became_leader {
        drop(state);
        let _ = task.await;
        return Ok(None);
    }
    tracing::info!(%identity, "became the leader");
    Ok(Some(Leadership { state, task }))
}
