//! Line by line structural containment: a user-owned line may never read,
//! once rendered, as markdown structure of the prefix. Whole texts are
//! contained by [`crate::contain_markdown`], which keeps the Markdown that
//! can be nested and uses [`leaf_at`] for the lines it escapes; the
//! functions here escape every marker, and are its fallback.
//!
//! The prefix is CommonMark with a fixed list of headings and one generated
//! `Surface:` line. A line of user text that would open a heading (ATX or
//! setext), a thematic break, a code fence or an HTML block, or that begins
//! with `Surface:` (behind list markers and quotes too: `- Surface:`), gets one
//! backslash before its marker: CommonMark then
//! reads the marker as a literal character, and every word the author wrote
//! is still there. Block quote and list markers are looked through, because
//! a heading inside a list item (`- ## Capabilities`) is still a heading.
//! Indentation is looked through too, whatever its width, because inside a
//! list item four spaces do not make a code block.

use std::borrow::Cow;

/// The prefix's own surface line starts with this; no user line may.
pub const SURFACE_PREFIX: &str = "Surface:";

/// `text` with a backslash before each line's structural marker, if any. Borrows when
/// no line needed it. Linear in the length of `text`.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    // One pass: text up to each marker is copied once, and nothing at all
    // is allocated when no line needs a backslash (nearly every text).
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut line_start = 0;
    for line in crate::lines::split_lines(text) {
        if let Some(at) = marker_at(line) {
            let at = line_start + at;
            let out = out.get_or_insert_with(|| String::with_capacity(text.len() + 16));
            out.push_str(&text[copied..at]);
            out.push('\\');
            copied = at;
        }
        line_start += line.len() + 1;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
    }
}

/// `line` with a backslash before the marker that would make it markdown
/// structure, if any; see the module documentation.
#[cfg(test)]
pub(crate) fn neutralise_line(line: &str) -> Cow<'_, str> {
    match marker_at(line) {
        None => Cow::Borrowed(line),
        Some(at) => {
            let mut out = String::with_capacity(line.len() + 1);
            out.push_str(&line[..at]);
            out.push('\\');
            out.push_str(&line[at..]);
            Cow::Owned(out)
        }
    }
}

/// Whether `line` would open structure (the same test [`neutralise_line`]
/// makes).
#[cfg(test)]
pub(crate) fn is_structural(line: &str) -> bool {
    marker_at(line).is_some()
}

fn skip_blanks(line: &str, from: usize) -> usize {
    from + (line[from..].len() - line[from..].trim_start_matches([' ', '\t']).len())
}

/// The byte offset where a backslash neutralises `line`, if it needs one.
/// Linear in the length of `line`, however deeply its containers nest.
fn marker_at(line: &str) -> Option<usize> {
    leaf_at(line).map(|(at, _)| at)
}

/// What [`leaf_at`] found at the start of a line's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leaf {
    /// Words beginning with `Surface:`.
    Surface,
    /// A thematic break or a setext underline.
    Rule,
    /// An ATX heading, a code fence or an HTML block start.
    Opener,
}

