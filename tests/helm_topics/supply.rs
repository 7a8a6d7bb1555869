//! What a security review asks of the chart: the image pinned by digest and moved to a mirror
//! (`image.digest`, `global.imageRegistry`), and a ServiceMonitor that verifies the operator's certificate and reads
//! its token from a Secret, the same as `config/prometheus`.

use crate::*;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The operator's image in the Deployment and in `helm test`'s pod.
fn images(sets: &[&str]) -> Vec<String> {
    let mut args = vec!["template", "x", CHART];
    for set in sets {
        args.extend(["--set", set]);
    }
    let objects = documents(&helm(&args).ok("helm template"));
    let pods = objects.iter().filter_map(|o| match o["kind"].as_str() {
        Some("Deployment") => Some(&o["spec"]["template"]["spec"]),
        Some("Pod") => Some(&o["spec"]),
        _ => None,
    });
    pods.map(|pod| pod["containers"][0]["image"].as_str().unwrap().to_string()).collect()
}

#[test]
fn the_image_is_pinned_by_digest_and_moved_to_the_global_registry() {
    let tagged = "ghcr.io/neurondra/neuron-dra-operator:0.1.0";
    assert_eq!(images(&[]), [tagged, tagged], "the Deployment and helm test's pod");
    let pinned = format!("ghcr.io/neurondra/neuron-dra-operator@{DIGEST}");
    assert_eq!(images(&[&format!("image.digest={DIGEST}")]), [pinned.clone(), pinned]);
    // The registry part (a host with a dot or a port, or localhost) is replaced; the path stays.
    let mirrored = "registry.example.com:5000/mirror/neurondra/neuron-dra-operator:0.1.0";
    assert_eq!(images(&["global.imageRegistry=registry.example.com:5000/mirror/"]), [mirrored, mirrored]);
    let both = format!("123.dkr.ecr.us-west-2.amazonaws.com/neuron-dra-operator@{DIGEST}");
    let sets = [
        "global.imageRegistry=123.dkr.ecr.us-west-2.amazonaws.com",
        "image.repository=neuron-dra-operator",
        &format!("image.digest={DIGEST}"),
    ];
    assert_eq!(images(&sets), [both.clone(), both], "a repository without a registry gets the global one");
    // A digest that is not one is refused by the schema, naming the value.
    let out = helm(&["template", "x", CHART, "--set", "image.digest=latest"]);
    assert!(!out.success && out.stderr.contains("digest"), "{}", out.stderr);
}

/// The ServiceMonitor (Helm and kustomize): `authorization` with a token from a Secret (never the deprecated
/// `bearerTokenFile`), TLS verified against a CA (never `insecureSkipVerify: true`); with monitoring on and no
/// certificate Secret of the user's, the chart makes one (its own CA) and the operator serves from it.
#[test]
fn the_service_monitor_verifies_tls_and_reads_its_token_from_a_secret() {
    let (out, objects) = render(&["metrics.serviceMonitor.enabled=true"]);
    assert!(!out.contains("insecureSkipVerify: true"), "{out}");
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
    };
    let endpoint = &find("ServiceMonitor", "x-neuron-dra-operator")["spec"]["endpoints"][0];
    assert!(endpoint.get("bearerTokenFile").is_none(), "{endpoint}");
    assert_eq!(
        endpoint["authorization"],
        json!({"type": "Bearer", "credentials": {"name": "x-neuron-dra-operator-metrics-scraper-token", "key": "token"}})
    );
    assert_eq!(
        endpoint["tlsConfig"],
        json!({"ca": {"secret": {"name": "x-neuron-dra-operator-metrics-cert", "key": "ca.crt"}},
               "serverName": "x-neuron-dra-operator-metrics.default.svc", "insecureSkipVerify": false})
    );
    // The token: a ServiceAccount's, bound to the metrics-reader ClusterRole only.
    let token = find("Secret", "x-neuron-dra-operator-metrics-scraper-token");
    assert_eq!(token["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        token["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "x-neuron-dra-operator-metrics-scraper"
    );
    let binding = find("ClusterRoleBinding", "x-neuron-dra-operator-metrics-scraper");
    assert_eq!(binding["roleRef"]["name"], "x-neuron-dra-operator-metrics-reader");
    // The certificate: a CA and a certificate it signed for the Service's name, which the operator serves.
    let cert = find("Secret", "x-neuron-dra-operator-metrics-cert");
    let (ca, crt) = (pem(&cert["data"]["ca.crt"]), pem(&cert["data"]["tls.crt"]));
    verify_signed(&ca, &crt, "x-neuron-dra-operator-metrics.default.svc");
    let deployment = find("Deployment", "x-neuron-dra-operator");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "x-neuron-dra-operator-metrics-cert");
    let args = pod["containers"][0]["args"].as_array().unwrap();
    assert!(args.contains(&json!("--metrics-cert-dir=/etc/neuron-dra-operator/metrics-certs")), "{args:?}");

    // A token Secret of the user's: no scraper ServiceAccount.
    let (_, objects) = render(&["metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.tokenSecret=prom-token"]);
    assert!(!objects.iter().any(|o| o["metadata"]["name"] == "x-neuron-dra-operator-metrics-scraper"));
    let monitor = objects.iter().find(|o| o["kind"] == "ServiceMonitor").unwrap();
    assert_eq!(monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"], "prom-token");

    // kustomize's ServiceMonitor says the same for the install's names.
    let kustomized = kustomize("config/prometheus");
    let monitor = kustomized.iter().find(|o| o["kind"] == "ServiceMonitor").unwrap();
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["authorization"]["credentials"]["name"], "neuron-dra-operator-metrics-scraper-token");
    assert_eq!(endpoint["tlsConfig"]["ca"]["secret"]["name"], "neuron-dra-operator-metrics-cert");
    assert_eq!(endpoint["tlsConfig"]["serverName"], "neuron-dra-operator-metrics.neuron-dra-operator-system.svc");
    assert!(endpoint.get("bearerTokenFile").is_none() && endpoint["tlsConfig"]["insecureSkipVerify"] == false);
    assert!(kustomized.iter().any(|o| o["kind"] == "ClusterRoleBinding"
        && o["roleRef"]["name"] == "neuron-dra-operator-metrics-reader"
        && o["subjects"][0]["name"] == "neuron-dra-operator-metrics-scraper"));
}

/// A base64 value of a Secret, decoded (PEM text), with the system's base64.
fn pem(value: &Value) -> String {
    let out = std::process::Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(value.as_str().unwrap().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// `openssl verify` of the certificate against the CA, for the name (what Prometheus checks).
fn verify_signed(ca: &str, crt: &str, name: &str) {
    let dir = temp_dir("chart-metrics-cert");
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("tls.crt"), crt).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["verify", "-CAfile", "ca.crt", "-verify_hostname", name, "tls.crt"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let wrong = std::process::Command::new("openssl")
        .args(["verify", "-CAfile", "ca.crt", "-verify_hostname", "evil.example.com", "tls.crt"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!wrong.status.success(), "the certificate is for the Service's name only");
}
