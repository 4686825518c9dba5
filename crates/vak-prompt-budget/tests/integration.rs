//! Exactness: the chosen encoder against the two other maintained candidates
//! (tiktoken-rs vendors OpenAI's own Rust core; bpe-openai is GitHub's), on
//! our kind of text and on arbitrary text.

use proptest::prelude::*;
use vak_prompt_budget::{Encoding, count_tokens};

const PROMPT: &str = include_str!("../benches/system-prompt.md");

fn reference_ids(encoding: Encoding, text: &str) -> Vec<u32> {
    match encoding {
        Encoding::O200kBase => tiktoken_rs::o200k_base_singleton().encode_ordinary(text),
        Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton().encode_ordinary(text),
    }
}

fn bpe_openai_count(encoding: Encoding, text: &str) -> usize {
    match encoding {
        Encoding::O200kBase => bpe_openai::o200k_base().count(text),
        Encoding::Cl100kBase => bpe_openai::cl100k_base().count(text),
    }
}

#[test]
fn fixture_is_a_realistic_1500_token_prefix() {
    let n = count_tokens(Encoding::O200kBase, PROMPT);
    assert!((1400..=1600).contains(&n), "fixture has {n} tokens");
}

#[test]
fn all_candidates_agree_on_our_prompt_block_by_block() {
    let mut pieces: Vec<&str> = PROMPT.split("\n# ").collect();
    pieces.push(PROMPT);
    pieces.extend(PROMPT.lines());
    for encoding in Encoding::ALL {
        for piece in &pieces {
            let ids = encoding.encode(piece);
            assert_eq!(
                ids,
                reference_ids(encoding, piece),
                "{encoding} ids differ on {piece:?}"
            );
            assert_eq!(count_tokens(encoding, piece), ids.len());
            assert_eq!(
                bpe_openai_count(encoding, piece),
                ids.len(),
                "{encoding} bpe-openai on {piece:?}"
            );
        }
    }
}

fn markdownish() -> impl Strategy<Value = String> {
    // Words, code spans, bullets, CJK, emoji, digits and odd whitespace: the
    // kinds of text users put in prompt files.
    let atom = prop_oneof![
        "[a-zA-Z]{1,12}",
        Just(" ".to_owned()),
        Just("\n".to_owned()),
        Just("\n- ".to_owned()),
        Just("  ".to_owned()),
        Just("`rm -rf`".to_owned()),
        Just("'s".to_owned()),
        "[0-9]{1,6}",
        "[.,;:!?()\\[\\]{}/\\\\*#_-]{1,3}",
        "[\u{4e00}-\u{4e80}]{1,4}",
        Just("👍".to_owned()),
        Just("\t".to_owned()),
    ];
    proptest::collection::vec(atom, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_reference_on_arbitrary_text(text in prop_oneof![markdownish(), any::<String>()]) {
        for encoding in Encoding::ALL {
            prop_assert_eq!(encoding.encode(&text), reference_ids(encoding, &text));
        }
    }

    /// BPE merges across a join and the pre-tokenizer may regroup the pieces
    /// touching it, so a concatenation's count is near, not equal to, the sum.
    /// This is why the cap is applied to the assembled prefix's own count.
    #[test]
    fn concatenation_is_close_to_the_sum(a in markdownish(), b in markdownish()) {
        for encoding in Encoding::ALL {
            let whole = count_tokens(encoding, &format!("{a}{b}")) as i64;
            let parts = (count_tokens(encoding, &a) + count_tokens(encoding, &b)) as i64;
            prop_assert!((whole - parts).abs() <= 3, "{} {:?}+{:?}: whole {} parts {}", encoding, a, b, whole, parts);
        }
    }
}
