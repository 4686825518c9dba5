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

use camino::{Utf8Path, Utf8PathBuf};
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::json;
use vak_core::prompts::{
    AuditLog, BindingStore, ConfigChange, DriftAccepted, DriftReport, Escaped, FrozenContract,
    Header, LayerChange, Ledger, Name, NameKind, ParentSession, Record, ResolvedPrompt,
    ResumeDecision, ResumePath, SecurityEvent, SessionError, SessionId, SessionMeta, SessionStore,
    SurfaceKind, TailContext, Turn, decide, diff, escape_line, escape_text, now_rfc3339,
};
use vak_core::{Core, InboundPrompts, Selectors};

use crate::CliError;
use crate::out;
use crate::prompts::print_json;
use crate::selectors::{Format, SelectorArgs, home_dir, project_dir};

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
    /// Show the newest N events, newest first [max 10000].
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = limit)]
    pub(crate) limit: usize,
    /// The vak home [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
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

/// What a new session freezes, from a fresh resolution.
fn freeze(resolved: &ResolvedPrompt, parent: Option<ParentSession>) -> FrozenContract {
    FrozenContract {
        capabilities: resolved.capabilities.clone(),
        prompt_layers: resolved.descriptors.clone(),
        fingerprint: resolved.fingerprint.clone(),
        prefix: resolved.prefix.clone(),
        agent: resolved.agent.clone(),
        parent,
    }
}

/// The creation metadata: the selectors, so a resume re-resolves the same
/// chain.
fn meta_for(selectors: &Selectors) -> SessionMeta {
    SessionMeta {
        project: Some(selectors.project.to_string()),
        surface: Some(selectors.surface.wire_name().to_owned()),
        bot: selectors.bot.as_ref().map(ToString::to_string),
        chat: selectors.chat.as_ref().map(ToString::to_string),
        agent: selectors.agent.as_ref().map(ToString::to_string),
        untrusted: selectors.force_untrusted,
        ..SessionMeta::now()
    }
}

/// The selectors `id` was created with. A ledger without a project (one
/// written before projects were recorded) resolves for the current
/// directory.
fn selectors_of(
    home: &Utf8Path,
    id: &SessionId,
    meta: &SessionMeta,
) -> Result<Selectors, CliError> {
    let surface = match &meta.surface {
        Some(raw) => raw.parse::<SurfaceKind>().map_err(|e| {
            CliError::Failed(format!(
                "session `{id}` was created for a surface this build does not know: {}",
                Escaped(&e.to_string())
            ))
        })?,
        None => SurfaceKind::Cli,
    };
    let project = match &meta.project {
        Some(project) => Utf8PathBuf::from(project),
        None => project_dir(None)?,
    };
    let selector = |kind: NameKind, raw: &Option<String>| {
        raw.as_deref()
            .map(|raw| Name::new(kind, raw))
            .transpose()
            .map_err(|e| {
                CliError::Failed(format!(
                    "session `{id}` records a selector this build rejects: {}",
                    Escaped(&e.to_string())
                ))
            })
    };
    Ok(Selectors {
        surface,
        bot: selector(NameKind::Bot, &meta.bot)?,
        chat: selector(NameKind::Chat, &meta.chat)?,
        agent: selector(NameKind::Role, &meta.agent)?,
        force_untrusted: meta.untrusted,
        ..Selectors::new(home, project)
    })
}

/// One line of at most `max` characters, for the tail and listings.
fn clip(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// The tail for the next turn of a session with `turns` so far: the current
/// instant, the session's intent (its first message) and where the thread
/// stands. Rendered fresh every turn, never frozen.
fn render_tail_for(turns: &[&Turn], message: Option<&str>) -> String {
    let intent = turns
        .first()
        .map(|t| t.message.as_str())
        .or(message)
        .filter(|m| !m.trim().is_empty())
        .map(|m| clip(m, 200));
    let thread = turns.last().map(|last| {
        format!(
            "{} earlier turn{}; the last was: {}",
            turns.len(),
            if turns.len() == 1 { "" } else { "s" },
            clip(&last.message, 200)
        )
    });
    vak_core::prompts::render_tail(&TailContext {
        intent,
        thread,
        ..TailContext::now()
    })
}

/// The request an agent would send.
#[derive(Debug, Serialize)]
struct Request<'a> {
    /// The session's frozen prefix (or the current one for a session frozen
    /// before prefixes were recorded).
    prefix: &'a str,
    /// `frozen` or `current`.
    prefix_source: &'static str,
    /// The tail rendered for this turn.
    tail: &'a str,
    /// The message, if one was given.
    message: Option<&'a str>,
}

