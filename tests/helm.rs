//! The Helm chart (`charts/neuron-dra-operator`) with a real Helm built from its Go module: `helm lint --strict`,
//! the values schema, the default render compared object by object with what `config/` installs (modulo Helm's
//! labels), the CRD as a template, the kubelet plugin's ClusterRole and fences as `config/rbac` has them, the
//! allow-list from `fence.*`, the chart's copies of `crds/` and `config/` files, and on the local control plane
//! `helm install`, every sample reconciled to Ready under the chart's RBAC, `helm upgrade` with changed values, and
//! `helm uninstall`.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod helm;
    pub mod scenario;
    pub mod tools;
}

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::cluster::{self, Operator, OperatorOptions, TEST_LABEL, documents, get, kubectl, kubectl_with, repo};
use support::docs;
use support::helm::{helm, helm_doc};
use support::scenario::Scenario;
use support::tools::{self, temp_dir};

const CHART: &str = "charts/neuron-dra-operator";
/// Labels the chart adds to what `config/` has; everything else must be equal.
const HELM_LABELS: &[&str] =
    &["helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"];
/// The annotation that keeps the CRD through `helm uninstall` (crds.keep).
const KEEP: &str = "helm.sh/resource-policy";
/// The policies' install variables, which the chart sets from `fence.*` and the release's ServiceAccount.
const INSTALL_VARIABLES: [&str; 5] = neuron_dra_operator::logic::fence::INSTALL_VARIABLES;
/// Every value that turns on a part that is off by default.
const EVERYTHING_ON: &[&str] = &[
    "--set",
    "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.grafanaDashboard.enabled=true",
];
/// (source, copy in the chart) pairs `make chart` keeps equal.
const COPIES: &[(&str, &str)] = &[
    ("crds/neurondra.io_neurondraconfigs.yaml", "files/neurondra.io_neurondraconfigs.yaml"),
    ("config/rbac/role.yaml", "files/role.yaml"),
    ("config/rbac/leader_election_role.yaml", "files/leader_election_role.yaml"),
    ("config/rbac/metrics_auth_role.yaml", "files/metrics_auth_role.yaml"),
    ("config/rbac/metrics_reader_role.yaml", "files/metrics_reader_role.yaml"),
    ("config/rbac/operator_policy.yaml", "files/operator_policy.yaml"),
    ("config/rbac/plugin_role.yaml", "files/plugin_role.yaml"),
    ("config/rbac/plugin_fence.yaml", "files/plugin_fence.yaml"),
    ("config/prometheus/prometheus_rule.yaml", "files/prometheus_rule.yaml"),
    ("config/grafana/neuron-dra-operator.json", "files/neuron-dra-operator.json"),
];

/// `helm template x CHART --skip-tests --set S...` (release `x`, without `helm test`'s hooks): the text and its objects.
fn render(sets: &[&str]) -> (String, Vec<Value>) {
    let mut args = vec!["template", "x", CHART, "--skip-tests"];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = helm(&args).ok("helm template");
    let objects = documents(&out);
    (out, objects)
}

fn kustomize(dir: &str) -> Vec<Value> {
    let out = std::process::Command::new("kubectl").arg("kustomize").arg(repo(dir)).output().unwrap();
    assert!(out.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&out.stderr));
    documents(&String::from_utf8_lossy(&out.stdout))
}

/// Drops Helm's labels from every label map and selector (the chart's selectors add the release instance), the
/// CRD's `helm.sh/resource-policy` (crds.keep); numbers as floats
/// (kustomize prints `2.0` as `2`).
fn normalized(value: &Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(items) => items.iter().map(normalized).collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let v = match (k.as_str(), v) {
                    ("labels" | "matchLabels" | "selector", Value::Object(labels)) => Value::Object(
                        labels
                            .iter()
                            .filter(|(l, _)| !HELM_LABELS.contains(&l.as_str()))
                            .map(|(l, v)| (l.clone(), v.clone()))
                            .collect(),
                    ),
                    ("annotations", Value::Object(annotations)) => Value::Object(
                        annotations.iter().filter(|(a, _)| *a != KEEP).map(|(a, v)| (a.clone(), v.clone())).collect(),
                    ),
                    _ => v.clone(),
                };
                (k.clone(), normalized(&v))
            })
            // The CRD's labels are Helm's alone: none left is none at all.
            .filter(|(k, v)| {
                !(matches!(k.as_str(), "labels" | "annotations") && v.as_object().is_some_and(|l| l.is_empty()))
            })
            .collect(),
        other => other.clone(),
    }
}

