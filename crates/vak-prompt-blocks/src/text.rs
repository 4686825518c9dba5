//! Which characters may reach a prompt prefix or a terminal (DECISIONS §11),
//! and the one escaping every printed input string goes through.
//!
//! Two audiences, one classification: [`is_forbidden`] names the characters
//! no prefix may ever contain (a save that has one is refused, a load removes
//! them); [`escape_line`] and [`escape_text`] make any string from input safe
//! to print, so a file name, key or file text cannot move the cursor, hide
//! output or forge a line of `vak`'s own report.

use std::borrow::Cow;
use std::fmt;

/// Whether `c` may never appear in a prompt prefix (DECISIONS §11): C0
/// controls other than tab and newline, DEL, C1 controls (NEL among them),
/// the line and paragraph separators, bidi embedding/override/isolate
/// controls, zero-width characters and the BOM, and Unicode tag characters.
pub fn is_forbidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}'
        | '\u{b}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{2028}' | '\u{2029}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200b}'..='\u{200d}'
        | '\u{2060}'
        | '\u{feff}'
        | '\u{e0000}'..='\u{e007f}')
}

/// Whether `text` holds a forbidden character. Every forbidden character is
/// a C0 control, DEL or outside ASCII, so a text of printable ASCII, tabs
/// and newlines (nearly every prompt file) is answered by a byte scan the
/// compiler vectorises; anything else is decoded and checked exactly.
pub fn has_forbidden(text: &str) -> bool {
    let maybe = |b: &u8| (*b < 0x20 && *b != b'\n' && *b != b'\t') || *b >= 0x7f;
    text.as_bytes().iter().any(maybe) && text.chars().any(is_forbidden)
}

/// Whether `c`, printed raw, could change what a terminal shows beyond
/// itself: every forbidden character plus the invisible direction marks.
pub fn is_unsafe_for_terminal(c: char) -> bool {
    is_forbidden(c)
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{2061}'..='\u{2064}'
        )
}

/// Whether `c` is one a load turns into a line break rather than removing:
/// CR (a CRLF pair becomes one LF), VT, FF, NEL and the Unicode line and
/// paragraph separators.
pub fn is_line_break_like(c: char) -> bool {
    matches!(
        c,
        '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// A forbidden character found in a text, and where (1-based line and
/// column, counted in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForbiddenChar {
    /// The character.
    pub ch: char,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for ForbiddenChar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {}, column {}",
            char_name(self.ch),
            self.line,
            self.column
        )
    }
}

/// The first character of `text` that may never reach a prefix, with its
/// position; `None` when the text is clean. A lone `\r` or a CRLF counts:
/// saves store LF line ends only.
pub fn first_forbidden(text: &str) -> Option<ForbiddenChar> {
    if !has_forbidden(text) {
        return None;
    }
    let (mut line, mut column) = (1, 0);
    for ch in text.chars() {
        if ch == '\n' {
            line += 1;
            column = 0;
            continue;
        }
        column += 1;
        if is_forbidden(ch) {
            return Some(ForbiddenChar { ch, line, column });
        }
    }
    None
}

/// A text as a load keeps it ([`clean`]), and the first character the
/// load had to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleaned<'a> {
    /// The text with LF line ends only and no forbidden character.
    pub text: Cow<'a, str>,
    /// The first character that was removed or turned into a line break,
    /// where it was in the original text; `None` when only CRLF line ends
    /// were changed (a formatting choice, not a hidden character).
    pub first: Option<ForbiddenChar>,
}

/// The text a load keeps (DECISIONS §11): a CRLF pair and a lone CR become
/// LF, and so do VT, FF, NEL, U+2028 and U+2029 ([`is_line_break_like`]);
/// every other forbidden character ([`is_forbidden`]) is removed. Linear in
/// the length of `text`; borrows when there is nothing to change.
pub fn clean(text: &str) -> Cleaned<'_> {
    if !has_forbidden(text) {
        return Cleaned {
            text: Cow::Borrowed(text),
            first: None,
        };
    }
    let mut out = String::with_capacity(text.len());
    let mut first = None;
    let (mut line, mut column) = (1, 0);
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == '\n' {
            line += 1;
            column = 0;
            out.push(ch);
            continue;
        }
        column += 1;
        if !is_forbidden(ch) {
            out.push(ch);
            continue;
        }
        if ch == '\r' && chars.peek() == Some(&'\n') {
            // A CRLF line end: the LF that follows is kept.
            continue;
        }
        if first.is_none() {
            first = Some(ForbiddenChar { ch, line, column });
        }
        if is_line_break_like(ch) {
            out.push('\n');
        }
    }
    Cleaned {
        text: Cow::Owned(out),
        first,
    }
}

