//! Command-line entry points of `neuron-dra-operator`, the binary the operator image ships (`run`, and `render` and
//! `crd`, which users run too, and `smoke-test`, which the chart's `helm test` runs). The development tools are in `neuron-dra-devtools` (src/bin).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::api::NeuronDRAConfig;
use crate::logic::validate::{FieldError, InvalidConfig, validate};

#[derive(Parser, Debug)]
#[command(name = "neuron-dra-operator", version, about = "Runs AWS Neuron DRA on Trainium from one NeuronDRAConfig")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller (kubeconfig from --kubeconfig, KUBECONFIG, ~/.kube/config, or in-cluster).
    Run(Box<crate::run::RunArgs>),
    /// Print the NeuronDRAConfig CRD as YAML.
    Crd,
    /// Print every object the controller would apply for a config, as a multi-document YAML stream.
    Render {
        /// The NeuronDRAConfig YAML file (`-` for standard input).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Target namespace for the templates (repeatable); default: the config's `templates.namespaces`.
        #[arg(long = "namespace", short = 'n')]
        namespaces: Vec<String>,
        /// Print instead the Kueue objects for the config's device budgets (docs/kueue.md): Kueue's
        /// Configuration fragment, ResourceFlavors, a ClusterQueue and a LocalQueue per named budget namespace.
        #[arg(long, conflicts_with = "namespaces")]
        kueue: bool,
        /// The cluster's Kubernetes version (`1.34`, `v1.37.2`): the templates take the form its scheduler
        /// allocates quickly, as the running operator shapes them; default: the form every supported version
        /// allocates quickly (docs/decisions.md, "Whole nodes on a busy fleet").
        #[arg(long = "kubernetes-version", value_parser = parse_allocator, conflicts_with = "kueue")]
        kubernetes_version: Option<crate::logic::desired::Allocator>,
    },
    /// Scrape every ready operator replica's /metrics as this pod's ServiceAccount (what the chart's `helm test`
    /// runs).
    SmokeTest {
        /// The operator's metrics Service.
        #[arg(long, default_value = "neuron-dra-operator-metrics")]
        service: String,
        /// Its namespace; default: this pod's.
        #[arg(long)]
        namespace: Option<String>,
    },
}

/// Why `render` refused a config: one line per problem.
#[derive(Debug)]
pub struct RenderError(pub Vec<FieldError>);

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RenderError {}

/// Reads and parses a config file; a parse error becomes a problem naming the field serde stopped at.
pub fn read_config(file: &Path) -> anyhow::Result<NeuronDRAConfig> {
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    parse_config(&text).map_err(|problems| RenderError(problems).into())
}

/// Parses a NeuronDRAConfig document, checking apiVersion and kind.
pub fn parse_config(text: &str) -> Result<NeuronDRAConfig, Vec<FieldError>> {
    let value: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| vec![problem("(document)", format!("not valid YAML: {e}"))])?;
    let field = |name: &str| value.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let mut problems = Vec::new();
    if !value.is_mapping() {
        return Err(vec![problem("(document)", "must be a NeuronDRAConfig object")]);
    }
    if field("apiVersion") != "neurondra.io/v1alpha1" {
        problems.push(problem("apiVersion", format!("{:?} is not neurondra.io/v1alpha1", field("apiVersion"))));
    }
    if field("kind") != "NeuronDRAConfig" {
        problems.push(problem("kind", format!("{:?} is not NeuronDRAConfig", field("kind"))));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        vec![problem(if path == "." { "(document)" } else { &path }, e.into_inner().to_string())]
    })
}

fn problem(path: &str, reason: impl Into<String>) -> FieldError {
    FieldError { path: path.to_string(), reason: reason.into() }
}

/// A series every operator serves from its start (counters begin at 0), so a scrape without it did not reach one.
const SMOKE_SERIES: &str = "neuron_dra_operator_reconcile_errors_total";

