//! `vak session`, `vak exec`, `vak gateway deliver`, `vak audit list`.
//!
//! A session freezes the resolved prompt in its ledger at creation. Every
//! resume re-resolves the chain the session was created for, compares
//! descriptors, and does what doc 45's resume table says for the path:
//! `exec --session` fails closed (exit 3) unless `--accept-drift`; a gateway
//! chat binding rotates to a fresh session and writes a `config-change`
//! security event. No model is called: the commands print the request an
//! agent would send.

use std::fmt::Write as _;

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};
use serde_json::json;
use vak_core::output::AuditPage;
use vak_core::prompts::{
    Baseline, DriftReport, Escaped, Header, LayerChange, Ledger, Name, NameKind, Record,
    SecurityEvent, SessionError, SessionId, SurfaceKind, Turn, escape_line, escape_text,
};
use vak_core::{Core, InboundPrompts, Selectors};
use vak_gateway::{DeliveryOutcome, Exec, LifecycleError, clip};

use crate::CliError;
use crate::out;
use crate::prompts::print_json;
use crate::selectors::{Format, HomeArg, SelectorArgs, StoreArg, project_dir};

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
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak session show`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ShowArgs {
    /// The session id.
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// The most a listing shows by default, and the most it may be asked for:
/// a page is held in memory, the store is not.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 10_000;

fn limit(raw: &str) -> Result<usize, String> {
    match raw.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {MAX_LIMIT}")),
    }
}

/// `vak session list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// Show the newest N sessions, newest first [max 10000].
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = limit)]
    pub(crate) limit: usize,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    #[command(flatten)]
    pub(crate) store: StoreArg,
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
    /// A path this turn touches, relative to the current directory
    /// (repeat for several): the scoped rules whose globs match it join the
    /// tail, and the turn's ledger record names them.
    #[arg(long = "path", value_name = "PATH", add = clap_complete::ArgValueCompleter::new(clap_complete::PathCompleter::any()))]
    pub(crate) paths: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    #[command(flatten)]
    pub(crate) store: StoreArg,
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
    /// Serve deliveries over HTTP: POST /v1/bots/{bot}/chats/{chat}/messages, signed per bot.
    Serve(ServeArgs),
    /// Print a bot's request-signing secret, creating it (mode 0600) if absent.
    Secret(SecretArgs),
}

/// `vak gateway serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on (port 0 picks a free one).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8788")]
    pub(crate) listen: String,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    /// The project directory the bots work in [default: found from the
    /// current directory: the nearest ancestor with .git, else with .vak,
    /// else the current directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) project: Option<Utf8PathBuf>,
}

/// `vak gateway secret`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SecretArgs {
    /// The bot id.
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::complete::bots))]
    pub(crate) bot: String,
    /// The store (`file`, or `postgres://…`, which keeps the secret for
    /// every node) [default: $VAK_STORE, else `[store] url` in the shared
    /// config, else file].
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
}

/// `vak gateway deliver`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DeliverArgs {
    /// The bot id.
    #[arg(long, value_name = "ID", add = clap_complete::ArgValueCandidates::new(crate::complete::bots))]
    pub(crate) bot: String,
    /// The chat id (a negative number, as a Telegram group's, is one).
    #[arg(long, value_name = "ID", allow_negative_numbers = true, add = clap_complete::ArgValueCandidates::new(crate::complete::chats))]
    pub(crate) chat: String,
    /// The inbound message.
    #[arg(long, value_name = "TEXT")]
    pub(crate) text: String,
    /// A path this turn touches, relative to the current directory (repeat
    /// for several): as a signed request's `"paths"`, it chooses the scoped
    /// rules in the turn's tail.
    #[arg(long = "path", value_name = "PATH", add = clap_complete::ArgValueCompleter::new(clap_complete::PathCompleter::any()))]
    pub(crate) paths: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// The project directory the bot works in [default: found from the
    /// current directory: the nearest ancestor with .git, else with .vak,
    /// else the current directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
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
    /// Show the newest N events, newest first [max 10000].
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = limit)]
    pub(crate) limit: usize,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

impl From<LifecycleError> for CliError {
    fn from(error: LifecycleError) -> Self {
        match error {
            LifecycleError::Core(error) => CliError::Core(error),
            LifecycleError::Store(error) => error.into(),
            LifecycleError::NoFrozenPrompt { .. } => CliError::DriftRefused(error.to_string()),
            other => CliError::Failed(other.to_string()),
        }
    }
}

