use thiserror::Error;

/// Everything the facade can fail with; each wraps the owning crate's error.
#[derive(Debug, Error)]
pub enum CoreError {
    /// The directory to resolve for is inside a repository nested in the
    /// project: a project of its own, never a layer of this
    /// one.
    #[error(
        "`{}` is inside `{}`, a repository of its own (it has `.git`): it is a separate project, untrusted until you trust it, and never a layer of `{}`; run vak there, or give `--project {}`",
        vak_prompt_blocks::Escaped(.workdir.as_str()),
        vak_prompt_blocks::Escaped(.nested.as_str()),
        vak_prompt_blocks::Escaped(.project.as_str()),
        vak_prompt_blocks::Escaped(.project.join(.nested).as_str())
    )]
    NestedRepository {
        /// The project named.
        project: camino::Utf8PathBuf,
        /// The directory asked for.
        workdir: camino::Utf8PathBuf,
        /// The nested repository, relative to the project.
        nested: camino::Utf8PathBuf,
    },
    /// A selector (role, bot, chat, surface) was malformed.
    #[error(transparent)]
    Name(#[from] vak_prompt_blocks::BlocksError),
    /// The chain could not be loaded at all.
    #[error(transparent)]
    Loader(#[from] vak_prompt_loader::LoaderError),
    /// The trust store could not be read or written.
    #[error(transparent)]
    Trust(#[from] vak_prompt_trust::TrustError),
    /// A gateway file (`bots.json`, `allowlist.json`) could not be read.
    #[error(transparent)]
    Gateway(#[from] vak_prompt_loader::GatewayError),
    /// No home directory could be found.
    #[error("cannot find the vak home: set VAK_HOME or HOME")]
    NoHome,
    /// A path given is not valid UTF-8.
    #[error("path `{}` is not valid UTF-8; vak needs UTF-8 paths", vak_prompt_blocks::Escaped(.0))]
    NonUtf8Path(String),
    /// The prefix does not fit the model's context window: no session may
    /// be frozen with it.
    #[error("{0}")]
    OverContextWindow(String),
    /// The working directory the project is found from cannot be resolved.
    #[error("cannot find the project from `{}`: {error}", vak_prompt_blocks::Escaped(.start.as_str()))]
    Discovery {
        /// Where the walk would have started.
        start: camino::Utf8PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// A path a turn names (`--path`, a delivery's `"paths"`) cannot be
    /// used to choose scoped rules: outside the project, malformed, or too
    /// many of them. The sentence names the path.
    #[error("{0}")]
    TurnPath(String),
    /// A block file in force imports a file that cannot be read (missing,
    /// outside its prompts directory, a cycle, too deep): the prompt would
    /// run without text its author put there, so it does not run at all.
    #[error(
        "the prompt is not resolved: {}; fix the import line or the file it names, or remove the line",
        .0.join("; and ")
    )]
    ImportRefused(Vec<String>),
    /// A chat was selected without a bot.
    #[error("--chat needs --bot: a chat is always one bot's chat")]
    ChatWithoutBot,
}