/// `smoke-test`: scrapes /metrics of every ready replica behind the metrics Service, as Prometheus does (from the
/// Service's EndpointSlices, straight to each pod), with this pod's own token. It checks what a scrape needs: the
/// Service selects the replicas, the network policy lets the pod in, and /metrics authenticates and authorizes the
/// token. Not the certificate, which is self-signed unless one is configured.
pub async fn smoke_test(service: &str, namespace: Option<&str>) -> anyhow::Result<String> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let config = kube::Config::infer().await.context("no in-cluster or kubeconfig credentials")?;
    let namespace = namespace.unwrap_or(&config.default_namespace).to_string();
    let client = kube::Client::try_from(config.clone()).context("building the API client")?;
    let slices = kube::Api::<EndpointSlice>::namespaced(client, &namespace)
        .list(&kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .with_context(|| format!("listing the EndpointSlices of Service {namespace}/{service}"))?;
    let mut targets = Vec::new();
    for slice in &slices.items {
        let port = slice.ports.iter().flatten().find(|p| p.name.as_deref() == Some("https")).and_then(|p| p.port);
        let ready = slice.endpoints.iter().filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false));
        for address in ready.flat_map(|e| e.addresses.iter()) {
            let host = if address.contains(':') { format!("[{address}]") } else { address.clone() };
            targets.extend(port.map(|port| format!("https://{host}:{port}")));
        }
    }
    anyhow::ensure!(!targets.is_empty(), "Service {namespace}/{service} has no ready endpoint with an https port");
    for target in &targets {
        let mut scrape = config.clone();
        scrape.cluster_url = target.parse()?;
        // The cluster's CA stays as the root: without one the TLS client loads the system's CA bundle, which the
        // operator image (no files but the binary) does not have; with invalid certificates accepted it checks none.
        scrape.accept_invalid_certs = true;
        let client = kube::Client::try_from(scrape).context("building the HTTPS client")?;
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = client.request_text(request).await.map_err(|e| anyhow::anyhow!("GET {target}/metrics: {e}"))?;
        anyhow::ensure!(text.contains(SMOKE_SERIES), "GET {target}/metrics answered without {SMOKE_SERIES}");
    }
    Ok(format!("smoke test passed: {} replica(s) of Service {namespace}/{service} served /metrics", targets.len()))
}

/// The allocator of a `--kubernetes-version`.
fn parse_allocator(version: &str) -> Result<crate::logic::desired::Allocator, String> {
    crate::logic::desired::Allocator::of_version(version)
        .ok_or_else(|| format!("{version:?} is not a Kubernetes version like 1.34 or v1.37.2"))
}

pub fn render(
    file: &Path,
    namespaces: &[String],
    allocator: crate::logic::desired::Allocator,
) -> anyhow::Result<String> {
    let config = read_config(file)?;
    let validated = validate(&config).map_err(|InvalidConfig(problems)| RenderError(problems))?;
    let namespaces = if namespaces.is_empty() { &validated.spec.templates.namespaces } else { namespaces };
    if let Some(bad) = namespaces.iter().find(|ns| !crate::api::DNS_LABEL.is_match(ns)) {
        return Err(RenderError(vec![problem("--namespace", format!("{bad:?} is not a valid namespace name"))]).into());
    }
    // Budgets of the namespaces a budget names (a selector needs the cluster), the first budget winning.
    let budgets = crate::logic::desired::named_budgets(&validated);
    let own = crate::logic::desired::OwnClasses::BOTH;
    let desired = crate::logic::desired::build_with(&validated, namespaces, own, allocator);
    Ok(desired.with_quotas(&validated, &budgets).to_yaml()?)
}

/// `render --kueue`: the Kueue objects of the config's budgets as YAML, and notes on what was left out.
pub fn render_kueue(file: &Path) -> anyhow::Result<(String, Vec<String>)> {
    let config = read_config(file)?;
    let validated = validate(&config).map_err(|InvalidConfig(problems)| RenderError(problems))?;
    let objects = crate::logic::desired::kueue::build_kueue(&validated).map_err(RenderError)?;
    Ok((objects.to_yaml()?, objects.notes))
}
