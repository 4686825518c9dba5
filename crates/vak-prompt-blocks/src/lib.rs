//! The prompt block model shared by every other `vak-prompt-*` crate.
//!
//! A system prompt is a fixed sequence of named [`Block`]s. Each block has an
//! [`Owner`] (the user, or the code) and a [`Composition`] rule that says how
//! the layers of the chain ([`PromptLayer`], widest first) combine into one
//! text. This crate knows the words and the pure rules; it does no I/O.
//!
//! | Block | Owner | Composition |
//! |---|---|---|
//! | `identity` | user | narrowest present layer wins |
//! | `operating-rules` | user | narrowest present layer wins |
//! | `guardrails` | user | concatenate every layer, drop duplicates, never remove |
//! | `capability-contract` | code | fixed |
//! | `surface` | code | runtime-derived |
//! | `surface-note` | user | concatenate every layer, drop duplicates, never remove |
//! | `skills`, `mcp` | code | runtime-derived |
//! | `agent-instructions` | user | additive at the agent tier |

mod block;
mod change;
mod civil;
mod contain;
mod contract;
mod digest;
mod error;
mod guardrail;
mod import;
mod layer;
pub mod lines;
mod name;
mod shared_text;
mod source;
mod structure;
mod surface;
mod text;

pub use block::{Block, Composition, Owner};
pub use change::{ChangeKind, LayerChange, short_digest};
pub use civil::civil_from_days;
pub use contain::{contain_markdown, needs_containment};
pub use contract::{
    AgentIdentity, Baseline, CapabilityDescriptor, FrozenContract, LineDigest, ParentSession,
    PromptLayerDescriptor, fingerprint, fingerprint_of, fingerprint_text,
};
pub use digest::{Sha256Hex, Sha256Writer, TextDigest, sha256_hex};
pub use error::BlocksError;
pub use guardrail::{
    Guardrail, GuardrailLint, GuardrailList, ParsedGuardrails, fold_whitespace, parse_guardrails,
};
pub use import::{ImportLine, MAX_IMPORT_DEPTH, TargetRefusal, check_target, import_lines};
pub use layer::{Origin, PromptLayer, Provenance};
pub use name::{Name, NameKind};
pub use shared_text::SharedText;
pub use source::{GatewayEntry, GatewayFile, GatewayKey, LEDGER_LAYER, MCP_SERVERS_KEY, Source};
pub use structure::{SURFACE_PREFIX, neutralise};
pub use surface::SurfaceKind;
pub use text::{
    Cleaned, Escaped, ForbiddenChar, char_name, clean, escape_line, escape_text, first_forbidden,
    has_forbidden, is_forbidden, is_line_break_like, is_unsafe_for_terminal,
};
