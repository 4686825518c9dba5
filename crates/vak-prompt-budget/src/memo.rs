//! Token counts remembered by text, for a check that budgets many chains.

use std::collections::HashMap;
use std::sync::Arc;

use vak_prompt_blocks::SharedText;

use crate::Encoding;

/// Chunks shorter than this are counted each time: hashing and looking one
/// up costs about what counting it does.
const MEMO_MIN_BYTES: usize = 32;

/// A chunk ends after about one line in this many ([`chunks`]).
const LINES_PER_CHUNK: u32 = 4;

/// A chunk ends once it is this long, whatever its lines.
const MAX_CHUNK_BYTES: usize = 2048;

/// Token counts already made, keyed by the encoding and the text itself.
/// One check that budgets every chain a change reaches counts the same
/// layer texts (a project's `AGENTS.md`, a role's guardrails) on thousands
/// of chains; each is counted once per memo. A memo belongs to one check
/// (it is dropped with it), never to the process: a text is its own key,
/// so an edited file is a new key, never a stale count.
///
/// The key is the text, not a digest of it: a lookup hashes it with the
/// standard map's keyed SipHash (a repository cannot choose texts that
/// collide in it) and compares it on a hit, which together cost less than
/// a `blake3` digest of the same bytes did (see BENCHMARKS.md), and no two
/// texts can ever share a count. The memo holds each distinct text it
/// counted once.
///
/// A text is counted a few lines at a time ([`chunks`]): every prefix
/// differs from the next chain's by a few lines (a chat's own guardrail),
/// and the count of a text is the sum of its chunks' counts, because each
/// chunk starts where the encodings' pre-tokenizer starts a new piece
/// whatever came before (see [`pieces`]), and BPE never merges across
/// those.
///
/// A text shared from a read file ([`SharedText`]) is also remembered by
/// where it is: every chain of a check shares its layers' texts, so a
/// contributor's count is found without reading its text again. The memo
/// holds each such allocation, so no address it keys by is reused.
#[derive(Debug, Default)]
pub struct TokenMemo {
    /// One map per encoding, in [`Encoding::ALL`]'s order.
    counts: [HashMap<Box<str>, usize>; 2],
    /// Counts of shared texts by (allocation address, start, end), one map
    /// per encoding.
    by_place: [HashMap<(usize, usize, usize), usize>; 2],
    /// Every allocation `by_place` keys by, held so none is freed (and its
    /// address reused by another text) while the memo lives.
    held: HashMap<usize, Arc<str>>,
}

/// `text` cut before every line that starts with a character other than
/// whitespace or `/`. No pre-tokenizer piece of `o200k_base` or
/// `cl100k_base` runs across such a cut: the letter and digit patterns
/// never take a line break, the punctuation pattern takes the line breaks
/// (and, in `o200k_base`, slashes) after it and stops at anything else,
/// the whitespace patterns stop before a non-space, and no pattern starts
/// with a line break and goes on into a non-space. So the count of `text`
/// is the sum of the counts of its pieces (held to that by a test against
/// the whole-text count).
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= text.len() {
            return None;
        }
        // Only a line break can end a piece: jump from one to the next.
        let mut from = start;
        while let Some(offset) = text[from..].find('\n') {
            // After an ASCII line break `at` is a character boundary, and
            // past `start`, so no piece is empty.
            let at = from + offset + 1;
            from = at;
            if text[at..]
                .chars()
                .next()
                .is_some_and(|c| !c.is_whitespace() && c != '/')
            {
                let piece = &text[start..at];
                start = at;
                return Some(piece);
            }
        }
        let piece = &text[start..];
        start = text.len();
        Some(piece)
    })
}

