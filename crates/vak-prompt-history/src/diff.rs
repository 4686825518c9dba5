//! Unified diffs between two texts.

use similar::TextDiff;

/// A unified diff (three lines of context) from `old` to `new`, with
/// `---`/`+++` headers naming them; empty only when the texts are equal. A
/// last line without a newline is marked `\ No newline at end of file`, as
/// `diff -u` does, so two versions that differ only there still show a
/// change.
pub fn unified_diff(old_name: &str, new_name: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .missing_newline_hint(true)
        .header(old_name, new_name)
        .to_string()
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
    fn a_missing_last_newline_is_a_change_and_is_marked() {
        let diff = unified_diff("before", "after", "- a", "- a\n");
        assert!(
            diff.contains("-- a\n\\ No newline at end of file\n+- a\n"),
            "{diff}"
        );
        let diff = unified_diff("before", "after", "x\n- a\n", "x\n- b");
        assert!(
            diff.ends_with("+- b\n\\ No newline at end of file\n"),
            "{diff}"
        );
    }

    #[test]
    fn from_nothing_every_line_is_added() {
        let diff = unified_diff("absent", "new", "", "a\nb\n");
        assert!(diff.contains("+a\n+b\n"), "{diff}");
    }
}
