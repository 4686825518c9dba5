use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::BlocksError;

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
        "no session `{id}`: `{path}` does not exist; `vak session list` shows the sessions there are"
    )]
    NotFound {
        /// The id asked for.
        id: String,
        /// Where its ledger would be.
        path: Utf8PathBuf,
    },
    /// A filesystem operation failed.
    #[error("could not {action} `{path}`: {source}")]
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
        "`{path}` line {line} is not a valid record ({source}); only a torn last line is skipped, so repair or move the file"
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
        "`{path}` does not start with a `created` record, so it holds no frozen contract; it is not a session ledger"
    )]
    MissingHeader {
        /// The ledger file.
        path: Utf8PathBuf,
    },
    /// A second `created` record, which would make the frozen contract ambiguous.
    #[error(
        "`{path}` line {line} is a second `created` record; a ledger freezes its contract once"
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
    #[error("could not encode a record for `{path}`: {source}")]
    Encode {
        /// The file it was meant for.
        path: Utf8PathBuf,
        /// The serializer's reason.
        #[source]
        source: serde_json::Error,
    },
    /// The bindings file is not valid JSON of the expected shape.
    #[error(
        "`{path}` is not a valid bindings file ({source}); fix or move it, nothing was changed"
    )]
    BadBindings {
        /// The bindings file.
        path: Utf8PathBuf,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
}

impl SessionError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<Utf8PathBuf>,
        source: std::io::Error,
    ) -> Self {
        SessionError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
