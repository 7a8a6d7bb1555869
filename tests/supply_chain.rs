//! The supply chain a security team reviews (docs/release.md, SECURITY.md), checked without building a release: the
//! release workflow pins every action by a full commit, passes no secret on a command line, runs the fast tests and
//! the release check before it publishes, and attests provenance and the SBOM; the toolchain is pinned to one
//! release everywhere; the workflow lint runs shellcheck; SECURITY.md says how to report and what is supported; the
//! notices generator lists the crates the operator is built from. `make release-check` (tests/release.rs) checks
//! the built artefacts: the notices in the image and the dependency list cargo-auditable embeds in each binary.

mod support {
    pub mod cluster;
}

use std::collections::BTreeSet;
use std::process::Command;

use support::cluster::repo;

const WORKFLOW: &str = ".github/workflows/release.yml";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn steps() -> Vec<serde_yaml::Value> {
    let workflow: serde_yaml::Value = serde_yaml::from_str(&read(WORKFLOW)).unwrap();
    workflow["jobs"]["release"]["steps"].as_sequence().expect("the release job's steps").clone()
}

/// The `run:` scripts of the workflow, in order.
fn scripts() -> Vec<String> {
    steps().iter().filter_map(|s| s["run"].as_str().map(str::to_string)).collect()
}

#[test]
fn every_action_is_pinned_by_a_full_commit_with_its_tag_named() {
    let text = read(WORKFLOW);
    let uses: Vec<&str> =
        text.lines().filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("uses: ")).collect();
    assert!(uses.len() >= 4, "checkout, setup-go, cosign-installer, provenance: {uses:?}");
    for line in uses {
        let (action, comment) = line.split_once(" # ").unwrap_or_else(|| panic!("{line}: no `# vX.Y.Z` comment"));
        let (_, commit) = action.split_once('@').unwrap_or_else(|| panic!("{line}: no @"));
        assert!(commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{line}: not a full commit");
        assert!(comment.starts_with('v') && comment.matches('.').count() == 2, "{line}: the tag, vX.Y.Z");
    }
}

#[test]
fn no_secret_is_on_a_command_line() {
    for script in scripts() {
        assert!(!script.contains("secrets."), "a secret expanded into a script: {script}");
        for line in script.lines().filter(|l| l.contains("login")) {
            assert!(line.contains("--password-stdin"), "a login without --password-stdin: {line}");
            assert!(!line.contains("--password ") && !line.contains(" -p "), "a password argument: {line}");
        }
    }
    // The token reaches the scripts only through the environment.
    for step in steps() {
        if let Some(run) = step["run"].as_str().filter(|r| r.contains("TOKEN")) {
            let env = step["env"].as_mapping().unwrap_or_else(|| panic!("no env for {run}"));
            assert!(env.keys().any(|k| k.as_str().is_some_and(|k| k.ends_with("TOKEN"))), "{run}");
        }
    }
}

#[test]
fn the_fast_tests_and_the_release_check_run_before_anything_is_published() {
    let scripts = scripts();
    let position = |needle: &str| {
        scripts.iter().position(|s| s.contains(needle)).unwrap_or_else(|| panic!("no step runs {needle:?}"))
    };
    let publish = position("make publish");
    assert!(position("make lint unit-test") < position("make release VERSION"));
    assert!(position("make release VERSION") < position("--test release -- --ignored"));
    assert!(position("--test release -- --ignored") < publish);
    assert!(position("cosign attest --yes --type cyclonedx") > publish, "the SBOM is attested to the pushed image");
    let provenance: Vec<serde_yaml::Value> = steps()
        .into_iter()
        .filter(|s| s["uses"].as_str().is_some_and(|u| u.starts_with("actions/attest-build-provenance@")))
        .collect();
    assert_eq!(provenance.len(), 2, "provenance of the image and of the release's files");
    assert_eq!(provenance[0]["with"]["push-to-registry"].as_bool(), Some(true));
    assert_eq!(provenance[1]["with"]["subject-checksums"].as_str(), Some("dist/SHA256SUMS"));
    let permissions =
        &serde_yaml::from_str::<serde_yaml::Value>(&read(WORKFLOW)).unwrap()["jobs"]["release"]["permissions"];
    for permission in ["id-token", "attestations"] {
        assert_eq!(permissions[permission].as_str(), Some("write"), "{permission}");
    }
}

