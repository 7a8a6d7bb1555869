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
const INSTALL_VARIABLES: [&str; 4] = neuron_dra_operator::logic::fence::INSTALL_VARIABLES;
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
/// Namespace (Helm's `--create-namespace` makes it; see docs/install.md).
#[test]
fn the_chart_renders_what_config_installs() {
    let mut args = vec!["template", "neuron-dra-operator", CHART, "-n", "neuron-dra-operator-system", "--skip-tests"];
    args.extend(EVERYTHING_ON);
    let rendered = by_kind_and_name(documents(&helm(&args).ok("helm template")));
    let mut objects = kustomize("config/default");
    objects.extend(kustomize("config/prometheus"));
    objects.extend(kustomize("config/grafana"));
    objects.retain(|o| o["kind"] != "Namespace");
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
    assert!(find("ServiceAccount").is_none(), "serviceAccount.create=false made one: {out}");
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
        json!({"ca": {"secret": {"name": "metrics-tls", "key": "ca.crt"}}, "serverName": "x-neuron-dra-operator-metrics.default.svc"})
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

/// A policy spec with what the install sets blanked: its install variables' expressions and, for the operator's
/// policy, the first match condition (the operator's user). What is left is config/rbac's file, whatever the values.
fn fixed_part(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for variable in spec["variables"].as_array_mut().into_iter().flatten() {
        if variable["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)) {
            variable["expression"] = json!("");
        }
    }
    if let Some(operator) = spec["matchConditions"].as_array_mut().and_then(|c| c.first_mut())
        && operator["name"] == "operator"
    {
        operator["expression"] = json!("");
    }
    spec
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

/// The policies of `file` (config/rbac), by name.
fn config_policies(file: &str) -> BTreeMap<String, Value> {
    documents(&std::fs::read_to_string(repo(file)).unwrap())
        .into_iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), o))
        .collect()
}