/// `U+202E`: how a character is named in a message.
pub fn char_name(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let keep = |c: char| {
        if c == '\n' {
            keep_newlines
        } else if c == '\t' {
            true
        } else {
            !is_unsafe_for_terminal(c)
        }
    };
    if text.chars().all(keep) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if keep(c) {
            out.push(c);
        } else {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                _ => {
                    use fmt::Write as _;
                    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
                }
            }
        }
    }
    Cow::Owned(out)
}

/// `text` for a one-line message: newlines become `\n`, CR `\r`, every
/// other control or invisible formatting character `\u{1b}`-style.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// `text` for multi-line output: newlines and tabs stay, every other
/// control or invisible formatting character is escaped.
pub fn escape_text(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// Displays a string from input escaped for a one-line message
/// ([`escape_line`]); use it in `format!` and error messages.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape_line(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_what_moves_the_cursor() {
        assert_eq!(escape_line("ok name"), "ok name");
        assert_eq!(
            escape_line("a\u{1b}[2Kb\nc\rd\u{202e}"),
            "a\\u{1b}[2Kb\\nc\\rd\\u{202e}"
        );
        assert_eq!(escape_text("a\nb\u{7}"), "a\nb\\u{7}");
        assert_eq!(char_name('\u{202e}'), "U+202E");
        let found = first_forbidden("ok\nab\u{202e}c").unwrap();
        assert_eq!(found.to_string(), "U+202E at line 2, column 3");
        assert_eq!(first_forbidden("fine\n\ttext"), None);
        assert!(is_forbidden('\u{feff}') && is_forbidden('\u{e0041}') && is_forbidden('\r'));
        assert!(!is_forbidden('\n') && !is_forbidden('\t') && !is_forbidden('é'));
    }

    #[test]
    fn clean_turns_breaks_into_lf_and_removes_the_rest() {
        let plain = clean("a\nb\tc");
        assert!(matches!(plain.text, Cow::Borrowed("a\nb\tc")) && plain.first.is_none());
        let crlf = clean("a\r\nb\r\n");
        assert_eq!((crlf.text.as_ref(), crlf.first), ("a\nb\n", None));
        let hostile = clean(
            "\u{feff}- Never\u{202e} x\u{0}y\u{b}one\u{c}two\rthree\u{2028}four\u{85}five\u{e0041}",
        );
        assert_eq!(hostile.text, "- Never xy\none\ntwo\nthree\nfour\nfive");
        assert_eq!(
            hostile.first.unwrap().to_string(),
            "U+FEFF at line 1, column 1"
        );
        let later = clean("ok\r\nab\u{202e}c");
        assert_eq!(
            later.first.unwrap().to_string(),
            "U+202E at line 2, column 3"
        );
    }

    proptest! {
        #[test]
        fn the_byte_scan_agrees_with_the_character_rule(
            text in prop_oneof![any::<String>(), "[ -~\t\n\r\u{0}\u{7f}\u{85}\u{a0}\u{200b}\u{2028}é]{0,40}"]
        ) {
            prop_assert_eq!(has_forbidden(&text), text.chars().any(is_forbidden));
        }

        #[test]
        fn escaped_lines_hold_no_control_characters(text in any::<String>()) {
            let line = escape_line(&text);
            prop_assert!(!line.chars().any(|c| c.is_control() && c != '\t'));
            prop_assert!(!line.chars().any(is_unsafe_for_terminal));
            let multi = escape_text(&text);
            prop_assert!(!multi.chars().any(|c| c.is_control() && c != '\t' && c != '\n'));
        }

        #[test]
        fn cleaned_text_holds_no_forbidden_character(text in any::<String>()) {
            let cleaned = clean(&text);
            prop_assert!(!cleaned.text.chars().any(is_forbidden));
            prop_assert_eq!(clean(&cleaned.text).text, cleaned.text.clone());
            let only_crlf = !text.replace("\r\n", "\n").chars().any(is_forbidden);
            prop_assert_eq!(cleaned.first.is_none(), only_crlf);
        }
    }
}
