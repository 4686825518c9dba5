//! `vak prompts log|diff|revert` and `vak session diff`: every prompt has a
//! history. The history itself lives in `vak_core::history`
//! (the object store and the version log); this module words it.

use std::fmt::Write as _;

use camino::Utf8PathBuf;
use clap::{Args, ValueEnum};
use serde_json::json;
use vak_core::history::{
    self, CurrentText, HistoryError, TextChange, VersionRecord, Who, diff_pair, is_digest,
};
use vak_core::output::{VersionDiff, VersionsReport};
use vak_core::prompts::{Block, GatewayFile, Name, NameKind};
use vak_core::prompts::{Escaped, SessionId, escape_line, escape_text, short_digest};
use vak_core::{Core, EditTarget};

use crate::CliError;
use crate::edit::{Scope, TargetArgs, edit_error, report_change};
use crate::out;
use crate::prompts::print_json;
use crate::selectors::{Format, HomeArg, StoreArg};

/// Which history `log` and `diff` read: a layer file, or a gateway key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum HistoryScope {
    /// `$VAK_HOME/.vak/prompts/`
    Shared,
    /// `<project>/.vak/prompts/`
    Project,
    /// A bot's key in the gateway's `bots.json` (--bot NAME)
    Bot,
    /// A chat's key in the gateway's `allowlist.json` (--bot NAME --chat NAME)
    Chat,
}

/// What `log` and `diff` address: a layer file (as `set` addresses it) or
/// a gateway prompt key (as the admin page edits it).
#[derive(Debug, Clone, Args)]
pub(crate) struct HistoryTargetArgs {
    /// The layer, or the gateway tier (bot, chat).
    #[arg(long, value_enum)]
    pub(crate) scope: HistoryScope,
    /// The surface/KIND sub-layer.
    #[arg(long, value_name = "KIND", conflicts_with_all = ["agent", "bot", "chat"], add = clap_complete::ArgValueCandidates::new(crate::complete::surfaces))]
    pub(crate) surface: Option<String>,
    /// The agents/ROLE sub-layer.
    #[arg(long, value_name = "ROLE", conflicts_with_all = ["bot", "chat"], add = clap_complete::ArgValueCandidates::new(crate::complete::roles))]
    pub(crate) agent: Option<String>,
    /// The directory sub-layer SUBDIR/.vak/prompts/ of the project
    /// (relative to the project root; --scope project only).
    #[arg(long, value_name = "SUBDIR", conflicts_with_all = ["surface", "agent", "bot", "chat"])]
    pub(crate) dir: Option<Utf8PathBuf>,
    /// The gateway bot (--scope bot or chat).
    #[arg(long, value_name = "NAME", add = clap_complete::ArgValueCandidates::new(crate::complete::bots))]
    pub(crate) bot: Option<String>,
    /// The gateway chat (--scope chat).
    #[arg(long, value_name = "NAME", allow_negative_numbers = true, add = clap_complete::ArgValueCandidates::new(crate::complete::chats))]
    pub(crate) chat: Option<String>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    /// The project root, exactly [default: found from the current directory:
    /// the nearest ancestor with .git, else with .vak, else the current
    /// directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) project: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// The block: identity, operating-rules, guardrails or surface-note.
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::complete::blocks))]
    pub(crate) block: String,
}

/// A gateway prompt key: its history's name, the store, and its value now.
struct GatewayKey {
    key: String,
    block: Block,
    store: std::sync::Arc<dyn vak_core::prompts::Store>,
    current: Option<CurrentText>,
}

/// Either kind of history target.
enum Addressed {
    File(Box<(Core, EditTarget)>),
    Gateway(GatewayKey),
}

