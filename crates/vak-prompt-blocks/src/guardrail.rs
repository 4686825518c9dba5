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
        render_into(&self.text, &mut out);
        out
    }
}

/// Append `text` to `out` as [`Guardrail::render`] renders it.
fn render_into(text: &str, out: &mut String) {
    for (index, line) in crate::lines::lines(text).enumerate() {
        if index == 0 {
            out.push_str("- ");
        } else {
            out.push_str("\n  ");
        }
        out.push_str(line);
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

impl GuardrailLint {
    /// The lint worded for `block`: a surface note is composed as guardrails
    /// are (line by line, duplicates dropped), but it is not a list of
    /// guardrails, and the sentence should not say it is.
    pub fn worded_for(&self, block: crate::Block) -> String {
        match (block, self) {
            (crate::Block::SurfaceNote, GuardrailLint::HeadingKept { line }) => format!(
                "line {line}: a heading is kept as text of the note; it cannot start a section of the prompt"
            ),
            (crate::Block::SurfaceNote, GuardrailLint::Duplicate { line, text }) => {
                format!("line {line}: duplicate line `{text}` is dropped")
            }
            (crate::Block::SurfaceNote, GuardrailLint::ProseBeforeFirstBullet { line }) => {
                format!("line {line}: text before the first bullet is kept as one line")
            }
            _ => self.to_string(),
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
    if is_folded(text) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    fold_into(text, &mut out);
    out
}

/// Whether [`fold_whitespace`] would return `text` as it is, in one pass
/// over its bytes. Most guardrails are ASCII words separated by single
/// spaces: already folded. (Every byte below 0x80 that
/// `char::is_whitespace` accepts is tab, LF, VT, FF, CR or space; any byte
/// from 0x80 up is left to the full fold.)
fn is_folded(text: &str) -> bool {
    let bytes = text.as_bytes();
    let odd = |b: u8| (b >= 0x80) | (b == b'\t') | (b'\n'..=b'\r').contains(&b);
    // One pass over each byte and the next, without an early exit, which
    // the compiler vectorises: a guardrail is a line or two, and most pass.
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return true;
    };
    let pairs = bytes.iter().zip(bytes.get(1..).unwrap_or_default());
    let bad = pairs.fold(false, |any, (a, b)| {
        any | odd(*a) | ((*a == b' ') & (*b == b' '))
    });
    !bad && !odd(*last) && *first != b' ' && *last != b' '
}

/// Whether `text` is folded but for single line breaks between words: a
/// guardrail with continuation lines, which the walk joins by `\n` after
/// trimming each, so folding it only turns each `\n` into a space. One
/// pass over each byte and the next, as [`is_folded`].
fn is_folded_lines(text: &str) -> bool {
    let bytes = text.as_bytes();
    let odd = |b: u8| (b >= 0x80) | (b == b'\t') | (b'\x0b'..=b'\r').contains(&b);
    let space = |b: u8| (b == b' ') | (b == b'\n');
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return true;
    };
    let pairs = bytes.iter().zip(bytes.get(1..).unwrap_or_default());
    let bad = pairs.fold(false, |any, (a, b)| any | odd(*a) | (space(*a) & space(*b)));
    !bad && !odd(*last) && !space(*first) && !space(*last)
}

/// Append `text`, whitespace folded, to `out`.
fn fold_into(text: &str, out: &mut String) {
    let start = out.len();
    if is_folded_lines(text) {
        // Copied a line at a time rather than a word at a time.
        for line in crate::lines::split_lines(text) {
            if out.len() > start {
                out.push(' ');
            }
            out.push_str(line);
        }
        return;
    }
    for word in text.split_whitespace() {
        if out.len() > start {
            out.push(' ');
        }
        out.push_str(word);
    }
}

/// `text`'s [`Guardrail::dedup_key`]: `text` itself when it is already
/// folded, else folded into `buf` (reused, so no key allocates).
fn key_of<'a>(text: &'a str, buf: &'a mut String) -> &'a str {
    if is_folded(text) {
        return text;
    }
    buf.clear();
    buf.reserve(text.len());
    fold_into(text, buf);
    buf
}

/// A set of dedup keys, kept in one string. A few keys are checked by
/// scanning them (a cheap hash of each first, so the scan rarely compares
/// text); past that they are indexed by std's keyed hasher (so no file can
/// be made of colliding keys), so a file of thousands of guardrails still
/// deduplicates in linear time. Either way each key is stored once, in the
/// one string: no key allocates.
///
/// Each key remembers the last text (numbered by the caller) it was met
/// in, so one set tells a repeat within a text from a repeat of an earlier
/// text's guardrail, without a second set cleared for every text.
#[derive(Debug, Default)]
struct KeySet {
    text: String,
    /// Each key's [`scan_hash`] (while scanning), where it ends in `text`,
    /// and the last text it was met in.
    keys: Vec<(u64, usize, usize)>,
    /// Once past [`KeySet::SCAN`] keys: by the keyed hash of a key, the
    /// latest key with that hash; `older[i]` is the key before key `i`
    /// with the same hash, if any (exact either way: texts are compared).
    index: std::collections::HashMap<u64, usize, Prehashed>,
    older: Vec<Option<usize>>,
    state: std::collections::hash_map::RandomState,
}

/// The index's keys are already hashes, keyed per set: used as they are,
/// not hashed a second time.
#[derive(Debug, Clone, Copy, Default)]
struct Prehashed;

/// The hash a [`Prehashed`] map is handed.
#[derive(Debug, Default)]
struct PrehashedHasher(u64);

impl std::hash::BuildHasher for Prehashed {
    type Hasher = PrehashedHasher;

    fn build_hasher(&self) -> PrehashedHasher {
        PrehashedHasher::default()
    }
}

impl std::hash::Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed; any other key is folded in whole.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// Whether a key met in a text was met before, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Met {
    /// Never before.
    First,
    /// In an earlier text, not yet in this one.
    InEarlierText,
    /// Already in this text.
    InThisText,
}

/// A hash to tell keys apart during [`KeySet`]'s short scan: eight bytes at
/// a time, multiply and rotate. Not a defence against chosen collisions:
/// a collision only costs one comparison of text, and the scan is short.
fn scan_hash(key: &str) -> u64 {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut chunks = key.as_bytes().chunks_exact(8);
    let mut hash = key.len() as u64;
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    let mut word = [0; 8];
    word[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    (hash.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K)
}

impl KeySet {
    const SCAN: usize = 32;

    /// Room for a scan's worth of keys of `bytes` in all.
    fn with_capacity(bytes: usize) -> Self {
        KeySet {
            text: String::with_capacity(bytes),
            keys: Vec::with_capacity(Self::SCAN),
            ..KeySet::default()
        }
    }

    /// Add `key`, whose [`scan_hash`] is `hash`; whether it was new.
    #[cfg(test)]
    fn insert(&mut self, key: &str, hash: u64) -> bool {
        self.meet(key, hash, 0) == Met::First
    }

    /// The text of key `index`.
    fn key(&self, index: usize) -> &str {
        let start = index
            .checked_sub(1)
            .and_then(|before| self.keys.get(before))
            .map_or(0, |(_, end, _)| *end);
        let end = self.keys.get(index).map_or(start, |(_, end, _)| *end);
        self.text.get(start..end).unwrap_or_default()
    }

    /// Index key `index`, which is in `text`, by its keyed hash.
    fn index_key(&mut self, index: usize) {
        use std::hash::BuildHasher;
        let hash = self.state.hash_one(self.key(index));
        let older = self.index.insert(hash, index);
        self.older.push(older);
    }

    /// Meet `key`, whose [`scan_hash`] is `hash`, in text number `text`:
    /// whether and where it was met before.
    fn meet(&mut self, key: &str, hash: u64, text: usize) -> Met {
        let was_in = |last: &mut usize| {
            if std::mem::replace(last, text) == text {
                Met::InThisText
            } else {
                Met::InEarlierText
            }
        };
        if self.keys.len() < Self::SCAN {
            let mut start = 0;
            for (seen, end, last) in &mut self.keys {
                if *seen == hash && self.text.get(start..*end) == Some(key) {
                    return was_in(last);
                }
                start = *end;
            }
            self.text.push_str(key);
            self.keys.push((hash, self.text.len(), text));
            return Met::First;
        }
        if self.index.is_empty() {
            for index in 0..self.keys.len() {
                self.index_key(index);
            }
        }
        let mut at = self
            .index
            .get(&std::hash::BuildHasher::hash_one(&self.state, key))
            .copied();
        while let Some(index) = at {
            if self.key(index) == key {
                return was_in(&mut self.keys[index].2);
            }
            at = self.older.get(index).copied().flatten();
        }
        self.text.push_str(key);
        self.keys.push((0, self.text.len(), text));
        self.index_key(self.keys.len() - 1);
        Met::First
    }
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
    let mut seen = KeySet::default();
    let mut buf = String::new();
    walk(
        text,
        &mut String::new(),
        &mut parsed.lints,
        |line, item, lints| {
            let key = key_of(item, &mut buf);
            if seen.meet(key, scan_hash(key), 0) == Met::First {
                parsed.keys.push(key.to_owned());
                parsed.items.push(Guardrail {
                    text: item.to_owned(),
                });
            } else {
                lints.push(GuardrailLint::Duplicate {
                    line,
                    text: key.to_owned(),
                });
            }
        },
    );
    parsed
}

/// Walk the guardrails of `text` in file order: each one, trimmed and not
/// empty, is handed to `item` with the line it starts on, as soon as the
/// line after it shows it is complete; lints about single lines go to
/// `lints` as the lines are met, so `item`'s own lints fall in line order.
/// A guardrail of one line (most are) is handed over as a slice of `text`;
/// one with continuation lines is joined in `current`, reused.
fn walk<'t>(
    text: &'t str,
    current: &mut String,
    lints: &mut Vec<GuardrailLint>,
    mut item: impl FnMut(usize, &str, &mut Vec<GuardrailLint>),
) {
    current.clear();
    // The guardrail being read: the line it starts on, its first line
    // (trimmed), and whether continuation lines were joined to that in
    // `current`.
    let mut current_line: Option<usize> = None;
    let mut first: &'t str = "";
    let mut joined = false;
    let mut seen_bullet = false;
    let mut finish = |current_line: &mut Option<usize>,
                      first: &str,
                      joined: &mut bool,
                      current: &mut String,
                      lints: &mut Vec<GuardrailLint>| {
        if let Some(line) = current_line.take() {
            let whole = if std::mem::take(joined) {
                current.trim()
            } else {
                first
            };
            if !whole.is_empty() {
                item(line, whole, lints);
            }
        }
    };

    for (index, raw_line) in crate::lines::lines(text).enumerate() {
        let line_no = index + 1;
        let line = raw_line.trim_end();
        let indent = line.len() - line.trim_start_matches(' ').len();
        if indent <= 3 && crate::structure::is_atx(&line[indent..]) {
            lints.push(GuardrailLint::HeadingKept { line: line_no });
        }
        if let Some(body) = bullet_body(line) {
            finish(&mut current_line, first, &mut joined, current, lints);
            seen_bullet = true;
            current_line = Some(line_no);
            first = body;
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if current_line.is_some() {
            if !joined {
                current.clear();
                current.push_str(first);
                joined = true;
            }
            current.push('\n');
            current.push_str(trimmed);
        } else {
            if !seen_bullet {
                lints.push(GuardrailLint::ProseBeforeFirstBullet { line: line_no });
            }
            current_line = Some(line_no);
            first = trimmed;
        }
    }
    finish(&mut current_line, first, &mut joined, current, lints);
}

/// Guardrails gathered from several texts, widest first, into one rendered
/// list: what composing an accumulating block does with
/// [`parse_guardrails`] and [`Guardrail::render`], without a string per
/// guardrail. A guardrail whose [`Guardrail::dedup_key`] an earlier text
/// already had is dropped silently; one repeated within the same text is
/// dropped and reported, as [`parse_guardrails`] reports it.
#[derive(Debug, Default)]
pub struct GuardrailList {
    rendered: String,
    /// Every key met so far, with the last text it was met in.
    keys: KeySet,
    /// How many texts were added: the number of the one being added.
    texts: usize,
    /// Reused for every text: the guardrail being read, and a key folded.
    current: String,
    buf: String,
}

impl GuardrailList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty list with room for `bytes` of rendered text.
    pub fn with_capacity(bytes: usize) -> Self {
        // The reused strings are sized by the first text that needs them:
        // a guardrail is a line or two, and a text never needs more than
        // its own length.
        GuardrailList {
            rendered: String::with_capacity(bytes),
            keys: KeySet::with_capacity(bytes),
            texts: 0,
            current: String::new(),
            buf: String::new(),
        }
    }

    /// Add the guardrails of `text` after those already added; the lints
    /// [`parse_guardrails`] gives for `text`, in the same order.
    pub fn add(&mut self, text: &str) -> Vec<GuardrailLint> {
        let mut lints = Vec::new();
        self.add_into(text, &mut lints);
        lints
    }

    /// [`add`](Self::add), its lints appended to `lints`: one vector
    /// reused for every text of a block, most of which have none.
    pub fn add_into(&mut self, text: &str, lints: &mut Vec<GuardrailLint>) {
        self.texts += 1;
        let GuardrailList {
            rendered,
            keys,
            texts,
            current,
            buf,
        } = self;
        let number = *texts;
        walk(text, current, lints, |line, item, lints| {
            let key = key_of(item, buf);
            match keys.meet(key, scan_hash(key), number) {
                Met::InThisText => lints.push(GuardrailLint::Duplicate {
                    line,
                    text: key.to_owned(),
                }),
                Met::InEarlierText => {}
                Met::First => {
                    if !rendered.is_empty() {
                        rendered.push('\n');
                    }
                    render_into(item, rendered);
                }
            }
        });
    }

    /// Every kept guardrail rendered as a bullet ([`Guardrail::render`]),
    /// one after another, in the order added.
    pub fn into_rendered(self) -> String {
        self.rendered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_surface_notes_lints_do_not_call_it_guardrails() {
        let lints = parse_guardrails("## A heading\n- x\n- x\n").lints;
        assert!(!lints.is_empty());
        for lint in &lints {
            let worded = lint.worded_for(crate::Block::SurfaceNote);
            assert!(!worded.contains("guardrail"), "{worded}");
            assert_eq!(lint.worded_for(crate::Block::Guardrails), lint.to_string());
        }
    }
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

    /// `parse_guardrails` as it was before the shared walk: the oracle.
    fn parse_before(text: &str) -> ParsedGuardrails {
        let mut parsed = ParsedGuardrails::default();
        let mut current: Option<(usize, String)> = None;
        let mut seen_bullet = false;
        let finish = |current: &mut Option<(usize, String)>, parsed: &mut ParsedGuardrails| {
            if let Some((line, text)) = current.take() {
                let trimmed = text.trim();
                if trimmed.is_empty() {
                    return;
                }
                let guardrail = Guardrail {
                    text: trimmed.to_owned(),
                };
                let key = guardrail
                    .text
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                if parsed.keys.contains(&key) {
                    parsed
                        .lints
                        .push(GuardrailLint::Duplicate { line, text: key });
                } else {
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

    /// What composing an accumulating block did before [`GuardrailList`]:
    /// parse each text, keep each key's first item, render and join.
    fn accumulate_before(texts: &[String]) -> (String, Vec<GuardrailLint>) {
        let mut keys: Vec<String> = Vec::new();
        let mut kept: Vec<String> = Vec::new();
        let mut lints = Vec::new();
        for text in texts {
            let parsed = parse_before(text);
            lints.extend(parsed.lints);
            for (item, key) in parsed.items.into_iter().zip(parsed.keys) {
                if !keys.contains(&key) {
                    keys.push(key);
                    kept.push(item.render());
                }
            }
        }
        (kept.join("\n"), lints)
    }

    #[test]
    fn a_list_of_several_texts_is_each_parsed_and_deduplicated() {
        let texts = [
            "- a\n- b\n-  a\n".to_owned(),
            "# H\n- b\n- c\n  more\n".to_owned(),
            String::new(),
            "prose\n- c\nmore\n- d".to_owned(),
        ];
        let mut list = GuardrailList::new();
        let lints: Vec<_> = texts.iter().flat_map(|t| list.add(t)).collect();
        let (rendered, before) = accumulate_before(&texts);
        assert_eq!((list.into_rendered(), lints), (rendered, before));
    }

    #[test]
    fn keys_with_one_scan_hash_are_still_told_apart_by_text() {
        let mut set = KeySet::default();
        assert!(set.insert("a", 7) && set.insert("b", 7));
        assert!(!set.insert("a", 7) && !set.insert("b", 7));
        assert!(set.insert("c", scan_hash("c")) && !set.insert("c", scan_hash("c")));
        assert_ne!(scan_hash("never do thing 0"), scan_hash("never do thing 1"));
    }

    #[test]
    fn past_the_scan_each_key_is_found_by_its_text_and_its_last_text() {
        let mut set = KeySet::default();
        let keys: Vec<String> = (0..3 * KeySet::SCAN).map(|i| format!("key {i}")).collect();
        for key in &keys {
            assert_eq!(set.meet(key, scan_hash(key), 1), Met::First);
        }
        assert!(!set.index.is_empty(), "indexed");
        for key in &keys {
            assert_eq!(set.meet(key, scan_hash(key), 1), Met::InThisText);
            assert_eq!(set.meet(key, scan_hash(key), 2), Met::InEarlierText);
            assert_eq!(set.meet(key, scan_hash(key), 2), Met::InThisText);
        }
        assert_eq!(set.meet("key", scan_hash("key"), 2), Met::First);
        assert_eq!(set.keys.len(), keys.len() + 1);
    }

    #[test]
    fn many_keys_switch_to_the_hashed_set() {
        let text: String = (0..200).map(|i| format!("- item {}\n", i % 70)).collect();
        assert_eq!(parse_guardrails(&text), parse_before(&text));
        let mut list = GuardrailList::new();
        let lints = list.add(&text);
        let again = list.add(&text);
        assert_eq!(
            (list.into_rendered(), [lints, again].concat()),
            accumulate_before(&[text.clone(), text])
        );
    }

    proptest! {
        #[test]
        fn folding_is_joining_the_words(
            text in prop_oneof![
                any::<String>(),
                "[ab \n\t\u{a0}\u{b}\u{c}\r]{0,12}",
                proptest::collection::vec("[a-z]{1,4}", 0..6).prop_map(|w| w.join("\n")),
            ]
        ) {
            let mut folded = String::from("x");
            fold_into(&text, &mut folded);
            let words: Vec<&str> = text.split_whitespace().collect();
            prop_assert_eq!(folded, format!("x{}", words.join(" ")));
        }

        #[test]
        fn the_walk_is_the_old_parser(
            text in prop_oneof![
                any::<String>(),
                "([-*+] |[0-9]{1,2}[.)] |#{1,3} | {0,4}|\t)?[ab \t\u{a0}é#-]{0,6}\n{0,2}",
                proptest::collection::vec("([-*+] |1\\. | {0,3}|#+ )?[ab \t\u{a0}]{0,5}", 0..40)
                    .prop_map(|lines| lines.join("\n")),
            ]
        ) {
            prop_assert_eq!(parse_guardrails(&text), parse_before(&text));
        }

        #[test]
        fn the_list_is_parse_render_and_dedupe(
            texts in proptest::collection::vec(
                proptest::collection::vec("([-*] | {0,3})?[ab \t]{0,4}", 0..12)
                    .prop_map(|lines| lines.join("\n")),
                0..5,
            )
        ) {
            let mut list = GuardrailList::new();
            let lints: Vec<_> = texts.iter().flat_map(|t| list.add(t)).collect();
            prop_assert_eq!((list.into_rendered(), lints), accumulate_before(&texts));
        }

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
