//! [`History`]: the one interface to kept texts and version records, so a
//! caller reaches them through the store it was given (the home's files or
//! PostgreSQL) and never names a backend.
//!
//! The backends live with the rest of their store: the home's files in
//! `vak-store-file`, the PostgreSQL tables in `vak-store-pg`. This crate
//! holds no storage of its own.

use vak_prompt_blocks::Sha256Hex;

use crate::{HistoryError, VersionRecord, Versions};

/// Kept texts (content-addressed, immutable, verified on every read) and
/// version records (append-only), behind one interface.
pub trait History: Send + Sync + std::fmt::Debug {
    /// Where the history lives, for messages.
    fn history_location(&self) -> String;

    /// Keep `text`; returns its sha256. Idempotent: keeping a text already
    /// kept writes nothing and is not an error, from any number of
    /// processes at once.
    ///
    /// # Errors
    ///
    /// [`HistoryError::TooLarge`] over [`crate::MAX_OBJECT_BYTES`]; the
    /// backend's refusal.
    fn put_object(&self, text: &str) -> Result<Sha256Hex, HistoryError>;

    /// The text kept under `digest`, re-hashed before it is returned.
    ///
    /// # Errors
    ///
    /// "Not kept" ([`HistoryError::is_not_kept`]); an object whose text
    /// no longer hashes to `digest`, never served; [`HistoryError::BadDigest`].
    fn get_object(&self, digest: &str) -> Result<String, HistoryError>;

    /// Whether a version record could be appended now. Asked before a
    /// change is written, so a history that could not take the record
    /// refuses the change rather than leave a version no `log` lists. The
    /// default (a database, whose writes fail as a whole) has nothing to
    /// check beyond what keeping the texts just did.
    ///
    /// # Errors
    ///
    /// The backend's refusal, as [`append_version`](Self::append_version).
    fn check_appendable(&self) -> Result<(), HistoryError> {
        Ok(())
    }

    /// Append one version record, durably.
    ///
    /// # Errors
    ///
    /// The backend's refusal; nothing half-written is ever read back.
    fn append_version(&self, record: &VersionRecord) -> Result<(), HistoryError>;

    /// Every record whose target is `target`, oldest first.
    ///
    /// # Errors
    ///
    /// The backend's refusal. No records is not an error.
    fn versions_of(&self, target: &str) -> Result<Versions, HistoryError>;

    /// Every record, oldest first (for `vak store import`).
    ///
    /// # Errors
    ///
    /// As [`versions_of`](Self::versions_of).
    fn all_versions(&self) -> Result<Versions, HistoryError>;

    /// The digest of every kept object (for `vak store import`).
    ///
    /// # Errors
    ///
    /// The backend's refusal.
    fn object_digests(&self) -> Result<Vec<Sha256Hex>, HistoryError>;

    /// The text under `digest`, `None` when it is not kept; other errors
    /// (an altered object) stay errors.
    ///
    /// # Errors
    ///
    /// As [`get_object`](Self::get_object), except "not kept".
    fn find_object(&self, digest: &str) -> Result<Option<String>, HistoryError> {
        match self.get_object(digest) {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.is_not_kept() => Ok(None),
            Err(error) => Err(error),
        }
    }
}
