//! How a bounded list reads in one line of a condition, an event or a log: the first few, then how many more.

use std::borrow::Cow;
use std::fmt::{Display, Write};

/// The most an event's note may hold: the API server refuses a longer one (`events.k8s.io/v1`, 1 KiB, in bytes).
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `note` cut to at most `limit` bytes. A note is mostly a list ("devices turned unhealthy: a, b, ..."): it keeps
/// the first items that fit and says "… and N more" items; a note with no list to cut keeps what fits and says
/// how many more characters there were. A note within the limit is returned as it is.
pub fn fit(note: &str, limit: usize) -> Cow<'_, str> {
    if note.len() <= limit {
        return Cow::Borrowed(note);
    }
    let items: Vec<&str> = note.split(", ").collect();
    // The longest run of leading items that fits with its suffix (at least one item kept, at least one cut).
    let mut kept = String::new();
    for (shown, item) in items.iter().enumerate().take(items.len() - 1) {
        let candidate = if shown == 0 { item.to_string() } else { format!("{kept}, {item}") };
        if candidate.len() + format!(" … and {} more", items.len() - shown - 1).len() > limit {
            if shown > 0 {
                return Cow::Owned(format!("{kept} … and {} more", items.len() - shown));
            }
            break;
        }
        kept = candidate;
    }
    if !kept.is_empty() {
        return Cow::Owned(format!("{kept} … and 1 more"));
    }
    // No list, or its first item alone is too long: cut on a character boundary.
    let total = note.chars().count();
    let mut end = 0;
    for (count, (index, c)) in note.char_indices().enumerate() {
        let rest = total - count;
        if index + c.len_utf8() + format!(" … and {} more characters", rest - 1).len() > limit {
            return Cow::Owned(format!("{} … and {rest} more characters", &note[..end]));
        }
        end = index + c.len_utf8();
    }
    Cow::Borrowed(note)
}

/// The first `shown` of `items` joined by `separator`, then " and N more" for the rest.
pub fn first_of<T: Display>(items: impl IntoIterator<Item = T>, shown: usize, separator: &str) -> String {
    let mut text = String::new();
    let mut count = 0;
    for item in items {
        if count < shown {
            if count > 0 {
                text.push_str(separator);
            }
            let _ = write!(text, "{item}");
        }
        count += 1;
    }
    if count > shown {
        let _ = write!(text, " and {} more", count - shown);
    }
    text
}

#[cfg(test)]
mod tests {
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
    fn a_long_note_keeps_the_items_that_fit_and_counts_the_rest() {
        assert_eq!(fit("devices turned unhealthy: a, b", 100), "devices turned unhealthy: a, b", "short: as it is");
        let note = format!(
            "devices turned unhealthy: {}",
            (0..200).map(|i| format!("node-{i}/neuron-device-{i}")).collect::<Vec<_>>().join(", ")
        );
        let cut = fit(&note, EVENT_NOTE_LIMIT);
        assert!(cut.len() <= EVENT_NOTE_LIMIT && cut.len() > EVENT_NOTE_LIMIT - 40, "{}", cut.len());
        let shown = cut.matches(", ").count() + 1;
        assert!(cut.starts_with("devices turned unhealthy: node-0/neuron-device-0, node-1/"), "{cut}");
        assert!(cut.ends_with(&format!("/neuron-device-{} … and {} more", shown - 1, 200 - shown)), "{cut}");
    }

    #[test]
    fn a_long_note_without_a_list_is_cut_on_a_character() {
        let note = "é".repeat(600); // 1200 bytes
        let cut = fit(&note, EVENT_NOTE_LIMIT);
        assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
        let kept = cut.split(' ').next().unwrap().chars().count();
        assert!(cut.ends_with(&format!(" … and {} more characters", 600 - kept)), "{cut}");
        assert!(kept > 490, "{kept}");
    }
}
