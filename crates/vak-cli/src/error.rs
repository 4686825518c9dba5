use std::process::ExitCode;

use thiserror::Error;
use vak_core::CoreError;
use vak_core::prompts::Escaped;

/// Everything a `vak` command can fail with. Each variant knows its exit
/// code (DECISIONS §8: 1 error, 2 usage, 3 drift refused, 4 over budget).
#[derive(Debug, Error)]
pub(crate) enum CliError {
    /// Resolution, trust or name errors from the library.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The managed layer, a signing key or the home's key pin refused.
    #[error(transparent)]
    Managed(#[from] vak_core::prompts::ManagedError),
    /// A file or stream could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `--home` or `$VAK_HOME` names something that exists and is not a
    /// directory.
    #[error(
        "the home `{}` is not a directory: give --home or VAK_HOME a directory (one that does not exist yet starts empty)",
        Escaped(.0.as_str())
    )]
    HomeNotADirectory(camino::Utf8PathBuf),
    /// The command line is well-formed but asks for something impossible.
    #[error("{0}")]
    Usage(String),
    /// A named session's prompt changed and `--accept-drift` was not given.
    #[error("{0}")]
    DriftRefused(String),
    /// A save or check would put the prefix over the token cap.
    #[error("{0}")]
    OverBudget(String),
    /// Standard output was closed by its reader (`vak … | head`): not an
    /// error worth a word, the command just stops.
    #[error("standard output was closed")]
    BrokenPipe,
    /// Any other failure, as one sentence.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::BrokenPipe => 0,
            CliError::Usage(_) => 2,
            CliError::DriftRefused(_) => 3,
            CliError::OverBudget(_) | CliError::Core(CoreError::OverContextWindow(_)) => 4,
            CliError::Core(
                CoreError::Name(_) | CoreError::ChatWithoutBot | CoreError::NestedRepository { .. },
            ) => 2,
            _ => 1,
        })
    }
}
