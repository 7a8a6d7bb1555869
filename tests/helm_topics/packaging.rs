//! The chart as a package: `helm test`, its copies of crds/ and config/, its version.

use crate::*;

/// `helm test`'s objects: hooks only (a plain install creates none of them), a pod meeting the `restricted` Pod
/// Security Standard that runs the operator image's `smoke-test` against the release's metrics Service.
#[test]
fn helm_test_is_a_restricted_smoke_test_pod_of_the_operator_image() {
    let out = helm(&["template", "x", CHART, "--show-only", "templates/tests/smoke-test.yaml"]).ok("helm template");
    let objects = documents(&out);
    let kinds: Vec<&str> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding", "Pod"]);
    for object in &objects {
        assert_eq!(object["metadata"]["annotations"]["helm.sh/hook"], "test", "{object}");
    }
    let binding = &objects[1];
    assert_eq!(binding["roleRef"]["name"], "x-neuron-dra-operator-metrics-reader");
    let pod = &objects[4]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/neurondra/neuron-dra-operator:0.1.0");
    assert_eq!(container["args"], json!(["smoke-test", "--service=x-neuron-dra-operator-metrics"]));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
}

#[test]
fn the_chart_copies_of_crds_and_config_are_up_to_date() {
    for (source, copy) in COPIES {
        let original = std::fs::read(repo(source)).unwrap();
        let copied = std::fs::read(repo(&format!("{CHART}/{copy}"))).unwrap_or_default();
        assert!(original == copied, "{CHART}/{copy} differs from {source}: run `make chart`");
    }
    let recipe = std::process::Command::new("make")
        .args(["--no-print-directory", "-n", "chart"])
        .current_dir(repo(""))
        .output()
        .unwrap();
    let recipe = String::from_utf8_lossy(&recipe.stdout).into_owned();
    for (source, copy) in COPIES {
        assert!(
            recipe.contains(&format!("cp {source} {CHART}/{copy}")),
            "`make chart` does not copy {source}:\n{recipe}"
        );
    }
    assert!(!repo(&format!("{CHART}/crds")).exists(), "the CRD is a template (templates/crd.yaml), not in crds/");
    for entry in std::fs::read_dir(repo(&format!("{CHART}/files"))).unwrap() {
        let name = format!("files/{}", entry.unwrap().file_name().to_string_lossy());
        assert!(COPIES.iter().any(|(_, copy)| *copy == name), "{CHART}/{name} is no copy `make chart` makes");
    }
    // The README is the values' comments as a table.
    let read = |file: &str| std::fs::read_to_string(repo(&format!("{CHART}/{file}"))).unwrap();
    let readme = neuron_dra_operator::devtools::chart_readme::generate(&read("Chart.yaml"), &read("values.yaml"));
    assert!(readme.unwrap() == read("README.md"), "{CHART}/README.md is stale: run `make chart`");
    assert!(
        recipe.contains("chart-readme --chart charts/neuron-dra-operator"),
        "`make chart` writes no README:\n{recipe}"
    );
}

#[test]
fn the_chart_is_versioned_with_the_operator() {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo(&format!("{CHART}/Chart.yaml"))).unwrap()).unwrap();
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

// --- on the real control plane ---