fn by_kind_and_name(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|o| {
            (format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()), normalized(&o))
        })
        .collect()
}

#[test]
fn helm_lint_strict_passes_with_the_defaults_and_with_everything_on() {
    let out = helm(&["lint", "--strict", CHART]).ok("helm lint --strict");
    assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{out}");
    let mut args = vec!["lint", "--strict", CHART];
    args.extend(EVERYTHING_ON);
    args.extend(["--set", "neuronDRAConfig.enabled=true", "--set", "nodeSelector.pool=system"]);
    helm(&args).ok("helm lint --strict with every part on");
}

#[test]
fn the_values_schema_rejects_bad_values_naming_them() {
    let cases: &[(&str, &str)] = &[
        ("replicas=-1", "replicas"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("metrics.port=70000", "port"),
        ("probes.port=0", "port"),
        ("metrics.certSecret=Not_A_Secret", "certSecret"),
        ("replica=3", "replica"),
        ("neuronDRAConfig.name=Not_A_Name", "name"),
        ("serviceAccount.create=false", "name"),
        ("podDisruptionBudget.maxUnavailable=0", "maxUnavailable"),
        ("extraArgs[0]=leader-elect", "extraArgs"),
        ("priorityClassName=Not_A_Class", "priorityClassName"),
        ("logLevel=", "logLevel"),
    ];
    for (set, field) in cases {
        let out = helm(&["template", "x", CHART, "--set", set]);
        assert!(!out.success, "--set {set} was accepted");
        assert!(out.stderr.contains("values don't meet the specifications of the schema"), "{set}: {}", out.stderr);
        assert!(out.stderr.contains(field), "{set}: {}", out.stderr);
    }
    helm(&["template", "x", CHART, "--set", "replicas=3"]).ok("a valid value");
}

/// #26.6: without leader election every replica writes, so the chart refuses two replicas and upgrades by
/// Recreate (a surge would run a second writer beside the first).
#[test]
fn leader_election_off_refuses_two_replicas_and_a_surge() {
    let out = helm(&["template", "x", CHART, "--set", "leaderElection.enabled=false"]);
    assert!(!out.success, "two replicas (the default) without leader election were accepted");
    assert!(
        out.stderr.contains("replicas: 2 replicas with leaderElection.enabled=false would all write at once"),
        "{}",
        out.stderr
    );
    let strategy = |sets: &str| {
        let out = helm(&["template", "x", CHART, "--set", sets, "--show-only", "templates/deployment.yaml"]);
        documents(&out.ok("helm template"))[0]["spec"]["strategy"].clone()
    };
    assert_eq!(strategy("leaderElection.enabled=false,replicas=1"), json!({"type": "Recreate"}));
    let surge = strategy("replicas=3");
    assert_eq!((surge["type"].as_str(), surge["rollingUpdate"]["maxSurge"].as_i64()), (Some("RollingUpdate"), Some(1)));
}

/// The CRD is a template (so `helm upgrade` upgrades it) carrying Helm's labels and, unless crds.keep=false, the
/// annotation that keeps it (and every config) through `helm uninstall`; crds.enabled=false leaves it out. Its spec is
/// crds/'s, compared in `the_chart_renders_what_config_installs`.
#[test]
fn the_crd_is_a_template_kept_on_uninstall_unless_asked() {
    let crd = |sets: &[&str]| {
        render(sets).1.into_iter().find(|o| o["kind"] == "CustomResourceDefinition").map(|c| c["metadata"].clone())
    };
    let metadata = crd(&[]).expect("the CRD by default");
    assert_eq!(metadata["name"], "neurondraconfigs.neurondra.io");
    assert_eq!(metadata["annotations"][KEEP], "keep");
    assert_eq!(metadata["labels"]["app.kubernetes.io/managed-by"], "Helm");
    assert_eq!(metadata["annotations"]["neurondra.io/schema-hash"].as_str().map(str::len), Some(16));
    assert!(crd(&["crds.keep=false"]).unwrap()["annotations"].get(KEEP).is_none());
    assert!(crd(&["crds.enabled=false"]).is_none());
    let out = helm(&["show", "crds", CHART]).ok("helm show crds");
    assert!(out.trim().is_empty(), "nothing left in crds/ for Helm to install once and never upgrade: {out}");
}

/// The default render (release `neuron-dra-operator` in `neuron-dra-operator-system`, CRDs included, monitoring
/// on) is `kubectl kustomize config/default`, `config/prometheus` and `config/grafana`, object by object, less the
/// Namespace (Helm's `--create-namespace` makes it; see docs/install.md). The ServiceMonitor verifies the metrics
/// certificate of the Secret `neuron-dra-operator-metrics-cert`: with kustomize, docs/install.md's patch mounts it
/// (`METRICS_CERT_PATCH`, applied here as written there); with Helm, `metrics.certSecret` names it.
#[test]
fn the_chart_renders_what_config_installs() {
    let mut args = vec!["template", "neuron-dra-operator", CHART, "-n", "neuron-dra-operator-system", "--skip-tests"];
    args.extend(EVERYTHING_ON);
    args.extend(["--set", "metrics.certSecret=neuron-dra-operator-metrics-cert"]);
    let rendered = by_kind_and_name(documents(&helm(&args).ok("helm template")));
    let mut objects = kustomize("config/default");
    objects.extend(kustomize("config/prometheus"));
    objects.extend(kustomize("config/grafana"));
    objects.retain(|o| o["kind"] != "Namespace");
    let patch = docs_metrics_cert_patch();
    for deployment in objects.iter_mut().filter(|o| o["kind"] == "Deployment") {
        let pod = &mut deployment["spec"]["template"]["spec"];
        let container = &patch["spec"]["template"]["spec"]["containers"][0];
        pod["containers"][0]["args"] = container["args"].clone();
        pod["containers"][0]["volumeMounts"] = container["volumeMounts"].clone();
        pod["volumes"] = patch["spec"]["template"]["spec"]["volumes"].clone();
    }
    let expected = by_kind_and_name(objects);

    assert_eq!(rendered.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    for (key, object) in &expected {
        assert!(
            rendered[key] == *object,
            "{key} differs from config/:\nchart:\n{}\nconfig:\n{}",
            serde_yaml::to_string(&rendered[key]).unwrap(),
            serde_yaml::to_string(object).unwrap()
        );
    }
    // Helm's labels are there (and only they were ignored).
    let deployment = &documents(&helm(&["template", "neuron-dra-operator", CHART]).ok("helm template"))
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm");
}

#[test]
fn values_reach_the_deployment() {
    let (out, objects) = render(&[
        "replicas=1,leaderElection.enabled=false,metrics.port=9090,logFormat=text,image.tag=9.9.9",
        "nodeSelector.pool=system,tolerations[0].key=dedicated,tolerations[0].operator=Exists",
    ]);
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        pod["containers"][0]["args"],
        json!(["run", "--leader-elect=false", "--log-format=text", "--metrics-bind-address=0.0.0.0:9090"])
    );
    assert_eq!(pod["containers"][0]["ports"][0]["containerPort"], 9090);
    assert_eq!(pod["containers"][0]["image"], "ghcr.io/neurondra/neuron-dra-operator:9.9.9");
    assert_eq!(pod["nodeSelector"], json!({"pool": "system"}));
    assert_eq!(pod["tolerations"], json!([{"key": "dedicated", "operator": "Exists"}]));
    // No leader election, no Lease permissions.
    assert!(!objects.iter().any(|o| o["kind"] == "Role"), "{out}");
    let service = objects.iter().find(|o| o["kind"] == "Service").unwrap();
    assert_eq!(service["spec"]["ports"][0]["port"], 9090);
    assert_eq!(objects.iter().filter(|o| o["kind"] == "NetworkPolicy").count(), 1, "on by default");

    // The probe port, a certificate from a Secret, and a NetworkPolicy narrowed to one namespace, or none.
    let (_, objects) = render(&[
        "probes.port=9091,metrics.certSecret=metrics-tls",
        "networkPolicy.from[0].namespaceSelector.matchLabels.name=monitoring",
    ]);
    let pod = &objects.iter().find(|o| o["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let cert_dir = "/etc/neuron-dra-operator/metrics-certs";
    assert_eq!(
        container["args"],
        json!([
            "run",
            "--leader-elect",
            "--log-format=json",
            "--health-probe-bind-address=0.0.0.0:9091",
            format!("--metrics-cert-dir={cert_dir}")
        ])
    );
    assert_eq!(container["ports"][1], json!({"name": "probes", "containerPort": 9091, "protocol": "TCP"}));
    assert_eq!(container["livenessProbe"]["httpGet"]["port"], "probes");
    assert_eq!(container["volumeMounts"], json!([{"name": "metrics-certs", "mountPath": cert_dir, "readOnly": true}]));
    assert_eq!(pod["volumes"], json!([{"name": "metrics-certs", "secret": {"secretName": "metrics-tls"}}]));
    let policy = objects.iter().find(|o| o["kind"] == "NetworkPolicy").unwrap();
    assert_eq!(
        policy["spec"]["ingress"][0]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}])
    );
    let out = helm(&["template", "x", CHART, "--set", "networkPolicy.enabled=false"]).ok("helm template");
    assert!(!documents(&out).iter().any(|o| o["kind"] == "NetworkPolicy"), "{out}");
}

