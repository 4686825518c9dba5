use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::Escaped;

/// What stops a chain from loading at all. Individual bad files never do:
/// they are reported as skips.
#[derive(Debug, Error)]
pub enum LoaderError {
    /// The project directory given does not exist or is not a directory.
    #[error("project directory `{}` does not exist or is not a directory", Escaped(.0.as_str()))]
    ProjectMissing(Utf8PathBuf),
    /// `--agent ROLE` names a role that has no directory anywhere.
    #[error(
        "agent role `{}` is not defined: create `{}` (or `.vak/prompts/agents/{}/` in the project)",
        Escaped(.role), Escaped(.home_dir.as_str()), Escaped(.role)
    )]
    UnknownRole {
        /// The role asked for.
        role: String,
        /// Where the shared definition would live.
        home_dir: Utf8PathBuf,
    },
    /// `--agent ROLE` names a role whose only directory is refused (a
    /// symlink leading out of its home or project, not a directory).
    #[error(
        "agent role `{}` is refused: its directory `{}` {}",
        Escaped(.role), Escaped(.dir.as_str()), Escaped(.reason)
    )]
    RoleRefused {
        /// The role asked for.
        role: String,
        /// The refused directory.
        dir: Utf8PathBuf,
        /// Why, as the skip says it (a sentence fragment).
        reason: String,
    },
    /// The managed layer is refused (its mode, a signature, its keys): no
    /// prompt resolves without the floor its administrator set.
    #[error(transparent)]
    Managed(#[from] crate::ManagedError),
}
