//! harness: what the integration tests and the benchmarks share: a client for the real local control plane
//! (`make controlplane-up`), the CRD and the operator's shipped RBAC installed once, unique names per test, and the
//! operator as a real process running under its ServiceAccount's token (`Operator`). Its `/metrics` is read as
//! Prometheus would: over HTTPS (curl), with the token of a ServiceAccount bound to the shipped `metrics-reader`
//! ClusterRole.

mod operator;

pub use operator::{Operator, OperatorOptions};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use kube::Client;

pub const OPERATOR_NAMESPACE: &str = "neuron-dra-operator-system";
pub const OPERATOR_SA: &str = "neuron-dra-operator";
/// The install variables of config/rbac's policies as shipped, and as the tests widen them: every test's driver
/// namespace (`<test id>-driver`) and the stand-in plugin's image repository.
pub const ALLOW_LIST: [(&str, &str); 7] = [
    ("\"['neuron-dra-driver']\"", "\"['neuron-dra-driver', '*-driver']\""),
    (
        "\"['public.ecr.aws/neuron/neuron-dra-driver']\"",
        "\"['public.ecr.aws/neuron/neuron-dra-driver', 'localhost/neuron-dra/neuron-dra-driver']\"",
    ),
    // The local real nodes' kubelet directory (hack/node.sh, docs/local-node.md).
    ("\"['/var/lib/kubelet']\"", "\"['/var/lib/kubelet', '/var/lib/ndra-kubelet']\""),
    // The tests' own DeviceClasses and extended resources (`<id>.example.com`, `neurondra.test/<id>`).
    ("\"['neuron.aws.com', '*.neuron.aws.com']\"", "\"['neuron.aws.com', '*.neuron.aws.com', '*.example.com']\""),
    ("\"['aws.amazon.com/neuron']\"", "\"['aws.amazon.com/neuron', 'neurondra.test/*']\""),
    // A priority class a config may give its plugin (tests/drift.rs); the attacks use another.
    (
        "name: priorityClasses\n    expression: \"[]\"",
        "name: priorityClasses\n    expression: \"['system-node-critical']\"",
    ),
    // The tests' admin mints the operator's tokens (`token`): the operator runs as a process, not in a pod.
    ("name: tokenMinters\n    expression: \"[]\"", "name: tokenMinters\n    expression: \"['admin']\""),
];
/// Label that ties a test's configs to the operator that test runs (`--config-selector`).
pub const TEST_LABEL: &str = "neurondra.io/test";
/// The shipped ClusterRole that allows `get` on `/metrics`.
pub const METRICS_READER_ROLE: &str = "neuron-dra-operator-metrics-reader";
/// The tests' scraper: a ServiceAccount in the operator's namespace bound to `METRICS_READER_ROLE`.
pub const SCRAPER_SA: &str = "test-metrics-scraper";

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The admin kubeconfig of the local control plane.
pub fn kubeconfig() -> PathBuf {
    let path =
        std::env::var("KUBECONFIG").map(PathBuf::from).unwrap_or_else(|_| repo("target/controlplane/kubeconfig"));
    assert!(path.exists(), "no control plane: run `make controlplane-up` (or `make test`) first ({})", path.display());
    path
}

