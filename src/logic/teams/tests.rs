use super::*;
use serde_json::json;

fn template(requests: serde_json::Value) -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }))
    .unwrap()
}

#[test]
fn a_claim_is_charged_as_the_quota_evaluator_counts() {
    let exact = template(json!([{"name": "n", "exactly": {"deviceClassName": "neuron.aws.com", "count": 4}}]));
    assert_eq!(charge(&exact, "neuron.aws.com"), 4);
    assert_eq!(charge(&exact, "other"), 0);
    let default_count = template(json!([{"name": "n", "exactly": {"deviceClassName": "neuron.aws.com"}}]));
    assert_eq!(charge(&default_count, "neuron.aws.com"), 1);
    let all = template(json!([{"name": "n", "exactly":
            {"deviceClassName": "neuron.aws.com", "allocationMode": "All"}}]));
    assert_eq!(charge(&all, "neuron.aws.com"), ALL_DEVICES_CHARGE);
    // The largest alternative, not the first choice; EFA's class is not charged to Neuron's key.
    let fallbacks = template(json!([
        {"name": "n", "firstAvailable": [
            {"name": "a", "deviceClassName": "neuron.aws.com", "count": 2},
            {"name": "b", "deviceClassName": "neuron.aws.com", "count": 8},
            {"name": "c", "deviceClassName": "neuron.aws.com", "count": 1}]},
        {"name": "e", "exactly": {"deviceClassName": "efa.networking.k8s.aws", "count": 8}},
    ]));
    assert_eq!(charge(&fallbacks, "neuron.aws.com"), 8);
}

fn devices(devices: i64) -> Amount {
    Amount { devices, node_entries: 0 }
}

#[test]
fn a_node_entry_claim_is_charged_on_its_own_key_as_its_nodes_devices() {
    let node = template(json!([{"name": "n", "exactly":
            {"deviceClassName": "ultraserver-nodes.neuron.aws.com", "count": 1}}]));
    let charged = Amount::charge(&node, "neuron.aws.com");
    assert_eq!(charged, Amount { devices: 0, node_entries: 1 });
    assert_eq!(charged.in_devices(), ULTRA_SERVER_NODE_DEVICES);
    let quad = template(json!([{"name": "n", "exactly": {"deviceClassName": "neuron.aws.com", "count": 4}}]));
    assert_eq!(Amount::charge(&quad, "neuron.aws.com"), devices(4));
}

#[test]
fn a_budget_reads_both_keys_and_is_counted_only_once_both_are() {
    let quota = |hard: serde_json::Value, used: Option<serde_json::Value>| -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": "neuron-dra-pool", "namespace": "team"},
            "spec": {"hard": hard},
            "status": used.map(|used| json!({"used": used})),
        }))
        .unwrap()
    };
    let hard = json!({"neuron.aws.com.deviceclass.resource.k8s.io/devices": "16",
            "ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices": "1"});
    let desired = quota(hard.clone(), None);
    let counted = quota(
        hard.clone(),
        Some(json!({"neuron.aws.com.deviceclass.resource.k8s.io/devices": "4",
            "ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices": "1"})),
    );
    let budget = Budget::of(&desired, Some(&counted), "neuron.aws.com");
    assert_eq!(budget.namespace, "team");
    assert_eq!(budget.hard, Amount { devices: 16, node_entries: 1 });
    assert_eq!(budget.used, Some(Amount { devices: 4, node_entries: 1 }));
    // A quota whose node key Kubernetes has not counted yet (just added to an older quota) is not counted.
    let half = quota(hard, Some(json!({"neuron.aws.com.deviceclass.resource.k8s.io/devices": "4"})));
    assert_eq!(Budget::of(&desired, Some(&half), "neuron.aws.com").used, None);
    assert_eq!(Budget::of(&desired, None, "neuron.aws.com").used, None);
}

#[test]
fn node_entries_are_charged_and_have_room_as_their_nodes_devices() {
    let node = Amount { devices: 0, node_entries: 1 };
    let templates: BTreeMap<String, Vec<(String, Amount)>> = ["small", "us"]
        .iter()
        .map(|ns| (ns.to_string(), vec![("one".to_string(), devices(1)), ("us1".to_string(), node)]))
        .collect();
    let budgets = [
        // Budget 4, no node entries: the node-entry template is charged 16 and never fits.
        Budget { namespace: "small".into(), hard: devices(4), used: Some(devices(0)) },
        // Budget 16, all of it one node entry, held: no room for either.
        Budget { namespace: "us".into(), hard: node, used: Some(node) },
    ];
    let (listed, summary) = teams(&budgets, &templates, &[]);
    let room = |team: &TeamStatus| -> Vec<(String, i64, i64)> {
        team.room.iter().map(|r| (r.template.clone(), r.charge, r.fits)).collect()
    };
    let expected = |one: i64, us1: i64| vec![("one".to_string(), 1, one), ("us1".to_string(), 16, us1)];
    assert_eq!(room(&listed[0]), expected(4, 0));
    assert_eq!((listed[0].hard, listed[0].used, listed[0].ultra_server_nodes.clone()), (4, Some(0), None));
    assert_eq!(room(&listed[1]), expected(0, 0));
    assert_eq!(
        (listed[1].hard, listed[1].used, listed[1].ultra_server_nodes.clone()),
        (16, Some(16), Some(TeamNodeEntries { hard: 1, used: Some(1) }))
    );
    assert_eq!(summary, TeamSummary { namespaces: 2, at_quota: 1 });

    // Budget 48 with 2 node entries, one held, and 8 devices held: 8 devices and 1 node entry left.
    let budgets = [Budget {
        namespace: "us".into(),
        hard: Amount { devices: 16, node_entries: 2 },
        used: Some(Amount { devices: 8, node_entries: 1 }),
    }];
    let (listed, summary) = teams(&budgets, &templates, &[]);
    assert_eq!(room(&listed[0]), expected(8, 1));
    assert_eq!((listed[0].hard, listed[0].used), (48, Some(24)));
    assert_eq!(summary.at_quota, 0);
}

#[test]
fn room_is_the_smaller_of_the_budget_and_the_cluster() {
    let budgets = [
        Budget { namespace: "a".into(), hard: devices(16), used: Some(devices(4)) },
        Budget { namespace: "b".into(), hard: devices(8), used: Some(devices(8)) },
        Budget { namespace: "c".into(), hard: devices(8), used: None },
    ];
    let per_namespace = vec![("pretrain".to_string(), devices(4)), ("serve".to_string(), devices(1))];
    let templates: BTreeMap<String, Vec<(String, Amount)>> =
        ["a", "b"].iter().map(|ns| (ns.to_string(), per_namespace.clone())).collect();
    let capacity = [
        TemplateCapacity { template: "pretrain".into(), allocated: 1, available: 2 },
        TemplateCapacity { template: "serve".into(), allocated: 0, available: 100 },
    ];
    let (teams, summary) = teams(&budgets, &templates, &capacity);
    let fits = |team: &TeamStatus| team.room.iter().map(|r| r.fits).collect::<Vec<_>>();
    assert_eq!(fits(&teams[0]), [2, 12], "the cluster holds 2 pretrain; the budget 12 serve");
    assert_eq!(fits(&teams[1]), [0, 0], "at its budget");
    assert!(teams[2].room.is_empty(), "no templates there");
    assert_eq!(summary, TeamSummary { namespaces: 3, at_quota: 1 });
}