/// The install's allow-list is the `fence.*` values, written as CEL lists into the install variables of both
/// policies that enforce it (the operator's and `neuron-dra-plugin-pods`, which the operator reads it from), with
/// this release's ServiceAccount as `operators`; every other part of each policy is config/rbac's. No parameter
/// object, no binding parameters, nothing in the operator's environment.
#[test]
fn the_allow_list_is_the_fence_values_in_the_policies_install_variables() {
    let render_in = |namespace: &str, sets: &[&str]| {
        let mut args = vec!["template", "x", CHART, "-n", namespace, "--skip-tests"];
        for set in sets {
            args.extend(["--set", set]);
        }
        documents(&helm(&args).ok("helm template"))
    };
    let find = |objects: &[Value], kind: &str, name: &str| {
        let found = objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        found.unwrap_or_else(|| panic!("no {kind} {name}")).clone()
    };
    let objects = render_in(
        "ml-system",
        &["fence.driverNamespaces={neuron-dra-driver,team-*,*-plugins}", "fence.imageRepositories={a.io/x,b.io/y/*}"],
    );
    let namespaces = "['neuron-dra-driver', 'team-*', '*-plugins']";
    let images = "['a.io/x', 'b.io/y/*']";
    let user = "system:serviceaccount:ml-system:x-neuron-dra-operator";
    let operator = find(&objects, "ValidatingAdmissionPolicy", "x-neuron-dra-operator");
    assert_eq!(
        install_variables(&operator),
        BTreeMap::from([
            ("imagePatterns".into(), images.into()),
            ("kubeletDirs".into(), "['/var/lib/kubelet']".into()),
            ("namespacePatterns".into(), namespaces.into()),
        ])
    );
    // The operator's policy applies to this release's ServiceAccount (its first match condition).
    assert_eq!(operator["spec"]["matchConditions"][0]["expression"], format!("request.userInfo.username == '{user}'"));
    let pods = find(&objects, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert_eq!(
        install_variables(&pods),
        BTreeMap::from([
            ("imagePatterns".into(), images.into()),
            ("kubeletDirs".into(), "['/var/lib/kubelet']".into()),
            ("namespacePatterns".into(), namespaces.into()),
            ("operators".into(), format!("['{user}']")),
        ])
    );
    // Everything else is config/rbac's, byte for byte.
    let shipped = config_policies("config/rbac/operator_policy.yaml").remove("neuron-dra-operator").unwrap();
    assert_eq!(
        serde_json::to_string(&fixed_part(&operator["spec"])).unwrap(),
        serde_json::to_string(&fixed_part(&shipped["spec"])).unwrap(),
        "the operator's policy differs from config/rbac/operator_policy.yaml beyond its install variables"
    );
    let shipped = config_policies("config/rbac/plugin_fence.yaml").remove("neuron-dra-plugin-pods").unwrap();
    assert_eq!(
        serde_json::to_string(&fixed_part(&pods["spec"])).unwrap(),
        serde_json::to_string(&fixed_part(&shipped["spec"])).unwrap(),
        "neuron-dra-plugin-pods differs from config/rbac/plugin_fence.yaml beyond its install variables"
    );
    // One fence of the defaults: config/rbac's own lists (the release's ServiceAccount as the operator).
    let default = render_in("ml-system", &[]);
    let pods = find(&default, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert_eq!(install_variables(&pods)["namespacePatterns"], "['neuron-dra-driver']");
    assert_eq!(install_variables(&pods)["imagePatterns"], "['public.ecr.aws/neuron/neuron-dra-driver']");

    // No parameters anywhere: a binding whose parameter object is missing denies all its policy matches.
    for object in objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("ValidatingAdmission"))) {
        assert!(object["spec"].get("paramKind").is_none(), "{object}");
        assert!(object["spec"].get("paramRef").is_none(), "{object}");
    }
    assert!(!objects.iter().any(|o| o["kind"] == "ConfigMap"), "a ConfigMap by default");
    // Nor in the operator's environment or pod template: it reads the allow-list from the plugin-pods fence.
    let deployment = find(&objects, "Deployment", "x-neuron-dra-operator");
    let text = deployment.to_string();
    for stale in ["DRIVER_NAMESPACES", "DRIVER_IMAGE_REPOSITORIES", "configMapKeyRef", "fence-checksum"] {
        assert!(!text.contains(stale), "the Deployment still has {stale}: {deployment}");
    }
    assert_eq!(
        deployment["spec"]["template"],
        find(&default, "Deployment", "x-neuron-dra-operator")["spec"]["template"],
        "the allow-list changes the pod template"
    );

    // Where the cluster has its plugin ClusterRole and fences already, the release leaves them out, and keeps its
    // own policy with its allow-list.
    let without = render_in("ml-system", &["fence.clusterObjects=false", "fence.driverNamespaces={a,b*}"]);
    let kinds: Vec<String> = without
        .iter()
        .filter(|o| o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("neuron-dra-plugin")))
        .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, Vec::<String>::new(), "fence.clusterObjects=false");
    let operator = find(&without, "ValidatingAdmissionPolicy", "x-neuron-dra-operator");
    assert_eq!(install_variables(&operator)["namespacePatterns"], "['a', 'b*']");
    find(&without, "ValidatingAdmissionPolicyBinding", "x-neuron-dra-operator");
}

