//! Which characters may reach a prompt prefix or a terminal,
//! and the one escaping every printed input string goes through.
//!
//! Two audiences, one classification: [`is_forbidden`] names the characters
//! no prefix may ever contain (a save that has one is refused, a load removes
//! them); [`escape_line`] and [`escape_text`] make any string from input safe
//! to print, so a file name, key or file text cannot move the cursor, hide
//! output or forge a line of `vak`'s own report.

use std::borrow::Cow;
use std::fmt;

/// Whether `c` may never appear in a prompt prefix: C0
/// controls other than tab and newline, DEL, C1 controls (NEL among them),
/// the line and paragraph separators, and every code point Unicode marks
/// `Default_Ignorable_Code_Point`, assigned or not: bidi controls and marks
/// (LRM, RLM, ALM), zero-width characters and the BOM, the soft hyphen,
/// the combining grapheme joiner, invisible operators, Hangul, Khmer and
/// Mongolian fillers and separators, interlinear annotation and the other
/// specials, shorthand and musical format controls, the whole tag and
/// supplementary-variation-selector block (U+E0000–E0FFF); and the other
/// format characters that show nothing (Egyptian hieroglyph format
/// controls, the Khitan filler, the musical null notehead). Each is a way
/// to put text in a prompt that a person reviewing it cannot see. The
/// variation selectors U+FE00–FE0F are judged by where they stand
/// ([`next_forbidden`]): after an emoji, FE0E and FE0F are part of it.
pub fn is_forbidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}'
        | '\u{b}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{ad}'
        | '\u{34f}'
        | '\u{61c}'
        | '\u{115f}'..='\u{1160}'
        | '\u{17b4}'..='\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{3164}'
        | '\u{feff}'
        | '\u{ffa0}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{13430}'..='\u{1343f}'
        | '\u{16fe4}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d159}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}')
}

/// [`is_forbidden`] as a table of inclusive code point ranges: what the
/// byte scan's [`STARTS_FORBIDDEN`] is derived from. A test checks, for
/// every `char`, that the table and the function agree.
const FORBIDDEN_RANGES: [(u32, u32); 22] = [
    (0x0, 0x8),
    (0xb, 0x1f),
    (0x7f, 0x9f),
    (0xad, 0xad),
    (0x34f, 0x34f),
    (0x61c, 0x61c),
    (0x115f, 0x1160),
    (0x17b4, 0x17b5),
    (0x180b, 0x180f),
    (0x200b, 0x200f),
    (0x2028, 0x202e),
    (0x2060, 0x206f),
    (0x3164, 0x3164),
    (0xfeff, 0xfeff),
    (0xffa0, 0xffa0),
    (0xfff0, 0xfffb),
    (0x13430, 0x1343f),
    (0x16fe4, 0x16fe4),
    (0x1bca0, 0x1bca3),
    (0x1d159, 0x1d159),
    (0x1d173, 0x1d17a),
    (0xe0000, 0xe0fff),
];

/// A variation selector of the basic block (U+FE00–FE0F).
fn is_variation_selector(c: char) -> bool {
    matches!(c, '\u{fe00}'..='\u{fe0f}')
}

/// A character an emoji presentation selector (U+FE0E text, U+FE0F emoji)
/// can vary: the symbols and pictographs that have both presentations.
fn is_emoji_base(c: char) -> bool {
    matches!(c,
        '\u{a9}' | '\u{ae}' | '\u{203c}' | '\u{2049}' | '\u{2122}' | '\u{2139}'
        | '\u{2194}'..='\u{21aa}'
        | '\u{231a}'..='\u{23ff}'
        | '\u{24c2}'
        | '\u{25aa}'..='\u{25fe}'
        | '\u{2600}'..='\u{27bf}'
        | '\u{2934}'..='\u{2935}'
        | '\u{2b05}'..='\u{2b55}'
        | '\u{3030}' | '\u{303d}' | '\u{3297}' | '\u{3299}'
        | '\u{1f000}'..='\u{1faff}')
}

