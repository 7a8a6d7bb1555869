//! Commands docs/install.md shows for Helm and monitoring; tests/helm.rs, tests/monitoring.rs, tests/metrics.rs and
//! tests/real_node_install.rs run them, and tests/install.rs checks that the doc shows exactly its own commands and these.

#![allow(dead_code)]

pub const HELM_INSTALL: &str =
    "helm install neuron-dra-operator charts/neuron-dra-operator -n neuron-dra-operator-system --create-namespace";
pub const HELM_MONITORING: &str = "helm upgrade neuron-dra-operator charts/neuron-dra-operator -n neuron-dra-operator-system --reuse-values --set metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.grafanaDashboard.enabled=true";
pub const HELM_UPGRADE: &str =
    "helm upgrade neuron-dra-operator charts/neuron-dra-operator -n neuron-dra-operator-system --reuse-values";
pub const HELM_UNINSTALL: &str = "helm uninstall neuron-dra-operator -n neuron-dra-operator-system";
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
