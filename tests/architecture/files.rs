//! The import graph between files: which file's code names which other file's items, with re-exports followed to
//! the file that defines the item (`use crate::controller::Context` is an edge to `controller/context.rs`, not to
//! `controller/mod.rs`), named ones (`pub use x::{A, B}`) and globs (`pub use x::*`: a name the module does not
//! define itself is looked up in the modules it glob-imports). A parent's `mod child;` is no edge; a `pub use` is an
//! edge only when the file's own code also names what it re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// One compilation unit's files: module path (from its root, `crate` = []) -> file.
pub struct Tree {
    pub files: BTreeMap<Vec<String>, PathBuf>,
    /// (file's module, the module paths in it resolve from, code): a file, and each inline `mod x { .. }` in it.
    code: Vec<(Vec<String>, Vec<String>, String)>,
    /// Per module: the names its `use`s bind, name -> absolute path, followed to the defining file.
    exports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    /// Per module: the names it re-exports by name (`pub use`), which a glob of it brings elsewhere.
    public: BTreeMap<Vec<String>, BTreeSet<String>>,
    /// Per module: the modules whose names it imports by glob (`use x::*`), each with whether it re-exports them.
    globs: BTreeMap<Vec<String>, Vec<(Vec<String>, bool)>>,
    /// Per module: the names of the items it defines (`struct`, `fn`, `const`, ...).
    defined: BTreeMap<Vec<String>, BTreeSet<String>>,
}

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `logic/health/mod.rs` -> ["logic", "health"]; `lib.rs` -> [].
pub fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// A module's unit tests (its `tests` child, inline or a file of its own) are not part of its imports.
pub fn is_test(module: &[String]) -> bool {
    module.iter().any(|m| m == "tests")
}

/// The code of a file without comments, string literals' contents and inline test modules.
pub fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    let strings =
        Regex::new(r###"(?s)'(?:[^'\\]|\\.)'|r##"(?:.)*?"##|r#"(?:.)*?"#|r"[^"]*"|"(?:[^"\\]|\\.)*""###).unwrap();
    let lines: Vec<&str> = body.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
    let joined = lines.join("\n");
    let code = strings.replace_all(&joined, |c: &regex::Captures| match c[0].starts_with('\'') {
        true => "' '",
        false => "\"\"",
    });
    // Comments at the end of a line, now that no string holds a `//`.
    Regex::new(r"//[^\n]*").unwrap().replace_all(&code, "").into_owned()
}

/// A file's code, and the body of each inline `mod x { .. }` in it apart (rustfmt's layout: the body ends at the `}`
/// of the line's indentation), each with the module its paths resolve from.
fn inline_modules(file: &[String], code: String) -> Vec<(Vec<String>, Vec<String>, String)> {
    let start = Regex::new(r"(?m)^( *)(?:pub(?:\([a-z]+\))? )?mod ([a-z_0-9]+) \{\n").unwrap();
    let mut outer = code.clone();
    let mut units = Vec::new();
    for c in start.captures_iter(&code) {
        let body_start = c.get(0).unwrap().end();
        let end = code[body_start..].find(&format!("\n{}}}", &c[1])).map_or(code.len(), |e| body_start + e);
        let body = &code[body_start..end];
        let mut scope = file.to_vec();
        scope.push(c[2].to_string());
        units.push((file.to_vec(), scope, body.to_string()));
        outer = outer.replacen(body, "", 1);
    }
    units.push((file.to_vec(), file.to_vec(), outer));
    units
}

/// `a::{b, c::{self, D as E}}` -> [(a::b, b), (a::c, c), (a::c::D, E)]: each leaf path with the name it binds.
fn expand(tree: &str) -> Vec<(Vec<String>, String)> {
    // `D as E` -> `D@E` before the spaces go.
    let tree = Regex::new(r"\s+as\s+").unwrap().replace_all(tree, "@").split_whitespace().collect::<String>();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once('@') {
            Some((p, a)) => (p, Some(a)),
            None => (tree.as_str(), None),
        };
        let mut parts: Vec<String> = path.split("::").filter(|p| !p.is_empty()).map(str::to_string).collect();
        if parts.last().is_some_and(|p| p == "self") {
            parts.pop();
        }
        let name = alias.map(str::to_string).or_else(|| parts.last().cloned()).unwrap_or_default();
        return vec![(parts, name)];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items.into_iter().filter(|i| !i.is_empty()).flat_map(|item| expand(&format!("{prefix}{item}"))).collect()
}

/// A path as written in `module` -> absolute (from the crate root), if it is the crate's at all.
fn absolute(module: &[String], children: &dyn Fn(&[String]) -> bool, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|p| p == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = module.to_vec();
            child.push(first.to_string());
            if !children(&child) {
                return None;
            }
        }
        None => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

