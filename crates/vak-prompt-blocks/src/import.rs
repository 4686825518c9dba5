//! Which lines of a block file are imports (`@parts/tone.md` alone on a
//! line), and whether what such a line names may be imported.
//!
//! Pure: this module reads text, never files; the loader resolves and reads
//! what an import names. A line is an import only when, outside a code
//! block and an HTML block (read by pulldown-cmark, the parser the prefix's
//! invariants are tested with), it holds nothing but `@` and one word that
//! reads as a path (it ends in `.md`; or begins with `/`, `~` or `.`; or has
//! a `/` and a file extension), with spaces or tabs around it. Anything
//! else that contains an `@` stays text: `me@example.com`, `@handle`,
//! `@acme/platform`, a sentence that mentions `@notes.md`, a bullet
//! `- @notes.md`, and `\@notes.md` (the backslash is CommonMark's escape,
//! rendered `@notes.md`). A path that may not be imported (`@/etc/passwd`,
//! `@../../.vak/token`, `@parts/notes.txt`) is an import line that
//! [`check_target`] refuses, so a path meant as an import is never passed
//! over silently.

use std::ops::Range;

use pulldown_cmark::{Event, Parser, Tag};

/// The most levels of imports below a block file: the block file imports
/// level 1, a file it imports level 2, and so on.
pub const MAX_IMPORT_DEPTH: usize = 4;

/// One import line of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportLine<'a> {
    /// Its line number, from 1.
    pub line: usize,
    /// The bytes of the line, its line break included: what the imported
    /// text takes the place of.
    pub span: Range<usize>,
    /// What follows the `@`, as written.
    pub target: &'a str,
}

/// Why what an import line names may not be imported. Each reads after
/// "the import `@…`".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetRefusal {
    /// `/etc/prompt.md`, `~/x.md`, `C:\x.md`.
    Absolute,
    /// A `..` component.
    Parent,
    /// An empty or hidden component (`.`, `.drafts`), a backslash, or a
    /// control or invisible character (a bidi override, a zero-width space):
    /// one file has one spelling a reader can see, and hidden files are no
    /// layer's.
    Unclean,
    /// Not a `.md` file.
    NotMarkdown,
}

impl TargetRefusal {
    /// A sentence fragment saying what is wrong and what to do.
    pub fn explain(self) -> &'static str {
        match self {
            TargetRefusal::Absolute => {
                "is an absolute path; an import names a `.md` file relative to the file that imports it, inside the same prompts directory"
            }
            TargetRefusal::Parent => {
                "goes up with `..`; an import names a `.md` file in the importing file's directory or below it"
            }
            TargetRefusal::Unclean => {
                "is not a plain relative path (an empty or hidden name such as `.` or `.drafts`, a backslash or a control character); write it as `@dir/file.md`"
            }
            TargetRefusal::NotMarkdown => {
                "does not name a `.md` file; only `.md` files are imported (write `\\@` to keep the line as text)"
            }
        }
    }
}

/// The import lines of `text`, in order. Linear in the length of `text`;
/// a text without `@` is not parsed.
pub fn import_lines(text: &str) -> Vec<ImportLine<'_>> {
    let mut lines = Vec::new();
    if !text.contains('@') {
        return lines;
    }
    let mut start = 0;
    let mut number = 0;
    while start < text.len() {
        number += 1;
        let end = text[start..]
            .find('\n')
            .map_or(text.len(), |at| start + at + 1);
        if let Some(target) = target_of(&text[start..end]) {
            lines.push(ImportLine {
                line: number,
                span: start..end,
                target,
            });
        }
        start = end;
    }
    if lines.is_empty() {
        return lines;
    }
    // Only now is the text parsed: a line inside a code block or an HTML
    // block is text, whatever it looks like. An indented code block's range
    // starts after the indentation, so a line is inside when they overlap.
    // A leading byte-order mark is not text (the loader removes it): parsed
    // with it, a fence on the first line would not open, and the line under
    // it would import here yet render as code.
    let skip = if text.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let verbatim: Vec<Range<usize>> = Parser::new(&text[skip..])
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::CodeBlock(_) | Tag::HtmlBlock) => {
                Some(range.start + skip..range.end + skip)
            }
            _ => None,
        })
        .collect();
    lines.retain(|l| {
        !verbatim
            .iter()
            .any(|r| r.start < l.span.end && l.span.start < r.end)
    });
    lines
}

