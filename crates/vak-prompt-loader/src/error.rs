use camino::Utf8PathBuf;
use thiserror::Error;

/// What stops a chain from loading at all. Individual bad files never do:
/// they are reported as skips.
#[derive(Debug, Error)]
pub enum LoaderError {
    /// The project directory given does not exist or is not a directory.
    #[error("project directory `{0}` does not exist or is not a directory")]
    ProjectMissing(Utf8PathBuf),
    /// `--agent ROLE` names a role that has no directory anywhere.
    #[error(
        "agent role `{role}` is not defined: create `{home_dir}` (or `.vak/prompts/agents/{role}/` in the project)"
    )]
    UnknownRole {
        /// The role asked for.
        role: String,
        /// Where the shared definition would live.
        home_dir: Utf8PathBuf,
    },
}
