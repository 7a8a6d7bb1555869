//! docs/architecture.md names only what exists. What counts as a name there:
//! - in the layer picture (the fenced block that starts with `src/`), each entry (a word ending in `/` or `.rs`,
//!   nested by indentation) is a file or directory under `src/`, and a directory's list after its first `: `
//!   (comma-separated; each item's first word, parenthesized remarks aside) names its modules or items;
//! - in a table whose first column is `module`, each backticked name in that column is a module from the crate root;
//! - anywhere, backticked text that reads as a path: identifier-like segments joined by `/` (the first without a dot,
//!   so `neurondra.io/config` is a label, not a path) or one `<name>.rs`. It exists from the repository root, from
//!   `src/`, or as the end of a path under `src/` (`status/conditions.rs` for `logic/status/conditions.rs`);
//! - anywhere, backticked text that reads as a Rust path (`a::b`, `a::b()`). `crate::..` is from the crate root;
//!   `Type::member` needs a type of the crate (or one of `FOREIGN_TYPES`) with that member where the type is
//!   defined or implemented; otherwise the longest leading part that is a module (the end of one: `act::execute`,
//!   and a test file of `tests/`: `ownership::a_test`) holds the rest, defined in its file or the files below it.
//!
//! Other backticked text (reasons, fields, commands, single words) is prose and not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;

use super::files;

/// Types of other crates the page names with a member (`Controller::for_stream`).
const FOREIGN_TYPES: &[&str] = &["Controller"];

/// The repository's Rust code: every module of `src/`, `tests/` and `benches/` with its file.
struct Code {
    root: PathBuf,
    /// (the source tree it is in, its module path from that tree's root, its file).
    modules: Vec<(&'static str, Vec<String>, PathBuf)>,
    /// Every file and directory under `src/`, relative to the repository, `/`-separated.
    src_paths: BTreeSet<String>,
}

impl Code {
    fn read(root: &Path) -> Code {
        let mut modules = Vec::new();
        for tree in ["src", "tests", "benches"] {
            let mut found = Vec::new();
            files::rust_files(&root.join(tree), &mut found);
            for file in found {
                modules.push((tree, files::module_of(&root.join(tree), &file), file));
            }
        }
        let mut src_paths = BTreeSet::new();
        let mut dirs = vec![root.join("src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                src_paths.insert(path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
                if path.is_dir() {
                    dirs.push(path);
                }
            }
        }
        Code { root: root.to_path_buf(), modules, src_paths }
    }

    /// The files of the modules `module` names: exactly from the crate root, or (not `exact`) any module whose path
    /// ends with it; each with the files of its descendants.
    fn module_files(&self, module: &[String], exact: bool) -> Vec<Vec<&PathBuf>> {
        let found = self.modules.iter().filter(|(tree, path, _)| match exact {
            true => *tree == "src" && path == module,
            false => path.ends_with(module),
        });
        found
            .map(|(tree, path, _)| {
                let below = self.modules.iter().filter(|(t, p, _)| t == tree && p.starts_with(path));
                below.map(|(_, _, file)| file).collect()
            })
            .collect()
    }

    fn path_exists(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        self.root.join(path).exists()
            || self.src_paths.contains(&format!("src/{path}"))
            || self.src_paths.iter().any(|p| p.ends_with(&format!("/{path}")))
    }

    /// Why a Rust path names nothing, if it does not.
    fn rust_path_problem(&self, text: &str) -> Option<String> {
        let segments: Vec<String> = text.trim_end_matches("()").split("::").map(str::to_string).collect();
        if segments[0].starts_with(char::is_uppercase) {
            return self.member_problem(&segments);
        }
        let (exact, segments) = match segments[0].as_str() {
            "crate" => (true, &segments[1..]),
            _ => (false, &segments[..]),
        };
        for split in (1..=segments.len()).rev() {
            let (module, rest) = segments.split_at(split);
            for files in self.module_files(module, exact) {
                if rest.iter().all(|item| defined(item, &files)) {
                    return None;
                }
            }
        }
        Some("no module it starts with defines the rest".to_string())
    }

