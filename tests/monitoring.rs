//! Monitoring: the alerts in `config/prometheus` checked and tested with a real promtool (series in, alerts out),
//! every metric the alerts and the Grafana dashboard query checked against what the operator's registry exports,
//! and `config/prometheus` and `config/grafana` accepted by the API server with prometheus-operator's own CRDs.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod tools;
}

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use neuron_dra_operator::api::{DeviceSummary, DriverStatus, NeuronDRAConfigStatus, TeamStatus, TemplateSummary};
use neuron_dra_operator::runtime::telemetry::{ConfigLabels, ErrorLabels, Metrics, TemplateLabels};
use serde_json::Value;
use support::cluster::{self, repo};
use support::docs;
use support::tools::{self, temp_dir};

const RULE_FILE: &str = "config/prometheus/prometheus_rule.yaml";
const DASHBOARD_FILE: &str = "config/grafana/neuron-dra-operator.json";
const ALERTS_TEST: &str = "tests/prometheus/alerts_test.yaml";
/// Series Prometheus itself makes, not the operator.
const PROMETHEUS_SERIES: &[&str] = &["up"];

fn read_yaml(path: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap()
}

/// Writes the PrometheusRule's `spec` (a Prometheus rule file) and the promtool test file into `dir`.
fn rule_files(dir: &Path, rule: &Value) {
    std::fs::write(dir.join("rules.yaml"), serde_yaml::to_string(&rule["spec"]).unwrap()).unwrap();
    std::fs::copy(repo(ALERTS_TEST), dir.join("alerts_test.yaml")).unwrap();
}

fn alert_names(rule: &Value) -> BTreeSet<String> {
    let groups = rule["spec"]["groups"].as_array().unwrap();
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str().map(String::from))
        .collect()
}

#[test]
fn promtool_checks_the_rules_and_every_alert_fires_on_its_series() {
    let promtool = tools::tool("promtool");
    let rule = read_yaml(RULE_FILE);
    let dir = temp_dir("promtool");
    rule_files(&dir, &rule);

    let checked = tools::run(&promtool, &["check", "rules", "rules.yaml"], &dir, &[]).ok("promtool check rules");
    let alerts = alert_names(&rule);
    assert!(checked.contains(&format!("SUCCESS: {} rules found", alerts.len())), "{checked}");
    let tested = tools::run(&promtool, &["test", "rules", "alerts_test.yaml"], &dir, &[]).ok("promtool test rules");
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Every alert has a case that expects it to fire.
    let cases = read_yaml(ALERTS_TEST);
    let firing: BTreeSet<String> = cases["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .map(|c| c["alertname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(firing, alerts, "every alert needs a promtool case in {ALERTS_TEST} where it fires");
    for needed in ["NeuronDRAOperatorDown", "NeuronDRAReconcileErrors", "NeuronDRAConfigInvalid"] {
        assert!(alerts.contains(needed), "{needed}");
    }
    for needed in ["NeuronDRADriverRolloutStuck", "NeuronDRADevicesUnhealthy"] {
        assert!(alerts.contains(needed), "{needed}");
    }
}

/// The promtool cases are strict: an alert that waits longer than the cases expect fails them.
#[test]
fn promtool_fails_when_an_alert_no_longer_fires_as_tested() {
    let promtool = tools::tool("promtool");
    let mut rule = read_yaml(RULE_FILE);
    for group in rule["spec"]["groups"].as_array_mut().unwrap() {
        for r in group["rules"].as_array_mut().unwrap() {
            if r["alert"] == "NeuronDRADevicesUnhealthy" {
                r["for"] = "15m".into();
            }
        }
    }
    let dir = temp_dir("promtool-broken");
    rule_files(&dir, &rule);
    let tested = tools::run(&promtool, &["test", "rules", "alerts_test.yaml"], &dir, &[]);
    assert!(!tested.success, "{}", tested.stdout);
    let report = format!("{}{}", tested.stdout, tested.stderr);
    assert!(report.contains("FAILED") && report.contains("alertname: NeuronDRADevicesUnhealthy"), "{report}");
}

/// Metric names a Prometheus query mentions (`neuron_dra_operator_*` and Prometheus' own series).
fn metrics_in(query: &str) -> BTreeSet<String> {
    query
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("neuron_dra_operator_") || PROMETHEUS_SERIES.contains(t))
        .map(String::from)
        .collect()
}

