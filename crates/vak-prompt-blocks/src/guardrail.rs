//! The guardrail bullet parser.
//!
//! A guardrails file is a markdown list: one guardrail per top-level bullet
//! (`-`, `*`, `+`, or `1.` / `1)`). Indented lines and following non-bullet
//! lines continue the bullet above them. Prose before the first bullet is kept
//! as one guardrail, because dropping text from the safety floor is worse than
//! an odd-looking item, and is reported as a lint. A markdown heading is no
//! exception: it is kept as guardrail text like any other line (the
//! renderer escapes it, DECISIONS §11) and reported. `#general` is not a
//! heading at all (CommonMark needs a blank after the `#`s).

/// One guardrail: the text of a bullet, its continuation lines included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Guardrail {
    /// The bullet's first line without its marker, then each continuation
    /// line without leading whitespace, joined by `\n`.
    pub text: String,
}

impl Guardrail {
    /// The key two guardrails are compared by: whitespace folded.
    pub fn dedup_key(&self) -> String {
        fold_whitespace(&self.text)
    }

    /// The guardrail as one markdown bullet, continuation lines indented.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(self.text.len() + 4);
        for (index, line) in self.text.lines().enumerate() {
            if index == 0 {
                out.push_str("- ");
            } else {
                out.push_str("\n  ");
            }
            out.push_str(line);
        }
        out
    }
}

/// Something odd in a guardrails file that the user should hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardrailLint {
    /// Text before the first bullet, kept as one guardrail.
    ProseBeforeFirstBullet {
        /// 1-based line number where the prose starts.
        line: usize,
    },
    /// The same guardrail twice in one file; the later one is dropped.
    Duplicate {
        /// 1-based line number of the repeated bullet.
        line: usize,
        /// The guardrail, whitespace folded.
        text: String,
    },
    /// A markdown heading, kept as guardrail text.
    HeadingKept {
        /// 1-based line number of the heading.
        line: usize,
    },
}

impl std::fmt::Display for GuardrailLint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuardrailLint::ProseBeforeFirstBullet { line } => write!(
                f,
                "line {line}: text before the first bullet is kept as one guardrail; start each guardrail with `- `"
            ),
            GuardrailLint::Duplicate { line, text } => {
                write!(f, "line {line}: duplicate guardrail `{text}` is dropped")
            }
            GuardrailLint::HeadingKept { line } => write!(
                f,
                "line {line}: a heading is kept as guardrail text; guardrails are bullets"
            ),
        }
    }
}

/// The guardrails found in one text, in order, with lints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedGuardrails {
    /// Guardrails in file order, duplicates within the file removed.
    pub items: Vec<Guardrail>,
    /// Each item's [`Guardrail::dedup_key`], in the same order, so a caller
    /// deduplicating across files does not fold every text again.
    pub keys: Vec<String>,
    /// What the user should fix.
    pub lints: Vec<GuardrailLint>,
}

