//! Commands docs/install.md shows for Helm, monitoring and the upgrade; tests/helm.rs, tests/helm_upgrade.rs,
//! tests/monitoring.rs, tests/metrics.rs and tests/real_node_install.rs run them, and tests/install.rs checks that the doc shows exactly its own commands and these.

#![allow(dead_code)]

pub const HELM_INSTALL: &str =
    "helm install neuron-dra-operator charts/neuron-dra-operator -n neuron-dra-operator-system --create-namespace";
pub const HELM_MONITORING: &str = "helm upgrade neuron-dra-operator charts/neuron-dra-operator -n neuron-dra-operator-system --reuse-values --set metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.grafanaDashboard.enabled=true";
pub const HELM_UPGRADE: &str =
    "helm upgrade neuron-dra-operator charts/neuron-dra-operator -n neuron-dra-operator-system --reuse-values";
pub const HELM_UNINSTALL: &str = "helm uninstall neuron-dra-operator -n neuron-dra-operator-system";
/// docs/install.md's "Upgrading" with Helm, from the new release's chart package (`with_package` swaps in a chart the
/// test made); the first upgrade from a release that did not own the CRD (installed by kustomize, or by an earlier
/// chart's crds/) takes it over. tests/helm_upgrade.rs runs both; the EKS guide links to them.
pub const HELM_UPGRADE_RELEASE: &str = "helm upgrade neuron-dra-operator dist/neuron-dra-operator-VERSION.tgz -n neuron-dra-operator-system --reset-then-reuse-values";
pub const HELM_UPGRADE_TAKE_OWNERSHIP: &str = "helm upgrade neuron-dra-operator dist/neuron-dra-operator-VERSION.tgz -n neuron-dra-operator-system --reset-then-reuse-values --take-ownership";
/// docs/install.md's "Upgrading" from an operator that made each config's RBAC and fence itself: what it left, which
/// this one may not delete (tests/helm_upgrade.rs runs it after the chart's and kustomize's upgrade).
pub const UPGRADE_CLEANUP: &str = "kubectl delete clusterroles,validatingadmissionpolicies,validatingadmissionpolicybindings -l app.kubernetes.io/managed-by=neuron-dra-operator,neurondra.io/config";
/// Run on the real node (tests/real_node_install.rs): the smoke-test pod needs a kubelet.
pub const HELM_TEST: &str = "helm test neuron-dra-operator -n neuron-dra-operator-system";
pub const APPLY_PROMETHEUS: &str = "kubectl apply -k config/prometheus";
pub const APPLY_GRAFANA: &str = "kubectl apply -k config/grafana";
/// Lets a Prometheus running as ServiceAccount `monitoring/prometheus-k8s` (kube-prometheus' name) read `/metrics`.
pub const BIND_METRICS_READER: &str = "kubectl create clusterrolebinding neuron-dra-operator-metrics-prometheus --clusterrole=neuron-dra-operator-metrics-reader --serviceaccount=monitoring:prometheus-k8s";

pub const COMMANDS: &[&str] = &[
    HELM_INSTALL,
    HELM_MONITORING,
    HELM_UPGRADE,
    HELM_UPGRADE_RELEASE,
    HELM_UPGRADE_TAKE_OWNERSHIP,
    UPGRADE_CLEANUP,
    HELM_UNINSTALL,
    HELM_TEST,
    APPLY_PROMETHEUS,
    APPLY_GRAFANA,
    BIND_METRICS_READER,
];

/// A documented `helm` command's arguments (without `helm`) for another release and namespace, so parallel tests
/// and other installs in the cluster never share one.
pub fn helm_args(command: &str, release: &str, namespace: &str) -> Vec<String> {
    let words: Vec<&str> = command.split(' ').collect();
    assert_eq!(words[0], "helm", "{command}");
    let mut args: Vec<String> = words[1..].iter().map(|w| w.to_string()).collect();
    assert_eq!(args[1], "neuron-dra-operator", "the release is the second word: {command}");
    args[1] = release.to_string();
    let n = args.iter().position(|w| w == "-n").expect("a namespace");
    args[n + 1] = namespace.to_string();
    args
}

/// docs/install-eks.md, in its order. Each is run by a test (with the test's names where it names a release,
/// namespace, config or image: `EKS_SUBSTITUTED`), except the AWS ones (`EKS_AWS_ONLY`) and the CRD's deletion
/// (`EKS_SHARED`).
/// The chart package `make release` writes, as the guide names it.
pub const EKS_PACKAGE: &str = "dist/neuron-dra-operator-0.1.0.tgz";
pub const EKS_MAKE_RELEASE: &str = "make release VERSION=0.1.0";
pub const EKS_ECR_CREATE: &str = "aws ecr create-repository --repository-name neuron-dra-operator";
pub const EKS_ECR_LOGIN: &str =
    "aws ecr get-login-password | skopeo login --username AWS --password-stdin ACCOUNT.dkr.ecr.REGION.amazonaws.com";
