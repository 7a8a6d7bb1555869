//! The rules read file by file: import cycles between files (re-exports followed), lengths, `#[path]`, where unit
//! tests live, and typed event reasons.

use std::path::{Path, PathBuf};

use regex::Regex;

use super::files::{self, Tree};

const MAX_FILE_LINES: usize = 400;
const MAX_FN_LINES: usize = 80;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn rust_files_of(dirs: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        files::rust_files(&repo(dir), &mut out);
    }
    out.sort();
    out
}

fn shown(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(path).display().to_string()
}

/// The trees whose files import each other: the library, the integration tests' shared support, each benchmark.
fn trees() -> Vec<Tree> {
    let src = repo("src");
    let library: Vec<PathBuf> = rust_files_of(&["src"])
        .into_iter()
        .filter(|f| !f.starts_with(src.join("bin")) && *f != src.join("main.rs"))
        .collect();
    let mut trees = vec![Tree::read(&src, &library), Tree::read(&repo("tests"), &rust_files_of(&["tests/support"]))];
    for entry in std::fs::read_dir(repo("benches")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() {
            // A benchmark's module tree: `benches/<name>/main.rs` and its modules beside it.
            trees.push(Tree::read(&dir, &rust_files_of(&[&shown(&dir)])));
        }
    }
    trees
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let edges: Vec<_> = trees().iter().map(Tree::edges).collect();
    let count: usize = edges.iter().map(|e| e.len()).sum();
    assert!(count > 150, "the file graph looks unread: {count} edges");
    // Each cycle with its edges, so that the one to cut is in the message.
    let cycles: Vec<String> = edges
        .iter()
        .flat_map(|e| files::cycles(e).into_iter().map(move |c| (c, e)))
        .map(|(c, e)| {
            let inside = e.iter().filter(|(a, b)| c.contains(a) && c.contains(b));
            inside.map(|(a, b)| format!("  {} -> {}", shown(a), shown(b))).collect::<Vec<_>>().join("\n")
        })
        .collect();
    assert!(cycles.is_empty(), "files in import cycles:\n{}", cycles.join("\n\n"));
}

#[test]
fn the_file_cycle_check_follows_re_exports() {
    let dir = repo("target/architecture-check");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("controller")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write("lib.rs", "pub mod controller;\npub mod logic;\n");
    write("logic.rs", "pub fn key() {}\n");
    write("controller/mod.rs", "mod context;\nmod reconcile;\npub use context::Context;\npub fn run() {}\n");
    write("controller/context.rs", "pub struct Context;\nfn f() { super::reconcile::config_key(); }\n");
    write("controller/reconcile.rs", "use crate::controller::Context;\npub fn config_key() { crate::logic::key() }\n");
    let tree = Tree::read(&dir, &rust_files_of(&["target/architecture-check"]));
    let found: Vec<Vec<String>> =
        files::cycles(&tree.edges()).iter().map(|c| c.iter().map(|f| shown(f)).collect()).collect();
    let expected =
        ["target/architecture-check/controller/context.rs", "target/architecture-check/controller/reconcile.rs"];
    assert_eq!(found, vec![expected.map(str::to_string).to_vec()]);
    // Through the module file itself it would be no cycle: the re-export is no use of `Context` by mod.rs.
    assert!(!tree.edges().iter().any(|(from, _)| from.ends_with("controller/mod.rs")));
}

#[test]
fn no_path_attributes() {
    let path = Regex::new(r"#\[path\s*=").unwrap();
    let found: Vec<String> = rust_files_of(&["src", "tests", "benches"])
        .into_iter()
        .filter(|f| path.is_match(&files::code_of(&std::fs::read_to_string(f).unwrap())))
        .map(|f| shown(&f))
        .collect();
    assert!(found.is_empty(), "#[path] attributes (use the module tree instead): {found:?}");
}

