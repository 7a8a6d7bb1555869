//! The layout's rules, read from the source (docs/architecture.md "Layers"): each layer imports only the layers
//! below it, sibling modules import each other one way only (no cycles at any level), no file is longer than a
//! newcomer reads in one sitting, and unit tests sit inline or in `<module>/tests.rs` (no `#[path]`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules from the bottom up; each may import only those before it (and itself).
const LAYERS: [&str; 7] = ["api", "cluster", "logic", "runtime", "controller", "run", "cli"];
/// Development tools may import anything; nothing but tests may import them.
const DEVTOOLS: &str = "devtools";
const MAX_LINES: usize = 400;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/logic/health/mod.rs` -> ["logic", "health"]; `src/lib.rs` -> [].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The code of a file without its inline unit tests (by convention the file's last item) and without comments.
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

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
    lengths: Vec<(PathBuf, usize)>,
    path_attributes: Vec<PathBuf>,
}

fn is_test(module: &[String]) -> bool {
    module.iter().any(|m| m == "tests")
}

fn read_source() -> Source {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    let texts: Vec<(Vec<String>, PathBuf, String)> =
        files.into_iter().map(|f| (module_of(&src, &f), f.clone(), std::fs::read_to_string(&f).unwrap())).collect();
    let modules: BTreeSet<Vec<String>> = texts.iter().map(|(m, _, _)| m.clone()).collect();
    let mut edges = BTreeSet::new();
    for (module, _, text) in texts.iter().filter(|(m, _, _)| !is_test(m)) {
        for path in crate_paths(module, &code_of(text)) {
            // The longest prefix that is a module of its own file.
            let target = (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p));
            if let Some(target) = target.filter(|t| t != module) {
                edges.insert((module.clone(), target));
            }
        }
    }
    Source {
        lengths: texts.iter().map(|(_, f, t)| (f.clone(), t.lines().count())).collect(),
        path_attributes: texts.iter().filter(|(_, _, t)| t.contains("#[path")).map(|(_, f, _)| f.clone()).collect(),
        modules,
        edges,
    }
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
        lengths: vec![],
        path_attributes: vec![],
    };
    assert_eq!(sibling_cycles(&source), vec!["in : cluster -> logic -> cluster", "in : logic -> cluster -> logic"]);
}

#[test]
fn no_file_is_longer_than_one_sitting() {
    let long: Vec<String> = read_source()
        .lengths
        .into_iter()
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(file, lines)| format!("{} ({lines} lines)", file.display()))
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn unit_tests_are_inline_or_in_a_tests_module() {
    let source = read_source();
    assert!(source.path_attributes.is_empty(), "#[path] attributes: {:?}", source.path_attributes);
    let stray: Vec<String> = source
        .modules
        .iter()
        .filter(|m| m.last().is_some_and(|name| name.ends_with("_tests") || name.ends_with("_test")))
        .map(|m| m.join("::"))
        .collect();
    assert!(stray.is_empty(), "test modules not named `tests`: {stray:?}");
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
