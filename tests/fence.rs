//! The kubelet plugin's fence on the real API server: with the token its pod is given, the plugin may write the
//! ResourceSlices of its own node and no other's.

mod support {
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
}

use k8s_openapi::api::core::v1::Pod;
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

/// A one-device slice of `node` named `name`.
fn slice(node: &str, name: &str) -> ResourceSlice {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": NEURON_DRIVER, "nodeName": node,
                 "pool": {"name": format!("{node}-fence"), "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "neuron-device-0"}]},
    }))
    .unwrap()
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
    f.apply_profiles(json!([{"name": "train", "training": {"devices": 4}}]), None).await;
    let (own, other) = (f.node("trn2.48xlarge", 0), f.node("trn2.48xlarge", 1));
    let namespace = f.scenario.driver_namespace();
    let service_account = plugin_name(&f.scenario.id);

    // The token the kubelet would mount into the plugin pod the scheduler bound to `own`.
    let pods: Api<Pod> = Api::namespaced(f.scenario.client.clone(), &namespace);
    let pod = eventually(TIMEOUT, "the plugin pod on the first node", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(own.as_str()))
    })
    .await;
    let bound = ["--bound-object-kind", "Pod", "--bound-object-name", &pod.name_any()];
    let bound_token = token(&namespace, &service_account, &bound);
    let plugin: Api<ResourceSlice> = Api::all(client_with(&bound_token, &f.scenario.id).await);
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