/// The operator refuses to start a plugin unless the fences it finds apply the policies it was built with
/// (config/rbac/plugin_fence.yaml, but for the install variables): the chart renders them, and the plugin's
/// ClusterRole, as the files have them, under their own names whatever the release, with the release's
/// ServiceAccount as `operators`, and its operator may bind that ClusterRole and no other.
#[test]
fn the_plugin_fences_and_role_are_config_rbacs_whatever_the_release() {
    let file_documents = |path: &str| documents(&std::fs::read_to_string(repo(path)).unwrap());
    let mut args = vec!["template", "some-release", CHART, "-n", "elsewhere", "--skip-tests"];
    args.extend(["--set", "fullnameOverride=renamed"]);
    let objects = documents(&helm(&args).ok("helm template"));
    let rendered = |kind: &str, name: &str| {
        let found = objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        found.unwrap_or_else(|| panic!("the chart renders no {kind} {name}")).clone()
    };
    let policies = file_documents("config/rbac/plugin_fence.yaml");
    assert_eq!(policies.len(), 2);
    for policy in &policies {
        let name = policy["metadata"]["name"].as_str().unwrap();
        let rendered_policy = rendered("ValidatingAdmissionPolicy", name);
        // The same JSON, byte for byte, as the file's spec, but for the install variables.
        assert_eq!(
            serde_json::to_string(&fixed_part(&rendered_policy["spec"])).unwrap(),
            serde_json::to_string(&fixed_part(&policy["spec"])).unwrap(),
            "{name}'s spec differs from config/rbac/plugin_fence.yaml"
        );
        // The fence that says who may start a plugin names this release's operator.
        if let Some(operators) = install_variables(&rendered_policy).get("operators") {
            assert_eq!(operators, "['system:serviceaccount:elsewhere:renamed']", "{name}");
        }
        let binding = rendered("ValidatingAdmissionPolicyBinding", name);
        assert_eq!(binding["spec"]["policyName"], name);
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        for (key, value) in policy["metadata"]["labels"].as_object().unwrap() {
            assert_eq!(&binding["metadata"]["labels"][key], value, "{name}'s binding");
        }
    }
    let role = &file_documents("config/rbac/plugin_role.yaml")[0];
    let name = role["metadata"]["name"].as_str().unwrap();
    assert_eq!(rendered("ClusterRole", name)["rules"], role["rules"]);
    // The operator's own ClusterRole (files/role.yaml) binds exactly that ClusterRole.
    let operator = rendered("ClusterRole", "renamed");
    let binds: Vec<&Value> =
        operator["rules"].as_array().unwrap().iter().filter(|r| r["verbs"].to_string().contains("\"bind\"")).collect();
    assert_eq!(
        binds,
        [
            &json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": [name], "verbs": ["bind"]})
        ]
    );
}

/// An allow-list entry that is no name or pattern (empty, all names, a list in one entry, a tag or digest, a quote
/// or backslash that would break out of the policies' CEL lists, no entry at all) is refused by the values schema in one line that names it.
#[test]
fn a_bad_allow_list_entry_is_refused_in_one_line_naming_it() {
    let dir = temp_dir("helm-fence-values");
    let cases: &[(&str, &str, &str)] = &[
        ("driverNamespaces", "[\"\"]", "/fence/driverNamespaces/0': ''"),
        ("driverNamespaces", "[neuron-dra-driver, \"*\"]", "/fence/driverNamespaces/1': '*'"),
        ("driverNamespaces", "[\"a,b\"]", "/fence/driverNamespaces/0': 'a,b'"),
        ("driverNamespaces", "[Team-A]", "/fence/driverNamespaces/0': 'Team-A'"),
        ("driverNamespaces", "[]", "/fence/driverNamespaces': minItems"),
        ("imageRepositories", "[\"\"]", "/fence/imageRepositories/0': ''"),
        (
            "imageRepositories",
            "[\"registry.example.com/x@sha256:00\"]",
            "/fence/imageRepositories/0': 'registry.example.com/x@sha256:00'",
        ),
        ("imageRepositories", "[\"*/neuron\"]", "/fence/imageRepositories/0': '*/neuron'"),
        ("imageRepositories", "[\"a b\"]", "/fence/imageRepositories/0': 'a b'"),
        // A quote or a backslash would end the CEL string literal the chart writes the entry into.
        ("imageRepositories", "[\"a.io/x', 'b\"]", "/fence/imageRepositories/0'"),
        ("imageRepositories", "['a.io/\\x']", "/fence/imageRepositories/0'"),
        ("imageRepositories", "['a.io/\"x']", "/fence/imageRepositories/0'"),
        ("driverNamespaces", "[\"team-a' || true || '\"]", "/fence/driverNamespaces/0'"),
    ];
    for (index, (key, list, line)) in cases.iter().enumerate() {
        let values = dir.join(format!("{index}.yaml"));
        std::fs::write(&values, format!("fence:\n  {key}: {list}\n")).unwrap();
        let out = helm(&["template", "x", CHART, "-f", values.to_str().unwrap()]);
        assert!(!out.success, "fence.{key}: {list} was accepted");
        let named: Vec<&str> = out.stderr.lines().filter(|l| l.contains("/fence/")).collect();
        assert_eq!(named.len(), 1, "fence.{key}: {list}: {}", out.stderr);
        assert!(named[0].contains(line), "fence.{key}: {list}: {}", named[0]);
    }
    helm(&["template", "x", CHART, "--set", "fence.driverNamespaces={team-*,*-plugins,x}"]).ok("patterns");
    helm(&["template", "x", CHART, "--set", "fence.imageRepositories={registry.example.com:5000/neuron/*}"])
        .ok("a mirror");
}