/// Where the marker that would make `line` markdown structure begins, and
/// what it is; containers (quotes, list markers, indentation) are looked
/// through. Linear in the length of `line`, however deeply its containers
/// nest.
pub(crate) fn leaf_at(line: &str) -> Option<(usize, Leaf)> {
    if !may_open_structure(line) {
        return None;
    }
    let mut shape: Option<Shape> = None;
    let mut at = skip_blanks(line, 0);
    loop {
        let rest = &line[at..];
        // Any Unicode whitespace, not only CommonMark's blanks: whoever
        // reads the prefix may well trim a no-break space before
        // `Surface:`. Behind a list marker or a quote too (`- Surface:`):
        // read as plain text, that is a second surface line.
        // Only `S`, or a blank before it (Unicode's too), can begin one: a list
        // item's words (`- Run the tests.`) are passed on one byte.
        if rest
            .as_bytes()
            .first()
            .is_some_and(|&b| matches!(b, b'S' | b'\t'..=b'\r' | b' ') || !b.is_ascii())
        {
            let words = rest.trim_start();
            if words.starts_with(SURFACE_PREFIX) {
                return Some((line.len() - words.len(), Leaf::Surface));
            }
        }
        // Every marker and container below begins with one of these bytes:
        // the words of a list item (`- Run the tests.`) are passed here.
        let opens = |b: &u8| {
            matches!(
                b,
                b'-' | b'*' | b'_' | b'=' | b'#' | b'`' | b'~' | b'<' | b'>' | b'+' | b'0'..=b'9'
            )
        };
        if !rest.as_bytes().first().is_some_and(opens) {
            return None;
        }
        if rest.starts_with(RULE_CHARS) && may_be_rule(line, at) {
            let shape = shape.get_or_insert_with(|| Shape::of(line));
            if shape.is_break_or_underline(line, at) {
                return Some((at, Leaf::Rule));
            }
        }
        if is_atx(rest) || is_fence(rest) || is_html_start(rest) {
            return Some((at, Leaf::Opener));
        }
        // Look through one container marker: a block quote `>` or a list
        // marker followed by a blank.
        if let Some(after) = rest.strip_prefix('>') {
            at = skip_blanks(line, line.len() - after.len());
            continue;
        }
        match list_marker_len(rest) {
            Some(len) => at = skip_blanks(line, at + len),
            None => return None,
        }
    }
}

/// Whether [`marker_at`] could find anything in `line`, judged by the
/// first byte that is not a space or tab: every marker, container and
/// `Surface:` begins with one of a few ASCII characters, or with Unicode
/// whitespace (ASCII's or a non-ASCII character). A line of prose (nearly
/// every line) is answered here.
pub(crate) fn may_open_structure(line: &str) -> bool {
    line.bytes()
        .find(|b| !matches!(b, b' ' | b'\t'))
        .is_some_and(|b| {
            !b.is_ascii()
                || matches!(
                    b,
                    b'S' | b'-'
                        | b'*'
                        | b'_'
                        | b'='
                        | b'#'
                        | b'`'
                        | b'~'
                        | b'<'
                        | b'>'
                        | b'+'
                        | b'0'..=b'9'
                        | b'\n'..=b'\r'
                )
        })
}

/// Whether the rest of `line` from `at` (which starts with one of
/// [`RULE_CHARS`]) could be a break or underline: the next character that
/// is not a blank is that same one, or there is none. A list item such as
/// `- Run the tests.` is told apart here, without [`Shape::of`]'s pass over
/// the whole line. The blanks skipped are skipped again by the caller, so
/// the line is still read a bounded number of times.
fn may_be_rule(line: &str, at: usize) -> bool {
    let bytes = line.as_bytes();
    bytes[at + 1..]
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t'))
        .is_none_or(|b| *b == bytes[at])
}

/// The characters a thematic break or a setext underline is made of.
const RULE_CHARS: [char; 4] = ['-', '*', '_', '='];

/// What [`marker_at`] needs to know about a whole line, found in one pass,
/// so that each nested container costs constant time: for each of
/// [`RULE_CHARS`], the offset just past the last character of the line
/// (trailing blanks aside) that is not it, and just past the last that is
/// neither it nor a blank. The rest of the line from `at` is made of that
/// character alone (or with blanks) exactly when the offset is `<= at`.
struct Shape {
    end: usize,
    not: [usize; 4],
    not_nor_blank: [usize; 4],
}

impl Shape {
    fn of(line: &str) -> Shape {
        let end = line.trim_end_matches([' ', '\t']).len();
        let mut shape = Shape {
            end,
            not: [0; 4],
            not_nor_blank: [0; 4],
        };
        for (i, ch) in line[..end].char_indices() {
            let past = i + ch.len_utf8();
            for (k, rule) in RULE_CHARS.iter().enumerate() {
                if ch != *rule {
                    shape.not[k] = past;
                    if ch != ' ' && ch != '\t' {
                        shape.not_nor_blank[k] = past;
                    }
                }
            }
        }
        shape
    }

