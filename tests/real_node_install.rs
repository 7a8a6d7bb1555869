//! The operator as users run it: a Pod on the real node, from the image `hack/images.sh` builds with the
//! repository's own Dockerfile, installed by the Helm chart and then by `kubectl apply -k config/default`, under the
//! `restricted` Pod Security Standard. It becomes Ready through its real probes (the kubelet calls them), reaches
//! the API server through the in-cluster configuration, reconciles a config, and serves HTTPS `/metrics` on its pod
//! IP only to a token allowed to read it.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod helm;
    pub mod node;
    pub mod scenario;
    pub mod tools;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use neuron_dra_operator::devtools::simulate::fleet::SIMULATED_LABEL;
use serde_json::{Value, json};
use support::cluster::{self, eventually, https_get, kubectl, kubectl_with, metrics_reader_token, repo};
use support::scenario::Scenario;
use support::{docs, node, tools};

const IMAGE_REPOSITORY: &str = "ghcr.io/neurondra/neuron-dra-operator";
/// The operator's pods, in the chart and in config/manager (each test namespace holds one installation).
const SELECTOR: &str = "app.kubernetes.io/name=neuron-dra-operator";
/// How long the operator's pods may take to be Ready (the image is imported, never pulled: no registry is reachable).
const STARTUP: Duration = Duration::from_secs(150);

/// The first value of `key:` in a YAML file of the repository (flat lookups only).
fn yaml_field(path: &str, key: &str) -> String {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    let value = text.lines().find_map(|l| l.trim().strip_prefix(key)).unwrap_or_else(|| panic!("{path}: no {key}"));
    value.trim().trim_matches('"').to_string()
}

/// The image `hack/images.sh` builds and imports into the node is the one kustomize and the chart install (the
/// chart's tag defaults to its appVersion), so both run it unchanged with `IfNotPresent`.
#[test]
fn the_image_built_here_is_the_one_every_install_path_names() {
    let kustomization = "config/manager/kustomization.yaml";
    let kustomized = format!("{}:{}", yaml_field(kustomization, "newName:"), yaml_field(kustomization, "newTag:"));
    assert_eq!(node::image("operator"), kustomized);
    let chart = "charts/neuron-dra-operator";
    let charted = format!(
        "{}:{}",
        yaml_field(&format!("{chart}/values.yaml"), "repository:"),
        yaml_field(&format!("{chart}/Chart.yaml"), "appVersion:")
    );
    assert_eq!(yaml_field(&format!("{chart}/values.yaml"), "tag:"), "", "the chart's tag follows its appVersion");
    assert_eq!(charted, kustomized);
    assert_eq!(yaml_field(kustomization, "newName:"), IMAGE_REPOSITORY);
}

