use super::*;

const VALUES: &str = "\
# The file's header, nobody's description.

# The image.
image:
  # Where it comes from.
  repository: example/op
  tag: \"\"
# Pod security, one row.
podSecurityContext:
  runAsNonRoot: true
  runAsUser: 65532
nodeSelector: {}
# Extra arguments.
extraArgs: []
leaderElection:
  enabled: true
";

#[test]
fn leaves_are_rows_and_a_commented_mapping_without_commented_keys_is_one() {
    let rows = rows(VALUES).unwrap();
    let table: Vec<(&str, &str, &str)> =
        rows.iter().map(|r| (r.path.as_str(), r.default.as_str(), r.description.as_str())).collect();
    assert_eq!(
        table,
        [
            ("image.repository", "example/op", "Where it comes from."),
            ("image.tag", "\"\"", ""),
            ("podSecurityContext", r#"{"runAsNonRoot":true,"runAsUser":65532}"#, "Pod security, one row."),
            ("nodeSelector", "{}", ""),
            ("extraArgs", "[]", "Extra arguments."),
            ("leaderElection.enabled", "true", ""),
        ]
    );
}

#[test]
fn the_readme_has_the_chart_and_a_row_per_value() {
    let chart = "name: op\ndescription: Runs it.\nversion: 1.2.3\nappVersion: \"1.2.3\"\nkubeVersion: \">=1.34.0-0\"\n";
    let readme = generate(chart, VALUES).unwrap();
    assert!(readme.starts_with("# op\n\nRuns it.\n"), "{readme}");
    assert!(readme.contains("| `image.repository` | `example/op` | Where it comes from. |"), "{readme}");
    assert_eq!(readme.matches("\n| `").count(), 6, "{readme}");
}
