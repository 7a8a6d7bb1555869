//! The docs stay true: every NeuronDRAConfig in README.md and docs/profiles.md renders, every template they show is
//! what `render` makes of the config above it, and every pod names a template that config makes and is launched as
//! wide as its claim (`--nproc-per-node` = the template's NeuronCores, docs/workloads.md). The README stays
//! short, and every relative link in the Markdown docs reaches a file and heading that exist.

mod support {
    pub mod cores;
}

use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::desired::build;
use neuron_dra_operator::logic::validate::validate;
use serde_yaml::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The ```yaml blocks of a Markdown file, in order.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[derive(Debug, Default, PartialEq)]
struct Checked {
    configs: usize,
    templates: usize,
    pods: usize,
}

/// Renders every config of `path`, compares every `# template NAME` block with the config above it, and checks that
/// every pod uses templates that config makes, in one of its namespaces.
fn check_blocks(path: &str) -> Checked {
    let mut checked = Checked::default();
    let mut rendered = None;
    for block in yaml_blocks(&read(path)) {
        let value: Value = serde_yaml::from_str(&block).unwrap_or_else(|e| panic!("{path}: not YAML: {e}\n{block}"));
        let kind = value.get("kind").and_then(Value::as_str);
        if kind == Some("NeuronDRAConfig") {
            let config = parse_config(&block).unwrap_or_else(|e| panic!("{path}: {e:?}\n{block}"));
            let validated = validate(&config).unwrap_or_else(|e| panic!("{path}: {e}\n{block}"));
            let namespaces = validated.spec.templates.namespaces.clone();
            rendered = Some((build(&validated, &namespaces), namespaces));
            checked.configs += 1;
        } else if kind == Some("Pod") {
            let (desired, namespaces) = rendered.as_ref().expect("a pod block follows a config block");
            let namespace = value["metadata"]["namespace"].as_str().expect("the pod names its namespace");
            assert!(
                namespaces.iter().any(|n| n == namespace),
                "{path}: the config above has no templates in {namespace}"
            );
            let claims = value["spec"]["resourceClaims"].as_sequence().expect("the pod has resourceClaims");
            for claim in claims {
                let template = claim["resourceClaimTemplateName"].as_str().expect("a claim from a template");
                assert!(
                    desired.templates.iter().any(|t| t.metadata.name.as_deref() == Some(template)),
                    "{path}: the config above renders no template {template}"
                );
            }
            let claim_names: Vec<&str> = claims.iter().filter_map(|c| c["name"].as_str()).collect();
            for container in value["spec"]["containers"].as_sequence().expect("containers") {
                for used in container["resources"]["claims"].as_sequence().into_iter().flatten() {
                    let name = used["name"].as_str().unwrap();
                    assert!(claim_names.contains(&name), "{path}: a container uses claim {name}, which the pod lacks");
                }
            }
            let spec = serde_json::to_value(&value["spec"]).unwrap();
            let devices = |name: &str| {
                let template = desired.templates.iter().find(|t| t.metadata.name.as_deref() == Some(name))?;
                serde_json::to_value(&template.spec.spec.devices).ok()
            };
            assert!(support::cores::check_pod(path, &spec, &devices) > 0, "{path}: a pod that uses no claim");
            checked.pods += 1;
        } else if let Some(name) = block.lines().next().and_then(|l| l.strip_prefix("# template ")) {
            let (desired, _) = rendered.as_ref().expect("a template block follows a config block");
            let template = desired
                .templates
                .iter()
                .find(|t| t.metadata.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{path}: the config above renders no template {name}"));
            let shown: serde_json::Value = serde_json::to_value(&value["spec"]).unwrap();
            let actual = serde_json::to_value(&template.spec.spec).unwrap();
            assert_eq!(shown, actual, "{path}'s template {name} differs from render");
            checked.templates += 1;
        }
    }
    checked
}

#[test]
fn every_config_in_the_profiles_renders_and_every_template_shown_matches() {
    let checked = check_blocks("docs/profiles.md");
    assert!(checked.configs >= 3, "a config per profile kind: {checked:?}");
    assert!(checked.templates >= 4, "a template per profile kind: {checked:?}");
}

#[test]
fn the_readme_s_first_config_renders_and_its_pod_uses_a_template_it_makes() {
    let checked = check_blocks("README.md");
    assert!(checked.configs >= 1 && checked.pods >= 1, "a config and a pod: {checked:?}");
}

#[test]
fn the_readme_is_at_most_200_lines() {
    let lines = read("README.md").lines().count();
    assert!(lines <= 200, "README.md has {lines} lines; move detail into docs/");
}

/// GitHub's anchor for a heading: the text without Markdown's code marks, lowercased, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of a Markdown file outside fenced code blocks.
fn prose(markdown: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    markdown.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// Every heading's anchor, with GitHub's `-1`, `-2`, ... for repeats.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose(markdown) {
        let Some(text) = line.strip_prefix('#').map(|l| l.trim_start_matches('#')) else { continue };
        let Some(text) = text.strip_prefix(' ') else { continue };
        let base = slug(text.trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of the inline links `[text](target)` in a Markdown file's prose, without code spans.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(markdown) {
        let text: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = text.as_str();
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            targets.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    targets
}

fn markdown_files() -> Vec<String> {
    let mut files: Vec<String> =
        ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "examples/README.md"].map(String::from).to_vec();
    for entry in std::fs::read_dir(Path::new(ROOT).join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            files.push(format!("docs/{name}"));
        }
    }
    files.sort();
    files
}

