//! The operator's `/metrics` as a scraper meets it: HTTPS, a bearer token the API server authenticates
//! (TokenReview), and a user allowed `get` on `/metrics` (SubjectAccessReview) through the shipped `metrics-reader`
//! ClusterRole; the operator runs under the shipped RBAC. Also a certificate from `--metrics-cert-dir`, plain
//! metrics only with `--metrics-secure=false`, and the probes on their own plain port.

mod support {
    pub mod cluster;
    pub mod docs;
}

use std::path::PathBuf;
use std::time::Duration;

use support::cluster::{self, Operator, OperatorOptions, eventually, kubectl, kubectl_with, plain_get, unique};
use support::docs;

const TIMEOUT: Duration = Duration::from_secs(60);

fn start(id: &str, extra: &[&str]) -> Operator {
    Operator::start(OperatorOptions { test_id: id, lease: id, extra })
}

/// Waits until the probe port answers /healthz (both servers start together).
async fn wait_serving(operator: &Operator) {
    eventually(TIMEOUT, "the operator serves /healthz", || async {
        (plain_get(operator.probe_port(), "/healthz")?.0 == 200).then_some(())
    })
    .await;
}

/// Applies a namespace and a ServiceAccount in it.
fn service_account(namespace: &str, name: &str) {
    let objects = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: {namespace}}}\n"
    );
    kubectl_with(&cluster::kubeconfig(), &["apply", "-f", "-"], Some(&objects)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_401_without_a_valid_token_403_without_the_role_and_200_with_it() {
    let id = unique("metricsauth");
    let operator = start(&id, &[]);
    wait_serving(&operator).await;

    assert_eq!(operator.metrics_get(None).map(|r| r.0), Some(401), "no token");
    assert_eq!(operator.metrics_get(Some("not-a-token")).map(|r| r.0), Some(401), "a token nobody issued");
    let stranger = unique("stranger");
    service_account(&stranger, "nobody");
    let (code, body) = operator.metrics_get(Some(&cluster::token(&stranger, "nobody", &[]))).unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains(&format!("system:serviceaccount:{stranger}:nobody")), "{body}");

    let (code, body) = operator.metrics_get(Some(&cluster::metrics_reader_token())).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("neuron_dra_operator_api_requests_total{"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    // Before any failure, every error series is there at 0: an alert on `increase()` sees the first one.
    assert!(body.contains("neuron_dra_operator_reconcile_errors_total{category=\"Forbidden\"} 0"), "{body}");
    // The reviews behind each scrape are not the operator's work: `api_requests` leaves them out.
    assert!(!body.contains("tokenreviews") && !body.contains("subjectaccessreviews"), "{body}");

    // Only HTTPS on the metrics port, and no metrics on the probe port.
    assert!(plain_get(operator.port(), "/metrics").is_none_or(|(code, _)| code != 200));
    assert_eq!(plain_get(operator.probe_port(), "/metrics").map(|r| r.0), Some(404));
    assert_eq!(operator.http_get("/readyz").map(|r| r.0), Some(200));
    let _ = kubectl_with(&cluster::kubeconfig(), &["delete", "namespace", &stranger, "--wait=false"], None);
}

/// docs/install.md's binding for Prometheus, run as shown: its ServiceAccount's token then reads the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_binding_lets_prometheus_read_the_metrics() {
    let id = unique("metricsdoc");
    let operator = start(&id, &[]);
    service_account("monitoring", "prometheus-k8s");
    let words: Vec<&str> = docs::BIND_METRICS_READER.split(' ').collect();
    let binding = words[3];
    let _ = kubectl_with(&cluster::kubeconfig(), &["delete", "clusterrolebinding", binding], None);
    wait_serving(&operator).await;
    let token = cluster::token("monitoring", "prometheus-k8s", &[]);
    assert_eq!(operator.metrics_get(Some(&token)).map(|r| r.0), Some(403), "before the binding");

    kubectl(&words[1..]);
    let body = eventually(TIMEOUT, "Prometheus' token reads /metrics", || async {
        operator.metrics_get(Some(&token)).filter(|(code, _)| *code == 200).map(|(_, body)| body)
    })
    .await;
    assert!(body.contains("neuron_dra_operator_api_requests_total{"), "{body}");
}

