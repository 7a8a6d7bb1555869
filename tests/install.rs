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
const INSTALL_VARIABLES: [&str; 4] = neuron_dra_operator::logic::fence::INSTALL_VARIABLES;

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

#[test]
fn the_checked_in_bundle_is_what_make_bundle_generates() {
    let expected = bundle::generate(&repo("")).unwrap();
    let drift = bundle::check(&expected, &repo("bundle")).unwrap();
    let list: Vec<String> = drift.iter().map(|d| format!("  bundle/{d}")).collect();
    assert!(
        drift.is_empty(),
        "bundle/ is out of date with config/, crds/ or samples/: run `make bundle`\n{}",
        list.join("\n")
    );

    // `make bundle` runs the CLI with `--output bundle`; the CLI writes the same files.
    let (recipe, _) = sh_ok("make --no-print-directory -n bundle");
    assert!(recipe.trim().ends_with("-- bundle --output bundle"), "{recipe}");
    let dir = temp_dir("cli");
    let devtools = env!("CARGO_BIN_EXE_neuron-dra-devtools");
    let out = Command::new(devtools).args(["bundle", "--output"]).arg(&dir).current_dir(repo("")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(bundle::check(&expected, &dir).unwrap(), []);
}

#[test]
fn the_bundle_crd_is_the_crd_in_crds() {
    let crds = std::fs::read_to_string(repo("crds/neurondra.io_neurondraconfigs.yaml")).unwrap();
    let in_bundle = std::fs::read_to_string(repo(&format!("bundle/{}", bundle::CRD_FILE))).unwrap();
    assert!(in_bundle == crds, "bundle/{} differs from crds/: run `make bundle`", bundle::CRD_FILE);
}

/// Compared with what `kubectl kustomize config/default` builds (real kustomize, image resolved), not with the
/// generator's own reading of `config/`.
#[test]
fn the_csv_permissions_and_deployment_are_config_default() {
    let objects = kustomize("config/default");
    let csv = checked_in_csv();
    let install = &csv["spec"]["install"]["spec"];
    let account = find(&objects, "ServiceAccount", "neuron-dra-operator");
    let role = find(&objects, "Role", "neuron-dra-operator-leader-election");
    let deployment = find(&objects, "Deployment", "neuron-dra-operator");
    // The operator's own ClusterRole and the metrics-auth one (TokenReviews, SubjectAccessReviews), both bound to
    // its ServiceAccount, are its cluster permissions.
    let mut rules = Vec::new();
    for name in ["neuron-dra-operator", "neuron-dra-operator-metrics-auth"] {
        rules.extend(find(&objects, "ClusterRole", name)["rules"].as_array().unwrap().clone());
        let binding = find(&objects, "ClusterRoleBinding", name);
        assert_eq!(binding["roleRef"]["name"], name);
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": cluster::OPERATOR_NAMESPACE}])
        );
    }

    assert_eq!(install["clusterPermissions"].as_array().unwrap().len(), 1);
    assert_eq!(install["clusterPermissions"][0]["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(install["clusterPermissions"][0]["rules"], json!(rules));
    assert_eq!(install["permissions"].as_array().unwrap().len(), 1);
    assert_eq!(install["permissions"][0]["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(install["permissions"][0]["rules"], role["rules"]);
    // The kustomize bindings grant those roles to that account; OLM makes its own bindings from the CSV.
    for binding in ["ClusterRoleBinding", "RoleBinding"] {
        let subjects = &objects.iter().find(|o| o["kind"] == binding).unwrap()["subjects"];
        assert_eq!(subjects[0]["name"], account["metadata"]["name"], "{binding}");
    }

    let deployments = install["deployments"].as_array().unwrap();
    assert_eq!(deployments.len(), 1);
    assert_eq!(deployments[0]["name"], deployment["metadata"]["name"]);
    assert_eq!(deployments[0]["spec"], deployment["spec"]);
    let image = &deployment["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(csv["metadata"]["annotations"]["containerImage"], *image);
    assert!(!image.as_str().unwrap().starts_with("neuron-dra-operator"), "image not resolved: {image}");

    let mut service = find(&objects, "Service", "neuron-dra-operator-metrics").clone();
    service["metadata"].as_object_mut().unwrap().remove("namespace");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::SERVICE_FILE)), service);
    let mut budget = find(&objects, "PodDisruptionBudget", "neuron-dra-operator").clone();
    budget["metadata"].as_object_mut().unwrap().remove("namespace");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::DISRUPTION_BUDGET_FILE)), budget);
    // The metrics reader, bound by whoever scrapes, ships as a ClusterRole of its own; so does the kubelet plugin's,
    // which the operator binds (and may bind, by name, and nothing else).
    let reader = find(&objects, "ClusterRole", "neuron-dra-operator-metrics-reader");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::METRICS_READER_FILE)), *reader);
    let plugin = find(&objects, "ClusterRole", "neuron-dra-plugin");
    assert_eq!(read_yaml(&format!("bundle/{}", bundle::PLUGIN_ROLE_FILE)), *plugin);
    assert!(rules.iter().any(|r| r["resources"] == json!(["clusterroles"])
        && r["resourceNames"] == json!(["neuron-dra-plugin"])
        && r["verbs"] == json!(["bind"])));
}

