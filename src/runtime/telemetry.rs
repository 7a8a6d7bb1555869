//! Logs, Prometheus metrics, the client's request counters, and the readiness `/readyz` reports (`server` serves
//! them).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::{NeuronDRAConfigStatus, TeamStatus, TemplateCapacity};
use crate::logic::validate::ValidatedConfig;
use kube::client::Body;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    pub config: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub config: String,
    /// Ready, ConfigValid, DriverReady, TemplatesReady, DevicesHealthy.
    pub condition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TeamLabels {
    pub config: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TemplateLabels {
    pub config: String,
    pub profile: String,
    pub template: String,
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ConfigLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub managed_objects: Family<ConfigLabels, Gauge>,
    pub api_requests: Family<RequestLabels, Counter>,
    pub nodes: Family<ConfigLabels, Gauge>,
    pub devices: Family<ConfigLabels, Gauge>,
    pub unhealthy_devices: Family<ConfigLabels, Gauge>,
    pub template_available: Family<TemplateLabels, Gauge>,
    pub template_allocated: Family<TemplateLabels, Gauge>,
    pub driver_desired_nodes: Family<ConfigLabels, Gauge>,
    pub driver_ready_nodes: Family<ConfigLabels, Gauge>,
    pub driver_updated_nodes: Family<ConfigLabels, Gauge>,
    pub driver_rollout_halted: Family<ConfigLabels, Gauge>,
    pub templates: Family<ConfigLabels, Gauge>,
    pub condition: Family<ConditionLabels, Gauge>,
    pub remediation_failing_nodes: Family<ConfigLabels, Gauge>,
    pub remediated_nodes: Family<ConfigLabels, Gauge>,
    pub remediation_held_back_nodes: Family<ConfigLabels, Gauge>,
    pub team_quota_devices: Family<TeamLabels, Gauge>,
    pub team_used_devices: Family<TeamLabels, Gauge>,
    /// 1 while this replica leads (or runs alone, `--leader-elect=false`), else 0.
    pub leader: Gauge,
    /// The team namespaces each config has series for, so that one dropped from its status loses them.
    team_namespaces: Mutex<HashMap<String, BTreeSet<String>>>,
    /// Every gauge labelled by config alone.
    per_config: Vec<Family<ConfigLabels, Gauge>>,
}

impl Default for Metrics {
    fn default() -> Self {
        // The process metrics keep their usual names; everything else is the operator's own.
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("neuron_dra_operator");
        registry.register("build", "The operator's version and the commit it was built from", build_info());
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without leader election), else 0",
            leader.clone(),
        );
        // Every per-config gauge is registered through here, so a deleted config's series all go (`forget`).
        let mut per_config = Vec::new();
        let mut config_gauge = |registry: &mut Registry, name: &str, help: &str| {
            let family = Family::<ConfigLabels, Gauge>::default();
            registry.register(name, help, family.clone());
            per_config.push(family.clone());
            family
        };
        let reconciles = Family::<ConfigLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]);
        let api_requests = Family::<RequestLabels, Counter>::default();
        let template_available = Family::<TemplateLabels, Gauge>::default();
        let template_allocated = Family::<TemplateLabels, Gauge>::default();
        let condition = Family::<ConditionLabels, Gauge>::default();
        registry.register("reconciles", "Reconciles per config", reconciles.clone());
        registry.register("reconcile_errors", "Failed reconciles by error category", reconcile_errors.clone());
        registry.register("reconcile_duration_seconds", "Time one reconcile takes", reconcile_duration.clone());
        let managed_objects = config_gauge(registry, "managed_objects", "Objects a config owns");
        registry.register(
            "api_requests",
            "Requests this process sent to the API server, by verb and resource",
            api_requests.clone(),
        );
        let nodes = config_gauge(registry, "nodes", "Nodes a config selects");
        let devices = config_gauge(registry, "devices", "Neuron devices on the nodes a config selects");
        let unhealthy_devices = config_gauge(registry, "unhealthy_devices", "Unhealthy Neuron devices per config");
        registry.register(
            "template_available",
            "How many more claims of a profile's template the config's nodes can satisfy now",
            template_available.clone(),
        );
        registry.register(
            "template_allocated",
            "Claims made from a profile's template that hold devices now",
            template_allocated.clone(),
        );
        let driver_desired_nodes =
            config_gauge(registry, "driver_desired_nodes", "Nodes that should run a config's kubelet plugin");
        let driver_ready_nodes =
            config_gauge(registry, "driver_ready_nodes", "Nodes whose kubelet plugin pod is ready");
        let driver_updated_nodes =
            config_gauge(registry, "driver_updated_nodes", "Nodes running a config's current kubelet plugin version");
        let driver_rollout_halted = config_gauge(
            registry,
            "driver_rollout_halted",
            "1 while a config's stepped plugin rollout is halted, else 0",
        );
        let templates = config_gauge(registry, "templates", "ResourceClaimTemplates a config has in place");
        registry.register("config_condition", "1 when a config's condition is True, else 0", condition.clone());
        let remediation_failing_nodes = config_gauge(
            registry,
            "remediation_failing_nodes",
            "Selected nodes reporting a Neuron hardware problem, with a remediation policy",
        );
        let remediated_nodes =
            config_gauge(registry, "remediated_nodes", "Nodes whose Neuron devices a config's remediation taints now");
        let remediation_held_back_nodes = config_gauge(
            registry,
            "remediation_held_back_nodes",
            "Failing nodes a config's remediation leaves untainted because its budget is spent",
        );
        let team_quota_devices = Family::<TeamLabels, Gauge>::default();
        let team_used_devices = Family::<TeamLabels, Gauge>::default();
        registry.register(
            "team_quota_devices",
            "A team namespace's device budget (spec.quotas), per config",
            team_quota_devices.clone(),
        );
        registry.register(
            "team_used_devices",
            "Devices the claims of a team namespace hold, as its budget's ResourceQuota counts them",
            team_used_devices.clone(),
        );
        Self {
            registry: root,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            managed_objects,
            api_requests,
            nodes,
            devices,
            unhealthy_devices,
            template_available,
            template_allocated,
            driver_desired_nodes,
            driver_ready_nodes,
            driver_updated_nodes,
            driver_rollout_halted,
            templates,
            condition,
            remediation_failing_nodes,
            remediated_nodes,
            remediation_held_back_nodes,
            team_quota_devices,
            team_used_devices,
            leader,
            team_namespaces: Mutex::default(),
            per_config,
        }
    }
}

