//! `vak admin serve`: the authenticated admin API and the #/prompts page.

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};
use vak_admin::{AdminError, ServeConfig, Server};

use crate::CliError;
use crate::selectors::{home_dir, project_dir};

/// `vak admin …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum AdminCommand {
    /// Serve the admin API and the #/prompts page.
    Serve(ServeArgs),
}

/// `vak admin serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on; loopback by default. Port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    pub(crate) listen: String,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// The project directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<Utf8PathBuf>,
}

fn cli_error(error: AdminError) -> CliError {
    match error {
        AdminError::BadListen(_) => CliError::Usage(error.to_string()),
        AdminError::Core(core) => CliError::Core(core),
        other => CliError::Failed(other.to_string()),
    }
}

/// `vak admin …`
pub(crate) fn admin(command: &AdminCommand) -> Result<(), CliError> {
    match command {
        AdminCommand::Serve(args) => serve(args),
    }
}

/// Bind, say where to go and where the token is, then serve until killed.
fn serve(args: &ServeArgs) -> Result<(), CliError> {
    let server = Server::bind(ServeConfig {
        home: home_dir(args.home.as_ref())?,
        project: project_dir(args.project.as_ref())?,
        listen: args.listen.clone(),
        env_token: std::env::var("VAK_ADMIN_TOKEN").ok(),
    })
    .map_err(cli_error)?;
    // The URL is the first line on its own, so scripts can read it.
    println!("{}", server.url());
    let fresh = matches!(server.token_source(), vak_admin::TokenSource::Generated(_));
    println!(
        "token: {}{}",
        server.token_source(),
        if fresh { " (generated just now)" } else { "" }
    );
    server.run().map_err(cli_error)
}
