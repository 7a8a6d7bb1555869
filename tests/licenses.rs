//! Every crate the operator and its tests are built from carries a licence `deny.toml` allows: the licence expression
//! of each package `cargo metadata` resolves for the platforms deny.toml names, read with the spdx crate cargo-deny
//! itself uses. An `OR` passes when one choice is allowed, an `AND` needs both, a missing or unparseable licence
//! fails. deny.toml is in cargo-deny's format, so `cargo deny check licenses` reads the same list (docs/decisions.md
//! says why the lint does not build cargo-deny). The tests are ignored by a plain `cargo test`: `make lint`
//! (`hack/lint.sh licenses`) runs them with `--ignored`, so `make test` runs them once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One list of deny.toml: `licenses.allow` or `graph.targets`.
fn deny_list(table: &str, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deny.toml")).unwrap();
    let deny: toml::Table = toml::from_str(&text).expect("deny.toml parses");
    let list = deny.get(table).and_then(|t| t.get(key)).and_then(|l| l.as_array());
    let list = list.unwrap_or_else(|| panic!("deny.toml has no {table}.{key} list"));
    list.iter().map(|item| item.as_str().expect("a string").to_string()).collect()
}

/// Whether a licence expression is allowed; the reason when not.
fn judge(expression: Option<&str>, allowed: &BTreeSet<String>) -> Result<(), String> {
    let text = expression.ok_or("no licence expression (only a licence file)")?;
    // Lax: the old `MIT/Apache-2.0` spelling of some crates means OR.
    let parsed = spdx::Expression::parse_mode(text, spdx::ParseMode::LAX).map_err(|e| format!("{text:?}: {e}"))?;
    if parsed.evaluate(|requirement| allowed.contains(&requirement.to_string())) {
        Ok(())
    } else {
        Err(format!("{text:?} needs a licence deny.toml does not allow"))
    }
}

/// name@version -> licence expression, for every package resolved on the target (dependencies of every kind).
fn packages_on(target: &str) -> BTreeMap<String, Option<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--locked", "--offline", "--format-version", "1", "--filter-platform", target])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let resolved: BTreeSet<&str> =
        metadata["resolve"]["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    let packages =
        metadata["packages"].as_array().unwrap().iter().filter(|p| resolved.contains(p["id"].as_str().unwrap()));
    packages
        .map(|p| {
            let name = format!("{}@{}", p["name"].as_str().unwrap(), p["version"].as_str().unwrap());
            (name, p["license"].as_str().map(str::to_string))
        })
        .collect()
}

#[test]
#[ignore = "run by make lint"]
fn every_dependency_carries_an_allowed_licence() {
    let allowed: BTreeSet<String> = deny_list("licenses", "allow").into_iter().collect();
    let targets = deny_list("graph", "targets");
    assert!(allowed.contains("Apache-2.0") && !targets.is_empty(), "deny.toml's lists: {allowed:?} {targets:?}");
    let mut packages = BTreeMap::new();
    for target in &targets {
        packages.extend(packages_on(target));
    }
    let refused: Vec<String> = packages
        .iter()
        .filter_map(|(name, licence)| judge(licence.as_deref(), &allowed).err().map(|why| format!("{name}: {why}")))
        .collect();
    assert!(refused.is_empty(), "crates whose licence deny.toml does not allow:\n{}", refused.join("\n"));
    // The operator itself is among them, and there are as many as a real dependency tree has.
    let ours = format!("neuron-dra-operator@{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(packages.get(&ours), Some(&Some("Apache-2.0".to_string())));
    assert!(packages.len() > 200, "only {} packages resolved", packages.len());
}

/// The judge refuses what it must: copyleft alone or required, no licence, nonsense.
#[test]
#[ignore = "run by make lint"]
fn the_licence_judge_reads_expressions_as_cargo_deny_does() {
    let allowed: BTreeSet<String> =
        ["MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception"].into_iter().map(String::from).collect();
    for ok in ["MIT", "MIT OR GPL-3.0-only", "MIT/Apache-2.0", "(MIT OR Apache-2.0) AND Apache-2.0 WITH LLVM-exception"]
    {
        assert_eq!(judge(Some(ok), &allowed), Ok(()), "{ok}");
    }
    for refused in [
        Some("GPL-3.0-only"),
        Some("MIT AND LGPL-2.1-or-later"),
        Some("Apache-2.0 WITH Classpath-exception-2.0"),
        Some("not a licence"),
        None,
    ] {
        assert!(judge(refused, &allowed).is_err(), "{refused:?}");
    }
}
