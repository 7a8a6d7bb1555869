//! `render` and `crd` as a user runs them: the built binary, real files, exit codes and messages.

mod support {
    pub mod fixtures;
}

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::fixtures::invalid_cases;

const BIN: &str = env!("CARGO_BIN_EXE_neuron-dra-operator");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("binary runs")
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn samples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn write_temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ndo-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn checked_in_crd_equals_the_generated_one() {
    let out = run(&["crd"]);
    assert!(out.status.success());
    let checked_in = std::fs::read_to_string(repo("crds/neurondra.io_neurondraconfigs.yaml")).unwrap();
    assert!(
        String::from_utf8(out.stdout).unwrap() == checked_in,
        "crds/ is stale: run `cargo run -- crd > crds/neurondra.io_neurondraconfigs.yaml`"
    );
}

#[test]
fn every_sample_renders_deterministically() {
    let files = samples();
    assert!(files.len() >= 4, "a sample per profile kind plus a mixed one");
    for file in files {
        let file = file.to_str().unwrap();
        let first = run(&["render", "-f", file]);
        assert!(first.status.success(), "{file}: {}", String::from_utf8_lossy(&first.stderr));
        let second = run(&["render", "-f", file]);
        assert_eq!(first.stdout, second.stdout, "{file}: same input, same bytes");
        let text = String::from_utf8(first.stdout).unwrap();
        for kind in
            ["Namespace", "ServiceAccount", "ClusterRoleBinding", "DeviceClass", "DaemonSet", "ResourceClaimTemplate"]
        {
            assert!(text.contains(&format!("\nkind: {kind}\n")), "{file} lacks a {kind}");
        }
        // The plugin's ClusterRole and fences are installed with the operator, never rendered per config.
        for kind in ["ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] {
            assert!(!text.contains(&format!("\nkind: {kind}\n")), "{file} renders a {kind}");
        }
        // Every document is a parseable object with apiVersion and kind.
        for doc in text.split("---\n").filter(|d| !d.trim().is_empty()) {
            let value: serde_yaml::Value = serde_yaml::from_str(doc).unwrap();
            assert!(value.get("apiVersion").is_some() && value.get("kind").is_some());
        }
    }
}

#[test]
fn namespace_flags_replace_the_configs_namespaces() {
    let out =
        run(&["render", "-f", repo("samples/training.yaml").to_str().unwrap(), "--namespace", "x", "--namespace", "y"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("namespace: x\n").count(), 2);
    assert_eq!(text.matches("namespace: y\n").count(), 2);
    assert!(!text.contains("namespace: ml-training"));
}

#[test]
fn budgets_render_as_resource_quotas_for_the_namespaces_they_name() {
    let file = write_temp(
        "quotas.yaml",
        "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: x}\nspec:\n  quotas:\n  - {namespaces: [team-b, team-a], devices: 16}\n  - {namespaces: [team-a], devices: 4}\n  - {namespaceSelector: {matchLabels: {team: c}}, devices: 2}\n",
    );
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let quotas: Vec<serde_yaml::Value> = text
        .split("---\n")
        .filter(|d| d.contains("kind: ResourceQuota"))
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect();
    // One per named namespace, the first budget winning; a selector needs the cluster.
    let got: Vec<(&str, &str)> = quotas
        .iter()
        .map(|q| {
            let hard = &q["spec"]["hard"]["neuron.aws.com.deviceclass.resource.k8s.io/devices"];
            (q["metadata"]["namespace"].as_str().unwrap(), hard.as_str().unwrap())
        })
        .collect();
    assert_eq!(got, [("team-a", "16"), ("team-b", "16")]);
    assert!(quotas.iter().all(|q| q["metadata"]["name"] == "neuron-dra-x"));
}

#[test]
fn fallbacks_render_as_first_available_subrequests() {
    let file = write_temp(
        "fallbacks.yaml",
        "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: x}\nspec:\n  templates: {namespaces: [team-a]}\n  profiles:\n  - name: pretrain\n    training:\n      instanceType: trn2.48xlarge\n      devices: 16\n      allowLncChange: true\n      fallbacks: [{instanceType: trn1.32xlarge, devices: 16}]\n",
    );
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let template = text.split("---\n").find(|d| d.contains("kind: ResourceClaimTemplate")).unwrap();
    let template: serde_yaml::Value = serde_yaml::from_str(template).unwrap();
    let devices = &template["spec"]["spec"]["devices"];
    let subrequests = devices["requests"][0]["firstAvailable"].as_sequence().expect("firstAvailable");
    let names: Vec<&str> = subrequests.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["preferred", "fallback-1"]);
    // The rendered class selects device entries, so the type pin is the subrequest's only selector.
    assert!(subrequests[1]["selectors"][0]["cel"]["expression"].as_str().unwrap().contains("'trn1.32xlarge'"));
    let constrained: Vec<&str> =
        devices["constraints"].as_sequence().unwrap().iter().map(|c| c["requests"][0].as_str().unwrap()).collect();
    assert_eq!(constrained, ["neurons/preferred", "neurons/fallback-1"]);
}

