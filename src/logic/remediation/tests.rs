use super::*;
use crate::api::{NeuronDRAConfig, remediation_problems};
use crate::cluster::ACCELERATED_HARDWARE_READY;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

/// A node with conditions given as (type, status, reason, last transition second).
fn node(name: &str, conditions: &[(&str, &str, &str, Option<i64>)]) -> NodeView {
    let conditions: Vec<serde_json::Value> = conditions
        .iter()
        .map(|(type_, status, reason, at)| {
            let mut c = json!({"type": type_, "status": status, "reason": reason});
            if let Some(at) = at {
                c["lastTransitionTime"] = json!(k8s_openapi::jiff::Timestamp::from_second(*at).unwrap().to_string());
            }
            c
        })
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name}, "status": {"conditions": conditions}})).unwrap()
}

fn sick(name: &str, at: i64) -> NodeView {
    node(name, &[("Ready", "True", "KubeletReady", Some(1)), ("NeuronHealth", "True", "NeuronHasError_DMA", Some(at))])
}

fn healthy(name: &str) -> NodeView {
    node(name, &[("Ready", "True", "KubeletReady", Some(1)), ("NeuronHealth", "False", "NoError", Some(1))])
}

fn policy(max_nodes: IntOrString) -> RemediationPolicy {
    RemediationPolicy { max_nodes, ..RemediationPolicy::default() }
}

fn names(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|p| p.node.as_str()).collect()
}

/// Long after every condition's transition in these tests (the defaults' `problemFor` and `clearFor` have passed).
const LATER: i64 = 1_000_000;

fn decide_over(policy: &RemediationPolicy, nodes: &[NodeView], remediated: &[&str]) -> Decision {
    decide_at(policy, nodes, remediated, LATER)
}

/// Decides with each problem observed by the operator when its condition says it began (or never, for a condition
/// without a time): the order the tests below expect.
fn decide_at(policy: &RemediationPolicy, nodes: &[NodeView], remediated: &[&str], now: i64) -> Decision {
    let observed =
        nodes.iter().filter_map(|n| problem(n).and_then(|p| p.since.map(|t| (p.node, t.0.as_second())))).collect();
    let nodes: Vec<&NodeView> = nodes.iter().collect();
    decide(policy, &nodes, &remediated.iter().map(|n| n.to_string()).collect(), &observed, now)
}

/// #50.5: a plugin that forges an old lastTransitionTime on its node does not move it ahead: the budget goes by
/// when the operator observed each problem, kept in the status across passes.
#[test]
fn the_budget_goes_by_when_the_operator_observed_the_problem_not_the_nodes_clock() {
    let nodes = [sick("honest", 500), sick("forged", 1)];
    let nodes: Vec<&NodeView> = nodes.iter().collect();
    let observed = BTreeMap::from([("honest".to_string(), 500), ("forged".to_string(), 600)]);
    let decision = decide(&policy(IntOrString::Int(1)), &nodes, &BTreeSet::new(), &observed, LATER);
    assert_eq!(names(&decision.remediate), ["honest"], "observed first");
    assert_eq!(names(&decision.held_back), ["forged"]);
    // The status keeps the time of observation, and the next pass reads it back; one not listed is observed now.
    let status = status("c", &decision, &BTreeSet::new());
    assert_eq!(observed_in(Some(&status)), observed);
    let decision = decide(&policy(IntOrString::Int(1)), &nodes, &BTreeSet::new(), &BTreeMap::new(), LATER);
    assert_eq!(names(&decision.remediate), ["forged"], "both observed now: by name");
}

