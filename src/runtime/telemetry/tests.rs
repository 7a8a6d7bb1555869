use super::*;

fn classify(method: http::Method, uri: &str) -> (String, String) {
    let labels = classify_request(&method, &uri.parse().unwrap(), None);
    (labels.verb, labels.resource)
}

#[test]
fn requests_are_classified_by_verb_and_resource() {
    let cases = [
        (http::Method::GET, "/api/v1/nodes?watch=true&resourceVersion=1", "watch", "nodes"),
        (http::Method::GET, "/api/v1/nodes", "list", "nodes"),
        (http::Method::GET, "/api/v1/namespaces", "list", "namespaces"),
        (http::Method::GET, "/api/v1/namespaces/team-a", "get", "namespaces"),
        (
            http::Method::PATCH,
            "/apis/resource.k8s.io/v1/namespaces/a/resourceclaimtemplates/t?fieldManager=x",
            "patch",
            "resourceclaimtemplates",
        ),
        (http::Method::DELETE, "/apis/apps/v1/namespaces/d/daemonsets/ds", "delete", "daemonsets"),
        (
            http::Method::PATCH,
            "/apis/neurondra.io/v1alpha1/neurondraconfigs/c/status",
            "patch",
            "neurondraconfigs/status",
        ),
        (http::Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events", "create", "events"),
    ];
    for (method, uri, verb, resource) in cases {
        assert_eq!(classify(method, uri), (verb.to_string(), resource.to_string()), "{uri}");
    }
}

#[test]
fn every_per_config_gauge_comes_from_the_status() {
    use crate::api::{DeviceSummary, DriverStatus, TemplateSummary};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    let condition = |type_: &str, status: &str| Condition {
        type_: type_.into(),
        status: status.into(),
        reason: "R".into(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::logic::status::now()),
        observed_generation: None,
    };
    let status = NeuronDRAConfigStatus {
        driver: Some(DriverStatus { desired_nodes: 4, ready_nodes: 3, updated_nodes: 2, ..Default::default() }),
        devices: Some(DeviceSummary { nodes: 4, total: 64, healthy: 61, unhealthy: 3 }),
        templates: Some(TemplateSummary { namespaces: 2, count: 10, ..Default::default() }),
        conditions: vec![condition("Ready", "False"), condition("ConfigValid", "True")],
        remediation: Some(crate::api::RemediationStatus {
            failing_nodes: 3,
            remediated: 1,
            held_back: 2,
            ..Default::default()
        }),
        ..Default::default()
    };
    let metrics = Metrics::default();
    metrics.record_status("pool", &status);
    let text = metrics.encode();
    for line in [
        "neuron_dra_operator_nodes{config=\"pool\"} 4",
        "neuron_dra_operator_devices{config=\"pool\"} 64",
        "neuron_dra_operator_unhealthy_devices{config=\"pool\"} 3",
        "neuron_dra_operator_driver_desired_nodes{config=\"pool\"} 4",
        "neuron_dra_operator_driver_ready_nodes{config=\"pool\"} 3",
        "neuron_dra_operator_driver_updated_nodes{config=\"pool\"} 2",
        "neuron_dra_operator_driver_rollout_halted{config=\"pool\"} 0",
        "neuron_dra_operator_templates{config=\"pool\"} 10",
        "neuron_dra_operator_config_condition{config=\"pool\",condition=\"Ready\"} 0",
        "neuron_dra_operator_config_condition{config=\"pool\",condition=\"ConfigValid\"} 1",
        "neuron_dra_operator_remediation_failing_nodes{config=\"pool\"} 3",
        "neuron_dra_operator_remediated_nodes{config=\"pool\"} 1",
        "neuron_dra_operator_remediation_held_back_nodes{config=\"pool\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }

    let mut halted = status.clone();
    halted.driver.as_mut().unwrap().rollout = Some(crate::api::RolloutStatus {
        revision: "r".into(),
        version: "1.2.0".into(),
        state: crate::api::RolloutState::Halted,
        step: 1,
        ..Default::default()
    });
    metrics.record_status("pool", &halted);
    assert!(metrics.encode().contains("neuron_dra_operator_driver_rollout_halted{config=\"pool\"} 1"));

    // A status without a driver (not applied yet) reads 0, not the previous figure.
    metrics.record_status("pool", &NeuronDRAConfigStatus::default());
    assert!(metrics.encode().contains("neuron_dra_operator_driver_ready_nodes{config=\"pool\"} 0"));
    assert!(metrics.encode().contains("neuron_dra_operator_remediated_nodes{config=\"pool\"} 0"));
}

#[test]
fn team_gauges_follow_the_listed_teams_and_go_with_the_config() {
    use crate::api::TeamStatus;
    let team = |namespace: &str, hard: i64, used: Option<i64>| TeamStatus {
        namespace: namespace.into(),
        hard,
        used,
        ..TeamStatus::default()
    };
    let metrics = Metrics::default();
    let status =
        NeuronDRAConfigStatus { teams: vec![team("a", 16, Some(8)), team("b", 4, None)], ..Default::default() };
    metrics.record_status("pool", &status);
    let text = metrics.encode();
    for line in [
        "neuron_dra_operator_team_quota_devices{config=\"pool\",namespace=\"a\"} 16",
        "neuron_dra_operator_team_used_devices{config=\"pool\",namespace=\"a\"} 8",
        "neuron_dra_operator_team_quota_devices{config=\"pool\",namespace=\"b\"} 4",
        "neuron_dra_operator_team_used_devices{config=\"pool\",namespace=\"b\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    // b loses its budget: its series go, a's stay.
    metrics.record_status("pool", &NeuronDRAConfigStatus { teams: vec![team("a", 16, Some(8))], ..Default::default() });
    let text = metrics.encode();
    assert!(!text.contains("namespace=\"b\""), "{text}");
    assert!(text.contains("neuron_dra_operator_team_quota_devices{config=\"pool\",namespace=\"a\"} 16"));
    metrics.forget("pool", None);
    assert!(!metrics.encode().contains("namespace=\"a\""));
}

#[test]
fn requests_are_counted_by_verb_resource_and_status_code() {
    let metrics = Metrics::default();
    let uri = |uri: &str| uri.parse::<http::Uri>().unwrap();
    metrics.record_request(&http::Method::GET, &uri("/api/v1/nodes"), Some(http::StatusCode::OK));
    let daemonset = uri("/apis/apps/v1/namespaces/a/daemonsets/x");
    metrics.record_request(&http::Method::PATCH, &daemonset, Some(http::StatusCode::CONFLICT));
    metrics.record_request(&http::Method::PATCH, &daemonset, Some(http::StatusCode::OK));
    metrics.record_request(&http::Method::PATCH, &daemonset, Some(http::StatusCode::OK));
    let lease = uri("/apis/coordination.k8s.io/v1/namespaces/a/leases/l");
    metrics.record_request(&http::Method::PUT, &lease, None);
    let text = metrics.encode();
    for series in [
        "neuron_dra_operator_api_requests_total{verb=\"list\",resource=\"nodes\",code=\"200\"} 1",
        "neuron_dra_operator_api_requests_total{verb=\"patch\",resource=\"daemonsets\",code=\"409\"} 1",
        "neuron_dra_operator_api_requests_total{verb=\"patch\",resource=\"daemonsets\",code=\"200\"} 2",
        "neuron_dra_operator_api_requests_total{verb=\"update\",resource=\"leases\",code=\"error\"} 1",
    ] {
        assert!(text.contains(series), "{series} in\n{text}");
    }
}

/// The value of an unlabelled series in the metrics text.
fn value_of(text: &str, series: &str) -> f64 {
    let line = text.lines().find(|line| line.split(' ').next() == Some(series)).unwrap_or_else(|| panic!("{series}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn build_info_the_leader_gauge_and_the_process_metrics_are_exported() {
    // Some CPU time first: a test process that just started may have used less than one clock tick.
    let spin = std::time::Instant::now();
    while process::Reading::now().unwrap().cpu_seconds == 0.0 && spin.elapsed() < Duration::from_secs(5) {}
    let metrics = Metrics::default();
    let text = metrics.encode();
    let build = format!(
        "neuron_dra_operator_build_info{{version=\"{}\",revision=\"{REVISION}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&build), "{text}");
    assert_eq!(value_of(&text, "neuron_dra_operator_leader"), 0.0);
    metrics.leader.set(1);
    assert_eq!(value_of(&metrics.encode(), "neuron_dra_operator_leader"), 1.0);

    // The process series keep client_golang's names (no prefix), and read this process.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    let rss = value_of(&text, "process_resident_memory_bytes");
    assert!((rss - rss_kib * 1024.0).abs() < 64.0 * 1024.0 * 1024.0, "{rss} vs VmRSS {rss_kib} KiB");
    assert!(value_of(&text, "process_cpu_seconds_total") > 0.0, "{text}");
    assert!(value_of(&text, "process_virtual_memory_bytes") >= rss);
    assert!(value_of(&text, "process_open_fds") >= 3.0);
    let started = value_of(&text, "process_start_time_seconds");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(started <= now + 1.0 && started > now - 3600.0, "started {started}, now {now}");
    assert!(text.contains("# TYPE process_cpu_seconds counter\n"), "{text}");
}
