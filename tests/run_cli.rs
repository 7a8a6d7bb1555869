//! `neuron-dra-operator run` as a user starts it: what it says when it cannot run, and what its logs look like.

mod support {
    pub mod cluster;
}

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::cluster::{Operator, OperatorOptions, TEST_LABEL, operator_kubeconfig, unique};

#[test]
fn run_without_the_lease_namespace_says_what_is_missing_in_one_line() {
    let id = unique("nolease");
    let dir = std::env::temp_dir().join(format!("ndo-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = operator_kubeconfig(&dir);
    let missing = format!("{id}-system");
    let mut child = Command::new(env!("CARGO_BIN_EXE_neuron-dra-operator"))
        // The flags' first names, still taken (hidden aliases of --metrics-bind-address and
        // --health-probe-bind-address).
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--probe-addr", "127.0.0.1:0", "--lease-namespace", &missing])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the operator kept running without its lease namespace");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for needle in [missing.as_str(), "does not exist", "--lease-namespace", "--leader-elect=false"] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }
}

#[test]
fn logs_written_to_a_file_carry_no_terminal_colours() {
    let id = unique("plainlog");
    let mut operator = Operator::start(OperatorOptions { test_id: &id, lease: &id, extra: &[] });
    let log = wait_synced(&operator.log.clone(), || operator.is_running());
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains('\u{1b}'), "ANSI escape codes in a log file: {log:?}");
}

/// `--log-level` filters the logs and wins over `RUST_LOG` (the chart's `logLevel` sets it).
#[test]
fn log_level_wins_over_rust_log() {
    let id = unique("loglevel");
    let dir = std::env::temp_dir().join(format!("ndo-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("operator.log");
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_neuron-dra-operator"))
            .args(["run", "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"])
            .arg("--leader-elect=false")
            .args(["--config-selector", &format!("{TEST_LABEL}={id}"), "--log-level", "info"])
            .env("KUBECONFIG", operator_kubeconfig(&dir))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    // "caches synced" is an info line: RUST_LOG=error alone would hide it.
    wait_synced(&log, || child.is_running());
}

#[test]
fn a_log_level_that_is_no_filter_is_refused_in_one_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_neuron-dra-operator"))
        .args(["run", "--log-level", "neuron_dra_operator=loud"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--log-level \"neuron_dra_operator=loud\" is not a log level or filter"), "{stderr}");
}

/// Waits until the operator's log file shows synced caches and returns the log; panics with it when the operator
/// exits (`running` says whether it still runs) or a minute passes.
fn wait_synced(log: &Path, mut running: impl FnMut() -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("caches synced") {
            return text;
        }
        assert!(running(), "the operator exited before its caches synced: {text}");
        assert!(Instant::now() < deadline, "the operator never synced: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An operator process started here, killed when dropped (a failed test leaves none running).
struct Killed(Child);

impl Killed {
    fn is_running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--kubeconfig` and `--context` pick the cluster and the credentials with no KUBECONFIG set: the file's current
/// context points at a server that does not answer, so only an operator that takes `--context` reaches the control
/// plane. A context the file does not have is refused in one line that names it.
#[test]
fn kubeconfig_and_context_flags_pick_the_credentials() {
    let id = unique("kubeconfigflag");
    let dir = std::env::temp_dir().join(format!("ndo-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    // The operator's kubeconfig (its one context is `operator`) with a second context, `unreachable`, made current:
    // nothing listens on 127.0.0.1:1.
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(operator_kubeconfig(&dir)).unwrap()).unwrap();
    let dead_cluster = serde_yaml::from_str("{name: dead, cluster: {server: 'https://127.0.0.1:1'}}").unwrap();
    config["clusters"].as_sequence_mut().unwrap().push(dead_cluster);
    let dead_context = serde_yaml::from_str("{name: unreachable, context: {cluster: dead, user: operator}}").unwrap();
    config["contexts"].as_sequence_mut().unwrap().push(dead_context);
    config["current-context"] = "unreachable".into();
    let kubeconfig = dir.join("two-contexts.kubeconfig");
    std::fs::write(&kubeconfig, serde_yaml::to_string(&config).unwrap()).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let operator = |context: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_neuron-dra-operator"));
        command
            .args(["run", "--kubeconfig", kubeconfig, "--context", context, "--leader-elect=false"])
            .args(["--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"])
            .args(["--config-selector", &format!("{TEST_LABEL}={id}")])
            .env_remove("KUBECONFIG")
            .env("HOME", &dir); // no ~/.kube/config to fall back on
        command
    };

    let output = operator("nowhere").stdout(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--context nowhere"), "{stderr}");

    let log = dir.join("operator.log");
    let mut child = Killed(
        operator("operator").stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap(),
    );
    wait_synced(&log, || child.is_running());
}

/// `--log-format json` writes one JSON object per line (what the shipped manifests pass).
#[test]
fn log_format_json_writes_json_lines() {
    let id = unique("jsonlog");
    let mut operator = Operator::start(OperatorOptions { test_id: &id, lease: &id, extra: &["--log-format", "json"] });
    let log = wait_synced(&operator.log.clone(), || operator.is_running());
    for line in log.lines().filter(|l| !l.is_empty()) {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(entry["level"].is_string() && entry["timestamp"].is_string(), "{line}");
    }
}
