//! `vak session`, `vak exec`, `vak gateway deliver`, `vak audit list`.
//! (Owned by the session work; these handlers are placeholders until it
//! lands.)

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};

use crate::CliError;
use crate::selectors::{Format, SelectorArgs};

/// `vak session …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum SessionCommand {
    /// Create a session, freezing the current prompt.
    New(NewArgs),
    /// Show one session's ledger.
    Show(ShowArgs),
    /// List sessions.
    List(ListArgs),
}

/// `vak session new`.
#[derive(Debug, Clone, Args)]
pub(crate) struct NewArgs {
    #[command(flatten)]
    pub(crate) selectors: SelectorArgs,
    /// The parent session, for a child session.
    #[arg(long, value_name = "ID")]
    pub(crate) parent: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak session show`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ShowArgs {
    /// The session id.
    pub(crate) id: String,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak session list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak exec`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ExecArgs {
    /// The session to resume.
    #[arg(long, value_name = "ID")]
    pub(crate) session: String,
    /// Proceed on the frozen prompt even if the instructions changed.
    #[arg(long)]
    pub(crate) accept_drift: bool,
    /// The user's message.
    #[arg(long, value_name = "TEXT")]
    pub(crate) message: Option<String>,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak gateway …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum GatewayCommand {
    /// Deliver an inbound chat message: bind the chat to a session, rotating
    /// it when the prompt drifted.
    Deliver(DeliverArgs),
}

/// `vak gateway deliver`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DeliverArgs {
    /// The bot id.
    #[arg(long, value_name = "ID")]
    pub(crate) bot: String,
    /// The chat id.
    #[arg(long, value_name = "ID")]
    pub(crate) chat: String,
    /// The inbound message.
    #[arg(long, value_name = "TEXT")]
    pub(crate) text: String,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// The project directory the bot works in [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak audit …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum AuditCommand {
    /// List security events.
    List(AuditListArgs),
}

/// `vak audit list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct AuditListArgs {
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

fn pending(what: &str) -> CliError {
    CliError::Failed(format!("`vak {what}` is not available in this build yet"))
}

/// `vak session …`
pub(crate) fn session(_command: &SessionCommand) -> Result<(), CliError> {
    Err(pending("session"))
}

/// `vak exec`.
pub(crate) fn exec(_args: &ExecArgs) -> Result<(), CliError> {
    Err(pending("exec"))
}

/// `vak gateway …`
pub(crate) fn gateway(_command: &GatewayCommand) -> Result<(), CliError> {
    Err(pending("gateway deliver"))
}

/// `vak audit …`
pub(crate) fn audit(_command: &AuditCommand) -> Result<(), CliError> {
    Err(pending("audit list"))
}
