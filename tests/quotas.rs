//! Device budgets per team on the real API server: the operator writes a ResourceQuota of its own into the team's
//! namespace; the API server's quota admission refuses the claim of a pod past the budget (the resourceclaim
//! controller reports it on the pod); the status shows hard, used and the room that fits both the budget and the
//! cluster; a budget raised by hand is restored; removing the budget removes the quota and leaves the team's own quota
//! alone. On 1.36 and later, a budget also caps pods that ask for the extended resource. On UltraServers a budget is
//! still a number of devices: a claim of a node entry counts as its node's 16 devices, or is refused.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use k8s_openapi::api::core::v1::{Event, Pod, ResourceQuota, ServiceAccount};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use neuron_dra_operator::api::{NeuronDRAConfigStatus, TeamNodeEntries, TeamStatus};
use serde_json::json;
use support::allocation::{create_pod, wait_scheduled, wait_unschedulable, workload_pod};
use support::cluster::eventually;
use support::fleet::Fleet;
use support::scenario::TIMEOUT;

fn team<'a>(status: &'a NeuronDRAConfigStatus, namespace: &str) -> Option<&'a TeamStatus> {
    status.teams.iter().find(|t| t.namespace == namespace)
}

/// (charge, fits) of a template in a team's room.
fn room(team: &TeamStatus, template: &str) -> Option<(i64, i64)> {
    team.room.iter().find(|r| r.template == template).map(|r| (r.charge, r.fits))
}

/// The quota key of UltraServer node entries of the default DeviceClass.
const NODES_KEY: &str = "ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices";
const DEVICES_KEY: &str = "neuron.aws.com.deviceclass.resource.k8s.io/devices";

