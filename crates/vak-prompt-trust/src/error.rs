use camino::Utf8PathBuf;
use thiserror::Error;

/// Errors reading or writing the trust store.
#[derive(Debug, Error)]
pub enum TrustError {
    /// The trust store could not be read.
    #[error("could not read the trust store `{path}`: {source}")]
    Read {
        /// The store's path.
        path: Utf8PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The trust store is not valid TOML of the expected shape.
    #[error(
        "the trust store `{path}` is malformed: {message}; fix or delete it (it lists trusted project directories)"
    )]
    Malformed {
        /// The store's path.
        path: Utf8PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The trust store could not be written.
    #[error("could not write the trust store `{path}`: {source}")]
    Write {
        /// The store's path.
        path: Utf8PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A directory to trust does not exist or its path is not UTF-8.
    #[error("cannot trust `{0}`: it does not exist or is not a UTF-8 directory path")]
    BadDirectory(String),
}
