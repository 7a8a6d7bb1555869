//! Remediation's requests: one rule per failing node, nothing once the cache holds it, a delete when the node
//! recovers, and a refusal (with nothing written but the status) where the server serves no DeviceTaintRules.

use serde_json::{Value, json};

use super::fixtures::{Fixture, World};
use super::{EVENT, STATUS, condition, config, converged, nodes, with_written_status};
use crate::cluster::taint_rule::TaintRuleView;

const RULE: &str = "/apis/resource.k8s.io/v1/devicetaintrules/c.n-0";

/// A converged config with `remediation`, over two nodes of which n-0 reports NeuronHealth=True when `failing`.
fn world(remediation: Value, failing: bool, rules: Option<Vec<TaintRuleView>>) -> (crate::api::NeuronDRAConfig, World) {
    let c = config(json!({"remediation": remediation}));
    let mut world = converged(&c);
    world.nodes = nodes(2);
    if failing {
        world.nodes[0].status = Some(
            serde_json::from_value(json!({"conditions": [{"type": "NeuronHealth", "status": "True",
                "reason": "NeuronHasError_DMA", "lastTransitionTime": "2026-01-03T00:00:00Z"}]}))
            .unwrap(),
        );
    }
    world.taint_rules = rules;
    (c, world)
}

/// The same world with `rule` in the cache.
fn world_with(remediation: Value, failing: bool, rule: Value) -> (crate::api::NeuronDRAConfig, World) {
    world(remediation, failing, Some(vec![serde_json::from_value(rule).unwrap()]))
}

#[tokio::test]
async fn a_failing_node_gets_one_rule_and_then_nothing_is_written() {
    let (c, world) = world(json!({"effect": "NoExecute"}), true, Some(vec![]));
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let patch = format!("PATCH {RULE}");
    assert_eq!(fixture.lines(), [patch.as_str(), STATUS, EVENT], "the event goes out with the status");
    assert_eq!(fixture.event_reasons(), ["Remediated"]);
    let rule = fixture.sent().into_iter().find(|s| s.path == RULE).unwrap().body;
    assert_eq!(rule["spec"]["deviceSelector"], json!({"driver": "neuron.aws.com", "pool": "n-0"}));
    assert_eq!(rule["spec"]["taint"]["effect"], "NoExecute");
    let status = fixture.last_status().unwrap();
    assert_eq!(status["remediation"]["remediatedNodes"][0]["rule"], "c.n-0");

    // The cache now holds the rule as written (a list carries no apiVersion and kind) and the status: idle.
    let mut cached = rule.clone();
    cached.as_object_mut().unwrap().retain(|k, _| k != "apiVersion" && k != "kind");
    cached["metadata"]["resourceVersion"] = json!("2");
    cached["spec"]["taint"]["timeAdded"] = json!("2026-01-03T00:00:05Z");
    let (_, mut settled_world) = world_with(json!({"effect": "NoExecute"}), true, cached);
    let settled = with_written_status(&c, &fixture);
    settled_world.configs = vec![settled.clone()];
    let fixture = Fixture::new(&settled_world);
    fixture.reconcile(&settled).await.unwrap();
    assert_eq!(fixture.lines(), Vec::<String>::new(), "idle: not one request");
}

#[tokio::test]
async fn a_recovered_node_is_released() {
    let (c, world) = world(json!({}), true, Some(vec![]));
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    let rule = fixture.sent().into_iter().find(|s| s.path == RULE).unwrap().body;
    let (_, recovered) = world_with(json!({}), false, rule);
    let fixture = Fixture::new(&recovered);
    fixture.reconcile(&c).await.unwrap();
    assert!(fixture.lines().contains(&format!("DELETE {RULE}")), "{:?}", fixture.lines());
    assert_eq!(fixture.event_reasons(), ["Released"]);
    let status = fixture.last_status().unwrap();
    assert_eq!(
        (status["remediation"]["failingNodes"].as_i64(), status["remediation"]["remediated"].as_i64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn without_device_taint_rules_the_config_is_refused_and_nothing_is_applied() {
    let (c, world) = world(json!({}), true, None);
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    assert_eq!(fixture.lines(), [EVENT, STATUS]);
    let (status, reason, message) = condition(&fixture.last_status().unwrap(), "ConfigValid");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Unsupported"));
    assert!(message.starts_with("spec.remediation: ") && !message.contains('\n'), "{message}");
}

/// A problem younger than `problemFor` writes no rule yet, and the plan asks to be looked at again when it has
/// lasted long enough (nothing in the cluster changes then to trigger a pass).
#[tokio::test]
async fn a_young_problem_waits_for_problem_for_and_the_pass_is_requeued_for_it() {
    let (c, mut world) = world(json!({"problemFor": "1m"}), true, Some(vec![]));
    let now = crate::logic::status::now().as_second();
    let ten_seconds_ago = k8s_openapi::jiff::Timestamp::from_second(now - 10).unwrap().to_string();
    world.nodes[0].status = Some(
        serde_json::from_value(json!({"conditions": [{"type": "NeuronHealth", "status": "True",
            "reason": "NeuronHasError_DMA", "lastTransitionTime": ten_seconds_ago}]}))
        .unwrap(),
    );
    let plan = crate::controller::pure::plan::Plan::new(&c, &world.snapshot(), now).unwrap();
    assert!(plan.remediation.rules().is_empty(), "no rule before the problem lasted a minute");
    assert_eq!(plan.remediation.recheck(), Some(std::time::Duration::from_secs(51)));
    let fixture = Fixture::new(&world);
    fixture.reconcile(&c).await.unwrap();
    assert!(!fixture.lines().iter().any(|l| l.contains("devicetaintrules")), "{:?}", fixture.lines());
    let status = fixture.last_status().unwrap();
    assert_eq!(
        (status["remediation"]["waiting"].as_i64(), status["remediation"]["remediated"].as_i64()),
        (Some(1), Some(0))
    );
}