impl From<SessionError> for CliError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::InvalidId(_) | SessionError::InvalidName(_) => {
                CliError::Usage(error.to_string())
            }
            other => CliError::Failed(other.to_string()),
        }
    }
}

fn session_id(raw: &str) -> Result<SessionId, CliError> {
    Ok(SessionId::parse(raw)?)
}

fn name(kind: NameKind, raw: &str) -> Result<Name, CliError> {
    Name::new(kind, raw).map_err(|e| CliError::Usage(e.to_string()))
}

fn changes_text(changes: &[LayerChange]) -> String {
    // One line per change; a source path from a hostile tree cannot add one.
    changes
        .iter()
        .map(|c| format!("  {}\n", Escaped(&c.to_string())))
        .collect()
}

/// `vak session …`
pub(crate) fn session(command: &SessionCommand) -> Result<(), CliError> {
    match command {
        SessionCommand::New(args) => new(args),
        SessionCommand::Show(args) => show(args),
        SessionCommand::List(args) => list(args),
    }
}

/// `vak session new`: resolve, freeze, write the ledger's first record.
fn new(args: &NewArgs) -> Result<(), CliError> {
    let core = Core::open(args.selectors.to_selectors()?)?;
    let store = args.store.open(&core.selectors().home)?;
    let parent = args.parent.as_deref().map(session_id).transpose()?;
    let created = vak_gateway::new_session(&*store, &core, parent.as_ref())?;
    let (id, contract) = (&created.id, &created.contract);
    match args.format {
        Format::Json => print_json(&json!({
            "session_id": id,
            "fingerprint": contract.fingerprint,
            "over_cap": created.over_cap,
        })),
        Format::Text => {
            for warning in &created.warnings {
                out::notice("warning", warning);
            }
            let mut out = format!("session {id}\nfingerprint {}\n", esc(&contract.fingerprint));
            if let Some(agent) = &contract.agent {
                let _ = writeln!(
                    out,
                    "agent {} ({})",
                    esc(&agent.role),
                    esc(&short(&agent.digest))
                );
            }
            if let Some(parent) = &contract.parent {
                let _ = writeln!(out, "parent {}", Escaped(&parent.session_id));
            }
            out::print(&out)
        }
    }
}

fn short(digest: &str) -> String {
    vak_core::prompts::short_digest(digest)
}

/// `vak session show`.
fn show(args: &ShowArgs) -> Result<(), CliError> {
    let id = session_id(&args.id)?;
    let store = args.store.open(&args.home.dir()?)?;
    let ledger = store.read(&id)?;
    match args.format {
        Format::Json => print_json(&json!({
            "session_id": ledger.id,
            "ledger": ledger.path,
            "created": ledger.header,
            "records": ledger.records,
            "skipped_unknown": ledger.skipped_unknown,
            "warnings": ledger.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })),
        Format::Text => {
            for warning in &ledger.warnings {
                out::notice("warning", &warning.to_string());
            }
            out::print(&show_text(&ledger))
        }
    }
}

/// A string from the ledger for one line of output: controls and newlines
/// escaped, so a hand-edited ledger cannot forge or hide a line.
fn esc(text: &str) -> String {
    escape_line(text).into_owned()
}