    /// `Type::member`: a type of the crate with that member where it is defined or implemented.
    fn member_problem(&self, segments: &[String]) -> Option<String> {
        let [ty, member] = segments else { return Some("not `Type::member`".into()) };
        let definition = Regex::new(&format!(r"\b(struct|enum|trait|type)\s+{ty}\b|\bimpl\b[^{{;]*\b{ty}\b")).unwrap();
        let files: Vec<&PathBuf> = self
            .modules
            .iter()
            .map(|(_, _, file)| file)
            .filter(|file| definition.is_match(&std::fs::read_to_string(file).unwrap()))
            .collect();
        match files.is_empty() {
            true if FOREIGN_TYPES.contains(&ty.as_str()) => None,
            true => Some(format!("no type `{ty}` in the code")),
            false if defined(member, &files) => None,
            false => Some(format!("`{ty}` has no `{member}`")),
        }
    }
}

/// Whether one of `files` defines `name`: an item, a child module, a macro or an enum variant.
fn defined(name: &str, files: &[&PathBuf]) -> bool {
    let item = Regex::new(&format!(
        r"(?m)\b(fn|struct|enum|trait|type|const|static|mod)\s+{name}\b|macro_rules!\s*{name}\b|^\s*{name}\s*(,|\(|\{{|$)"
    ))
    .unwrap();
    files.iter().any(|file| item.is_match(&std::fs::read_to_string(file).unwrap()))
}

/// The text of every backticked span outside fenced blocks, with its line number.
fn backticked(doc: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (number, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            spans.extend(line.split('`').skip(1).step_by(2).map(|span| (number + 1, span.to_string())));
        }
    }
    spans
}

/// The names of the layer picture: (line, the entry's path under `src/`, the names its list gives).
fn picture(doc: &str) -> Vec<(usize, String, Vec<String>)> {
    let lines: Vec<&str> = doc.lines().collect();
    let Some(start) = lines.windows(2).position(|w| w[0].starts_with("```") && w[1] == "src/") else {
        return Vec::new();
    };
    let mut entries: Vec<(usize, String, String)> = Vec::new();
    let mut parents: Vec<(usize, String)> = vec![(0, "src".to_string())];
    for (at, line) in lines.iter().enumerate().skip(start + 2) {
        if line.starts_with("```") {
            break;
        }
        let indent = line.len() - line.trim_start().len();
        let (word, rest) = line.trim().split_once(char::is_whitespace).unwrap_or((line.trim(), ""));
        if !(word.ends_with('/') || word.ends_with(".rs")) {
            // A description going on from the entry above.
            if let Some(last) = entries.last_mut() {
                last.2.push_str(&format!(" {}", line.trim()));
            }
            continue;
        }
        parents.retain(|(depth, _)| *depth < indent);
        let path = format!("{}/{}", parents.last().unwrap().1, word.trim_end_matches('/'));
        if word.ends_with('/') {
            parents.push((indent, path.clone()));
        }
        entries.push((at + 1, path, if word.ends_with('/') { rest.trim().to_string() } else { String::new() }));
    }
    entries.into_iter().map(|(line, path, description)| (line, path, listed(&description))).collect()
}

/// The first word of each comma-separated item after the first `: `, parenthesized remarks aside.
fn listed(description: &str) -> Vec<String> {
    let Some((_, list)) = description.split_once(": ") else { return Vec::new() };
    let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    items.push(item);
    items.iter().filter_map(|i| i.split_whitespace().next()).map(str::to_string).collect()
}

