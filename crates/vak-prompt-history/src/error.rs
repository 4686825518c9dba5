//! Why the history could not be read or written.

use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::Escaped;

/// Why the object store or the version log refused. Each message names the
/// file and, for an object, its digest.
#[derive(Debug, Error)]
pub enum HistoryError {
    /// An object whose bytes no longer hash to its name: never served.
    #[error(
        "object {digest} in `{}` was altered on disk: its bytes hash to {actual}, so it is not served; restore it from a backup or delete it (the next save of that text writes it again)",
        Escaped(.path.as_str())
    )]
    Corrupt {
        /// The digest the object is named by.
        digest: String,
        /// The object file.
        path: Utf8PathBuf,
        /// What its bytes hash to now.
        actual: String,
    },
    /// No object for the digest: written before vak kept objects, or removed.
    #[error(
        "text not kept: no object {digest} in `{}` (it was recorded before vak kept prompt texts, or the object was removed)",
        Escaped(.dir.as_str())
    )]
    NotKept {
        /// The digest asked for.
        digest: String,
        /// The object directory.
        dir: Utf8PathBuf,
    },
    /// A stored object (a database row) whose text no longer hashes to its
    /// digest: never served.
    #[error(
        "object {digest} in {store} was altered: its text hashes to {actual}, so it is not served; restore the row from a backup or delete it (the next save of that text keeps it again)"
    )]
    AlteredIn {
        /// The digest the object is kept under.
        digest: String,
        /// The store, as its description names it.
        store: String,
        /// What its text hashes to now.
        actual: String,
    },
    /// No object for the digest in a store that is not a directory.
    #[error(
        "text not kept: no object {digest} in {store} (it was recorded before vak kept prompt texts there, or the object was removed; `vak store import` copies a home's objects)"
    )]
    NotKeptIn {
        /// The digest asked for.
        digest: String,
        /// The store, as its description names it.
        store: String,
    },
    /// The store's backend failed (a database error, a lost connection).
    #[error("{store} could not keep or read prompt history: {reason}")]
    Backend {
        /// The store, as its description names it.
        store: String,
        /// Why, as the backend said it.
        reason: String,
    },
    /// A revert to a text that is not a version of the file or key being
    /// reverted (another block's text, or one never recorded for it).
    #[error(
        "{} is not a version of `{}`: a revert goes back to a text its own log records; see `vak prompts log`",
        Escaped(.digest),
        Escaped(.target)
    )]
    NotAVersion {
        /// The digest asked for.
        digest: String,
        /// The file or gateway key being reverted.
        target: String,
    },
    /// Not a sha256: 64 lowercase hex digits.
    #[error("`{}` is not a sha256: give 64 lowercase hex digits", Escaped(.0))]
    BadDigest(String),
    /// A text or record over its bound; nothing was written.
    #[error("{what} is {bytes} bytes, over the {limit}-byte bound; it was not kept")]
    TooLarge {
        /// What: `the text with sha256 <digest>`, or `a version record for `<file>``.
        what: String,
        /// Its size.
        bytes: u64,
        /// The bound.
        limit: u64,
    },
    /// A symlink, FIFO, device or directory where a store file belongs, or
    /// a store directory that leads outside the home.
    #[error("refusing to use `{}`: {why}", Escaped(.path.as_str()))]
    Refused {
        /// The file or directory.
        path: Utf8PathBuf,
        /// Why, as a clause.
        why: String,
    },
    /// An I/O error, with what was being done.
    #[error("cannot {action} `{}`: {source}", Escaped(.path.as_str()))]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: Utf8PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl HistoryError {
    /// Whether this is "the text is not kept" (an old ledger's digest).
    pub fn is_not_kept(&self) -> bool {
        matches!(
            self,
            HistoryError::NotKept { .. } | HistoryError::NotKeptIn { .. }
        )
    }
}
