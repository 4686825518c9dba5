use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::{BlocksError, Escaped};

/// Everything that can go wrong in the session store, the audit log and the
/// gateway bindings. Each message names the file (and line or key) at fault.
#[derive(Debug, Error)]
pub enum SessionError {
    /// A session id that could escape the sessions directory or confuse a path.
    #[error(transparent)]
    InvalidId(BlocksError),
    /// A bot or chat name that is not safe to record.
    #[error(transparent)]
    InvalidName(BlocksError),
    /// No ledger exists for the id.
    #[error(
        "no session `{}`: `{}` does not exist; `vak session list` shows the sessions there are",
        Escaped(.id), Escaped(.path.as_str())
    )]
    NotFound {
        /// The id asked for.
        id: String,
        /// Where its ledger would be.
        path: Utf8PathBuf,
    },
    /// A filesystem operation failed.
    #[error("could not {action} `{}`: {}", Escaped(.path.as_str()), Escaped(&.source.to_string()))]
    Io {
        /// What was being done, e.g. `append to`.
        action: &'static str,
        /// The file or directory involved.
        path: Utf8PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A line before the last one does not parse: the file was damaged or
    /// edited by hand, and reading on would silently drop history.
    #[error(
        "`{}` line {line} is not a valid record ({}); only a torn last line is skipped, so repair or move the file",
        Escaped(.path.as_str()), Escaped(&.source.to_string())
    )]
    BadLine {
        /// The JSON-lines file.
        path: Utf8PathBuf,
        /// 1-based line number.
        line: usize,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The ledger does not start with its `created` record.
    #[error(
        "`{}` does not start with a `created` record, so it holds no frozen contract; it is not a session ledger",
        Escaped(.path.as_str())
    )]
    MissingHeader {
        /// The ledger file.
        path: Utf8PathBuf,
    },
    /// A second `created` record, which would make the frozen contract ambiguous.
    #[error(
        "`{}` line {line} is a second `created` record; a ledger freezes its contract once",
        Escaped(.path.as_str())
    )]
    DuplicateHeader {
        /// The ledger file.
        path: Utf8PathBuf,
        /// 1-based line number.
        line: usize,
    },
    /// A caller tried to append a record that only `create` may write.
    #[error(
        "a `{kind}` record cannot be appended to session `{id}`; only `create` writes the contract record"
    )]
    NotAppendable {
        /// The record type.
        kind: &'static str,
        /// The session.
        id: String,
    },
    /// A record could not be turned into JSON.
    #[error("could not encode a record for `{}`: {source}", Escaped(.path.as_str()))]
    Encode {
        /// The file it was meant for.
        path: Utf8PathBuf,
        /// The serializer's reason.
        #[source]
        source: serde_json::Error,
    },
    /// A database store failed; `store` names it (never its password).
    #[error("{store}: {reason}")]
    Backend {
        /// The store, as `Store::describe` names it.
        store: String,
        /// What failed, as one sentence.
        reason: String,
    },
    /// A database's schema is newer than any this build ships: a newer vak
    /// migrated it, and this one would write rows that build does not
    /// expect. Refused before anything is written.
    #[error(
        "{store}: its schema is version {found}, newer than version {known}, the newest this build of vak knows; nothing was changed, so use a vak at least as new as the one that migrated it"
    )]
    SchemaTooNew {
        /// The store, as `Store::describe` names it.
        store: String,
        /// The newest migration the database has applied.
        found: i32,
        /// The newest migration this build ships.
        known: i32,
    },
    /// A delivery plan asked to continue a chat that has no live session:
    /// a bug in the caller, refused before anything is written.
    #[error(
        "the delivery to `{}`/`{}` asked to continue a session the chat is not bound to; nothing was written",
        Escaped(.bot), Escaped(.chat)
    )]
    PlanMismatch {
        /// The bot.
        bot: String,
        /// The chat.
        chat: String,
    },
    /// The home side changed in the store after this delivery's prompt was
    /// resolved: the delivery wrote nothing and is retried on the new one.
    #[error(
        "{store}: the home side moved to generation {now} after this delivery resolved generation {resolved}; nothing was written, so deliver again"
    )]
    HomeMoved {
        /// The store.
        store: String,
        /// The generation the resolution used.
        resolved: i64,
        /// The store's generation under the chat's lock.
        now: i64,
    },
    /// The delivery's request signature was already taken by a delivery
    /// that committed: a replay. Nothing was written.
    #[error(
        "this signed request was already received and delivered (a replay); nothing was written, so sign each new request afresh"
    )]
    Replayed,
    /// The bindings file is not valid JSON of the expected shape.
    #[error(
        "`{}` is not a valid bindings file ({}); fix or move it, nothing was changed",
        Escaped(.path.as_str()), Escaped(&.source.to_string())
    )]
    BadBindings {
        /// The bindings file.
        path: Utf8PathBuf,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// A store file is a FIFO, device, socket or directory: reading it could
    /// block forever, so it is never opened for reading or writing.
    #[error(
        "`{}` is not a regular file ({kind}); vak never reads or writes a session store through one, so move it aside",
        Escaped(.path.as_str())
    )]
    NotRegular {
        /// The file.
        path: Utf8PathBuf,
        /// What it is instead, e.g. `a FIFO`.
        kind: &'static str,
    },
    /// A store file is a symbolic link, which could lead out of the store.
    #[error(
        "`{}` is a symbolic link; vak never reads or writes a session store through one, so replace it with the file itself",
        Escaped(.path.as_str())
    )]
    Symlink {
        /// The link.
        path: Utf8PathBuf,
    },
    /// A line of a ledger is longer than any record vak writes.
    #[error(
        "`{}` line {line} is longer than the {max}-byte bound for one record; only a last line is skipped, so repair or move the file",
        Escaped(.path.as_str())
    )]
    LineTooLong {
        /// The JSON-lines file.
        path: Utf8PathBuf,
        /// 1-based line number.
        line: usize,
        /// The bound.
        max: usize,
    },
    /// Binding one more chat would make the bindings file larger than the
    /// bound it is read under (so it could never be read again).
    #[error(
        "binding this chat would make `{}` {size} bytes, over the {max}-byte bound it is read under; nothing was changed. Remove the bindings of chats no longer used, or move the gateway to PostgreSQL (`vak store import`)",
        Escaped(.path.as_str())
    )]
    BindingsFull {
        /// The file.
        path: Utf8PathBuf,
        /// The size it would have had.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// The bindings file is larger than the bound it is read under.
    #[error(
        "`{}` is {size} bytes, over the {max}-byte bound for a bindings file; nothing was read or changed",
        Escaped(.path.as_str())
    )]
    TooLarge {
        /// The file.
        path: Utf8PathBuf,
        /// Its size.
        size: u64,
        /// The bound.
        max: u64,
    },
}

impl SessionError {
    /// An I/O error while doing `action` (a verb phrase: `read`, `create
    /// directory`) on `path`: what every store reports when the system
    /// refuses it.
    pub fn io(action: &'static str, path: impl Into<Utf8PathBuf>, source: std::io::Error) -> Self {
        SessionError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