/// Sample names the operator's registry exports: each `# TYPE` with the suffixes its type gets. A family shows only
/// once it has a sample, so every family gets one first (one it lacks here would fail the check, never pass it).
fn exported() -> BTreeSet<String> {
    let metrics = Metrics::default();
    let config = ConfigLabels { config: "c".into() };
    let condition = Condition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: "Ready".into(),
        message: String::new(),
        last_transition_time: Time(neuron_dra_operator::logic::status::now()),
        observed_generation: None,
    };
    metrics.record_status(
        &config.config,
        &NeuronDRAConfigStatus {
            driver: Some(DriverStatus::default()),
            devices: Some(DeviceSummary::default()),
            templates: Some(TemplateSummary::default()),
            conditions: vec![condition],
            teams: vec![TeamStatus { namespace: "team".into(), hard: 8, used: Some(0), ..TeamStatus::default() }],
            ..Default::default()
        },
    );
    metrics.reconciles.get_or_create(&config).inc();
    metrics.reconcile_errors.get_or_create(&ErrorLabels { category: "Forbidden".into() }).inc();
    metrics.managed_objects.get_or_create(&config).set(1);
    let template = TemplateLabels { config: "c".into(), profile: "p".into(), template: "t".into() };
    metrics.template_available.get_or_create(&template).set(1);
    metrics.template_allocated.get_or_create(&template).set(1);
    metrics.reconcile_duration.observe(0.01);
    metrics.record_request(&http::Method::GET, &"/api/v1/nodes".parse().unwrap(), Some(http::StatusCode::OK));
    let mut names = BTreeSet::new();
    for line in metrics.encode().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => names.insert(format!("{name}_total")),
            "info" => names.insert(format!("{name}_info")),
            "histogram" => ["_bucket", "_sum", "_count"].iter().all(|s| names.insert(format!("{name}{s}"))),
            _ => names.insert(name.to_string()),
        };
    }
    names
}

/// Every `expr` (and template-variable query) in a dashboard.
fn dashboard_queries(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "definition", Value::String(q)) => out.push(q.clone()),
                    _ => dashboard_queries(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, out)),
        _ => {}
    }
}

/// The names in `queries` that are neither exported nor Prometheus' own.
fn unknown(queries: &[String], exported: &BTreeSet<String>) -> BTreeSet<String> {
    queries
        .iter()
        .flat_map(|q| metrics_in(q))
        .filter(|m| !exported.contains(m) && !PROMETHEUS_SERIES.contains(&m.as_str()))
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_query_is_one_the_operator_exports() {
    let exported = exported();
    assert!(exported.contains("neuron_dra_operator_reconciles_total"), "{exported:?}");
    assert!(exported.contains("neuron_dra_operator_reconcile_duration_seconds_bucket"), "{exported:?}");

    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD_FILE)).unwrap()).unwrap();
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, &mut queries);
    let used: BTreeSet<String> = queries.iter().flat_map(|q| metrics_in(q)).collect();
    assert!(used.len() >= 12, "the dashboard queries only {used:?}");
    assert_eq!(unknown(&queries, &exported), BTreeSet::new(), "{DASHBOARD_FILE} queries metrics nobody exports");

    let rule = read_yaml(RULE_FILE);
    let exprs: Vec<String> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(unknown(&exprs, &exported), BTreeSet::new(), "{RULE_FILE} queries metrics nobody exports");

    // The check is real: a misspelt metric is reported.
    let typo = ["sum(neuron_dra_operator_unhealthy_device)".to_string()];
    assert_eq!(unknown(&typo, &exported), BTreeSet::from(["neuron_dra_operator_unhealthy_device".to_string()]));
}

