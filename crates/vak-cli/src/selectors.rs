//! The selectors every `vak prompts` command takes.

use camino::{Utf8Component, Utf8Path, Utf8PathBuf};
use clap::{Args, ValueEnum};
use vak_core::prompts::{Name, NameKind, SurfaceKind};
use vak_core::{Selectors, default_home};

use crate::CliError;

/// `--store`: the store a command reads and writes, the same flag on
/// every command that has one.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct StoreArg {
    /// The store: `file` or `postgres://…` [default: $VAK_STORE, else `[store] url` in the shared config, else the home's file store].
    #[arg(long = "store", value_name = "URL")]
    pub(crate) url: Option<String>,
}

impl StoreArg {
    /// Open the chosen store for `home`.
    pub(crate) fn open(
        &self,
        home: &Utf8Path,
    ) -> Result<std::sync::Arc<dyn vak_core::prompts::Store>, CliError> {
        Ok(vak_gateway::open_store(home, self.url.as_deref())?)
    }
}

/// `--home`: the vak home, the same flag on every command that takes one
/// outside the prompt selectors.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct HomeArg {
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(id = "home", long = "home", value_name = "DIR", value_parser = non_empty_path)]
    pub(crate) path: Option<Utf8PathBuf>,
}

impl HomeArg {
    /// The home given, else the default one.
    pub(crate) fn dir(&self) -> Result<Utf8PathBuf, CliError> {
        home_dir(self.path.as_ref())
    }
}

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
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) home: Option<Utf8PathBuf>,
    /// The project root, exactly [default: found from the current directory:
    /// the nearest ancestor with .git, else with .vak, else the current
    /// directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) project: Option<Utf8PathBuf>,
    /// A directory inside the project, relative to its root, whose directory
    /// layers apply (each directory from the root down to it with its own
    /// .vak/prompts/ or AGENTS.md) [default: the current directory's place
    /// in the project; none with --project].
    #[arg(long, value_name = "SUBDIR")]
    pub(crate) dir: Option<Utf8PathBuf>,
    /// The surface kind: cli, desktop, server, chat or background.
    #[arg(long, value_name = "KIND", default_value = "cli", add = clap_complete::ArgValueCandidates::new(crate::complete::surfaces))]
    pub(crate) surface: String,
    /// A gateway bot id (selects its bots.json entry).
    #[arg(long, value_name = "ID", add = clap_complete::ArgValueCandidates::new(crate::complete::bots))]
    pub(crate) bot: Option<String>,
    /// A gateway chat id under the bot (selects its allowlist.json entry).
    #[arg(long, value_name = "ID", allow_negative_numbers = true, add = clap_complete::ArgValueCandidates::new(crate::complete::chats))]
    pub(crate) chat: Option<String>,
    /// A worker role (selects agents/ROLE/).
    #[arg(long, value_name = "ROLE", add = clap_complete::ArgValueCandidates::new(crate::complete::roles))]
    pub(crate) agent: Option<String>,
    /// Treat the project as untrusted whatever the trust store says.
    #[arg(long)]
    pub(crate) untrusted: bool,
}

/// The home directory from `--home` or the environment.
/// A directory argument (`--home`, `--project`): never empty. An empty
/// value (a script's unset variable, `--home "$VAK_HOM"`) would otherwise
/// mean the current directory, and make a cloned repository's `.vak` the
/// trusted home.
pub(crate) fn non_empty_path(raw: &str) -> Result<Utf8PathBuf, String> {
    if raw.trim().is_empty() {
        Err("a directory cannot be empty".to_owned())
    } else {
        Ok(Utf8PathBuf::from(raw))
    }
}

/// The home from `--home`, else `$VAK_HOME`, else the default. A home that
/// does not exist yet is an empty one; one that exists and is
/// not a directory (a file, a FIFO) is refused, never read as empty.
pub(crate) fn home_dir(home: Option<&Utf8PathBuf>) -> Result<Utf8PathBuf, CliError> {
    let home = match home {
        Some(home) => home.clone(),
        None => default_home()?,
    };
    match vak_core::files::is_dir(&home) {
        Some(false) => Err(CliError::HomeNotADirectory(home)),
        _ => Ok(home),
    }
}