fn show_text(ledger: &Ledger) -> String {
    let Header { meta, contract } = &ledger.header;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "session {}  ({})",
        ledger.id,
        esc(ledger.path.as_str())
    );
    let _ = writeln!(out, "created {}", esc(&meta.created_at));
    for (label, value) in [
        ("project", &meta.project),
        ("surface", &meta.surface),
        ("bot", &meta.bot),
        ("chat", &meta.chat),
        ("agent", &meta.agent),
    ] {
        if let Some(value) = value {
            let _ = writeln!(out, "{label} {}", esc(value));
        }
    }
    if meta.untrusted {
        let _ = writeln!(out, "project forced untrusted");
    }
    if let Some(agent) = &contract.agent {
        let _ = writeln!(
            out,
            "agent identity {} ({})",
            esc(&agent.role),
            esc(&short(&agent.digest))
        );
    }
    if let Some(parent) = &contract.parent {
        let _ = write!(out, "parent {}", esc(&parent.session_id));
        if let Some(agent) = &parent.agent {
            let _ = write!(
                out,
                " (agent {} {})",
                esc(&agent.role),
                esc(&short(&agent.digest))
            );
        }
        out.push('\n');
    }
    if contract.baseline() == Baseline::Unknown {
        let _ = writeln!(
            out,
            "prompt layers: none recorded (unknown baseline: no drift is reported)"
        );
    } else if contract.baseline() == Baseline::Emptied {
        let _ = writeln!(out, "fingerprint {}", esc(&contract.fingerprint));
        let _ = writeln!(
            out,
            "prompt layers: none listed, though the ledger holds the fingerprint or frozen prefix written beside them: the list was emptied, so resuming it is drift"
        );
    } else {
        let _ = writeln!(out, "fingerprint {}", esc(&contract.fingerprint));
        let _ = writeln!(out, "prompt layers:");
        for d in &contract.prompt_layers {
            let _ = writeln!(
                out,
                "  {:<20} {:<8} {} {:>6} bytes  {}",
                esc(&d.block),
                esc(&d.layer),
                esc(&short(&d.digest)),
                d.bytes,
                esc(&d
                    .source
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), ToString::to_string))
            );
        }
    }
    let _ = writeln!(out, "capabilities: {}", contract.capabilities.len());
    let turns: Vec<&Turn> = ledger.turns().collect();
    let _ = writeln!(out, "turns: {}", turns.len());
    for record in &ledger.records {
        match record {
            Record::Turn(turn) => {
                let _ = writeln!(
                    out,
                    "  {} {}",
                    esc(&turn.at),
                    esc(&clip(&turn.message, 100))
                );
                for rule in &turn.rules {
                    let _ = writeln!(
                        out,
                        "    rule {:<16} {:<15} {:<8} {}  {}  for {}",
                        esc(&rule.name),
                        esc(&rule.block),
                        esc(&rule.layer),
                        esc(&short(&rule.digest)),
                        esc(&rule.source.to_string()),
                        esc(&rule.paths.join(", "))
                    );
                }
            }
            Record::DriftAccepted(accepted) => {
                let _ = writeln!(out, "  {} drift accepted:", esc(&accepted.at));
                for change in &accepted.changes {
                    let _ = writeln!(out, "    {}", esc(&change.to_string()));
                }
            }
            Record::Created(_) | Record::Unknown => {}
        }
    }
    if ledger.skipped_unknown > 0 {
        let _ = writeln!(
            out,
            "({} records of types this build does not know were skipped)",
            ledger.skipped_unknown
        );
    }
    out
}

/// `vak session list`: the newest `--limit` sessions, newest first. Only
/// that many ids are kept while the directory is read, and only their first
/// records are read, each reduced to a summary at once.
fn list(args: &ListArgs) -> Result<(), CliError> {
    let store = args.store.open(&args.home.dir()?)?;
    let (ids, total) = store.list_newest(args.limit)?;
    let mut sessions = Vec::new();
    let mut problems = Vec::new();
    for id in ids {
        match store.read_header(&id) {
            Ok(header) => sessions.push(summary(&id, &header)),
            Err(error) => problems.push((id, error.to_string())),
        }
    }
    match args.format {
        Format::Json => print_json(&json!({
            "sessions": sessions,
            "problems": problems.iter().map(|(id, e)| json!({"session_id": id, "error": e})).collect::<Vec<_>>(),
            "total": total,
            "limit": args.limit,
        })),
        Format::Text => {
            if total == 0 {
                out::say(&format!("no sessions in {}", Escaped(&store.describe())));
            }
            out::print(&summary_lines(&sessions, out::stdout_is_terminal()))?;
            for (id, error) in &problems {
                out::notice("warning", &format!("session {id} is unreadable: {error}"));
            }
            if total > args.limit {
                out::notice(
                    "note",
                    &format!(
                        "showing the newest {} of {total} sessions; --limit N shows more",
                        args.limit
                    ),
                );
            }
            Ok(())
        }
    }
}

/// A session as listed: its creation metadata, never its frozen prefix.
fn summary(id: &SessionId, h: &Header) -> serde_json::Value {
    json!({
        "session_id": id,
        "created_at": h.meta.created_at,
        "project": h.meta.project,
        "surface": h.meta.surface,
        "bot": h.meta.bot,
        "chat": h.meta.chat,
        "agent": h.meta.agent,
        "fingerprint": h.contract.fingerprint,
        "prompt_layers": h.contract.prompt_layers.len(),
        "parent": h.contract.parent.as_ref().map(|p| &p.session_id),
    })
}