fn hard(quota: &ResourceQuota) -> Vec<(String, String)> {
    let hard = quota.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
    hard.into_iter().map(|(k, v)| (k, v.0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_past_its_budget_gets_its_claim_refused_and_sees_why() {
    let f = Fleet::start("quota", &[("trn2.48xlarge", 1)]).await;
    let s = &f.scenario;
    let client = &s.client;
    let namespace = s.namespace("team", &[]).await;
    let selected_label = format!("{}-b", s.id);
    let selected = s.namespace("team-b", &[("team", &selected_label)]).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &namespace);
    // The team's own quota: never touched.
    let own: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "team-own"}, "spec": {"hard": {"count/configmaps": "100"}},
    }))
    .unwrap();
    let own = quotas.create(&PostParams::default(), &own).await.unwrap();

    let spec = |budget: bool| {
        let mut spec = json!({
            "nodeSelector": f.node_selector(), "templates": {"namespaces": [namespace]},
            "profiles": [{"name": "quad", "training": {"devices": 4}}],
        });
        if budget {
            spec["quotas"] = json!([
                {"namespaces": [namespace], "devices": 8},
                {"namespaceSelector": {"matchLabels": {"team": selected_label}}, "devices": 4},
            ]);
        }
        spec
    };
    s.apply(&s.config(&s.id, spec(true))).await.unwrap();
    let name = format!("neuron-dra-{}", s.id);
    let ours = eventually(TIMEOUT, "the budget's quota", || async { quotas.get_opt(&name).await.unwrap() }).await;
    let key = "neuron.aws.com.deviceclass.resource.k8s.io/devices";
    // No UltraServer node entries in this budget: their key is there, at 0.
    let budget = [(key.to_string(), "8".to_string()), (NODES_KEY.to_string(), "0".to_string())];
    assert_eq!(hard(&ours), budget);
    assert_eq!(ours.metadata.labels.unwrap()["neurondra.io/config"], s.id);
    // Raised by hand: restored.
    let raised = json!({"spec": {"hard": {key: "100"}}});
    quotas.patch(&name, &PatchParams::default(), &Patch::Merge(&raised)).await.unwrap();
    eventually(TIMEOUT, "the budget restored", || async {
        let quota = quotas.get(&name).await.unwrap();
        (hard(&quota) == budget).then_some(())
    })
    .await;
    // A namespace the selector matches gets its own, and loses it when it stops matching.
    let selected_quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &selected);
    let theirs = eventually(TIMEOUT, "the selected namespace's quota", || async {
        selected_quotas.get_opt(&name).await.unwrap()
    })
    .await;
    assert_eq!(hard(&theirs)[0].1, "4");
    s.label_namespace(&selected, "team", None).await;
    eventually(TIMEOUT, "the unselected namespace's quota deleted", || async {
        selected_quotas.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;

    // Counted by Kubernetes: 8 devices of budget, 4 a claim, 4 groups of 4 free on the node.
    let status = f
        .wait_status("the team counted", |st| {
            st.teams.len() == 1
                && team(st, &namespace).is_some_and(|t| t.used == Some(0) && room(t, "quad") == Some((4, 2)))
        })
        .await;
    assert_eq!(team(&status, &namespace).unwrap().hard, 8);
    assert_eq!(status.team_summary.as_ref().map(|s| (s.namespaces, s.at_quota)), Some((1, 0)));

    for pod in ["a", "b"] {
        create_pod(client, &namespace, &workload_pod(pod, "quad", &f.pod_affinity())).await;
        wait_scheduled(client, &namespace, pod).await;
    }
    // At its budget while the cluster still has room for two more (the quota counts a claim when it is made, the
    // capacity once it is allocated).
    let quad_room = |st: &NeuronDRAConfigStatus| {
        st.profiles.iter().flat_map(|p| &p.capacity).find(|c| c.template == "quad").map(|c| c.available)
    };
    let status = f
        .wait_status("the team at its budget", |st| {
            team(st, &namespace).is_some_and(|t| t.used == Some(8)) && quad_room(st) == Some(2)
        })
        .await;
    let t = team(&status, &namespace).unwrap();
    assert_eq!(room(t, "quad"), Some((4, 0)), "{t:?}");
    assert_eq!(status.team_summary.as_ref().map(|s| s.at_quota), Some(1));

    // The third pod's claim is refused by quota admission; the pod stays Pending and says why.
    create_pod(client, &namespace, &workload_pod("c", "quad", &f.pod_affinity())).await;
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let refused = eventually(TIMEOUT, "the claim refused by quota", || async {
        let list = events.list(&ListParams::default().fields("involvedObject.name=c")).await.unwrap();
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("FailedResourceClaimCreation"))
    })
    .await;
    let message = refused.message.unwrap_or_default();
    assert!(message.contains(&format!("exceeded quota: {name}")), "{message}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    assert!(pods.get("c").await.unwrap().spec.unwrap().node_name.is_none());

    // Without the budget the quota goes, the claim is made on the controller's next try, and the pod runs.
    s.apply(&s.config(&s.id, spec(false))).await.unwrap();
    eventually(TIMEOUT, "the budget's quota deleted", || async {
        quotas.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    f.wait_status("no teams", |st| st.teams.is_empty() && st.team_summary.is_none()).await;
    wait_scheduled(client, &namespace, "c").await;
    let kept = quotas.get("team-own").await.unwrap();
    assert_eq!(kept.metadata.uid, own.metadata.uid);
    let managers: Vec<String> =
        kept.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert!(!managers.iter().any(|m| m.starts_with("neuron-dra-operator")), "{managers:?}");
    assert_eq!(hard(&kept), [("count/configmaps".to_string(), "100".to_string())]);
    assert!(kept.metadata.labels.is_none_or(|l| !l.contains_key("neurondra.io/config")));
    f.clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_also_caps_pods_that_ask_for_the_extended_resource() {
    let f = Fleet::start("quotaext", &[]).await;
    let s = &f.scenario;
    let version = s.client.apiserver_version().await.unwrap();
    if version.minor.trim_end_matches('+').parse::<u32>().unwrap() < 36 {
        // No extended-resource mapping before 1.36: such a config is refused (tests/versions.rs).
        f.clear().await;
        return;
    }
    let namespace = s.namespace("team", &[]).await;
    // A class and resource of this test's own, so no other test's pods are served from them.
    let class = format!("{}.neuron.aws.com", s.id);
    let resource = format!("neurondra.test/{}", s.id);
    let spec = json!({
        "deviceClassName": class, "extendedResourceName": resource,
        "templates": {"namespaces": [namespace]},
        "profiles": [{"name": "quad", "training": {"devices": 4}}],
        "quotas": [{"namespaces": [namespace], "devices": 4}],
    });
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(s.client.clone(), &namespace);
    let name = format!("neuron-dra-{}", s.id);
    let ours = eventually(TIMEOUT, "the budget's quota", || async { quotas.get_opt(&name).await.unwrap() }).await;
    let four = |key: String| (key, "4".to_string());
    assert_eq!(
        hard(&ours),
        [
            four(format!("devices.{class}.deviceclass.resource.k8s.io/devices")),
            four(format!("{class}.deviceclass.resource.k8s.io/devices")),
            four(format!("requests.{resource}")),
            (format!("ultraserver-nodes.{class}.deviceclass.resource.k8s.io/devices"), "0".to_string()),
        ]
    );
    eventually(TIMEOUT, "the quota counted", || async {
        let quota = quotas.get(&name).await.unwrap();
        quota.status.and_then(|s| s.used).is_some_and(|used| used.len() == 4).then_some(())
    })
    .await;
    let pod = |name: &str, devices: u32| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            // Admission is what is tested: kept off every node, so it holds no other test's devices.
            "spec": {"nodeSelector": {"neurondra.io/no-such-node": "true"},
                "containers": [{"name": "main", "image": "registry.example/trainer:1",
                "resources": {"limits": {resource.as_str(): devices.to_string()}}}]},
        }))
        .unwrap()
    };
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &namespace);
    let accounts: Api<ServiceAccount> = Api::namespaced(s.client.clone(), &namespace);
    eventually(TIMEOUT, "the default ServiceAccount", || async { accounts.get_opt("default").await.unwrap() }).await;
    let refused = pods.create(&PostParams::default(), &pod("eight", 8)).await.unwrap_err();
    let refused = refused.to_string();
    assert!(refused.contains(&format!("exceeded quota: {name}")), "{refused}");
    assert!(refused.contains(&format!("requests.{resource}")), "{refused}");
    pods.create(&PostParams::default(), &pod("four", 4)).await.unwrap();
    s.delete_config(&s.id).await;
    f.clear().await;
}

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
    use neuron_dra_operator::logic::build::{build, named_budgets};
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