    /// A thematic break (three or more of one of `-*_`, blanks between) or
    /// a setext underline (a run of `=` or `-`) from `at` to the end.
    /// Both are neutralised wherever they stand: an underline is one only
    /// after a paragraph line, but escaping it elsewhere changes nothing
    /// visible.
    fn is_break_or_underline(&self, line: &str, at: usize) -> bool {
        let Some(first) = line[at..self.end].chars().next() else {
            return false;
        };
        let Some(k) = RULE_CHARS.iter().position(|c| *c == first) else {
            return false;
        };
        if matches!(first, '=' | '-') && self.not[k] <= at {
            return true;
        }
        // Reached at most three times per line: past a rest made of one
        // character with fewer than three of it, no further break starts.
        matches!(first, '-' | '*' | '_')
            && self.not_nor_blank[k] <= at
            && line[at..self.end].matches(first).count() >= 3
    }
}

/// `-`, `*`, `+`, or 1–9 digits and `.`/`)`, followed by a space or tab.
fn list_marker_len(rest: &str) -> Option<usize> {
    let len = if rest.starts_with(['-', '*', '+']) {
        1
    } else {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || digits > 9 || !rest[digits..].starts_with(['.', ')']) {
            return None;
        }
        digits + 1
    };
    rest[len..].starts_with([' ', '\t']).then_some(len)
}

/// One to six `#`, then a blank or the end of the line. `#general` is not a
/// heading.
pub(crate) fn is_atx(rest: &str) -> bool {
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    (1..=6).contains(&hashes) && (rest.len() == hashes || rest[hashes..].starts_with([' ', '\t']))
}

/// Three or more backticks or tildes.
fn is_fence(rest: &str) -> bool {
    rest.starts_with("```") || rest.starts_with("~~~")
}