#[test]
fn no_file_is_longer_than_one_sitting() {
    let long: Vec<String> = rust_files_of(&["src", "tests", "benches"])
        .into_iter()
        .map(|f| (std::fs::read_to_string(&f).unwrap().lines().count(), f))
        .filter(|(lines, _)| *lines > MAX_FILE_LINES)
        .map(|(lines, f)| format!("{} ({lines} lines)", shown(&f)))
        .collect();
    assert!(long.is_empty(), "files over {MAX_FILE_LINES} lines:\n{}", long.join("\n"));
}

/// Each `fn` of a rustfmt-formatted file with its length: from its line to the `}` at its own indentation.
fn functions(text: &str) -> Vec<(String, usize)> {
    let start = Regex::new(r"^(\s*)(?:pub(?:\([a-z]+\))? )?(?:const )?(?:async )?(?:unsafe )?fn ([a-z_0-9]+)").unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(c) = start.captures(line) else { continue };
        let close = format!("{}}}", &c[1]);
        // A declaration without a body (`fn f();` in a trait) ends before any `{`.
        let body = lines[at..].iter().position(|l| l.ends_with('{') || l.ends_with(';')).map(|n| at + n);
        if body.is_none_or(|b| lines[b].ends_with(';') && !lines[b].contains('{')) {
            continue;
        }
        if let Some(end) = lines[at..].iter().position(|l| *l == close || l.starts_with(&format!("{close} "))) {
            found.push((c[2].to_string(), end + 1));
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_one_screen() {
    let long: Vec<String> = rust_files_of(&["src"])
        .into_iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            functions(&text).into_iter().map(move |(name, lines)| (shown(&f), name, lines))
        })
        .filter(|(_, _, lines)| *lines > MAX_FN_LINES)
        .map(|(file, name, lines)| format!("{file}: fn {name} ({lines} lines)"))
        .collect();
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines:\n{}", long.join("\n"));
    let sample =
        "fn a() {\n    x();\n}\n\ntrait T {\n    fn b();\n}\n    pub async fn c(\n        y: u8,\n    ) {\n    }\n";
    assert_eq!(
        functions(sample),
        vec![("a".to_string(), 3), ("b".to_string(), 0), ("c".to_string(), 4)][..]
            .iter()
            .filter(|(n, _)| n != "b")
            .cloned()
            .collect::<Vec<_>>()
    );
}

/// CONTRIBUTING.md "Unit tests": a module's unit tests are its child module `tests`, declared last as
/// `#[cfg(test)] mod tests;`, in a file of its own (`<module dir>/tests.rs`, or `tests/mod.rs` with its parts).
#[test]
fn unit_tests_have_one_layout() {
    let inline = Regex::new(r"mod tests\s*\{").unwrap();
    let declared = Regex::new(r"(?m)^(#\[cfg\(test\)\]\n)?mod ([a-z_0-9]*tests?)\s*;").unwrap();
    let mut wrong = Vec::new();
    for file in rust_files_of(&["src"]) {
        let text = std::fs::read_to_string(&file).unwrap();
        if inline.is_match(&text) {
            wrong.push(format!("{}: inline `mod tests {{ .. }}`", shown(&file)));
        }
        for c in declared.captures_iter(&text) {
            if c.get(1).is_none() || &c[2] != "tests" {
                wrong.push(format!("{}: `{}` (want `#[cfg(test)]\\nmod tests;`)", shown(&file), c[0].trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "unit tests outside the one layout:\n{}", wrong.join("\n"));
}

/// Every Event's reason is a value of the typed reasons, never a string literal at the call site.
#[test]
fn event_reasons_are_typed() {
    let literal = Regex::new(r#"(?s)\bevent\(\s*EventType::[A-Za-z]+,\s*""|reason:\s*"""#).unwrap();
    let mut found = Vec::new();
    for file in rust_files_of(&["src/controller", "src/logic"]) {
        if files::is_test(&files::module_of(&repo("src"), &file)) {
            continue;
        }
        // Contents of strings are blanked, so a literal reason reads `""`.
        for m in literal.find_iter(&files::code_of(&std::fs::read_to_string(&file).unwrap())) {
            found.push(format!("{}: {}", shown(&file), m.as_str().replace('\n', " ")));
        }
    }
    assert!(found.is_empty(), "string-literal event reasons:\n{}", found.join("\n"));
}
