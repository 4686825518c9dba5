//! `vak admin serve`: the authenticated admin API and the #/prompts page.

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};
use vak_admin::{AdminError, ServeConfig, Server, TokenSource};
use vak_core::prompts::escape_line;

use crate::selectors::{HomeArg, StoreArg, project_in};
use crate::{CliError, out};

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
    #[command(flatten)]
    pub(crate) home: HomeArg,
    /// The project root, exactly [default: found from the current directory:
    /// the nearest ancestor with .git, else with .vak, else the current
    /// directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) project: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

/// The error as one escaped line: admin errors quote addresses and paths
/// from input, and none of them may start a line of its own.
pub(crate) fn cli_error(error: AdminError) -> CliError {
    match error {
        AdminError::BadListen(_) => CliError::Usage(escape_line(&error.to_string()).into_owned()),
        AdminError::Core(core) => CliError::Core(core),
        other => CliError::Failed(escape_line(&other.to_string()).into_owned()),
    }
}

/// `token: <where>`, the second line `serve` prints, escaped: the token
/// file's path comes from `--home` or `$VAK_HOME`.
fn token_line(source: &TokenSource) -> String {
    let fresh = matches!(source, TokenSource::Generated(_));
    format!(
        "token: {}{}",
        escape_line(&source.to_string()),
        if fresh { " (generated just now)" } else { "" }
    )
}

/// `vak admin …`
pub(crate) fn admin(command: &AdminCommand) -> Result<(), CliError> {
    match command {
        AdminCommand::Serve(args) => serve(args),
    }
}

/// Bind, say where to go and where the token is, then serve until Ctrl-C
/// or SIGTERM.
fn serve(args: &ServeArgs) -> Result<(), CliError> {
    let home = args.home.dir()?;
    let store = args.store.open(&home)?;
    let server = Server::bind(ServeConfig {
        store: Some(store),
        project: project_in(args.project.as_ref(), &home)?,
        home,
        listen: args.listen.clone(),
        env_token: std::env::var("VAK_ADMIN_TOKEN").ok(),
    })
    .map_err(cli_error)?;
    // The URL is the first line on its own, so scripts can read it.
    out::println(&escape_line(&server.url()))?;
    out::println(&token_line(server.token_source()))?;
    server.run().map_err(cli_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "home\n\u{1b}[2Jtoken: forged\u{202e}";

    fn is_one_clean_line(text: &str) -> bool {
        !text.contains('\n') && !text.contains('\u{1b}') && !text.contains('\u{202e}')
    }

    #[test]
    fn token_lines_are_escaped_one_line() {
        let path = Utf8PathBuf::from(HOSTILE).join(".vak/admin.token");
        for source in [
            TokenSource::File(path.clone()),
            TokenSource::Generated(path),
        ] {
            let line = token_line(&source);
            assert!(is_one_clean_line(&line), "{line:?}");
            assert!(line.starts_with("token: home\\n\\u{1b}[2J"), "{line:?}");
        }
        assert_eq!(
            token_line(&TokenSource::Env),
            "token: the VAK_ADMIN_TOKEN environment variable"
        );
    }

    #[test]
    fn errors_quoting_input_are_escaped_one_line() {
        let errors = [
            AdminError::BadListen(HOSTILE.to_owned()),
            AdminError::TokenNotRegular(Utf8PathBuf::from(HOSTILE)),
            AdminError::Bind {
                addr: HOSTILE.to_owned(),
                source: std::io::Error::other("in use"),
            },
        ];
        for error in errors {
            let message = cli_error(error).to_string();
            assert!(is_one_clean_line(&message), "{message:?}");
            assert!(message.contains("home\\n\\u{1b}[2J"), "{message:?}");
        }
    }

    #[test]
    fn a_hostile_home_is_printed_escaped_when_the_server_binds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).expect("utf8");
        let home = root.join(HOSTILE);
        let project = root.join("project");
        std::fs::create_dir_all(&project).expect("project");
        let server = Server::bind(ServeConfig {
            store: None,
            home,
            project,
            listen: "127.0.0.1:0".to_owned(),
            env_token: None,
        })
        .expect("bind");
        let line = token_line(server.token_source());
        assert!(is_one_clean_line(&line), "{line:?}");
        assert!(line.ends_with(" (generated just now)"), "{line}");
        assert!(is_one_clean_line(&escape_line(&server.url())));
    }
}
