//! A weakened or missing plugin fence stops the plugin (#38 item 4), on the real API server: the operator reads the
//! installed fences by name before it starts or changes a plugin DaemonSet, and while one is not in place as
//! shipped it keeps the DaemonSet as it runs and says why in DriverReady (`Unfenced`). Its own test binary: the
//! fences are cluster-wide, so no other test's plugin may be running while they are weakened.

mod support {
    pub mod cluster;
    pub mod scenario;
}

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::cluster::{allow_test_drivers, kubectl};
use support::scenario::{Scenario, TIMEOUT};

/// Puts the fences back as the tests install them: the policies with the tests' allow-list, the binding denying.
fn restore_fences() {
    allow_test_drivers();
    let deny = r#"{"spec": {"validationActions": ["Deny"]}}"#;
    kubectl(&["patch", "validatingadmissionpolicybinding", "neuron-dra-plugin-fence", "--type", "merge", "-p", deny]);
}

/// Restores the fences when the test ends, passed or failed.
struct Restore;
impl Drop for Restore {
    fn drop(&mut self) {
        restore_fences();
    }
}

fn image(ds: &DaemonSet) -> Option<String> {
    ds.spec.as_ref()?.template.spec.as_ref()?.containers[0].image.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weakened_or_missing_fence_keeps_the_plugin_as_it_runs_until_restored() {
    let s = Scenario::with_operator("unfenced").await;
    let _restore = Restore;
    let team = s.namespace("team", &[]).await;
    let spec = |tag: &str| {
        json!({"templates": {"namespaces": [team]}, "profiles": [{"name": "train", "training": {"devices": 4}}],
               "driver": {"image": format!("public.ecr.aws/neuron/neuron-dra-driver:{tag}")}})
    };
    s.apply(&s.config(&s.id, spec("1.1.0"))).await.unwrap();
    s.wait_condition(&s.id, "DriverReady", "True").await;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let plugin = format!("neuron-dra-{}", s.id);

    // Set to warn only: it no longer denies. A new image must wait.
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(s.client.clone());
    let warn = json!({"spec": {"validationActions": ["Warn"]}});
    bindings.patch("neuron-dra-plugin-fence", &PatchParams::default(), &Patch::Merge(&warn)).await.unwrap();
    s.apply(&s.config(&s.id, spec("1.2.0"))).await.unwrap();
    let status = s
        .wait_status("DriverReady Unfenced", |status| {
            status.conditions.iter().any(|c| c.type_ == "DriverReady" && c.reason == "Unfenced")
        })
        .await;
    let driver = status.conditions.into_iter().find(|c| c.type_ == "DriverReady").unwrap();
    assert!(
        driver.message.starts_with("the kubelet plugin's fence neuron-dra-plugin-fence is not enforced"),
        "{}",
        driver.message
    );
    let kept = daemon_sets.get(&plugin).await.unwrap();
    assert_eq!(image(&kept).as_deref(), Some("public.ecr.aws/neuron/neuron-dra-driver:1.1.0"), "kept as it runs");

    // Missing altogether: said so by name.
    restore_fences();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(s.client.clone());
    policies.delete("neuron-dra-plugin-pods", &DeleteParams::default()).await.unwrap();
    s.wait_status("the missing fence named", |status| {
        status.conditions.iter().any(|c| {
            c.type_ == "DriverReady"
                && c.message.starts_with("the kubelet plugin's fence neuron-dra-plugin-pods is missing")
        })
    })
    .await;
    assert_eq!(
        image(&daemon_sets.get(&plugin).await.unwrap()).as_deref(),
        Some("public.ecr.aws/neuron/neuron-dra-driver:1.1.0")
    );

    // Restored: the plugin moves to the new image without anyone touching the config.
    restore_fences();
    support::cluster::eventually(TIMEOUT, "the new image once the fences are back", || async {
        let ds = daemon_sets.get(&plugin).await.ok()?;
        (image(&ds).as_deref() == Some("public.ecr.aws/neuron/neuron-dra-driver:1.2.0")).then_some(())
    })
    .await;
}
