use super::*;

fn classify(method: http::Method, uri: &str) -> (String, String) {
    let labels = classify_request(&method, &uri.parse().unwrap());
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
        room: Vec::new(),
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
fn requests_are_counted_by_verb_and_resource() {
    let metrics = Metrics::default();
    let request = |method: http::Method, uri: &str| {
        let mut r = http::Request::new(Body::empty());
        *r.method_mut() = method;
        *r.uri_mut() = uri.parse().unwrap();
        r
    };
    metrics.record_request(&request(http::Method::GET, "/api/v1/nodes"));
    metrics.record_request(&request(http::Method::PATCH, "/apis/apps/v1/namespaces/a/daemonsets/x"));
    metrics.record_request(&request(http::Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"));
    let text = metrics.encode();
    assert!(text.contains("neuron_dra_operator_api_requests_total{verb=\"list\",resource=\"nodes\"} 1"));
    assert!(text.contains("neuron_dra_operator_api_requests_total{verb=\"update\",resource=\"leases\"} 1"));
    assert!(
        metrics.encode().contains("neuron_dra_operator_api_requests_total{verb=\"patch\",resource=\"daemonsets\"} 1")
    );
}