/// The operator pods with `selector` in `namespace` once `replicas` of them are Ready; their IPs.
async fn ready_pods(s: &Scenario, namespace: &str, selector: &str, replicas: usize) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    let waited = tokio::time::timeout(STARTUP, async {
        loop {
            let list = pods.list(&ListParams::default().labels(selector)).await.unwrap().items;
            let ready: Vec<String> = list
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    let conditions = p.status.as_ref().and_then(|st| st.conditions.as_ref());
                    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
                .collect();
            if ready.len() == replicas {
                return ready;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    waited
        .unwrap_or_else(|_| panic!("{replicas} Ready operator pods in {namespace}:\n{}", node::describe(&[namespace])))
}

/// Everything about one running installation: on the node, non-root, restricted, probes and metrics, and a config
/// in `driver_namespace` (one the installation's allow-list names) reconciled.
async fn check_installation(s: &Scenario, namespace: &str, selector: &str, replicas: usize, driver_namespace: &str) {
    let ips = ready_pods(s, namespace, selector, replicas).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    for pod in pods.list(&ListParams::default().labels(selector)).await.unwrap().items {
        let spec = pod.spec.unwrap();
        // On a real node (node-1 or node-2 of `make test-node`), not a simulated one a failed test left.
        let on = spec.node_name.clone().expect("a Ready pod is bound");
        let node = Api::<Node>::all(s.client.clone()).get(&on).await.unwrap();
        assert!(!node.metadata.labels.unwrap_or_default().contains_key(SIMULATED_LABEL), "{on} is simulated");
        let container = &spec.containers[0];
        assert!(container.image.as_deref().unwrap().starts_with(IMAGE_REPOSITORY), "{:?}", container.image);
        assert!(container.readiness_probe.is_some() && container.liveness_probe.is_some());
        let status = pod.status.unwrap();
        let restarts: i32 = status.container_statuses.unwrap().iter().map(|c| c.restart_count).sum();
        assert_eq!(restarts, 0, "the operator restarted: {}", kubectl(&["logs", "-n", namespace, "-l", selector]));
    }
    let labels = kubectl(&["get", "namespace", namespace, "-o", "jsonpath={.metadata.labels}"]);
    let labels: Value = serde_json::from_str(&labels).unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");

    // HTTPS /metrics on each pod IP: 401 without a token, 403 with a token that may not read it, 200 with one that
    // may (a ServiceAccount bound to the shipped metrics-reader ClusterRole).
    let nobody = unprivileged_token(namespace);
    for ip in &ips {
        let url = format!("https://{ip}:8443/metrics");
        let (code, _) = https_get(&url, None).unwrap_or_else(|| panic!("nothing answers on {url}"));
        assert_eq!(code, 401, "{url} without a token");
        assert_eq!(https_get(&url, Some(&nobody)).unwrap().0, 403, "{url} with a token that may not read it");
        let (code, body) = https_get(&url, Some(&metrics_reader_token())).unwrap();
        assert_eq!(code, 200, "{url}: {body}");
        assert!(body.contains("neuron_dra_"), "{body}");
    }

    // The operator in the pod does its job: a config reconciled to Ready.
    let work = s.namespace("work", &[]).await;
    let spec = json!({"templates": {"namespaces": [work]}, "driver": {"namespace": driver_namespace},
        "profiles": [{"name": "one", "training": {"devices": 1}}]});
    let mut config = s.config(&s.id, spec);
    config["metadata"]["labels"] = json!({});
    s.apply(&config).await.unwrap();
    s.wait_ready(&s.id).await;
    s.delete_config(&s.id).await;
    eventually(Duration::from_secs(60), "the config deleted by the operator in the pod", || async {
        s.configs().get_opt(&s.id).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A token of a ServiceAccount bound to nothing.
fn unprivileged_token(namespace: &str) -> String {
    let _ = kubectl_with(&cluster::kubeconfig(), &["create", "serviceaccount", "-n", namespace, "nobody"], None);
    cluster::token(namespace, "nobody", &[])
}

fn helm(args: &[&str]) -> String {
    support::helm::helm(args).ok(&format!("helm {}", args.join(" ")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real node: make test-node"]
async fn installed_by_helm_and_by_kustomize_the_operator_runs_on_the_node_under_restricted_pod_security() {
    let s = Scenario::new("node-install").await;
    node::name(&s.client).await;
    cluster::install();

    // Helm, as docs/install-eks.md says (a namespace that enforces `restricted`, the image from "your registry",
    // here the one built for the node), with this test's release and namespace.
    let release = s.id.clone();
    let namespace = format!("{}-helm", s.id);
    let own = |command: &str| command.replace("neuron-dra-operator-system", &namespace);
    let kubectl_doc = |command: &str| kubectl(&own(command).split(' ').skip(1).collect::<Vec<_>>());
    kubectl_doc(docs::EKS_CREATE_NAMESPACE);
    kubectl_doc(docs::EKS_LABEL_NAMESPACE);
    let install = docs::with_package(docs::EKS_HELM_INSTALL, &tools::packaged_chart())
        .replace("ACCOUNT.dkr.ecr.REGION.amazonaws.com/neuron-dra-operator", IMAGE_REPOSITORY);
    let mut args = docs::helm_args(&install, &release, &namespace);
    // Every test shares the CRD, the plugin's ClusterRole and the fences cluster::install applied; this release
    // leaves them alone (tests/helm_upgrade.rs has a release manage them): its operator reads its allow-list there
    // (the tests' `*-driver` covers its driver namespace) and may start a plugin once those fences name it among
    // their operators, as a cluster's admin does for a second release (docs/install.md).
    let driver_namespace = format!("{}-helm-driver", s.id);
    let fence = format!("fence.clusterObjects=false,fence.driverNamespaces={{{driver_namespace}}}");
    cluster::also_operator(&format!("system:serviceaccount:{namespace}:{release}-neuron-dra-operator"));
    args.extend(["--wait", "--timeout", "150s", "--set", "crds.enabled=false", "--set", &fence].map(String::from));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>());
    check_installation(&s, &namespace, SELECTOR, 2, &driver_namespace).await;
    // `helm test`: the chart's smoke-test pod scrapes both replicas through the Service's endpoints, under
    // `restricted`, and its objects go once it passed.
    let mut args = docs::helm_args(docs::HELM_TEST, &release, &namespace);
    args.extend(["--timeout", "120s"].map(String::from));
    let tested = helm(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(tested.contains("Phase:          Succeeded") || tested.contains("Phase: Succeeded"), "{tested}");
    let left = kubectl(&["get", "pods,serviceaccounts", "-n", &namespace, "-o", "name"]);
    assert!(!left.contains("smoke-test"), "helm test left {left}");
    helm(&["uninstall", &release, "-n", &namespace, "--wait", "--timeout", "60s"]);
    let _ = kubectl_with(&cluster::kubeconfig(), &["delete", "namespace", &namespace, "--wait=false"], None);

    // kustomize: the documented `kubectl apply -k config/default` (its namespace enforces `restricted` itself).
    kubectl(&["apply", "-k", repo("config/default").to_str().unwrap()]);
    // The documented apply put back the default allow-list and operator; the tests' driver namespaces need theirs.
    cluster::allow_test_drivers();
    let system = cluster::OPERATOR_NAMESPACE;
    check_installation(&s, system, SELECTOR, 2, &s.driver_namespace()).await;
    // Only the Deployment goes: the CRD, RBAC and namespace stay for the other tests, as cluster::install leaves them.
    kubectl(&["delete", "deployment", "-n", system, "-l", SELECTOR, "--wait=true"]);
}