#[test]
fn the_dashboard_is_well_formed() {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD_FILE)).unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "neuron-dra-operator");
    let panels = dashboard["panels"].as_array().unwrap();
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        }
    }
}

/// The documented `kubectl apply -k config/prometheus` and `-k config/grafana`, as server dry runs against
/// prometheus-operator's CRDs (from its Go module): the API server validates the ServiceMonitor and the
/// PrometheusRule with their real schemas.
#[test]
fn config_prometheus_and_config_grafana_are_accepted_by_the_api_server() {
    cluster::install();
    tools::install_prometheus_crds();
    for command in [docs::APPLY_PROMETHEUS, docs::APPLY_GRAFANA] {
        // Discovery may lag a moment behind Established on a fresh API server.
        let mut attempt = 0;
        let out = loop {
            let words: Vec<&str> = command.split(' ').skip(1).chain(["--dry-run=server"]).collect();
            let mut args = vec!["--kubeconfig".to_string(), cluster::kubeconfig().display().to_string()];
            args.extend(words.iter().map(|w| w.to_string()));
            let out = std::process::Command::new("kubectl").args(&args).current_dir(repo("")).output().unwrap();
            attempt += 1;
            if out.status.success() || attempt == 20 {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("(server dry run)"), "{stdout}");
    }

    // The schemas are real: a rule with a malformed duration is refused.
    let mut rule = read_yaml(RULE_FILE);
    rule["metadata"]["name"] = cluster::unique("badrule").into();
    rule["spec"]["groups"][0]["rules"][0]["for"] = "soon".into();
    let refused = cluster::kubectl_with(
        &cluster::kubeconfig(),
        &["create", "--dry-run=server", "-f", "-"],
        Some(&serde_json::to_string(&rule).unwrap()),
    );
    assert!(refused.as_ref().is_err_and(|e| e.contains("for")), "{refused:?}");
}

/// Where every alert's runbook lives: a section of docs/operations.md, on the repository's main branch.
const RUNBOOKS: &str = "https://github.com/neurondra/neuron-dra-operator/blob/main/docs/operations.md#";

/// The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    let lower = heading.trim().to_lowercase();
    let kept = lower.chars().filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'));
    kept.map(|c| if c == ' ' { '-' } else { c }).collect()
}

/// Every alert has a `runbook_url` into docs/operations.md whose anchor is a heading there, and the section names
/// the alert; the metrics the docs recommend alerting on (leader, memory, build info) feed an alert.
#[test]
fn every_alert_has_a_runbook_in_docs_operations() {
    let operations = std::fs::read_to_string(repo("docs/operations.md")).unwrap();
    let headings: BTreeSet<String> =
        operations.lines().filter_map(|l| l.strip_prefix('#')).map(|l| anchor(l.trim_start_matches('#'))).collect();
    let rule = read_yaml(RULE_FILE);
    let rules: Vec<&Value> =
        rule["spec"]["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    for alert in rules.iter().filter(|r| r["alert"].is_string()) {
        let name = alert["alert"].as_str().unwrap();
        let url = alert["annotations"]["runbook_url"].as_str().unwrap_or_else(|| panic!("{name}: no runbook_url"));
        let section = url.strip_prefix(RUNBOOKS).unwrap_or_else(|| panic!("{name}: {url} is not in {RUNBOOKS}"));
        assert!(headings.contains(section), "{name}: docs/operations.md has no heading with the anchor #{section}");
        assert_eq!(section, anchor(name), "{name}: its runbook is the section named after it");
    }
    let exprs: String = rules.iter().filter_map(|r| r["expr"].as_str()).collect::<Vec<_>>().join("\n");
    for metric in ["neuron_dra_operator_leader", "process_resident_memory_bytes", "neuron_dra_operator_build_info"] {
        assert!(exprs.contains(metric), "no alert on {metric}");
    }
    // The check is real: a heading that is not there is not found.
    assert!(!headings.contains("neurondranosuchalert") && headings.contains(&anchor("Alerts")));
}