/// A `Core` for a save addressed by home, project and store flags (a rule
/// file, an imported file): the project as given or found from the current
/// directory, no working directory of its own, and the chosen store for the
/// kept texts and versions.
pub(crate) fn open_core(
    home: &HomeArg,
    project: Option<&Utf8PathBuf>,
    store: &StoreArg,
) -> Result<vak_core::Core, CliError> {
    let home = home.dir()?;
    let selectors = match project {
        Some(project) => Selectors::new(home, project.clone()),
        None => Selectors::discover(home, &current_dir()?)?,
    };
    let store = store.open(&selectors.home)?;
    Ok(vak_core::Core::open(Selectors {
        workdir: None,
        ..selectors
    })?
    .with_store(store))
}

/// The current directory.
pub(crate) fn current_dir() -> Result<Utf8PathBuf, CliError> {
    let cwd = std::env::current_dir().map_err(|source| CliError::Io {
        context: "cannot read the current directory".to_owned(),
        source,
    })?;
    Utf8PathBuf::from_path_buf(cwd).map_err(|p| {
        CliError::Usage(format!(
            "current directory `{}` is not UTF-8",
            vak_core::prompts::Escaped(&p.to_string_lossy())
        ))
    })
}

/// The project from `--project` (exactly that directory), or the root
/// found from the current directory, never inside `home`.
pub(crate) fn project_in(
    project: Option<&Utf8PathBuf>,
    home: &Utf8Path,
) -> Result<Utf8PathBuf, CliError> {
    match project {
        Some(project) => Ok(project.clone()),
        None => Ok(Selectors::discover(home, &current_dir()?)?.project),
    }
}

/// [`project_in`] under the default home, for commands without `--home`.
pub(crate) fn project_dir(project: Option<&Utf8PathBuf>) -> Result<Utf8PathBuf, CliError> {
    project_in(project, &default_home()?)
}

/// `--dir SUBDIR`: relative to the project root, and only plain names (no
/// `..`, no absolute path), so it can never name a directory outside it.
pub(crate) fn subdir(dir: &Utf8Path) -> Result<Utf8PathBuf, CliError> {
    let plain = dir
        .components()
        .all(|c| matches!(c, Utf8Component::Normal(_) | Utf8Component::CurDir));
    let normal: Utf8PathBuf = dir
        .components()
        .filter(|c| matches!(c, Utf8Component::Normal(_)))
        .collect();
    if plain && !normal.as_str().is_empty() {
        Ok(normal)
    } else {
        Err(CliError::Usage(format!(
            "--dir `{}` must be a directory inside the project, relative to its root, without `..`",
            vak_core::prompts::Escaped(dir.as_str())
        )))
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
        let home = home_dir(self.home.as_ref())?;
        let mut base = match &self.project {
            Some(project) => Selectors::new(home, project.clone()),
            None => Selectors::discover(home, &current_dir()?)?,
        };
        if let Some(dir) = &self.dir {
            base.workdir = Some(base.project.join(subdir(dir)?));
        }
        let selectors = Selectors {
            surface,
            bot: name(NameKind::Bot, self.bot.as_ref())?,
            chat: name(NameKind::Chat, self.chat.as_ref())?,
            agent: name(NameKind::Role, self.agent.as_ref())?,
            force_untrusted: self.untrusted,
            ..base
        };
        if selectors.chat.is_some() && selectors.bot.is_none() {
            return Err(CliError::Usage(
                "--chat needs --bot: a chat is always one bot's chat".to_owned(),
            ));
        }
        warn_unlisted(&selectors);
        Ok(selectors)
    }
}

/// Say when `--bot` or `--chat` names an entry the gateway files do not
/// hold: its tier then adds nothing (its guardrails included), which a typo
/// in an id would otherwise hide. (`--agent` for a role with no directory
/// is refused by the loader; a bot or chat is still a valid chain to look
/// at before it is added.)
fn warn_unlisted(selectors: &Selectors) {
    use vak_core::prompts::{GatewayFile, gateway_lists};
    let Some(bot) = &selectors.bot else { return };
    let home = &selectors.home;
    if !gateway_lists(home, GatewayFile::Bots, bot.as_str(), None) {
        crate::out::notice(
            "warning",
            &format!(
                "bot `{bot}` has no entry in `bots.json`: its tier adds nothing to this prompt; check the id"
            ),
        );
    }
    if let Some(chat) = &selectors.chat
        && !gateway_lists(
            home,
            GatewayFile::Allowlist,
            bot.as_str(),
            Some(chat.as_str()),
        )
    {
        crate::out::notice(
            "warning",
            &format!(
                "chat `{chat}` has no entry under bot `{bot}` in `allowlist.json`: its tier adds nothing to this prompt, and the gateway refuses its messages; check the id"
            ),
        );
    }
}
