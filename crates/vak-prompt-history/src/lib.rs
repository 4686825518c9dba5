//! Every prompt has a history: the content-addressed object
//! store that keeps every text a save writes and every text a frozen session
//! contributed, and the version log that says who changed which layer file,
//! when, from which digest to which.
//!
//! This crate is the contract every store keeps: the [`History`] interface,
//! the [`VersionRecord`] it appends, the one size rule and check of a kept
//! text ([`object_digest`], [`verified_object`]) and the diff between two
//! texts. It holds no storage: the home's files are `vak-store-file`'s
//! (`FileHistory`), the PostgreSQL tables `vak-store-pg`'s.
//!
//! Architecture invariant: this crate knows texts and digests, not
//! policy. It never decides whether a change is allowed; `vak-core` does,
//! and records here what it allowed.

mod diff;
mod digest;
mod error;
mod history;
mod records;

pub use diff::unified_diff;
pub use digest::{MAX_OBJECT_BYTES, is_digest, object_digest, verified_object};
pub use error::HistoryError;
pub use history::History;
pub use records::{Action, MAX_RECORD_BYTES, VersionRecord, Versions};
