//! Who owns what, on the real control plane: objects another tool made under a name a config wants are reported
//! and left alone (never applied over, never deleted), and a conflict never tears down a plugin that runs.

mod support {
    pub mod cluster;
    pub mod scenario;
}

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::cluster::eventually;
use support::scenario::{Scenario, TIMEOUT};

fn condition(config: &neuron_dra_operator::api::NeuronDRAConfig, type_: &str) -> (String, String, String) {
    let c = config.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == type_).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn train_only(namespace: &str) -> serde_json::Value {
    json!({"templates": {"namespaces": [namespace]},
        "profiles": [{"name": "train", "training": {"instanceType": "trn2.48xlarge", "devices": 4}}]})
}

/// The field managers that wrote an object.
fn managers<K: kube::Resource>(object: &K) -> Vec<String> {
    object.meta().managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect()
}

async fn wait_config_gone(s: &Scenario, name: &str) {
    eventually(TIMEOUT, "config gone", || async { s.configs().get_opt(name).await.ok()?.is_none().then_some(()) })
        .await;
}

/// Hardening #26 item 3: a DeviceClass of the config's name that another tool made (AWS's chart, say) is named in
/// `ConfigValid`, never applied over, and kept when the config goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_class_another_tool_made_is_reported_and_never_taken_over_or_deleted() {
    let s = Scenario::with_operator("foreign-class").await;
    let ns = s.namespace("a", &[]).await;
    let class = format!("{}.example.com", s.id);
    let theirs = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'neuron.aws.com'"}}]}});
    let classes: Api<DeviceClass> = Api::all(s.client.clone());
    classes.patch(&class, &PatchParams::apply("helm"), &Patch::Apply(&theirs)).await.unwrap();
    let mut spec = train_only(&ns);
    spec["deviceClassName"] = json!(class);
    s.apply(&s.config(&s.id, spec)).await.unwrap();
    let config = s.wait_condition(&s.id, "ConfigValid", "False").await;
    let (_, reason, message) = condition(&config, "ConfigValid");
    assert_eq!(reason, "ForeignObject", "{message}");
    assert!(message.contains(&format!("DeviceClass {class}")) && message.contains("helm"), "{message}");
    // The rest is applied.
    s.wait_condition(&s.id, "TemplatesReady", "True").await;
    let untouched = |c: &DeviceClass| {
        c.labels().get("app.kubernetes.io/managed-by").map(String::as_str) == Some("Helm")
            && c.owner_references().is_empty()
            && managers(c) == ["helm"]
    };
    let kept = classes.get(&class).await.unwrap();
    assert!(untouched(&kept), "{:?}", kept.metadata);
    s.delete_config(&s.id).await;
    wait_config_gone(&s, &s.id).await;
    let kept = classes.get_opt(&class).await.unwrap().expect("their DeviceClass outlives the config");
    assert!(untouched(&kept), "{:?}", kept.metadata);
    classes.delete(&class, &Default::default()).await.unwrap();
}

/// Hardening #26 item 3: a template of a profile's name that another tool made (AWS's UltraServer operator, say)
/// is named in `TemplatesReady`, left as it is, and kept when the config goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_another_tool_made_is_reported_and_never_taken_over_or_deleted() {
    let s = Scenario::with_operator("foreign-template").await;
    let ns = s.namespace("a", &[]).await;
    let theirs = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "ultraserver",
            "exactly": {"deviceClassName": "ultraserver.example.com"}}]}}}});
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(s.client.clone(), &ns);
    templates.patch("train", &PatchParams::apply("ultraserver-operator"), &Patch::Apply(&theirs)).await.unwrap();
    s.apply(&s.config(&s.id, train_only(&ns))).await.unwrap();
    let config = s.wait_condition(&s.id, "TemplatesReady", "False").await;
    let config = match condition(&config, "TemplatesReady").1.as_str() {
        "ForeignObject" => config,
        // A first pass may report it missing before its write found the name taken.
        _ => {
            eventually(TIMEOUT, "TemplatesReady ForeignObject", || async {
                let c = s.configs().get(&s.id).await.ok()?;
                (condition(&c, "TemplatesReady").1 == "ForeignObject").then_some(c)
            })
            .await
        }
    };
    let (_, _, message) = condition(&config, "TemplatesReady");
    assert!(message.contains(&format!("{ns}/train")) && message.contains("ultraserver-operator"), "{message}");
    let untouched = |t: &ResourceClaimTemplate| {
        t.labels().is_empty()
            && managers(t) == ["ultraserver-operator"]
            && t.spec
                .spec
                .devices
                .as_ref()
                .and_then(|d| d.requests.as_ref())
                .is_some_and(|r| r[0].name == "ultraserver")
    };
    assert!(untouched(&templates.get("train").await.unwrap()));
    s.delete_config(&s.id).await;
    wait_config_gone(&s, &s.id).await;
    let kept = templates.get_opt("train").await.unwrap().expect("their template outlives the config");
    assert!(untouched(&kept), "{:?}", kept.metadata);
}
