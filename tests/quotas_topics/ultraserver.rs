//! UltraServer node entries: charged as their nodes' devices, and the quota key that holds a budget to them.

use crate::*;

/// A claim as the resourceclaim controller makes it for a pod that uses `template` in `namespace`.
async fn claim_from(client: &kube::Client, namespace: &str, template: &str) -> Result<ResourceClaim, kube::Error> {
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), namespace);
    let template = templates.get(template).await.unwrap();
    let claim = ResourceClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", template.metadata.name.unwrap())),
            labels: template.spec.metadata.and_then(|m| m.labels),
            ..ObjectMeta::default()
        },
        spec: template.spec.spec,
        status: None,
    };
    Api::<ResourceClaim>::namespaced(client.clone(), namespace).create(&PostParams::default(), &claim).await
}

/// Issue #38 item 6, on the real API server's quota admission: a budget is a number of devices on UltraServers too.
/// A budget of 4 devices is refused a claim of one node entry (a whole node of 16 devices); a budget of 16 devices
/// given as one node entry admits one node-entry claim and refuses a second and a claim of one device (its device
/// key is 0); `status.teams` charges a node entry 16 and says the same room. A claim written by hand that asks the
/// config's own class for a node entry is charged one device but never allocated: that class selects devices only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ultraserver_node_entry_is_charged_as_its_nodes_devices() {
    let us = "trn2u.48xlarge";
    let f = Fleet::start("quotaus", &[(us, 4)]).await;
    let s = &f.scenario;
    let client = &s.client;
    let small = s.namespace("small", &[]).await;
    let ultra = s.namespace("us", &[]).await;
    let spec = json!({
        "nodeSelector": f.node_selector(), "templates": {"namespaces": [small, ultra]},
        "profiles": [
            {"name": "us1", "longContextInference": {"instanceType": us, "ultraServerNodes": 1}},
            {"name": "one", "training": {"instanceType": us, "devices": 1}},
        ],
        "quotas": [
            {"namespaces": [small], "devices": 4},
            {"namespaces": [ultra], "devices": 16, "ultraServerNodes": 1},
        ],
    });
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let name = format!("neuron-dra-{}", s.id);
    for (namespace, devices, nodes) in [(&small, "4", "0"), (&ultra, "0", "1")] {
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
        let quota = eventually(TIMEOUT, "the budget's quota", || async { quotas.get_opt(&name).await.unwrap() }).await;
        let expected = [(DEVICES_KEY.to_string(), devices.to_string()), (NODES_KEY.to_string(), nodes.to_string())];
        assert_eq!(hard(&quota), expected, "{namespace}");
    }
    // Counted by Kubernetes (quota admission refuses every claim until then).
    let counted = |st: &NeuronDRAConfigStatus, namespace: &str, used: i64| {
        team(st, namespace).is_some_and(|t| t.used == Some(used) && t.room.len() == 2)
    };
    let status = f.wait_status("both teams counted", |st| counted(st, &small, 0) && counted(st, &ultra, 0)).await;
    let t = team(&status, &small).unwrap();
    assert_eq!((t.hard, t.ultra_server_nodes.clone()), (4, None), "{t:?}");
    assert_eq!(room(t, "us1"), Some((16, 0)), "a node entry is charged its node's 16 devices: none fits in 4");
    assert_eq!(room(t, "one"), Some((1, 4)), "{t:?}");
    let t = team(&status, &ultra).unwrap();
    assert_eq!((t.hard, t.ultra_server_nodes.clone()), (16, Some(TeamNodeEntries { hard: 1, used: Some(0) })));
    assert_eq!(room(t, "us1"), Some((16, 1)), "{t:?}");
    assert_eq!(room(t, "one"), Some((1, 0)), "the 16 devices are all the node entry's: {t:?}");

    // Budget 4: the node-entry claim is refused by the quota, on the node entries' key; a device claim is not.
    let refused = claim_from(client, &small, "us1").await.expect_err("a node entry past a budget of 4").to_string();
    assert!(refused.contains(&format!("exceeded quota: {name}")), "{refused}");
    assert!(refused.contains(&format!("requested: {NODES_KEY}=1")), "{refused}");
    assert!(refused.contains(&format!("limited: {NODES_KEY}=0")), "{refused}");
    assert!(!refused.contains('\n'), "one line: {refused}");
    claim_from(client, &small, "one").await.expect("one device within a budget of 4");

    // Budget 16 as one node entry: one node-entry claim, not a second, and no claim of a device.
    claim_from(client, &ultra, "us1").await.expect("the budget's one node entry");
    let second = claim_from(client, &ultra, "us1").await.expect_err("a second node entry").to_string();
    assert!(second.contains(&format!("requested: {NODES_KEY}=1")), "{second}");
    assert!(second.contains(&format!("limited: {NODES_KEY}=1")), "{second}");
    let device = claim_from(client, &ultra, "one").await.expect_err("a device past the node entry").to_string();
    assert!(device.contains(&format!("requested: {DEVICES_KEY}=1")), "{device}");
    assert!(device.contains(&format!("limited: {DEVICES_KEY}=0")), "{device}");

    // The status says the same: the team holds its 16 devices, as one node entry, and has room for nothing.
    let status = f.wait_status("the claims counted", |st| counted(st, &small, 1) && counted(st, &ultra, 16)).await;
    let t = team(&status, &ultra).unwrap();
    assert_eq!((t.hard, t.used), (16, Some(16)), "{t:?}");
    assert_eq!(t.ultra_server_nodes, Some(TeamNodeEntries { hard: 1, used: Some(1) }));
    assert_eq!((room(t, "us1"), room(t, "one")), (Some((16, 0)), Some((1, 0))), "{t:?}");
    let t = team(&status, &small).unwrap();
    assert_eq!((room(t, "us1"), room(t, "one")), (Some((16, 0)), Some((1, 3))), "{t:?}");
    assert_eq!(status.team_summary.as_ref().map(|s| (s.namespaces, s.at_quota)), Some((2, 1)));

    // By hand: the config's class asked for a node entry. Admitted as one device, never allocated.
    let sneaky: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "sneaky"},
        "spec": {"devices": {"requests": [{"name": "node", "exactly": {"deviceClassName": "neuron.aws.com",
            "selectors": [{"cel": {"expression":
                "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"}}]}}]}},
    }))
    .unwrap();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &small);
    claims.create(&PostParams::default(), &sneaky).await.expect("charged one device of 4");
    let mut pod = workload_pod("sneaky", "unused", &f.pod_affinity());
    pod["spec"]["resourceClaims"] = json!([{"name": "neuron", "resourceClaimName": "sneaky"}]);
    create_pod(client, &small, &pod).await;
    let why = wait_unschedulable(client, &small, "sneaky").await;
    assert!(why.contains("cannot allocate all claims"), "{why}");
    f.delete_pod(&small, "sneaky").await;
    s.delete_config(&s.id).await;
    f.clear().await;
}

