use std::borrow::Cow;

use proptest::prelude::*;
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag};

use super::{contain_markdown, contain_parsed, needs_containment};

#[track_caller]
fn check(text: &str, want: &str) {
    assert_eq!(contain_markdown(text), want, "for {text:?}");
}

#[test]
fn headings_are_nested_under_the_section() {
    check("# Rust/codex-rs", "### Rust/codex-rs");
    check("## a\n### b", "### a\n#### b");
    check("## a\n\ntext\n\n### b\n", "### a\n\ntext\n\n#### b\n");
    check("#### deep\n##### deeper", "### deep\n#### deeper");
    check("# a\n#### b\n###### c", "### a\n###### b\n###### c");
    check("### already\n#### nested", "### already\n#### nested");
    check("#", "###");
    check("# closed #", "### closed #");
    check(
        "- ## in a list\n> # quoted",
        "- #### in a list\n> ### quoted",
    );
    check("1. # x\n   ## y", "1. ### x\n   #### y");
}

#[test]
fn hash_words_are_not_headings() {
    check("#general is the channel", "#general is the channel");
    check("####### seven", "####### seven");
    check("issue #12\n#general", "issue #12\n#general");
    assert!(matches!(
        contain_markdown("#general\n- a"),
        Cow::Borrowed(_)
    ));
}

#[test]
fn nothing_to_contain_is_borrowed() {
    for text in [
        "",
        "plain\ntext",
        "### a\n\nwords",
        "```rust\nfn main() {}\n```",
    ] {
        assert!(
            matches!(contain_markdown(text), Cow::Borrowed(_)),
            "{text:?}"
        );
    }
}

#[test]
fn closed_fences_are_kept_byte_for_byte() {
    let rust = "Build with:\n\n```rust\n# not a heading\n---\n<!--\nfn main() {}\n```\n\nDone.";
    check(rust, rust);
    let tildes = "~~~\n## inside\n```\n~~~";
    check(tildes, tildes);
    let long = "````md\n```\n# x\n```\n````\n# after";
    check(long, "````md\n```\n# x\n```\n````\n### after");
    let listed = "- Run:\n  ```sh\n  # a comment\n  cargo test\n  ```\n- # Then";
    check(
        listed,
        "- Run:\n  ```sh\n  # a comment\n  cargo test\n  ```\n- ### Then",
    );
}

#[test]
fn an_open_fence_is_closed_at_the_end() {
    check("```rust\nfn main() {}", "```rust\nfn main() {}\n```");
    check("```rust\nfn main() {}\n", "```rust\nfn main() {}\n```\n");
    check("~~~~\n# x\n~~~", "~~~~\n# x\n~~~\n~~~~");
    check("```", "```\n```");
    check("- a\n- ```\n  # x", "- a\n- ```\n  # x\n  ```");
    check("> ```\n> # x", "> ```\n> # x\n> ```");
    // A fence that its list item closes is not open at the end.
    check("- ```\n  code\n\n# next", "- ```\n  code\n\n### next");
}

#[test]
fn surface_lines_are_escaped_even_inside_fences() {
    check("Surface: root shell", "\\Surface: root shell");
    check("- Surface: x", "- \\Surface: x");
    check("> \u{a0}Surface: x", "> \u{a0}\\Surface: x");
    check(
        "```\n  Surface: x\n- Surface: y\n```",
        "```\n  \\Surface: x\n- Surface: y\n```",
    );
    check("<!-- a\nSurface: x -->", "<!-- a\n\\Surface: x -->");
    check("Surfaces are flat", "Surfaces are flat");
}

#[test]
fn setext_underlines_are_escaped() {
    check("Title\n=====\ntext", "Title\n\\=====\ntext");
    check("Title\n---", "Title\n\\---");
    check("> Title\n> ===", "> Title\n> \\===");
    // An escaped line cannot make the next one an underline.
    check("---\n===", "\\---\n\\===");
    check("a\n===\n===", "a\n\\===\n\\===");
}

#[test]
fn thematic_breaks_are_kept_only_where_they_cannot_end_a_list() {
    check("a\n\n---\n\nb", "a\n\n---\n\nb");
    check("# a\n\n***\n\n# b", "### a\n\n***\n\n### b");
    check("---\n\nb", "\\---\n\nb");
    check("- a\n\n---", "- a\n\n\\---");
    check("- a\n---", "- a\n\\---");
    check("- a\n- ***", "- a\n- \\***");
    check("a\n***", "a\n\\***");
}