impl Metrics {
    /// Drops a deleted config's series of the counters and gauges labelled by config alone.
    /// Removes every series of a config that is gone: its per-config gauges, its conditions, and (when its spec
    /// still validates, so its templates are known) its templates' room.
    pub fn forget(&self, config: &str, validated: Option<&ValidatedConfig>) {
        let labels = ConfigLabels { config: config.to_string() };
        self.reconciles.remove(&labels);
        for gauge in &self.per_config {
            gauge.remove(&labels);
        }
        for type_ in crate::logic::status::ConditionType::ALL {
            self.condition.remove(&ConditionLabels { config: config.into(), condition: type_.as_str().into() });
        }
        for claim in validated.map(|v| v.claims.as_slice()).unwrap_or_default() {
            let labels = TemplateLabels {
                config: config.into(),
                profile: claim.profile.clone(),
                template: claim.template.clone(),
            };
            self.template_available.remove(&labels);
            self.template_allocated.remove(&labels);
        }
        self.record_teams(config, &[]);
    }

    /// The budget gauges of a config's team namespaces; those no longer listed lose their series.
    fn record_teams(&self, config: &str, teams: &[TeamStatus]) {
        let mut known = self.team_namespaces.lock().expect("not poisoned");
        let listed: BTreeSet<String> = teams.iter().map(|t| t.namespace.clone()).collect();
        let labels = |namespace: &str| TeamLabels { config: config.into(), namespace: namespace.into() };
        for gone in known.get(config).into_iter().flatten().filter(|ns| !listed.contains(*ns)) {
            self.team_quota_devices.remove(&labels(gone));
            self.team_used_devices.remove(&labels(gone));
        }
        for team in teams {
            self.team_quota_devices.get_or_create(&labels(&team.namespace)).set(team.hard);
            self.team_used_devices.get_or_create(&labels(&team.namespace)).set(team.used.unwrap_or(0));
        }
        if listed.is_empty() {
            known.remove(config);
        } else {
            known.insert(config.to_string(), listed);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }

    /// The capacity gauges of one config's templates.
    pub fn record_capacity(&self, config: &str, validated: &ValidatedConfig, capacity: &[TemplateCapacity]) {
        for (claim, room) in validated.claims.iter().zip(capacity) {
            let labels = TemplateLabels {
                config: config.into(),
                profile: claim.profile.clone(),
                template: room.template.clone(),
            };
            self.template_available.get_or_create(&labels).set(room.available);
            self.template_allocated.get_or_create(&labels).set(room.allocated);
        }
    }

    /// Sets every per-config gauge from the status the config is about to get; the alerts and the dashboard read
    /// these. A part the status lacks (no driver yet) reads 0.
    pub fn record_status(&self, config: &str, status: &NeuronDRAConfigStatus) {
        let labels = ConfigLabels { config: config.to_string() };
        let devices = status.devices.clone().unwrap_or_default();
        self.nodes.get_or_create(&labels).set(devices.nodes);
        self.devices.get_or_create(&labels).set(devices.total);
        self.unhealthy_devices.get_or_create(&labels).set(devices.unhealthy);
        let driver = status.driver.clone().unwrap_or_default();
        self.driver_desired_nodes.get_or_create(&labels).set(driver.desired_nodes.into());
        self.driver_ready_nodes.get_or_create(&labels).set(driver.ready_nodes.into());
        self.driver_updated_nodes.get_or_create(&labels).set(driver.updated_nodes.into());
        let halted = driver.rollout.is_some_and(|r| r.state.halted());
        self.driver_rollout_halted.get_or_create(&labels).set(i64::from(halted));
        self.templates.get_or_create(&labels).set(status.templates.as_ref().map_or(0, |t| t.count));
        let remediation = status.remediation.clone().unwrap_or_default();
        self.remediation_failing_nodes.get_or_create(&labels).set(remediation.failing_nodes);
        self.remediated_nodes.get_or_create(&labels).set(remediation.remediated);
        self.remediation_held_back_nodes.get_or_create(&labels).set(remediation.held_back);
        for condition in &status.conditions {
            let labels = ConditionLabels { config: config.to_string(), condition: condition.type_.clone() };
            self.condition.get_or_create(&labels).set(i64::from(condition.status == "True"));
        }
        self.record_teams(config, &status.teams);
    }

    /// Counts one outgoing API request.
    pub fn record_request(&self, request: &http::Request<Body>) {
        self.api_requests.get_or_create(&classify_request(request.method(), request.uri())).inc();
    }
}

/// Readiness as `/readyz` reports it: the caches are synced (or this replica is a standby).
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Logs to stderr, as JSON when asked, filtered by `--log-level`, else `RUST_LOG`, else `info` (the lease
/// manager's per-renewal lines only from `warn`). A `--log-level` that is not a filter is an error.
pub fn init_logging(json: bool, level: Option<&str>) -> anyhow::Result<()> {
    let filter = match level {
        Some(level) => tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|e| anyhow::anyhow!("--log-level {level:?} is not a log level or filter: {e}"))?,
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_lease_manager=warn")),
    };
    // Colours only on a terminal: logs written to a file or collected from a container stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    Ok(())
}

/// Seconds as a histogram observation.
pub fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

/// The commit the binary was built from: `NEURON_DRA_OPERATOR_REVISION` at build time (hack/release.sh and the
/// Dockerfile set it), else `unknown`.
pub const REVISION: &str = match option_env!("NEURON_DRA_OPERATOR_REVISION") {
    Some(revision) => revision,
    None => "unknown",
};

/// `neuron_dra_operator_build_info{version, revision} 1`, the series dashboards join on to show what runs.
fn build_info() -> Info<Vec<(&'static str, &'static str)>> {
    Info::new(vec![("version", env!("CARGO_PKG_VERSION")), ("revision", REVISION)])
}

mod process;
mod requests;
pub use requests::{RequestLabels, classify_request};
#[cfg(test)]
mod tests;
