//! The install paths: kustomize `config/` and the OLM bundle, checked against their sources and, where a server
//! has a say, against the real control plane; and the CRD upgrade guard. Every command `docs/install.md` shows
//! is one of the `DOC_*` commands below, which a test here runs, or one of `support::docs`, which tests/helm.rs
//! and tests/monitoring.rs run.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod scenario;
}

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use neuron_dra_operator::devtools::bundle::{self, Drift};
use serde_json::{Value, json};
use support::cluster::{self, documents, kubectl, repo};
use support::scenario::Scenario;

const DOC_APPLY_DEFAULT: &str = "kubectl apply -k config/default";
const DOC_APPLY_SAMPLES: &str = "kubectl apply -k config/samples";
const DOC_GET: &str = "kubectl get ndc";
const DOC_MAKE_BUNDLE: &str = "make bundle";
const DOC_UPGRADE_CRD: &str = "kubectl apply --server-side -f crds/neurondra.io_neurondraconfigs.yaml";
/// With OLM, which installs no admission policy from a bundle: the fences, applied beside it.
const DOC_APPLY_FENCES: &str = "kubectl apply -f config/rbac/operator_policy.yaml -f config/rbac/operator_policy_binding.yaml -f config/rbac/plugin_fence.yaml -f config/rbac/plugin_fence_binding.yaml";
const DOC_COMMANDS: &[&str] =
    &[DOC_APPLY_DEFAULT, DOC_APPLY_SAMPLES, DOC_GET, DOC_MAKE_BUNDLE, DOC_UPGRADE_CRD, DOC_APPLY_FENCES];

const BIN: &str = env!("CARGO_BIN_EXE_neuron-dra-operator");
/// Held by each test that applies the shipped fences, which puts the shipped allow-list back until
/// `cluster::allow_test_drivers` widens it again: the other's configs would be refused meanwhile.
static SHIPPED_FENCES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The policies' install variables: the allow-list and the operator.
const INSTALL_VARIABLES: [&str; 5] = neuron_dra_operator::logic::fence::INSTALL_VARIABLES;

/// Runs a command line (words split on spaces) in the checkout, against the local control plane.
fn sh(command: &str) -> Output {
    let words: Vec<&str> = command.split(' ').collect();
    let mut cmd = Command::new(words[0]);
    cmd.args(&words[1..]).current_dir(repo("")).stdin(Stdio::null());
    if words[0] == "kubectl" {
        cmd.env("KUBECONFIG", cluster::kubeconfig());
    }
    cmd.output().unwrap_or_else(|e| panic!("{command}: {e}"))
}

/// Runs a command line that must succeed; returns (stdout, stderr).
fn sh_ok(command: &str) -> (String, String) {
    let out = sh(command);
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{command} failed:\n{stdout}{stderr}");
    (stdout, stderr)
}

/// Every object `kubectl kustomize DIR` builds.
fn kustomize(dir: &str) -> Vec<Value> {
    documents(&sh_ok(&format!("kubectl kustomize {dir}")).0)
}

fn read_yaml(path: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn checked_in_csv() -> Value {
    read_yaml(&format!("bundle/{}", bundle::CSV_FILE))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ndo-install-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// --- the bundle against its sources (no cluster needed) ---

/// The image is named once (config/manager's kustomization), tagged with the crate version the CSV carries, and
/// the Makefile and Dockerfile agree with the Deployment. The image is built and checked by tests/release.rs.
#[test]
fn the_image_is_named_once_and_the_dockerfile_fits_the_deployment() {
    let kustomization = read_yaml("config/manager/kustomization.yaml");
    let entry = &kustomization["images"][0];
    assert_eq!(entry["name"], "neuron-dra-operator");
    assert_eq!(entry["newTag"], env!("CARGO_PKG_VERSION"), "tag the image with the crate version");
    let image = format!("{}:{}", entry["newName"].as_str().unwrap(), entry["newTag"].as_str().unwrap());
    let (recipe, _) = sh_ok("make --no-print-directory -n image");
    assert!(recipe.contains(&format!("-t {image} .")), "{recipe}");
    assert!(recipe.contains(&format!("--build-arg VERSION={}", env!("CARGO_PKG_VERSION"))), "{recipe}");

    let deployment = read_yaml("config/manager/manager.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let binary = pod["containers"][0]["command"][0].as_str().unwrap();
    assert!(dockerfile.contains(&format!("ENTRYPOINT [\"{binary}\"]")), "Dockerfile's entrypoint is not {binary}");
    let user = pod["securityContext"]["runAsUser"].as_u64().unwrap();
    assert!(dockerfile.contains(&format!("USER {user}:{user}")), "Dockerfile's user is not {user}");
    assert!(dockerfile.matches("FROM ").count() >= 2, "a multi-stage build");
}

#[test]
fn every_command_in_the_install_doc_is_run_by_a_test() {
    let doc = std::fs::read_to_string(repo("docs/install.md")).unwrap();
    let mut in_block = false;
    let mut shown = Vec::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            in_block = !in_block && line.trim_start_matches('`').starts_with("sh");
        } else if in_block && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            shown.push(line.split(" #").next().unwrap().trim().to_string());
        }
    }
    let known = || DOC_COMMANDS.iter().chain(support::docs::COMMANDS);
    for command in &shown {
        assert!(known().any(|c| c == command), "docs/install.md shows `{command}`, which no test runs");
    }
    for command in known() {
        assert!(shown.iter().any(|c| c == command), "docs/install.md no longer shows `{command}`");
    }
}