/// The values a Helm user expects of an operator chart: pod labels, priority, security contexts, extra arguments
/// and environment, the log level, the ServiceAccount, topology spread and the PodDisruptionBudget (the latter two
/// only with more than one replica), and a ServiceMonitor that verifies a configured certificate.
#[test]
fn the_values_a_helm_user_expects_reach_the_objects() {
    let (out, objects) = render(&[
        "podLabels.team=ml-platform,priorityClassName=system-cluster-critical,logLevel=debug",
        "extraArgs[0]=--concurrency=2,extraEnv[0].name=HTTPS_PROXY,extraEnv[0].value=http://proxy:3128",
        "securityContext.readOnlyRootFilesystem=false,podSecurityContext.runAsUser=1000",
        "serviceAccount.create=false,serviceAccount.name=existing",
        "topologySpreadConstraints[0].maxSkew=2,topologySpreadConstraints[0].topologyKey=zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        "metrics.serviceMonitor.enabled=true,metrics.certSecret=metrics-tls",
    ]);
    let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind);
    let deployment = find("Deployment").unwrap();
    let template = &deployment["spec"]["template"];
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    assert_eq!(template["metadata"]["labels"]["team"], "ml-platform");
    assert_eq!(deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"], "x");
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["serviceAccountName"], "existing");
    let operator_account = objects
        .iter()
        .find(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] != "x-neuron-dra-operator-metrics-scraper");
    assert!(operator_account.is_none(), "serviceAccount.create=false made one: {out}");
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], false);
    assert_eq!(
        container["args"],
        json!([
            "run",
            "--leader-elect",
            "--log-format=json",
            "--metrics-cert-dir=/etc/neuron-dra-operator/metrics-certs",
            "--log-level=debug",
            "--concurrency=2"
        ])
    );
    let env = container["env"].as_array().unwrap();
    assert_eq!(
        env.last(),
        Some(&json!({"name": "HTTPS_PROXY", "value": "http://proxy:3128"})),
        "after the chart's own"
    );
    assert_eq!(
        pod["topologySpreadConstraints"],
        json!([{"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}])
    );
    assert_eq!(find("PodDisruptionBudget").unwrap()["spec"]["maxUnavailable"], 1);
    let tls = &find("ServiceMonitor").unwrap()["spec"]["endpoints"][0]["tlsConfig"];
    assert_eq!(
        *tls,
        json!({"ca": {"secret": {"name": "metrics-tls", "key": "ca.crt"}}, "serverName": "x-neuron-dra-operator-metrics.default.svc", "insecureSkipVerify": false})
    );

    // One replica: nothing to spread and no budget; annotations on a created ServiceAccount.
    let (out, objects) =
        render(&["replicas=1,serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/r"]);
    let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind);
    assert!(find("PodDisruptionBudget").is_none(), "{out}");
    assert!(find("Deployment").unwrap()["spec"]["template"]["spec"].get("topologySpreadConstraints").is_none());
    let account = find("ServiceAccount").unwrap();
    assert_eq!(account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"], "arn:aws:iam::1:role/r");
}

/// The Deployment patch docs/install.md ("Monitoring") gives kustomize users to serve the metrics certificate.
fn docs_metrics_cert_patch() -> Value {
    let page = std::fs::read_to_string(repo("docs/install.md")).unwrap();
    let yaml = page.split("```yaml\n").find(|block| block.contains("kind: Certificate")).expect("the patch in docs");
    let yaml = yaml.split("```").next().unwrap();
    documents(yaml).into_iter().find(|o| o["kind"] == "Deployment").expect("a Deployment patch")
}

/// A policy's install variables, by name, as rendered.
fn install_variables(policy: &Value) -> BTreeMap<String, String> {
    policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)))
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["expression"].as_str().unwrap().to_string()))
        .collect()
}

/// The tests of one topic each, in `tests/helm_topics/`.
mod helm_topics {
    mod fences;
    mod packaging;
    mod release;
    mod supply;
}
