use super::first_of;

#[test]
fn names_the_first_few_and_counts_the_rest() {
    assert_eq!(first_of(["a", "b"], 3, ", "), "a, b");
    assert_eq!(first_of(["a", "b", "c"], 3, ", "), "a, b, c");
    assert_eq!(first_of(["a", "b", "c", "d", "e"], 2, "; "), "a; b and 3 more");
    assert_eq!(first_of(Vec::<String>::new(), 2, ", "), "");
}

use super::{EVENT_NOTE_LIMIT, fit};

#[test]
fn a_long_list_keeps_its_own_count_of_what_it_leaves_out() {
    assert_eq!(fit("devices turned unhealthy: a, b", 100), "devices turned unhealthy: a, b", "short: as it is");
    // Eight names too long for one note, and 200 more that `first_of` already counted.
    let names = (0..208).map(|i| format!("{}-{i}", "x".repeat(300)));
    let note = format!("templates changed: {}", first_of(names, 8, ", "));
    let cut = fit(&note, EVENT_NOTE_LIMIT);
    assert!(cut.len() <= EVENT_NOTE_LIMIT && cut.len() > EVENT_NOTE_LIMIT - 40, "{}", cut.len());
    assert!(cut.starts_with("templates changed: xxx"), "{cut}");
    assert!(cut.ends_with(&format!(" … and {} more characters", note.chars().count() - cut.find(" … ").unwrap())));
    assert!(!cut.contains(" … and 3 more"), "no item count it cannot know: {cut}");
}

#[test]
fn a_long_note_is_cut_on_a_character() {
    let note = "é".repeat(600); // 1200 bytes, two per character
    let cut = fit(&note, EVENT_NOTE_LIMIT);
    assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
    let kept = cut.split(' ').next().unwrap().chars().count();
    assert!(cut.ends_with(&format!(" … and {} more characters", 600 - kept)), "{cut}");
    assert!(kept > 490, "{kept}");
}
