//! Containment of one contribution's Markdown inside its section of the
//! prefix.
//!
//! The prefix owns its level-1 and level-2 headings and its one generated
//! `Surface:` line; a contribution (one file's text) is rendered inside a
//! section and must neither forge that structure nor leave something open
//! that swallows the next section. [`contain_markdown`] keeps the Markdown a
//! team wrote wherever it can be kept, and escapes only what cannot:
//!
//! | In the contribution | Rendered |
//! |---|---|
//! | ATX heading (also in a list item or a block quote) | nested: the contribution's top level becomes 3, relative levels kept, capped at 6; words unchanged |
//! | code fence that closes inside the contribution | kept byte for byte, and so is every line inside it |
//! | code fence still open at its end | closed there, with the opener's character and length |
//! | setext underline (`===`, `---` under a paragraph line) | escaped: the heading becomes a paragraph that ends with the underline's characters |
//! | thematic break | kept after a blank line outside a list, block quote or break; escaped elsewhere (it could end a list or be read as an underline) |
//! | HTML comment or block whose end marker never comes (`<!--`, `<?`, `<!X`, `<![CDATA[`, `<script>`…) | escaped |
//! | HTML block that closes, or ends at a blank line | kept |
//! | a line whose words begin with `Surface:` | escaped, everywhere, inside fences and HTML too |
//!
//! "Escaped" is one backslash before the marker: CommonMark reads the marker
//! as a literal character and every word stays. A contribution may follow
//! a paragraph line (a surface note follows the generated `Surface:` line
//! directly; a heading may have a line of its own under it), so its first
//! line is read both ways: one that cannot interrupt a paragraph and would
//! hide the lines after it (an HTML tag of the seventh kind, a link
//! reference definition, an ordered list starting at another number than
//! 1) is escaped.
//!
//! The structure is read by a CommonMark parser (pulldown-cmark, the one the
//! prefix's invariants are tested with), not guessed line by line: a
//! heading inside a fence is not a heading, a fence inside a list item
//! closes with its item. A backslash can change how later lines read, so
//! the text is read again after each round of backslashes; each reading is
//! linear in the length of the text, real files need one or two, and a text
//! built to need more than four gets a backslash before every line that
//! could read as structure ([`crate::neutralise`]) instead.

use std::borrow::Cow;
use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};

use crate::structure::{Leaf, SURFACE_PREFIX, leaf_at, may_open_structure};

/// `text` (one contribution: one file's text, line ends already LF) with its
/// Markdown contained in the section it is rendered in; see the module
/// documentation for what is kept, nested, closed and escaped. Every word
/// of `text` is kept, in order. Borrows when nothing changes; linear in the
/// length of `text`.
pub fn contain_markdown(text: &str) -> Cow<'_, str> {
    if !needs_containment(text) {
        return Cow::Borrowed(text);
    }
    contain_parsed(text)
}

/// Whether [`contain_markdown`] could change `text` at all. Nearly every
/// line of prose starts with a letter, and nearly every guardrail is a
/// bullet of prose: a text none of whose lines could open structure, or
/// only as a bullet whose words start like prose, is not parsed. A bullet
/// is kept as it is, and its words cannot nest, close, or forge anything
/// when they start with a letter (held by a property test against the
/// parsed reading). Nor can a line that starts with a code span (a skill's
/// or an MCP server's line) or with an `S` that does not begin `Surface:`.
pub fn needs_containment(text: &str) -> bool {
    crate::lines::split_lines(text).any(|line| {
        let content = line.trim_start_matches([' ', '\t']);
        // A link reference definition first in the text reads as one
        // only where no paragraph comes before it ([`first_line_marker`]).
        content.starts_with('[') || (opens_structure(content) && !plain_bullet(content))
    })
}