pub const EKS_COPY_IMAGE: &str = "skopeo copy --all oci-archive:dist/neuron-dra-operator-0.1.0.oci.tar docker://ACCOUNT.dkr.ecr.REGION.amazonaws.com/neuron-dra-operator:0.1.0";
pub const EKS_CREATE_NAMESPACE: &str = "kubectl create namespace neuron-dra-operator-system";
pub const EKS_LABEL_NAMESPACE: &str =
    "kubectl label namespace neuron-dra-operator-system pod-security.kubernetes.io/enforce=restricted";
pub const EKS_HELM_INSTALL: &str = "helm install neuron-dra-operator dist/neuron-dra-operator-0.1.0.tgz -n neuron-dra-operator-system --set image.repository=ACCOUNT.dkr.ecr.REGION.amazonaws.com/neuron-dra-operator";
pub const EKS_APPLY_SAMPLES: &str = "kubectl apply -k config/samples";
pub const EKS_GET: &str = "kubectl get ndc";
pub const EKS_APPLY_POD: &str = "kubectl apply -f examples/pod.yaml";
pub const EKS_GET_POD: &str = "kubectl get pod finetune -n ml-training -o wide";
pub const EKS_GET_CLAIMS: &str = "kubectl get resourceclaims -n ml-training";
pub const EKS_DELETE_CONFIGS: &str = "kubectl delete ndc --all --wait=true --timeout=5m";
pub const EKS_DELETE_CRD: &str = "kubectl delete crd neurondraconfigs.neurondra.io";
pub const EKS_RECOVER_FINALIZER: &str =
    r#"kubectl patch ndc CONFIG --type=merge -p '{"metadata":{"finalizers":null}}'"#;
pub const EKS_RECOVER_NAMESPACED: &str =
    "kubectl delete daemonsets,serviceaccounts,resourceclaimtemplates,resourcequotas -A -l neurondra.io/config=CONFIG";
pub const EKS_RECOVER_CLUSTER: &str = "kubectl delete clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings -l neurondra.io/config=CONFIG";

pub const EKS_AWS_ONLY: &[&str] = &[EKS_ECR_CREATE, EKS_ECR_LOGIN];
/// Run as its fast subset: `make release-check` (tests/release.rs) builds the same release, unoptimised.
pub const EKS_RELEASE: &[&str] = &[EKS_MAKE_RELEASE];
/// Not run: every test shares the CRD. tests/install_eks.rs checks instead that nothing could hold up its deletion
/// (no config of the uninstalled release is left with a finalizer).
pub const EKS_SHARED: &[&str] = &[EKS_DELETE_CRD];
/// Run with a test's own names: the release and namespace (tests/real_node_install.rs), the samples' names
/// (tests/samples.rs), `--all` narrowed to the test's configs, `CONFIG` (tests/install_eks.rs), a chart the test
/// packaged for `EKS_PACKAGE` (`with_package`), the release check's image archive and a local destination for
/// `skopeo copy` (tests/release.rs).
pub const EKS_SUBSTITUTED: &[&str] = &[
    EKS_COPY_IMAGE,
    EKS_CREATE_NAMESPACE,
    EKS_LABEL_NAMESPACE,
    EKS_HELM_INSTALL,
    HELM_TEST,
    EKS_APPLY_SAMPLES,
    EKS_GET,
    EKS_APPLY_POD,
    EKS_GET_POD,
    EKS_GET_CLAIMS,
    EKS_DELETE_CONFIGS,
    HELM_UNINSTALL,
    EKS_RECOVER_FINALIZER,
    EKS_RECOVER_NAMESPACED,
    EKS_RECOVER_CLUSTER,
];

/// The chart package docs/install.md's upgrade names, for whatever release one upgrades to.
pub const DOC_PACKAGE: &str = "dist/neuron-dra-operator-VERSION.tgz";

/// A documented command with its chart package (the EKS guide's `EKS_PACKAGE`, or install.md's `DOC_PACKAGE`)
/// replaced by `package`.
pub fn with_package(command: &str, package: &std::path::Path) -> String {
    let shown = [EKS_PACKAGE, DOC_PACKAGE].into_iter().find(|shown| command.contains(shown));
    let shown = shown.unwrap_or_else(|| panic!("no chart package in {command}"));
    command.replace(shown, package.to_str().unwrap())
}

/// The ```sh lines of a Markdown file (comments and blank lines left out).
pub fn shell_lines(markdown: &str) -> Vec<String> {
    let mut in_block = false;
    let mut shown = Vec::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_block = !in_block && line.trim_start_matches('`').starts_with("sh");
        } else if in_block && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            shown.push(line.split(" #").next().unwrap().trim().to_string());
        }
    }
    shown
}