/// Collapse every run of whitespace to one space and trim the ends.
pub fn fold_whitespace(text: &str) -> String {
    // Most guardrails are ASCII words separated by single spaces: already
    // folded. (Every byte below 0x80 that `char::is_whitespace` accepts is
    // tab, LF, VT, FF, CR or space.)
    let bytes = text.as_bytes();
    let folded = bytes.first() != Some(&b' ')
        && bytes.last() != Some(&b' ')
        && bytes
            .iter()
            .all(|b| *b < 0x80 && !matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
        && !text.contains("  ");
    if folded {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// If `line` starts a top-level bullet, the text after its marker.
fn bullet_body(line: &str) -> Option<&str> {
    // Two or more leading spaces (or a tab) make a line a continuation, so a
    // nested list stays inside its parent guardrail.
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent >= 2 || line.starts_with('\t') {
        return None;
    }
    let rest = &line[indent..];
    let after_marker = if let Some(stripped) = rest.strip_prefix(['-', '*', '+']) {
        stripped
    } else {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || digits > 9 {
            return None;
        }
        rest[digits..].strip_prefix(['.', ')'])?
    };
    if after_marker.is_empty() {
        return Some("");
    }
    after_marker
        .strip_prefix([' ', '\t'])
        .map(|body| body.trim())
}

/// Parse a guardrails file into guardrails and lints. Never fails: every
/// word of the text ends up in some guardrail.
pub fn parse_guardrails(text: &str) -> ParsedGuardrails {
    let mut parsed = ParsedGuardrails::default();
    // The guardrail being read: its first line number and its lines joined
    // by `\n` as they come (no per-guardrail vector of lines).
    let mut current: Option<(usize, String)> = None;
    let mut seen_bullet = false;

    // Keys already kept. A file of a few guardrails is checked by scanning
    // them; a set is built only past that, so a huge file stays linear.
    const SCAN: usize = 16;
    let mut keys = std::collections::HashSet::new();
    let mut finish = |current: &mut Option<(usize, String)>, parsed: &mut ParsedGuardrails| {
        if let Some((line, text)) = current.take() {
            let trimmed = text.trim();
            if trimmed.is_empty() {
                return;
            }
            let text = if trimmed.len() == text.len() {
                text
            } else {
                trimmed.to_owned()
            };
            let guardrail = Guardrail { text };
            let key = guardrail.dedup_key();
            let seen = if parsed.keys.len() <= SCAN {
                parsed.keys.contains(&key)
            } else {
                if keys.is_empty() {
                    keys.extend(parsed.keys.iter().cloned());
                }
                keys.contains(&key)
            };
            if seen {
                parsed
                    .lints
                    .push(GuardrailLint::Duplicate { line, text: key });
            } else {
                if !keys.is_empty() {
                    keys.insert(key.clone());
                }
                parsed.keys.push(key);
                parsed.items.push(guardrail);
            }
        }
    };

    for (index, raw_line) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw_line.trim_end();
        let indent = line.len() - line.trim_start_matches(' ').len();
        if indent <= 3 && crate::structure::is_atx(&line[indent..]) {
            parsed
                .lints
                .push(GuardrailLint::HeadingKept { line: line_no });
        }
        if let Some(body) = bullet_body(line) {
            finish(&mut current, &mut parsed);
            seen_bullet = true;
            current = Some((line_no, body.to_owned()));
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        match current.as_mut() {
            Some((_, lines)) => {
                lines.push('\n');
                lines.push_str(trimmed);
            }
            None => {
                if !seen_bullet {
                    parsed
                        .lints
                        .push(GuardrailLint::ProseBeforeFirstBullet { line: line_no });
                }
                current = Some((line_no, trimmed.to_owned()));
            }
        }
    }
    finish(&mut current, &mut parsed);
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn texts(parsed: &ParsedGuardrails) -> Vec<&str> {
        parsed.items.iter().map(|g| g.text.as_str()).collect()
    }

    #[test]
    fn bullets_of_every_marker() {
        let parsed = parse_guardrails("- one\n* two\n+ three\n1. four\n2) five\n");
        assert_eq!(texts(&parsed), ["one", "two", "three", "four", "five"]);
        assert!(parsed.lints.is_empty());
    }

    #[test]
    fn continuation_lines_belong_to_their_bullet() {
        let parsed = parse_guardrails(
            "- never run `rm -rf`\n  outside the work tree\n- ask first\nbefore pushing\n\n  - nested detail\n",
        );
        assert_eq!(
            texts(&parsed),
            [
                "never run `rm -rf`\noutside the work tree",
                "ask first\nbefore pushing\n- nested detail"
            ]
        );
        assert_eq!(
            parsed.items[0].render(),
            "- never run `rm -rf`\n  outside the work tree"
        );
    }

    #[test]
    fn prose_before_first_bullet_is_kept_and_linted() {
        let parsed = parse_guardrails("Be careful here.\nReally.\n- one\n");
        assert_eq!(texts(&parsed), ["Be careful here.\nReally.", "one"]);
        assert_eq!(
            parsed.lints,
            [GuardrailLint::ProseBeforeFirstBullet { line: 1 }]
        );
    }

    #[test]
    fn duplicates_in_one_file_are_dropped_with_a_lint() {
        let parsed = parse_guardrails("- never  push\n-   never push \n");
        assert_eq!(texts(&parsed), ["never  push"]);
        assert!(matches!(
            parsed.lints[0],
            GuardrailLint::Duplicate { line: 2, .. }
        ));
    }

    #[test]
    fn not_bullets() {
        let parsed = parse_guardrails("- a\n**bold** continues\n---\n-b\n");
        assert_eq!(texts(&parsed), ["a\n**bold** continues\n---\n-b"]);
    }

    #[test]
    fn headings_are_kept_and_linted() {
        let parsed = parse_guardrails("# Guardrails\n- a\n## More\n- b\n");
        assert_eq!(texts(&parsed), ["# Guardrails", "a\n## More", "b"]);
        assert_eq!(
            parsed.lints,
            [
                GuardrailLint::HeadingKept { line: 1 },
                GuardrailLint::ProseBeforeFirstBullet { line: 1 },
                GuardrailLint::HeadingKept { line: 3 },
            ]
        );
    }

    #[test]
    fn hash_words_are_not_headings() {
        let parsed = parse_guardrails("- Post status updates only in\n#general, never in DMs.\n");
        assert_eq!(
            texts(&parsed),
            ["Post status updates only in\n#general, never in DMs."]
        );
        assert!(parsed.lints.is_empty());
    }

    #[test]
    fn empty_text_has_no_guardrails() {
        assert!(parse_guardrails("").items.is_empty());
        assert!(parse_guardrails("\n\n-\n").items.is_empty());
    }

    proptest! {
        #[test]
        fn the_folding_fast_path_agrees_with_splitting(
            text in prop_oneof![any::<String>(), "[a-z \t\n\r\u{b}\u{c}\u{a0}\u{3000}é]{0,30}"]
        ) {
            let slow = text.split_whitespace().collect::<Vec<_>>().join(" ");
            prop_assert_eq!(fold_whitespace(&text), slow);
        }

        #[test]
        fn many_guardrails_keep_each_key_once_in_first_order(
            bodies in proptest::collection::vec("[ab]{1,3}", 0..80)
        ) {
            let text: String = bodies.iter().map(|b| format!("- {b}\n")).collect();
            let parsed = parse_guardrails(&text);
            let mut expected: Vec<String> = Vec::new();
            for body in &bodies {
                if !expected.contains(body) {
                    expected.push(body.clone());
                }
            }
            prop_assert_eq!(texts(&parsed), expected.iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(parsed.lints.len(), bodies.len() - expected.len());
        }

        #[test]
        fn keys_are_the_items_dedup_keys(lines in proptest::collection::vec("[-* a-z]{0,12}", 0..12)) {
            let parsed = parse_guardrails(&lines.join("\n"));
            let keys: Vec<String> = parsed.items.iter().map(Guardrail::dedup_key).collect();
            prop_assert_eq!(parsed.keys, keys);
        }

        /// No word is ever lost by the parser, headings included.
        #[test]
        fn every_word_survives(lines in proptest::collection::vec("[-*+# a-z0-9.]{0,12}", 0..12)) {
            let text = lines.join("\n");
            let parsed = parse_guardrails(&text);
            let all: String = parsed.items.iter().map(|g| g.text.clone()).collect::<Vec<_>>().join(" ");
            let kept = fold_whitespace(&all);
            for line in text.lines() {
                for word in line.split_whitespace() {
                    if word.chars().any(|c| c.is_ascii_alphanumeric()) {
                        // a duplicate may be dropped, but then its words are in the kept copy
                        prop_assert!(kept.contains(word.trim_start_matches(['-', '*', '+']).trim_start_matches(|c: char| c.is_ascii_digit()).trim_start_matches(['.', ')'])),
                            "word {word:?} lost from {text:?}");
                    }
                }
            }
        }

        #[test]
        fn parse_is_idempotent_over_render(lines in proptest::collection::vec("[a-z ]{1,10}", 1..6)) {
            let text: String = lines.iter().map(|l| format!("- {l}\n")).collect();
            let first = parse_guardrails(&text);
            let rendered: String = first.items.iter().map(|g| g.render() + "\n").collect();
            let second = parse_guardrails(&rendered);
            prop_assert_eq!(first.items, second.items);
        }
    }
}