/// `text` in chunks of whole [`pieces`], cut by content: a chunk ends
/// after a line whose first bytes hash to one value in
/// [`LINES_PER_CHUNK`] (or once it is [`MAX_CHUNK_BYTES`] long), so the
/// same lines make the same chunks in every chain, and a line one chain
/// adds changes only the chunk it falls in. Fewer, longer keys than one per
/// line: a digest costs about what counting 50 bytes does.
fn chunks(text: &str) -> impl Iterator<Item = &str> {
    let mut pieces = pieces(text).peekable();
    let mut start = 0;
    std::iter::from_fn(move || {
        let mut end = start;
        while let Some(piece) = pieces.next() {
            end += piece.len();
            if anchors(piece) || end - start >= MAX_CHUNK_BYTES || pieces.peek().is_none() {
                break;
            }
        }
        (end > start).then(|| {
            let chunk = &text[start..end];
            start = end;
            chunk
        })
    })
}

/// Whether a chunk ends after `line`: FNV-1a of its first 16 bytes.
fn anchors(line: &str) -> bool {
    let hash = line.bytes().take(16).fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash % LINES_PER_CHUNK == 0
}

impl TokenMemo {
    /// An empty memo.
    pub fn new() -> Self {
        TokenMemo::default()
    }

    /// `encoding.count(text)`, a few lines at a time remembered.
    pub fn count(&mut self, encoding: Encoding, text: &str) -> usize {
        chunks(text)
            .map(|chunk| self.count_piece(encoding, chunk))
            .sum()
    }

    /// [`count`](Self::count) of a shared text, found by where it is when
    /// it was counted before.
    pub fn count_shared(&mut self, encoding: Encoding, text: &SharedText) -> usize {
        let Some((whole, range)) = text.shared_part() else {
            return self.count(encoding, text);
        };
        let address = Arc::as_ptr(whole).cast::<u8>().addr();
        let key = (address, range.start, range.end);
        let slot = Self::slot(encoding);
        if let Some(count) = self.by_place[slot].get(&key) {
            return *count;
        }
        let count = self.count(encoding, text);
        self.held
            .entry(address)
            .or_insert_with(|| Arc::clone(whole));
        self.by_place[slot].insert(key, count);
        count
    }

    /// The index of `encoding`'s maps.
    fn slot(encoding: Encoding) -> usize {
        match encoding {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        }
    }

    fn count_piece(&mut self, encoding: Encoding, piece: &str) -> usize {
        if piece.len() < MEMO_MIN_BYTES {
            return encoding.count(piece);
        }
        let counts = &mut self.counts[Self::slot(encoding)];
        if let Some(count) = counts.get(piece) {
            return *count;
        }
        let count = encoding.count(piece);
        counts.insert(piece.into(), count);
        count
    }