#[test]
fn html_stays_only_when_it_closes() {
    let closed = "<!-- a note -->\ntext\n<!--\nlonger\n-->";
    check(closed, closed);
    check("<!-- never closed\n# x", "\\<!-- never closed\n### x");
    check("<!--\n<!--\n<!--\n# x", "\\<!--\n\\<!--\n\\<!--\n### x");
    // Inside a fence, an opener is code: left as it is.
    check("<!--\n```\n<?php\n```", "\\<!--\n```\n<?php\n```");
    check("<script>\nx\n</script>", "<script>\nx\n</script>");
    check("<script>\n# x", "\\<script>\n### x");
    // Only the matching end tag, in lower case, is sure to end it.
    check("<pre>\n</script>\n\n```", "\\<pre>\n</script>\n\n```\n```");
    check("<PRE>\nx\n</pre>", "<PRE>\nx\n</pre>");
    check("<?php\n# x", "\\<?php\n### x");
    check("<![CDATA[\n# x\n]]>", "<![CDATA[\n# x\n]]>");
    // A block that ends at a blank line ends before the next section.
    check("<div>\n# x\n</div>", "<div>\n# x\n</div>");
}

#[test]
fn a_first_line_means_the_same_after_a_paragraph() {
    // The surface note follows the generated line directly: a first line
    // that cannot interrupt a paragraph must not hide what follows it.
    check("<a href=x>\n# x", "\\<a href=x>\n### x");
    check(
        "2. ```\n   # x\n   ```",
        "2\\. ```\n   ### x\n   ```\n   ```",
    );
    check("1. ```\n   # x\n   ```", "1. ```\n   # x\n   ```");
    check("<div>\n# x", "<div>\n# x");
    check("</script>\n- ## x", "\\</script>\n- ### x");
    check("[x]: y\n'a\n# h\n'", "\\[x]: y\n'a\n### h\n'");
    check("[x] is fine\n# h", "[x] is fine\n### h");
    check("1. \n</script>\n```", "1\\. \n</script>\n```\n```");
    check(
        "* \n    ```\n  1) # x\n    ```",
        "\\* \n    ```\n  1) ### x\n    ```",
    );
    // Lines indented as code continue a paragraph before them, and so does
    // the first line after them.
    check(
        "    # \n2) # \n   ```\n- x",
        "    # \n2\\) # \n   ```\n- x\n   ```",
    );
}

#[test]
fn line_ends_stay_lf() {
    // Texts arrive cleaned: CR, CRLF and other line breaks are LF already,
    // and nothing added brings a CR back.
    for text in ["```\ncode\n", "```\ncode", "# a\nSurface: x\n---\n"] {
        assert!(!contain_markdown(text).contains('\r'), "{text:?}");
    }
}

#[test]
fn the_open_fence_oracle_sees_open_fences() {
    assert!(leaves_a_fence_open("```\ncode"));
    assert!(leaves_a_fence_open("- a\n\n~~~~\n~~~"));
    assert!(!leaves_a_fence_open("```\ncode\n```"));
    assert!(!leaves_a_fence_open("- ```\n  code\n\nnext"));
}

#[test]
fn a_backslash_that_changes_the_reading_is_read_again() {
    // Escaped, the break no longer ends the list: the last line joins the
    // item, where it is a heading.
    check("- ===\n---\n    # x", "- \\===\n\\---\n    ### x");
}

#[test]
fn hostile_repetition_costs_linear_time() {
    // No wall clock: each of these is megabytes, quadratic work would not
    // finish in any reasonable test time.
    for unit in [
        "<!--\n",
        "```\n",
        "# x\n",
        "- ",
        "> ",
        "===\n",
        "Surface: x\n",
        "a\n---\n",
        "- # x\n",
        "[",
        "*a",
        "`",
        "<a href=x>\n",
        "2. ",
    ] {
        let text = unit.repeat(1_000_000 / unit.len());
        let out = contain_markdown(&text);
        assert!(out.len() >= text.len(), "{unit:?}");
    }
}

/// The non-whitespace words of `text`, with every `#` and `\` removed.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.replace(['#', '\\'], ""))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether every word of `before` is in `after`, in order: containment
/// only adds (backslashes, `#`, a closing fence).
fn keeps_words(before: &str, after: &str) -> bool {
    let mut after = words(after).into_iter();
    words(before).iter().all(|w| after.any(|a| a == *w))
}

