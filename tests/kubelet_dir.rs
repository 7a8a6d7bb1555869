//! `driver.kubeletDir` against the real API server and operator: the CRD refuses a path that is not one absolute
//! spelling, the operator refuses a directory the install's fences do not allow (naming the field) and renders an
//! allowed one into the plugin DaemonSet's host paths and registrar environment.

mod support {
    pub mod cluster;
    pub mod scenario;
    pub mod tools;
}

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::Api;
use serde_json::json;
use support::cluster::eventually;
use support::scenario::{Scenario, TIMEOUT};

/// The local nodes' directory, in the tests' allow-list (tests/support/cluster.rs `ALLOW_LIST`).
const LOCAL_NODES_DIR: &str = "/var/lib/ndra-kubelet";

fn spec(kubelet_dir: &str) -> serde_json::Value {
    json!({"driver": {"kubeletDir": kubelet_dir}, "profiles": [{"name": "train", "training": {}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_dir_is_one_absolute_path_the_install_allows_and_the_daemon_set_mounts() {
    let s = Scenario::with_operator("kubeletdir").await;
    for bad in ["var/lib/kubelet", "/var/lib/kubelet/", "/var//lib/kubelet", "/var/lib/../etc"] {
        let error = s.apply(&s.config(&format!("{}-bad", s.id), spec(bad))).await.expect_err(bad).to_string();
        assert!(error.contains("spec.driver.kubeletDir: Invalid value"), "{bad}: {error}");
        assert!(error.contains("must be an absolute directory path without a trailing slash"), "{bad}: {error}");
    }

    let outside = format!("{}-outside", s.id);
    s.apply(&s.config(&outside, spec("/var/lib/elsewhere"))).await.unwrap();
    let refused = s.wait_condition(&outside, "ConfigValid", "False").await;
    let condition = refused.status.unwrap().conditions.into_iter().find(|c| c.type_ == "ConfigValid").unwrap();
    assert!(
        condition.message.contains(
            "spec.driver.kubeletDir: /var/lib/elsewhere is not a kubelet directory this install allows \
             (/var/lib/kubelet, /var/lib/ndra-kubelet; the fences' kubeletDirs)"
        ),
        "{}",
        condition.message
    );
    s.delete_config(&outside).await;

    let allowed = format!("{}-local", s.id);
    s.apply(&s.config(&allowed, spec(LOCAL_NODES_DIR))).await.unwrap();
    let daemon_sets: Api<DaemonSet> = Api::namespaced(s.client.clone(), &s.driver_namespace());
    let name = format!("neuron-dra-{allowed}");
    let ds =
        eventually(TIMEOUT, "the plugin DaemonSet", || async { daemon_sets.get_opt(&name).await.ok().flatten() }).await;
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let paths: Vec<String> = pod.volumes.unwrap().into_iter().filter_map(|v| v.host_path.map(|h| h.path)).collect();
    assert_eq!(
        paths,
        [format!("{LOCAL_NODES_DIR}/plugins"), format!("{LOCAL_NODES_DIR}/plugins_registry"), "/var/run/cdi".into()]
    );
    let container = &pod.containers[0];
    let mounts: Vec<&str> = container.volume_mounts.iter().flatten().map(|m| m.mount_path.as_str()).collect();
    assert_eq!(mounts, paths.iter().map(String::as_str).collect::<Vec<_>>(), "mounted where the kubelet sees them");
    let env = |name: &str| container.env.iter().flatten().find(|e| e.name == name).and_then(|e| e.value.clone());
    assert_eq!(env("KUBELET_REGISTRAR_DIRECTORY_PATH").unwrap(), format!("{LOCAL_NODES_DIR}/plugins_registry"));
    assert_eq!(env("KUBELET_PLUGINS_DIRECTORY_PATH").unwrap(), format!("{LOCAL_NODES_DIR}/plugins"));
    s.wait_condition(&allowed, "ConfigValid", "True").await;
}
