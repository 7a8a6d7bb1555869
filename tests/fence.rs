//! The kubelet plugin's fence on the real API server: with the token its pod is given, the plugin may write the
//! ResourceSlices of its own node (driver `neuron.aws.com`, pool named after the node) and its own Node, and no
//! other node's.

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use neuron_dra_operator::devtools::simulate::fleet::slice_name;
use neuron_dra_operator::logic::build::{NEURON_DRIVER, plugin_name};
use serde_json::json;
use support::cluster::{client_from, eventually, token, token_kubeconfig};
use support::fleet::Fleet;
use support::scenario::TIMEOUT;

/// A client that authenticates with `token`.
async fn client_with(token: &str, name: &str) -> Client {
    client_from(&token_kubeconfig(&std::env::temp_dir().join(format!("{name}.kubeconfig")), token)).await
}

/// A one-device slice of `node` named `name`, in the pool named after the node, as AWS's driver publishes it.
fn slice(node: &str, name: &str) -> ResourceSlice {
    slice_of(node, name, NEURON_DRIVER, node)
}

/// A one-device slice of `node` with any driver and pool name.
fn slice_of(node: &str, name: &str, driver: &str, pool: &str) -> ResourceSlice {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "neuron-device-0"}]},
    }))
    .unwrap()
}

/// Installs a config on a fleet of two nodes and returns a client with the token the kubelet would mount into the
/// plugin pod the scheduler bound to the first node, that node's name and the other's.
async fn plugin_on_first_node(f: &Fleet) -> (Client, String, String) {
    f.apply_profiles(json!([{"name": "train", "training": {"devices": 4}}]), None).await;
    let (own, other) = (f.node("trn2.48xlarge", 0), f.node("trn2.48xlarge", 1));
    let namespace = f.scenario.driver_namespace();
    let pods: Api<Pod> = Api::namespaced(f.scenario.client.clone(), &namespace);
    let pod = eventually(TIMEOUT, "the plugin pod on the first node", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(own.as_str()))
    })
    .await;
    let bound = ["--bound-object-kind", "Pod", "--bound-object-name", &pod.name_any()];
    let bound_token = token(&namespace, &plugin_name(&f.scenario.id), &bound);
    (client_with(&bound_token, &f.scenario.id).await, own, other)
}

/// The API server's refusal, in one line, or panics if the request went through.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => format!("{} {}", status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_token_writes_its_own_nodes_slices_and_no_other() {
    let f = Fleet::start("fence", &[("trn2.48xlarge", 2)]).await;
    let (client, own, other) = plugin_on_first_node(&f).await;
    let (namespace, service_account) = (f.scenario.driver_namespace(), plugin_name(&f.scenario.id));
    let plugin: Api<ResourceSlice> = Api::all(client);
    let admin: Api<ResourceSlice> = Api::all(f.scenario.client.clone());

    // The policy takes effect once the API server has loaded it: until then a write for another node would pass.
    let foreign = slice(&other, &format!("{}-foreign", f.scenario.id));
    let message = eventually(TIMEOUT, "the fence refuses another node's slice", || async {
        match plugin.create(&PostParams::default(), &foreign).await {
            Ok(_) => {
                admin.delete(&foreign.name_any(), &DeleteParams::default()).await.ok();
                None
            }
            result => Some(refusal(result)),
        }
    })
    .await;
    assert!(message.starts_with("403") && message.contains(&format!("on node {own} may only write")), "{message}");

    // Its own node: create, update and delete go through.
    let mine = slice(&own, &format!("{}-own", f.scenario.id));
    plugin.create(&PostParams::default(), &mine).await.expect("the plugin publishes its own node's slice");
    let label = json!({"metadata": {"labels": {"fence": "updated"}}});
    plugin.patch(&mine.name_any(), &PatchParams::default(), &Patch::Merge(&label)).await.expect("and updates it");

    // The other node's published slice can be neither updated nor deleted.
    let theirs = slice_name(&other);
    let refused = refusal(plugin.patch(&theirs, &PatchParams::default(), &Patch::Merge(&label)).await);
    assert!(refused.starts_with("403"), "{refused}");
    let refused = refusal(plugin.delete(&theirs, &DeleteParams::default()).await);
    assert!(refused.starts_with("403"), "{refused}");
    assert!(admin.get_opt(&theirs).await.unwrap().is_some(), "the other node's slice is still there");

    plugin.delete(&mine.name_any(), &DeleteParams::default()).await.expect("the plugin deletes its own slice");

    // A token of the same ServiceAccount that no pod on a node holds names no node: refused outright.
    let unbound = token(&namespace, &service_account, &[]);
    let plugin: Api<ResourceSlice> = Api::all(client_with(&unbound, &format!("{}-unbound", f.scenario.id)).await);
    let refused = refusal(plugin.create(&PostParams::default(), &mine).await);
    assert!(refused.starts_with("403") && refused.contains("names no node"), "{refused}");
    f.clear().await;
}