#[test]
fn every_relative_link_in_the_docs_reaches_a_file_and_heading_in_the_repository() {
    let root = Path::new(ROOT).canonicalize().unwrap();
    let mut problems = Vec::new();
    let mut links = 0;
    for file in markdown_files() {
        let text = read(&file);
        let dir = Path::new(&file).parent().unwrap().to_path_buf();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let relative: PathBuf = if path.is_empty() { PathBuf::from(&file) } else { dir.join(path) };
            let Ok(resolved) = root.join(&relative).canonicalize() else {
                problems.push(format!("{file}: ({target}): no such file"));
                continue;
            };
            if !resolved.starts_with(&root) {
                problems.push(format!("{file}: ({target}): outside the repository"));
                continue;
            }
            if let Some(anchor) = anchor {
                let is_markdown = resolved.extension().is_some_and(|e| e == "md");
                let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !is_markdown || !anchors(&target_text).contains(anchor) {
                    problems.push(format!("{file}: ({target}): no heading #{anchor}"));
                }
            }
        }
    }
    assert!(links > 50, "only {links} relative links found: is the parser broken?");
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn anchors_follow_github() {
    let headings = "# The API: `neurondra.io/v1alpha1` `NeuronDRAConfig`\n## Can my team's job run? Capacity per \
                    profile\n```\n# not a heading\n```\n## Driver rollouts\n## Driver rollouts\n#nope\n";
    let found: Vec<String> = anchors(headings).into_iter().collect();
    assert_eq!(
        found,
        [
            "can-my-teams-job-run-capacity-per-profile",
            "driver-rollouts",
            "driver-rollouts-1",
            "the-api-neurondraiov1alpha1-neurondraconfig"
        ]
    );
    assert_eq!(link_targets("see [a `b`](x.md#y) and `[c](d)` and [e](#f)"), ["x.md#y", "#f"]);
}

/// Upgrading is written once, in docs/install.md's "Upgrading": every other place a user looks for it links there
/// and shows no upgrade command of its own (four places once gave four different ones).
#[test]
fn every_other_place_links_the_one_upgrade_procedure_and_gives_no_commands_of_its_own() {
    let own_commands = ["helm upgrade neuron-dra-operator", "-f crds/", "apply -k config/crd", "kubectl replace"];
    for path in
        ["README.md", "charts/neuron-dra-operator/templates/NOTES.txt", "docs/operations.md", "docs/install-eks.md"]
    {
        let text = read(path);
        assert!(text.contains("install.md#upgrading"), "{path} does not link docs/install.md#upgrading");
        for command in own_commands {
            assert!(!text.contains(command), "{path} gives an upgrade command of its own: {command}");
        }
    }
    let install = read("docs/install.md");
    assert_eq!(install.matches("\n## Upgrading").count(), 1, "docs/install.md has one Upgrading section");
}

/// docs/security.md backs every "cannot" with a test named `file::test` (a file of tests/ or its topics, or a
/// module of src/ for unit tests): each one it names exists, so a renamed or removed test cannot leave a claim
/// without its proof.
#[test]
fn every_test_the_security_model_names_exists() {
    let text = read("docs/security.md");
    let is_name =
        |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let named: BTreeSet<(&str, &str)> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split_once("::"))
        .filter(|(file, test)| is_name(file) && is_name(test))
        .collect();
    let mut missing = Vec::new();
    for (file, test) in &named {
        let tests = Path::new(ROOT).join(format!("tests/{file}.rs"));
        let found = match std::fs::read_to_string(&tests) {
            // The test binary's own file, or one of its topics (`tests/<file>_topics/*.rs`).
            Ok(source) => {
                let topics = std::fs::read_dir(Path::new(ROOT).join(format!("tests/{file}_topics")));
                let topics =
                    topics.into_iter().flatten().flatten().filter_map(|e| std::fs::read_to_string(e.path()).ok());
                std::iter::once(source).chain(topics).any(|source| source.contains(&format!("fn {test}()")))
            }
            Err(_) => ["rs", "mod.rs"].iter().any(|end| {
                let module =
                    if *end == "rs" { format!("src/{file}/{test}.rs") } else { format!("src/{file}/{test}/{end}") };
                Path::new(ROOT).join(module).exists()
            }),
        };
        if !found {
            missing.push(format!("{file}::{test}"));
        }
    }
    assert!(named.len() > 10, "only {} tests named: is the parser broken?", named.len());
    assert!(missing.is_empty(), "docs/security.md names tests that do not exist: {}", missing.join(", "));
}