#[test]
fn either_condition_reports_a_problem_and_the_older_one_counts() {
    assert_eq!(problem(&healthy("a")), None);
    let npd = problem(&sick("a", 100)).unwrap();
    assert_eq!((npd.condition.as_str(), npd.reason.as_str()), ("NeuronHealth", "NeuronHasError_DMA"));
    let eks = node("b", &[("AcceleratedHardwareReady", "False", "NeuronHBMUncorrectableError", Some(50))]);
    assert_eq!(problem(&eks).unwrap().condition, ACCELERATED_HARDWARE_READY);
    let fine = node("c", &[("AcceleratedHardwareReady", "True", "AcceleratedHardwareIsReady", Some(50))]);
    assert_eq!(problem(&fine), None);
    let both = node(
        "d",
        &[
            ("NeuronHealth", "True", "NeuronHasError_DMA", Some(300)),
            ("AcceleratedHardwareReady", "False", "X", Some(200)),
        ],
    );
    assert_eq!(problem(&both).unwrap().condition, ACCELERATED_HARDWARE_READY, "the older report");
}

#[test]
fn the_budget_is_a_count_or_a_rounded_up_share_of_at_least_one_node() {
    let share = |p: &str, n| policy(IntOrString::String(p.into())).budget(n);
    assert_eq!(share("10%", 5), 1);
    assert_eq!(share("10%", 25), 3);
    assert_eq!(share("100%", 7), 7);
    assert_eq!(share("10%", 0), 1);
    assert_eq!(policy(IntOrString::Int(2)).budget(40), 2);
    assert_eq!(RemediationPolicy::default().budget(100), 10, "the default is 10%");
    assert_eq!(RemediationPolicy::default().effect, RemediationEffect::NoSchedule);
}

#[test]
fn more_failures_than_the_budget_remediate_the_oldest_problems_first_then_by_name() {
    let nodes = [
        sick("d", 400),
        healthy("e"),
        sick("c", 100),
        sick("b", 300),
        sick("a", 300),
        node("f", &[("NeuronHealth", "True", "NoTime", None)]),
    ];
    let decision = decide_over(&policy(IntOrString::Int(2)), &nodes, &[]);
    assert_eq!(decision.budget, 2);
    assert_eq!(names(&decision.remediate), ["c", "a"]);
    assert_eq!(names(&decision.held_back), ["b", "d", "f"], "next in line first; a node without a time last");
    // The cache's order does not matter.
    let mut reversed = nodes.clone();
    reversed.reverse();
    assert_eq!(decide_over(&policy(IntOrString::Int(2)), &reversed, &[]), decision);
}

#[test]
fn a_remediated_node_keeps_its_place_when_an_older_problem_appears() {
    let nodes = [sick("new", 500), sick("old", 100)];
    let decision = decide_over(&policy(IntOrString::Int(1)), &nodes, &["new"]);
    assert_eq!(names(&decision.remediate), ["new"], "no flapping");
    assert_eq!(names(&decision.held_back), ["old"]);
}

#[test]
fn a_cleared_condition_releases_the_node_and_frees_its_place() {
    let nodes = [healthy("a"), sick("b", 200)];
    let decision = decide_over(&policy(IntOrString::Int(1)), &nodes, &["a"]);
    assert_eq!(names(&decision.remediate), ["b"], "a's rule goes, b takes the budget");
    assert!(decision.held_back.is_empty());
}

#[test]
fn a_smaller_budget_keeps_the_longest_failing_remediated_nodes() {
    let nodes = [sick("a", 300), sick("b", 100), sick("c", 200)];
    let decision = decide_over(&policy(IntOrString::Int(1)), &nodes, &["a", "b", "c"]);
    assert_eq!(names(&decision.remediate), ["b"]);
    assert_eq!(names(&decision.held_back), ["c", "a"]);
}

