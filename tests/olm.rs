//! The OLM bundle against operator-framework's own validators (`github.com/operator-framework/api`, the library
//! behind `operator-sdk bundle validate`), default and `suite=operatorframework` (OperatorHub, standard categories
//! and capabilities, good practices, removed APIs), through `tests/tools/bundle-validate` built by `hack/tools.sh`.

mod support {
    pub mod cluster;
    pub mod tools;
}

use neuron_dra_operator::devtools::bundle;
use serde_json::Value;
use support::cluster::repo;
use support::tools::{self, Run, temp_dir};

/// Warnings that are the validators' mistakes, each with the reason it is one.
const KNOWN_FALSE_WARNINGS: &[&str] = &[
    // The removed-API check matches any RBAC rule on `events`; ours is for events.k8s.io/v1 (served since 1.19),
    // not the events.k8s.io/v1beta1 that 1.25 removed.
    "this bundle is using APIs which were deprecated and removed in v1.25",
];

fn validate(dir: &std::path::Path) -> Run {
    let validator = tools::tool("bundle-validate");
    tools::run(&validator, &["-k8s-version", "1.34", dir.to_str().unwrap()], &repo(""), &[])
}

#[test]
fn the_bundle_passes_the_default_and_operatorframework_validators() {
    let out = validate(&repo("bundle"));
    let report = format!("{}{}", out.stdout, out.stderr);
    assert!(out.success, "bundle-validate found errors:\n{report}");
    assert!(report.contains("bundle-validate: "), "{report}");
    let unexpected: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("WARNING") && !KNOWN_FALSE_WARNINGS.iter().any(|w| l.contains(w)))
        .collect();
    assert!(unexpected.is_empty(), "warnings to fix:\n{}", unexpected.join("\n"));
    println!("{report}");
}

/// The validators are real: a bundle with an unknown category, no icon and a channel outside OLM's naming
/// convention is refused or warned about, naming each.
#[test]
fn the_validators_catch_what_operatorhub_would_refuse() {
    let mut files = bundle::generate(&repo("")).unwrap();
    let mut csv: Value = serde_yaml::from_str(&files[bundle::CSV_FILE]).unwrap();
    csv["metadata"]["annotations"]["categories"] = "Quantum Gardening".into();
    csv["spec"].as_object_mut().unwrap().remove("icon");
    files.insert(bundle::CSV_FILE.into(), serde_yaml::to_string(&csv).unwrap());
    let annotations = files[bundle::ANNOTATIONS_FILE].replace("candidate,fast,stable", "alpha");
    files.insert(bundle::ANNOTATIONS_FILE.into(), annotations.replace("default.v1: stable", "default.v1: alpha"));
    let dir = temp_dir("bad-bundle");
    bundle::write(&files, &dir).unwrap();

    let out = validate(&dir);
    assert!(!out.success, "a bad bundle passed:\n{}", out.stdout);
    let errors: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("ERROR")).collect();
    assert!(errors.iter().any(|l| l.contains("Quantum Gardening")), "{}", out.stdout);
    let warnings: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("WARNING")).collect();
    assert!(warnings.iter().any(|l| l.contains("Icon")), "{}", out.stdout);
    assert!(warnings.iter().any(|l| l.contains("channel(s) [\"alpha\"]")), "{}", out.stdout);
}
