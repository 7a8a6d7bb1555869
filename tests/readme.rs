//! The README stays true: every NeuronDRAConfig in it renders, and every template it shows is what `render` makes
//! of the config above it.

use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::build::build;
use neuron_dra_operator::logic::validate::validate;
use serde_yaml::Value;

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

#[test]
fn every_config_in_the_readme_renders_and_every_template_shown_matches() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut configs = 0;
    let mut templates = 0;
    let mut rendered = None;
    for block in yaml_blocks(&readme) {
        let value: Value = serde_yaml::from_str(&block).unwrap_or_else(|e| panic!("not YAML: {e}\n{block}"));
        if value.get("kind").and_then(Value::as_str) == Some("NeuronDRAConfig") {
            let config = parse_config(&block).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
            let validated = validate(&config).unwrap_or_else(|e| panic!("{e}\n{block}"));
            let namespaces = validated.spec.templates.namespaces.clone();
            rendered = Some(build(&validated, &namespaces));
            configs += 1;
        } else if let Some(name) = block.lines().next().and_then(|l| l.strip_prefix("# template ")) {
            let desired = rendered.as_ref().expect("a template block follows a config block");
            let template = desired
                .templates
                .iter()
                .find(|t| t.metadata.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("the config above renders no template {name}"));
            let shown: serde_json::Value = serde_json::to_value(&value["spec"]).unwrap();
            let actual = serde_json::to_value(&template.spec.spec).unwrap();
            assert_eq!(shown, actual, "README's template {name} differs from render");
            templates += 1;
        }
    }
    assert!(configs >= 3, "a config per profile kind");
    assert!(templates >= 4, "a template per profile kind");
}