/// A certificate from `--metrics-cert-dir` (tls.crt, tls.key, as a mounted TLS Secret has them) is the one served:
/// curl verifies it against that certificate and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_the_cert_dir_is_served() {
    let id = unique("metricscert");
    let dir: PathBuf = std::env::temp_dir().join(format!("ndo-{id}-certs"));
    std::fs::create_dir_all(&dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
    let operator = start(&id, &["--metrics-cert-dir", dir.to_str().unwrap()]);
    wait_serving(&operator).await;

    let url = format!("https://localhost:{}/metrics", operator.port());
    let resolve = format!("localhost:{}:127.0.0.1", operator.port());
    let ca = dir.join("tls.crt");
    let token = cluster::metrics_reader_token();
    let verified =
        cluster::https_get_with(&url, Some(&token), &["--resolve", &resolve, "--cacert", ca.to_str().unwrap()]);
    assert_eq!(verified.map(|r| r.0), Some(200));
    // Another self-signed certificate does not verify it: the check is real.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("other.crt"), other.cert.pem()).unwrap();
    let other_ca = dir.join("other.crt");
    let refused =
        cluster::https_get_with(&url, Some(&token), &["--resolve", &resolve, "--cacert", other_ca.to_str().unwrap()]);
    assert_eq!(refused, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_plain_and_open_only_when_asked() {
    let id = unique("metricsplain");
    let operator = start(&id, &["--metrics-secure=false"]);
    wait_serving(&operator).await;
    // The metrics listener starts beside the probes' one, not necessarily before it.
    let (code, body) =
        eventually(TIMEOUT, "plain /metrics answers", || async { plain_get(operator.port(), "/metrics") }).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("neuron_dra_operator_"), "{body}");
}

/// The value of an unlabelled series, if the text has it.
fn value_of(metrics: &str, series: &str) -> Option<f64> {
    let line = metrics.lines().find(|line| line.split(' ').next() == Some(series))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// What every dashboard and alert for a controller looks for first: which version runs, which replica leads, and
/// how much memory and CPU it uses. Two replicas share a Lease: the leader says 1 and the standby 0, both name their
/// build, and the resident memory each reports is the one the kernel shows for its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_info_the_leader_and_the_process_memory_are_served() {
    let id = unique("metricsleader");
    let first = start(&id, &[]);
    let second = start(&id, &[]);
    wait_serving(&first).await;
    wait_serving(&second).await;
    let leaders = eventually(TIMEOUT, "one replica leads, the other stands by", || async {
        let values: Vec<f64> = [&first, &second]
            .iter()
            .map(|replica| value_of(&replica.metrics(), "neuron_dra_operator_leader"))
            .collect::<Option<_>>()?;
        (values.iter().sum::<f64>() == 1.0).then_some(values)
    })
    .await;
    assert!(leaders.contains(&0.0) && leaders.contains(&1.0), "{leaders:?}");

    for replica in [&first, &second] {
        let body = replica.metrics();
        let build = format!("neuron_dra_operator_build_info{{version=\"{}\",revision=\"", env!("CARGO_PKG_VERSION"));
        assert!(body.lines().any(|l| l.starts_with(&build) && l.ends_with("\"} 1")), "{body}");
        let status = std::fs::read_to_string(format!("/proc/{}/status", replica.pid().unwrap())).unwrap();
        let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches("kB");
        let resident = value_of(&body, "process_resident_memory_bytes").unwrap();
        // Read a moment apart: the same order of magnitude, not the same byte.
        let kernel = kib.trim().parse::<f64>().unwrap() * 1024.0;
        assert!(resident > kernel / 2.0 && resident < kernel * 2.0, "{resident} vs VmRSS {kernel}");
        assert!(value_of(&body, "process_cpu_seconds_total").unwrap() > 0.0, "{body}");
        assert!(value_of(&body, "process_open_fds").unwrap() > 3.0, "{body}");
    }

    // A replica without leader election is the only writer: it leads.
    let alone = start(&unique("metricsalone"), &["--leader-elect=false"]);
    wait_serving(&alone).await;
    eventually(TIMEOUT, "a replica without election says it leads", || async {
        (value_of(&alone.metrics(), "neuron_dra_operator_leader") == Some(1.0)).then_some(())
    })
    .await;
}

/// A Secret volume as the kubelet lays it out: the files live in a timestamped directory, `..data` links to it and
/// `tls.crt`/`tls.key` link through `..data`. A renewal writes a new directory and swaps `..data` atomically.
fn secret_volume(dir: &std::path::Path, generation: u32, cert: &rcgen::CertifiedKey<rcgen::KeyPair>) {
    let data = dir.join(format!("..2026_12_03_10_00_0{generation}.000000001"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tls.crt"), cert.cert.pem()).unwrap();
    std::fs::write(data.join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
    let staged = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(data.file_name().unwrap(), &staged).unwrap();
    std::fs::rename(&staged, dir.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(dir.join(file)).is_err() {
            std::os::unix::fs::symlink(format!("..data/{file}"), dir.join(file)).unwrap();
        }
    }
}

/// cert-manager renews the metrics certificate and the kubelet swaps the mounted Secret's files: the running operator
/// presents the new certificate at the next handshakes, without a restart, and no longer the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let id = unique("metricsrotate");
    let dir: PathBuf = std::env::temp_dir().join(format!("ndo-{id}-secret"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let old = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    secret_volume(&dir, 1, &old);
    let mut operator = start(&id, &["--metrics-cert-dir", dir.to_str().unwrap()]);
    wait_serving(&operator).await;

    let url = format!("https://localhost:{}/metrics", operator.port());
    let resolve = format!("localhost:{}:127.0.0.1", operator.port());
    let token = cluster::metrics_reader_token();
    let ca = |name: &str, cert: &rcgen::CertifiedKey<rcgen::KeyPair>| {
        let path = std::env::temp_dir().join(format!("ndo-{id}-{name}.crt"));
        std::fs::write(&path, cert.cert.pem()).unwrap();
        path
    };
    let verified_by = |ca: &std::path::Path| {
        let args = ["--resolve", &resolve, "--cacert", ca.to_str().unwrap()];
        cluster::https_get_with(&url, Some(&token), &args).map(|r| r.0)
    };
    let old_ca = ca("old", &old);
    assert_eq!(verified_by(&old_ca), Some(200));

    let new = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let new_ca = ca("new", &new);
    assert_eq!(verified_by(&new_ca), None, "the new certificate is not served before the renewal");
    secret_volume(&dir, 2, &new);
    eventually(TIMEOUT, "the renewed certificate is presented", || async {
        (verified_by(&new_ca) == Some(200)).then_some(())
    })
    .await;
    assert_eq!(verified_by(&old_ca), None, "the old certificate is no longer presented");
    assert!(operator.is_running(), "no restart");
    assert!(operator.log_text().contains("loaded the renewed metrics certificate"), "{}", operator.log_text());
}

/// The HTTP version curl got for GET /metrics with `args` (`--http2`, `--http2-prior-knowledge`) and its status, or
/// None when it got no HTTP answer.
fn http_version(port: u16, token: &str, args: &[&str]) -> Option<(String, u16)> {
    let out = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"])
        .args(args)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("https://127.0.0.1:{port}/metrics"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (version, code) = text.split_once(' ')?;
    let code: u16 = code.trim().parse().ok()?;
    (out.status.success() && code != 0).then(|| (version.to_string(), code))
}

/// What the server first answers a TLS client (no ALPN) that starts HTTP/2 without asking (prior knowledge): the
/// connection preface and an empty SETTINGS frame sent, the first bytes back (Python's ssl, as curl always asks).
fn prior_knowledge_answer(port: u16) -> Vec<u8> {
    let script = r#"
import socket, ssl, sys
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
tls = context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5))
tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
try:
    answer = tls.recv(64)
except (OSError, ssl.SSLError):
    answer = b""
sys.stdout.buffer.write(answer)
"#;
    let out = std::process::Command::new("python3").args(["-c", script, &port.to_string()]).output().unwrap();
    assert!(out.status.success(), "python3: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// An HTTP/2 frame header announcing a SETTINGS frame (type 4) on stream 0: how an HTTP/2 server answers a preface.
fn is_http2_settings(answer: &[u8]) -> bool {
    answer.len() >= 9 && answer[3] == 4 && answer[5..9] == [0, 0, 0, 0]
}

/// HTTP/2 is off unless `--enable-http2`: a client offering it (ALPN) is answered in HTTP/1.1, one sending it
/// without asking (prior knowledge) gets no HTTP/2 (an HTTP/1.1 error or a closed connection); with the flag both
/// are served in HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_refused_unless_enabled() {
    let token = cluster::metrics_reader_token();
    let id = unique("http1");
    let operator = start(&id, &[]);
    wait_serving(&operator).await;
    assert_eq!(http_version(operator.port(), &token, &["--http1.1"]), Some(("1.1".into(), 200)));
    assert_eq!(http_version(operator.port(), &token, &["--http2"]), Some(("1.1".into(), 200)), "downgraded");
    let refused = prior_knowledge_answer(operator.port());
    assert!(!is_http2_settings(&refused), "HTTP/2 spoken unasked: {refused:?}");
    assert!(refused.is_empty() || refused.starts_with(b"HTTP/1.1 4"), "{}", String::from_utf8_lossy(&refused));
    drop(operator);

    let id = unique("http2");
    let operator = start(&id, &["--enable-http2"]);
    wait_serving(&operator).await;
    assert_eq!(http_version(operator.port(), &token, &["--http2"]), Some(("2".into(), 200)));
    let answer = prior_knowledge_answer(operator.port());
    assert!(is_http2_settings(&answer), "with --enable-http2 the preface is answered in HTTP/2: {answer:?}");
    assert_eq!(http_version(operator.port(), &token, &["--http1.1"]), Some(("1.1".into(), 200)));
}
