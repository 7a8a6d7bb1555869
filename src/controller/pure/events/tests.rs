use super::grouped;
use crate::controller::pure::failure::Category;

#[test]
fn one_warning_per_category_with_its_first_message_and_a_count() {
    let failures = vec![
        (Category::Forbidden, "applying A: forbidden".to_string()),
        (Category::ApplyFailed, "applying B: timed out".to_string()),
        (Category::Forbidden, "applying C: forbidden".to_string()),
        (Category::Forbidden, "applying D: forbidden".to_string()),
    ];
    assert_eq!(
        grouped(failures),
        [
            (Category::ApplyFailed, "applying B: timed out".to_string()),
            (Category::Forbidden, "applying A: forbidden (and 2 more alike)".to_string()),
        ]
    );
}