/// One toolchain: rust-toolchain.toml names exactly the release this test was compiled by (so a machine with it
/// installed downloads nothing), the Dockerfile's Rust image is of the same release, and the workflow installs what
/// the file names instead of `stable`.
#[test]
fn the_toolchain_is_pinned_to_one_release_everywhere() {
    let file: toml::Table = toml::from_str(&read("rust-toolchain.toml")).unwrap();
    let toolchain = file["toolchain"].as_table().unwrap();
    let channel = toolchain["channel"].as_str().unwrap();
    assert_eq!(channel.split('.').count(), 3, "a release, not a channel: {channel}");
    let components: BTreeSet<&str> =
        toolchain["components"].as_array().unwrap().iter().filter_map(|c| c.as_str()).collect();
    assert!(components.contains("rustfmt") && components.contains("clippy"), "{components:?}");
    // The rustc the file selects in the repository is installed and is that release.
    let rustc = Command::new("rustc").arg("--version").current_dir(repo(".")).output().unwrap();
    let version = String::from_utf8_lossy(&rustc.stdout);
    assert!(version.starts_with(&format!("rustc {channel} ")), "rustc says {version}, the file {channel}");
    // And it is the toolchain cargo ran this test with (rustup names it to the processes it starts).
    if let Ok(running) = std::env::var("RUSTUP_TOOLCHAIN") {
        assert!(running.starts_with(channel), "this test runs on {running}, the file pins {channel}");
    }
    let minor = channel.rsplit_once('.').unwrap().0;
    assert!(read("Dockerfile").contains(&format!("docker.io/library/rust:{minor}-")), "the Dockerfile's Rust image");
    let workflow = read(WORKFLOW);
    assert!(!workflow.contains("stable") && workflow.contains("rustup toolchain install\n"), "{WORKFLOW}");
}

/// The workflow lint runs shellcheck over the `run:` scripts, and CI installs it.
#[test]
fn the_workflow_lint_runs_shellcheck() {
    let lint = read("hack/lint.sh");
    assert!(lint.contains("-shellcheck=\"${shellcheck}\""), "hack/lint.sh passes shellcheck to actionlint");
    assert!(!lint.contains("-shellcheck= "), "hack/lint.sh turns shellcheck off");
    let ci = read(".ci/run");
    let packages = ci.lines().find(|l| l.starts_with("packages=(")).unwrap();
    assert!(packages.split([' ', '(', ')']).any(|p| p == "shellcheck"), "{packages}");
}

#[test]
fn security_md_says_how_to_report_and_which_versions_get_fixes() {
    let policy = read("SECURITY.md");
    for heading in ["## Reporting a vulnerability", "## Supported versions", "## Verifying what you install"] {
        assert!(policy.contains(heading), "SECURITY.md has no {heading:?}");
    }
    let (major, minor) = {
        let mut parts = env!("CARGO_PKG_VERSION").split('.');
        (parts.next().unwrap(), parts.next().unwrap())
    };
    assert!(policy.contains(&format!("| {major}.{minor}.x")), "the current minor is in the supported table");
    assert!(policy.contains("Report a vulnerability") && !policy.contains("public issue with"), "private reporting");
}

/// hack/notices.py lists every crate the operator depends on directly (with its licence), its own crate excepted,
/// and none of the development dependencies; the full check against the binary is tests/release.rs.
#[test]
fn the_notices_list_the_operators_dependencies() {
    let out = Command::new("python3")
        .args(["hack/notices.py", "x86_64-unknown-linux-musl"])
        .current_dir(repo("."))
        .output()
        .unwrap();
    assert!(out.status.success(), "hack/notices.py: {}", String::from_utf8_lossy(&out.stderr));
    let notices = String::from_utf8(out.stdout).unwrap();
    let crates: Vec<&str> =
        notices.lines().skip_while(|l| !l.starts_with("CRATES")).skip(2).take_while(|l| !l.is_empty()).collect();
    let names: BTreeSet<&str> = crates.iter().filter_map(|l| l.split_whitespace().next()).collect();
    let manifest: toml::Table = toml::from_str(&read("Cargo.toml")).unwrap();
    for (name, spec) in manifest["dependencies"].as_table().unwrap() {
        let package = spec.get("package").and_then(|p| p.as_str()).unwrap_or(name);
        assert!(names.contains(package), "{package} is not in the notices");
    }
    for dev_only in ["spdx", "tower-test", "neuron-dra-operator", "serde_yaml"] {
        assert!(!names.contains(dev_only), "{dev_only} is in the notices");
    }
    assert!(crates.iter().all(|l| l.contains(" (") && l.contains(')')), "each crate with its licence");
    assert!(notices.contains("LICENCE AND NOTICE TEXTS") && notices.contains("Apache License"), "the texts follow");
}
