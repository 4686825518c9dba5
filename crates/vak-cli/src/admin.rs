//! `vak admin serve`. (Owned by the admin work; a placeholder until it
//! lands.)

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};

use crate::CliError;

/// `vak admin …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum AdminCommand {
    /// Serve the admin API and the #/prompts page.
    Serve(ServeArgs),
}

/// `vak admin serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on; loopback by default.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    pub(crate) listen: String,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// The project directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<Utf8PathBuf>,
}

/// `vak admin …`
pub(crate) fn admin(_command: &AdminCommand) -> Result<(), CliError> {
    Err(CliError::Failed(
        "`vak admin serve` is not available in this build yet".to_owned(),
    ))
}
