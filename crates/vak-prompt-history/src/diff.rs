//! Unified diffs between two texts.

use similar::TextDiff;
use vak_prompt_blocks::escape_line;

/// A unified diff (three lines of context) from `old` to `new`, with
/// `---`/`+++` headers naming them; empty only when the texts are equal. A
/// last line without a newline is marked `\ No newline at end of file`, as
/// `diff -u` does, so two versions that differ only there still show a
/// change. The names are paths and keys from input, escaped to one line
/// each: a directory named `a\n+++ b` must not forge a header.
pub fn unified_diff(old_name: &str, new_name: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .missing_newline_hint(true)
        .header(&escape_line(old_name), &escape_line(new_name))
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
    fn a_name_with_a_newline_stays_on_its_header_line() {
        let diff = unified_diff("pkg\n+++ forged", "b\u{1b}[2J", "x\n", "y\n");
        let headers: Vec<&str> = diff.lines().take(3).collect();
        assert_eq!(headers[0], "--- pkg\\n+++ forged", "{diff}");
        assert_eq!(headers[1], "+++ b\\u{1b}[2J", "{diff}");
        assert!(headers[2].starts_with("@@"), "{diff}");
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