/// Whether `content` (a line with its indentation taken off) could begin
/// structure: [`may_open_structure`], narrowed where its first byte alone
/// says too much. An `S` matters only as the prefix's own `Surface:` line,
/// and a backtick only as a fence, which takes three.
fn opens_structure(content: &str) -> bool {
    match content.as_bytes().first() {
        Some(b'S') => content.starts_with(SURFACE_PREFIX),
        Some(b'`') => content.starts_with("```"),
        _ => may_open_structure(content),
    }
}

/// Whether `line` (its indentation taken off) is a `-`, `*` or `+` bullet
/// whose words begin with something that cannot open structure.
fn plain_bullet(line: &str) -> bool {
    let bytes = line.as_bytes();
    if bytes.len() < 3
        || !matches!(bytes[0], b'-' | b'*' | b'+')
        || !matches!(bytes[1], b' ' | b'\t')
    {
        return false;
    }
    let words = line[2..].trim_start_matches([' ', '\t']);
    !words.is_empty() && !opens_structure(words)
}

/// [`contain_markdown`] past its first look: the text is parsed.
fn contain_parsed(text: &str) -> Cow<'_, str> {
    let first = first_line_marker(text);
    let mut contained = with_backslashes(Cow::Borrowed(text), first.into_iter().collect());
    // A backslash can change how the lines after it are read: an escaped
    // break no longer ends a list, so the lines after it may join the list
    // item; an escaped HTML opener leaves its lines to be read as Markdown.
    // So the text is read again until a reading asks for no backslash, and
    // the headings and the open fence of that last reading are the ones
    // changed. Nearly every text needs one reading or two.
    for _ in 0..READINGS {
        let plan = plan(&contained);
        if plan.backslashes.is_empty() {
            if plan.edits.is_empty() {
                return contained;
            }
            return Cow::Owned(apply(&contained, plan.edits));
        }
        contained = with_backslashes(contained, plan.backslashes);
    }
    // A text built so that each backslash uncovers another line to escape:
    // every line that could read as structure is escaped instead, which is
    // what containment was before nesting.
    crate::structure::neutralise(text)
}

/// How many times [`contain_markdown`] reads a text before it falls back to
/// escaping every structural line. Each reading is one linear pass.
const READINGS: usize = 4;

/// One change to the text: at byte `at`, `remove` bytes are replaced by
/// `insert`.
struct Edit {
    at: usize,
    remove: usize,
    insert: Cow<'static, str>,
}

impl Edit {
    fn backslash(at: usize) -> Edit {
        Edit {
            at,
            remove: 0,
            insert: Cow::Borrowed("\\"),
        }
    }
}

/// The kind of the last top-level block before a thematic break.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Before {
    /// A paragraph, heading, code block or HTML block: a break after it and
    /// a blank line is a plain separator.
    Leaf,
    /// A list, block quote or break, or nothing.
    Other,
}

/// What one reading of a text asks for.
struct Plan {
    /// Where a backslash goes: the text must then be read again.
    backslashes: Vec<usize>,
    /// The headings' new levels, the closing fence and the backslashes
    /// before `Surface:`, in order of position: made only when no other
    /// backslash is asked for.
    edits: Vec<Edit>,
}

