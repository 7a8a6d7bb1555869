//! One timed run: with the scheduler stopped, the pods and (by the resourceclaim controller) their claims; then the
//! scheduler started and timed until every pod is bound or the run's limit passes. Its own figures come from its
//! /metrics and its CPU from /proc, both of this run alone: it is started afresh for each, and its CPU is counted
//! from its first binding, so its start-up (informers, caches) is left out of every run alike.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use neuron_dra_operator::devtools::simulate::fleet::INSTANCE_TYPE_LABEL;
use serde_json::json;

pub const NAMESPACE: &str = "bench-sched";
const TIMEOUT: Duration = Duration::from_secs(600);
/// How often a run looks at its pods: the resolution of its times (a run that binds within one look is counted as
/// taking one).
const POLL: Duration = Duration::from_millis(100);

/// How long a run waits for its pods to bind (BENCH_SCHED_RUN_SECONDS, default 120): a shape that cannot bind on a
/// busy fleet is reported with its unbound pods instead of holding the bench for the API-wait timeout.
fn run_limit() -> Duration {
    let seconds = std::env::var("BENCH_SCHED_RUN_SECONDS").map_or(120, |s| s.parse().expect("BENCH_SCHED_RUN_SECONDS"));
    Duration::from_secs(seconds)
}

/// What one run measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    /// Pods bound per second, from the first binding to the last (the scheduler's start-up left out).
    pub pods_per_second: f64,
    /// The scheduler's mean scheduling attempt (ms), `scheduler_scheduling_attempt_duration_seconds`.
    pub attempt_ms: f64,
    /// Mean DynamicResources Filter call (µs, one node), `scheduler_plugin_execution_duration_seconds` (sampled).
    pub filter_us: f64,
    /// The scheduler's CPU seconds from its first binding to the end of the run.
    pub scheduler_cpu: f64,
    /// Pods bound, and left unbound at the run's limit.
    pub bound: usize,
    pub unbound: usize,
    /// Seconds from the scheduler's start to each pod's binding: median and 95th percentile of the bound pods.
    pub bind_median: f64,
    pub bind_p95: f64,
}

/// Times `pods` pods of `template` on nodes of `instance_type`.
pub async fn timed(client: &Client, template: &str, instance_type: &str, pods: usize) -> Figures {
    component("stop-component");
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(0..pods)
        .map(|i| {
            let pod_api = pod_api.clone();
            async move { pod_api.create(&PostParams::default(), &pod(template, instance_type, i)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("creating the pods");
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    wait_until(|| async { claims.list_metadata(&ListParams::default()).await.unwrap().items.len() >= pods }).await;

    component("start-component");
    let pid = scheduler_pid();
    let profile = start_profile(template);
    let bindings = bound(&pod_api, pods, pid).await;
    let cpu = cpu_seconds(pid) - bindings.cpu_at_first;
    let (first, last, unbound) = (bindings.first, bindings.last, pods - bindings.after.len());
    if let Some(mut curl) = profile {
        // Before the next run stops the scheduler, which would cut the profile short.
        let _ = curl.wait();
    }
    let (attempt_ms, filter_us) = scheduler_metrics();
    let rate = if unbound == 0 && pods > 1 {
        (pods - 1) as f64 / (last - first).as_secs_f64().max(POLL.as_secs_f64())
    } else {
        0.0
    };
    clean(client).await;
    let mut after = bindings.after;
    after.sort_by(f64::total_cmp);
    let quantile =
        |q: f64| after.get(((after.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    Figures {
        pods_per_second: rate,
        attempt_ms,
        filter_us,
        scheduler_cpu: cpu,
        bound: after.len(),
        unbound,
        bind_median: quantile(0.5),
        bind_p95: quantile(0.95),
    }
}

/// The median of each figure over a cell's runs (each taken on its own: the median run of one figure need not be
/// the median run of another).
pub fn median(runs: &[Figures]) -> Figures {
    let of = |figure: fn(&Figures) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(figure).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let bound = of(|f| f.bound as f64) as usize;
    Figures {
        pods_per_second: of(|f| f.pods_per_second),
        attempt_ms: of(|f| f.attempt_ms),
        filter_us: of(|f| f.filter_us),
        scheduler_cpu: of(|f| f.scheduler_cpu),
        bound,
        // Of the same pods: what the median bound count leaves.
        unbound: runs.first().map_or(0, |f| f.bound + f.unbound).saturating_sub(bound),
        bind_median: of(|f| f.bind_median),
        bind_p95: of(|f| f.bind_p95),
    }
}

fn pod(template: &str, instance_type: &str, i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{template}-{i}"), "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "neurons", "resourceClaimTemplateName": template}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "neurons"}]}}],
        },
    }))
    .expect("a valid pod")
}

/// What the scheduler did with a run's pods, as polled every 100 ms.
struct Bindings {
    /// When the first pod was seen bound, and the last (or the run's limit).
    first: Instant,
    last: Instant,
    /// The scheduler's CPU seconds when the first binding was seen.
    cpu_at_first: f64,
    /// Seconds from the scheduler's start to each bound pod's binding.
    after: Vec<f64>,
}

