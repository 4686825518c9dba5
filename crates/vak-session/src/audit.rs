//! The security audit log's events: one JSON object per line, tagged by
//! `type`, the same line in every store.

use serde::{Deserialize, Serialize};

use crate::{LayerChange, SessionId, TornLine};

/// A gateway chat binding rotated to a fresh session because the prompt in
/// force changed. Without this record a rotation would look like a route
/// change or a deleted ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// RFC 3339 UTC instant.
    pub at: String,
    /// The bot of the binding.
    pub bot: String,
    /// The chat of the binding.
    pub chat: String,
    /// The session the chat was bound to; its ledger is kept.
    pub old_session: SessionId,
    /// The fresh session the chat is bound to now.
    pub new_session: SessionId,
    /// The old session's frozen fingerprint.
    #[serde(default)]
    pub old_fingerprint: Option<String>,
    /// The fingerprint of the current resolution.
    #[serde(default)]
    pub new_fingerprint: Option<String>,
    /// Each changed block and layer, with both digests.
    #[serde(default)]
    pub changes: Vec<LayerChange>,
}

/// A gateway chat bound afresh because the ledger of the session it was
/// bound to is gone (deleted or moved away): its earlier turns are not in
/// the new session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rebound {
    /// RFC 3339 UTC instant.
    pub at: String,
    /// The bot of the binding.
    pub bot: String,
    /// The chat of the binding.
    pub chat: String,
    /// The session whose ledger is gone.
    pub gone_session: SessionId,
    /// The fresh session the chat is bound to now.
    pub new_session: SessionId,
}

/// A project trusted over the token cap, as the user asked
/// (`vak trust --over-budget`): trusting put these chains over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustOverCap {
    /// RFC 3339 UTC instant.
    pub at: String,
    /// The project, as the trust store keys it.
    pub project: String,
    /// Who trusted it: `user:<os user>`.
    pub who: String,
    /// Each chain over the cap once trusted, largest first.
    #[serde(default)]
    pub chains: Vec<ChainOverCap>,
}

/// One chain over its cap, as an audit event records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainOverCap {
    /// The chain: `surface cli, directory `services``.
    pub chain: String,
    /// Its prefix, in tokens.
    pub prefix_tokens: usize,
    /// The cap it is over.
    pub cap: usize,
}

/// One line of the security log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SecurityEvent {
    /// A binding rotated because its prompt drifted.
    ConfigChange(ConfigChange),
    /// A project was trusted over the token cap (`--over-budget`).
    TrustOverCap(TrustOverCap),
    /// A binding whose ledger is gone was bound to a fresh session.
    Rebound(Rebound),
    /// An event type this build does not know, written by a newer one.
    #[serde(other)]
    Unknown,
}

/// The security log as read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditEntries {
    /// The events this build knows: every one oldest first from a whole
    /// read, the newest `limit` newest first from a page
    /// ([`Store::audit_newest`](crate::Store::audit_newest)).
    pub events: Vec<SecurityEvent>,
    /// How many known events the log holds in all.
    pub total: usize,
    /// How many events of unknown type were skipped.
    pub skipped_unknown: usize,
    /// How many lines were skipped because they are not records (foreign,
    /// torn or over the line bound), wherever they are in the log.
    pub skipped_lines: usize,
    /// The first [`MAX_WARNINGS`] skipped lines, each naming file and line.
    pub warnings: Vec<TornLine>,
}

/// How many skipped lines an [`AuditEntries`] names one by one; the rest
/// are counted in [`AuditEntries::skipped_lines`].
pub const MAX_WARNINGS: usize = 20;
