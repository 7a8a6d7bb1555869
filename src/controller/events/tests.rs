use super::grouped;

#[test]
fn one_warning_per_category_with_its_first_message_and_a_count() {
    let failures = vec![
        ("Forbidden", "applying A: forbidden".to_string()),
        ("ApplyFailed", "applying B: timed out".to_string()),
        ("Forbidden", "applying C: forbidden".to_string()),
        ("Forbidden", "applying D: forbidden".to_string()),
    ];
    assert_eq!(
        grouped(failures),
        [
            ("ApplyFailed", "applying B: timed out".to_string()),
            ("Forbidden", "applying A: forbidden (and 2 more alike)".to_string()),
        ]
    );
}
