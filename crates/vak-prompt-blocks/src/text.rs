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

/// [`is_forbidden`] as a table of inclusive code point ranges: what the
/// byte scan's [`STARTS_FORBIDDEN`] is derived from. A test checks, for
/// every `char`, that the table and the function agree.
const FORBIDDEN_RANGES: [(u32, u32); 10] = [
    (0x0, 0x8),
    (0xb, 0x1f),
    (0x7f, 0x9f),
    (0x2028, 0x2029),
    (0x202a, 0x202e),
    (0x2066, 0x2069),
    (0x200b, 0x200d),
    (0x2060, 0x2060),
    (0xfeff, 0xfeff),
    (0xe0000, 0xe007f),
];

/// The first byte of `cp`'s UTF-8 encoding.
const fn lead_byte(cp: u32) -> usize {
    (if cp < 0x80 {
        cp
    } else if cp < 0x800 {
        0xc0 | (cp >> 6)
    } else if cp < 0x1_0000 {
        0xe0 | (cp >> 12)
    } else {
        0xf0 | (cp >> 18)
    }) as usize
}

/// Whether a byte can begin the UTF-8 encoding of a forbidden character:
/// the ASCII ones themselves and four lead bytes (`C2`, `E2`, `EF`, `F3`).
/// Continuation bytes never can, so a hit is always on a char boundary.
static STARTS_FORBIDDEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut range = 0;
    while range < FORBIDDEN_RANGES.len() {
        let (mut cp, last) = FORBIDDEN_RANGES[range];
        while cp <= last {
            table[lead_byte(cp)] = true;
            cp += 1;
        }
        range += 1;
    }
    table
};

/// The offset of the first byte at or after `from` that may begin a
/// forbidden character. Whole chunks are passed by comparisons without an
/// early exit, which the compiler vectorises: a chunk of printable ASCII,
/// tabs and newlines (nearly every prompt file) costs a few instructions.
fn next_suspicious(bytes: &[u8], from: usize) -> Option<usize> {
    const LANES: usize = 32;
    let maybe = |b: u8| ((b < 0x20) & (b != b'\n') & (b != b'\t')) | (b >= 0x7f);
    let starts = |b: &u8| STARTS_FORBIDDEN[usize::from(*b)];
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + LANES) {
        if chunk.iter().fold(false, |any, b| any | maybe(*b))
            && let Some(found) = chunk.iter().position(starts)
        {
            return Some(at + found);
        }
        at += LANES;
    }
    // The tail, shorter than a chunk, is passed the same way first: most
    // prompt files are a few chunks long, so it is a good part of the scan.
    let tail = bytes.get(at..)?;
    if !tail.iter().fold(false, |any, b| any | maybe(*b)) {
        return None;
    }
    tail.iter().position(starts).map(|found| at + found)
}

/// The byte offset of the first forbidden character of `text` at or after
/// `from` (a char boundary): only the characters the byte scan could not
/// pass are decoded.
fn next_forbidden(text: &str, mut from: usize) -> Option<usize> {
    while let Some(at) = next_suspicious(text.as_bytes(), from) {
        let ch = text[at..].chars().next()?;
        if is_forbidden(ch) {
            return Some(at);
        }
        from = at + ch.len_utf8();
    }
    None
}

/// The 1-based line of the character at `at`, and how many characters come
/// before it on its line.
fn position_of(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = 1 + before.bytes().filter(|b| *b == b'\n').count();
    (line, before[line_start..].chars().count())
}

/// Whether `text` holds a forbidden character. Every forbidden character is
/// a C0 control, DEL or begins with one of four lead bytes, so a text of
/// printable ASCII, tabs and newlines (nearly every prompt file) is answered
/// by a byte scan the compiler vectorises; only the characters that scan
/// cannot pass are decoded and checked exactly.
pub fn has_forbidden(text: &str) -> bool {
    next_forbidden(text, 0).is_some()
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
    let at = next_forbidden(text, 0)?;
    let ch = text[at..].chars().next()?;
    let (line, before) = position_of(text, at);
    Some(ForbiddenChar {
        ch,
        line,
        column: before + 1,
    })
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
    let Some(start) = next_forbidden(text, 0) else {
        return Cleaned {
            text: Cow::Borrowed(text),
            first: None,
        };
    };
    // Everything before the first forbidden character is kept as it is;
    // only the rest is walked character by character.
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    let mut first = None;
    let (mut line, mut column) = position_of(text, start);
    let mut chars = text[start..].chars().peekable();
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

    /// `clean` as it was before the byte scan: every character decoded and
    /// checked. The oracle the fast path is compared with.
    fn clean_by_chars(text: &str) -> Cleaned<'_> {
        if !text.chars().any(is_forbidden) {
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

    /// `first_forbidden` as it was before the byte scan.
    fn first_forbidden_by_chars(text: &str) -> Option<ForbiddenChar> {
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

    #[test]
    fn the_range_table_is_the_character_rule() {
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let cp = u32::from(c);
            let in_table = FORBIDDEN_RANGES
                .iter()
                .any(|(lo, hi)| (*lo..=*hi).contains(&cp));
            assert_eq!(in_table, is_forbidden(c), "{}", char_name(c));
            let mut utf8 = [0; 4];
            let lead = c.encode_utf8(&mut utf8).as_bytes()[0];
            assert_eq!(usize::from(lead), lead_byte(cp));
            if is_forbidden(c) {
                assert!(STARTS_FORBIDDEN[usize::from(lead)], "{}", char_name(c));
            }
        }
        let leads: Vec<usize> = (0x80..0x100).filter(|b| STARTS_FORBIDDEN[*b]).collect();
        assert_eq!(leads, [0xc2, 0xe2, 0xef, 0xf3]);
    }

    #[test]
    fn the_scan_finds_what_sits_past_whole_chunks() {
        for len in 0..100 {
            for bad in [
                "\u{0}",
                "\r",
                "\u{7f}",
                "\u{85}",
                "\u{202e}",
                "\u{feff}",
                "\u{e0041}",
            ] {
                let text = format!("{}é£€{bad}x", "a".repeat(len));
                assert_eq!(clean(&text), clean_by_chars(&text), "{text:?}");
                assert_eq!(first_forbidden(&text), first_forbidden_by_chars(&text));
            }
        }
    }

    proptest! {
        #[test]
        fn the_fast_clean_is_the_character_by_character_one(
            text in prop_oneof![
                any::<String>(),
                "[ -~\t\n\r\u{0}\u{7f}\u{85}\u{a0}\u{a3}\u{200b}\u{2028}\u{202e}\u{2066}\u{feff}\u{fffd}\u{e0041}\u{e0100}é€]{0,80}",
                "[a-z \n]{0,70}[\r\u{0}\u{202e}\u{2028}é]{0,2}[a-z \n]{0,70}",
            ]
        ) {
            let fast = clean(&text);
            let slow = clean_by_chars(&text);
            prop_assert_eq!(&fast, &slow);
            prop_assert_eq!(matches!(fast.text, Cow::Borrowed(_)), matches!(slow.text, Cow::Borrowed(_)));
            prop_assert_eq!(first_forbidden(&text), first_forbidden_by_chars(&text));
        }

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
