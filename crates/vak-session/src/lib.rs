//! What a session freezes at creation, and the contract every session store
//! keeps: the ledger's records, the audit events, the chat bindings, the
//! `Store` interface a delivery runs through, and the errors they report.
//! No code here touches a file: the file backend is `vak-store-file`, the
//! PostgreSQL one `vak-store-pg`.
//!
//! The contract types (`FrozenContract`, the descriptors) are
//! `vak-prompt-blocks`'s, so composition and drift need no store; they are
//! re-exported here, beside the ledger that is their durable home, and by
//! `vak_core::prompts`.
//!
//! Every record is one JSON object with a `type`, and every store keeps the
//! same JSON line; unknown types and unknown fields are skipped, so old and
//! new builds read each other's records. A reader reports a line it skipped
//! as a [`TornLine`], and no line over [`MAX_LINE_BYTES`] is a record.

mod audit;
pub mod crash;
mod error;
mod home;
mod id;
mod ledger;
mod line;
mod store;
mod time;

pub use audit::{
    AuditEntries, ChainOverCap, ConfigChange, MAX_WARNINGS, Rebound, SecurityEvent, TrustOverCap,
};
pub use error::SessionError;
pub use home::{
    Expect, GATEWAY_FILES, HomeFile, HomeSnapshot, HomeStore, LAYER_FILES, SHARED_CONFIG,
    SKILL_FILE, Swapped, home_side_path,
};
pub use id::SessionId;
pub use ledger::{DriftAccepted, Header, Ledger, Record, SessionMeta, Turn, TurnRule};
pub use line::{MAX_LINE_BYTES, SkipReason, TornLine};
pub use store::{Binding, Bound, BoundSession, ChatPlan, Claim, Committed, FreshSession, Store};
pub use time::now_rfc3339;
pub use vak_prompt_blocks::{
    AgentIdentity, Baseline, CapabilityDescriptor, FrozenContract, ParentSession,
    PromptLayerDescriptor, fingerprint, fingerprint_text,
};
pub use vak_prompt_blocks::{ChangeKind, LayerChange, short_digest};
pub use vak_prompt_history::History;