/// Whether a fenced code block of `text` runs to its end unclosed. A fence
/// inside a block quote is open only if a quoted line after the text would
/// still be read inside it: a blank line ends the quote and the fence.
fn leaves_a_fence_open(text: &str) -> bool {
    runs_to_the_end(text) && (!quoted_fence(text) || a_quoted_line_after_is_code(text))
}

/// Whether the last fence `text` opens is inside a block quote.
fn quoted_fence(text: &str) -> bool {
    let mut quoted = false;
    for (event, range) in Parser::new(text).into_offset_iter() {
        if let Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) = event {
            let line = text[..range.start].rfind('\n').map_or(0, |n| n + 1);
            quoted = text[line..range.start].contains('>');
        }
    }
    quoted
}

/// Whether `> SENTINEL` on the line after `text` is read as code.
fn a_quoted_line_after_is_code(text: &str) -> bool {
    let probe = format!("{}\n> SENTINEL", text.strip_suffix('\n').unwrap_or(text));
    let mut in_code = false;
    for event in Parser::new(&probe) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_code = true,
            Event::End(pulldown_cmark::TagEnd::CodeBlock) => in_code = false,
            Event::Text(t) if in_code && t.contains("SENTINEL") => return true,
            _ => {}
        }
    }
    false
}

/// Whether a fenced code block of `text` reaches its end with no closing
/// fence of its own.
fn runs_to_the_end(text: &str) -> bool {
    let mut open = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) => open = Some(range),
            Event::End(_) => {}
            _ => {}
        }
    }
    // An unclosed fence runs to the end of the text, and its last line is
    // not a closing fence.
    open.is_some_and(|range| {
        range.end >= text.trim_end().len() && {
            let body = &text[range.clone()];
            let last = body.trim_end().rsplit('\n').next().unwrap_or("");
            let last = last.trim_start_matches([' ', '\t', '>']);
            let first = body.trim_start_matches([' ', '\t']);
            let ch = first.chars().next().unwrap_or('`');
            let run = first.len() - first.trim_start_matches(ch).len();
            body.trim_end().find('\n').is_none()
                || !(last.trim_end().chars().all(|c| c == ch) && last.trim_end().len() >= run)
        }
    })
}

/// The levels of the headings CommonMark reads in `text`.
fn heading_levels(text: &str) -> Vec<usize> {
    Parser::new(text)
        .filter_map(|event| match event {
            Event::Start(Tag::Heading { level, .. }) => Some(level as usize),
            _ => None,
        })
        .collect()
}

/// `contained` rendered as a section's text after `before` (a heading line,
/// or a paragraph line as the surface note's), with a section after it:
/// whatever CommonMark reads, the headings of level 1 and 2 are the two
/// sections' own, no code or HTML block runs into the next section, and
/// only the generated line begins with `Surface:`.
fn check_in_prefix(before: &str, contained: &str) -> Result<(), TestCaseError> {
    let prefix = format!("## Section\n{before}{contained}\n\n## Next\nSurface: cli\n");
    let start = "## Section\n".len() + before.len();
    let end = start + contained.len();
    let mut top = Vec::new();
    for (event, range) in Parser::new(&prefix).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) if (level as usize) < 3 => {
                top.push(prefix[range].trim_end().to_owned());
            }
            Event::Start(Tag::CodeBlock(_) | Tag::HtmlBlock) => {
                prop_assert!(
                    range.end <= end + 1 || range.start >= end,
                    "a block at {:?} runs out of {}..{} in {:?}",
                    range,
                    start,
                    end,
                    prefix
                );
            }
            _ => {}
        }
    }
    prop_assert_eq!(top, vec!["## Section", "## Next"], "in {:?}", prefix);
    let surface = prefix
        .lines()
        .filter(|l| l.trim_start().starts_with("Surface:"))
        .count();
    prop_assert_eq!(
        surface,
        1 + usize::from(before.starts_with("Surface:")),
        "in {:?}",
        prefix
    );
    Ok(())
}

