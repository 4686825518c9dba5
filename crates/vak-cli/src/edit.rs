//! `vak prompts set|edit|reset|check`. (Owned by the budget/editing work;
//! these handlers are placeholders until it lands.)

use camino::Utf8PathBuf;
use clap::{Args, ValueEnum};

use crate::CliError;
use crate::selectors::{Format, SelectorArgs};

/// Which directory layer a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scope {
    /// `$VAK_HOME/.vak/prompts/`
    Shared,
    /// `<project>/.vak/prompts/`
    Project,
}

/// Where a write goes: scope plus optional sub-layer.
#[derive(Debug, Clone, Args)]
pub(crate) struct TargetArgs {
    /// The layer to write.
    #[arg(long, value_enum)]
    pub(crate) scope: Scope,
    /// Write the surface/KIND sub-layer instead.
    #[arg(long, value_name = "KIND", conflicts_with = "agent")]
    pub(crate) surface: Option<String>,
    /// Write the agents/ROLE sub-layer instead.
    #[arg(long, value_name = "ROLE")]
    pub(crate) agent: Option<String>,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// The project directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<Utf8PathBuf>,
    /// The block: identity, operating-rules, guardrails or surface-note.
    pub(crate) block: String,
}

/// `vak prompts set`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SetArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Read the new text from this file.
    #[arg(long, value_name = "F")]
    pub(crate) file: Option<Utf8PathBuf>,
    /// `-`: read the new text from standard input.
    #[arg(value_name = "-")]
    pub(crate) stdin: Option<String>,
    /// Refuse unless the file's current sha256 is this.
    #[arg(long, value_name = "HEX")]
    pub(crate) if_digest: Option<String>,
}

/// `vak prompts edit`.
#[derive(Debug, Clone, Args)]
pub(crate) struct EditArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

/// `vak prompts reset`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
}

/// `vak prompts check`.
#[derive(Debug, Clone, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) selectors: SelectorArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

fn pending(what: &str) -> CliError {
    CliError::Failed(format!(
        "`vak prompts {what}` is not available in this build yet"
    ))
}

/// `vak prompts set`.
pub(crate) fn set(_args: &SetArgs) -> Result<(), CliError> {
    Err(pending("set"))
}

/// `vak prompts edit`.
pub(crate) fn edit(_args: &EditArgs) -> Result<(), CliError> {
    Err(pending("edit"))
}

/// `vak prompts reset`.
pub(crate) fn reset(_args: &ResetArgs) -> Result<(), CliError> {
    Err(pending("reset"))
}

/// `vak prompts check`.
pub(crate) fn check(_args: &CheckArgs) -> Result<(), CliError> {
    Err(pending("check"))
}
