//! What a session freezes at creation, and the files it is written to.
//!
//! The contract types (`FrozenContract`, the descriptors) are
//! `vak-prompt-blocks`'s, so composition and drift need no store; they are
//! re-exported here, beside the ledger that is their durable home, and by
//! `vak_core::prompts`.
//!
//! Three stores, all under `$VAK_HOME/.vak/`, all plain files:
//!
//! | store | path | write discipline |
//! |---|---|---|
//! | [`SessionStore`] | `sessions/<id>.jsonl` | append-only JSON lines; exclusive lock, one full line, fsync |
//! | [`AuditLog`] | `audit/security.jsonl` | the same |
//! | [`BindingStore`] | `gateway/bindings.json` | read-modify-write under a lock file; temp, fsync, rename, fsync dir |
//!
//! Every JSON-lines record carries a `type`; unknown types and unknown fields
//! are skipped, so old and new builds read each other's files. Every line is
//! read under [`MAX_LINE_BYTES`]. In a ledger a skipped last line (torn, not
//! a record, too long) is reported and skipped, and a bad earlier line is an
//! error naming the file and line; the audit log, a report,
//! skips and names a bad line wherever it is. An append never builds on a
//! line readers skip: under its lock it first moves every such trailing line
//! into a sibling `<name>.foreign-<unix nanos>` (never replacing one) and
//! truncates to the last record, so the record it reports as written is
//! always read back.

mod audit;
mod bindings;
pub mod crash;
mod error;
mod file;
mod home;
mod id;
mod jsonl;
mod ledger;
mod store;
mod time;

pub use audit::{
    AuditEntries, AuditLog, ChainOverCap, ConfigChange, MAX_WARNINGS, Rebound, SecurityEvent,
    TrustOverCap,
};
pub use bindings::{Binding, BindingGuard, BindingStore, ChatLock};
pub use error::SessionError;
pub use home::{
    Expect, GATEWAY_FILES, HomeFile, HomeSnapshot, HomeStore, LAYER_FILES, SHARED_CONFIG,
    SKILL_FILE, Swapped, home_side_path,
};
pub use id::SessionId;
pub use jsonl::{MAX_LINE_BYTES, SkipReason, TornLine};
pub use ledger::{
    DriftAccepted, Header, Ledger, PENDING_MAX_AGE, Record, SessionMeta, SessionStore, Turn,
    TurnRule,
};
pub use store::{Bound, BoundSession, ChatPlan, Claim, Committed, FileStore, FreshSession, Store};
pub use time::now_rfc3339;
pub use vak_prompt_blocks::{
    AgentIdentity, Baseline, CapabilityDescriptor, FrozenContract, ParentSession,
    PromptLayerDescriptor, fingerprint, fingerprint_text,
};
pub use vak_prompt_blocks::{ChangeKind, LayerChange, short_digest};
pub use vak_prompt_history::{FileHistory, History};
