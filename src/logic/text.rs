//! How a bounded list reads in one line of a condition, an event or a log: the first few, then how many more.

use std::borrow::Cow;
use std::fmt::{Display, Write};

/// The most an event's note may hold: the API server refuses a longer one (`events.k8s.io/v1`, 1 KiB, in bytes).
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `note` cut to at most `limit` bytes, on a character boundary, saying how many characters were left out. Notes
/// list things with `first_of`, which already names only the first few and counts the rest; only long names can
/// still pass the limit, and a cut in the middle of such a list must not count items it cannot see. A note within
/// the limit is returned as it is.
pub fn fit(note: &str, limit: usize) -> Cow<'_, str> {
    if note.len() <= limit {
        return Cow::Borrowed(note);
    }
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
mod tests;
