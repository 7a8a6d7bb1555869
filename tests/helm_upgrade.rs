//! docs/install.md's upgrade procedure, run on the local control plane.
//!
//! A release of an earlier chart (its CRD in `crds/`, which Helm never upgrades) whose CRD is older than this
//! operator's (`tests/fixtures/older-crd.yaml`, from an earlier commit: no `spec.quotas`, no `status.teams`), a
//! NeuronDRAConfig in place, the new operator refusing to start against that CRD and naming the procedure; then the
//! documented `helm upgrade` to this chart: the CRD is this build's, the config is still there as it was, the
//! operator starts and reconciles it to Ready, and the operator's Deployment was not touched (same generation, same
//! pod template, no new ReplicaSet); a second upgrade in the steady state; `helm uninstall` keeps the CRD and the
//! config.
//!
//! The earlier layout, in which the operator wrote each config's ClusterRole and fence itself
//! (`tests/fixtures/previous-layout`: that operator's ClusterRole and policy, and its chart's policy and Deployment
//! templates), upgraded in place with the chart and with kustomize: afterwards the plugin's ClusterRole and fences
//! are there as `config/rbac` has them (but for their install variables: the allow-list and the operator), the
//! operator's policy holds the allow-list and reads no parameters, and the documented cleanup leaves no per-config ClusterRole, policy or binding of the earlier operator, and nothing else is gone.
//!
//! The CRD, the plugin's ClusterRole and fences and the operator's kustomize RBAC are shared by every test of the
//! cluster, so these tests take turns (`SERIAL`; cargo runs test binaries one after another), and guards put the
//! shared objects back as `cluster::install` had them, however a test ends.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod helm;
    pub mod scenario;
    pub mod tools;
}

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use neuron_dra_operator::runtime::client::CRD_NAME;
use neuron_dra_operator::runtime::crd::{self, ANNOTATION_SCHEMA_HASH, UPGRADE_DOC};
use serde_json::{Value, json};
use support::cluster::{self, Operator, OperatorOptions, kubectl, kubectl_with, repo};
use support::docs;
use support::helm::{helm, helm_doc};
use support::scenario::Scenario;
use support::tools::{self, temp_dir};

const CHART: &str = "charts/neuron-dra-operator";
/// The policies' install variables: the allow-list and the operator, which the install sets.
const INSTALL_VARIABLES: [&str; 5] = neuron_dra_operator::logic::fence::INSTALL_VARIABLES;
/// The earlier layout's files (from the last commit before the plugin's ClusterRole and fences were installed
/// statically).
const PREVIOUS: &str = "tests/fixtures/previous-layout";

/// One test at a time: each changes objects every test of the cluster shares.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A documented `helm upgrade` of docs/install.md for this release and namespace, from `chart`.
fn upgrade(command: &str, chart: &Path, release: &str, namespace: &str) -> String {
    helm_doc(&docs::with_package(command, chart), release, namespace, &[])
}

/// The chart as an earlier release shipped it: this chart with the CRD in `crds/` (the older one) instead of the
/// template. Everything else is this chart's, so only the CRD differs between the two releases.
fn earlier_chart() -> PathBuf {
    let dir = temp_dir("earlier-chart").join("neuron-dra-operator");
    let copied = std::process::Command::new("cp").arg("-r").arg(repo(CHART)).arg(&dir).status().unwrap();
    assert!(copied.success());
    std::fs::remove_file(dir.join("templates/crd.yaml")).unwrap();
    std::fs::remove_file(dir.join("files/neurondra.io_neurondraconfigs.yaml")).unwrap();
    std::fs::create_dir(dir.join("crds")).unwrap();
    std::fs::copy(repo("tests/fixtures/older-crd.yaml"), dir.join("crds/neurondra.io_neurondraconfigs.yaml")).unwrap();
    dir
}

fn get(kind: &str, name: &str, namespace: Option<&str>) -> Value {
    cluster::get(kind, name, namespace).unwrap()
}