/// Runs kubectl as admin; panics with its output when it fails.
pub fn kubectl(args: &[&str]) -> String {
    kubectl_with(&kubeconfig(), args, None).unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

/// Runs kubectl with a kubeconfig and optional stdin; returns stdout, or stderr as the error.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

static INSTALL: Once = Once::new();

/// Waits until the CRD `name` is Established. `kubectl wait` fails at once, rather than waiting, while a CRD that was
/// just created has no conditions yet, so it is asked again until the deadline.
pub fn wait_established(name: &str) {
    let crd = format!("crd/{name}");
    let args = ["wait", "--for=condition=Established", "--timeout=10s", crd.as_str()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = kubectl_with(&kubeconfig(), &args, None) {
        assert!(Instant::now() < deadline, "CRD {name} never became Established: {e}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The `apiVersion` kubectl uses for a `resource.k8s.io` resource (the most stable one served), if any.
pub fn served_version(resource: &str) -> Option<String> {
    let listed = kubectl(&["api-resources", "--api-group=resource.k8s.io", "--no-headers"]);
    let line = listed.lines().find(|line| line.split_whitespace().next() == Some(resource))?;
    line.split_whitespace().find(|column| column.starts_with("resource.k8s.io/")).map(str::to_string)
}

/// Installs the CRD from `crds/` and the operator's RBAC and fences from `config/rbac`, with the tests' allow-list
/// (once per test process).
pub fn install() {
    INSTALL.call_once(|| {
        kubectl(&["apply", "--server-side", "--force-conflicts", "-f", repo("crds").to_str().unwrap()]);
        wait_established("neurondraconfigs.neurondra.io");
        // Discovery lags a moment behind Established on a fresh API server: wait until `ndc` resolves.
        let deadline = Instant::now() + Duration::from_secs(60);
        while kubectl_with(&kubeconfig(), &["get", "ndc", "--no-headers"], None).is_err() {
            assert!(Instant::now() < deadline, "the API server never served neurondraconfigs");
            std::thread::sleep(Duration::from_millis(250));
        }
        let ns = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {OPERATOR_NAMESPACE}}}\n");
        kubectl_with(&kubeconfig(), &["apply", "-f", "-"], Some(&ns)).unwrap();
        kubectl(&["apply", "-k", repo("config/rbac").to_str().unwrap()]);
        allow_test_drivers();
        // The EFA driver's DeviceClass, as AWS's chart installs it: the test clusters have the EFA driver (simulated
        // fleets publish its devices), so `efa: true` templates are usable, and not reported DeviceClassMissing, in
        // every test, whichever runs first.
        let class = crate::devtools::simulate::fleet::efa_device_class();
        let class = serde_json::to_string(&class).unwrap();
        kubectl_with(&kubeconfig(), &["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&class)).unwrap();
    });
}

/// The install's allow-list widened for the tests (`ALLOW_LIST`): config/rbac's operator policy and plugin fences
/// applied again with the tests' install variables, as a kustomize overlay would. Again after any test's apply of
/// `config/rbac` or `config/default`, which puts the shipped lists back.
pub fn allow_test_drivers() {
    apply_test_fences(None);
}

/// The cluster's shared fence `neuron-dra-plugin-pods` (config/rbac's with the tests' allow-list) naming `user`
/// among its `operators` too, as a cluster's admin does for a second release (docs/install.md).
/// `allow_test_drivers` puts it back.
pub fn also_operator(user: &str) {
    apply_test_fences(Some(user));
}

/// Applies the plugin fences, then the operator policy, with the tests' allow-list (and `extra_operator` among the
/// fence's operators), and returns once the API server enforces them: a policy written reaches admission a moment
/// later (through the server's informer), and a test that writes meanwhile meets the lists as they were (a labelled
/// ServiceAccount in a test's driver namespace refused). The operator policy, applied last, also allows a namespace
/// of this call's own (`allow-<pid>-<n>`): the operator may create it only under this version.
fn apply_test_fences(extra_operator: Option<&str>) {
    let marker = unique("allow");
    for file in ["config/rbac/plugin_fence.yaml", "config/rbac/operator_policy.yaml"] {
        let mut text = std::fs::read_to_string(repo(file)).unwrap();
        for (shipped, widened) in ALLOW_LIST {
            // The token minters are the plugin fences' file's only; the classes and resources the operator policy's.
            let here = match shipped {
                s if s.contains("tokenMinters") => file.ends_with("plugin_fence.yaml"),
                s if s.contains("neuron.aws.com")
                    || s.contains("amazon.com/neuron")
                    || s.contains("priorityClasses") =>
                {
                    file.ends_with("operator_policy.yaml")
                }
                _ => true,
            };
            assert!(!here || text.contains(shipped), "{file} no longer sets {shipped}");
            text = text.replace(shipped, widened);
        }
        let (list, extra) = match file.ends_with("operator_policy.yaml") {
            true => (ALLOW_LIST[0].1, Some(marker.as_str())),
            false => ("['system:serviceaccount:neuron-dra-operator-system:neuron-dra-operator']", extra_operator),
        };
        if let Some(extra) = extra {
            assert!(text.contains(list), "{file}: {list}");
            let (open, close) = list.rsplit_once(']').unwrap();
            text = text.replace(list, &format!("{open}, '{extra}']{close}"));
        }
        kubectl_with(&kubeconfig(), &["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&text)).unwrap();
    }
    wait_enforced(&marker);
}

/// Waits until the operator's ServiceAccount may create the namespace `marker`, then deletes it: a real create (the
/// policy lets dry runs pass).
fn wait_enforced(marker: &str) {
    let operator = format!("--as=system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SA}");
    let namespace = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {marker}, labels: {{app.kubernetes.io/managed-by: neuron-dra-operator}}}}\n"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(refused) = kubectl_with(&kubeconfig(), &["create", operator.as_str(), "-f", "-"], Some(&namespace)) {
        assert!(Instant::now() < deadline, "the tests' allow-list was not in force within 60 s: {refused}");
        std::thread::sleep(Duration::from_millis(200));
    }
    kubectl(&["delete", "namespace", marker, "--wait=false"]);
}

/// An object as `kubectl get -o json` shows it, or kubectl's error (NotFound, say).
pub fn get(kind: &str, name: &str, namespace: Option<&str>) -> Result<serde_json::Value, String> {
    let mut args = vec!["get", kind, name, "-o", "json"];
    if let Some(namespace) = namespace {
        args.extend(["-n", namespace]);
    }
    kubectl_with(&kubeconfig(), &args, None).map(|out| serde_json::from_str(&out).unwrap())
}

/// Every document of a multi-document YAML stream (kubectl, kustomize, helm template output, a manifest file).
pub fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect()
}

/// An admin client, with the CRD and RBAC installed.
pub async fn admin() -> Client {
    install();
    client_from(&kubeconfig()).await
}

/// A client that authenticates as the kubeconfig at `path` says.
pub async fn client_from(path: &Path) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    Client::try_from(config).unwrap()
}

/// A name no other test (or earlier run) uses: `<prefix>-<pid>-<n>`.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id() % 100_000, NEXT.fetch_add(1, Ordering::SeqCst))
}

/// A kubeconfig that authenticates as the operator's ServiceAccount with a TokenRequest token, so the operator
/// runs with exactly the RBAC `config/rbac` ships.
pub fn operator_kubeconfig(dir: &Path) -> PathBuf {
    install();
    service_account_kubeconfig(dir, OPERATOR_NAMESPACE, OPERATOR_SA)
}

/// A kubeconfig that authenticates as any ServiceAccount (the Helm chart's, for example).
pub fn service_account_kubeconfig(dir: &Path, namespace: &str, service_account: &str) -> PathBuf {
    token_kubeconfig(&dir.join("operator.kubeconfig"), &token(namespace, service_account, &[]))
}

/// A kubeconfig at `path` that authenticates with `token` against the local control plane.
pub fn token_kubeconfig(path: &Path, token: &str) -> PathBuf {
    let server = kubectl(&["config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let ca = kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: operator\n  user:\n    token: {}\ncontexts:\n- name: operator\n  context: {{cluster: local, user: operator}}\ncurrent-context: operator\n",
        token.trim()
    );
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// A token of the tests' scraper ServiceAccount, which may read `/metrics` (made once per test process).
pub fn metrics_reader_token() -> String {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN
        .get_or_init(|| {
            install();
            let objects = format!(
                "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {SCRAPER_SA}, namespace: {OPERATOR_NAMESPACE}}}\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {SCRAPER_SA}}}\n\
                 roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {METRICS_READER_ROLE}}}\n\
                 subjects: [{{kind: ServiceAccount, name: {SCRAPER_SA}, namespace: {OPERATOR_NAMESPACE}}}]\n"
            );
            kubectl_with(&kubeconfig(), &["apply", "-f", "-"], Some(&objects)).unwrap();
            token(OPERATOR_NAMESPACE, SCRAPER_SA, &[])
        })
        .clone()
}

/// A TokenRequest token of a ServiceAccount, with extra `kubectl create token` arguments (a bound object).
pub fn token(namespace: &str, service_account: &str, extra: &[&str]) -> String {
    let args = [&["create", "token", service_account, "-n", namespace, "--duration=2h"][..], extra].concat();
    kubectl(&args).trim().to_string()
}

/// GET over HTTPS with curl (any certificate), with a bearer token when given; None while nothing answers.
pub fn https_get(url: &str, token: Option<&str>) -> Option<(u16, String)> {
    https_get_with(url, token, &["-k"])
}

/// GET over HTTPS with curl and extra curl arguments (`--cacert`, `--resolve`): (status, body), or None when
/// curl got no HTTP answer (nothing listening, or the TLS handshake failed).
pub fn https_get_with(url: &str, token: Option<&str>, curl_args: &[&str]) -> Option<(u16, String)> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "5", "-w", "\n%{http_code}"]).args(curl_args);
    if let Some(token) = token {
        curl.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = curl.arg(url).stdin(Stdio::null()).output().expect("curl runs");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.trim().parse().ok()?, body.to_string()))
}

/// GET over plain HTTP; None while nothing answers.
pub fn plain_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}

/// Sums `neuron_dra_operator_api_requests_total` over write verbs.
pub fn parse_writes(metrics: &str, include_leases: bool) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("neuron_dra_operator_api_requests_total{"))
        .filter(|l| ["create", "update", "patch", "delete"].iter().any(|v| l.contains(&format!("verb=\"{v}\""))))
        .filter(|l| include_leases || !l.contains("resource=\"leases\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Polls `check` until it returns Some, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
