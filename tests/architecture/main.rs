//! The layout's rules, read from the source (docs/architecture.md "Layers"): each layer imports only the layers
//! below it, sibling modules import each other one way only and no file imports a file that imports it back (re-exports
//! followed), no file is longer than a newcomer reads in one sitting nor a function longer than one screen, no
//! `#[path]`, one unit-test layout (CONTRIBUTING.md "Unit tests"), event reasons are typed, and
//! docs/architecture.md names only modules, files and items that exist (`docs.rs`).

mod docs;
mod files;
mod layout;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules from the bottom up; each may import only those before it (and itself).
const LAYERS: [&str; 7] = ["api", "cluster", "logic", "runtime", "controller", "run", "cli"];
/// Development tools may import anything; nothing but tests may import them.
const DEVTOOLS: &str = "devtools";

struct Source {
    modules: BTreeSet<Vec<String>>,
    /// (from, to) between modules, tests excluded.
    edges: BTreeSet<(Vec<String>, Vec<String>)>,
}

/// The library's modules and the imports between them: the file graph (`files::Tree`, re-exports followed, by name
/// and by glob) with each file taken for its module.
fn read_source() -> Source {
    source_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// `read_source` of the library under `src`.
fn source_of(src: &Path) -> Source {
    let mut paths = Vec::new();
    files::rust_files(src, &mut paths);
    paths.retain(|f| !f.starts_with(src.join("bin")) && *f != src.join("main.rs"));
    let tree = files::Tree::read(src, &paths);
    let modules: BTreeSet<Vec<String>> = tree.files.keys().cloned().collect();
    let edges =
        tree.edges().iter().map(|(from, to)| (files::module_of(src, from), files::module_of(src, to))).collect();
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

/// A tree whose only import cycle hides behind glob re-exports: `api/status.rs` names `RolloutStatus` and
/// `api/rollout.rs` names `NodeIssue`, each through `api/mod.rs`'s `pub use x::*`.
#[test]
fn the_cycle_checks_follow_glob_re_exports() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/architecture-check-glob");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("api")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write("lib.rs", "pub mod api;\npub mod logic;\n");
    write("logic.rs", "use crate::api::Status;\npub fn phase(_: &Status) {}\n");
    write("api/mod.rs", "mod rollout;\nmod status;\npub use rollout::*;\npub use status::*;\n");
    write("api/status.rs", "use super::RolloutStatus;\npub struct Status(RolloutStatus);\npub struct NodeIssue;\n");
    write("api/rollout.rs", "pub struct RolloutStatus(Vec<super::NodeIssue>);\n");
    let source = source_of(&dir);
    // The file check finds it, and so does the check between siblings.
    let mut paths = Vec::new();
    files::rust_files(&dir, &mut paths);
    let cycles = files::cycles(&files::Tree::read(&dir, &paths).edges());
    let names: Vec<Vec<String>> = cycles
        .iter()
        .map(|c| c.iter().map(|f| f.strip_prefix(&dir).unwrap().display().to_string()).collect())
        .collect();
    assert_eq!(names, vec![vec!["api/rollout.rs".to_string(), "api/status.rs".to_string()]]);
    assert_eq!(
        sibling_cycles(&source),
        vec!["in api: rollout -> status -> rollout", "in api: status -> rollout -> status"]
    );
    // `logic` names `api::Status`: an edge to the file that defines it, not to `api/mod.rs`.
    assert!(source.edges.contains(&(vec!["logic".into()], vec!["api".into(), "status".into()])));
    let broken = Source {
        modules: source.modules.clone(),
        edges: source.edges.into_iter().filter(|(f, _)| f.last().is_some_and(|m| m != "rollout")).collect(),
    };
    assert!(sibling_cycles(&broken).is_empty());
}

/// The shell of a pass under `src/controller`: what reads the server, writes, watches or holds the process's state.
const SHELL: [&str; 5] = ["reconcile", "act", "capabilities", "context", "watch"];
/// The pure core of a pass (docs/architecture.md "One reconcile, top to bottom").
const CORE: &str = "pure";

/// Imports from the controller's pure core into its shell, or into the controller's root (which runs it).
fn core_imports_of_the_shell(source: &Source) -> Vec<String> {
    let in_core = |m: &[String]| m.len() > 1 && m[0] == "controller" && m[1] == CORE;
    let shell = |m: &[String]| {
        m.first().is_some_and(|top| top == "run" || top == "cli")
            || (m.first().is_some_and(|top| top == "controller")
                && m.get(1).is_none_or(|child| SHELL.contains(&child.as_str())))
    };
    let found = source.edges.iter().filter(|(from, to)| in_core(from) && shell(to));
    found.map(|(from, to)| format!("{} -> {}", from.join("::"), to.join("::"))).collect()
}

#[test]
fn the_pure_core_of_a_pass_imports_no_shell_module() {
    let source = read_source();
    let core = source.modules.iter().filter(|m| m.len() > 1 && m[0] == "controller" && m[1] == CORE).count();
    assert!(core > 5, "the controller's pure core looks unread: {core} modules");
    let found = core_imports_of_the_shell(&source);
    assert!(found.is_empty(), "the pure core imports the shell:\n{}", found.join("\n"));
    // The check itself, on two edges.
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let edges = [
        (m("controller::pure::outcome"), m("controller::act::report")),
        (m("controller::act"), m("controller::pure::plan")),
    ];
    let sample = Source { modules: BTreeSet::new(), edges: edges.into() };
    assert_eq!(core_imports_of_the_shell(&sample), vec!["controller::pure::outcome -> controller::act::report"]);
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
