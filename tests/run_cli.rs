//! `neuron-dra-operator run` as a user starts it: what it says when it cannot run, and what its logs look like.

mod support {
    pub mod cluster;
}

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::cluster::{Operator, OperatorOptions, operator_kubeconfig, unique};

#[test]
fn run_without_the_lease_namespace_says_what_is_missing_in_one_line() {
    let id = unique("nolease");
    let dir = std::env::temp_dir().join(format!("ndo-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = operator_kubeconfig(&dir);
    let missing = format!("{id}-system");
    let mut child = Command::new(env!("CARGO_BIN_EXE_neuron-dra-operator"))
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
