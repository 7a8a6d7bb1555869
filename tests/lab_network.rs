//! The local cluster keeps to network namespaces of its own (docs/local-node.md "Addresses"): a node brought up and
//! down leaves the host's namespace with the same links, addresses, routes and iptables rules, and while
//! it runs a pod, serves `kubectl logs` and `exec`, and answers a kubectl on the host (through the loopback forward),
//! every TCP connection of the host's namespace goes to 127.0.0.0/8.
//!
//! `#[ignore]`d like every real-node test; `make test-node` runs it (it starts and removes a node of its own, node-9).

mod support {
    pub mod cluster;
    pub mod node;
    pub mod scenario;
}

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use support::cluster::{kubeconfig, kubectl, repo};
use support::node;

/// A node of this test only: its own number, so its bridge, pod subnet and lab link are its own.
const NODE: &str = "node-9";
const NAMESPACE: &str = "lab-network";

/// The inode of a network namespace file (`/proc/<pid>/ns/net`, `/run/netns/<name>`): equal for the same namespace.
fn namespace_of(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// A process in the host's network namespace: this test's own when it runs there, else its nearest ancestor outside
/// the lab's namespace (`make test` runs the tests inside it through `hack/lab.sh exec`, from a shell on the host).
/// Every process of the lab itself, the loopback forward included once it has made its socket, is in the lab's.
fn host_pid() -> u32 {
    let out = Command::new(repo("hack/lab.sh")).arg("name").output().expect("hack/lab.sh name");
    let lab = namespace_of(&format!("/run/netns/{}", String::from_utf8_lossy(&out.stdout).trim()))
        .expect("the lab's namespace: run the control plane first");
    let mut pid = std::process::id();
    while namespace_of(&format!("/proc/{pid}/ns/net")) == Some(lab) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("an ancestor's stat");
        // `pid (comm) state ppid ...`: comm may hold spaces, so the fields after its closing parenthesis.
        pid = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)?.parse().ok()).expect("a ppid");
        assert!(pid > 1, "no ancestor of this test outside the lab's namespace");
    }
    pid
}

/// `CMD ARGS` in the host's network namespace, whichever namespace the test runs in.
fn in_host(cmd: &str, args: &[&str]) -> String {
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{}/ns/net", host_pid()))
        .args(["--", cmd])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("nsenter {cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the lab must never change in the host's namespace, one line per item: links, addresses, routes of every
/// table, and every iptables and ip6tables rule (packet counters left out).
fn host_network() -> Vec<String> {
    let mut lines = Vec::new();
    for (label, cmd, args) in [
        ("link", "ip", &["-o", "link", "show"][..]),
        ("addr", "ip", &["-o", "addr", "show"]),
        ("route4", "ip", &["-4", "route", "show", "table", "all"]),
        ("route6", "ip", &["-6", "route", "show", "table", "all"]),
        ("iptables", "iptables-save", &[]),
        ("ip6tables", "ip6tables-save", &[]),
    ] {
        for line in in_host(cmd, args).lines() {
            // iptables-save's comments carry the time; `:CHAIN POLICY [packets:bytes]` counts packets.
            if line.starts_with('#') {
                continue;
            }
            let line = match line.split_once(" [") {
                Some((chain, _)) if line.starts_with(':') => chain,
                _ => line,
            };
            lines.push(format!("{label}: {line}"));
        }
    }
    lines
}

/// The lines of `after` that are not in `before` and the other way round, for a readable failure.
fn difference(before: &[String], after: &[String]) -> String {
    let added: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
    let removed: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
    format!("added {added:#?}\nremoved {removed:#?}")
}

/// A `/proc/net/tcp{,6}` address (`0100007F:1F90`): hex of the address as the kernel stores it (32-bit words in
/// host byte order), and the port.
fn parse_address(field: &str) -> Option<(IpAddr, u16)> {
    let (address, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let bytes: Vec<u8> = (0..address.len() / 8)
        .map(|i| u32::from_str_radix(&address[i * 8..i * 8 + 8], 16).map(u32::to_ne_bytes))
        .collect::<Result<Vec<_>, _>>()
        .ok()?
        .concat();
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some((ip, port))
}

fn loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// The remote ends of the TCP sockets of the namespace of `pid` that are not listening (state 0A).
fn connections(pid: u32) -> Vec<(IpAddr, u16)> {
    let mut remotes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 3 && fields[3] != "0A" {
                remotes.extend(parse_address(fields[2]));
            }
        }
    }
    remotes
}

/// Samples the host namespace's TCP connections every 20 ms until stopped; returns every remote end seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(IpAddr, u16)>>,
}

