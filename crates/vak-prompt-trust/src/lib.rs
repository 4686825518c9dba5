//! Trust: what a project the user has not vouched for may contribute.
//!
//! Three small pieces, kept apart on purpose:
//! - [`Trust`], an ordered word (`Untrusted < Trusted`);
//! - [`prompt_verdict`], one pure function `(provenance, block, trust) ->
//!   Keep | Demote(reason)` that is the trust table of docs/trust.md, and
//!   [`demote_config`], the same policy for privileged `config.toml` keys;
//! - [`TrustStore`], the user's list of trusted project directories in
//!   `$VAK_HOME/.vak/trust.toml`.
//!
//! Demotion drops quietly *and reports*: a resolution always says what it
//! dropped and why, so a user sees that a file was ignored instead of
//! wondering.

mod config;
mod error;
mod policy;
mod store;

pub use config::{DemotedKey, demote_config, would_demote};
pub use error::TrustError;
pub use policy::{DemoteReason, Trust, Verdict, prompt_verdict};
pub use store::{MAX_STORE_BYTES, TrustStore, Untrusted};