    /// How many distinct pieces it holds.
    pub fn len(&self) -> usize {
        self.counts.iter().map(HashMap::len).sum()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(HashMap::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_answers_what_counting_answers_and_keeps_one_entry_per_text() {
        let mut memo = TokenMemo::new();
        let long = "Some words to count, more than sixty-four bytes of them in all. ".repeat(3);
        for text in ["short", long.as_str(), long.as_str()] {
            assert_eq!(
                memo.count(Encoding::O200kBase, text),
                Encoding::O200kBase.count(text)
            );
        }
        assert_eq!(memo.len(), 1);
        let edited = long.replacen("Some", "Many", 1);
        assert_eq!(
            memo.count(Encoding::O200kBase, &edited),
            Encoding::O200kBase.count(&edited)
        );
        assert_eq!(
            memo.count(Encoding::Cl100kBase, &long),
            Encoding::Cl100kBase.count(&long)
        );
        assert_eq!(memo.len(), 3);
    }

    /// The sum of the pieces is the whole text's count, on texts built to
    /// sit on every kind of cut: line starts of every class, punctuation
    /// before a break, slashes, CRLF, Unicode spaces and letters, numbers,
    /// contractions, Markdown.
    #[test]
    fn counting_by_pieces_is_counting_the_whole() {
        let lines = [
            "## Guardrails",
            "- never do it.",
            "",
            "   indented",
            "/path/at/start",
            ".\r",
            "'s contraction",
            "\u{3000}ideographic space",
            "\u{a0}nbsp",
            "123456 numbers",
            "Ünïcödé wörds",
            "日本語のテキスト",
            "```",
            "  - nested",
            "#hashtag",
            "!!!",
            "\t\ttabs",
            "a",
            "...",
            "--",
            "- x/",
            "x\u{301}",
            "Surface: chat",
            "> quote",
            "1. one",
            "emoji 🎉 here",
        ];
        let mut texts: Vec<String> = Vec::new();
        for a in &lines {
            for b in &lines {
                texts.push(format!("{a}\n{b}\n\n{a} {b}"));
                texts.push(format!("{a}.\n{b}\r\n{b}\n \n{a}"));
            }
        }
        texts.push(
            std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/benches/system-prompt.md"
            ))
            .unwrap(),
        );
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let mut memo = TokenMemo::new();
            for text in &texts {
                assert_eq!(pieces(text).collect::<String>(), *text);
                assert_eq!(chunks(text).collect::<String>(), *text);
                assert_eq!(memo.count(encoding, text), encoding.count(text), "{text:?}");
            }
        }
    }

    #[test]
    fn a_shared_text_is_counted_once_by_where_it_is_and_never_confused() {
        let encoding = Encoding::O200kBase;
        let mut memo = TokenMemo::new();
        let words = "Read the tests before you change the code, every time. ".repeat(4);
        let whole: Arc<str> = Arc::from(format!("{words}\n- and never push on a Friday").as_str());
        let all = SharedText::new(Arc::clone(&whole));
        let part = all.share(&all.as_str()[..words.len()]).unwrap();
        for text in [&all, &part, &all.clone(), &part.clone()] {
            assert_eq!(memo.count_shared(encoding, text), encoding.count(text));
        }
        assert_eq!(memo.by_place[0].len(), 2, "two places, each counted once");
        // A text built in memory is counted by its content.
        let built = SharedText::from(words.clone());
        assert_eq!(memo.count_shared(encoding, &built), encoding.count(&words));
        // Texts dropped, and new ones of the same length made, maybe where
        // they were: each is counted as what it says.
        drop((all, part, whole));
        for n in 0..50 {
            let other = format!("{n} other words, other words: {}", "x ".repeat(n));
            let text = SharedText::new(Arc::from(other.as_str()));
            assert_eq!(memo.count_shared(encoding, &text), encoding.count(&other));
        }
    }

    /// The cuts [`pieces`] makes, found by looking at every byte: what the
    /// jump from line break to line break must agree with.
    fn pieces_byte_by_byte(text: &str) -> Vec<&str> {
        let bytes = text.as_bytes();
        let (mut out, mut start) = (Vec::new(), 0);
        for at in 1..bytes.len() {
            if bytes[at - 1] == b'\n'
                && text[at..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_whitespace() && c != '/')
            {
                out.push(&text[start..at]);
                start = at;
            }
        }
        if start < bytes.len() {
            out.push(&text[start..]);
        }
        out
    }

    proptest::proptest! {
        /// The same, on texts drawn from every class a cut could fall
        /// between: line breaks of each kind, spaces of each kind,
        /// punctuation, slashes, digits, letters of several scripts,
        /// combining marks, zero-width and control characters.
        #[test]
        fn counting_in_chunks_is_counting_the_whole(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "\n", "\r\n", "\r", "\n\n", " ", "  ", "\t", "\u{a0}", "\u{3000}",
                    "\u{2028}", "\u{85}", "\u{1c}", "\u{200b}", "\u{301}", "/", "//", ".", "...",
                    "-", "#", "'s", "'", "1", "123", "a", "The", "word", "Ü", "日本", "🎉",
                    "```", "> ", "- ", "x/", "!?", "\u{feff}",
                ]),
                0..80,
            ),
        ) {
            let text: String = parts.concat();
            proptest::prop_assert_eq!(pieces(&text).collect::<Vec<_>>(), pieces_byte_by_byte(&text));
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let mut memo = TokenMemo::new();
                proptest::prop_assert_eq!(chunks(&text).collect::<String>(), text.clone());
                proptest::prop_assert_eq!(
                    memo.count(encoding, &text),
                    encoding.count(&text),
                    "{:?}",
                    text
                );
            }
        }
    }
}
