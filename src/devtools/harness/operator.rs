//! The operator binary as a child process, as the tests and benchmarks run it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{
    OPERATOR_NAMESPACE, OPERATOR_SA, TEST_LABEL, https_get, install, metrics_reader_token, parse_writes, plain_get,
    service_account_kubeconfig, unique,
};

/// The operator binary Cargo built beside the running test or benchmark: `target/<profile>/deps/<test>-<hash>` runs
/// `target/<profile>/neuron-dra-operator`.
fn operator_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps").join("neuron-dra-operator")
}

/// The operator binary running as a child process under the shipped RBAC.
pub struct Operator {
    child: Option<Child>,
    /// The ports it bound, read from its log on first use.
    ports: OnceLock<(u16, u16)>,
    pub log: PathBuf,
}

pub struct OperatorOptions<'a> {
    /// Value of the `neurondra.io/test` label of the configs it manages.
    pub test_id: &'a str,
    /// Lease name; replicas of one test share it.
    pub lease: &'a str,
    pub extra: &'a [&'a str],
}

impl Operator {
    pub fn start(options: OperatorOptions) -> Operator {
        install();
        Operator::start_as(options, OPERATOR_NAMESPACE, OPERATOR_SA)
    }

    /// Runs under another installation's ServiceAccount, with its Lease in that installation's namespace.
    pub fn start_as(options: OperatorOptions, namespace: &str, service_account: &str) -> Operator {
        let dir = std::env::temp_dir().join(format!("ndo-{}", options.test_id));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = service_account_kubeconfig(&dir, namespace, service_account);
        Operator::start_with_kubeconfig(options, namespace, &kubeconfig)
    }

    /// Runs with a given kubeconfig (the benchmark's replay server), its Lease in `namespace`.
    pub fn start_with_kubeconfig(options: OperatorOptions, namespace: &str, kubeconfig: &Path) -> Operator {
        let dir = std::env::temp_dir().join(format!("ndo-{}", options.test_id));
        std::fs::create_dir_all(&dir).unwrap();
        // Port 0: the kernel picks and the operator logs the address. A port picked here and freed before the
        // operator binds it can be taken meanwhile by any outgoing connection (it happened in CI).
        let log = dir.join(format!("{}.log", unique("operator")));
        let child = Command::new(operator_binary())
            .args(["run", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"])
            .args(["--config-selector", &format!("{TEST_LABEL}={}", options.test_id)])
            .args(["--lease-namespace", namespace, "--lease-name", options.lease, "--lease-duration", "6s"])
            .args(options.extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,neuron_dra_operator=debug,kube_lease_manager=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("operator starts");
        Operator { child: Some(child), ports: OnceLock::new(), log }
    }

    /// `/metrics`, HTTPS.
    pub fn port(&self) -> u16 {
        self.bound_ports().0
    }

    /// `/healthz` and `/readyz`, plain HTTP.
    pub fn probe_port(&self) -> u16 {
        self.bound_ports().1
    }

    /// The metrics and probe ports from the operator's "serving ..." log lines; waits for both (they are bound
    /// before anything else starts, so a few seconds at most).
    fn bound_ports(&self) -> (u16, u16) {
        *self.ports.get_or_init(|| {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let log = self.log_text();
                let port_of = |marker: &str| {
                    let line = log.lines().find(|line| line.contains(marker))?;
                    line.split_once("address=")?.1.split_whitespace().next()?.rsplit(':').next()?.parse().ok()
                };
                if let (Some(metrics), Some(probes)) = (port_of("serving /metrics"), port_of("serving /healthz")) {
                    return (metrics, probes);
                }
                assert!(Instant::now() < deadline, "the operator never logged its ports; its log:\n{log}");
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    }

    /// GET a path: `/metrics` over HTTPS as the tests' scraper, anything else (the probes) over plain HTTP on the
    /// probe port; None while it does not answer.
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        if path.starts_with("/metrics") {
            self.metrics_get(Some(&metrics_reader_token()))
        } else {
            plain_get(self.probe_port(), path)
        }
    }

    /// GET `/metrics` over HTTPS with a bearer token, or none.
    pub fn metrics_get(&self, token: Option<&str>) -> Option<(u16, String)> {
        https_get(&format!("https://127.0.0.1:{}/metrics", self.port()), token)
    }

    /// The metrics text; empty while the server does not answer. Any answer but 200 panics, so a refused scrape
    /// can never read as "no requests".
    pub fn metrics(&self) -> String {
        match self.http_get("/metrics") {
            Some((200, body)) => body,
            Some((code, body)) => panic!("GET /metrics answered {code}: {body}"),
            None => String::new(),
        }
    }

    /// Write requests (create/update/patch/delete) this operator sent, leases excluded.
    pub fn writes(&self) -> u64 {
        parse_writes(&self.metrics(), false)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// SIGTERM, then wait for a graceful exit.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// SIGKILL: the process dies mid-work.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}
