//! docs/install-eks.md: it shows exactly the commands the tests run (or that need AWS), and here run its uninstall
//! order (the configs first: every object they owned goes, nothing hangs) and its recovery of a config whose
//! operator is gone (its upgrade is docs/install.md's, run by tests/helm_upgrade.rs). The Helm install and `helm test` are run on the real
//! node (tests/real_node_install.rs), the samples and the example pod by tests/samples.rs, `helm uninstall` by
//! tests/helm.rs.

mod support {
    pub mod cluster;
    pub mod docs;
    pub mod scenario;
    pub mod tools;
}

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use neuron_dra_operator::controller::kinds::{self, KindInfo, Release};
use serde_json::json;
use support::cluster::{self, TEST_LABEL, kubectl, repo};
use support::docs;
use support::scenario::Scenario;

/// The kinds a config owns by its label: the operator's table (`controller::kinds`) less the shared kinds, which
/// carry the shared label instead (a config's DeviceClass is checked by name).
fn labelled_kinds() -> Vec<KindInfo> {
    kinds::owned().into_iter().filter(|k| k.release == Release::Delete).collect()
}

/// Runs a documented command line with bash in the checkout, against the local control plane, with the Helm this
/// project builds first on the PATH.
fn bash(command: &str) -> Output {
    let helm = support::tools::tool("helm");
    let path = format!("{}:{}", helm.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .args(["-o", "pipefail", "-c", command])
        .current_dir(repo(""))
        .env("KUBECONFIG", cluster::kubeconfig())
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn bash_ok(command: &str) -> String {
    let out = bash(command);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{command}:\n{text}");
    text
}

/// Every object of the owned kinds that carries the config's label.
fn owned_by(config: &str) -> BTreeSet<String> {
    let selector = format!("neurondra.io/config={config}");
    let mut found = BTreeSet::new();
    for kind in labelled_kinds() {
        let mut args = vec!["get", &kind.plural, "-l", &selector, "-o", "name"];
        if kind.namespaced {
            args.push("-A");
        }
        found.extend(kubectl(&args).lines().map(String::from));
    }
    found
}

/// A config of this test with a DeviceClass of its own (the shared `neuron.aws.com` is other tests' too).
async fn ready_config(s: &Scenario, name: &str) {
    let namespace = s.namespace(name.trim_start_matches(&format!("{}-", s.id)), &[]).await;
    let spec = json!({
        "deviceClassName": format!("{name}.neuron.aws.com"),
        "templates": {"namespaces": [namespace]},
        "profiles": [{"name": "one", "training": {"devices": 1}}],
        "quotas": [{"namespaces": [namespace], "devices": 1}],
    });
    s.apply(&s.config(name, spec)).await.unwrap();
    s.wait_ready(name).await;
    let owned = owned_by(name);
    for kind in labelled_kinds() {
        // `kubectl get -o name` writes `kind[.group]/name`, the kind in lower case.
        let of_kind = |found: &&String| found.split(['.', '/']).next() == Some(&kind.kind.to_lowercase());
        assert!(owned.iter().any(|found| of_kind(&found)), "the config owns no {}: {owned:?}", kind.kind);
    }
}

/// The guide's release, image archive and chart package are the crate's version (`make version` writes them).
#[test]
fn the_eks_guide_names_the_release_of_this_version() {
    let version = env!("CARGO_PKG_VERSION");
    assert!(docs::EKS_MAKE_RELEASE.ends_with(&format!("VERSION={version}")), "{}", docs::EKS_MAKE_RELEASE);
    assert!(docs::EKS_PACKAGE.ends_with(&format!("-{version}.tgz")), "{}", docs::EKS_PACKAGE);
    assert!(docs::EKS_COPY_IMAGE.contains(&format!("-{version}.oci.tar ")), "{}", docs::EKS_COPY_IMAGE);
    assert!(docs::EKS_COPY_IMAGE.ends_with(&format!(":{version}")), "{}", docs::EKS_COPY_IMAGE);
}

/// The guide's recovery deletes every kind a config owns by its label, each with the command of its scope.
#[test]
fn the_recovery_commands_delete_every_kind_a_config_owns() {
    let resources =
        |command: &str| -> Vec<String> { command.split(' ').nth(2).unwrap().split(',').map(String::from).collect() };
    let (namespaced, cluster) = (resources(docs::EKS_RECOVER_NAMESPACED), resources(docs::EKS_RECOVER_CLUSTER));
    for kind in labelled_kinds() {
        let (command, listed) = if kind.namespaced { ("namespaced", &namespaced) } else { ("cluster", &cluster) };
        assert!(
            listed.contains(&kind.plural),
            "the {command} recovery command of docs/install-eks.md misses {}",
            kind.plural
        );
    }
}

#[test]
fn the_eks_guide_shows_exactly_the_commands_the_tests_run() {
    let guide = std::fs::read_to_string(repo("docs/install-eks.md")).unwrap();
    let shown = docs::shell_lines(&guide);
    let known = docs::EKS_AWS_ONLY.iter().chain(docs::EKS_SUBSTITUTED).chain(docs::EKS_SHARED).chain(docs::EKS_RELEASE);
    let known: Vec<&str> = known.copied().collect();
    for command in &shown {
        assert!(known.contains(&command.as_str()), "docs/install-eks.md shows `{command}`, which no test runs");
    }
    for command in known {
        assert!(shown.iter().any(|c| c == command), "docs/install-eks.md no longer shows `{command}`");
    }
}

/// The configs go first, while the operator runs: the delete returns (it waited for the finalizer), and nothing the
/// config owned is left, its DeviceClass included. That leaves no config whose finalizer could hold up the CRD's
/// deletion, the guide's last step (not run here: every test shares the CRD).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_uninstall_order_leaves_nothing_and_hangs_on_nothing() {
    let s = Scenario::with_operator("uninstall").await;
    let names = [format!("{}-a", s.id), format!("{}-b", s.id)];
    for name in &names {
        ready_config(&s, name).await;
    }
    let delete = docs::EKS_DELETE_CONFIGS.replace("--all", &format!("-l {TEST_LABEL}={}", s.id));
    bash_ok(&delete);
    for name in &names {
        assert!(s.configs().get_opt(name).await.unwrap().is_none(), "{name} is still there");
        assert_eq!(owned_by(name), BTreeSet::new(), "{name} left objects behind");
        let class = kubectl(&["get", "deviceclasses", "-o", "name"]);
        assert!(!class.contains(&format!("{name}.neuron.aws.com")), "{name}'s DeviceClass stayed: {class}");
    }
    assert_eq!(kubectl(&["get", "ndc", "-l", &format!("{TEST_LABEL}={}", s.id), "-o", "name"]), "");
}

/// The operator is gone, so a deleted config hangs on its finalizer; the guide's three commands let it go and
/// remove what it owned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_whose_operator_is_gone_is_recovered_by_the_documented_commands() {
    let mut s = Scenario::with_operator("recover").await;
    let name = format!("{}-hung", s.id);
    ready_config(&s, &name).await;
    let mut operator = s.operator.take().unwrap();
    operator.kill();
    kubectl(&["delete", "ndc", &name, "--wait=false"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hung = s.configs().get(&name).await.expect("the config hangs on its finalizer");
    assert!(hung.metadata.deletion_timestamp.is_some() && !hung.metadata.finalizers.unwrap_or_default().is_empty());

    for command in [docs::EKS_RECOVER_FINALIZER, docs::EKS_RECOVER_NAMESPACED, docs::EKS_RECOVER_CLUSTER] {
        bash_ok(&command.replace("CONFIG", &name));
    }
    cluster::eventually(Duration::from_secs(30), "the config gone", || async {
        s.configs().get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    cluster::eventually(Duration::from_secs(30), "its objects gone", || async {
        owned_by(&name).is_empty().then_some(())
    })
    .await;
    let _ = kubectl(&["delete", "deviceclass", &format!("{name}.neuron.aws.com"), "--ignore-not-found"]);
}
