//! Exact token counts.
//!
//! The rank tables are laid out at build time and included in the binary
//! (`bpe.rs`), and the pre-tokenizer patterns are hand-written
//! (`pretokenize.rs`), so there is nothing to load: the first count in a
//! process costs what every other one does. Chosen by measurement against
//! the `tiktoken`, `tiktoken-rs` and `bpe-openai` crates (see the crate
//! README); the cross-check tests keep the ids identical to theirs. Counting
//! never touches the network or the filesystem.

use std::fmt;
use std::str::FromStr;

use crate::BudgetError;
use crate::bpe::{self, Counter, Ranks};
use crate::pretokenize;

/// A BPE vocabulary the runtime can count with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Encoding {
    /// `o200k_base`: gpt-4o, gpt-4.1, o-series and gpt-5 models. The default.
    #[default]
    O200kBase,
    /// `cl100k_base`: gpt-4, gpt-4-turbo and gpt-3.5-turbo.
    Cl100kBase,
}

impl Encoding {
    /// Every supported encoding.
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The encoding's name as OpenAI spells it; stable on the wire.
    pub fn wire_name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// The number of tokens `text` encodes to, as plain text: strings such as
    /// `<|endoftext|>` count as the characters they are, because that is how
    /// a provider treats them inside a system prompt.
    pub fn count(self, text: &str) -> usize {
        let mut counter = Counter(0);
        self.encode_into(text, &mut counter);
        counter.0
    }

    /// The token ids of `text`, as plain text (see [`count`](Self::count)).
    pub fn encode(self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        self.encode_into(text, &mut ids);
        ids
    }
}

/// The number of tokens `text` encodes to under `encoding`.
pub fn count_tokens(encoding: Encoding, text: &str) -> usize {
    encoding.count(text)
}

impl Encoding {
    fn tables(self) -> (&'static Ranks, fn(&str, usize) -> usize) {
        match self {
            Encoding::O200kBase => (&bpe::O200K_BASE, pretokenize::o200k_next),
            Encoding::Cl100kBase => (&bpe::CL100K_BASE, pretokenize::cl100k_next),
        }
    }

    fn encode_into(self, text: &str, out: &mut impl Extend<u32>) {
        let (ranks, next) = self.tables();
        let mut pos = 0;
        while pos < text.len() {
            let end = next(text, pos);
            ranks.encode_piece(&text.as_bytes()[pos..end], out);
            pos = end;
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl FromStr for Encoding {
    type Err = BudgetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Encoding::ALL
            .into_iter()
            .find(|e| e.wire_name() == s)
            .ok_or_else(|| BudgetError::UnknownEncoding(s.to_owned()))
    }
}

impl serde::Serialize for Encoding {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.wire_name())
    }
}

impl<'de> serde::Deserialize<'de> for Encoding {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Known ids from OpenAI's own tiktoken test suite (cl100k_base) and from
    // the reference encoder (o200k_base); the integration tests cross-check
    // every candidate on more text.
    #[test]
    fn known_ids_cl100k() {
        let e = Encoding::Cl100kBase;
        assert_eq!(e.encode("hello world"), [15339, 1917]);
        assert_eq!(e.encode("rer"), [38149]);
        assert_eq!(e.encode("'rer"), [2351, 81]);
        assert_eq!(e.encode("today\n "), [31213, 198, 220]);
        assert_eq!(e.encode("today\n \n"), [31213, 27907]);
        assert_eq!(e.encode("today\n  \n"), [31213, 14211]);
        assert_eq!(e.encode(" \u{85}0"), [220, 126, 227, 15]);
        assert_eq!(e.encode("👍"), [9468, 239, 235]);
        assert_eq!(
            e.encode("This is a test         with a lot of spaces"),
            [2028, 374, 264, 1296, 260, 449, 264, 2763, 315, 12908]
        );
    }

    #[test]
    fn known_ids_o200k() {
        let e = Encoding::O200kBase;
        assert_eq!(e.encode("hello world"), [24912, 2375]);
        assert_eq!(
            e.encode("This is a test         with a lot of spaces"),
            [2500, 382, 261, 1746, 269, 483, 261, 3261, 328, 18608]
        );
        assert_eq!(e.encode("👍"), [82514]);
    }

    #[test]
    fn counts_match_ids_and_special_tokens_are_plain_text() {
        for e in Encoding::ALL {
            for text in [
                "",
                "hello world",
                "<|endoftext|> hi",
                "请考试我的软件！12345",
            ] {
                assert_eq!(count_tokens(e, text), e.encode(text).len(), "{e} {text:?}");
            }
            assert_eq!(count_tokens(e, ""), 0);
            // Plain text: the special token is spelled out, not one id.
            assert!(count_tokens(e, "<|endoftext|>") > 1);
        }
    }

    #[test]
    fn wire_names_round_trip() {
        for e in Encoding::ALL {
            assert_eq!(e.wire_name().parse::<Encoding>(), Ok(e));
            assert_eq!(e.to_string(), e.wire_name());
        }
        assert_eq!(Encoding::default(), Encoding::O200kBase);
        let err = "p50k_base".parse::<Encoding>().unwrap_err();
        assert!(err.to_string().contains("`p50k_base`"), "{err}");
    }
}