async fn bound(pods: &Api<Pod>, count: usize, scheduler: u32) -> Bindings {
    let started = Instant::now();
    let limit = run_limit();
    let mut first = None;
    let mut cpu_at_first = cpu_seconds(scheduler);
    let mut seen = std::collections::BTreeMap::new();
    loop {
        let list = pods.list(&ListParams::default()).await.expect("listing pods");
        let now = Instant::now();
        for pod in &list.items {
            if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                let name = pod.metadata.name.clone().unwrap_or_default();
                seen.entry(name).or_insert_with(|| (now - started).as_secs_f64());
            }
        }
        if !seen.is_empty() && first.is_none() {
            first = Some(now);
            cpu_at_first = cpu_seconds(scheduler);
        }
        if seen.len() >= count || started.elapsed() > limit {
            let after = seen.into_values().collect();
            return Bindings { first: first.unwrap_or(now), last: now, cpu_at_first, after };
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Deletes the run's pods and waits until their claims are gone (released, so the next run starts from the
/// occupancy alone).
async fn clean(client: &Client) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    pods.delete_collection(&now, &ListParams::default()).await.expect("deleting pods");
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    wait_until(|| async {
        pods.list_metadata(&ListParams::default()).await.unwrap().items.is_empty()
            && claims.list_metadata(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
}

async fn wait_until<F, Fut>(mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < TIMEOUT, "timed out waiting for the API server");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn state() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/controlplane")
}

/// hack/controlplane.sh's stop-component or start-component of the scheduler.
pub fn component(action: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/controlplane.sh");
    let out = Command::new(script).args([action, "kube-scheduler"]).output().expect("hack/controlplane.sh");
    // Stopping a stopped scheduler is fine (the first run finds it running, later ones stopped).
    assert!(out.status.success() || action == "stop-component", "{action}: {}", String::from_utf8_lossy(&out.stderr));
}

fn scheduler_pid() -> u32 {
    std::fs::read_to_string(state().join("kube-scheduler.pid")).unwrap().trim().parse().unwrap()
}

/// Seconds of CPU (user + system) the process has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// BENCH_SCHED_PROFILE=DIR: a CPU profile of the scheduler from its start, BENCH_SCHED_PROFILE_SECONDS long (25),
/// into DIR/<template>-<n>.pprof (the control plane up with SCHEDULER_PROFILING=1). Opt-in: the profile's waiting
/// lengthens the run, though not its timed figures.
fn start_profile(template: &str) -> Option<std::process::Child> {
    let dir = PathBuf::from(std::env::var("BENCH_SCHED_PROFILE").ok()?);
    let seconds: u32 = std::env::var("BENCH_SCHED_PROFILE_SECONDS").map_or(25, |s| s.parse().expect("seconds"));
    std::fs::create_dir_all(&dir).expect("the profile directory");
    let file = (0..).map(|n| dir.join(format!("{template}-{n}.pprof"))).find(|f| !f.exists()).unwrap();
    eprintln!("bench: profiling the scheduler for {seconds} s into {}", file.display());
    let mut curl = scheduler_curl(&format!("debug/pprof/profile?seconds={seconds}"), seconds + 30);
    // The scheduler was just started: its port opens a moment later, and until it has read the client CA it
    // answers the certificate as anonymous (403), so every failure is retried and none is saved as the profile.
    curl.args(["-f", "--retry", "50", "--retry-all-errors", "--retry-delay", "1", "-o"]).arg(file);
    Some(curl.spawn().expect("curl"))
}

/// curl of a path of the scheduler's secure port. It authorizes through the API server (delegated auth): the
/// admin's client certificate, system:masters, may read its /metrics and /debug/pprof.
fn scheduler_curl(path: &str, timeout_seconds: u32) -> Command {
    let args = std::fs::read(state().join("kube-scheduler.args")).unwrap();
    let port = String::from_utf8_lossy(&args)
        .split('\0')
        .find_map(|a| a.strip_prefix("--secure-port=").map(str::to_string))
        .expect("the scheduler's --secure-port");
    let pki = state().join("pki");
    let mut curl = Command::new("curl");
    curl.args(["-sk", "--max-time", &timeout_seconds.to_string(), "--cert"])
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .arg(format!("https://127.0.0.1:{port}/{path}"));
    curl
}

/// The scheduler's mean attempt (ms) and mean DynamicResources Filter call (µs), from its /metrics.
fn scheduler_metrics() -> (f64, f64) {
    let out = scheduler_curl("metrics", 10).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let attempt = mean(&text, "scheduler_scheduling_attempt_duration_seconds", &["result=\"scheduled\""]);
    let filter = mean(
        &text,
        "scheduler_plugin_execution_duration_seconds",
        &["extension_point=\"Filter\"", "plugin=\"DynamicResources\""],
    );
    (attempt * 1e3, filter * 1e6)
}

/// Sum over count of a histogram's series whose labels hold every one of `labels`.
fn mean(text: &str, histogram: &str, labels: &[&str]) -> f64 {
    let total = |suffix: &str| -> f64 {
        let prefix = format!("{histogram}_{suffix}{{");
        text.lines()
            .filter(|l| l.starts_with(&prefix) && labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let count = total("count");
    if count > 0.0 { total("sum") / count } else { 0.0 }
}