impl HistoryTargetArgs {
    fn open(&self) -> Result<Addressed, CliError> {
        let gateway = match self.scope {
            HistoryScope::Shared | HistoryScope::Project => None,
            HistoryScope::Bot => Some(false),
            HistoryScope::Chat => Some(true),
        };
        let Some(is_chat) = gateway else {
            if self.bot.is_some() || self.chat.is_some() {
                return Err(CliError::Usage(
                    "--bot and --chat address a gateway key: use them with --scope bot or --scope chat"
                        .to_owned(),
                ));
            }
            let file = TargetArgs {
                scope: match self.scope {
                    HistoryScope::Project => Scope::Project,
                    _ => Scope::Shared,
                },
                surface: self.surface.clone(),
                agent: self.agent.clone(),
                dir: self.dir.clone(),
                home: self.home.clone(),
                project: self.project.clone(),
                store: self.store.clone(),
                block: self.block.clone(),
            };
            return Ok(Addressed::File(Box::new(file.open()?)));
        };
        let block: Block = self
            .block
            .parse()
            .map_err(|e: vak_core::prompts::BlocksError| CliError::Usage(e.to_string()))?;
        let bot = self.bot.as_deref().ok_or_else(|| {
            CliError::Usage("--scope bot and --scope chat need --bot NAME".to_owned())
        })?;
        let bot = Name::new(NameKind::Bot, bot).map_err(|e| CliError::Usage(e.to_string()))?;
        let chat = match (is_chat, self.chat.as_deref()) {
            (true, Some(chat)) => {
                Some(Name::new(NameKind::Chat, chat).map_err(|e| CliError::Usage(e.to_string()))?)
            }
            (true, None) => {
                return Err(CliError::Usage("--scope chat needs --chat NAME".to_owned()));
            }
            (false, Some(_)) => {
                return Err(CliError::Usage(
                    "--chat addresses a chat's key: use --scope chat".to_owned(),
                ));
            }
            (false, None) => None,
        };
        let home = self.home.dir()?;
        let store = self.store.open(&home)?;
        let (file, entry) = match &chat {
            None => (GatewayFile::Bots, vec![bot.as_str()]),
            Some(chat) => (GatewayFile::Allowlist, vec![bot.as_str(), chat.as_str()]),
        };
        let current = history::gateway_current_text(&home, file, &entry, block)
            .map_err(|e| CliError::Failed(e.to_string()))?;
        Ok(Addressed::Gateway(GatewayKey {
            key: history::gateway_key(&bot, chat.as_ref(), block),
            block,
            store,
            current,
        }))
    }
}