/// The first column of each table whose header's first cell is `module`: (line, backticked names in it).
fn module_column(doc: &str) -> Vec<(usize, String)> {
    let mut names = Vec::new();
    let mut in_table = false;
    for (number, line) in doc.lines().enumerate() {
        let first = line.split('|').nth(1).map(str::trim);
        in_table = match first {
            Some("module") => true,
            Some(_) if in_table => {
                names.extend(first.unwrap().split('`').skip(1).step_by(2).map(|n| (number + 1, n.to_string())));
                true
            }
            _ => false,
        };
    }
    names
}

/// Every name of the page that names nothing, with its line and why.
fn missing(doc: &str, code: &Code) -> Vec<String> {
    let path = Regex::new(r"^([a-z_][a-z0-9_-]*((/[A-Za-z0-9_.-]+)+/?|/)|[a-z0-9_]+\.rs)$").unwrap();
    let rust_path = Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+(\(\))?$").unwrap();
    let column = module_column(doc);
    let mut problems = Vec::new();
    // A module of the table's first column is checked below, from the crate root.
    for (line, span) in backticked(doc).into_iter().filter(|name| !column.contains(name)) {
        if path.is_match(&span) && !code.path_exists(&span) {
            problems.push(format!("line {line}: `{span}`: no such file or directory"));
        } else if rust_path.is_match(&span)
            && let Some(problem) = code.rust_path_problem(&span)
        {
            problems.push(format!("line {line}: `{span}`: {problem}"));
        }
    }
    for (line, name) in column {
        let module: Vec<String> = name.split("::").map(str::to_string).collect();
        if code.module_files(&module, true).is_empty() {
            problems.push(format!("line {line}: module `{name}`: not a module of the crate"));
        }
    }
    for (line, entry, names) in picture(doc) {
        let module = files::module_of(&code.root.join("src"), &code.root.join(&entry));
        if !code.root.join(&entry).exists() {
            problems.push(format!("line {line}: picture: no `{entry}`"));
            continue;
        }
        // A directory that is no module (`bin/`) lists nothing.
        let files = code.module_files(&module, true).pop().unwrap_or_default();
        for name in names.iter().filter(|n| !defined(n, &files)) {
            problems.push(format!("line {line}: picture: `{entry}` has no `{name}`"));
        }
    }
    problems
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_architecture_page_names_only_what_exists() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let code = Code::read(&repo());
    assert!(picture(&doc).len() > 10, "the layer picture looks unread");
    assert!(module_column(&doc).len() > 15, "the modules table looks unread");
    let problems = missing(&doc, &code);
    assert!(problems.is_empty(), "docs/architecture.md names what does not exist:\n{}", problems.join("\n"));
}

#[test]
fn the_name_check_finds_made_up_names() {
    let doc = "\
```
src/
  logic/        pure decisions: catalog (real), paint (made up)
    status/     the status: conditions, driver
    paint.rs    made up
```

| module | does |
|---|---|
| `logic::status` | real |
| `logic::statuses` | made up |

Real: `src/logic/desired/mod.rs`, `logic/desired`, `status/conditions.rs`, `logic::desired::Stage`, `validate::validate`,
`Desired::in_order`, `Controller::for_stream`, `architecture::the_cycle_check_finds_a_cycle`,
and prose: `neurondra.io/config`, `Created`, `/metrics`, `<module>/tests.rs`.
Made up: `src/logic/paint.rs`, `validate::paint`, `Desired::paint`, `Brush::paint`, `brush::paint`.
";
    let found: Vec<String> = missing(doc, &Code::read(&repo()));
    let names: Vec<&str> = found.iter().map(|p| p.split('`').nth(1).unwrap()).collect();
    assert_eq!(
        names,
        [
            "src/logic/paint.rs",
            "validate::paint",
            "Desired::paint",
            "Brush::paint",
            "brush::paint",
            "logic::statuses",
            "src/logic",
            "src/logic/paint.rs",
        ],
        "{found:#?}"
    );
    assert!(found[6].ends_with("has no `paint`"), "{}", found[6]);
}