/// `helm test`'s objects: hooks only (a plain install creates none of them), a pod meeting the `restricted` Pod
/// Security Standard that runs the operator image's `smoke-test` against the release's metrics Service.
#[test]
fn helm_test_is_a_restricted_smoke_test_pod_of_the_operator_image() {
    let out = helm(&["template", "x", CHART, "--show-only", "templates/tests/smoke-test.yaml"]).ok("helm template");
    let objects = documents(&out);
    let kinds: Vec<&str> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding", "Pod"]);
    for object in &objects {
        assert_eq!(object["metadata"]["annotations"]["helm.sh/hook"], "test", "{object}");
    }
    let binding = &objects[1];
    assert_eq!(binding["roleRef"]["name"], "x-neuron-dra-operator-metrics-reader");
    let pod = &objects[4]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/neurondra/neuron-dra-operator:0.1.0");
    assert_eq!(container["args"], json!(["smoke-test", "--service=x-neuron-dra-operator-metrics"]));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
}

#[test]
fn the_chart_copies_of_crds_and_config_are_up_to_date() {
    for (source, copy) in COPIES {
        let original = std::fs::read(repo(source)).unwrap();
        let copied = std::fs::read(repo(&format!("{CHART}/{copy}"))).unwrap_or_default();
        assert!(original == copied, "{CHART}/{copy} differs from {source}: run `make chart`");
    }
    let recipe = std::process::Command::new("make")
        .args(["--no-print-directory", "-n", "chart"])
        .current_dir(repo(""))
        .output()
        .unwrap();
    let recipe = String::from_utf8_lossy(&recipe.stdout).into_owned();
    for (source, copy) in COPIES {
        assert!(
            recipe.contains(&format!("cp {source} {CHART}/{copy}")),
            "`make chart` does not copy {source}:\n{recipe}"
        );
    }
    assert!(!repo(&format!("{CHART}/crds")).exists(), "the CRD is a template (templates/crd.yaml), not in crds/");
    for entry in std::fs::read_dir(repo(&format!("{CHART}/files"))).unwrap() {
        let name = format!("files/{}", entry.unwrap().file_name().to_string_lossy());
        assert!(COPIES.iter().any(|(_, copy)| *copy == name), "{CHART}/{name} is no copy `make chart` makes");
    }
    // The README is the values' comments as a table.
    let read = |file: &str| std::fs::read_to_string(repo(&format!("{CHART}/{file}"))).unwrap();
    let readme = neuron_dra_operator::devtools::chart_readme::generate(&read("Chart.yaml"), &read("values.yaml"));
    assert!(readme.unwrap() == read("README.md"), "{CHART}/README.md is stale: run `make chart`");
    assert!(
        recipe.contains("chart-readme --chart charts/neuron-dra-operator"),
        "`make chart` writes no README:\n{recipe}"
    );
}

#[test]
fn the_chart_is_versioned_with_the_operator() {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo(&format!("{CHART}/Chart.yaml"))).unwrap()).unwrap();
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

// --- on the real control plane ---

fn helm_release(release: &str, namespace: &str) -> Value {
    let out = helm(&["list", "-n", namespace, "-o", "json", "--filter", &format!("^{release}$")]).ok("helm list");
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(list.len(), 1, "{out}");
    list[0].clone()
}

/// The driver namespace of a release's configs in these tests: in the cluster's allow-list (`*-driver`, the tests'
/// widening of it), and the only one in the release's. The cluster's plugin fences are the shared ones
/// `cluster::install` applied (one set per cluster: the release leaves them out, `fence.clusterObjects=false`): the
/// release's operator reads its allow-list there, and may start a plugin only once `neuron-dra-plugin-pods` names
/// its ServiceAccount among `operators` (`also_operator`); its own policy keeps it to the release's allow-list.
fn release_driver_namespace(s: &Scenario) -> String {
    format!("{}-driver", s.id)
}

