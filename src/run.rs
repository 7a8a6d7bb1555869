//! The `run` command: the client and CRD check, the probe and metrics servers, leader election, and the controller
//! until a signal or a lost lease stops it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::controller::run_controller;
use crate::runtime::server::{self, MetricsSecurity};
use crate::runtime::telemetry::{Metrics, Readiness};

/// Options of `neuron-dra-operator run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Address of /metrics (HTTPS; callers need a bearer token whose user may `get` the URL /metrics).
    #[arg(long, default_value = "0.0.0.0:8443", env = "METRICS_ADDR")]
    pub metrics_addr: SocketAddr,
    /// Serve /metrics over HTTPS to authorized callers only; `false` serves it in plain HTTP to anyone (local runs).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub metrics_secure: bool,
    /// Directory with tls.crt and tls.key for /metrics (a mounted TLS Secret); default: a self-signed certificate.
    #[arg(long)]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Address of /healthz and /readyz (plain HTTP, for the kubelet's probes).
    #[arg(long, default_value = "0.0.0.0:8081", env = "PROBE_ADDR")]
    pub probe_addr: SocketAddr,
    /// Elect a leader through a Lease so only one replica writes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "neuron-dra-operator-system", env = "POD_NAMESPACE")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "neuron-dra-operator")]
    pub lease_name: String,
    /// Seconds a leader's lease lasts without renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// Identity in the Lease; default: POD_NAME or the host name, plus the process id.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log as JSON lines.
    #[arg(long, env = "LOG_JSON")]
    pub log_json: bool,
    /// What to log: a level (`debug`) or tracing filter directives (`info,neuron_dra_operator=debug`); default:
    /// `RUST_LOG`, else `info`.
    #[arg(long, env = "LOG_LEVEL")]
    pub log_level: Option<String>,
    /// What the controller watches and how many configs it reconciles at once.
    #[command(flatten)]
    pub controller: crate::controller::Options,
}

impl RunArgs {
    pub fn lease(&self) -> crate::runtime::leader::LeaseSettings {
        crate::runtime::leader::LeaseSettings {
            name: self.lease_name.clone(),
            namespace: self.lease_namespace.clone(),
            duration: self.lease_duration,
            identity: self.identity.clone(),
        }
    }
}

/// `neuron-dra-operator run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    crate::runtime::telemetry::init_logging(args.log_json, args.log_level.as_deref())?;
    let metrics = Arc::new(Metrics::default());
    crate::controller::count_errors_from_zero(&metrics);
    let client = crate::runtime::client::counted_client(metrics.clone()).await?;
    crate::runtime::client::check_crd(&client).await?;
    if args.leader_elect {
        crate::runtime::leader::check_namespace(&client, &args.lease_namespace).await?;
    }

    let security = if args.metrics_secure {
        let tls = server::tls_config(args.metrics_cert_dir.as_deref())?;
        // A client of its own: the reviews each scrape costs are not the operator's work, so `api_requests` (and the
        // "no writes while idle" promise) leaves them out.
        MetricsSecurity::Https { tls, client: kube::Client::try_default().await? }
    } else {
        MetricsSecurity::Plain
    };
    let metrics_listener = server::bind(args.metrics_addr, "--metrics-addr")?;
    let probe_listener = server::bind(args.probe_addr, "--probe-addr")?;

    let readiness = Readiness::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let probes = tokio::spawn(server::serve_probes(probe_listener, readiness.clone(), wait_for(stop_rx.clone())));
    let metrics_server =
        tokio::spawn(server::serve_metrics(metrics_listener, metrics.clone(), security, wait_for(stop_rx.clone())));
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });

    // A standby is healthy and ready to take over: ready while it waits, so a Deployment of two replicas rolls out.
    readiness.set(true);
    let leadership = if args.leader_elect {
        match crate::runtime::leader::acquire(&client, &args.lease(), stop_rx.clone()).await? {
            Some(leadership) => Some(leadership),
            None => {
                let _ = tokio::join!(probes, metrics_server);
                return Ok(()); // asked to stop while standing by
            }
        }
    } else {
        None
    };
    // The leader is ready once its caches have synced.
    readiness.set(false);

    let lost = leadership.as_ref().map(|l| l.lost());
    let stop = {
        let stop_rx = stop_rx.clone();
        async move {
            match lost {
                Some(lost) => tokio::select! { _ = wait_for(stop_rx) => {}, _ = lost => {} },
                None => wait_for(stop_rx).await,
            }
        }
    };
    run_controller(client, metrics, readiness, &args.controller, stop).await;

    let lost_leadership = leadership.as_ref().is_some_and(|l| !l.is_leader());
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    probes.abort();
    metrics_server.abort();
    if lost_leadership && !*stop_rx.borrow() {
        anyhow::bail!("lost leadership; exiting so a fresh start rejoins the election");
    }
    Ok(())
}

async fn wait_for(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
