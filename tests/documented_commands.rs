//! Every command README.md and CONTRIBUTING.md tell a newcomer to run is run by `make test`, or is listed in
//! CONTRIBUTING.md ("Which test runs each command these pages give") as not run by CI, with the reason: a `make`
//! target or `hack/` script the pages name without a row fails here, and so does a row whose runner no longer
//! contains the text it is said to run the command as.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PAGES: [&str; 2] = ["README.md", "CONTRIBUTING.md"];
const HEADING: &str = "## Which test runs each command these pages give";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The spans in backticks of a table cell.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// One row of the table: the commands it covers, its runner (a file of the repository) or why CI runs none, and
/// the text the runner contains.
struct Row {
    commands: Vec<String>,
    run_by: String,
    evidence: String,
}

fn rows() -> Vec<Row> {
    let page = read("CONTRIBUTING.md");
    let table = page.split(HEADING).nth(1).unwrap_or_else(|| panic!("CONTRIBUTING.md has no {HEADING:?}"));
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 3, "a row has a command, its runner and what it runs: {line}");
            Row {
                commands: code_spans(cells[0]).into_iter().map(str::to_string).collect(),
                run_by: cells[1].to_string(),
                evidence: code_spans(cells[2]).join(""),
            }
        })
        .collect()
}

/// The commands the pages name: `make TARGET` (with the variables before it) and `hack/NAME.sh` (with its first
/// word after it when that is a subcommand), wherever they appear.
fn named_commands() -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for page in PAGES {
        for line in read(page).lines() {
            let words: Vec<&str> =
                line.split(|c: char| c.is_whitespace() || c == '`' || c == '(' || c == ')').collect();
            for (i, word) in words.iter().enumerate() {
                let next = words.get(i + 1).copied().unwrap_or("");
                if *word == "make" && next.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                    named.insert(format!("make {}", next.trim_end_matches([',', '.', ':', ';'])));
                } else if word.starts_with("hack/") && word.ends_with(".sh") {
                    named.insert(word.to_string());
                }
            }
        }
    }
    named
}

#[test]
fn every_command_the_pages_give_is_run_by_a_test_or_said_not_to_be() {
    let rows = rows();
    let covered: Vec<&str> = rows.iter().flat_map(|r| r.commands.iter().map(String::as_str)).collect();
    for command in named_commands() {
        assert!(
            covered.iter().any(|c| {
                *c == command || c.ends_with(&format!(" {command}")) || c.starts_with(&format!("{command} "))
            }),
            "CONTRIBUTING.md's {HEADING:?} has no row for `{command}`"
        );
    }
    for row in &rows {
        if let Some(reason) = row.run_by.strip_prefix("not in CI") {
            assert!(reason.len() > 20, "{:?}: not in CI needs its reason", row.commands);
            continue;
        }
        let runner = code_spans(&row.run_by)[0];
        assert!(!row.evidence.is_empty(), "{:?}: what {runner} runs it as", row.commands);
        assert!(
            read(runner).contains(&row.evidence),
            "{:?}: {runner} no longer contains {:?}",
            row.commands,
            row.evidence
        );
    }
}

/// The check above sees the commands where the pages write them: in code blocks, in backticks, and in prose.
#[test]
fn the_commands_are_found_wherever_the_pages_write_them() {
    let named = named_commands();
    for command in ["make demo", "make test", "make demo-down", "make bench", "hack/tools.sh", "hack/lint.sh"] {
        assert!(named.contains(command), "{command} not found in {named:?}");
    }
}
