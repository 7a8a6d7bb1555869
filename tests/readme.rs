//! The docs stay true: every NeuronDRAConfig in README.md and docs/profiles.md renders, every template they show is
//! what `render` makes of the config above it, and every pod names a template that config makes. The README stays
//! short.

use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::build::build;
use neuron_dra_operator::logic::validate::validate;
use serde_yaml::Value;
use std::path::Path;

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
            assert!(namespaces.iter().any(|n| n == namespace), "{path}: the config above has no templates in {namespace}");
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