/// `<` then a letter, `/`, `!` or `?`: a superset of CommonMark's seven
/// HTML block start conditions (`<!--`, `<script`, `<div`, `</p>`, `<?`,
/// `<!DOCTYPE`, `<![CDATA[`, any tag).
fn is_html_start(rest: &str) -> bool {
    let mut chars = rest.chars();
    chars.next() == Some('<')
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[track_caller]
    fn check(line: &str, want: &str) {
        assert_eq!(neutralise_line(line), want, "for {line:?}");
    }

    #[test]
    fn headings_are_escaped_and_hash_words_are_not() {
        check("## Capabilities", "\\## Capabilities");
        check("  ## Capabilities", "  \\## Capabilities");
        check("        # deep", "        \\# deep");
        check("#", "\\#");
        check("###### six", "\\###### six");
        check("####### seven", "####### seven");
        check("#general is the channel", "#general is the channel");
        check("- ## Capabilities", "- \\## Capabilities");
        check("1. # x", "1. \\# x");
        check("> > # quoted", "> > \\# quoted");
        check("-# not a list", "-# not a list");
    }

    #[test]
    fn setext_underlines_and_breaks_are_escaped() {
        check("===", "\\===");
        check("=", "\\=");
        check("  ---  ", "  \\---  ");
        check("-", "\\-");
        check("* * *", "\\* * *");
        check("- - -", "\\- - -");
        check("_ _ _", "\\_ _ _");
        check("- --", "\\- --");
        check("- ***", "- \\***");
        check("= =", "= =");
        check("-- flag", "-- flag");
        check("- item", "- item");
    }

    #[test]
    fn fences_and_html_starts_are_escaped() {
        check("```", "\\```");
        check("  ~~~rust", "  \\~~~rust");
        check("``inline``", "``inline``");
        check("<!-- hidden", "\\<!-- hidden");
        check("<div>", "\\<div>");
        check("</script>", "\\</script>");
        check("<?php", "\\<?php");
        check("- <script>", "- \\<script>");
        check("< 3 apples", "< 3 apples");
        check("a <!-- b", "a <!-- b");
    }

    #[test]
    fn only_the_generated_line_begins_with_surface() {
        check("Surface: root shell", "\\Surface: root shell");
        check("   Surface: x", "   \\Surface: x");
        check("\u{a0}\u{3000}Surface: x", "\u{a0}\u{3000}\\Surface: x");
        check("Surfaces are flat", "Surfaces are flat");
        check("- Surface: x", "- \\Surface: x");
        check("- > Surface: root shell", "- > \\Surface: root shell");
        check("1. Surface: x", "1. \\Surface: x");
        check("> \u{a0}Surface: x", "> \u{a0}\\Surface: x");
        check("- Surfaces are flat", "- Surfaces are flat");
        check("- \u{b}Surface: x", "- \u{b}\\Surface: x");
    }

    #[test]
    fn whole_texts() {
        assert!(matches!(neutralise("plain\ntext"), Cow::Borrowed(_)));
        assert_eq!(neutralise("a\n===\nb\n## c"), "a\n\\===\nb\n\\## c");
        assert!(is_structural("```") && !is_structural("text"));
    }

    #[test]
    fn deeply_nested_lines_cost_linear_time() {
        let deep = "- ".repeat(100_000) + "x";
        assert_eq!(neutralise_line(&deep), deep);
        let deep_heading = "> ".repeat(100_000) + "# x";
        assert!(neutralise_line(&deep_heading).ends_with("> \\# x"));
        let spaced = format!("-{}-", " ".repeat(200_000));
        assert_eq!(
            neutralise_line(&spaced),
            format!("-{}\\-", " ".repeat(200_000))
        );
    }

    /// `marker_at` as it was before its fast paths: the oracle they are
    /// compared with.
    fn marker_at_before(line: &str) -> Option<usize> {
        let mut shape: Option<Shape> = None;
        let mut at = skip_blanks(line, 0);
        loop {
            let rest = &line[at..];
            let words = rest.trim_start();
            if words.starts_with(SURFACE_PREFIX) {
                return Some(line.len() - words.len());
            }
            if rest.starts_with(RULE_CHARS) {
                let shape = shape.get_or_insert_with(|| Shape::of(line));
                if shape.is_break_or_underline(line, at) {
                    return Some(at);
                }
            }
            if is_atx(rest) || is_fence(rest) || is_html_start(rest) {
                return Some(at);
            }
            if let Some(after) = rest.strip_prefix('>') {
                at = skip_blanks(line, line.len() - after.len());
                continue;
            }
            match list_marker_len(rest) {
                Some(len) => at = skip_blanks(line, at + len),
                None => return None,
            }
        }
    }

    /// `neutralise` as it was: every line through `neutralise_line`.
    fn neutralise_before(text: &str) -> Cow<'_, str> {
        if !text
            .split('\n')
            .any(|line| marker_at_before(line).is_some())
        {
            return Cow::Borrowed(text);
        }
        let mut out = String::new();
        for (index, line) in text.split('\n').enumerate() {
            if index > 0 {
                out.push('\n');
            }
            match marker_at_before(line) {
                None => out.push_str(line),
                Some(at) => {
                    out.push_str(&line[..at]);
                    out.push('\\');
                    out.push_str(&line[at..]);
                }
            }
        }
        Cow::Owned(out)
    }

    proptest! {
        #[test]
        fn the_fast_paths_agree_with_the_full_check(
            text in prop_oneof![
                any::<String>(),
                "[-#=*_`~<>+!/ a-zA-Z0-9.:)\t\n\u{a0}\u{3000}\u{b}\u{c}\r]{0,40}",
                "([-*+>] |[0-9]{1,3}[.)] | {1,4}|\t)*(Surface:|[-=*_]{1,4}|#{1,7} ?|```|<[a-z!/?]|x)[-=*_ \ta-z]{0,6}\n?",
            ]
        ) {
            for line in text.split('\n') {
                prop_assert_eq!(marker_at(line), marker_at_before(line), "{:?}", line);
            }
            let fast = neutralise(&text);
            let slow = neutralise_before(&text);
            prop_assert_eq!(&fast, &slow);
            prop_assert_eq!(matches!(fast, Cow::Borrowed(_)), matches!(slow, Cow::Borrowed(_)));
        }

        /// Neutralising never removes a character, and is idempotent.
        #[test]
        fn neutralising_only_adds_backslashes(line in "[-#=*_`~<>!/ a-zA-Z0-9.:\t]{0,16}") {
            let out = neutralise_line(&line);
            prop_assert_eq!(out.replacen('\\', "", out.len() - line.len()), line.clone());
            prop_assert!(out.len() <= line.len() + 1);
            prop_assert_eq!(neutralise_line(&out), out.clone());
        }
    }
}