/// One line of `session list`; every field from the ledger escaped.
/// The listing: a line per session, its columns two spaces apart. On a
/// terminal (`table`), a header row first and the columns aligned under
/// it; piped, the lines alone, as they always were.
fn summary_lines(sessions: &[serde_json::Value], table: bool) -> String {
    const HEADER: [&str; 4] = ["SESSION", "CREATED", "SURFACE", "PROJECT"];
    let rows: Vec<_> = sessions.iter().map(summary_columns).collect();
    let mut widths = [0; 3];
    if table {
        for (width, header) in widths.iter_mut().zip(HEADER) {
            *width = header.len();
        }
        for (columns, _) in &rows {
            for (width, column) in widths.iter_mut().zip(columns) {
                *width = (*width).max(column.chars().count());
            }
        }
    }
    let line = |columns: [&str; 4], rest: &str| {
        let [id, created, surface, project] = columns;
        let [w0, w1, w2] = widths;
        format!("{id:<w0$}  {created:<w1$}  {surface:<w2$}  {project}{rest}\n")
    };
    let mut out = String::new();
    if table && !rows.is_empty() {
        out.push_str(&line(HEADER, ""));
    }
    for ([id, created, surface, project], rest) in &rows {
        out.push_str(&line([id, created, surface, project], rest));
    }
    out
}

/// A session's four columns, escaped, and what follows them.
fn summary_columns(session: &serde_json::Value) -> ([String; 4], String) {
    let field = |key: &str| session[key].as_str().map(|v| Escaped(v).to_string());
    let columns = [
        field("session_id").unwrap_or_default(),
        field("created_at").unwrap_or_default(),
        field("surface").unwrap_or_else(|| "-".to_owned()),
        field("project").unwrap_or_else(|| "-".to_owned()),
    ];
    let mut line = String::new();
    if let (Some(bot), Some(chat)) = (field("bot"), field("chat")) {
        let _ = write!(line, "  {bot}/{chat}");
    }
    if let Some(agent) = field("agent") {
        let _ = write!(line, "  agent {agent}");
    }
    if let Some(parent) = field("parent") {
        let _ = write!(line, "  parent {parent}");
    }
    (columns, line)
}

/// `vak exec`: resume a named session. Fails closed on drift (exit 3)
/// unless `--accept-drift`, which runs on the frozen prefix and records
/// that the drift was accepted.
pub(crate) fn exec(args: &ExecArgs) -> Result<(), CliError> {
    let id = session_id(&args.session)?;
    let home = args.home.dir()?;
    let store = args.store.open(&home)?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Failed(format!("cannot read the current directory: {e}")))?;
    let paths = if args.paths.is_empty() {
        vak_gateway::TurnPaths::None
    } else {
        vak_gateway::TurnPaths::FromCwd {
            cwd: &cwd,
            paths: &args.paths,
        }
    };
    let (outcome, warnings) = vak_gateway::exec(
        &*store,
        &home,
        &id,
        args.accept_drift,
        args.message.as_deref(),
        paths,
        &project_dir(None)?,
    )?;
    for warning in &warnings {
        out::notice("warning", &warning.to_string());
    }
    if let Exec::Continued(resumed) | Exec::ProceedOnFrozen(resumed) = &outcome {
        for note in &resumed.rule_notes {
            out::notice("warning", note);
        }
    }
    let resumed = match &outcome {
        Exec::Refused { drift, .. } => {
            if args.format == Format::Json {
                print_json(&outcome.to_json())?;
            }
            return Err(CliError::DriftRefused(refusal(&id, drift, &args.store)));
        }
        Exec::Continued(resumed) | Exec::ProceedOnFrozen(resumed) => resumed,
    };
    match args.format {
        Format::Json => print_json(&outcome.to_json()),
        Format::Text => {
            if resumed.drift.unknown_baseline {
                out::notice("note", &resumed.drift.to_string());
            }
            if matches!(outcome, Exec::ProceedOnFrozen(_)) {
                out::notice_lines(
                    "note",
                    &format!(
                        "the prompt changed since session {id} was created; proceeding on the frozen prompt as asked (recorded in its ledger):\n{}",
                        changes_text(&resumed.drift.changes).trim_end()
                    ),
                );
            }
            out::print(&escape_text(&resumed.request.text()))
        }
    }
}