fn schema_hash(crd: &Value) -> String {
    crd["metadata"]["annotations"][ANNOTATION_SCHEMA_HASH].as_str().unwrap_or_default().to_string()
}

/// Puts this build's CRD back as `cluster::install` had it (kubectl's, not a release's) when the test ends.
struct SharedCrd;

impl Drop for SharedCrd {
    fn drop(&mut self) {
        // A whole replace: the file's metadata, so Helm's labels and annotations go in the same write.
        let file = repo("crds/neurondra.io_neurondraconfigs.yaml");
        let _ = kubectl_with(&cluster::kubeconfig(), &["replace", "-f", file.to_str().unwrap()], None);
    }
}

/// What `helm upgrade` must leave alone when only the CRD changed.
fn deployment_state(name: &str, namespace: &str) -> (Value, Value, Vec<String>) {
    let deployment = get("deployment", name, Some(namespace));
    let replica_sets: Value =
        serde_json::from_str(&kubectl(&["get", "replicasets", "-n", namespace, "-o", "json"])).unwrap();
    let mut names: Vec<String> = replica_sets["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().into())
        .collect();
    names.sort();
    (deployment["metadata"]["generation"].clone(), deployment["spec"]["template"].clone(), names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_an_older_crd_upgrades_to_this_chart_and_its_config_survives() {
    let _serial = SERIAL.lock().await;
    let mut s = Scenario::new("helmup").await;
    let _restore = SharedCrd;
    let (release, namespace) = (s.id.clone(), s.id.clone());
    let fullname = format!("{release}-neuron-dra-operator");
    // The cluster's plugin ClusterRole and fences are the shared ones (`cluster::install`): this release leaves
    // them out, its operator reads its allow-list there (the config's driver namespace is in it), and those fences
    // let it start plugins once they name it among their operators, as a cluster's admin does for a second release.
    let driver_namespace = s.driver_namespace();
    let fence = format!("fence.clusterObjects=false,fence.driverNamespaces={{{driver_namespace}}}");
    let _fences = SharedFences;
    cluster::also_operator(&format!("system:serviceaccount:{namespace}:{fullname}"));

    // The earlier release, on a cluster where its CRD is the older one (as its crds/ installed it).
    let older = std::fs::read_to_string(repo("tests/fixtures/older-crd.yaml")).unwrap();
    kubectl_with(&cluster::kubeconfig(), &["replace", "-f", "-"], Some(&older)).unwrap();
    cluster::wait_established(CRD_NAME);
    let earlier = earlier_chart();
    let installed = helm(&[
        "install",
        &release,
        earlier.to_str().unwrap(),
        "-n",
        &namespace,
        "--create-namespace",
        "--set",
        &fence,
    ]);
    assert!(installed.ok("helm install of the earlier chart").contains("STATUS: deployed"));
    let older_hash = schema_hash(&get("crd", CRD_NAME, None));
    assert_ne!(older_hash, schema_hash(&serde_json::to_value(crd::crd()).unwrap()));

    // A config in place, written against the older schema.
    let templates = s.namespace("team", &[]).await;
    let spec = json!({"templates": {"namespaces": [templates]}, "driver": {"namespace": driver_namespace}, "profiles": [
        {"name": "finetune", "training": {"instanceType": "trn2.48xlarge", "devices": 4, "efa": true}}]});
    let name = format!("{}-config", s.id);
    s.apply(&s.config(&name, spec.clone())).await.unwrap();
    let before = get("ndc", &name, None);

    // This build's operator refuses the older CRD, naming the one upgrade procedure.
    let id = s.id.clone();
    let options = || OperatorOptions { test_id: &id, lease: &id, extra: &[] };
    let mut refused = Operator::start_as(options(), &namespace, &fullname);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while refused.is_running() {
        assert!(std::time::Instant::now() < deadline, "the operator started: {}", refused.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = refused.log_text();
    assert!(log.contains("is older than this operator") && log.contains(UPGRADE_DOC), "{log}");
    let (generation, template, replica_sets) = deployment_state(&fullname, &namespace);

    // The documented upgrade; the first from a release that did not own its CRD takes it over.
    let chart = tools::packaged_chart();
    let upgraded = upgrade(docs::HELM_UPGRADE_TAKE_OWNERSHIP, &chart, &release, &namespace);
    assert!(upgraded.contains("STATUS: deployed"), "{upgraded}");

    // The CRD is this build's, and now the release's (kept on uninstall).
    let installed: CustomResourceDefinition =
        Api::all(s.client.clone()).get(CRD_NAME).await.expect("the CRD after the upgrade");
    assert_eq!(crd::check_installed(Some(&installed)), Ok(()));
    let live = get("crd", CRD_NAME, None);
    assert_eq!(live["metadata"]["annotations"]["meta.helm.sh/release-name"], release.as_str());
    assert_eq!(live["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    assert!(
        live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["quotas"]
            .is_object()
    );

    // The config survived, as it was.
    let mut after = get("ndc", &name, None);
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    // Fields the new schema adds with a default appear with it (the API server defaults what it reads).
    if before["spec"]["driver"].get("kubeletDir").is_none() {
        let added = after["spec"]["driver"].as_object_mut().unwrap().remove("kubeletDir");
        assert_eq!(added, Some(json!("/var/lib/kubelet")), "driver.kubeletDir defaulted");
    }
    assert_eq!(after["spec"], before["spec"]);
    // Nothing restarted: the Deployment was not even patched.
    assert_eq!(deployment_state(&fullname, &namespace), (generation.clone(), template.clone(), replica_sets.clone()));

    // The operator starts against the upgraded CRD and reconciles the config to Ready, under the chart's RBAC.
    s.operator = Some(Operator::start_as(options(), &namespace, &fullname));
    let status = s.wait_ready(&name).await.status.unwrap();
    assert_eq!(status.templates.unwrap().count, 1);

    // The next upgrade is the plain one.
    let again = upgrade(docs::HELM_UPGRADE_RELEASE, &chart, &release, &namespace);
    assert!(again.contains("REVISION: 3"), "{again}");
    assert_eq!(deployment_state(&fullname, &namespace), (generation, template, replica_sets));

    // Uninstall keeps the CRD and with it the config (crds.keep).
    s.operator = None;
    helm(&["uninstall", &release, "-n", &namespace, "--wait", "--timeout", "60s"]).ok("helm uninstall");
    assert_eq!(schema_hash(&get("crd", CRD_NAME, None)), schema_hash(&serde_json::to_value(crd::crd()).unwrap()));
    assert_eq!(get("ndc", &name, None)["metadata"]["uid"], before["metadata"]["uid"]);
    // The config's finalizer would need an operator: let the test's own go.
    let patch = r#"{"metadata":{"finalizers":null}}"#;
    kubectl(&["patch", "ndc", &name, "--type=merge", "-p", patch]);
    kubectl(&["delete", "ndc", &name, "--wait=false"]);
    let _ =
        kubectl_with(&cluster::kubeconfig(), &["delete", "namespace", &namespace, &templates, "--wait=false"], None);
}

// --- the earlier layout: the operator wrote each config's ClusterRole and fence itself ---

/// The kinds the earlier operator wrote per config that this one writes none of, and the ClusterRoleBinding, which
/// this one keeps (bound to the installed ClusterRole instead).
const PER_CONFIG_KINDS: &[&str] = &["clusterrole", "validatingadmissionpolicy", "validatingadmissionpolicybinding"];

/// Puts the cluster's shared fences back as `cluster::install` left them (the tests' allow-list, config/rbac's
/// operator alone) when dropped.
struct SharedFences;

impl Drop for SharedFences {
    fn drop(&mut self) {
        cluster::allow_test_drivers();
    }
}

/// The tests of one topic each, in `tests/helm_upgrade_topics/`.
mod helm_upgrade_topics {
    mod earlier_layout;
}