#[test]
fn a_file_that_is_not_yaml_fails_with_one_line() {
    let file = write_temp("not-yaml.yaml", "::: [unclosed\n");
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("not valid YAML"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_missing_file_fails() {
    let out = run(&["render", "-f", "/nonexistent/config.yaml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr).unwrap().contains("/nonexistent/config.yaml"));
}

#[test]
fn wrong_kind_is_named() {
    let file = write_temp("wrong-kind.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.lines().any(|l| l.starts_with("apiVersion: ")), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("kind: ")), "{stderr}");
}

#[test]
fn every_invalid_config_is_rejected_naming_its_field() {
    let cases = invalid_cases();
    assert!(cases.len() >= 15);
    for (index, case) in cases.iter().enumerate() {
        assert!(matches!(case.server.as_str(), "rejects" | "accepts"), "{}: server is rejects or accepts", case.case);
        let yaml = serde_yaml::to_string(&case.document("invalid")).unwrap();
        let file = write_temp(&format!("invalid-{index}.yaml"), &yaml);
        let out = run(&["render", "-f", file.to_str().unwrap()]);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{}: render accepted it", case.case);
        assert!(out.stdout.is_empty(), "{}: nothing half-rendered", case.case);
        assert!(
            stderr.lines().any(|line| line.starts_with(case.field.as_str())),
            "{}: no line names {}:\n{stderr}",
            case.case,
            case.field
        );
    }
}

#[test]
fn several_problems_give_one_line_each() {
    let file = write_temp(
        "several.yaml",
        "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: x}\nspec:\n  profiles:\n  - {name: a, training: {instanceType: trn1.32xlarge, devices: 5, logicalNeuronCore: 2}}\n  - {name: b, training: {instanceType: trn1.2xlarge, devices: 4}}\n",
    );
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "spec.profiles[0].training.devices: 5 is not one of All, 1, 4, 8 or 16",
            "spec.profiles[0].training.logicalNeuronCore: trn1.32xlarge does not support Logical NeuronCore configuration (only Trn2 and Trn3 do)",
            "spec.profiles[1].training.devices: 4 is more than the 1 devices of trn1.2xlarge",
        ]
    );
}

#[test]
fn the_operator_binary_carries_no_dev_tools_and_the_devtools_binary_does() {
    let help = String::from_utf8(run(&["--help"]).stdout).unwrap();
    for command in ["run", "crd", "render"] {
        assert!(help.contains(command), "{command} in {help}");
    }
    for tool in ["simulate", "bundle"] {
        assert!(!help.contains(tool), "{tool} in the operator's help: {help}");
        assert!(!run(&[tool]).status.success(), "the operator binary accepted {tool}");
    }
    let devtools = Command::new(env!("CARGO_BIN_EXE_neuron-dra-devtools")).arg("--help").output().unwrap();
    let help = String::from_utf8(devtools.stdout).unwrap();
    assert!(help.contains("simulate") && help.contains("bundle"), "{help}");
}
