//! The real tools the chart, monitoring and bundle tests run: built from Go modules and cached by
//! `hack/tools.sh` (once per machine and version; the script's lock makes parallel tests build each once).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::cluster::{self, repo};

/// The path of a tool (`helm`, `promtool`, `bundle-validate`), built first if needed.
pub fn tool(name: &str) -> PathBuf {
    let out = Command::new(repo("hack/tools.sh"))
        .args(["path", name])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("hack/tools.sh path {name}: {e}"));
    assert!(out.status.success(), "hack/tools.sh path {name} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The chart packaged by `helm package` (as `make release` does), once per test process: the EKS guide installs
/// and upgrades from the package, which `dist/` holds only after a release.
pub fn packaged_chart() -> PathBuf {
    static PACKAGE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PACKAGE
        .get_or_init(|| {
            let dir = temp_dir("chart-package");
            let args = ["package", "charts/neuron-dra-operator", "--destination", dir.to_str().unwrap()];
            run(&tool("helm"), &args, &repo("."), &[]).ok("helm package");
            dir.join(format!("neuron-dra-operator-{}.tgz", env!("CARGO_PKG_VERSION")))
        })
        .clone()
}

/// The directory of prometheus-operator's CRDs (from its Go module).
pub fn prometheus_crds() -> PathBuf {
    crds_of("prometheus-crds")
}

/// The directory of LeaderWorkerSet's CRD (from its Go module).
pub fn lws_crds() -> PathBuf {
    crds_of("lws-crds")
}

/// The directory of Kueue's CRDs (from its Go module; the version is pinned in hack/tools.sh).
pub fn kueue_crds() -> PathBuf {
    crds_of("kueue-crds")
}

fn crds_of(command: &str) -> PathBuf {
    let out = Command::new(repo("hack/tools.sh")).arg(command).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "hack/tools.sh {command} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Installs prometheus-operator's ServiceMonitor and PrometheusRule CRDs (only the API server's validation needs
/// them; no Prometheus runs here). Idempotent, so parallel tests may all call it.
pub fn install_prometheus_crds() {
    let crds = prometheus_crds();
    for crd in ["servicemonitors", "prometheusrules"] {
        let file = crds.join(format!("monitoring.coreos.com_{crd}.yaml"));
        cluster::kubectl(&["apply", "--server-side", "--force-conflicts", "-f", file.to_str().unwrap()]);
        cluster::wait_established(&format!("{crd}.monitoring.coreos.com"));
    }
}

/// What a finished command printed.
pub struct Run {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout, or a panic with everything the command printed.
    pub fn ok(self, what: &str) -> String {
        assert!(self.success, "{what} failed:\n{}{}", self.stdout, self.stderr);
        self.stdout
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs a program in `dir` with extra environment variables and nothing on its standard input.
pub fn run(program: &Path, args: &[&str], dir: &Path, env: &[(&str, &Path)]) -> Run {
    run_with_input(program, args, dir, env, None)
}

/// As `run`, with `input` written to the program's standard input (closed after it); None: empty input.
pub fn run_with_input(program: &Path, args: &[&str], dir: &Path, env: &[(&str, &Path)], input: Option<&str>) -> Run {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    // The input is written from another thread: a program that prints much before reading all of it would
    // otherwise block on a full stdout pipe while this side blocks on a full stdin pipe. A program that exits
    // without reading all of it breaks the pipe; its output and exit status say why.
    let out = std::thread::scope(|scope| {
        if let Some(input) = input {
            let mut stdin = child.stdin.take().unwrap();
            scope.spawn(move || std::io::Write::write_all(&mut stdin, input.as_bytes()));
        }
        child.wait_with_output()
    });
    out.unwrap_or_else(|e| panic!("{}: {e}", program.display())).into()
}

/// kstatus's verdict on each object of a stream of JSON objects, one line each: `Kind/name Status message`
/// (tests/tools/kstatus, sigs.k8s.io/cli-utils' `status.Compute`).
pub fn kstatus(stream: &str) -> String {
    run_with_input(&tool("kstatus"), &[], &repo("."), &[], Some(stream)).ok("kstatus")
}

/// A fresh directory under the system temp dir, unique to this process and `name`.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ndo-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