/// The samples, each made this test's own: its namespaces, the test label, a node selector no node matches, the
/// release's driver namespace.
async fn sample_configs(s: &Scenario) -> Vec<Value> {
    let mut configs = Vec::new();
    let samples = kustomize("config/samples").into_iter().filter(|o| o["kind"] == "NeuronDRAConfig");
    for (index, sample) in samples.enumerate() {
        let namespace = s.namespace(&index.to_string(), &[]).await;
        let mut spec = sample["spec"].clone();
        let fields = spec.as_object_mut().unwrap();
        fields.remove("nodeSelector");
        fields.insert("templates".into(), json!({"namespaces": [namespace]}));
        let driver = fields.entry("driver").or_insert(json!({}));
        driver.as_object_mut().unwrap().insert("namespace".into(), json!(release_driver_namespace(s)));
        let name = format!("{}-{}", s.id, sample["metadata"]["name"].as_str().unwrap());
        configs.push(s.config(&name, spec));
    }
    configs
}

async fn wait_gone(kind: &str, name: &str, namespace: Option<&str>) {
    cluster::eventually(Duration::from_secs(60), &format!("{kind} {name} deleted"), || async {
        get(kind, name, namespace).err().filter(|e| e.contains("NotFound")).map(|_| ())
    })
    .await;
}