impl Request<'_> {
    fn text(&self) -> String {
        let mut out = String::new();
        let source = match self.prefix_source {
            "frozen" => "frozen at session creation",
            _ => "current; the session froze no prefix",
        };
        let _ = writeln!(out, "--- prefix ({source}) ---");
        let _ = writeln!(out, "{}", self.prefix.trim_end());
        let _ = writeln!(out, "--- tail (rendered for this turn) ---");
        let _ = writeln!(out, "{}", self.tail.trim_end());
        if let Some(message) = self.message {
            let _ = writeln!(out, "--- message ---");
            let _ = writeln!(out, "{message}");
        }
        out
    }
}

/// The prefix a session runs on: frozen, unless it froze none.
fn session_prefix<'a>(
    contract: &'a FrozenContract,
    current: &'a ResolvedPrompt,
) -> (&'a str, &'static str) {
    if contract.prefix.is_empty() {
        (current.prefix.as_str(), "current")
    } else {
        (contract.prefix.as_str(), "frozen")
    }
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
    let store = SessionStore::new(&core.selectors().home);
    let parent = match &args.parent {
        Some(raw) => {
            let parent_id = session_id(raw)?;
            let header = store.read_header(&parent_id)?;
            Some(ParentSession {
                session_id: parent_id.to_string(),
                agent: header.contract.agent,
            })
        }
        None => None,
    };
    let resolved = core.resolve()?;
    vak_core::check_window(&resolved)?;
    let contract = freeze(&resolved, parent);
    let id = store.create(meta_for(core.selectors()), contract.clone())?;
    match args.format {
        Format::Json => print_json(&json!({
            "session_id": id,
            "fingerprint": contract.fingerprint,
        })),
        Format::Text => {
            for warning in &resolved.warnings {
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
    let store = SessionStore::new(&home_dir(args.home.as_ref())?);
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
    if contract.prompt_layers.is_empty() {
        let _ = writeln!(
            out,
            "prompt layers: none recorded (unknown baseline: no drift is reported)"
        );
    } else {
        let _ = writeln!(out, "fingerprint {}", esc(&contract.fingerprint));
        let _ = writeln!(out, "prompt layers:");
        for d in &contract.prompt_layers {
            let _ = writeln!(
                out,
                "  {:<20} {:<8} {} {:>6} bytes  {}",
                esc(&d.block.to_string()),
                esc(&d.layer.to_string()),
                esc(&short(&d.digest)),
                d.bytes,
                esc(d.source.as_deref().unwrap_or("-"))
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
    let store = SessionStore::new(&home_dir(args.home.as_ref())?);
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
            let mut out = String::new();
            if total == 0 {
                let _ = writeln!(out, "no sessions in {}", Escaped(store.dir().as_str()));
            }
            for session in &sessions {
                out.push_str(&summary_line(session));
                out.push('\n');
            }
            out::print(&out)?;
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
fn summary_line(session: &serde_json::Value) -> String {
    let field = |key: &str| session[key].as_str().map(|v| Escaped(v).to_string());
    let mut line = format!(
        "{}  {}  {}  {}",
        field("session_id").unwrap_or_default(),
        field("created_at").unwrap_or_default(),
        field("surface").unwrap_or_else(|| "-".to_owned()),
        field("project").unwrap_or_else(|| "-".to_owned()),
    );
    if let (Some(bot), Some(chat)) = (field("bot"), field("chat")) {
        let _ = write!(line, "  {bot}/{chat}");
    }
    if let Some(agent) = field("agent") {
        let _ = write!(line, "  agent {agent}");
    }
    if let Some(parent) = field("parent") {
        let _ = write!(line, "  parent {parent}");
    }
    line
}

/// `vak exec`: resume a named session. Fails closed on drift (exit 3)
/// unless `--accept-drift`, which runs on the frozen prefix and records
/// that the drift was accepted.
pub(crate) fn exec(args: &ExecArgs) -> Result<(), CliError> {
    let id = session_id(&args.session)?;
    let home = home_dir(args.home.as_ref())?;
    let store = SessionStore::new(&home);
    let ledger = store.read(&id)?;
    for warning in &ledger.warnings {
        out::notice("warning", &warning.to_string());
    }
    let core = Core::open(selectors_of(&home, &id, &ledger.header.meta)?)?;
    let current = core.resolve()?;
    let report = diff(&ledger.contract().prompt_layers, &current.descriptors);
    let decision = decide(
        ResumePath::NamedSession {
            accept_drift: args.accept_drift,
        },
        &report,
    );
    let summary = |decision: ResumeDecision| {
        json!({
            "session_id": id,
            "decision": decision,
            "fingerprint": ledger.contract().fingerprint,
            "current_fingerprint": current.fingerprint,
            "drift": report,
        })
    };
    match decision {
        ResumeDecision::Refuse => {
            if args.format == Format::Json {
                print_json(&summary(decision))?;
            }
            return Err(CliError::DriftRefused(refusal(&id, &report)));
        }
        ResumeDecision::ProceedOnFrozen => {
            store.append(
                &id,
                &Record::DriftAccepted(DriftAccepted {
                    at: now_rfc3339(),
                    changes: report.changes.clone(),
                    current_fingerprint: Some(current.fingerprint.clone()),
                }),
            )?;
        }
        ResumeDecision::Continue => {
            vak_core::check_window(&current)?;
        }
        ResumeDecision::Rotate => {
            return Err(CliError::Failed(format!(
                "session `{id}` cannot be rotated: only gateway chat bindings rotate"
            )));
        }
    }
    let turns: Vec<&Turn> = ledger.turns().collect();
    let tail = render_tail_for(&turns, args.message.as_deref());
    let (prefix, prefix_source) = session_prefix(ledger.contract(), &current);
    let request = Request {
        prefix,
        prefix_source,
        tail: &tail,
        message: args.message.as_deref(),
    };
    if let Some(message) = &args.message {
        store.append(&id, &Record::Turn(Turn::now(message.clone(), tail.clone())))?;
    }
    match args.format {
        Format::Json => {
            let mut out = summary(decision);
            out["request"] = json!(request);
            out["turn_recorded"] = json!(args.message.is_some());
            print_json(&out)
        }
        Format::Text => {
            if report.unknown_baseline {
                out::notice("note", &report.to_string());
            }
            if decision == ResumeDecision::ProceedOnFrozen {
                out::notice_lines(
                    "note",
                    &format!(
                        "the prompt changed since session {id} was created; proceeding on the frozen prompt as asked (recorded in its ledger):\n{}",
                        changes_text(&report.changes).trim_end()
                    ),
                );
            }
            out::print(&escape_text(&request.text()))
        }
    }
}

fn refusal(id: &SessionId, report: &DriftReport) -> String {
    format!(
        "the prompt changed since session {id} was created, so it was not resumed:\n{}To proceed on the prompt it was created with, add --accept-drift; to use the current prompt, start a new session with `vak session new`.",
        changes_text(&report.changes)
    )
}

/// `vak gateway …`
pub(crate) fn gateway(command: &GatewayCommand) -> Result<(), CliError> {
    match command {
        GatewayCommand::Deliver(args) => deliver(args),
    }
}

/// What a delivery did with the chat's binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Outcome {
    /// The chat had no binding; a session was created and bound.
    Created,
    /// The bound session's prompt is unchanged; it continues.
    Continued,
    /// The prompt drifted; a fresh session was bound, the old ledger kept.
    Rotated,
    /// The bound session's ledger is gone; a fresh session was bound.
    Rebound,
}

/// `vak gateway deliver`: everything from the binding lookup to the bind
/// happens under the bindings lock, so concurrent deliveries to one chat
/// create one session between them, and a drift rotates exactly once.
fn deliver(args: &DeliverArgs) -> Result<(), CliError> {
    let bot = name(NameKind::Bot, &args.bot)?;
    let chat = name(NameKind::Chat, &args.chat)?;
    let selectors = Selectors {
        surface: SurfaceKind::Chat,
        bot: Some(bot.clone()),
        chat: Some(chat.clone()),
        ..Selectors::new(
            home_dir(args.home.as_ref())?,
            project_dir(args.project.as_ref())?,
        )
    };
    let core = Core::open(selectors)?;
    let home = core.selectors().home.clone();
    let meta = meta_for(core.selectors());
    // From here on the inbound path holds only a read-only handle: nothing
    // reachable from it writes a prompt layer (see vak_core::InboundPrompts).
    let prompts = InboundPrompts::from_core(core);
    let store = SessionStore::new(&home);
    let audit = AuditLog::new(&home);
    let mut guard = BindingStore::new(&home).lock()?;

    let bound = guard.get(&bot, &chat).map(|b| b.session_id.clone());
    let ledger = match &bound {
        Some(id) => match store.read(id) {
            Ok(ledger) => Some(ledger),
            Err(SessionError::NotFound { .. }) => {
                out::notice(
                    "warning",
                    &format!(
                        "{bot}/{chat} was bound to session {id}, whose ledger is gone; binding a fresh session"
                    ),
                );
                None
            }
            Err(error) => return Err(error.into()),
        },
        None => None,
    };
    let current = prompts.resolve()?;
    vak_core::check_window(&current)?;
    let mut changes = Vec::new();
    let (outcome, session, turns, prefix, prefix_source) = match &ledger {
        None => {
            let id = store.create(meta.clone(), freeze(&current, None))?;
            guard.bind(&bot, &chat, id.clone());
            let outcome = if bound.is_some() {
                Outcome::Rebound
            } else {
                Outcome::Created
            };
            (outcome, id, Vec::new(), current.prefix.as_str(), "frozen")
        }
        Some(ledger) => {
            let report = diff(&ledger.contract().prompt_layers, &current.descriptors);
            match decide(ResumePath::ChatBinding, &report) {
                ResumeDecision::Continue => {
                    let (prefix, source) = session_prefix(ledger.contract(), &current);
                    (
                        Outcome::Continued,
                        ledger.id.clone(),
                        ledger.turns().collect(),
                        prefix,
                        source,
                    )
                }
                ResumeDecision::Rotate => {
                    let id = store.create(meta.clone(), freeze(&current, None))?;
                    // The event is durable before the binding moves: a
                    // crash in between rotates again, never silently.
                    audit.append(&SecurityEvent::ConfigChange(ConfigChange {
                        at: now_rfc3339(),
                        bot: bot.to_string(),
                        chat: chat.to_string(),
                        old_session: ledger.id.clone(),
                        new_session: id.clone(),
                        old_fingerprint: Some(ledger.contract().fingerprint.clone()),
                        new_fingerprint: Some(current.fingerprint.clone()),
                        changes: report.changes.clone(),
                    }))?;
                    guard.bind(&bot, &chat, id.clone());
                    changes = report.changes;
                    (
                        Outcome::Rotated,
                        id,
                        Vec::new(),
                        current.prefix.as_str(),
                        "frozen",
                    )
                }
                ResumeDecision::Refuse | ResumeDecision::ProceedOnFrozen => {
                    return Err(CliError::Failed(format!(
                        "{bot}/{chat}: a chat binding either continues or rotates"
                    )));
                }
            }
        }
    };
    let tail = render_tail_for(&turns, Some(&args.text));
    store.append(
        &session,
        &Record::Turn(Turn::now(args.text.clone(), tail.clone())),
    )?;
    guard.commit()?;

    let request = Request {
        prefix,
        prefix_source,
        tail: &tail,
        message: Some(&args.text),
    };
    match args.format {
        Format::Json => print_json(&json!({
            "bot": bot.as_str(),
            "chat": chat.as_str(),
            "session_id": session,
            "outcome": outcome,
            "previous_session": bound,
            "changes": changes,
            "request": request,
        })),
        Format::Text => {
            let line = match outcome {
                Outcome::Created => format!("bound to new session {session}"),
                Outcome::Continued => format!("continuing session {session}"),
                Outcome::Rebound => {
                    format!("bound to new session {session} (the old ledger was gone)")
                }
                Outcome::Rotated => format!(
                    "the prompt changed, rotated to new session {session}; session {} is kept and the change is in `vak audit list`:\n{}",
                    bound.as_ref().map_or_else(String::new, ToString::to_string),
                    changes_text(&changes).trim_end()
                ),
            };
            out::notice_lines(&format!("{bot}/{chat}"), &line);
            out::print(&escape_text(&request.text()))
        }
    }
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
    let log = AuditLog::new(&home_dir(args.home.as_ref())?);
    let entries = log.list_newest(args.limit)?;
    match args.format {
        Format::Json => print_json(&json!({
            "events": entries.events,
            "total": entries.total,
            "limit": args.limit,
            "skipped_unknown": entries.skipped_unknown,
            "skipped_lines": entries.skipped_lines,
            "warnings": entries.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })),
        Format::Text => {
            for warning in &entries.warnings {
                out::notice("warning", &warning.to_string());
            }
            if entries.skipped_lines > entries.warnings.len() {
                out::notice(
                    "warning",
                    &format!(
                        "{} more lines of `{}` that are not records were skipped",
                        entries.skipped_lines - entries.warnings.len(),
                        log.path()
                    ),
                );
            }
            let mut out = String::new();
            if entries.events.is_empty() {
                let _ = writeln!(
                    out,
                    "no security events in {}",
                    Escaped(log.path().as_str())
                );
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