fn refusal(id: &SessionId, report: &DriftReport, store: &StoreArg) -> String {
    format!(
        "the prompt changed since session {id} was created, so it was not resumed:\n{}{} shows the text that changed. To proceed on the prompt it was created with, add --accept-drift; to use the current prompt, start a new session with `vak session new`.",
        changes_text(&report.changes),
        diff_hint(id, store)
    )
}

/// The `vak session diff` command that reads `id` back from the store this
/// command used. The store's URL is not repeated: it may carry a password,
/// and this line goes to a terminal and to chat logs.
fn diff_hint(id: &SessionId, store: &StoreArg) -> String {
    match store.url {
        Some(_) => format!("`vak session diff {id}` (with the same --store)"),
        None => format!("`vak session diff {id}`"),
    }
}

/// `vak gateway …`
pub(crate) fn gateway(command: &GatewayCommand) -> Result<(), CliError> {
    match command {
        GatewayCommand::Deliver(args) => deliver(args),
        GatewayCommand::Serve(args) => serve(args),
        GatewayCommand::Secret(args) => secret(args),
    }
}

/// `vak gateway deliver`: one delivery through the lifecycle library, which
/// holds the chat's lock from the binding lookup to the commit.
fn deliver(args: &DeliverArgs) -> Result<(), CliError> {
    let bot = name(NameKind::Bot, &args.bot)?;
    let chat = name(NameKind::Chat, &args.chat)?;
    let selectors = Selectors {
        surface: SurfaceKind::Chat,
        bot: Some(bot.clone()),
        chat: Some(chat.clone()),
        ..Selectors::new(args.home.dir()?, project_dir(args.project.as_ref())?)
    };
    let core = Core::open(selectors)?;
    let store = args.store.open(&core.selectors().home)?;
    let meta = vak_gateway::meta_for(core.selectors());
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Failed(format!("cannot read the current directory: {e}")))?;
    let paths = vak_core::paths_from_cwd(&core.selectors().project, &cwd, &args.paths)?;
    // From here on the inbound path holds only a read-only handle: nothing
    // reachable from it writes a prompt layer (see vak_core::InboundPrompts).
    let prompts = InboundPrompts::from_core(core);
    let delivered =
        vak_gateway::deliver_paths(&*store, &prompts, &meta, &args.text, &paths, None, None)?;
    let session = &delivered.session;
    match args.format {
        Format::Json => print_json(&delivered.to_json()),
        Format::Text => {
            for warning in &delivered.warnings {
                out::notice("warning", warning);
            }
            let line = match &delivered.outcome {
                DeliveryOutcome::Created => format!("bound to new session {session}"),
                DeliveryOutcome::Continued => format!("continuing session {session}"),
                // The library's warning (printed above) names the session
                // whose ledger is gone.
                DeliveryOutcome::Rebound { .. } => {
                    format!("bound to new session {session} (the old ledger was gone)")
                }
                DeliveryOutcome::Rotated { previous, changes } => format!(
                    "the prompt changed, rotated to new session {session}; session {previous} is kept, the change is in `vak audit list` and {} shows the text:\n{}",
                    diff_hint(previous, &args.store),
                    changes_text(changes).trim_end()
                ),
            };
            out::notice_lines(&format!("{bot}/{chat}"), &line);
            out::print(&escape_text(&delivered.request.text()))
        }
    }
}