#[test]
fn the_rule_taints_every_neuron_device_of_the_node_and_belongs_to_the_config() {
    let config: NeuronDRAConfig = serde_json::from_value(json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
        "metadata": {"name": "pool", "uid": "u1"}, "spec": {"remediation": {"effect": "NoExecute"}}}))
    .unwrap();
    let config = crate::logic::validate::validate(&config).unwrap();
    let problem = problem(&sick("ip-10-0-0-1.ec2.internal", 100)).unwrap();
    let rule = rule(&config, "resource.k8s.io/v1alpha3", &problem, RemediationEffect::NoExecute);
    let value = serde_json::to_value(&rule).unwrap();
    assert_eq!(
        value,
        json!({
            "apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule",
            "metadata": {
                "name": "pool.ip-10-0-0-1.ec2.internal",
                "labels": {"app.kubernetes.io/managed-by": "neuron-dra-operator", "neurondra.io/config": "pool"},
                "ownerReferences": [{"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "name": "pool",
                    "uid": "u1", "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {
                "deviceSelector": {"driver": "neuron.aws.com", "pool": "ip-10-0-0-1.ec2.internal"},
                "taint": {"key": "neurondra.io/hardware-problem", "value": "NeuronHasError_DMA", "effect": "NoExecute"},
            },
        })
    );
    assert_eq!(rule_node(&rule), Some("ip-10-0-0-1.ec2.internal"));
}

#[test]
fn names_and_values_stay_within_kubernetes_limits() {
    let long = "n".repeat(250);
    let name = rule_name("pool", &long);
    assert_eq!(name.len(), 253);
    assert_ne!(name, rule_name("pool", &format!("{long}x")), "the hash tells long names apart");
    assert_ne!(rule_name("a", "b-c"), rule_name("a-b", "c"));
    assert_eq!(taint_value("NeuronHasError_DMA_ERROR").as_deref(), Some("NeuronHasError_DMA_ERROR"));
    assert_eq!(taint_value("bad reason: x!").as_deref(), Some("bad_reason__x"));
    assert_eq!(taint_value(&"x".repeat(80)).map(|v| v.len()), Some(63));
    assert_eq!(taint_value("__"), None);
    assert_eq!(taint_value(""), None);
}

#[test]
fn the_status_counts_everything_and_lists_a_bounded_number() {
    let nodes: Vec<NodeView> = (0..120).map(|i| sick(&format!("n{i:03}"), 1000 + i)).collect();
    let decision = decide_over(&policy(IntOrString::String("50%".into())), &nodes, &[]);
    let failed = BTreeSet::from(["n001".to_string()]);
    let status = status("pool", &decision, &failed);
    assert_eq!((status.max_nodes, status.failing_nodes, status.remediated, status.held_back), (60, 120, 59, 60));
    assert_eq!((status.remediated_nodes.len(), status.held_back_nodes.len()), (MAX_LISTED, MAX_LISTED));
    assert_eq!(status.remediated_nodes[0].rule.as_deref(), Some("pool.n000"));
    assert_eq!(status.remediated_nodes[1].node, "n002", "a node whose rule failed is not remediated");
    assert_eq!(status.held_back_nodes[0].node, "n060");
    assert_eq!(status.held_back_nodes[0].rule, None);
    assert_eq!(status.effect, "NoSchedule");
}

#[test]
fn max_nodes_is_a_count_or_a_percentage() {
    let problems = |max_nodes: IntOrString| remediation_problems(Some(&policy(max_nodes)));
    let pct = |text: &str| IntOrString::String(text.into());
    for ok in [IntOrString::Int(1), IntOrString::Int(10_000), pct("1%"), pct("100%"), pct("25%")] {
        assert!(problems(ok.clone()).is_empty(), "{ok:?}");
    }
    for bad in [IntOrString::Int(0), IntOrString::Int(10_001), pct("0%"), pct("101%"), pct("05%"), pct("+5%"), pct("3")]
    {
        assert_eq!(problems(bad.clone())[0].0, "spec.remediation.maxNodes", "{bad:?}");
    }
    assert!(remediation_problems(None).is_empty());
}

#[test]
fn a_percentage_budget_never_releases_a_failing_node_as_the_fleet_changes() {
    let half = policy(IntOrString::String("50%".into()));
    // Four nodes, two failing and remediated; two healthy ones leave: the budget drops to one, both stay.
    let fleet = [sick("a", 100), sick("b", 200), healthy("c"), healthy("d")];
    assert_eq!(names(&decide_over(&half, &fleet, &[]).remediate), ["a", "b"]);
    let smaller = decide_over(&half, &fleet[..2], &["a", "b"]);
    assert_eq!((smaller.budget, names(&smaller.remediate)), (1, vec!["a", "b"]));
    assert!(smaller.held_back.is_empty());
    // A third node fails meanwhile: it waits for room, the remediated ones stay.
    let third = [sick("a", 100), sick("b", 200), sick("e", 50)];
    let decision = decide_over(&half, &third, &["a", "b"]);
    assert_eq!((names(&decision.remediate), names(&decision.held_back)), (vec!["a", "b"], vec!["e"]));
    // Healthy nodes join: the budget grows, nothing is released, the waiting node gets its rule.
    let grown = [sick("a", 100), sick("b", 200), sick("e", 50), healthy("f"), healthy("g"), healthy("h")];
    let decision = decide_over(&half, &grown, &["a", "b"]);
    assert_eq!(names(&decision.remediate), ["a", "b", "e"]);
}

#[test]
fn a_problem_is_remediated_once_it_has_lasted_problem_for() {
    let policy = RemediationPolicy { problem_for: "1m".into(), ..policy(IntOrString::Int(5)) };
    let nodes = [sick("a", 1_000), sick("b", 1_050)];
    // At 1,030: a has failed 30 s, b not yet; nothing is remediated, the next look is when a's minute ends.
    let early = decide_at(&policy, &nodes, &[], 1_030);
    assert_eq!((names(&early.remediate), names(&early.waiting)), (vec![], vec!["a", "b"]));
    assert_eq!(early.recheck, Some(30));
    // At 1,060: a is remediated, b waits until 1,110.
    let later = decide_at(&policy, &nodes, &[], 1_060);
    assert_eq!((names(&later.remediate), names(&later.waiting)), (vec!["a"], vec!["b"]));
    assert_eq!(later.recheck, Some(50));
    // A remediated node never waits again, whatever its condition's time.
    assert_eq!(names(&decide_at(&policy, &[sick("c", 1_059)], &["c"], 1_060).remediate), ["c"]);
    let status = status("cfg", &early, &BTreeSet::new());
    assert_eq!((status.failing_nodes, status.waiting, status.waiting_nodes.len()), (2, 2, 2));
}

#[test]
fn a_remediated_node_keeps_its_rule_until_clear_for_has_passed_and_keeps_its_place() {
    let policy = RemediationPolicy { clear_for: "5m".into(), ..policy(IntOrString::Int(1)) };
    let recovered = node("a", &[("NeuronHealth", "False", "NoError", Some(2_000))]);
    let nodes = [recovered.clone(), sick("b", 100)];
    // Clear for 100 s of 300: a keeps its rule and its place in the budget of 1, so b is held back.
    let clearing = decide_at(&policy, &nodes, &["a"], 2_100);
    assert_eq!(clearing.clearing, ["a"]);
    assert_eq!((names(&clearing.remediate), names(&clearing.held_back)), (vec![], vec!["b"]));
    assert_eq!(clearing.recheck, Some(200));
    let status = status("cfg", &clearing, &BTreeSet::new());
    assert_eq!((status.remediated, status.clearing_nodes.clone()), (1, vec!["a".to_string()]));
    // Clear for 300 s: a's rule goes and b gets the place.
    let released = decide_at(&policy, &nodes, &["a"], 2_300);
    assert!(released.clearing.is_empty());
    assert_eq!(names(&released.remediate), ["b"]);
    // A node that never had a rule is not kept, and one that reports neither condition goes at once.
    assert!(decide_at(&policy, &[recovered], &[], 2_100).clearing.is_empty());
    assert!(decide_at(&policy, &[node("a", &[])], &["a"], 2_100).clearing.is_empty());
}

#[test]
fn problem_for_and_clear_for_are_durations_up_to_a_day() {
    let bad = |problem_for: &str, clear_for: &str| {
        let policy = RemediationPolicy {
            problem_for: problem_for.into(),
            clear_for: clear_for.into(),
            ..RemediationPolicy::default()
        };
        remediation_problems(Some(&policy)).into_iter().map(|(path, _)| path).collect::<Vec<_>>()
    };
    assert!(bad("0s", "1h30m").is_empty());
    assert_eq!(bad("soon", "5m"), ["spec.remediation.problemFor"]);
    assert_eq!(bad("1m", "25h"), ["spec.remediation.clearFor"]);
}
