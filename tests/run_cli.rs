//! `neuron-dra-operator run` as a user starts it: what it says when it cannot run, and what its logs look like.

mod support {
    pub mod cluster;
}

use std::process::{Command, Stdio};
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
    let operator = Operator::start(OperatorOptions { test_id: &id, lease: &id, extra: &[] });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !operator.log_text().contains("caches synced") {
        assert!(Instant::now() < deadline, "the operator never synced: {}", operator.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = operator.log_text();
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_neuron-dra-operator"))
        .args(["run", "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"])
        .arg("--leader-elect=false")
        .args(["--config-selector", &format!("{TEST_LABEL}={id}"), "--log-level", "info"])
        .env("KUBECONFIG", operator_kubeconfig(&dir))
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    while !text().contains("caches synced") {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("no info line with --log-level info and RUST_LOG=error: {}", text());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
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

/// Waits until the log file shows synced caches; panics with the log when the process exits or time runs out.
fn wait_synced(child: &mut std::process::Child, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    while !text().contains("caches synced") {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the operator never synced: {}", text());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `--kubeconfig` and `--context` pick the cluster and the credentials with no KUBECONFIG set; a context the file
/// does not have is refused in one line that names it.
#[test]
fn kubeconfig_and_context_flags_pick_the_credentials() {
    let id = unique("kubeconfigflag");
    let dir = std::env::temp_dir().join(format!("ndo-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = operator_kubeconfig(&dir); // its one context is `operator`
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
    let mut child =
        operator("operator").stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    wait_synced(&mut child, &log);
    let _ = child.kill();
    let _ = child.wait();
}

/// `--log-format json` writes one JSON object per line (what the shipped manifests pass).
#[test]
fn log_format_json_writes_json_lines() {
    let id = unique("jsonlog");
    let operator = Operator::start(OperatorOptions { test_id: &id, lease: &id, extra: &["--log-format", "json"] });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !operator.log_text().contains("caches synced") {
        assert!(Instant::now() < deadline, "the operator never synced: {}", operator.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = operator.log_text();
    for line in log.lines().filter(|l| !l.is_empty()) {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(entry["level"].is_string() && entry["timestamp"].is_string(), "{line}");
    }
}