/// The fence waits for the API server to load the policy: until then a foreign write would pass. Polls a harmless
/// refused write (a label on the other node, undone by the admin if it went through) until it is refused.
async fn wait_fenced(nodes: &Api<Node>, admin: &Api<Node>, other: &str) -> String {
    let label = json!({"metadata": {"labels": {"fence.example.com/probe": "x"}}});
    let undo = json!({"metadata": {"labels": {"fence.example.com/probe": null}}});
    eventually(TIMEOUT, "the fence refuses a label on another node", || async {
        match nodes.patch(other, &PatchParams::default(), &Patch::Merge(&label)).await {
            Ok(_) => {
                admin.patch(other, &PatchParams::default(), &Patch::Merge(&undo)).await.ok();
                None
            }
            result => Some(refusal(result)),
        }
    })
    .await
}

/// #26.1: the plugin's RBAC lets it patch every Node and `nodes/status`; the fence keeps it to its own Node, and
/// keeps its slices to driver `neuron.aws.com` and the pool named after its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_token_writes_its_own_node_and_publishes_only_its_own_pool() {
    let f = Fleet::start("fencenode", &[("trn2.48xlarge", 2)]).await;
    let (client, own, other) = plugin_on_first_node(&f).await;
    let (nodes, admin): (Api<Node>, Api<Node>) = (Api::all(client.clone()), Api::all(f.scenario.client.clone()));

    let message = wait_fenced(&nodes, &admin, &other).await;
    assert!(
        message.starts_with("403") && message.contains(&format!("on node {own} may only write its own Node")),
        "{message}"
    );

    // Another node: no taint, no condition (what our remediation and EKS auto repair act on).
    let taint = json!({"spec": {"taints": [{"key": "fence.example.com/evil", "effect": "NoExecute"}]}});
    let refused = refusal(nodes.patch(&other, &PatchParams::default(), &Patch::Merge(&taint)).await);
    assert!(refused.starts_with("403"), "{refused}");
    let condition = |status: &str| {
        json!({"status": {"conditions": [{"type": "AcceleratedHardwareReady", "status": status,
            "reason": "Fence", "message": "fence test", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    let refused =
        refusal(nodes.patch_status(&other, &PatchParams::default(), &Patch::Strategic(&condition("False"))).await);
    assert!(refused.starts_with("403") && refused.contains("may only write its own Node"), "{refused}");
    let theirs = admin.get(&other).await.unwrap();
    assert!(theirs.spec.unwrap().taints.unwrap_or_default().iter().all(|t| t.key != "fence.example.com/evil"));
    let conditions = theirs.status.unwrap().conditions.unwrap_or_default();
    assert!(conditions.iter().all(|c| c.type_ != "AcceleratedHardwareReady"), "{conditions:?}");

    // Its own node: a label and a condition go through (AWS's driver writes its node).
    let label = json!({"metadata": {"labels": {"fence.example.com/own": "yes"}}});
    nodes.patch(&own, &PatchParams::default(), &Patch::Merge(&label)).await.expect("the plugin labels its own node");
    nodes
        .patch_status(&own, &PatchParams::default(), &Patch::Strategic(&condition("True")))
        .await
        .expect("and sets a condition on it");

    // Slices of its own node, but of another driver or in a pool named after another node: refused.
    let slices: Api<ResourceSlice> = Api::all(client);
    let name = format!("{}-slice", f.scenario.id);
    let refused = refusal(slices.create(&PostParams::default(), &slice_of(&own, &name, "gpu.example.com", &own)).await);
    assert!(
        refused.starts_with("403")
            && refused.contains(&format!("only publish ResourceSlices of driver {NEURON_DRIVER}")),
        "{refused}"
    );
    let refused = refusal(slices.create(&PostParams::default(), &slice_of(&own, &name, NEURON_DRIVER, &other)).await);
    assert!(refused.starts_with("403") && refused.contains("only publish the pool named after its node"), "{refused}");
    slices.create(&PostParams::default(), &slice(&own, &name)).await.expect("its own pool goes through");
    slices.delete(&name, &DeleteParams::default()).await.expect("and is deleted");
    let undo = json!({"metadata": {"labels": {"fence.example.com/own": null}}});
    admin.patch(&own, &PatchParams::default(), &Patch::Merge(&undo)).await.unwrap();
    f.clear().await;
}