/// The documented `helm install` (one sample as the chart's own NeuronDRAConfig, the others applied as a user
/// would); the operator, running under the chart's ServiceAccount, reconciles every sample to Ready. The documented
/// `helm upgrade`s turn monitoring on, change the Deployment and drop the chart's config; the documented
/// `helm uninstall` removes everything but the CRD. Release and namespace are this test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_and_uninstall_on_the_control_plane() {
    let mut s = Scenario::new("helm").await;
    tools::install_prometheus_crds();
    let (release, namespace) = (s.id.clone(), s.id.clone());
    let fullname = format!("{release}-neuron-dra-operator");
    let mut configs = sample_configs(&s).await;
    let chart_config = configs.remove(0);
    let chart_config_name = chart_config["metadata"]["name"].as_str().unwrap().to_string();
    let values = json!({
        "neuronDRAConfig": {
            "enabled": true,
            "name": chart_config_name,
            "labels": chart_config["metadata"]["labels"],
            "spec": chart_config["spec"],
        },
        "fence": {"clusterObjects": false, "driverNamespaces": [release_driver_namespace(&s)]},
    });
    let values_file = temp_dir(&format!("helm-{release}")).join("values.json");
    std::fs::write(&values_file, values.to_string()).unwrap();

    // Every test shares the CRD cluster::install applied: this release leaves it alone (tests/helm_upgrade.rs has a
    // release of its own manage it).
    let installed = helm_doc(
        docs::HELM_INSTALL,
        &release,
        &release,
        &["-f", values_file.to_str().unwrap(), "--set", "crds.enabled=false"],
    );
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert_eq!(helm_release(&release, &namespace)["status"], "deployed");
    let deployment = get("deployment", &fullname, Some(&namespace)).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    let config = get("ndc", &chart_config_name, None).unwrap();
    assert_eq!(config["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm");
    assert_eq!(config["metadata"]["labels"][TEST_LABEL], s.id.as_str());
    // The release's allow-list, in its policy's install variables; no parameters, no ConfigMap.
    let policy = get("validatingadmissionpolicy", &fullname, None).unwrap();
    assert_eq!(install_variables(&policy)["namespacePatterns"], format!("['{}']", release_driver_namespace(&s)));
    assert!(policy["spec"].get("paramKind").is_none(), "{policy}");
    let binding = get("validatingadmissionpolicybinding", &fullname, None).unwrap();
    assert!(binding["spec"].get("paramRef").is_none(), "{binding}");
    assert!(get("configmap", "neuron-dra-fence", Some(&namespace)).is_err(), "an allow-list ConfigMap");
    // The cluster's fences let this release's operator start plugins too.
    cluster::also_operator(&format!("system:serviceaccount:{namespace}:{fullname}"));

    // No kubelet runs pods here: the operator runs as a process with a token of the chart's ServiceAccount and its
    // Lease in the release namespace, so only the chart's RBAC lets it work.
    let options = OperatorOptions { test_id: &s.id, lease: &s.id, extra: &[] };
    s.operator = Some(Operator::start_as(options, &namespace, &fullname));
    let mut names = vec![chart_config_name.clone()];
    for config in &configs {
        s.apply(config).await.unwrap();
        names.push(config["metadata"]["name"].as_str().unwrap().to_string());
    }
    assert_eq!(names.len(), 3);
    for name in &names {
        let status = s.wait_ready(name).await.status.unwrap();
        assert!(status.templates.unwrap().count > 0, "{name}");
    }
    let lease = get("lease", &s.id, Some(&namespace)).unwrap();
    assert!(lease["spec"]["holderIdentity"].is_string(), "{lease}");

    // Monitoring on: the ServiceMonitor, the PrometheusRule and the dashboard appear.
    helm_doc(docs::HELM_MONITORING, &release, &release, &[]);
    get("servicemonitor", &fullname, Some(&namespace)).expect("the ServiceMonitor");
    let rule = get("prometheusrule", &fullname, Some(&namespace)).expect("the PrometheusRule");
    assert!(rule["spec"]["groups"][0]["rules"].as_array().unwrap().len() >= 5, "{rule}");
    let dashboard = get("configmap", &format!("{fullname}-dashboard"), Some(&namespace)).unwrap();
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");

    // Changed values: the Deployment follows; the earlier values stay.
    let set = "replicas=1,tolerations[0].key=dedicated,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule";
    helm_doc(docs::HELM_UPGRADE, &release, &release, &["--set", set]);
    let deployment = get("deployment", &fullname, Some(&namespace)).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    );
    get("servicemonitor", &fullname, Some(&namespace)).expect("the ServiceMonitor stays");
    assert_eq!(helm_release(&release, &namespace)["revision"], "3");

    // Dropping the chart's config deletes it; the operator (still allowed to) cleans up and lets it go.
    // docs/install.md's upgrade, from a chart package: the values given before (crds.enabled=false) carry over.
    let upgrade = docs::with_package(docs::HELM_UPGRADE_RELEASE, &tools::packaged_chart());
    helm_doc(&upgrade, &release, &release, &["--set", "neuronDRAConfig.enabled=false"]);
    wait_gone("ndc", &chart_config_name, None).await;
    s.wait_ready(&names[1]).await;

    // The user's configs go before the operator's permissions do.
    kubectl(&["delete", "ndc", "-l", &format!("{TEST_LABEL}={}", s.id), "--wait=true", "--timeout=60s"]);

    let uninstalled = helm_doc(docs::HELM_UNINSTALL, &release, &release, &["--wait", "--timeout", "60s"]);
    assert!(uninstalled.contains("uninstalled"), "{uninstalled}");
    for (kind, name, ns) in [
        ("deployment", fullname.clone(), Some(namespace.as_str())),
        ("service", format!("{fullname}-metrics"), Some(namespace.as_str())),
        ("serviceaccount", fullname.clone(), Some(namespace.as_str())),
        ("role", format!("{fullname}-leader-election"), Some(namespace.as_str())),
        ("rolebinding", format!("{fullname}-leader-election"), Some(namespace.as_str())),
        ("servicemonitor", fullname.clone(), Some(namespace.as_str())),
        ("prometheusrule", fullname.clone(), Some(namespace.as_str())),
        ("networkpolicy", format!("{fullname}-allow-metrics"), Some(namespace.as_str())),
        ("clusterrole", fullname.clone(), None),
        ("clusterrolebinding", fullname.clone(), None),
        ("clusterrole", format!("{fullname}-metrics-auth"), None),
        ("clusterrolebinding", format!("{fullname}-metrics-auth"), None),
        ("clusterrole", format!("{fullname}-metrics-reader"), None),
        ("validatingadmissionpolicy", fullname.clone(), None),
        ("validatingadmissionpolicybinding", fullname.clone(), None),
    ] {
        wait_gone(kind, &name, ns).await;
    }
    let list = helm(&["list", "-n", &namespace, "-q"]).ok("helm list");
    assert!(!list.lines().any(|l| l == release), "{list}");
    // The CRD was not the release's (crds.enabled=false): it stays.
    get("crd", "neurondraconfigs.neurondra.io", None).expect("the CRD stays");
    // Nor were the plugin's ClusterRole and fences (fence.clusterObjects=false).
    for (kind, name) in [
        ("clusterrole", "neuron-dra-plugin"),
        ("validatingadmissionpolicy", "neuron-dra-plugin-fence"),
        ("validatingadmissionpolicybinding", "neuron-dra-plugin-pods"),
    ] {
        get(kind, name, None).unwrap_or_else(|e| panic!("the cluster's {kind} {name} went with the release: {e}"));
    }
    // The cluster's fences as `cluster::install` left them: its operator alone.
    cluster::allow_test_drivers();
    let _ = kubectl_with(&cluster::kubeconfig(), &["delete", "namespace", &namespace, "--wait=false"], None);
}

