//! Token budget for the assembled prompt prefix.
//!
//! - [`count_tokens`]: exact counts with a real BPE encoding ([`Encoding`],
//!   `o200k_base` by default, `cl100k_base` available), fully offline.
//! - [`lookup`] and [`MODELS`]: context windows and encodings per model;
//!   [`DEFAULT_MODEL`] when the shared config's `model` key is absent.
//! - [`effective_cap`]: the cap rule as a pure function — 8192 by
//!   default, `prompts.max_tokens` from the shared config, and an untrusted
//!   project may lower it but never raise it.
//! - [`BudgetReport`]: the prefix count against the cap and the model's
//!   window, per block and per contributing layer, and the user-owned layers
//!   a refusal names ([`BudgetReport::offenders`]).
//!
//! This crate does no I/O: callers pass the texts and the config values.

mod bpe;
mod cap;
mod encoding;
mod error;
mod memo;
mod model;
mod pretokenize;
mod rank_hash;
mod report;

pub use cap::{
    CapSetting, CapSource, CapWarning, DEFAULT_MAX_TOKENS, EffectiveCap, MAX_TOKENS_KEY,
    SEED_MAX_TOKENS, effective_cap, under_ceiling,
};
pub use encoding::{Encoding, count_tokens};
pub use error::BudgetError;
pub use memo::TokenMemo;
pub use model::{DEFAULT_MODEL, MODELS, ModelInfo, default_model, lookup};
pub use report::{BlockTokens, BudgetReport, LayerTokens, SourceTokens, TokenSummary};
