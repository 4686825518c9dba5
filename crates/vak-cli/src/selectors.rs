//! The selectors every `vak prompts` command takes.

use camino::Utf8PathBuf;
use clap::{Args, ValueEnum};
use vak_core::prompts::{Name, NameKind, SurfaceKind};
use vak_core::{Selectors, default_home};

use crate::CliError;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Format {
    /// For people.
    #[default]
    Text,
    /// One JSON object on stdout.
    Json,
}

/// `--home`, `--project`, `--surface`, `--bot`, `--chat`, `--agent`,
/// `--untrusted`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SelectorArgs {
    /// The vak home holding the shared layer [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// The project directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<Utf8PathBuf>,
    /// The surface kind: cli, desktop, server, chat or background.
    #[arg(long, value_name = "KIND", default_value = "cli")]
    pub(crate) surface: String,
    /// A gateway bot id (selects its bots.json entry).
    #[arg(long, value_name = "ID")]
    pub(crate) bot: Option<String>,
    /// A gateway chat id under the bot (selects its allowlist.json entry).
    #[arg(long, value_name = "ID")]
    pub(crate) chat: Option<String>,
    /// A worker role (selects agents/ROLE/).
    #[arg(long, value_name = "ROLE")]
    pub(crate) agent: Option<String>,
    /// Treat the project as untrusted whatever the trust store says.
    #[arg(long)]
    pub(crate) untrusted: bool,
}

/// The home directory from `--home` or the environment.
pub(crate) fn home_dir(home: Option<&Utf8PathBuf>) -> Result<Utf8PathBuf, CliError> {
    match home {
        Some(home) => Ok(home.clone()),
        None => Ok(default_home()?),
    }
}

/// The project directory from `--project` or the current directory.
pub(crate) fn project_dir(project: Option<&Utf8PathBuf>) -> Result<Utf8PathBuf, CliError> {
    match project {
        Some(project) => Ok(project.clone()),
        None => {
            let cwd = std::env::current_dir().map_err(|source| CliError::Io {
                context: "cannot read the current directory".to_owned(),
                source,
            })?;
            Utf8PathBuf::from_path_buf(cwd).map_err(|p| {
                CliError::Usage(format!("current directory `{}` is not UTF-8", p.display()))
            })
        }
    }
}

fn name(kind: NameKind, raw: Option<&String>) -> Result<Option<Name>, CliError> {
    raw.map(|raw| Name::new(kind, raw).map_err(|e| CliError::Usage(e.to_string())))
        .transpose()
}

impl SelectorArgs {
    /// Validate and turn into library selectors.
    pub(crate) fn to_selectors(&self) -> Result<Selectors, CliError> {
        let surface: SurfaceKind = self
            .surface
            .parse()
            .map_err(|e: vak_core::prompts::BlocksError| CliError::Usage(e.to_string()))?;
        let selectors = Selectors {
            surface,
            bot: name(NameKind::Bot, self.bot.as_ref())?,
            chat: name(NameKind::Chat, self.chat.as_ref())?,
            agent: name(NameKind::Role, self.agent.as_ref())?,
            force_untrusted: self.untrusted,
            ..Selectors::new(
                home_dir(self.home.as_ref())?,
                project_dir(self.project.as_ref())?,
            )
        };
        if selectors.chat.is_some() && selectors.bot.is_none() {
            return Err(CliError::Usage(
                "--chat needs --bot: a chat is always one bot's chat".to_owned(),
            ));
        }
        Ok(selectors)
    }
}