impl Tree {
    /// The given files of one crate (or of the test support tree) under `root`.
    pub fn read(root: &Path, files: &[PathBuf]) -> Tree {
        let use_statement = Regex::new(r"(?s)\b(pub(?:\([a-z]+\))?\s+)?use\s+([^;]+);").unwrap();
        let item = Regex::new(
            r"\b(?:struct|enum|union|trait|type|fn|const|static|mod|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)",
        )
        .unwrap();
        let mut tree = Tree {
            files: BTreeMap::new(),
            code: Vec::new(),
            exports: BTreeMap::new(),
            public: BTreeMap::new(),
            globs: BTreeMap::new(),
            defined: BTreeMap::new(),
        };
        for file in files {
            let module = module_of(root, file);
            if is_test(&module) {
                continue;
            }
            tree.files.insert(module.clone(), file.clone());
            tree.code.extend(inline_modules(&module, code_of(&std::fs::read_to_string(file).unwrap())));
        }
        let modules: BTreeSet<Vec<String>> = tree.files.keys().cloned().collect();
        let children = |m: &[String]| modules.contains(m);
        // Any `use` binds a name its module's descendants may import (`use super::X`); `pub use` also for others.
        for (module, _, code) in tree.code.iter().filter(|(file, scope, _)| file == scope) {
            let defined = item.captures_iter(code).map(|c| c[1].to_string());
            tree.defined.entry(module.clone()).or_default().extend(defined);
            for statement in use_statement.captures_iter(code) {
                let public = statement.get(1).is_some();
                for (path, name) in expand(&statement[2]) {
                    let Some(full) = absolute(module, &children, &path) else { continue };
                    if name == "*" {
                        let glob = full[..full.len() - 1].to_vec();
                        tree.globs.entry(module.clone()).or_default().push((glob, public));
                        continue;
                    }
                    if public {
                        tree.public.entry(module.clone()).or_default().insert(name.clone());
                    }
                    tree.exports.entry(module.clone()).or_default().insert(name, full);
                }
            }
        }
        tree
    }

    /// The file that defines what `path` (absolute) names, re-exports followed (by name, then by glob).
    fn resolve(&self, path: &[String], depth: usize) -> Option<Vec<String>> {
        let module = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| self.files.contains_key(p))?;
        let Some(next) = path.get(module.len()).filter(|_| depth < 8) else { return Some(module) };
        let named = self.exports.get(&module).and_then(|e| e.get(next)).filter(|t| t.as_slice() != path).cloned();
        match named.or_else(|| self.through_glob(&module, next)) {
            Some(target) => {
                let mut followed = target;
                followed.extend(path[module.len() + 1..].iter().cloned());
                self.resolve(&followed, depth + 1).or(Some(module))
            }
            None => Some(module),
        }
    }

    /// `name` in the module one of `module`'s globs imports it from, unless `module` defines it itself.
    fn through_glob(&self, module: &[String], name: &str) -> Option<Vec<String>> {
        if self.defined.get(module).is_some_and(|d| d.contains(name)) {
            return None;
        }
        let globs = self.globs.get(module)?;
        let (from, _) = globs.iter().find(|(glob, _)| self.offers(glob, name, 0))?;
        let mut path = from.clone();
        path.push(name.to_string());
        Some(path)
    }

    /// Whether a glob import of `module` brings `name`: it defines it, re-exports it, or re-exports a glob that does.
    fn offers(&self, module: &[String], name: &str, depth: usize) -> bool {
        self.defined.get(module).is_some_and(|d| d.contains(name))
            || self.public.get(module).is_some_and(|p| p.contains(name))
            || (depth < 8
                && self
                    .globs
                    .get(module)
                    .into_iter()
                    .flatten()
                    .any(|(g, public)| *public && self.offers(g, name, depth + 1)))
    }

    /// Every (from, to) between files of the tree, tests excluded.
    pub fn edges(&self) -> BTreeSet<(PathBuf, PathBuf)> {
        let use_statement = Regex::new(r"(?s)\b(pub(?:\([a-z]+\))?\s+)?use\s+([^;]+);").unwrap();
        let inline = Regex::new(r"\b([a-z_][a-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
        let word = Regex::new(r"\b[A-Za-z_][A-Za-z0-9_]*\b").unwrap();
        let children = |m: &[String]| self.files.contains_key(m);
        let mut edges = BTreeSet::new();
        for (file, module, code) in &self.code {
            let own = use_statement.replace_all(code, "");
            let words: BTreeSet<&str> = word.find_iter(&own).map(|m| m.as_str()).collect();
            let mut paths = Vec::new();
            for statement in use_statement.captures_iter(code) {
                let public = statement.get(1).is_some();
                for (path, name) in expand(&statement[2]) {
                    if name == "*" {
                        // What a glob brings that the file's own code names.
                        let glob = &path[..path.len() - 1];
                        let Some(from) = absolute(module, &children, glob) else { continue };
                        for word in words.iter().filter(|w| self.offers(&from, w, 0)) {
                            let crate_path = ["crate".to_string()].into_iter().chain(from.iter().cloned());
                            paths.push(crate_path.chain([word.to_string()]).collect());
                        }
                    } else if !public || words.contains(name.as_str()) {
                        // A re-export the file itself does not use is no dependency of its code.
                        paths.push(path);
                    }
                }
            }
            for m in inline.find_iter(&own) {
                paths.push(m.as_str().split("::").map(str::to_string).collect());
            }
            for path in paths {
                let target = absolute(module, &children, &path).and_then(|p| self.resolve(&p, 0));
                if let Some(target) = target.filter(|t| t != file) {
                    edges.insert((self.files[file].clone(), self.files[&target].clone()));
                }
            }
        }
        edges
    }
}

/// The strongly connected components of more than one file (Tarjan's algorithm), each sorted.
pub fn cycles(edges: &BTreeSet<(PathBuf, PathBuf)>) -> Vec<Vec<PathBuf>> {
    let mut graph: BTreeMap<&PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (from, to) in edges {
        graph.entry(from).or_default().push(to);
        graph.entry(to).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(node: &'a PathBuf, graph: &BTreeMap<&'a PathBuf, Vec<&'a PathBuf>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for next in &graph[node] {
            if !s.index.contains_key(next) {
                visit(next, graph, s);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: vec![],
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(node, &graph, &mut state);
        }
    }
    state.found.sort();
    state.found
}