/// What a line imports, if it is an import line.
fn target_of(line: &str) -> Option<&str> {
    // A byte-order mark (what some editors put before the first line) is a
    // hidden character the loader removes with a warning; left here, it
    // would turn the import under it into text without a word.
    let word = line.trim_matches([' ', '\t', '\r', '\n', '\u{feff}']);
    let target = word.strip_prefix('@')?;
    // A path meant as an import, even one that may not be imported
    // (`/etc/passwd`, `../../.vak/token`, `parts/notes.txt`), is an import
    // line, so it is refused by name rather than passed over as text; a
    // team mention such as `@acme/platform` stays text.
    let last = target.rsplit('/').next().unwrap_or(target);
    let looks_like_a_path = target.ends_with(".md")
        || target.starts_with(['/', '~', '.'])
        || (target.contains('/') && last.contains('.'));
    (!target.is_empty()
        && looks_like_a_path
        && !target.chars().any(|c| c == ' ' || c == '\t' || c == '@'))
    .then_some(target)
}

/// Whether `target` (what follows an `@`) may be imported: a relative path
/// of plain names, going nowhere up, ending in `.md`.
///
/// # Errors
///
/// The first rule it breaks.
pub fn check_target(target: &str) -> Result<(), TargetRefusal> {
    if target.starts_with(['/', '~']) || target.get(1..2) == Some(":") {
        return Err(TargetRefusal::Absolute);
    }
    if target.split('/').any(|part| part == "..") {
        return Err(TargetRefusal::Parent);
    }
    if target
        .split('/')
        .any(|part| part.is_empty() || part.starts_with('.'))
        || target
            .chars()
            .any(|c| c == '\\' || c.is_control() || crate::text::is_forbidden(c))
    {
        return Err(TargetRefusal::Unclean);
    }
    let file = target.rsplit('/').next().unwrap_or(target);
    if !file.ends_with(".md") || file == ".md" {
        return Err(TargetRefusal::NotMarkdown);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn targets(text: &str) -> Vec<&str> {
        import_lines(text).into_iter().map(|l| l.target).collect()
    }

    #[test]
    fn an_import_is_a_line_of_its_own() {
        assert_eq!(targets("@tone.md"), ["tone.md"]);
        assert_eq!(targets("Intro.\n@parts/tone.md\nMore."), ["parts/tone.md"]);
        // Surrounding spaces, tabs and a CRLF line end are allowed.
        assert_eq!(targets("  @tone.md \t\r\nnext"), ["tone.md"]);
        assert_eq!(targets("- rule\n  @more.md\n"), ["more.md"]);
        // A byte-order mark before the first line hides nothing.
        assert_eq!(targets("\u{feff}@tone.md\nnext"), ["tone.md"]);
        assert_eq!(targets("\u{feff}me@example.com"), Vec::<&str>::new());
        let lines = import_lines("a\r\n@b.md\r\nc");
        assert_eq!(lines[0].line, 2);
        assert_eq!(&"a\r\n@b.md\r\nc"[lines[0].span.clone()], "@b.md\r\n");
    }

    #[test]
    fn an_at_sign_in_prose_stays_text() {
        for text in [
            "me@example.com",
            "@handle",
            "@example.com",
            "Ask @alice about @notes.md first.",
            "- @notes.md",
            "> @notes.md",
            "\\@notes.md",
            "@two words.md",
            "@a@b.md",
            "@",
            "@acme/platform",
        ] {
            assert_eq!(targets(text), Vec::<&str>::new(), "{text:?}");
        }
    }

    #[test]
    fn code_and_html_blocks_are_text() {
        assert!(targets("```\n@tone.md\n```\n").is_empty());
        assert!(targets("~~~md\n@tone.md\n").is_empty(), "an unclosed fence");
        assert!(
            targets("text\n\n    @tone.md\n").is_empty(),
            "indented code"
        );
        assert!(targets("<!--\n@tone.md\n-->\n").is_empty());
        assert_eq!(targets("```\n@a.md\n```\n@b.md\n"), ["b.md"]);
    }

    #[test]
    fn a_path_meant_as_an_import_is_an_import_line_and_refused() {
        assert_eq!(targets("@/etc/passwd"), ["/etc/passwd"]);
        assert_eq!(targets("@../../.vak/token"), ["../../.vak/token"]);
        assert_eq!(targets("@parts/notes.txt"), ["parts/notes.txt"]);
        assert_eq!(targets("@~/x"), ["~/x"]);
        assert_eq!(check_target("/etc/passwd"), Err(TargetRefusal::Absolute));
        assert_eq!(check_target("/etc/x.md"), Err(TargetRefusal::Absolute));
        assert_eq!(check_target("~/x.md"), Err(TargetRefusal::Absolute));
        assert_eq!(check_target("C:x.md"), Err(TargetRefusal::Absolute));
        assert_eq!(check_target("../../.vak/token"), Err(TargetRefusal::Parent));
        assert_eq!(check_target("a/../b.md"), Err(TargetRefusal::Parent));
        assert_eq!(check_target("./b.md"), Err(TargetRefusal::Unclean));
        assert_eq!(check_target("a//b.md"), Err(TargetRefusal::Unclean));
        assert_eq!(check_target("a\\b.md"), Err(TargetRefusal::Unclean));
        assert_eq!(check_target("acme/team"), Err(TargetRefusal::NotMarkdown));
        assert_eq!(check_target("dir/.md"), Err(TargetRefusal::Unclean));
        assert_eq!(check_target("parts/tone.md"), Ok(()));
        assert_eq!(check_target(".hidden.md"), Err(TargetRefusal::Unclean));
        assert_eq!(check_target(".drafts/a.md"), Err(TargetRefusal::Unclean));
        // Names a reader cannot see as they are: a bidi override, a
        // zero-width space, a soft hyphen.
        for hidden in ["bad\u{202e}dm.md", "a\u{200b}b.md", "x\u{ad}y.md"] {
            assert_eq!(
                check_target(hidden),
                Err(TargetRefusal::Unclean),
                "{hidden:?}"
            );
        }
    }

    proptest! {
        /// A byte-order mark before the first line changes nothing about
        /// which lines import: the mark is a hidden character, not text.
        #[test]
        fn a_byte_order_mark_changes_no_import(
            lines in proptest::collection::vec(
                prop_oneof![
                    "@[a-z]{1,6}(/[a-z]{1,6}){0,2}\\.md",
                    "[ \t]{0,2}@[a-z]{1,6}\\.md[ \t]{0,2}",
                    "[a-z @.]{0,12}",
                    Just("```".to_owned()),
                ],
                1..6,
            ),
        ) {
            let text = lines.join("\n");
            let marked = format!("\u{feff}{text}");
            prop_assert_eq!(targets(&marked), targets(&text), "{:?}", text);
        }

        /// Whatever a line names, an accepted target is a relative path of
        /// plain, visible names that goes nowhere up and ends in `.md`.
        #[test]
        fn an_accepted_target_stays_below_its_directory(target in "[a-z./~:\\\\@-]{0,16}") {
            if check_target(&target).is_ok() {
                prop_assert!(!target.starts_with('/') && !target.starts_with('~'));
                prop_assert!(target.ends_with(".md"));
                for part in target.split('/') {
                    prop_assert!(!part.is_empty() && !part.starts_with('.'), "{target}");
                    prop_assert!(!part.contains('\\'));
                }
            }
        }

        /// Every import found is a whole line, outside any code block, and
        /// replacing each by nothing leaves every other byte in place.
        #[test]
        fn imports_are_whole_lines(text in "([a-z@ ./`~\\-]{0,12}\n){0,12}") {
            let mut last = 0;
            for import in import_lines(&text) {
                prop_assert!(import.span.start >= last);
                prop_assert!(import.span.start == 0 || text.as_bytes()[import.span.start - 1] == b'\n');
                let line = &text[import.span.clone()];
                prop_assert_eq!(line.trim(), format!("@{}", import.target));
                last = import.span.end;
            }
        }
    }
}
