//! How a bounded list reads in one line of a condition, an event or a log: the first few, then how many more.

use std::fmt::{Display, Write};

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
}