/// Everything `config/default` installs comes with OLM too: as a file of the bundle, from the CSV (the operator's
/// ServiceAccount, Deployment and permissions, which OLM binds itself), from OLM (the namespace), or, for the kinds
/// OLM does not install, from docs/install.md's commands beside it (the fences; the NetworkPolicy's file).
#[test]
fn every_object_config_default_installs_comes_with_olm_or_the_documented_commands_beside_it() {
    let mut bundled: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(repo("bundle/manifests")).unwrap() {
        let object = read_yaml(&format!("bundle/manifests/{}", entry.unwrap().file_name().to_string_lossy()));
        bundled.push((object["kind"].as_str().unwrap().into(), object["metadata"]["name"].as_str().unwrap().into()));
    }
    let fence_files: Vec<&str> =
        DOC_APPLY_FENCES.split(' ').collect::<Vec<_>>().windows(2).filter(|w| w[0] == "-f").map(|w| w[1]).collect();
    let mut applied = Vec::new();
    for file in &fence_files {
        for object in documents(&std::fs::read_to_string(repo(file)).unwrap()) {
            applied.push((
                object["kind"].as_str().unwrap().to_string(),
                object["metadata"]["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    let csv = checked_in_csv();
    let install = &csv["spec"]["install"]["spec"];
    let mut missing = Vec::new();
    for object in kustomize("config/default") {
        let (kind, name) = (object["kind"].as_str().unwrap(), object["metadata"]["name"].as_str().unwrap());
        let key = (kind.to_string(), name.to_string());
        let from_csv = match kind {
            "ServiceAccount" => install["clusterPermissions"][0]["serviceAccountName"] == name,
            "Deployment" => install["deployments"][0]["name"] == name,
            // OLM binds the CSV's permissions (their rules are compared with these roles above).
            "ClusterRoleBinding" | "RoleBinding" | "Role" => true,
            "ClusterRole" => {
                object["metadata"]["name"] == "neuron-dra-operator"
                    || object["metadata"]["name"] == "neuron-dra-operator-metrics-auth"
            }
            // OLM installs into a namespace of the user's (the suggested one).
            "Namespace" => csv["metadata"]["annotations"]["operatorframework.io/suggested-namespace"] == name,
            // Documented in "With OLM": its file, with the namespace set.
            "NetworkPolicy" => true,
            _ => false,
        };
        if !(from_csv || bundled.contains(&key) || applied.contains(&key)) {
            missing.push(format!("{kind} {name}"));
        }
        if kind.starts_with("ValidatingAdmissionPolicy") {
            assert!(applied.contains(&key), "{kind} {name}: not applied by docs/install.md's OLM command");
        }
    }
    assert!(missing.is_empty(), "config/default installs what OLM does not: {missing:?}");
    // And nothing else: the command applies admission objects only, each one config/default's.
    assert!(applied.iter().all(|(kind, _)| kind.starts_with("ValidatingAdmissionPolicy")), "{applied:?}");
}

#[test]
fn alm_examples_are_the_samples_and_config_samples_lists_them_all() {
    let mut samples: Vec<Value> = std::fs::read_dir(repo("samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| serde_yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    let by_name = |a: &Value, b: &Value| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str());
    samples.sort_by(by_name);
    let mut examples: Vec<Value> =
        serde_json::from_str(checked_in_csv()["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
    examples.sort_by(by_name);
    assert_eq!(examples, samples, "alm-examples are not samples/*.yaml: run `make bundle`");
    // config/samples is the set that works together: every sample but mixed.yaml, the one-config alternative that
    // selects the same nodes as the others (tests/samples.rs applies the set).
    let mut wired: Vec<Value> =
        kustomize("config/samples").into_iter().filter(|o| o["kind"] == "NeuronDRAConfig").collect();
    wired.sort_by(by_name);
    samples.retain(|s| s["metadata"]["name"] != "trainium");
    assert_eq!(wired, samples, "samples/Kustomization must list every samples/*.yaml but mixed.yaml");
}

#[test]
fn config_crd_is_the_crd_in_crds() {
    let built = kustomize("config/crd");
    let crd = read_yaml("crds/neurondra.io_neurondraconfigs.yaml");
    assert!(built.len() == 1 && same_numbers(&built[0]) == same_numbers(&crd), "config/crd does not build crds/");
}

/// Numbers as floats: kustomize prints `2.0` as `2`.
fn same_numbers(value: &Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(items) => items.iter().map(same_numbers).collect(),
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), same_numbers(v))).collect(),
        other => other.clone(),
    }
}

#[test]
fn a_bundle_with_a_missing_file_a_changed_crd_or_a_stray_file_is_caught_by_file_name() {
    let expected = bundle::generate(&repo("")).unwrap();
    let dir = temp_dir("broken");
    bundle::write(&expected, &dir).unwrap();
    assert_eq!(bundle::check(&expected, &dir).unwrap(), []);

    std::fs::remove_file(dir.join(bundle::ANNOTATIONS_FILE)).unwrap();
    let crd = dir.join(bundle::CRD_FILE);
    let older = std::fs::read_to_string(&crd).unwrap().replace("neurondra.io/operator-version: ", "x: ");
    std::fs::write(&crd, older).unwrap();
    std::fs::write(dir.join("manifests/leftover.yaml"), "kind: ConfigMap\n").unwrap();

    let drift = bundle::check(&expected, &dir).unwrap();
    assert_eq!(
        drift,
        [
            Drift::Stale { file: bundle::CRD_FILE.into() },
            Drift::Missing { file: bundle::ANNOTATIONS_FILE.into() },
            Drift::Unexpected { file: "manifests/leftover.yaml".into() },
        ]
    );
    let text: Vec<String> = drift.iter().map(ToString::to_string).collect();
    assert_eq!(text[0], "manifests/neurondra.io_neurondraconfigs.yaml: differs from what `make bundle` generates");
    assert_eq!(text[1], "metadata/annotations.yaml: missing");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_crd_upgrade_applies_and_the_operator_accepts_the_result() {
    let client = cluster::admin().await;
    sh_ok(DOC_UPGRADE_CRD);
    let installed =
        Api::<CustomResourceDefinition>::all(client).get(neuron_dra_operator::runtime::client::CRD_NAME).await;
    assert_eq!(neuron_dra_operator::runtime::crd::check_installed(Some(&installed.unwrap())), Ok(()));
}

/// docs/install.md's OLM fences: applied where `config/rbac` already put them (as every test cluster has it), the
/// server takes each, with the shipped allow-list in their install variables and no parameters.
#[test]
fn the_documented_olm_fences_apply() {
    cluster::install();
    let _shipped = SHIPPED_FENCES.blocking_lock();
    let (stdout, _) = sh_ok(DOC_APPLY_FENCES);
    let pods = cluster::get("validatingadmissionpolicy", "neuron-dra-plugin-pods", None).unwrap();
    // The documented apply put back the shipped allow-list; the tests' driver namespaces need theirs.
    cluster::allow_test_drivers();
    for object in [
        "validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-operator",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/neuron-dra-operator",
        "validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-plugin-fence",
        "validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-plugin-pods",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/neuron-dra-plugin-fence",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/neuron-dra-plugin-pods",
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(object)), "{object} not applied:\n{stdout}");
    }
    let variables: Vec<(String, String)> = pods["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| INSTALL_VARIABLES.contains(&v["name"].as_str().unwrap()))
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["expression"].as_str().unwrap().to_string()))
        .collect();
    let shipped = |name: &str, list: &str| (name.to_string(), list.to_string());
    assert_eq!(
        variables,
        [
            shipped("namespacePatterns", "['neuron-dra-driver']"),
            shipped("imagePatterns", "['public.ecr.aws/neuron/neuron-dra-driver']"),
            shipped("operators", "['system:serviceaccount:neuron-dra-operator-system:neuron-dra-operator']"),
            shipped("kubeletDirs", "['/var/lib/kubelet']"),
        ]
    );
    assert!(pods["spec"].get("paramKind").is_none(), "{pods}");
    for name in ["neuron-dra-operator", "neuron-dra-plugin-fence", "neuron-dra-plugin-pods"] {
        let binding = cluster::get("validatingadmissionpolicybinding", name, None).unwrap();
        assert!(binding["spec"].get("paramRef").is_none(), "{binding}");
    }
}

/// A policy spec with its install variables' expressions blanked.
fn fixed_part(object: &Value) -> Value {
    let mut object = object.clone();
    for variable in object["spec"]["variables"].as_array_mut().into_iter().flatten() {
        if variable["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)) {
            variable["expression"] = json!("");
        }
    }
    object
}

/// The expression of a policy's variable `name`.
fn variable(policy: &Value, name: &str) -> String {
    let variables = policy["spec"]["variables"].as_array().unwrap();
    let found = variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no variable {name}"));
    found["expression"].as_str().unwrap().to_string()
}

/// docs/install.md's overlay that changes the allow-list, as the page shows it (in a directory beside `config/`):
/// it sets the same lists in both policies' install variables and changes nothing else `config/default` installs;
/// the API server takes it (a server dry run); and its `test` operations refuse a patch whose variable moved.
#[test]
fn the_documented_allow_list_overlay_sets_both_policies_and_nothing_else() {
    let doc = std::fs::read_to_string(repo("docs/install.md")).unwrap();
    let overlay = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("\n```").next())
        .find(|block| block.contains("patches:"))
        .expect("docs/install.md shows no overlay")
        .to_string();
    assert!(overlay.contains("- ../config/default\n"), "{overlay}");
    // Under target/, two levels below the checkout.
    let name = cluster::unique("install-overlay");
    let dir = repo("target").join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |text: &str| std::fs::write(dir.join("kustomization.yaml"), text).unwrap();
    write(&overlay.replace("- ../config/default\n", "- ../../config/default\n"));
    let built = kustomize(&format!("target/{name}"));
    let shipped = kustomize("config/default");
    assert_eq!(built.len(), shipped.len());
    let namespaces = "['neuron-dra-driver', 'team-*']";
    let images =
        "['public.ecr.aws/neuron/neuron-dra-driver', '111122223333.dkr.ecr.us-west-2.amazonaws.com/neuron-dra-driver']";
    for (built, shipped) in built.iter().zip(&shipped) {
        let name = built["metadata"]["name"].as_str().unwrap();
        if built["kind"] == "ValidatingAdmissionPolicy"
            && ["neuron-dra-operator", "neuron-dra-plugin-pods"].contains(&name)
        {
            assert_eq!(variable(built, "namespacePatterns"), namespaces, "{name}");
            assert_eq!(variable(built, "imagePatterns"), images, "{name}");
            assert_eq!(fixed_part(built), fixed_part(shipped), "{name}: more than its install variables changed");
        } else {
            assert_eq!(built, shipped, "the overlay changed {} {name}", built["kind"]);
        }
    }
    let pods = find(&built, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert_eq!(
        variable(pods, "operators"),
        variable(find(&shipped, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods"), "operators")
    );

    // The server compiles the patched expressions (a dry run changes nothing).
    cluster::install();
    let (stdout, _) = sh_ok(&format!("kubectl apply -k target/{name} --dry-run=server"));
    assert!(
        stdout.contains("validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-plugin-pods"),
        "{stdout}"
    );

    // A variable moved: the patch is refused, not applied to another variable.
    write(
        &overlay
            .replace("- ../config/default\n", "- ../../config/default\n")
            .replace("/spec/variables/1/name", "/spec/variables/0/name"),
    );
    let out = sh(&format!("kubectl kustomize target/{name}"));
    assert!(!out.status.success(), "a patch of a moved variable applied");
    assert!(String::from_utf8_lossy(&out.stderr).contains("test failed"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A throwaway CRD, deleted when dropped.
struct ThrowawayCrd(String);

impl Drop for ThrowawayCrd {
    fn drop(&mut self) {
        let _ = cluster::kubectl_with(&cluster::kubeconfig(), &["delete", "crd", &self.0, "--wait=false"], None);
    }
}

/// Runs `neuron-dra-operator run` with its CRD check pointed at `crd_name`; returns its exit status and stderr,
/// or panics if it is still running after 30 s (it started instead of refusing).
fn run_operator_checking(crd_name: &str) -> (std::process::ExitStatus, String) {
    let dir = temp_dir(crd_name);
    let log = dir.join("operator.log");
    let mut child = Command::new(BIN)
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--probe-addr", "127.0.0.1:0", "--leader-elect", "false"])
        .env("KUBECONFIG", cluster::kubeconfig())
        .env(neuron_dra_operator::runtime::client::CHECK_CRD_ENV, crd_name)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the operator started against {crd_name}: {}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, std::fs::read_to_string(&log).unwrap())
}

/// An operator started against an older CRD exits non-zero and names the upgrade procedure, shown on the real API server
/// without touching the real CRD (other tests use it in parallel): the test creates a throwaway copy of this
/// build's CRD under a test-unique group, renamed (kind, plural, no short names or categories, so `kubectl get ndc`
/// elsewhere never resolves to it) and annotated as written by operator 0.0.1, and points the operator's check at
/// it with `NEURONDRA_TEST_CHECK_CRD`. The operator runs with the admin kubeconfig here because the shipped RBAC
/// lets it read only the real CRD. A name that exists nowhere shows the "not installed" refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_started_against_an_older_or_missing_crd_exits_naming_the_upgrade_procedure() {
    let client = cluster::admin().await;
    let group = format!("{}.neurondra.io", cluster::unique("crdold"));
    let mut older = neuron_dra_operator::runtime::crd::crd();
    older.metadata.name = Some(format!("olderconfigs.{group}"));
    older.metadata.annotations = Some(
        [
            (neuron_dra_operator::runtime::crd::ANNOTATION_VERSION.to_string(), "0.0.1".to_string()),
            (neuron_dra_operator::runtime::crd::ANNOTATION_SCHEMA_HASH.to_string(), "0000".to_string()),
        ]
        .into(),
    );
    older.spec.group = group.clone();
    older.spec.names.kind = "OlderConfig".into();
    older.spec.names.list_kind = Some("OlderConfigList".into());
    older.spec.names.plural = "olderconfigs".into();
    older.spec.names.singular = Some("olderconfig".into());
    older.spec.names.short_names = None;
    older.spec.names.categories = None;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    api.create(&PostParams::default(), &older).await.unwrap();
    let crd = ThrowawayCrd(format!("olderconfigs.{group}"));

    let (status, stderr) = run_operator_checking(&crd.0);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("is older than this operator"), "{stderr}");
    // It names the one upgrade procedure, docs/install.md's "Upgrading", instead of commands of its own.
    let doc = neuron_dra_operator::runtime::crd::UPGRADE_DOC;
    assert!(stderr.contains(doc), "no upgrade procedure in: {stderr}");
    assert!(doc.ends_with("/docs/install.md#upgrading"));
    assert!(std::fs::read_to_string(repo("docs/install.md")).unwrap().contains("\n## Upgrading\n"));

    let (status, stderr) = run_operator_checking(&format!("missing.{group}"));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("is not installed"), "{stderr}");
}
