//! The layout's rules, read from the source (docs/architecture.md "Layers"): each layer imports only the layers
//! below it, sibling modules import each other one way only and no file imports a file that imports it back (re-exports
//! followed), no file is longer than a newcomer reads in one sitting nor a function longer than one screen, no
//! `#[path]`, one unit-test layout (CONTRIBUTING.md "Unit tests"), event reasons are typed, and
//! docs/architecture.md names only modules, files and items that exist (`docs.rs`).

mod docs;
mod files;
mod layout;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules from the bottom up; each may import only those before it (and itself).
const LAYERS: [&str; 7] = ["api", "cluster", "logic", "runtime", "controller", "run", "cli"];
/// Development tools may import anything; nothing but tests may import them.
const DEVTOOLS: &str = "devtools";

/// Every module path a file names from the crate root: `crate::a::b`, and `super::c` resolved against the file's
/// own module; `use crate::{a, b::{c}}` groups are expanded one level.
fn crate_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let path = regex::Regex::new(r"\b(crate|super)::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)").unwrap();
    let group = regex::Regex::new(r"\b(crate|super)::\{([^;]*)\}").unwrap();
    let root = |anchor: &str| match anchor {
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        _ => Vec::new(),
    };
    let mut paths = Vec::new();
    for c in path.captures_iter(code) {
        let mut full = root(&c[1]);
        full.extend(c[2].split("::").filter(|p| *p != "super").map(str::to_string));
        paths.push(full);
    }
    for c in group.captures_iter(code) {
        for item in c[2].split(',') {
            let item: String =
                item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            if !item.is_empty() {
                let mut full = root(&c[1]);
                full.extend(item.split("::").map(str::to_string));
                paths.push(full);
            }
        }
    }
    paths
}

struct Source {
    modules: BTreeSet<Vec<String>>,
    /// (from, to) between modules, tests excluded.
    edges: BTreeSet<(Vec<String>, Vec<String>)>,
}

fn read_source() -> Source {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files::rust_files(&src, &mut paths);
    paths.retain(|f| !f.starts_with(src.join("bin")));
    let texts: Vec<(Vec<String>, PathBuf, String)> = paths
        .into_iter()
        .map(|f| (files::module_of(&src, &f), f.clone(), std::fs::read_to_string(&f).unwrap()))
        .collect();
    let modules: BTreeSet<Vec<String>> = texts.iter().map(|(m, _, _)| m.clone()).collect();
    let mut edges = BTreeSet::new();
    for (module, _, text) in texts.iter().filter(|(m, _, _)| !files::is_test(m)) {
        for path in crate_paths(module, &files::code_of(text)) {
            // The longest prefix that is a module of its own file.
            let target = (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p));
            if let Some(target) = target.filter(|t| t != module) {
                edges.insert((module.to_vec(), target));
            }
        }
    }
    Source { modules, edges }
}

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    let source = read_source();
    assert!(source.edges.len() > 50, "the import graph looks unread: {} edges", source.edges.len());
    let rank = |top: &str| LAYERS.iter().position(|l| *l == top);
    let mut upward = Vec::new();
    for (from, to) in &source.edges {
        let (Some(from_top), Some(to_top)) = (from.first(), to.first()) else { continue };
        if to_top == DEVTOOLS && from_top != DEVTOOLS {
            upward.push(format!("{} -> {} (development tools)", from.join("::"), to.join("::")));
            continue;
        }
        if let (Some(a), Some(b)) = (rank(from_top), rank(to_top))
            && b > a
        {
            upward.push(format!("{} -> {}", from.join("::"), to.join("::")));
        }
    }
    assert!(upward.is_empty(), "imports against the layers:\n{}", upward.join("\n"));
}

/// The cycles among the children of one module, with edges lifted to those children.
fn sibling_cycles(source: &Source) -> Vec<String> {
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, to) in &source.edges {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        // A module and its own descendants are one unit (a parent declares and re-exports its children).
        if common == from.len() || common == to.len() {
            continue;
        }
        let parent = from[..common].to_vec();
        graphs.entry(parent).or_default().entry(from[common].clone()).or_default().insert(to[common].clone());
    }
    let mut cycles = Vec::new();
    for (parent, graph) in &graphs {
        for start in graph.keys() {
            // Depth-first search for a path back to `start`.
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            let mut seen = BTreeSet::new();
            while let Some((node, path)) = stack.pop() {
                for next in graph.get(&node).into_iter().flatten() {
                    if next == start {
                        let mut cycle = path.clone();
                        cycle.push(start.clone());
                        cycles.push(format!("in {}: {}", parent.join("::"), cycle.join(" -> ")));
                    } else if seen.insert(next.clone()) {
                        let mut longer = path.clone();
                        longer.push(next.clone());
                        stack.push((next.clone(), longer));
                    }
                }
            }
        }
    }
    cycles.sort();
    cycles.dedup();
    cycles
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let source = read_source();
    assert!(source.modules.len() > 40, "the module tree looks unread: {} modules", source.modules.len());
    let cycles = sibling_cycles(&source);
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let source = Source {
        modules: BTreeSet::new(),
        edges: [(m("logic::health"), m("cluster::x")), (m("cluster::y"), m("logic::status"))].into(),
    };
    assert_eq!(sibling_cycles(&source), vec!["in : cluster -> logic -> cluster", "in : logic -> cluster -> logic"]);
}

/// `cargo tree` of the package's features along one kind of edge.
fn features_along(edges: &str) -> String {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--offline", "-e", edges, "-i", "neuron-dra-operator"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn a_release_build_compiles_no_development_tools() {
    // What `cargo build --release` resolves: normal edges only.
    let release = features_along("features,normal");
    assert!(!release.contains("\"devtools\""), "the operator's build enables devtools:\n{release}");
    // Tests and benchmarks do switch it on (through the dev-dependency on the package itself).
    let tests = features_along("features");
    assert!(tests.contains("\"devtools\""), "tests no longer get the development tools:\n{tests}");
}
