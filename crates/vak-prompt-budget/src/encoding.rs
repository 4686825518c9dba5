//! Exact token counts.
//!
//! Counting goes through the `tiktoken` crate (a pure-Rust port of OpenAI's
//! tokenizer, chosen by measurement; see the crate README). Its BPE ranks are
//! compiled into the binary, so counting never touches the network or the
//! filesystem. Each encoder is built once per process, on first use.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Instant;

use crate::BudgetError;

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
        encoder(self).count(text)
    }

    /// The token ids of `text`, as plain text (see [`count`](Self::count)).
    pub fn encode(self, text: &str) -> Vec<u32> {
        encoder(self).encode(text)
    }
}

/// The number of tokens `text` encodes to under `encoding`.
pub fn count_tokens(encoding: Encoding, text: &str) -> usize {
    encoding.count(text)
}

fn encoder(encoding: Encoding) -> &'static tiktoken::CoreBpe {
    static O200K: OnceLock<tiktoken::CoreBpe> = OnceLock::new();
    static CL100K: OnceLock<tiktoken::CoreBpe> = OnceLock::new();
    let (cell, build): (_, fn() -> tiktoken::CoreBpe) = match encoding {
        Encoding::O200kBase => (&O200K, tiktoken::encoding::o200k_base),
        Encoding::Cl100kBase => (&CL100K, tiktoken::encoding::cl100k_base),
    };
    cell.get_or_init(|| {
        // Building the rank table is the one slow step (tens of milliseconds
        // in release builds); log it so a slow start can be attributed.
        let started = Instant::now();
        let bpe = build();
        tracing::debug!(
            encoding = encoding.wire_name(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "token encoder loaded"
        );
        bpe
    })
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
