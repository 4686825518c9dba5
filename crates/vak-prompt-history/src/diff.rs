//! Unified diffs between two texts.

use similar::TextDiff;

/// A unified diff (three lines of context) from `old` to `new`, with
/// `---`/`+++` headers naming them; empty when the texts are equal. A text
/// that does not end in a newline gets one for the diff, so the last line
/// compares like every other.
pub fn unified_diff(old_name: &str, new_name: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    let old = with_newline(old);
    let new = with_newline(new);
    TextDiff::from_lines(old.as_str(), new.as_str())
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

fn with_newline(text: &str) -> String {
    let mut text = text.to_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified_diff("a", "b", "x\n", "x\n"), "");
    }

    #[test]
    fn a_changed_line_is_removed_and_added() {
        let diff = unified_diff("before", "after", "- one\n- two\n", "- one\n- three");
        assert!(diff.starts_with("--- before\n+++ after\n"), "{diff}");
        assert!(diff.contains("\n-- two\n"), "{diff}");
        assert!(diff.contains("\n+- three\n"), "{diff}");
        assert!(diff.contains("\n - one\n"), "{diff}");
    }

    #[test]
    fn from_nothing_every_line_is_added() {
        let diff = unified_diff("absent", "new", "", "a\nb\n");
        assert!(diff.contains("+a\n+b\n"), "{diff}");
    }
}