fn markdown_line() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "", " ", "   ", "    ", "\t", "- ", "  - ", "> ", "1. ", "2) ", "10. ", "* ", "> - ",
        ]),
        prop::sample::select(vec![
            "# ",
            "## ",
            "###### ",
            "####### ",
            "#general ",
            "```",
            "```rust",
            "~~~",
            "````",
            "===",
            "---",
            "***",
            "- - -",
            "<!--",
            "-->",
            "<div>",
            "<script>",
            "</script>",
            "<?php",
            "?>",
            "<!DOCTYPE",
            "Surface: ",
            "\u{a0}Surface: ",
            "",
            "text",
            "a b",
            "[x]: y",
            "<a href=x>",
            "<pre>",
            "</pre>",
            "<![CDATA[",
            "]]>",
            "'",
            "*",
            "1.",
            "+",
            "<details>",
            "</details>",
        ]),
        prop::sample::select(vec!["", "word", " more words", "`x`", " #", "-->"]),
    )
        .prop_map(|(lead, marker, rest)| format!("{lead}{marker}{rest}"))
}

fn markdown_text() -> impl Strategy<Value = String> {
    (prop::collection::vec(markdown_line(), 0..10), any::<bool>()).prop_map(|(lines, end)| {
        let mut text = lines.join("\n");
        if end {
            text.push('\n');
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn containment_keeps_words_and_is_stable(text in markdown_text()) {
        let once = contain_markdown(&text);
        prop_assert!(heading_levels(&once).iter().all(|l| *l >= 3), "{:?} became {:?}", text, once);
        prop_assert!(keeps_words(&text, &once), "{:?} became {:?}", text, once);
        prop_assert!(!leaves_a_fence_open(&once), "{:?} became {:?}", text, once);
        let twice = contain_markdown(&once);
        prop_assert_eq!(&twice, &once, "not stable on {:?}", text);
        check_in_prefix("", &once)?;
        check_in_prefix("Intro line.\n", &once)?;
        check_in_prefix("Surface: x\n", &once)?;
    }

    #[test]
    fn containment_of_any_text_keeps_words(text in any::<String>()) {
        let once = contain_markdown(&text);
        prop_assert!(keeps_words(&text, &once), "{:?} became {:?}", text, once);
        prop_assert!(!leaves_a_fence_open(&once), "{:?} became {:?}", text, once);
    }

    /// The first look that skips parsing is right: every text it passes
    /// over is one the parsed reading leaves exactly as it is.
    #[test]
    fn a_text_passed_over_unparsed_is_one_parsing_keeps(text in prose_or_markdown_text()) {
        if !needs_containment(&text) {
            prop_assert_eq!(contain_parsed(&text), Cow::Borrowed(text.as_str()));
        }
    }
}

/// Lines of prose and bullets of prose, mixed with the Markdown of
/// [`markdown_line`]: most texts are passed over, some are parsed.
fn prose_or_markdown_text() -> impl Strategy<Value = String> {
    let prose = (
        prop::sample::select(vec![
            "", " ", "  ", "    ", "\t", "- ", "* ", "+ ", "  - ", "    - ", "-\t", "- - ", "1. ",
            "> ", "-     ", "    ", "  * ",
        ]),
        prop::sample::select(vec![
            "Read before writing.",
            "Stay inside the tree.",
            "S",
            "Surface",
            "Surface:",
            "SURFACE: cli",
            "`changelog`: the changelog skill",
            "`docs` (command `docs-mcp`)",
            "`unclosed span",
            "``two`` ticks",
            "` ``` `",
            "```",
            "```rust",
            "~~~",
            "`",
            "run `cargo test` first",
            "never <!-- this",
            "[x]: y",
            "a [link](x) and *stress*",
            "do not # heading",
            "word ---",
            "Surface: cli",
            "\u{a0}Surface: cli",
            "",
            "===",
            "---",
        ]),
    )
        .prop_map(|(lead, words)| format!("{lead}{words}"));
    let line = prop_oneof![3 => prose, 1 => markdown_line()];
    (prop::collection::vec(line, 0..12), any::<bool>()).prop_map(|(lines, end)| {
        let mut text = lines.join("\n");
        if end {
            text.push('\n');
        }
        text
    })
}

#[test]
fn a_fence_its_block_quote_already_ended_is_not_closed_again() {
    // The blank line ends the quote and its fence: a fence appended under
    // a `>` would open a second one that nothing closes.
    check("> ```\n ", "> ```\n ");
    check("> ```\n> code\n\n", "> ```\n> code\n\n");
    // Still open under its quote: closed there.
    check("> ```\n> code\n", "> ```\n> code\n> ```\n");
}
