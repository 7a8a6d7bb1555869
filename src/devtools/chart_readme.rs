//! The Helm chart's README, generated from `Chart.yaml` and the comments of `values.yaml` (as helm-docs does, so
//! the table of values can never disagree with the values): `make chart` writes it, a test checks it is fresh.
//!
//! A value's description is the comment block right above its key. A mapping is one row when it has a comment and
//! none of its keys has one (a security context, say); otherwise each of its keys is a row of its own. Lists are
//! one row. Defaults are the values themselves, as compact JSON.

use anyhow::Context;
use serde_yaml::Value;

/// One documented value: its dotted path, its default and what the comment above it says.
#[derive(Debug, PartialEq)]
struct Row {
    path: String,
    default: String,
    description: String,
}

/// A key of `values.yaml` as written: its indentation, dotted path and the comment block above it.
struct Key {
    indent: usize,
    path: String,
    comment: String,
}

/// Every key with its path and comment, read line by line (serde_yaml drops comments).
fn keys(values: &str) -> Vec<Key> {
    let mut keys = Vec::new();
    let mut parents: Vec<(usize, String)> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    for line in values.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(text) = trimmed.strip_prefix('#') {
            comment.push(text.trim().to_string());
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('-') {
            // A blank line ends a comment that belongs to no key (the file's header); list items are values.
            if trimmed.is_empty() {
                comment.clear();
            }
            continue;
        }
        let Some((name, _)) = trimmed.split_once(':') else { continue };
        parents.retain(|(parent_indent, _)| *parent_indent < indent);
        let path = parents.iter().map(|(_, p)| p.as_str()).chain([name]).collect::<Vec<_>>().join(".");
        parents.push((indent, name.to_string()));
        keys.push(Key { indent, path, comment: comment.join(" ") });
        comment.clear();
    }
    keys
}

fn lookup<'a>(values: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(values, |value, key| value.get(key))
}

fn compact(value: &Value) -> anyhow::Result<String> {
    Ok(match value {
        Value::String(s) if s.is_empty() => "\"\"".to_string(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string(&serde_json::to_value(other)?)?,
    })
}

/// The rows of the values table, in file order.
fn rows(text: &str) -> anyhow::Result<Vec<Row>> {
    let values: Value = serde_yaml::from_str(text).context("values.yaml is not YAML")?;
    let keys = keys(text);
    let mut rows = Vec::new();
    let mut folded: Option<(usize, String)> = None;
    for (i, key) in keys.iter().enumerate() {
        if let Some((indent, prefix)) = &folded {
            if key.indent > *indent && key.path.starts_with(prefix.as_str()) {
                continue;
            }
            folded = None;
        }
        // Keys inside list items (`- name: x`) are part of their list's default, not paths of their own.
        let Some(value) = lookup(&values, &key.path) else { continue };
        let children: Vec<&Key> = keys[i + 1..].iter().take_while(|k| k.indent > key.indent).collect();
        let is_mapping = matches!(value, Value::Mapping(m) if !m.is_empty());
        if is_mapping && (key.comment.is_empty() || children.iter().any(|k| !k.comment.is_empty())) {
            continue;
        }
        if is_mapping {
            folded = Some((key.indent, format!("{}.", key.path)));
        }
        rows.push(Row { path: key.path.clone(), default: compact(value)?, description: key.comment.clone() });
    }
    Ok(rows)
}

/// A table cell: pipes escaped, and angle brackets (`<fullname>`), which Markdown would take for HTML.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;")
}

/// The README of the chart whose `Chart.yaml` and `values.yaml` texts are given.
pub fn generate(chart_yaml: &str, values_yaml: &str) -> anyhow::Result<String> {
    let chart: Value = serde_yaml::from_str(chart_yaml).context("Chart.yaml is not YAML")?;
    let field = |name: &str| chart.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
    let mut out = format!("# {}\n\n{}\n\n", field("name"), field("description"));
    out.push_str(&format!(
        "Chart version `{}`, operator version `{}`, Kubernetes `{}`.\n\n",
        field("version"),
        field("appVersion"),
        field("kubeVersion")
    ));
    out.push_str("Generated from `values.yaml` by `make chart`; edit the comments there, not this file.\n\n");
    out.push_str("## Values\n\n| Key | Default | Description |\n|---|---|---|\n");
    for row in rows(values_yaml)? {
        out.push_str(&format!("| `{}` | `{}` | {} |\n", row.path, cell(&row.default), cell(&row.description)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
