//! `make demo`, the README's first command, end to end on the test phase's control plane and its real node: the
//! demo runs `hack/demo.sh` as a newcomer would (a debug build, as the suite has built it), exits 0 and tells the
//! story the README promises (the config Ready, one unhealthy device, a pod on the real node with its devices);
//! `make demo-down` then removes what the demo added and leaves the control plane and the node running, as found.
//!
//! `#[ignore]`d ("needs the real node"): `make test` runs it with the other real-node tests (`make test-node`).

mod support {
    pub mod cluster;
}

use std::process::{Command, Stdio};

use support::cluster::{self, kubeconfig, kubectl, kubectl_with, repo};

/// Runs `make TARGET` at the repository's root with the debug build the suite has made; its exit status and
/// everything it printed (stdout, then stderr).
fn make(target: &str) -> (bool, String) {
    let out = Command::new("make")
        .args(["--no-print-directory", target])
        .current_dir(repo(""))
        .env("DEMO_PROFILE", "debug")
        .env("DEMO_NODES", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `hack/node.sh ARGS`: whether it succeeded.
fn node_sh(args: &[&str]) -> bool {
    let out = Command::new(repo("hack/node.sh")).args(args).stdin(Stdio::null()).output().unwrap();
    out.status.success() || {
        eprintln!("hack/node.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        false
    }
}

/// Starts node-2 again when dropped, should the test stop it: the real-node tests after this one need both nodes,
/// whether or not this one passed.
struct SecondNode(bool);

impl Drop for SecondNode {
    fn drop(&mut self) {
        let started = !self.0 || node_sh(&["status", "node-2"]) || node_sh(&["up", "node-2"]);
        // A second panic while the test's own unwinds would abort the run: node_sh has printed why.
        assert!(started || std::thread::panicking(), "starting node-2 again");
    }
}

/// The names of `kind` (cluster-scoped, or across all namespaces), sorted.
fn names(kind: &str) -> Vec<String> {
    let listed = kubectl(&["get", kind, "-A", "-o", "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}"]);
    let mut names: Vec<String> = listed.lines().map(str::to_string).collect();
    names.sort();
    names
}

/// The lines of `text` after the first line that contains `heading`, up to the next blank line.
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    let start = text.lines().position(|l| l.contains(heading)).unwrap_or_else(|| panic!("no {heading:?}:\n{text}"));
    text.lines().skip(start + 1).take_while(|l| !l.trim().is_empty()).collect()
}

#[test]
#[ignore = "needs the real node"]
fn make_demo_tells_its_story_and_demo_down_leaves_the_cluster_as_found() {
    cluster::install();
    let node_ready =
        || kubectl(&["get", "node", "node-1", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"]);
    assert_eq!(node_ready(), "True", "the real-node phase starts node-1 before this test");
    // The demo runs on one real node, as a newcomer's machine has: its config keeps the default kubelet directory,
    // which only node-1 binds onto the host's /var/lib/kubelet (docs/local-node.md), so a plugin pod on node-2
    // would register in node-1's directory. node-2 is stopped for the demo and started again after it.
    let second_node = SecondNode(node_sh(&["status", "node-2"]));
    if second_node.0 {
        assert!(node_sh(&["down", "node-2"]), "stopping node-2 (and its Node)");
    }
    let before = (names("namespaces"), names("nodes"), names("neurondraconfigs"), names("clusterrolebindings"));

    let (ok, printed) = make("demo");
    assert!(ok, "make demo failed:\n{printed}");
    // The config Ready (before the fault, its conditions as the demo lists them).
    let conditions = section(&printed, "Device health in the status");
    assert!(conditions.iter().any(|l| l.starts_with("Ready=True")), "{printed}");
    assert!(conditions.iter().any(|l| l.starts_with("ConfigValid=True")), "{printed}");
    // The one device the demo broke, reported as unhealthy.
    let unhealthy: Vec<&str> = conditions.iter().skip_while(|l| **l != "unhealthy devices:").skip(1).copied().collect();
    assert_eq!(unhealthy.len(), 1, "one unhealthy device: {printed}");
    assert!(unhealthy[0].trim().starts_with("demo-trn2-1/") && unhealthy[0].contains("NoExecute"), "{printed}");
    // The pod on the real node, with the 8 devices chat-128k claims, as the claim and the container see them.
    assert!(printed.contains("pod team-b/chat-0 Running on node-1"), "{printed}");
    assert!(printed.contains("allocated (claim)") && printed.contains("seen in the container"), "{printed}");
    let claim = kubectl(&[
        "get",
        "pod",
        "-n",
        "team-b",
        "chat-0",
        "-o",
        "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}",
    ]);
    let allocated = kubectl(&[
        "get",
        "resourceclaim",
        "-n",
        "team-b",
        &claim,
        "-o",
        "jsonpath={.status.allocation.devices.results[*].device}",
    ]);
    assert_eq!(allocated.split_whitespace().count(), 8, "chat-128k claims 8 devices: {allocated}");
    let logs = kubectl(&["logs", "-n", "team-b", "chat-0"]);
    let seen: Vec<&str> = logs.lines().filter(|l| l.starts_with("neuron")).collect();
    assert_eq!(seen.len(), 8, "the container sees the 8 devices: {logs}");
    assert!(seen.iter().all(|device| printed.contains(device)), "the demo shows what the container sees: {printed}");
    assert!(logs.lines().any(|l| l.starts_with("NEURON_RT_VISIBLE_CORES=")), "the driver's environment: {logs}");

    // The operator and the simulated kubelet the demo left running, stopped by demo-down.
    let pids: Vec<String> = ["operator", "kubelet"]
        .iter()
        .map(|name| std::fs::read_to_string(repo(&format!("target/demo/{name}.pid"))).unwrap().trim().to_string())
        .collect();

    let (ok, printed) = make("demo-down");
    assert!(ok, "make demo-down failed:\n{printed}");
    let after = (names("namespaces"), names("nodes"), names("neurondraconfigs"), names("clusterrolebindings"));
    // Namespaces that were terminating before may be gone; nothing the demo added is left.
    let added: Vec<&String> = after.0.iter().filter(|n| !before.0.contains(n)).collect();
    assert!(added.is_empty(), "namespaces the demo left: {added:?}");
    assert_eq!(after.1, before.1, "nodes");
    assert_eq!(after.2, before.2, "configs");
    assert_eq!(after.3, before.3, "cluster role bindings");
    assert_eq!(node_ready(), "True", "demo-down keeps the node it did not start");
    assert!(!repo("target/demo").exists(), "demo-down removes its state");
    for pid in &pids {
        // Gone, or a zombie until `make` (its parent) was reaped; never still running.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z "), "the demo's process {pid} still runs: {state}");
    }
    kubectl_with(&kubeconfig(), &["get", "--raw", "/readyz"], None).expect("the control plane keeps running");

    // The demo applied the install as shipped (with its stand-in image allowed); the tests' allow-list back, and
    // the second node.
    cluster::allow_test_drivers();
    drop(second_node);
}