/// Read `t` once (a CommonMark parse and a pass over its lines) and say
/// what [`contain_markdown`] changes in it.
fn plan(t: &str) -> Plan {
    let mut edits = Vec::new();
    let mut backslashes = Vec::new();
    let mut headings: Vec<(usize, usize)> = Vec::new();
    let mut literal: Vec<Range<usize>> = Vec::new();
    let mut kept_rules: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut before = Before::Other;
    // The open code block: where it starts, whether fenced, and where its
    // content ends so far.
    let mut code: Option<(usize, bool, usize)> = None;
    let ends = LastEnds::of(t);
    for (event, range) in Parser::new(t).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if depth == 0 {
                    before = match tag {
                        Tag::Paragraph | Tag::Heading { .. } | Tag::CodeBlock(_) => Before::Leaf,
                        Tag::HtmlBlock => Before::Leaf,
                        _ => Before::Other,
                    };
                }
                depth += 1;
                match tag {
                    Tag::Heading { level, .. } if t[range.start..].starts_with('#') => {
                        headings.push((range.start, heading_level(level)));
                    }
                    Tag::CodeBlock(kind) => {
                        let fenced = matches!(kind, CodeBlockKind::Fenced(_));
                        let opener_end = line_end(t, range.start).min(range.end);
                        code = Some((range.start, fenced, opener_end));
                    }
                    Tag::HtmlBlock => {
                        literal.push(line_start(t, range.start)..range.end);
                        let opener = skip_spaces(t, range.start);
                        if ends.leaves_open(t, opener) {
                            backslashes.push(opener);
                            // The block's lines are read as Markdown once
                            // its opener is escaped: an opener among them
                            // that never closes either is escaped now, not
                            // one reading later.
                            // Lines inside what will read as a code fence are
                            // passed (a guess: the next reading decides).
                            let body = line_end(t, opener)..range.end;
                            let mut fence: Option<(char, usize)> = None;
                            for (start, line) in lines_in(t, body) {
                                let Some((offset, Leaf::Opener)) = leaf_at(line) else {
                                    continue;
                                };
                                let rest = &line[offset..];
                                if let Some((ch, run)) = fence_run(rest) {
                                    match fence {
                                        None => fence = Some((ch, run)),
                                        Some((open, len))
                                            if open == ch
                                                && run >= len
                                                && rest[run..].trim().is_empty() =>
                                        {
                                            fence = None;
                                        }
                                        Some(_) => {}
                                    }
                                } else if fence.is_none() && ends.leaves_open(t, start + offset) {
                                    backslashes.push(start + offset);
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
            Event::End(tag) => {
                depth = depth.saturating_sub(1);
                if tag == TagEnd::CodeBlock
                    && let Some((start, fenced, content_end)) = code.take()
                {
                    literal.push(line_start(t, start)..range.end);
                    if fenced
                        && t[content_end.min(range.end)..range.end].trim().is_empty()
                        && t[range.end..].trim().is_empty()
                        && !quote_ends_before_the_end(t, start, content_end.min(range.end))
                    {
                        edits.push(closing_fence(t, start));
                    }
                }
            }
            Event::Text(_) => {
                if let Some((_, _, content_end)) = code.as_mut() {
                    *content_end = (*content_end).max(range.end);
                }
            }
            Event::Rule => {
                let start = line_start(t, range.start);
                let after_blank = start > 0 && {
                    let previous = line_start(t, start - 1);
                    t[previous..start].trim().is_empty()
                };
                if depth == 0 && before == Before::Leaf && after_blank {
                    kept_rules.push(start);
                }
                if depth == 0 {
                    before = Before::Other;
                }
            }
            _ => {}
        }
    }
    escape_lines(t, &literal, &kept_rules, &mut backslashes, &mut edits);
    nest(&headings, &mut edits);
    edits.sort_by_key(|e| e.at);
    Plan { backslashes, edits }
}

/// The character and length of the code fence `rest` begins with, if any.
fn fence_run(rest: &str) -> Option<(char, usize)> {
    let ch = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let run = rest.len() - rest.trim_start_matches(ch).len();
    (run >= 3).then_some((ch, run))
}

/// Shift every ATX heading so that the top level is 3, capped at 6.
fn nest(headings: &[(usize, usize)], edits: &mut Vec<Edit>) {
    const HASHES: &str = "######";
    let Some(top) = headings.iter().map(|(_, level)| *level).min() else {
        return;
    };
    for (at, level) in headings {
        let nested = (level + 3).saturating_sub(top).min(6);
        if nested != *level {
            edits.push(Edit {
                at: *at,
                remove: *level,
                insert: Cow::Borrowed(&HASHES[..nested]),
            });
        }
    }
}

/// A backslash before every setext underline or thematic break that is not
/// one of `kept_rules`, outside `literal` (code and HTML blocks), into `at`;
/// and before every `Surface:` line, literal or not, into `edits`: a
/// backslash before a letter changes how no line is read, so it needs no
/// second reading.
fn escape_lines(
    t: &str,
    literal: &[Range<usize>],
    kept_rules: &[usize],
    at: &mut Vec<usize>,
    edits: &mut Vec<Edit>,
) {
    let (mut lit, mut kept) = (literal.iter().peekable(), kept_rules.iter().peekable());
    for (start, line) in lines_in(t, 0..t.len()) {
        while lit.next_if(|r| r.end <= start).is_some() {}
        let in_literal = lit.peek().is_some_and(|r| r.start <= start);
        while kept.next_if(|k| **k < start).is_some() {}
        if in_literal {
            let words = line.trim_start();
            if words.starts_with(SURFACE_PREFIX) {
                edits.push(Edit::backslash(start + line.len() - words.len()));
            }
            continue;
        }
        match leaf_at(line) {
            Some((offset, Leaf::Surface)) => edits.push(Edit::backslash(start + offset)),
            Some((offset, Leaf::Rule)) if kept.peek() != Some(&&start) => at.push(start + offset),
            _ => {}
        }
    }
}

/// Whether the fence opened at `start`, whose content ends at
/// `content_end` with nothing but blanks after it, is inside a block quote
/// that a blank line after its content already ends: the fence ended with
/// its quote, and a closing fence appended under a `>` would open another.
fn quote_ends_before_the_end(t: &str, start: usize, content_end: usize) -> bool {
    if !t[line_start(t, start)..start].contains('>') {
        return false;
    }
    let rest = &t[content_end..];
    let at_line_start = content_end == 0 || t.as_bytes()[content_end - 1] == b'\n';
    let after = if at_line_start {
        rest
    } else {
        rest.find('\n').map_or("", |newline| &rest[newline + 1..])
    };
    // Everything after the content is blank: any line left is a blank one.
    !after.is_empty()
}

/// The fence that closes the one opened at `start`, on a line of its own
/// under the same containers (a block quote's `>`, a list item's indent).
fn closing_fence(t: &str, start: usize) -> Edit {
    let containers: String = t[line_start(t, start)..start]
        .chars()
        .map(|c| if matches!(c, '>' | '\t') { c } else { ' ' })
        .collect();
    let (ch, run) = fence_run(&t[start..]).unwrap_or(('`', 3));
    let newline = t.ends_with('\n');
    let mut insert = String::with_capacity(containers.len() + run + 1);
    if !newline {
        insert.push('\n');
    }
    insert.push_str(&containers);
    insert.extend(std::iter::repeat_n(ch, run));
    if newline {
        insert.push('\n');
    }
    Edit {
        at: t.len(),
        remove: 0,
        insert: Cow::Owned(insert),
    }
}

/// `t` with every edit made; `edits` are in order and do not overlap.
fn apply(t: &str, edits: Vec<Edit>) -> String {
    let extra: usize = edits.iter().map(|e| e.insert.len()).sum();
    let mut out = String::with_capacity(t.len() + extra);
    let mut copied = 0;
    for edit in edits {
        if edit.at < copied {
            continue;
        }
        out.push_str(&t[copied..edit.at]);
        out.push_str(&edit.insert);
        copied = edit.at + edit.remove;
    }
    out.push_str(&t[copied..]);
    out
}

/// `text` with a backslash inserted at each of `at` (in any order).
fn with_backslashes(text: Cow<'_, str>, mut at: Vec<usize>) -> Cow<'_, str> {
    if at.is_empty() {
        return text;
    }
    at.sort_unstable();
    at.dedup();
    Cow::Owned(apply(&text, at.into_iter().map(Edit::backslash).collect()))
}

/// Where a backslash goes on the first line of `text` so that it reads the
/// same at the start of a section and after a paragraph line (a surface
/// note, and the text under a heading that has a line of its own, follow
/// one): before an HTML tag that starts a block of the seventh kind, before
/// the `[` of what may be a link reference definition (its title can span
/// lines), or before the delimiter of an ordered list that starts at
/// another number than 1, or before the marker of an empty list item. None
/// of these can interrupt a paragraph, and each can hide or shift the lines
/// after it. Lines indented as code before it are looked past: after a
/// paragraph line they continue that paragraph, so the line after them is
/// read as a continuation too.
fn first_line_marker(text: &str) -> Option<usize> {
    for (start, line) in lines_in(text, 0..text.len()) {
        if line.trim_matches([' ', '\t']).is_empty() {
            // A blank line ends the paragraph before: what follows reads
            // the same in both places.
            return None;
        }
        if indent(line) >= 4 {
            continue;
        }
        let at = skip_spaces(line, 0);
        if is_empty_item(line) {
            // Escaped, it reads as paragraph text in both places; as an item,
            // the lines after it would be read with its indent taken off.
            let digits = line[at..].len()
                - line[at..]
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            return Some(start + at + digits);
        }
        return first_line_marker_at(line, at).map(|at| start + at);
    }
    None
}

/// Whether `line` is a list marker and nothing else: an item that begins
/// with a blank line.
fn is_empty_item(line: &str) -> bool {
    let rest = line.trim_matches([' ', '\t']);
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    matches!(rest, "-" | "*" | "+")
        || ((1..=9).contains(&digits) && matches!(&rest[digits..], "." | ")"))
}

/// The columns of blank before the first other character of `line` (a tab
/// goes to the next multiple of 4).
fn indent(line: &str) -> usize {
    let mut columns = 0;
    for b in line.bytes() {
        match b {
            b' ' => columns += 1,
            b'\t' => columns += 4 - columns % 4,
            _ => break,
        }
    }
    columns
}

/// [`first_line_marker`] for one line whose content starts at `at`.
fn first_line_marker_at(line: &str, at: usize) -> Option<usize> {
    let rest = &line[at..];
    if rest.starts_with('[') && (rest.contains("]:") || !rest.contains(']')) {
        return Some(at);
    }
    let closing = rest.starts_with("</");
    if let Some(tag) = rest.strip_prefix("</").or_else(|| rest.strip_prefix('<')) {
        let name_len = tag
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '-')
            .unwrap_or(tag.len());
        let name = &tag[..name_len];
        let is_tag = name.starts_with(|c: char| c.is_ascii_alphabetic())
            && tag[name_len..]
                .chars()
                .next()
                .is_none_or(|c| matches!(c, ' ' | '\t' | '>' | '/' | '\n'));
        // The first kind starts with an opening tag only.
        let raw: &[&str] = if closing { &[] } else { &RAW_TAGS };
        let interrupts = raw
            .iter()
            .chain(BLOCK_TAGS)
            .any(|known| known.eq_ignore_ascii_case(name));
        return (is_tag && !interrupts).then_some(at);
    }
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let after = &rest[digits..];
    let ordered = (1..=9).contains(&digits)
        && after.starts_with(['.', ')'])
        && (after.len() == 1 || after[1..].starts_with([' ', '\t', '\n']));
    (ordered && rest[..digits].trim_start_matches('0') != "1").then_some(at + digits)
}

/// The tags of CommonMark's first kind of HTML block, which ends at a
/// closing tag of any of them.
const RAW_TAGS: [&str; 4] = ["script", "pre", "style", "textarea"];

/// The tags of CommonMark's sixth kind of HTML block, which may interrupt a
/// paragraph and ends at a blank line.
const BLOCK_TAGS: &[&str] = &[
    "address",
    "article",
    "aside",
    "base",
    "basefont",
    "blockquote",
    "body",
    "caption",
    "center",
    "col",
    "colgroup",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hr",
    "html",
    "iframe",
    "legend",
    "li",
    "link",
    "main",
    "menu",
    "menuitem",
    "nav",
    "noframes",
    "ol",
    "optgroup",
    "option",
    "p",
    "param",
    "search",
    "section",
    "summary",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "track",
    "ul",
];

/// Where the last end marker of each kind of HTML block that has one
/// begins in a text, found once so that each opener is judged in constant
/// time.
struct LastEnds {
    comment: Option<usize>,
    instruction: Option<usize>,
    declaration: Option<usize>,
    cdata: Option<usize>,
    raw: [Option<usize>; 4],
}

impl LastEnds {
    fn of(t: &str) -> LastEnds {
        // The end tag that matches the opener, in lower case: the reading
        // of the parser the prefix is checked with (CommonMark's own ends
        // the block at any of the four, in any case: earlier, never later).
        let raw = RAW_TAGS.map(|name| t.rfind(&format!("</{name}>")));
        LastEnds {
            comment: t.rfind("-->"),
            instruction: t.rfind("?>"),
            declaration: t.rfind('>'),
            cdata: t.rfind("]]>"),
            raw,
        }
    }

    /// Whether the HTML block whose opener is at `at` in `t` is of a kind
    /// that ends only at its end marker, and no such marker comes after
    /// the opener: the block would run to the end of the text.
    fn leaves_open(&self, t: &str, at: usize) -> bool {
        let rest = &t[at..];
        let (end, after) = if rest.starts_with("<!--") {
            (self.comment, at + 4)
        } else if rest.starts_with("<![CDATA[") {
            (self.cdata, at + 9)
        } else if rest.starts_with("<?") {
            (self.instruction, at + 2)
        } else if rest.starts_with("<!") && rest[2..].starts_with(|c: char| c.is_ascii_alphabetic())
        {
            (self.declaration, at + 2)
        } else if let Some(tag) = raw_opener(rest) {
            (self.raw[tag], at + 1)
        } else {
            return false;
        };
        end.is_none_or(|end| end < after)
    }
}

/// Which of [`RAW_TAGS`] `rest` opens: `<script`, `<pre`, `<style` or
/// `<textarea` (any case) followed by a blank, `>` or the end of the line.
fn raw_opener(rest: &str) -> Option<usize> {
    let tag = rest.strip_prefix('<')?;
    RAW_TAGS.iter().position(|name| {
        tag.get(..name.len())
            .is_some_and(|t| t.eq_ignore_ascii_case(name))
            && tag[name.len()..]
                .chars()
                .next()
                .is_none_or(|c| matches!(c, ' ' | '\t' | '>' | '\n'))
    })
}

fn heading_level(level: HeadingLevel) -> usize {
    level as usize
}

/// `at` moved past spaces and tabs.
fn skip_spaces(t: &str, at: usize) -> usize {
    at + (t[at..].len() - t[at..].trim_start_matches([' ', '\t']).len())
}

/// The start of the line that holds byte `at`.
fn line_start(t: &str, at: usize) -> usize {
    t[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// Just past the line break of the line that holds byte `at`, or the end.
fn line_end(t: &str, at: usize) -> usize {
    t[at..].find('\n').map_or(t.len(), |i| at + i + 1)
}

/// Each line (without its line break) that starts inside `range`, with
/// its start.
fn lines_in(t: &str, range: Range<usize>) -> impl Iterator<Item = (usize, &str)> {
    let body = &t[range.start..range.end.min(t.len())];
    let mut start = range.start;
    body.split_inclusive('\n').map(move |line| {
        let at = start;
        start += line.len();
        (at, line.strip_suffix('\n').unwrap_or(line))
    })
}

#[cfg(test)]
#[path = "contain_tests.rs"]
mod tests;
