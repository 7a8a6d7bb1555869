//! The `run` command: the client and CRD check, the probe and metrics servers, leader election, and the controller
//! until a signal or a lost lease stops it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::controller::run_controller;
use crate::runtime::certs::MetricsCertificate;
use crate::runtime::server::{self, MetricsSecurity};
use crate::runtime::telemetry::{Metrics, Readiness};

/// Options of `neuron-dra-operator run`. The names are those of kubebuilder's controllers (`--metrics-bind-address`,
/// `--health-probe-bind-address`, `--leader-elect`, `--kubeconfig`), so an operator of kube controllers types what
/// they know; the first names stay accepted as hidden aliases.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Kubeconfig file; default: KUBECONFIG, ~/.kube/config, else the in-cluster ServiceAccount.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use; default: its current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Address of /metrics (HTTPS; callers need a bearer token whose user may `get` the URL /metrics).
    #[arg(long, alias = "metrics-addr", default_value = "0.0.0.0:8443", env = "METRICS_ADDR")]
    pub metrics_bind_address: SocketAddr,
    /// Serve /metrics over HTTPS to authorized callers only; `--metrics-secure=false` serves it in plain HTTP to
    /// anyone (local runs).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
        action = clap::ArgAction::Set)]
    pub metrics_secure: bool,
    /// Directory with tls.crt and tls.key for /metrics (a mounted TLS Secret), read again when they change; default:
    /// a self-signed certificate.
    #[arg(long, value_name = "DIR")]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Offer HTTP/2 on /metrics besides HTTP/1.1. Off by default, as in controller-runtime: HTTP/2's stream resets
    /// are what the rapid-reset attacks (CVE-2023-44487) abuse, and a scrape needs none of HTTP/2.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true",
        action = clap::ArgAction::Set)]
    pub enable_http2: bool,
    /// Address of /healthz and /readyz (plain HTTP, for the kubelet's probes).
    #[arg(long, alias = "probe-addr", default_value = "0.0.0.0:8081", env = "PROBE_ADDR")]
    pub health_probe_bind_address: SocketAddr,
    /// Elect a leader through a Lease so only one replica writes (on by default: two replicas never both write);
    /// `--leader-elect=false` for a single replica.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
        action = clap::ArgAction::Set, env = "LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (also `--leader-elect-resource-namespace`, kube-scheduler's name).
    #[arg(
        long,
        visible_alias = "leader-elect-resource-namespace",
        default_value = "neuron-dra-operator-system",
        env = "POD_NAMESPACE"
    )]
    pub lease_namespace: String,
    /// Name of the leader-election Lease (also `--leader-elect-resource-name`).
    #[arg(long, visible_alias = "leader-elect-resource-name", default_value = "neuron-dra-operator")]
    pub lease_name: String,
    /// How long a leader's lease lasts without renewal (`15s`, `1m`; whole seconds, at least 3; also
    /// `--leader-elect-lease-duration`).
    #[arg(long, visible_alias = "leader-elect-lease-duration", default_value = "15s", value_parser = lease_duration,
        value_name = "DURATION")]
    pub lease_duration: Duration,
    /// Identity in the Lease; default: POD_NAME or the host name, plus the process id.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log as JSON lines or as text.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// The first spelling of `--log-format json`.
    #[arg(long, hide = true, env = "LOG_JSON", conflicts_with = "log_format")]
    pub log_json: bool,
    /// What to log: a level (`debug`) or tracing filter directives (`info,neuron_dra_operator=debug`); default:
    /// `RUST_LOG`, else `info`.
    #[arg(long, env = "LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Log verbosity as klog's `-v` counts it, for those used to Kubernetes components: 0 and 1 are `info`, 2 to 4
    /// `debug` for the operator, 5 and more `trace` for it and `debug` for its libraries.
    #[arg(short = 'v', long = "v", value_name = "LEVEL", conflicts_with = "log_level")]
    pub verbosity: Option<u8>,
    /// What the controller watches and how many configs it reconciles at once.
    #[command(flatten)]
    pub controller: crate::controller::Options,
}

/// How `run` writes its logs.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

impl RunArgs {
    pub fn lease(&self) -> crate::runtime::leader::LeaseSettings {
        crate::runtime::leader::LeaseSettings {
            name: self.lease_name.clone(),
            namespace: self.lease_namespace.clone(),
            duration: self.lease_duration.as_secs(),
            identity: self.identity.clone(),
        }
    }

    /// The log filter `--log-level` or `-v` asks for; None: `RUST_LOG`, else `info`.
    pub fn log_filter(&self) -> Option<String> {
        match self.verbosity {
            Some(0..=1) => Some("info,kube_lease_manager=warn".into()),
            Some(2..=4) => Some("info,kube_lease_manager=warn,neuron_dra_operator=debug".into()),
            Some(_) => Some("debug,neuron_dra_operator=trace".into()),
            None => self.log_level.clone(),
        }
    }

    /// JSON lines when either spelling asks for them.
    pub fn json_logs(&self) -> bool {
        self.log_json || self.log_format == LogFormat::Json
    }

    pub fn connection(&self) -> crate::runtime::client::Connection {
        crate::runtime::client::Connection { kubeconfig: self.kubeconfig.clone(), context: self.context.clone() }
    }
}

/// A duration as kube's controllers take it (`15s`, `1m30s`); a bare number is seconds (the flag's first form,
/// still accepted). A Lease counts whole seconds, and the renewal grace (a third, at least 2 s) must fit in it.
pub fn lease_duration(text: &str) -> Result<Duration, String> {
    let duration = match text.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let parsed: k8s_openapi::jiff::SignedDuration =
                text.parse().map_err(|_| format!("{text:?} is not a duration like 15s or 1m30s"))?;
            Duration::try_from(parsed).map_err(|_| format!("{text:?} is negative"))?
        }
    };
    if duration.subsec_nanos() != 0 {
        return Err(format!("{text:?} is not a whole number of seconds (a Lease counts seconds)"));
    }
    if duration.as_secs() < 3 {
        return Err(format!("{text:?} is shorter than 3s, which leaves no time to renew the lease"));
    }
    Ok(duration)
}

/// `neuron-dra-operator run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    crate::runtime::telemetry::init_logging(args.json_logs(), args.log_filter().as_deref())?;
    let metrics = Arc::new(Metrics::default());
    crate::controller::count_errors_from_zero(&metrics);
    let connection = args.connection();
    let client = crate::runtime::client::counted_client(&connection, metrics.clone()).await?;
    crate::runtime::client::check_crd(&client).await?;
    if args.leader_elect {
        crate::runtime::leader::check_namespace(&client, &args.lease_namespace).await?;
    }

    let security = if args.metrics_secure {
        let tls = MetricsCertificate::load(args.metrics_cert_dir.as_deref(), args.enable_http2)?;
        // A client of its own: the reviews each scrape costs are not the operator's work, so `api_requests` (and the
        // "no writes while idle" promise) leaves them out.
        MetricsSecurity::Https { tls, client: kube::Client::try_from(connection.config().await?)? }
    } else {
        MetricsSecurity::Plain
    };
    let metrics_listener = server::bind(args.metrics_bind_address, "--metrics-bind-address")?;
    let probe_listener = server::bind(args.health_probe_bind_address, "--health-probe-bind-address")?;

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
    metrics.leader.set(1);

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
    run_controller(client, metrics.clone(), readiness, &args.controller, stop).await;
    metrics.leader.set(0);

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

#[cfg(test)]
mod tests;