/// Helm maps every object of a release to its API before it creates any, so a first install cannot bring the CRD
/// and the chart's own config together: where Helm can look the cluster up, the chart refuses that in one line that
/// names the values and the way out. `helm template`, `helm lint` and Argo CD's render (the cluster's APIs as
/// `--api-versions`, no lookup) render the config as ever. The control plane serves the shared CRD, which no test
/// may take over or remove, so the refusal is checked with a copy of the chart that asks for a kind the cluster
/// lacks, in server-side dry runs that create nothing.
#[test]
fn a_first_install_of_the_crd_and_the_charts_config_together_is_refused_in_one_line() {
    const API: &str = "\"neurondra.io/v1alpha1/NeuronDRAConfig\"";
    let config = ["--set", "neuronDRAConfig.enabled=true", "--show-only", "templates/neurondraconfig.yaml"];
    for extra in [&[][..], &["--api-versions", "v1/Namespace"]] {
        let mut args = vec!["template", "x", CHART, "--skip-tests"];
        args.extend(config);
        args.extend(extra);
        let out = helm(&args).ok("helm template with the chart's config");
        assert_eq!(documents(&out)[0]["kind"], "NeuronDRAConfig", "{extra:?}: {out}");
    }

    cluster::install();
    let copy = temp_dir("helm-crd-first").join("chart");
    let copied = std::process::Command::new("cp").arg("-r").arg(repo(CHART)).arg(&copy).status().unwrap();
    assert!(copied.success());
    let template = copy.join("templates/neurondraconfig.yaml");
    let text = std::fs::read_to_string(&template).unwrap();
    assert_eq!(text.matches(API).count(), 1, "the config's template checks for its API once:\n{text}");
    std::fs::write(&template, text.replace(API, "\"neurondra.io/v1alpha1/NoSuchKind\"")).unwrap();
    let release = cluster::unique("crd-first");
    let name = format!("neuronDRAConfig.name={release}");
    // The cluster's plugin ClusterRole and fences are the shared ones `cluster::install` applied, not a release's.
    let dry_run = |chart: &str, set: &str| {
        let shared = "fence.clusterObjects=false";
        helm(&[
            "install",
            &release,
            chart,
            "-n",
            "default",
            "--dry-run=server",
            "--set",
            set,
            "--set",
            &name,
            "--set",
            shared,
        ])
    };
    let copy = copy.to_str().unwrap();
    for (set, way_out) in [
        ("neuronDRAConfig.enabled=true", "install with neuronDRAConfig.enabled=false, then helm upgrade"),
        ("neuronDRAConfig.enabled=true,crds.enabled=false", "apply the CRD first"),
    ] {
        let out = dry_run(copy, set);
        assert!(!out.success, "{set}: a first install without the CRD was not refused:\n{}", out.stdout);
        let line = out.stderr.lines().find(|l| l.contains("the cluster has no NeuronDRAConfig CRD"));
        let line = line.unwrap_or_else(|| panic!("{set}: {}", out.stderr));
        assert!(line.contains("neuronDRAConfig.enabled=true") && line.contains(way_out), "{set}: {line}");
        assert!(line.contains("then helm upgrade with neuronDRAConfig.enabled=true"), "{set}: {line}");
    }
    // The chart itself, where the CRD is served: installed as before (crds.enabled=false: the shared CRD is not
    // this dry run's to take over).
    dry_run(CHART, "neuronDRAConfig.enabled=true,crds.enabled=false").ok("a first install where the CRD is served");
}