// --- on the real control plane ---

#[test]
fn every_alm_example_is_accepted_by_the_api_server() {
    cluster::install();
    let examples: Vec<Value> =
        serde_json::from_str(checked_in_csv()["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
    assert!(examples.len() >= 4);
    for example in examples {
        // Renamed so an object of the sample's name elsewhere in the cluster cannot make `create` fail.
        let mut object = example.clone();
        object["metadata"]["name"] = json!(cluster::unique("alm"));
        let result = cluster::kubectl_with(
            &cluster::kubeconfig(),
            &["create", "--dry-run=server", "-o", "name", "-f", "-"],
            Some(&object.to_string()),
        );
        assert!(result.is_ok(), "alm-example {} rejected: {}", example["metadata"]["name"], result.unwrap_err());
    }
}

/// `kubectl apply -k config/default`, dry run then for real, then the operator (a process outside the cluster,
/// with a token of the ServiceAccount that apply installed) reconciles every sample to Ready. The samples come
/// through `config/samples` and are made this test's own: unique names, the test label the operator selects,
/// namespaces of their own, and a node selector no node matches. `kubectl apply -k config/samples` itself only
/// runs as a server dry run: applied for real, the samples would be cluster-wide configs shared with every
/// other test and the demo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_installs_the_operator_and_every_sample_reconciles_to_ready() {
    let _shipped = SHIPPED_FENCES.lock().await;
    // A dry run does not create the namespace the namespaced objects go to: create it for real first.
    sh_ok("kubectl apply -f config/manager/namespace.yaml");
    let (stdout, stderr) = sh_ok(&format!("{DOC_APPLY_DEFAULT} --dry-run=server"));
    assert!(stdout.contains("deployment.apps/neuron-dra-operator"), "{stdout}");
    let (stdout, stderr_real) = sh_ok(DOC_APPLY_DEFAULT);
    // The documented apply put back the default allow-list; the tests' driver namespaces need theirs.
    cluster::allow_test_drivers();
    for object in ["customresourcedefinition", "clusterrole", "deployment.apps/neuron-dra-operator", "service/"] {
        assert!(stdout.contains(object), "{object} not applied:\n{stdout}");
    }
    // The namespace warns about (and enforces) the restricted Pod Security Standard: the pod template meets it.
    for output in [&stderr, &stderr_real] {
        assert!(!output.contains("PodSecurity"), "{output}");
    }
    assert!(stdout.contains("networkpolicy.networking.k8s.io/neuron-dra-operator-allow-metrics"), "{stdout}");
    operator_pods_are_admitted_and_a_privileged_pod_is_refused().await;
    let image = kubectl(&[
        "get",
        "deployment",
        "neuron-dra-operator",
        "-n",
        cluster::OPERATOR_NAMESPACE,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, checked_in_csv()["metadata"]["annotations"]["containerImage"].as_str().unwrap());
    sh_ok(&format!("{DOC_APPLY_SAMPLES} --dry-run=server"));

    let s = Scenario::with_operator("install").await;
    let mut names = Vec::new();
    let samples = kustomize("config/samples").into_iter().filter(|o| o["kind"] == "NeuronDRAConfig");
    for (index, sample) in samples.enumerate() {
        let namespace = s.namespace(&index.to_string(), &[]).await;
        let mut spec = sample["spec"].clone();
        let fields = spec.as_object_mut().unwrap();
        fields.remove("nodeSelector"); // s.config selects no node instead
        fields.insert("templates".into(), json!({"namespaces": [namespace]}));
        if let Some(driver) = fields.get_mut("driver") {
            driver.as_object_mut().unwrap().remove("namespace"); // s.config uses the test's driver namespace
        }
        let name = format!("{}-{}", s.id, sample["metadata"]["name"].as_str().unwrap());
        s.apply(&s.config(&name, spec)).await.unwrap();
        names.push(name);
    }
    assert_eq!(names.len(), 3);
    for name in &names {
        let status = s.wait_ready(name).await.status.unwrap();
        assert!(status.templates.unwrap().count > 0, "{name}");
    }
    let (table, _) = sh_ok(DOC_GET);
    for name in &names {
        let row = table.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{table}"));
        assert_eq!(row.split_whitespace().nth(1), Some("Ready"), "{row}");
    }
    // The Deployment's pods never ran here; on a node added later (`make test-node`) they would, and an operator
    // that manages every config would fight the tests' own.
    kubectl(&["delete", "deployment", "neuron-dra-operator", "-n", cluster::OPERATOR_NAMESPACE, "--wait=false"]);
}

/// Under the namespace's `restricted` enforcement the ReplicaSet creates the operator's pods (no kubelet runs
/// them here, but creating them passes admission), and the NetworkPolicy selects them; a privileged pod is refused,
/// so the enforcement is really on.
async fn operator_pods_are_admitted_and_a_privileged_pod_is_refused() {
    let namespace = cluster::OPERATOR_NAMESPACE;
    let labels = kubectl(&["get", "namespace", namespace, "-o", "jsonpath={.metadata.labels}"]);
    let labels: Value = serde_json::from_str(&labels).unwrap();
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(labels[format!("pod-security.kubernetes.io/{mode}")], "restricted", "{labels}");
    }
    let policy = find(&kustomize("config/default"), "NetworkPolicy", "neuron-dra-operator-allow-metrics").clone();
    let selector: Vec<String> = policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    let selector = selector.join(",");
    let pods = support::cluster::eventually(Duration::from_secs(60), "the ReplicaSet's pods", || async {
        let out = kubectl(&["get", "pods", "-n", namespace, "-l", &selector, "-o", "json"]);
        let pods: Value = serde_json::from_str(&out).unwrap();
        let items = pods["items"].as_array().unwrap().clone();
        (!items.is_empty()).then_some(items)
    })
    .await;
    assert_eq!(pods[0]["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
    let failures = kubectl(&[
        "get",
        "replicasets",
        "-n",
        namespace,
        "-l",
        &selector,
        "-o",
        "jsonpath={.items[*].status.conditions}",
    ]);
    assert!(!failures.contains("ReplicaFailure"), "{failures}");

    let privileged = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": cluster::unique("privileged"), "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]},
    });
    let refused = cluster::kubectl_with(
        &cluster::kubeconfig(),
        &["create", "--dry-run=server", "-f", "-"],
        Some(&privileged.to_string()),
    );
    let error = refused.expect_err("a privileged pod was admitted");
    assert!(error.contains("violates PodSecurity \"restricted:latest\""), "{error}");
}

