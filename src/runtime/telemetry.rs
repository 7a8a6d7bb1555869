//! Logs, Prometheus metrics, the client's request counters, and the readiness `/readyz` reports (`server` serves
//! them).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::{NeuronDRAConfigStatus, TeamStatus, TemplateCapacity};
use crate::logic::validate::ValidatedConfig;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry};

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
        let mut metrics = Self::unregistered();
        metrics.register();
        metrics
    }
}

/// The buckets of `reconcile_duration_seconds`.
const RECONCILE_SECONDS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Registers metrics in one registry; each gauge labelled by config alone through `config_gauge`, so that a deleted
/// config's series all go (`forget`).
struct Registrar<'a> {
    registry: &'a mut Registry,
    per_config: Vec<Family<ConfigLabels, Gauge>>,
}

impl Registrar<'_> {
    /// Registers a handle on `metric`: what is recorded through the field is what `/metrics` shows.
    fn metric(&mut self, name: &str, help: &str, metric: &(impl Metric + Clone)) {
        self.registry.register(name, help, metric.clone());
    }

    fn config_gauge(&mut self, name: &str, help: &str, gauge: &Family<ConfigLabels, Gauge>) {
        self.metric(name, help, gauge);
        self.per_config.push(gauge.clone());
    }
}

impl Metrics {
    /// Every metric at zero, in no registry yet.
    fn unregistered() -> Self {
        Self {
            registry: Registry::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(RECONCILE_SECONDS),
            managed_objects: Family::default(),
            api_requests: Family::default(),
            nodes: Family::default(),
            devices: Family::default(),
            unhealthy_devices: Family::default(),
            template_available: Family::default(),
            template_allocated: Family::default(),
            driver_desired_nodes: Family::default(),
            driver_ready_nodes: Family::default(),
            driver_updated_nodes: Family::default(),
            driver_rollout_halted: Family::default(),
            templates: Family::default(),
            condition: Family::default(),
            remediation_failing_nodes: Family::default(),
            remediated_nodes: Family::default(),
            remediation_held_back_nodes: Family::default(),
            team_quota_devices: Family::default(),
            team_used_devices: Family::default(),
            leader: Gauge::default(),
            team_namespaces: Mutex::default(),
            per_config: Vec::new(),
        }
    }

    /// Registers every metric, in the order `/metrics` lists them.
    fn register(&mut self) {
        // The process metrics keep their usual names; everything else is the operator's own.
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let mut registrar =
            Registrar { registry: root.sub_registry_with_prefix("neuron_dra_operator"), per_config: Vec::new() };
        registrar.registry.register("build", "The operator's version and the commit it was built from", build_info());
        let leader_help = "1 while this replica holds the leader Lease (or runs without leader election), else 0";
        registrar.metric("leader", leader_help, &self.leader);
        self.register_reconciles(&mut registrar);
        self.register_devices(&mut registrar);
        self.register_driver(&mut registrar);
        self.register_remediation(&mut registrar);
        self.register_teams(&mut registrar);
        self.per_config = registrar.per_config;
        self.registry = root;
    }

    /// The reconciles, their errors and time, the objects they own and the API requests they send.
    fn register_reconciles(&self, r: &mut Registrar) {
        r.metric("reconciles", "Reconciles per config", &self.reconciles);
        r.metric("reconcile_errors", "Failed reconciles by error category", &self.reconcile_errors);
        r.metric("reconcile_duration_seconds", "Time one reconcile takes", &self.reconcile_duration);
        r.config_gauge("managed_objects", "Objects a config owns", &self.managed_objects);
        let requests_help =
            "Requests this process sent to the API server, by verb, resource and the status code of the answer";
        r.metric("api_requests", requests_help, &self.api_requests);
    }

    /// The selected nodes' devices and their health, and the room of each profile's template.
    fn register_devices(&self, r: &mut Registrar) {
        r.config_gauge("nodes", "Nodes a config selects", &self.nodes);
        r.config_gauge("devices", "Neuron devices on the nodes a config selects", &self.devices);
        r.config_gauge("unhealthy_devices", "Unhealthy Neuron devices per config", &self.unhealthy_devices);
        let available_help = "How many more claims of a profile's template the config's nodes can satisfy now";
        r.metric("template_available", available_help, &self.template_available);
        let allocated_help = "Claims made from a profile's template that hold devices now";
        r.metric("template_allocated", allocated_help, &self.template_allocated);
    }

    /// The kubelet plugin's rollout, the templates in place and the config's conditions.
    fn register_driver(&self, r: &mut Registrar) {
        let desired_help = "Nodes that should run a config's kubelet plugin";
        r.config_gauge("driver_desired_nodes", desired_help, &self.driver_desired_nodes);
        r.config_gauge("driver_ready_nodes", "Nodes whose kubelet plugin pod is ready", &self.driver_ready_nodes);
        let updated_help = "Nodes running a config's current kubelet plugin version";
        r.config_gauge("driver_updated_nodes", updated_help, &self.driver_updated_nodes);
        let halted_help = "1 while a config's stepped plugin rollout is halted, else 0";
        r.config_gauge("driver_rollout_halted", halted_help, &self.driver_rollout_halted);
        r.config_gauge("templates", "ResourceClaimTemplates a config has in place", &self.templates);
        r.metric("config_condition", "1 when a config's condition is True, else 0", &self.condition);
    }

    /// What a remediation policy finds failing, taints, and holds back.
    fn register_remediation(&self, r: &mut Registrar) {
        let failing_help = "Selected nodes reporting a Neuron hardware problem, with a remediation policy";
        r.config_gauge("remediation_failing_nodes", failing_help, &self.remediation_failing_nodes);
        let remediated_help = "Nodes whose Neuron devices a config's remediation taints now";
        r.config_gauge("remediated_nodes", remediated_help, &self.remediated_nodes);
        let held_back_help = "Failing nodes a config's remediation leaves untainted because its budget is spent";
        r.config_gauge("remediation_held_back_nodes", held_back_help, &self.remediation_held_back_nodes);
    }

    /// The team namespaces' device budgets and use.
    fn register_teams(&self, r: &mut Registrar) {
        let quota_help = "A team namespace's device budget (spec.quotas), per config";
        r.metric("team_quota_devices", quota_help, &self.team_quota_devices);
        let used_help = "Devices the claims of a team namespace hold, as its budget's ResourceQuota counts them";
        r.metric("team_used_devices", used_help, &self.team_used_devices);
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

    /// Counts one API request by its verb, resource and the status code of its answer (None: no answer came).
    pub fn record_request(&self, method: &http::Method, uri: &http::Uri, status: Option<http::StatusCode>) {
        self.api_requests.get_or_create(&classify_request(method, uri, status)).inc();
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
pub use requests::{NO_ANSWER, RequestLabels, classify_request};
#[cfg(test)]
mod tests;
