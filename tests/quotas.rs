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

/// The tests of one topic each, in `tests/quotas_topics/`.
mod quotas_topics {
    mod ultraserver;
}

/// #50.4: a team's budget caps every class the operator manages, another config's included: that config's class
/// selects every Neuron device of the cluster too, so without a key at 0 a tenant with `edit` would claim past its
/// budget through it. The tenant's own token: its claims of the other class are refused by the budget's quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_caps_every_neuron_class_the_operator_manages() {
    let f = Fleet::start("quotaclass", &[("trn2.48xlarge", 1)]).await;
    let s = &f.scenario;
    let namespace = s.namespace("team", &[]).await;
    let (a, b) = (format!("{}-a", s.id), format!("{}-b", s.id));
    let (class_a, class_b) = (format!("{a}.neuron.aws.com"), format!("{b}.neuron.aws.com"));
    // The other config budgets nobody here, and runs on no node (no conflict): its class still selects every
    // Neuron device.
    let other = json!({"deviceClassName": class_b, "nodeSelector": {"matchLabels": {"neurondra.io/nowhere": b}},
        "profiles": [{"name": "quad", "training": {"devices": 4}}]});
    s.apply(&s.config(&b, other)).await.unwrap();
    let budgeted = json!({"deviceClassName": class_a, "nodeSelector": f.node_selector(),
        "templates": {"namespaces": [namespace]}, "profiles": [{"name": "quad", "training": {"devices": 4}}],
        "quotas": [{"namespaces": [namespace], "devices": 4}]});
    s.apply(&s.config(&a, budgeted)).await.unwrap();

    let quotas: Api<ResourceQuota> = Api::namespaced(s.client.clone(), &namespace);
    let name = format!("neuron-dra-{a}");
    let key = |class: &str| format!("{class}.deviceclass.resource.k8s.io/devices");
    let mut expected = vec![
        (key(&class_a), "4".to_string()),
        (key(&class_b), "0".to_string()),
        (key(&format!("ultraserver-nodes.{class_a}")), "0".to_string()),
        (key(&format!("ultraserver-nodes.{class_b}")), "0".to_string()),
    ];
    expected.sort(); // as the quota's map lists them
    eventually(TIMEOUT, "the budget capping the other config's classes at 0", || async {
        let quota = quotas.get_opt(&name).await.unwrap()?;
        (hard(&quota) == expected).then_some(())
    })
    .await;
    assert!(quotas.get_opt(&format!("neuron-dra-{b}")).await.unwrap().is_none(), "the other config budgets nobody");

    // The tenant: `edit` in its namespace, its own token.
    let account = ServiceAccount {
        metadata: ObjectMeta { name: Some("tenant".into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(s.client.clone(), &namespace)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]}))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(s.client.clone(), &namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let token = support::cluster::token(&namespace, "tenant", &[]);
    let kubeconfig = std::env::temp_dir().join(format!("{}-tenant.kubeconfig", s.id));
    let tenant = support::cluster::client_from(&support::cluster::token_kubeconfig(&kubeconfig, &token)).await;
    let claims: Api<ResourceClaim> = Api::namespaced(tenant, &namespace);
    let claim = |name: &str, class: &str, count: i64| -> ResourceClaim {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"devices": {"requests": [
            {"name": "d", "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count}}]}}}))
        .unwrap()
    };
    let refused = claims.create(&PostParams::default(), &claim("other", &class_b, 1)).await.unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains(&format!("exceeded quota: {name}")) && message.contains(&key(&class_b)),
        "a claim of the other config's class: {message}"
    );
    claims.create(&PostParams::default(), &claim("budget", &class_a, 4)).await.expect("within the budget");
    let refused = claims.create(&PostParams::default(), &claim("past", &class_a, 1)).await.unwrap_err();
    assert!(refused.to_string().contains(&format!("exceeded quota: {name}")), "{refused}");
    f.clear().await;
}