/// The NetworkPolicy admits ingress to the operator's pods on the metrics port and nothing else: its selector
/// matches the Deployment's pod labels, its one rule names the container port the metrics Service targets.
#[test]
fn the_network_policy_admits_only_metrics_scrapes_of_the_operator() {
    let objects = kustomize("config/default");
    let policy = find(&objects, "NetworkPolicy", "neuron-dra-operator-allow-metrics");
    let deployment = find(&objects, "Deployment", "neuron-dra-operator");
    let service = find(&objects, "Service", "neuron-dra-operator-metrics");
    assert_eq!(policy["metadata"]["namespace"], deployment["metadata"]["namespace"]);
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let selector = policy["spec"]["podSelector"]["matchLabels"].as_object().unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(&pod_labels[key], value, "the policy selects {key}={value}; the pods do not carry it");
    }
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let port = &service["spec"]["ports"][0]["targetPort"];
    assert_eq!(policy["spec"]["ingress"], json!([{"ports": [{"port": port, "protocol": "TCP"}]}]));
    let ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"].as_array().unwrap();
    let metrics = ports.iter().find(|p| p["name"] == *port).expect("the container port the policy names");
    assert_eq!(metrics["containerPort"], 8443);
}

/// The tests of one topic each, in `tests/install_topics/`.
mod install_topics {
    mod bundle;
    mod upgrades;
}
