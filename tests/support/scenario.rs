//! One controller test: its own id, namespaces, driver namespace, config label and operator process.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use neuron_dra_operator::api::{NeuronDRAConfig, NeuronDRAConfigStatus};
use serde_json::{Value, json};

use super::cluster::{self, Operator, OperatorOptions, TEST_LABEL, eventually};

pub const TIMEOUT: Duration = Duration::from_secs(90);

pub struct Scenario {
    pub id: String,
    pub client: Client,
    pub operator: Option<Operator>,
}

impl Scenario {
    /// A fresh id and admin client; no operator yet.
    pub async fn new(prefix: &str) -> Scenario {
        let client = cluster::admin().await;
        Scenario { id: cluster::unique(prefix), client, operator: None }
    }

    /// A fresh id with an operator running under the shipped RBAC.
    pub async fn with_operator(prefix: &str) -> Scenario {
        let mut scenario = Scenario::new(prefix).await;
        scenario.operator = Some(scenario.start_operator(&[]));
        scenario
    }

    pub fn start_operator(&self, extra: &[&str]) -> Operator {
        Operator::start(OperatorOptions { test_id: &self.id, lease: &self.id, extra })
    }

    pub fn operator(&self) -> &Operator {
        self.operator.as_ref().expect("operator started")
    }

    /// A namespace of this test: `<id>-<suffix>`, created with labels.
    pub async fn namespace(&self, suffix: &str, labels: &[(&str, &str)]) -> String {
        let name = format!("{}-{suffix}", self.id);
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        Api::<Namespace>::all(self.client.clone())
            .patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(&ns))
            .await
            .unwrap();
        name
    }

    pub async fn label_namespace(&self, name: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"labels": {key: value}}});
        Api::<Namespace>::all(self.client.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// The driver namespace this test's configs use.
    pub fn driver_namespace(&self) -> String {
        format!("{}-driver", self.id)
    }

    /// A config document: the test label, this test's driver namespace, and a node selector no other test's nodes
    /// match, unless `spec` sets them.
    pub fn config(&self, name: &str, spec: Value) -> Value {
        let mut spec = spec;
        let object = spec.as_object_mut().expect("spec is an object");
        object.entry("nodeSelector").or_insert(json!({"matchLabels": {TEST_LABEL: self.id}}));
        let driver = object.entry("driver").or_insert(json!({}));
        driver.as_object_mut().unwrap().entry("namespace").or_insert(json!(self.driver_namespace()));
        json!({
            "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
            "metadata": {"name": name, "labels": {TEST_LABEL: self.id}},
            "spec": spec,
        })
    }

    pub fn configs(&self) -> Api<NeuronDRAConfig> {
        Api::all(self.client.clone())
    }

    pub fn templates(&self, namespace: &str) -> Api<ResourceClaimTemplate> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Server-side applies a config document as a user would (field manager `kubectl-test`).
    pub async fn apply(&self, document: &Value) -> Result<NeuronDRAConfig, kube::Error> {
        let name = document["metadata"]["name"].as_str().unwrap();
        self.configs().patch(name, &PatchParams::apply("kubectl-test").force(), &Patch::Apply(document)).await
    }

    pub async fn delete_config(&self, name: &str) {
        self.configs().delete(name, &DeleteParams::default()).await.unwrap();
    }

    /// Waits until a condition of the config has this status, and returns the config.
    pub async fn wait_condition(&self, name: &str, type_: &str, status: &str) -> NeuronDRAConfig {
        self.wait_condition_within(name, type_, status, TIMEOUT).await
    }

    /// `wait_condition` with its own timeout.
    pub async fn wait_condition_within(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        timeout: std::time::Duration,
    ) -> NeuronDRAConfig {
        let api = self.configs();
        eventually(timeout, &format!("{name}: {type_}={status}"), || {
            let api = api.clone();
            async move {
                let config = api.get_opt(name).await.ok()??;
                let current = config.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?.status.clone();
                let fresh = config.status.as_ref()?.observed_generation == config.metadata.generation;
                (current == status && fresh).then_some(config)
            }
        })
        .await
    }

    /// Waits until the status of the config named after the test satisfies `check` (a status of the current
    /// generation).
    pub async fn wait_status(
        &self,
        what: &str,
        check: impl Fn(&NeuronDRAConfigStatus) -> bool,
    ) -> NeuronDRAConfigStatus {
        let api = self.configs();
        eventually(TIMEOUT, what, || async {
            let config = api.get_opt(&self.id).await.ok()??;
            let status = config.status?;
            (status.observed_generation == config.metadata.generation && check(&status)).then_some(status)
        })
        .await
    }

    /// Deletes a pod and waits until it is gone (its claim is then released).
    pub async fn delete_pod(&self, namespace: &str, name: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let _ = pods.delete(name, &DeleteParams::default()).await;
        eventually(TIMEOUT, &format!("pod {name} gone"), || async {
            pods.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }

    pub async fn wait_ready(&self, name: &str) -> NeuronDRAConfig {
        self.wait_condition(name, "Ready", "True").await
    }

    /// Names of the templates in a namespace.
    pub async fn template_names(&self, namespace: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .templates(namespace)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|t| t.name_any())
            .collect();
        names.sort();
        names
    }

    pub async fn wait_templates(&self, namespace: &str, expected: &[&str]) {
        let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        expected.sort();
        eventually(TIMEOUT, &format!("templates {expected:?} in {namespace}"), || async {
            (self.template_names(namespace).await == expected).then_some(())
        })
        .await
    }
}

impl Scenario {
    /// What a failed test needs to be diagnosed from CI output alone: whether the operator still runs, this
    /// test's configs as stored, and the end of the operator's log.
    fn report_failure(&mut self) {
        let selector = format!("{TEST_LABEL}={}", self.id);
        let configs =
            cluster::kubectl_with(&cluster::kubeconfig(), &["get", "ndc", "-l", &selector, "-o", "yaml"], None)
                .unwrap_or_else(|e| e);
        eprintln!("--- {}: configs\n{configs}", self.id);
        if let Some(operator) = self.operator.as_mut() {
            let running = operator.is_running();
            let log = operator.log_text();
            let lines: Vec<&str> =
                log.lines().filter(|l| !l.contains(" DEBUG kube") && !l.contains(" TRACE ")).collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            eprintln!(
                "--- {}: operator running: {running}; last log lines ({})\n{tail}",
                self.id,
                operator.log.display()
            );
        }
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.report_failure();
        }
        // Leave nothing behind for the next test: delete this test's configs (the finalizer needs the operator).
        let selector = format!("{TEST_LABEL}={}", self.id);
        let _ = cluster::kubectl_with(
            &cluster::kubeconfig(),
            &["delete", "ndc", "-l", &selector, "--wait=true", "--timeout=30s"],
            None,
        );
        if let Some(mut operator) = self.operator.take() {
            operator.kill();
        }
    }
}
