//! Every prompt has a history: the content-addressed object
//! store that keeps every text a save writes and every text a frozen session
//! contributed, and the version log that says who changed which layer file,
//! when, from which digest to which.
//!
//! Both live under the home, `$VAK_HOME/.vak/`:
//!
//! | store | path | write discipline |
//! |---|---|---|
//! | [`ObjectStore`] | `objects/<sha256>` | temp file, fsync, rename, fsync dir; idempotent; verified on every read |
//! | [`VersionLog`] | `history/versions.jsonl` | append-only JSON lines; exclusive lock, one full line, fsync |
//!
//! Every file is opened through the loader's confined layer
//! ([`vak_prompt_loader::confine`]): never through a symlink, never a FIFO
//! or device, always bounded.
//!
//! Callers reach both through the [`History`] interface, which the chosen
//! store hands out: [`FileHistory`] here, the PostgreSQL tables in
//! `vak-store-pg`.
//!
//! Architecture invariant: this crate knows texts and digests, not
//! policy. It never decides whether a change is allowed; `vak-core` does,
//! and records here what it allowed.

mod diff;
mod error;
mod history;
mod log;
mod objects;

pub use diff::unified_diff;
pub use error::HistoryError;
pub use history::{FileHistory, History};
pub use log::{Action, MAX_RECORD_BYTES, VersionLog, VersionRecord, Versions};
pub use objects::{MAX_OBJECT_BYTES, ObjectStore, is_digest, object_digest, verified_object};
