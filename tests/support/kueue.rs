//! Kueue's manager as a process against the local control plane (docs/kueue.md): `hack/tools.sh` builds it from its
//! Go module; it runs with a generated configuration file, and its webhook server listens on a host port with a
//! self-signed certificate, because the local API server runs on the host and calls webhooks there. Kueue's own
//! webhook configurations (from its module) are created pointing at that port by `url:` instead of their Service.
//!
//! Kueue reads its metrics certificate from the fixed path `/etc/kueue/metrics/certs` when it does not manage its
//! certificates itself (and managing them needs its webhook Service), so the manager runs in a mount namespace of
//! its own where an overlay on `/etc` holds that certificate: nothing is written outside the test's directory.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cluster::{self, kubeconfig, kubectl, kubectl_with};
use super::tools;

/// A running Kueue manager and the webhook configurations that point at it; stopped and removed on drop.
pub struct Manager {
    child: Child,
    pub dir: PathBuf,
    webhooks: Vec<(String, String)>,
}

/// Kueue's module directory (CRDs and webhook configurations).
fn module_dir() -> PathBuf {
    let out = Command::new(cluster::repo("hack/tools.sh")).arg("kueue-dir").stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "hack/tools.sh kueue-dir failed:\n{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Installs every Kueue CRD: the manager watches all of them (idempotent, so parallel tests may all call it).
pub fn install_crds() {
    let dir = module_dir().join("config/components/crd/bases");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-f", dir.to_str().unwrap()]);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        // kueue.x-k8s.io_<plural>.yaml
        if let Some(plural) = file.strip_prefix("kueue.x-k8s.io_").and_then(|f| f.strip_suffix(".yaml")) {
            cluster::wait_established(&format!("{plural}.kueue.x-k8s.io"));
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The manager's configuration: `fragment` (what `render --kueue` prints: feature gates and DRA mappings) with the
/// local process's addresses, no leader election, no certificate management, Jobs only.
fn configuration(fragment: &Value, namespace: &str, ports: [u16; 3], cert_dir: &Path) -> Value {
    let mut gates = fragment["featureGates"].clone();
    // The on-demand visibility API is an aggregated API server of its own, which needs a Service too.
    gates["VisibilityOnDemand"] = json!(false);
    json!({
        "apiVersion": fragment["apiVersion"], "kind": "Configuration",
        "namespace": namespace,
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{}", ports[0])},
        "metrics": {"bindAddress": format!("127.0.0.1:{}", ports[1])},
        "webhook": {"port": ports[2], "host": "127.0.0.1", "certDir": cert_dir},
        "leaderElection": {"leaderElect": false},
        "internalCertManagement": {"enable": false},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": gates,
        "resources": fragment["resources"],
    })
}

/// Kueue's webhooks that this test needs (its own kinds, and Jobs in namespaces labelled `job_label`), pointing at
/// `url`: the others would intercept every pod, Deployment and StatefulSet of the shared control plane.
fn webhook_configurations(id: &str, base_url: &str, ca: &Value, job_label: (&str, &str)) -> Vec<Value> {
    let manifests = std::fs::read_to_string(module_dir().join("config/components/webhook/manifests.yaml")).unwrap();
    cluster::documents(&manifests)
        .into_iter()
        .map(|mut doc| {
            let kind = doc["kind"].as_str().unwrap().to_string();
            let webhooks: Vec<Value> = doc["webhooks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|w| {
                    let groups = &w["rules"][0]["apiGroups"];
                    groups[0] == "kueue.x-k8s.io" || (groups[0] == "batch" && w["rules"][0]["resources"][0] == "jobs")
                })
                .map(|w| {
                    let mut w = w.clone();
                    let path = w["clientConfig"]["service"]["path"].as_str().unwrap().to_string();
                    w["clientConfig"] = json!({"url": format!("{base_url}{path}"), "caBundle": ca});
                    if w["rules"][0]["apiGroups"][0] == "batch" {
                        w["namespaceSelector"] = json!({"matchLabels": {job_label.0: job_label.1}});
                    }
                    w
                })
                .collect();
            doc["metadata"] = json!({"name": format!("{id}-{}", kind.to_lowercase())});
            doc["webhooks"] = json!(webhooks);
            doc
        })
        .collect()
}

impl Manager {
    /// Starts the manager with `fragment` and waits until the API server reaches its webhooks.
    pub fn start(id: &str, fragment: &Value, job_label: (&str, &str)) -> Manager {
        install_crds();
        let binary = tools::tool("kueue");
        let dir = tools::temp_dir(&format!("kueue-{id}"));
        let namespace = format!("{id}-kueue");
        kubectl(&["create", "namespace", &namespace]);
        // One self-signed certificate for 127.0.0.1: the webhook server's and (unused here) the metrics server's.
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let metrics_certs = dir.join("etc/kueue/metrics/certs");
        for certs in [dir.join("webhook-certs"), metrics_certs] {
            std::fs::create_dir_all(&certs).unwrap();
            std::fs::write(certs.join("tls.crt"), cert.cert.pem()).unwrap();
            std::fs::write(certs.join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
        }
        std::fs::create_dir_all(dir.join("etc-work")).unwrap();
        let ports = [free_port(), free_port(), free_port()];
        let config = configuration(fragment, &namespace, ports, &dir.join("webhook-certs"));
        std::fs::write(dir.join("config.yaml"), serde_yaml::to_string(&config).unwrap()).unwrap();
        let child = spawn(&binary, &dir);
        let mut manager = Manager { child, dir, webhooks: Vec::new() };
        manager.wait_ready(ports[0]);

        let ca = serde_json::to_value(k8s_openapi::ByteString(cert.cert.pem().into_bytes())).unwrap();
        let base_url = format!("https://127.0.0.1:{}", ports[2]);
        for doc in webhook_configurations(id, &base_url, &ca, job_label) {
            let kind = doc["kind"].as_str().unwrap().to_string();
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            let yaml = serde_yaml::to_string(&doc).unwrap();
            kubectl_with(&kubeconfig(), &["apply", "--server-side", "-f", "-"], Some(&yaml)).unwrap();
            manager.webhooks.push((kind, name));
        }
        manager.wait_webhooks(id);
        manager
    }

    /// The manager's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kueue.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self, health_port: u16) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the Kueue manager exited ({status}):\n{}", self.log());
            }
            if cluster::plain_get(health_port, "/readyz").is_some_and(|(code, _)| code == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "the Kueue manager never became ready:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Until the API server has called the webhooks once: a dry-run ResourceFlavor passes Kueue's defaulting.
    fn wait_webhooks(&self, id: &str) {
        let flavor = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": format!("{id}-probe")}});
        let yaml = serde_yaml::to_string(&flavor).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(e) = kubectl_with(&kubeconfig(), &["create", "--dry-run=server", "-f", "-"], Some(&yaml)) {
            assert!(Instant::now() < deadline, "the API server never reached Kueue's webhooks: {e}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The manager in a mount namespace whose `/etc` is overlaid by `<dir>/etc` (the metrics certificate); root needs
/// only the mount namespace, anyone else a user namespace too.
fn spawn(binary: &Path, dir: &Path) -> Child {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let mut command = Command::new("unshare");
    if !root {
        command.args(["--user", "--map-root-user"]);
    }
    let script = r#"mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/etc,workdir=$1/etc-work" /etc &&
        exec "$2" --config "$1/config.yaml" --zap-log-level=2"#;
    let log = std::fs::File::create(dir.join("kueue.log")).unwrap();
    command
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(dir)
        .arg(binary)
        .env("KUBECONFIG", kubeconfig())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("unshare runs")
}

impl Drop for Manager {
    fn drop(&mut self) {
        for (kind, name) in &self.webhooks {
            let _ = kubectl_with(&kubeconfig(), &["delete", &kind.to_lowercase(), name, "--ignore-not-found"], None);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