/// `vak prompts log`.
#[derive(Debug, Clone, Args)]
pub(crate) struct LogArgs {
    #[command(flatten)]
    pub(crate) target: HistoryTargetArgs,
    #[command(flatten)]
    pub(crate) pager: out::PagerArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts diff`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DiffArgs {
    #[command(flatten)]
    pub(crate) target: HistoryTargetArgs,
    #[command(flatten)]
    pub(crate) pager: out::PagerArg,
    /// The version to diff from (a digest from `log`, or a unique prefix of
    /// one) [default: the last change's before].
    #[arg(long, value_name = "D")]
    pub(crate) from: Option<String>,
    /// The version to diff to [default: the last change's after, or the
    /// file as it is now when only --from is given].
    #[arg(long, value_name = "D")]
    pub(crate) to: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts revert`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RevertArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) over_budget: crate::edit::OverBudgetArg,
    /// The version to save back: a digest from `log`, or a unique prefix.
    #[arg(long, value_name = "DIGEST")]
    pub(crate) to: String,
    /// Refuse unless the file's current sha256 is HEX ("" = the file must
    /// not exist).
    #[arg(long, value_name = "HEX")]
    pub(crate) if_digest: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak session diff`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SessionDiffArgs {
    /// The session id.
    pub(crate) session: String,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

fn history_error(error: HistoryError) -> CliError {
    match error {
        HistoryError::BadDigest(_) => CliError::Usage(error.to_string()),
        other => CliError::Failed(other.to_string()),
    }
}

/// Every digest the log names for this file, newest first.
/// A full digest, or the one digest in the log that starts with `given`.
fn resolve_digest(given: &str, records: &[VersionRecord]) -> Result<String, CliError> {
    // As `log` shows it (one `…` after a short digest), in either case.
    let lowered = given.to_ascii_lowercase();
    let given = lowered.strip_suffix('…').unwrap_or(&lowered);
    if is_digest(given) {
        return Ok(given.to_owned());
    }
    let plain = given.len() >= 4
        && given
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !plain {
        return Err(CliError::Usage(format!(
            "`{}` is not a digest: give a sha256 from `vak prompts log`, or at least 4 of its leading hex digits",
            Escaped(given)
        )));
    }
    let matches: Vec<&str> = history::known_digests(records)
        .into_iter()
        .filter(|d| d.starts_with(given))
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(CliError::Failed(format!(
            "no version of this file recorded in the log starts with `{}`; see `vak prompts log`",
            Escaped(given)
        ))),
        _ => Err(CliError::Usage(format!(
            "`{}` names {} versions in the log; give more digits",
            Escaped(given),
            matches.len()
        ))),
    }
}

fn show(digest: Option<&str>) -> String {
    digest.map_or_else(|| "(no file)".to_owned(), short_digest)
}

/// `vak prompts log`.
pub(crate) fn log(args: &LogArgs) -> Result<(), CliError> {
    let (versions, key, block) = match args.target.open()? {
        Addressed::File(file) => {
            let (core, target) = *file;
            (
                history::versions(&core, &target).map_err(history_error)?,
                history::target_key(&core, &target),
                target.block,
            )
        }
        Addressed::Gateway(gateway) => (
            gateway
                .store
                .history()
                .versions_of(&gateway.key)
                .map_err(history_error)?,
            gateway.key,
            gateway.block,
        ),
    };
    if args.format == Format::Json {
        warn_skipped(&versions);
        return out::print_document(&VersionsReport::of(&versions).target(&key).block(block));
    }
    print_versions(&key, &versions, |text| out::page(text, args.pager))
}

/// Warn that lines of the version log were skipped, if any were.
fn warn_skipped(versions: &history::Versions) {
    if versions.skipped > 0 {
        out::notice(
            "warning",
            &format!(
                "{} line(s) of the version log were skipped (torn or not a record)",
                versions.skipped
            ),
        );
    }
}

/// Print one file's versions, oldest first, as `vak prompts log` does
/// (through `print`: the pager, or stdout), or say there are none: the one
/// listing of `log`, `rule log` and `imported log`.
pub(crate) fn print_versions(
    key: &str,
    versions: &history::Versions,
    print: impl FnOnce(&str) -> Result<(), CliError>,
) -> Result<(), CliError> {
    warn_skipped(versions);
    if versions.records.is_empty() {
        return out::println(&format!(
            "no versions of `{}` recorded: no change through vak is logged under this path (history is kept per path: a project or home that was moved starts a new one)",
            Escaped(key)
        ));
    }
    let mut text = format!("versions of `{}`, oldest first:\n", escape_line(key));
    for r in &versions.records {
        let tokens = r
            .tokens
            .map_or_else(String::new, |t| format!("  {t} tokens"));
        let over = if r.over_cap {
            "  (made over the cap, --over-budget)"
        } else {
            ""
        };
        let _ = writeln!(
            text,
            "{}  {:<6}  {}  {} -> {}{tokens}{over}",
            escape_line(&r.time),
            r.action.as_str(),
            escape_line(&r.who),
            // Both sides in full, as `--from`, `--to` and `revert --to`
            // take them: one listing never mixes two lengths.
            escape_line(r.before.as_deref().unwrap_or("(no file)")),
            escape_line(r.after.as_deref().unwrap_or("(no file)")),
        );
    }
    print(&text)
}

/// `vak prompts diff`.
pub(crate) fn diff(args: &DiffArgs) -> Result<(), CliError> {
    let addressed = args.target.open()?;
    let records = match &addressed {
        Addressed::File(file) => history::versions(&file.0, &file.1),
        Addressed::Gateway(gateway) => gateway.store.history().versions_of(&gateway.key),
    }
    .map_err(history_error)?
    .records;
    let from = args
        .from
        .as_deref()
        .map(|d| resolve_digest(d, &records))
        .transpose()?;
    let to = args
        .to
        .as_deref()
        .map(|d| resolve_digest(d, &records))
        .transpose()?;
    let (pair, block, path, history, current) = match &addressed {
        Addressed::File(file) => {
            let (core, target) = &**file;
            // Read only as far as the diff needs it: "to the file as it is
            // now" must be able to read the file, and says why it cannot.
            let current = match history::current_text(core, target) {
                Ok(current) => current,
                Err(error) if from.is_some() && to.is_none() => {
                    return Err(CliError::Failed(error.to_string()));
                }
                Err(_) => None,
            };
            (
                diff_pair(
                    core,
                    target,
                    from.as_deref(),
                    to.as_deref(),
                    current.as_ref(),
                )
                .map_err(history_error)?,
                target.block,
                target.path(core.selectors()).into_string(),
                core.store().history(),
                current,
            )
        }
        Addressed::Gateway(gateway) => (
            history::pair_of(records.last(), from.as_deref(), to.as_deref(), || {
                gateway.current.as_ref().map(|c| c.digest.clone())
            }),
            gateway.block,
            gateway.key.clone(),
            gateway.store.history(),
            gateway.current.clone(),
        ),
    };
    let Some((from, to)) = pair else {
        return Err(CliError::Failed(format!(
            "no change to `{}` is recorded, so there is nothing to diff; give --from and --to digests",
            Escaped(&path)
        )));
    };
    let diff = VersionDiff::between(
        history,
        &block.to_string(),
        "(no file)",
        from,
        to,
        current.as_ref(),
    )
    .map_err(history_error)?
    .of_file(block, path);
    if args.format == Format::Json {
        return out::print_document(&diff);
    }
    let diff = diff.diff;
    if diff.is_empty() {
        return out::println("no difference");
    }
    out::page(&escape_text(&diff), args.pager)
}

/// `vak prompts revert`.
pub(crate) fn revert(args: &RevertArgs) -> Result<(), CliError> {
    let (core, target) = args.target.open()?;
    let records = history::versions(&core, &target)
        .map_err(history_error)?
        .records;
    let to = resolve_digest(&args.to, &records)?;
    let progress = crate::progress::Progress::status(crate::edit::BUDGETING);
    let saved = core
        .revert_block(
            &target,
            &to,
            args.if_digest.as_deref(),
            &Who::OsUser,
            args.over_budget.unchecked(),
        )
        .map_err(edit_error)?;
    drop(progress);
    if args.format == Format::Json {
        return crate::edit::print_saved(target.block, &saved);
    }
    report_change(
        &format!(
            "reverted `{}` in `{}` to sha256 {} (was {})",
            target.block,
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest,
            show(saved.outcome.previous.as_deref())
        ),
        &saved.preview,
        saved.unrecorded.as_deref(),
    )
}

/// `vak session diff ID`.
pub(crate) fn session_diff(args: &SessionDiffArgs) -> Result<(), CliError> {
    let id = SessionId::parse(&args.session)?;
    let home = args.home.dir()?;
    let store = args.store.open(&home)?;
    let ledger = store.read(&id)?;
    for warning in &ledger.warnings {
        out::notice("warning", &warning.to_string());
    }
    let core = Core::open(vak_gateway::selectors_of(
        &home,
        &id,
        &ledger.header.meta,
        &crate::selectors::current_dir()?,
    )?)?;
    let current = vak_gateway::resolve_session(&core)?;
    if ledger.contract().baseline() == vak_core::prompts::Baseline::Unknown {
        return Err(CliError::Failed(format!(
            "session {id} froze no prompt layers (a ledger from before layers were recorded): there is nothing to compare"
        )));
    }
    let changes = history::session_changes(store.history(), ledger.contract(), &current);
    // Scoped rules are per turn, never drift: shown beside the changes.
    let rules = vak_core::rule_changes(store.history(), ledger.turns(), &core.scoped_rules());
    if args.format == Format::Json {
        let list: Vec<_> = changes.iter().map(TextChange::report).collect();
        let rules: Vec<_> = rules.iter().map(rule_change_json).collect();
        return print_json(&json!({
            "session": id.to_string(),
            "fingerprint_frozen": ledger.contract().fingerprint,
            "fingerprint_now": current.fingerprint,
            "changes": list,
            "scoped_rules": rules,
        }));
    }
    let rules_text = rule_changes_text(&rules);
    if changes.is_empty() {
        out::println(&format!(
            "session {id}: nothing changed; the prompt resolves as it was frozen"
        ))?;
        return if rules_text.is_empty() {
            Ok(())
        } else {
            out::print(&rules_text)
        };
    }
    let mut text = format!(
        "session {id}: {} change(s) since it was frozen\n",
        changes.len()
    );
    for c in &changes {
        if c.kind == history::TextChangeKind::Reordered {
            let _ = writeln!(
                text,
                "\n`{}` {} ({}): reordered: the same text ({}) at another place in the block",
                escape_line(&c.block),
                escape_line(&c.layer),
                escape_line(
                    &c.source
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string)
                ),
                escape_line(&show(c.current.as_deref())),
            );
            continue;
        }
        if c.block == history::LAYERS_BLOCK && c.layer == history::PREFIX_LAYER {
            let _ = writeln!(
                text,
                "\n`{}` ({}): {}; the frozen prefix against the one its layers render now:",
                escape_line(&c.block),
                escape_line(&c.layer),
                escape_line(
                    &c.source
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string)
                ),
            );
        } else if c.kind == history::TextChangeKind::Moved {
            let texts = if c.frozen == c.current {
                format!("the same text ({})", show(c.current.as_deref()))
            } else {
                format!(
                    "{} -> {}",
                    show(c.frozen.as_deref()),
                    show(c.current.as_deref())
                )
            };
            let _ = writeln!(
                text,
                "\n`{}` moved from {} ({}) to {} ({}): {}",
                escape_line(&c.block),
                escape_line(c.frozen_layer.as_deref().unwrap_or("-")),
                escape_line(
                    &c.frozen_source
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string)
                ),
                escape_line(&c.layer),
                escape_line(
                    &c.source
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string)
                ),
                escape_line(&texts),
            );
        } else {
            let _ = writeln!(
                text,
                "\n`{}` {} ({}): {} -> {}",
                escape_line(&c.block),
                escape_line(&c.layer),
                escape_line(
                    &c.source
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string)
                ),
                escape_line(&show(c.frozen.as_deref())),
                escape_line(&show(c.current.as_deref())),
            );
        }
        match &c.diff {
            Ok(diff) if diff.is_empty() && c.block == history::LAYERS_BLOCK => {
                text.push_str("(the same)\n");
            }
            Ok(diff) => text.push_str(&escape_text(diff)),
            Err(why) => {
                let _ = writeln!(text, "{}", escape_line(why));
            }
        }
    }
    text.push_str(&rule_changes_text(&rules));
    out::print(&text)
}

/// What `session diff` says about the scoped rules the session's turns
/// carried and that read otherwise now.
fn rule_changes_text(rules: &[vak_core::RuleChange]) -> String {
    let mut text = String::new();
    if rules.is_empty() {
        return text;
    }
    let _ = writeln!(
        text,
        "\nScoped rules the session's turns carried that read otherwise now (per turn, not drift; the next turn carries them as they are):"
    );
    for rule in rules {
        let _ = writeln!(
            text,
            "\n`{}` ({}): {} at {} -> {}",
            escape_line(&rule.name),
            escape_line(&rule.source.to_string()),
            escape_line(&show(Some(&rule.recorded))),
            escape_line(&rule.recorded_at),
            escape_line(&show(rule.current.as_deref()))
        );
        match &rule.diff {
            Ok(diff) => text.push_str(&escape_text(diff)),
            Err(why) => {
                let _ = writeln!(text, "{}", escape_line(why));
            }
        }
    }
    text
}

fn rule_change_json(c: &vak_core::RuleChange) -> serde_json::Value {
    let (diff, error) = match &c.diff {
        Ok(diff) => (Some(diff.as_str()), None),
        Err(why) => (None, Some(why.as_str())),
    };
    json!({
        "name": c.name,
        "source": c.source,
        "recorded": c.recorded,
        "recorded_at": c.recorded_at,
        "current": c.current,
        "diff": diff,
        "error": error,
    })
}
