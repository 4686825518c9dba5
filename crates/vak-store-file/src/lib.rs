//! The file backend of the session store: every store file under
//! `$VAK_HOME/.vak/`, plain files, holding the records `vak-session`
//! defines.
//!
//! | store | path | write discipline |
//! |---|---|---|
//! | [`SessionStore`] | `sessions/<id>.jsonl` | append-only JSON lines; exclusive lock, one full line, fsync |
//! | [`AuditLog`] | `audit/security.jsonl` | the same |
//! | [`BindingStore`] | `gateway/bindings.json` | read-modify-write under a lock file; temp, fsync, rename, fsync dir |
//!
//! [`FileStore`] puts the three behind `vak_session::Store`. Every line is
//! read under `vak_session::MAX_LINE_BYTES`. In a ledger a skipped last
//! line (torn, not a record, too long) is reported and skipped, and a bad
//! earlier line is an error naming the file and line; the audit log, a
//! report, skips and names a bad line wherever it is. An append never
//! builds on a line readers skip: under its lock it first moves every such
//! trailing line into a sibling `<name>.foreign-<unix nanos>` (never
//! replacing one) and truncates to the last record, so the record it
//! reports as written is always read back.

mod audit;
mod bindings;
mod file;
mod history;
mod jsonl;
mod ledger;
mod store;

pub use audit::AuditLog;
pub use bindings::{BindingGuard, BindingStore, ChatLock};
pub use history::{FileHistory, ObjectStore, VersionLog};
pub use ledger::{PENDING_MAX_AGE, SessionStore};
pub use store::FileStore;