impl Sampler {
    fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let host = host_pid();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                for remote in connections(host) {
                    if !seen.contains(&remote) {
                        seen.push(remote);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> Vec<(IpAddr, u16)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn node_sh(args: &[&str]) {
    let status = Command::new(repo("hack/node.sh"))
        .args(args)
        // Only what a pod needs, and no instance type: no config's plugin DaemonSet selects it.
        .env("NODE_IMAGES", "pause busybox")
        .env("NODE_INSTANCE_TYPE", "")
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "hack/node.sh {}", args.join(" "));
}

/// Brings the node down again when the test fails half way.
struct NodeGuard;

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let args = ["delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false"];
        let _ = support::cluster::kubectl_with(&kubeconfig(), &args, None);
        node_sh(&["down", NODE]);
    }
}

/// The lines of `/proc/self/mountinfo` and the network namespaces that name the node: what `down` must remove.
fn node_leftovers() -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let needle = format!("/{NODE}");
    let mut left: Vec<String> = mounts.lines().filter(|l| l.contains(&needle)).map(str::to_string).collect();
    left.extend(in_host("ip", &["netns", "list"]).lines().filter(|l| l.contains(NODE)).map(str::to_string));
    left
}

#[test]
#[ignore = "needs the real nodes: make test-node"]
fn a_node_leaves_the_host_namespace_unchanged_and_its_traffic_stays_on_loopback() {
    let before = host_network();
    let sampler = Sampler::start();
    let guard = NodeGuard;
    node_sh(&["up", NODE]);
    let with_node = host_network();
    assert!(
        before == with_node,
        "the host's network changed when {NODE} came up:\n{}",
        difference(&before, &with_node)
    );

    // A pod on the node, its logs and an exec: the API server reaches the kubelet, the kubelet the API server.
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: sleeper, namespace: {NAMESPACE}}}\nspec:\n  nodeName: {NODE}\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {}\n    \
         imagePullPolicy: IfNotPresent\n    command: [sh, -c, 'echo up; exec sleep 3600']\n",
        node::image("busybox")
    );
    kubectl(&["create", "namespace", NAMESPACE]);
    support::cluster::kubectl_with(&kubeconfig(), &["apply", "-f", "-"], Some(&pod)).unwrap();
    kubectl(&["-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s"]);
    assert_eq!(kubectl(&["-n", NAMESPACE, "logs", "sleeper"]).trim(), "up");
    assert_eq!(node::exec(NAMESPACE, "sleeper", &["echo", "exec"]).trim(), "exec");
    // A kubectl in the host's namespace reaches the API server through the loopback forward: the sampler has
    // something to see, so it is known to be looking. A plain GET's connection can come and go between two samples
    // (and leaves no TIME_WAIT behind here), so a watch the server ends after 2 s holds one open.
    let kubeconfig = kubeconfig();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let nodes = in_host("kubectl", &["--kubeconfig", kubeconfig, "get", "node", NODE, "-o", "name"]);
    assert_eq!(nodes.trim(), format!("node/{NODE}"));
    let watched =
        in_host("kubectl", &["--kubeconfig", kubeconfig, "get", "--raw", "/api/v1/nodes?watch=1&timeoutSeconds=2"]);
    assert!(watched.contains(NODE), "the host kubectl's watch saw {NODE}: {watched}");

    drop(guard);
    let seen = sampler.finish();
    let after = host_network();
    assert!(before == after, "the host's network after {NODE} went down:\n{}", difference(&before, &after));
    assert!(node_leftovers().is_empty(), "{NODE} left behind: {:#?}", node_leftovers());

    let outside: Vec<_> = seen.iter().filter(|(ip, _)| !loopback(*ip)).collect();
    assert!(outside.is_empty(), "the host's namespace had TCP connections outside 127.0.0.0/8: {outside:?}");
    assert!(!seen.is_empty(), "the sampler saw no connection at all, not even the host kubectl's");
}

#[test]
fn proc_net_tcp_addresses_are_read_as_the_kernel_writes_them() {
    let v4 = parse_address("0100007F:1F90").unwrap();
    assert_eq!(v4, (IpAddr::V4(Ipv4Addr::LOCALHOST), 8080));
    let v6 = parse_address("00000000000000000000000001000000:0050").unwrap();
    assert_eq!(v6, (IpAddr::V6(Ipv6Addr::LOCALHOST), 80));
    let mapped = parse_address("0000000000000000FFFF00000100007F:0050").unwrap();
    assert!(loopback(mapped.0));
    let outside = parse_address("020200C0:01BB").unwrap();
    assert_eq!(outside.0, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)));
    assert!(!loopback(outside.0));
}
