//! Token counts remembered by text, for a check that budgets many chains.

use std::collections::HashMap;

use crate::Encoding;

/// Texts shorter than this are counted each time: hashing and looking one
/// up costs about what counting it does.
const MEMO_MIN_BYTES: usize = 64;

/// Token counts already made, keyed by the encoding and the `blake3` digest
/// of the text. One check that budgets every chain a change reaches counts
/// the same layer texts (a project's `AGENTS.md`, a role's guardrails) on
/// thousands of chains; each is counted once per memo. A memo belongs to
/// one check (it is dropped with it), never to the process: a text is its
/// own key, so an edited file is a new key, never a stale count.
#[derive(Debug, Default)]
pub struct TokenMemo {
    counts: HashMap<(Encoding, [u8; 32]), usize>,
}

impl TokenMemo {
    /// An empty memo.
    pub fn new() -> Self {
        TokenMemo::default()
    }

    /// `encoding.count(text)`, remembered.
    pub fn count(&mut self, encoding: Encoding, text: &str) -> usize {
        if text.len() < MEMO_MIN_BYTES {
            return encoding.count(text);
        }
        let key = (encoding, *blake3::hash(text.as_bytes()).as_bytes());
        *self
            .counts
            .entry(key)
            .or_insert_with(|| encoding.count(text))
    }

    /// How many distinct texts it holds.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
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
}
