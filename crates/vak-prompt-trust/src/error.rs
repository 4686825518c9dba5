use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::Escaped;

/// Errors reading or writing the trust store.
#[derive(Debug, Error)]
pub enum TrustError {
    /// The trust store could not be read.
    #[error("could not read the trust store `{}`: {source}", Escaped(.path.as_str()))]
    Read {
        /// The store's path.
        path: Utf8PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The trust store is not valid TOML of the expected shape.
    #[error(
        "the trust store `{}` is malformed: {}; fix or delete it (it lists trusted project directories)",
        Escaped(.path.as_str()),
        Escaped(.message)
    )]
    Malformed {
        /// The store's path.
        path: Utf8PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The trust store is a symlink, FIFO, device or directory.
    #[error(
        "the trust store `{}` is not a regular file (a symlink, FIFO, device or directory); vak will not read it: delete it and trust your projects again",
        Escaped(.0.as_str())
    )]
    NotRegularFile(Utf8PathBuf),
    /// The trust store is larger than any list of directories should be.
    #[error(
        "the trust store `{}` is {bytes} bytes or more, over the {}-byte limit; vak will not read it: fix or delete it",
        Escaped(.path.as_str()),
        crate::store::MAX_STORE_BYTES
    )]
    TooLarge {
        /// The store's path.
        path: Utf8PathBuf,
        /// The size seen.
        bytes: u64,
    },
    /// The trust store or its lock is not a regular file, or a step of
    /// writing it failed.
    #[error(transparent)]
    File(#[from] vak_fs::FsError),
    /// The trust store could not be written.
    #[error("could not write the trust store `{}`: {source}", Escaped(.path.as_str()))]
    Write {
        /// The store's path.
        path: Utf8PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A directory to trust does not exist or its path is not UTF-8.
    #[error(
        "cannot trust `{}`: it does not exist or is not a UTF-8 directory path",
        Escaped(.0)
    )]
    BadDirectory(String),
    /// The directory is the vak home or inside it.
    #[error(
        "cannot trust `{}`: it is the vak home or inside it, and the home is never a project (its layers are the shared ones, and always apply)",
        Escaped(.0)
    )]
    InsideHome(String),
}