/// Whether `selector` (a basic variation selector) between `prev` and
/// `next` varies nothing a reader sees, and so may carry a hidden message:
/// anything but FE0E or FE0F directly after an emoji or after a keycap's
/// base (`1`, `#` and `*` before U+20E3).
fn stray_selector(selector: char, prev: Option<char>, next: Option<char>) -> bool {
    if !matches!(selector, '\u{fe0e}' | '\u{fe0f}') {
        return true;
    }
    match prev {
        Some(p) if is_emoji_base(p) => false,
        Some('0'..='9' | '#' | '*') => next != Some('\u{20e3}'),
        _ => true,
    }
}

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
/// the ASCII ones themselves and a few lead bytes. Continuation bytes never
/// can, so a hit is always on a char boundary. (The variation selectors
/// U+FE00–FE0F begin with `EF`, which U+FEFF already sets.)
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
        let stray = || {
            let prev = text[..at].chars().next_back();
            let next = text[at + ch.len_utf8()..].chars().next();
            stray_selector(ch, prev, next)
        };
        if is_forbidden(ch) || (is_variation_selector(ch) && stray()) {
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
/// itself: the forbidden characters (which now take in the invisible
/// direction marks this once added to them).
pub fn is_unsafe_for_terminal(c: char) -> bool {
    is_forbidden(c)
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

/// The text a load keeps: a CRLF pair and a lone CR become
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
        // A selector is judged by what it follows in the text kept, so the
        // kept text is clean by the same rule.
        let stray = is_variation_selector(ch)
            && stray_selector(ch, out.chars().next_back(), chars.peek().copied());
        if !is_forbidden(ch) && !stray {
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
    /// The character rule with its context, char by char: the oracle the
    /// byte scan is held to.
    fn forbidden_by_chars(text: &str) -> Vec<bool> {
        let chars: Vec<char> = text.chars().collect();
        (0..chars.len())
            .map(|i| {
                let prev = i.checked_sub(1).map(|j| chars[j]);
                is_forbidden(chars[i])
                    || (is_variation_selector(chars[i])
                        && stray_selector(chars[i], prev, chars.get(i + 1).copied()))
            })
            .collect()
    }

    fn any_forbidden_by_chars(text: &str) -> bool {
        forbidden_by_chars(text).into_iter().any(|f| f)
    }

    fn clean_by_chars(text: &str) -> Cleaned<'_> {
        if !any_forbidden_by_chars(text) {
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
            let stray = is_variation_selector(ch)
                && stray_selector(ch, out.chars().next_back(), chars.peek().copied());
            if !is_forbidden(ch) && !stray {
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
        for (ch, forbidden) in text.chars().zip(forbidden_by_chars(text)) {
            if ch == '\n' {
                line += 1;
                column = 0;
                continue;
            }
            column += 1;
            if forbidden {
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
        assert_eq!(
            leads,
            [0xc2, 0xcd, 0xd8, 0xe1, 0xe2, 0xe3, 0xef, 0xf0, 0xf3]
        );
        // The selectors judged by place begin with a lead byte the table
        // already sets.
        for selector in ['\u{fe00}', '\u{fe0f}'] {
            let mut utf8 = [0; 4];
            let lead = selector.encode_utf8(&mut utf8).as_bytes()[0];
            assert!(STARTS_FORBIDDEN[usize::from(lead)]);
        }
    }

    #[test]
    fn invisible_characters_and_stray_variation_selectors_are_forbidden() {
        for hidden in [
            '\u{ad}',
            '\u{34f}',
            '\u{61c}',
            '\u{115f}',
            '\u{180e}',
            '\u{200e}',
            '\u{200f}',
            '\u{2061}',
            '\u{206a}',
            '\u{3164}',
            '\u{ffa0}',
            '\u{fff9}',
            '\u{1d173}',
            '\u{e0100}',
            '\u{e01ef}',
        ] {
            let text = format!("- be careful{hidden}.\n");
            assert!(first_forbidden(&text).is_some(), "{}", char_name(hidden));
            assert!(!has_forbidden(&clean(&text).text), "{}", char_name(hidden));
        }
        // Emoji keep their selector; a keycap keeps its own.
        for fine in [
            "I \u{2764}\u{fe0f} tests",
            "press 1\u{fe0f}\u{20e3}",
            "\u{263a}\u{fe0e}",
            "\u{a9}\u{fe0e} 2026",
            "\u{1f44d}\u{fe0f}",
        ] {
            assert_eq!(first_forbidden(fine), None, "{fine:?}");
        }
        // A selector after a letter, a blank or any other base varies
        // nothing: four hidden bits each.
        for bad in [
            "caf\u{e9}\u{fe00}",
            "\u{4e2d}\u{fe0e}",
            "\u{2800}\u{fe0f}",
            "\u{a0}\u{fe0f}",
            "\u{2764}\u{fe00}",
        ] {
            assert!(first_forbidden(bad).is_some(), "{bad:?}");
        }
        // Unassigned default-ignorable code points show nothing either.
        for hidden in [
            '\u{2065}',
            '\u{fff0}',
            '\u{e0080}',
            '\u{e0f49}',
            '\u{1bca0}',
            '\u{13430}',
        ] {
            assert!(is_forbidden(hidden), "{}", char_name(hidden));
        }
        // A hidden message carried by selectors after one visible character,
        // or after a letter, or at a line's start.
        let smuggled: String = std::iter::once('\u{2764}')
            .chain((0..16).map(|b| char::from_u32(0xfe00 + b).unwrap()))
            .collect();
        for bad in [smuggled.as_str(), "a\u{fe0f}", "\u{fe0f}x", "ok\n\u{fe01}"] {
            let found = first_forbidden(bad).unwrap_or_else(|| panic!("{bad:?}"));
            assert!(is_variation_selector(found.ch));
            let cleaned = clean(bad);
            assert!(!has_forbidden(&cleaned.text), "{:?}", cleaned.text);
        }
        // At most one selector is kept: one bit a visible emoji.
        assert_eq!(clean(&smuggled).text, "\u{2764}\u{fe0e}");
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
                "[ -~\t\n\r\u{0}\u{7f}\u{85}\u{a0}\u{a3}\u{200b}\u{2028}\u{202e}\u{2066}\u{feff}\u{fffd}\u{e0041}\u{e0100}\u{fe0f}\u{fe00}\u{2764}\u{20e3}é€]{0,80}",
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
            text in prop_oneof![any::<String>(), "[ -~\t\n\r\u{0}\u{7f}\u{85}\u{a0}\u{200b}\u{2028}é\u{fe0f}\u{2764}\u{20e3}]{0,40}"]
        ) {
            prop_assert_eq!(has_forbidden(&text), any_forbidden_by_chars(&text));
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
            prop_assert!(!any_forbidden_by_chars(&cleaned.text));
            prop_assert_eq!(clean(&cleaned.text).text, cleaned.text.clone());
            let only_crlf = !any_forbidden_by_chars(&text.replace("\r\n", "\n"));
            prop_assert_eq!(cleaned.first.is_none(), only_crlf);
        }
    }
}