/// The same budgets on the quota admission and the scheduler alone: the objects the operator's builders make for
/// them (what `render` prints: both DeviceClasses, the templates, the quotas) are applied by the test, and the
/// status figures are computed from the live quotas by the functions the operator's status uses. Holds whatever the
/// operator's own state, and shows on the real scheduler that a node-entry template gets a node entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_entries_quota_key_holds_a_budget_to_its_devices() {
    use neuron_dra_operator::logic::desired::{build, named_budgets};
    use neuron_dra_operator::logic::teams::{Amount, Budget, teams};
    use std::collections::BTreeMap;

    let us = "trn2u.48xlarge";
    let f = Fleet::without_operator("quotakeys", &[(us, 4)]).await;
    let s = &f.scenario;
    let client = &s.client;
    let small = s.namespace("small", &[]).await;
    let ultra = s.namespace("us", &[]).await;
    // A class of the test's own, so that no other test's config shares it.
    let class = format!("{}.neuron.aws.com", s.id);
    let document = json!({
        "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "metadata": {"name": s.id},
        "spec": {
            "deviceClassName": class, "templates": {"namespaces": [small, ultra]},
            "profiles": [
                {"name": "us1", "longContextInference": {"instanceType": us, "ultraServerNodes": 1}},
                {"name": "one", "training": {"instanceType": us, "devices": 1}},
            ],
            "quotas": [
                {"namespaces": [small], "devices": 4},
                {"namespaces": [ultra], "devices": 16, "ultraServerNodes": 1},
            ],
        },
    });
    let config = neuron_dra_operator::cli::parse_config(&document.to_string()).unwrap();
    let config = neuron_dra_operator::logic::validate::validate(&config).unwrap();
    let desired = build(&config, &[small.clone(), ultra.clone()]).with_quotas(&config, &named_budgets(&config));
    let apply = PatchParams::apply("test").force();
    let classes: Api<k8s_openapi::api::resource::v1::DeviceClass> = Api::all(client.clone());
    for object in [&desired.device_class, &desired.ultra_server_node_class] {
        classes.patch(object.metadata.name.as_ref().unwrap(), &apply, &Patch::Apply(object)).await.unwrap();
    }
    for template in &desired.templates {
        let api: Api<ResourceClaimTemplate> =
            Api::namespaced(client.clone(), template.metadata.namespace.as_ref().unwrap());
        api.patch(template.metadata.name.as_ref().unwrap(), &apply, &Patch::Apply(template)).await.unwrap();
    }
    for quota in &desired.quotas {
        let api: Api<ResourceQuota> = Api::namespaced(client.clone(), quota.metadata.namespace.as_ref().unwrap());
        api.patch(quota.metadata.name.as_ref().unwrap(), &apply, &Patch::Apply(quota)).await.unwrap();
    }
    let devices_key = format!("{class}.deviceclass.resource.k8s.io/devices");
    let nodes_key = format!("ultraserver-nodes.{class}.deviceclass.resource.k8s.io/devices");
    let name = format!("neuron-dra-{}", s.id);
    // `status.teams` as the operator computes it, from the live quotas: (hard, used, node entries, room).
    let status = || async {
        let mut budgets = Vec::new();
        let mut charges: BTreeMap<String, Vec<(String, Amount)>> = BTreeMap::new();
        for quota in &desired.quotas {
            let namespace = quota.metadata.namespace.clone().unwrap();
            let live = Api::<ResourceQuota>::namespaced(client.clone(), &namespace).get(&name).await.unwrap();
            budgets.push(Budget::of(quota, Some(&live), &class));
        }
        for template in &desired.templates {
            let namespace = template.metadata.namespace.clone().unwrap();
            let charge = Amount::charge(template, &class);
            charges.entry(namespace).or_default().push((template.metadata.name.clone().unwrap(), charge));
        }
        teams(&budgets, &charges, &[])
    };
    let (listed, _) = eventually(TIMEOUT, "the quotas counted", || async {
        let (listed, summary) = status().await;
        listed.iter().all(|t| t.used == Some(0)).then_some((listed, summary))
    })
    .await;
    let of =
        |listed: &[TeamStatus], namespace: &str| listed.iter().find(|t| t.namespace == namespace).cloned().unwrap();
    let t = of(&listed, &small);
    assert_eq!(
        (t.hard, t.ultra_server_nodes.clone(), room(&t, "us1"), room(&t, "one")),
        (4, None, Some((16, 0)), Some((1, 4)))
    );
    let t = of(&listed, &ultra);
    let held = |used| Some(TeamNodeEntries { hard: 1, used: Some(used) });
    assert_eq!(
        (t.hard, t.ultra_server_nodes.clone(), room(&t, "us1"), room(&t, "one")),
        (16, held(0), Some((16, 1)), Some((1, 0)))
    );

    // Budget 4: no node entry (refused on its key), a device yes.
    let refused = claim_from(client, &small, "us1").await.expect_err("a node entry past a budget of 4").to_string();
    assert!(refused.contains(&format!("exceeded quota: {name}, requested: {nodes_key}=1")), "{refused}");
    assert!(refused.contains(&format!("limited: {nodes_key}=0")), "{refused}");
    claim_from(client, &small, "one").await.expect("one device within a budget of 4");

    // Budget 16 as one node entry: a pod on the node-entry template is scheduled on a node entry.
    create_pod(client, &ultra, &workload_pod("entry", "us1", &f.pod_affinity())).await;
    let pod = wait_scheduled(client, &ultra, "entry").await;
    let claim = support::allocation::claim_of(client, &pod).await;
    let results =
        claim.status.and_then(|s| s.allocation).and_then(|a| a.devices).and_then(|d| d.results).unwrap_or_default();
    assert_eq!(results.iter().map(|r| r.device.as_str()).collect::<Vec<_>>(), ["neuron-node-0"], "{results:?}");
    // ... and nothing more: not a second node entry, not a device.
    let second = claim_from(client, &ultra, "us1").await.expect_err("a second node entry").to_string();
    assert!(
        second.contains(&format!("requested: {nodes_key}=1")) && second.contains(&format!("limited: {nodes_key}=1")),
        "{second}"
    );
    let device = claim_from(client, &ultra, "one").await.expect_err("a device past the node entry").to_string();
    assert!(
        device.contains(&format!("requested: {devices_key}=1"))
            && device.contains(&format!("limited: {devices_key}=0")),
        "{device}"
    );
    let (listed, summary) = eventually(TIMEOUT, "the claims counted", || async {
        let (listed, summary) = status().await;
        (of(&listed, &ultra).used == Some(16) && of(&listed, &small).used == Some(1)).then_some((listed, summary))
    })
    .await;
    let t = of(&listed, &ultra);
    assert_eq!(
        (t.hard, t.ultra_server_nodes.clone(), room(&t, "us1"), room(&t, "one")),
        (16, held(1), Some((16, 0)), Some((1, 0)))
    );
    let t = of(&listed, &small);
    assert_eq!((room(&t, "us1"), room(&t, "one")), (Some((16, 0)), Some((1, 3))));
    assert_eq!((summary.namespaces, summary.at_quota), (2, 1));

    // By hand: the config's own class asked for a node entry. Charged one device, never allocated.
    let sneaky: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "sneaky"},
        "spec": {"devices": {"requests": [{"name": "node", "exactly": {"deviceClassName": class,
            "selectors": [{"cel": {"expression": "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"}}]}}]}},
    }))
    .unwrap();
    Api::<ResourceClaim>::namespaced(client.clone(), &small).create(&PostParams::default(), &sneaky).await.unwrap();
    let mut pod = workload_pod("sneaky", "unused", &f.pod_affinity());
    pod["spec"]["resourceClaims"] = json!([{"name": "neuron", "resourceClaimName": "sneaky"}]);
    create_pod(client, &small, &pod).await;
    let why = wait_unschedulable(client, &small, "sneaky").await;
    assert!(why.contains("cannot allocate all claims"), "{why}");

    f.clear().await;
    for object in [&desired.device_class, &desired.ultra_server_node_class] {
        classes.delete(object.metadata.name.as_ref().unwrap(), &Default::default()).await.unwrap();
    }
}