/// `vak gateway serve`: bind, print the base URL as the first line, serve
/// until SIGTERM or Ctrl-C.
fn serve(args: &ServeArgs) -> Result<(), CliError> {
    let service = vak_gateway::Service::bind(vak_gateway::ServiceConfig {
        home: args.home.dir()?,
        project: project_dir(args.project.as_ref())?,
        listen: args.listen.clone(),
        store: args.store.url.clone(),
    })?;
    // The URL alone on the first line of stdout, for scripts; the rest on
    // stderr, so a reader that stops after one line cannot stop the service.
    out::println(&escape_line(&service.url()))?;
    out::notice("store", &service.store_description());
    let blocking_threads = service.blocking_threads();
    let (listener, router) = service.into_parts();
    // The last handle on the service's state (and so on a PostgreSQL store,
    // whose client runs a runtime of its own) must go after the runtime,
    // not inside it: dropping that client in an async context panics.
    let outlives_runtime = router.clone();
    let limits = vak_admin::Limits {
        // Deliveries in flight may wait on a busy chat's lock.
        shutdown_grace: std::time::Duration::from_secs(30),
        ..vak_admin::Limits::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(blocking_threads)
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the gateway's runtime: {e}")))?;
    let served = runtime.block_on(async move {
        let stop = vak_admin::stop_signal().map_err(vak_admin::AdminError::Serve)?;
        // hyper's own refusals (400, 414, 431) in the service's JSON too.
        let refusal: vak_admin::HeadRefusal = vak_gateway::head_refusal;
        vak_admin::serve_router_with(listener, router, limits, "gateway", stop, Some(refusal)).await
    });
    drop(runtime);
    drop(outlives_runtime);
    served.map_err(crate::admin::cli_error)
}

/// `vak gateway secret BOT`.
fn secret(args: &SecretArgs) -> Result<(), CliError> {
    let bot = name(NameKind::Bot, &args.bot)?;
    let home = args.home.dir()?;
    let store = vak_gateway::open_store(&home, args.store.as_deref())?;
    let (secret, created) = vak_gateway::ensure_bot_secret(&*store, &home, &bot)?;
    if created {
        let place = if store.home().is_some() {
            store.describe()
        } else {
            vak_gateway::secret_path(&home, &bot).to_string()
        };
        out::notice("note", &format!("created in {place}"));
    }
    out::println(&escape_line(&secret))
}

/// `vak audit …`
pub(crate) fn audit(command: &AuditCommand) -> Result<(), CliError> {
    match command {
        AuditCommand::List(args) => audit_list(args),
    }
}

/// `vak audit list`: the newest `--limit` events, newest first, streamed
/// from the log so memory does not grow with it.
fn audit_list(args: &AuditListArgs) -> Result<(), CliError> {
    let store = args.store.open(&args.home.dir()?)?;
    let entries = store.audit_newest(args.limit)?;
    match args.format {
        Format::Json => out::print_document(&AuditPage::of(&entries, args.limit)),
        Format::Text => {
            for warning in &entries.warnings {
                out::notice("warning", &warning.to_string());
            }
            if entries.skipped_lines > entries.warnings.len() {
                out::notice(
                    "warning",
                    &format!(
                        "{} more lines in {} that are not records were skipped",
                        entries.skipped_lines - entries.warnings.len(),
                        Escaped(&store.describe())
                    ),
                );
            }
            let mut out = String::new();
            if entries.events.is_empty() {
                out::say(&format!(
                    "no security events in {}",
                    Escaped(&store.describe())
                ));
            } else if out::stdout_is_terminal() {
                out.push_str("TIME  EVENT  SUBJECT: WHAT\n");
            }
            for event in &entries.events {
                match event {
                    SecurityEvent::ConfigChange(change) => {
                        let _ = writeln!(
                            out,
                            "{} config-change {}/{}: session {} → {}",
                            Escaped(&change.at),
                            Escaped(&change.bot),
                            Escaped(&change.chat),
                            change.old_session,
                            change.new_session
                        );
                        out.push_str(&changes_text(&change.changes));
                    }
                    SecurityEvent::Rebound(rebound) => {
                        let _ = writeln!(
                            out,
                            "{} rebound {}/{}: session {} (ledger gone) → {}",
                            Escaped(&rebound.at),
                            Escaped(&rebound.bot),
                            Escaped(&rebound.chat),
                            rebound.gone_session,
                            rebound.new_session
                        );
                    }
                    SecurityEvent::TrustOverCap(trust) => {
                        let _ = writeln!(
                            out,
                            "{} trust-over-cap {} by {}: {} chain{} over the cap",
                            Escaped(&trust.at),
                            Escaped(&trust.project),
                            Escaped(&trust.who),
                            trust.chains.len(),
                            if trust.chains.len() == 1 { "" } else { "s" }
                        );
                        for c in &trust.chains {
                            let _ = writeln!(
                                out,
                                "  {}: {} tokens, cap {}",
                                Escaped(&c.chain),
                                c.prefix_tokens,
                                c.cap
                            );
                        }
                    }
                    SecurityEvent::Unknown => {}
                }
            }
            out::print(&out)?;
            if entries.total > args.limit {
                out::notice(
                    "note",
                    &format!(
                        "showing the newest {} of {} events; --limit N shows more",
                        args.limit, entries.total
                    ),
                );
            }
            Ok(())
        }
    }
}
