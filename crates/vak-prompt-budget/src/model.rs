//! The model catalog: context windows and the encoding each model counts with.
//!
//! OpenAI models use their published encoding, so their counts are exact.
//! Other vendors do not publish a tokenizer the runtime can run offline;
//! their entries count with `o200k_base` and say so with
//! [`ModelInfo::approximate`]. On English prose and markdown the difference
//! is a few percent, far less than the headroom between a 1500-token cap and
//! any of these context windows, so the cap still means what it says.

use crate::{BudgetError, Encoding};

/// One model the runtime can budget for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModelInfo {
    /// The model's API name, e.g. `gpt-4o`.
    pub name: &'static str,
    /// The total context window in tokens, as the vendor documents it.
    pub context_window: u32,
    /// The encoding counts are made with.
    pub encoding: Encoding,
    /// `true` when `encoding` is a stand-in for a tokenizer the vendor does
    /// not publish (Anthropic, Google): counts are then close, not exact.
    pub approximate: bool,
}

/// The model assumed when the shared config has no `model` key. Its window
/// (128,000 tokens) is the one the admin UI's sketch shows.
pub const DEFAULT_MODEL: &str = "gpt-4o";

const fn exact(name: &'static str, context_window: u32, encoding: Encoding) -> ModelInfo {
    ModelInfo {
        name,
        context_window,
        encoding,
        approximate: false,
    }
}

const fn approx(name: &'static str, context_window: u32) -> ModelInfo {
    ModelInfo {
        name,
        context_window,
        encoding: Encoding::O200kBase,
        approximate: true,
    }
}

/// Every model in the catalog. Dated snapshots (`gpt-4o-2024-08-06`,
/// `claude-sonnet-4-5-20250929`) resolve to their family's entry.
pub const MODELS: &[ModelInfo] = &[
    exact("gpt-5", 400_000, Encoding::O200kBase),
    exact("gpt-5-mini", 400_000, Encoding::O200kBase),
    exact("gpt-5-nano", 400_000, Encoding::O200kBase),
    exact("gpt-5.1", 400_000, Encoding::O200kBase),
    exact("gpt-4.1", 1_047_576, Encoding::O200kBase),
    exact("gpt-4.1-mini", 1_047_576, Encoding::O200kBase),
    exact("gpt-4.1-nano", 1_047_576, Encoding::O200kBase),
    exact("gpt-4o", 128_000, Encoding::O200kBase),
    exact("gpt-4o-mini", 128_000, Encoding::O200kBase),
    exact("o1", 200_000, Encoding::O200kBase),
    exact("o3", 200_000, Encoding::O200kBase),
    exact("o3-mini", 200_000, Encoding::O200kBase),
    exact("o3-pro", 200_000, Encoding::O200kBase),
    exact("o4-mini", 200_000, Encoding::O200kBase),
    exact("gpt-4-turbo", 128_000, Encoding::Cl100kBase),
    exact("gpt-4", 8_192, Encoding::Cl100kBase),
    exact("gpt-3.5-turbo", 16_385, Encoding::Cl100kBase),
    approx("claude-opus-4-5", 200_000),
    approx("claude-opus-4-1", 200_000),
    approx("claude-opus-4", 200_000),
    approx("claude-sonnet-4-5", 200_000),
    approx("claude-sonnet-4", 200_000),
    approx("claude-haiku-4-5", 200_000),
    approx("claude-3-5-haiku", 200_000),
    approx("gemini-2.5-pro", 1_048_576),
    approx("gemini-2.5-flash", 1_048_576),
];

/// The catalog entry for `name`, exactly or by stripping a dated snapshot
/// suffix (`-2024-08-06`, `-20250929`).
///
/// # Errors
///
/// [`BudgetError::UnknownModel`] naming the model and the config key, with
/// the names that would work.
pub fn lookup(name: &str) -> Result<&'static ModelInfo, BudgetError> {
    let find = |candidate: &str| MODELS.iter().find(|m| m.name == candidate);
    find(name)
        .or_else(|| strip_snapshot_date(name).and_then(find))
        .ok_or_else(|| BudgetError::UnknownModel {
            name: name.to_owned(),
            known: MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
            default: DEFAULT_MODEL,
        })
}

/// The catalog entry for [`DEFAULT_MODEL`].
pub fn default_model() -> &'static ModelInfo {
    // The default is a catalog entry by construction; a unit test pins it.
    MODELS
        .iter()
        .find(|m| m.name == DEFAULT_MODEL)
        .unwrap_or(&MODELS[0])
}

/// `name` without a trailing `-YYYY-MM-DD` or `-YYYYMMDD`, when it has one.
fn strip_snapshot_date(name: &str) -> Option<&str> {
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let (head, tail) = name.rsplit_once('-')?;
    if tail.len() == 8 && digits(tail) {
        return Some(head);
    }
    // `-YYYY-MM-DD`: the last three dash-separated parts are 4, 2, 2 digits.
    let (head, day) = (head, tail);
    let (head, month) = head.rsplit_once('-')?;
    let (head, year) = head.rsplit_once('-')?;
    let ok = year.len() == 4 && month.len() == 2 && day.len() == 2;
    (ok && digits(year) && digits(month) && digits(day)).then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_model_is_in_the_catalog() {
        let m = lookup(DEFAULT_MODEL).unwrap();
        assert_eq!(default_model(), m);
        assert_eq!(m.context_window, 128_000);
        assert_eq!(m.encoding, Encoding::O200kBase);
        assert!(!m.approximate);
    }

    #[test]
    fn names_are_unique_and_windows_dwarf_the_cap() {
        for (i, a) in MODELS.iter().enumerate() {
            assert!(
                MODELS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
            assert!(
                a.context_window as usize > crate::SEED_MAX_TOKENS * 4,
                "{}",
                a.name
            );
            // Only non-OpenAI entries may be approximations.
            let openai = a.name.starts_with("gpt-") || a.name.starts_with('o');
            assert_eq!(a.approximate, !openai, "{}", a.name);
        }
    }

    #[test]
    fn lookup_table() {
        let cases = [
            ("gpt-4o", Some("gpt-4o")),
            ("gpt-4o-mini", Some("gpt-4o-mini")),
            ("gpt-4o-2024-08-06", Some("gpt-4o")),
            ("gpt-4o-mini-2024-07-18", Some("gpt-4o-mini")),
            ("claude-sonnet-4-5-20250929", Some("claude-sonnet-4-5")),
            ("gpt-4", Some("gpt-4")),
            ("o4-mini", Some("o4-mini")),
            ("GPT-4o", None),
            ("gpt-4o-latest-ish", None),
            ("gpt-4o-24-08-06", None),
            ("llama-3", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(lookup(input).ok().map(|m| m.name), want, "{input:?}");
        }
    }

    #[test]
    fn unknown_model_error_names_model_key_and_choices() {
        let msg = lookup("gpt-7").unwrap_err().to_string();
        assert!(msg.contains("`gpt-7`"), "{msg}");
        assert!(msg.contains("`model`"), "{msg}");
        assert!(msg.contains("gpt-4o-mini"), "{msg}");
        assert!(msg.contains("default `gpt-4o`"), "{msg}");
    }

    #[test]
    fn legacy_models_count_with_cl100k() {
        for name in ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"] {
            assert_eq!(lookup(name).unwrap().encoding, Encoding::Cl100kBase);
        }
    }
}
