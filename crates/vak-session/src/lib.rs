//! What a session freezes at creation, and the files it is written to.
//!
//! The contract types live here, beside the ledger, because a ledger is
//! their only durable home; `vak_core::prompts` re-exports them.
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
//! are skipped, so old and new builds read each other's files. A torn last
//! line is reported and skipped; a bad earlier line is an error naming the
//! file and line.

mod audit;
mod bindings;
mod change;
mod contract;
mod error;
mod file;
mod id;
mod jsonl;
mod ledger;
mod time;

pub use audit::{AuditEntries, AuditLog, ConfigChange, SecurityEvent};
pub use bindings::{Binding, BindingGuard, BindingStore};
pub use change::{ChangeKind, LayerChange, short_digest};
pub use contract::{
    AgentIdentity, CapabilityDescriptor, FrozenContract, ParentSession, PromptLayerDescriptor,
    fingerprint,
};
pub use error::SessionError;
pub use id::SessionId;
pub use jsonl::TornLine;
pub use ledger::{DriftAccepted, Header, Ledger, Record, SessionMeta, SessionStore, Turn};
pub use time::now_rfc3339;
