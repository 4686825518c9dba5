//! `vak prompts set|edit|reset|check`: edit one block of one layer, checked
//! as the prompt would resolve after the save, and report the budget.
//!
//! The checks themselves live in `vak_core` (`Core::save_block`,
//! `Core::reset_block`, `budget_of`, `lints_of`) so the admin API refuses
//! exactly what this refuses; this module reads input, runs the editor and
//! words the output.

use std::fmt::Write as _;
use std::io::Read as _;
use std::process::Command;

use camino::{Utf8Path, Utf8PathBuf};
use clap::{Args, ValueEnum};
use serde_json::json;
use vak_core::files::FsError;
use vak_core::history::{Action, Who};
use vak_core::output::{Audience, SavedReport};
use vak_core::prompts::{Block, Escaped, MAX_FILE_BYTES, Name, NameKind, SaveError, SurfaceKind};
use vak_core::{
    Budget, Core, EditError, EditTarget, Preview, Scope as CoreScope, Selectors, SubLayer,
    Unchecked, budget_of, lints_of,
};

use crate::CliError;
use crate::out;
use crate::prompts::print_json;
use crate::selectors::{Format, HomeArg, SelectorArgs, StoreArg, current_dir, subdir};

/// Which directory layer a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scope {
    /// `$VAK_HOME/.vak/prompts/`
    Shared,
    /// `<project>/.vak/prompts/`
    Project,
    /// The managed layer: never written by vak (refused with a note).
    #[value(hide = true)]
    Managed,
}

/// Where a write goes: scope plus optional sub-layer.
#[derive(Debug, Clone, Args)]
pub(crate) struct TargetArgs {
    /// The layer to write.
    #[arg(long, value_enum)]
    pub(crate) scope: Scope,
    /// Write the surface/KIND sub-layer instead.
    #[arg(long, value_name = "KIND", conflicts_with = "agent", add = clap_complete::ArgValueCandidates::new(crate::complete::surfaces))]
    pub(crate) surface: Option<String>,
    /// Write the agents/ROLE sub-layer instead.
    #[arg(long, value_name = "ROLE", add = clap_complete::ArgValueCandidates::new(crate::complete::roles))]
    pub(crate) agent: Option<String>,
    /// Write the directory sub-layer SUBDIR/.vak/prompts/ of the project
    /// (relative to the project root; --scope project only) instead of the
    /// root's [default: the project root, wherever the command runs].
    #[arg(long, value_name = "SUBDIR", conflicts_with_all = ["surface", "agent"])]
    pub(crate) dir: Option<Utf8PathBuf>,
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

/// `--over-budget` of the commands that change a layer.
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct OverBudgetArg {
    /// Make the change even when it puts chains over the token cap, or not
    /// every chain it reaches could be checked; the chains over are said,
    /// and the version history records the change as made over the cap.
    #[arg(long)]
    pub(crate) over_budget: bool,
}

impl OverBudgetArg {
    /// What the library does with chains over the cap or not checked.
    pub(crate) fn unchecked(self) -> Unchecked {
        Unchecked::from_over_budget(self.over_budget)
    }
}

/// `vak prompts set`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SetArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) over_budget: OverBudgetArg,
    #[command(flatten)]
    pub(crate) text: NewTextArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// Where a save's new text comes from, and the digest the file must still
/// have: what `set`, `rule set` and `imported set` take alike.
#[derive(Debug, Clone, Args)]
pub(crate) struct NewTextArgs {
    /// Read the new text from this file.
    #[arg(long, value_name = "F")]
    pub(crate) file: Option<Utf8PathBuf>,
    /// `-`: read the new text from standard input.
    #[arg(value_name = "-")]
    pub(crate) stdin: Option<String>,
    /// Refuse unless the file's current sha256 is HEX ("" = the file must
    /// not exist).
    #[arg(long, value_name = "HEX")]
    pub(crate) if_digest: Option<String>,
}

impl NewTextArgs {
    /// The new text ([`read_text`]).
    pub(crate) fn read(&self) -> Result<String, CliError> {
        read_text(self.file.as_deref(), self.stdin.as_deref())
    }

    /// The digest the file must still have, if one was given.
    pub(crate) fn if_digest(&self) -> Option<&str> {
        self.if_digest.as_deref()
    }
}

/// `vak prompts edit`.
#[derive(Debug, Clone, Args)]
pub(crate) struct EditArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) over_budget: OverBudgetArg,
    /// Output format (the editor still runs on the terminal).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts reset`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) over_budget: OverBudgetArg,
    /// Refuse unless the file's current sha256 is HEX.
    #[arg(long, value_name = "HEX")]
    pub(crate) if_digest: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts check`.
#[derive(Debug, Clone, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) selectors: SelectorArgs,
    /// Check every chain of the project at once (every surface, role,
    /// directory layer, gateway bot and chat), with one summary of every
    /// chain over its cap.
    #[arg(long, conflicts_with_all = ["agent", "dir", "bot", "chat"])]
    pub(crate) all: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

fn usage(message: impl Into<String>) -> CliError {
    CliError::Usage(message.into())
}

impl TargetArgs {
    /// The core and the target this command addresses; the core keeps its
    /// texts and versions in the chosen store.
    pub(crate) fn open(&self) -> Result<(Core, EditTarget), CliError> {
        let block: Block = self
            .block
            .parse()
            .map_err(|e: vak_core::prompts::BlocksError| usage(e.to_string()))?;
        let sub = match (&self.surface, &self.agent) {
            _ if self.dir.is_some() => SubLayer::Directory(
                self.dir
                    .as_deref()
                    .map(subdir)
                    .transpose()?
                    .unwrap_or_default(),
            ),
            (Some(kind), _) => SubLayer::Surface(
                kind.parse::<SurfaceKind>()
                    .map_err(|e| usage(e.to_string()))?,
            ),
            (None, Some(role)) => {
                SubLayer::Agent(Name::new(NameKind::Role, role).map_err(|e| usage(e.to_string()))?)
            }
            (None, None) => SubLayer::Base,
        };
        let target = EditTarget::new(self.scope.writable()?, sub, block).map_err(edit_error)?;
        let home = self.home.dir()?;
        let selectors = match &self.project {
            Some(project) => Selectors::new(home, project.clone()),
            None => Selectors::discover(home, &current_dir()?)?,
        };
        // The chosen store gets the kept texts and versions, and a change
        // to the home side when the store holds it (`--store`, `VAK_STORE`
        // or `[store] url`; DECISIONS §14), so every node sees it; the file
        // store keeps writing the home's files.
        let store = self.store.open(&selectors.home)?;
        let core = Core::for_target(selectors, &target)?.with_store(store);
        Ok((core, target))
    }
}

/// Exit codes per DECISIONS §8: over budget 4, bad input 2, the rest 1.
pub(crate) fn edit_error(error: EditError) -> CliError {
    match error {
        EditError::OverBudget { .. } | EditError::Unchecked { .. } => {
            CliError::OverBudget(error.to_string())
        }
        EditError::NotEditable(..)
        | EditError::BadDirectory(_)
        | EditError::Save(SaveError::BadDigest(_)) => CliError::Usage(error.to_string()),
        EditError::Core(core) => CliError::Core(core),
        EditError::Save(_)
        | EditError::Home(_)
        | EditError::History(_)
        | EditError::ForbiddenCharacter { .. }
        | EditError::ImportRefused { .. }
        | EditError::ProjectInHome { .. }
        | EditError::IntoHome { .. }
        | EditError::Unkeepable { .. } => CliError::Failed(error.to_string()),
    }
}

fn with_note(error: CliError, note: &str) -> CliError {
    match error {
        CliError::OverBudget(m) => CliError::OverBudget(format!("{m}\n{note}")),
        CliError::Usage(m) => CliError::Usage(format!("{m}\n{note}")),
        CliError::Failed(m) => CliError::Failed(format!("{m}\n{note}")),
        other => CliError::Failed(format!("{other}\n{note}")),
    }
}

pub(crate) fn tokens_line(budget: &Budget) -> String {
    let r = &budget.report;
    let approx = if r.approximate { ", approximate" } else { "" };
    let rules = if budget.scoped_rules_tokens > 0 {
        format!(
            " (with {} tokens of scoped rules, all counted as if active)",
            budget.scoped_rules_tokens
        )
    } else {
        String::new()
    };
    format!(
        "prompt prefix: {} / {} tokens (cap){rules} · model {} window {} tokens ({}{approx})",
        r.prefix_tokens, r.cap, r.model, r.context_window, r.encoding
    )
}

/// What a successful save or reset prints: stdout for the result, stderr
/// for what the user should notice.
pub(crate) fn report_change(
    headline: &str,
    preview: &Preview,
    unrecorded: Option<&str>,
) -> Result<(), CliError> {
    if let Some(unrecorded) = unrecorded {
        out::notice("warning", unrecorded);
    }
    if preview.budget.report.is_over() {
        out::notice(
            "warning",
            &format!(
                "the prefix is over the cap ({} of {} tokens): allowed because the change does not make it longer, or because --over-budget was given",
                preview.budget.report.prefix_tokens, preview.budget.report.cap
            ),
        );
    }
    for lint in &preview.lints {
        out::notice("lint", lint);
    }
    for warning in &preview.budget.warnings {
        // A change made over the cap lists its chains, a line each.
        out::notice_lines("warning", warning);
    }
    let mut text = format!("{headline}\n{}\n", tokens_line(&preview.budget));
    if let Some(note) = &preview.not_applied {
        let _ = writeln!(text, "note: {}", Escaped(note));
    }
    out::print(&text)
}

/// Read at most [`MAX_FILE_BYTES`] + 1 bytes: anything longer is refused by
/// size before it is held in memory, however large the input is.
fn read_bounded(mut reader: impl std::io::Read, what: &str) -> Result<String, CliError> {
    let mut bytes = Vec::new();
    reader
        .by_ref()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| CliError::Io {
            context: format!("cannot read {what}"),
            source,
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CliError::Failed(format!(
            "{what} is larger than the {MAX_FILE_BYTES}-byte limit for prompt files; nothing was saved"
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        CliError::Failed(format!(
            "{what} is not valid UTF-8 at byte {}; prompt files are UTF-8 text",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Open `--file F` for reading without blocking on a FIFO and without
/// reading a device or directory: only a regular file is prompt text.
fn open_input_file(file: &Utf8Path) -> Result<impl std::io::Read, CliError> {
    let what = format!("`{}`", Escaped(file.as_str()));
    let io = |source| CliError::Io {
        context: format!("cannot read {what}"),
        source,
    };
    let handle = vak_core::files::open_input(file).map_err(|error| match error {
        FsError::Io { source, .. } => io(source),
        FsError::Symlink { .. } | FsError::NotRegular { .. } => CliError::Failed(format!(
            "{what} is not a regular file (a FIFO, device or directory); give a file with the new text"
        )),
    })?;
    let meta = handle.metadata().map_err(io)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(CliError::Failed(format!(
            "{what} is {} bytes, larger than the {MAX_FILE_BYTES}-byte limit for prompt files; nothing was saved",
            meta.len()
        )));
    }
    Ok(handle)
}

/// The new text of a `set`: from `--file F` or from standard input (`-`),
/// bounded.
fn read_text(file: Option<&Utf8Path>, stdin: Option<&str>) -> Result<String, CliError> {
    match (file, stdin) {
        (Some(_), Some(_)) => Err(usage(
            "give the new text either with --file F or as `-` (standard input), not both",
        )),
        (None, None) => Err(usage(
            "give the new text with --file F, or `-` to read standard input",
        )),
        (None, Some(dash)) if dash != "-" => Err(usage(format!(
            "unexpected argument `{}`: use `-` to read standard input, or --file F",
            Escaped(dash)
        ))),
        (Some(file), None) => read_bounded(
            open_input_file(file)?,
            &format!("`{}`", Escaped(file.as_str())),
        ),
        (None, Some(_)) => read_bounded(std::io::stdin().lock(), "standard input"),
    }
}

/// The status line while a change budgets every chain it reaches, which
/// the library does not count out (thousands on a large project).
pub(crate) const BUDGETING: &str = "budgeting every chain this change reaches";

/// `vak prompts set`.
pub(crate) fn set(args: &SetArgs) -> Result<(), CliError> {
    let text = args.text.read()?;
    let (core, target) = args.target.open()?;
    // The text being replaced, for the line counts said after the save; a
    // file that cannot be read is left to the save to refuse.
    let replaced = core
        .edit_start(&target)
        .ok()
        .filter(|start| start.exists)
        .map(|start| start.text);
    let saved = {
        let _progress = crate::progress::Progress::status(BUDGETING);
        core.save_block_by(
            &target,
            &text,
            args.text.if_digest(),
            &Who::OsUser,
            Action::Save,
            args.over_budget.unchecked(),
        )
    }
    .map_err(edit_error)?;
    if args.format == Format::Json {
        return print_saved(target.block, &saved);
    }
    let headline = if saved.outcome.previous.as_deref() == Some(saved.outcome.digest.as_str())
        && !saved.recorded
        && saved.unrecorded.is_none()
    {
        format!(
            "unchanged: `{}` already holds this text (sha256 {}); no version recorded",
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest
        )
    } else {
        if let Some(old) = &replaced {
            out::notice(
                "note",
                &replaced_note(&args.target, old, &text, &saved.preview),
            );
        }
        format!(
            "saved `{}` to `{}` (sha256 {})",
            target.block,
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest
        )
    };
    report_change(&headline, &saved.preview, saved.unrecorded.as_deref())
}

/// What a save replaced, before → after, and the command that shows the
/// change itself: `replaced `…/identity.md`: 3 → 5 lines, prompt prefix
/// 620 → 655 tokens; see `vak prompts diff --scope project identity``.
fn replaced_note(target: &TargetArgs, old: &str, new: &str, preview: &Preview) -> String {
    let mut diff = format!(
        "vak prompts diff --scope {}",
        match target.scope {
            Scope::Shared => "shared",
            Scope::Project => "project",
            Scope::Managed => "managed",
        }
    );
    for (flag, value) in [
        ("--surface", target.surface.as_deref()),
        ("--agent", target.agent.as_deref()),
        ("--dir", target.dir.as_deref().map(Utf8Path::as_str)),
        ("--project", target.project.as_deref().map(Utf8Path::as_str)),
    ] {
        if let Some(value) = value {
            let _ = write!(diff, " {flag} {}", Escaped(value));
        }
    }
    let _ = write!(diff, " {}", Escaped(&target.block));
    format!(
        "replaced `{}`: {} → {} lines, prompt prefix {} → {} tokens; `{diff}` shows what changed",
        Escaped(preview.path.as_str()),
        old.lines().count(),
        new.lines().count(),
        preview.budget_before.report.prefix_tokens,
        preview.budget.report.prefix_tokens,
    )
}

/// The JSON a save or a revert answers: what was written, the prefix
/// tokens before and after, whether a version was recorded, and whether
/// the change was made over the cap. Warnings go to stderr.
pub(crate) fn print_saved(block: Block, saved: &vak_core::Saved) -> Result<(), CliError> {
    notices(&saved.preview, saved.unrecorded.as_deref());
    out::print_document(&SavedReport::saved(block, saved, Audience::Terminal))
}

/// The warnings and lints of a change, on stderr.
fn notices(preview: &Preview, unrecorded: Option<&str>) {
    if let Some(unrecorded) = unrecorded {
        out::notice("warning", unrecorded);
    }
    for lint in &preview.lints {
        out::notice("lint", lint);
    }
    for warning in &preview.budget.warnings {
        // A change made over the cap lists its chains, a line each.
        out::notice_lines("warning", warning);
    }
}

/// The editor command: `$VISUAL`, then `$EDITOR`, then `vi`.
fn editor() -> String {
    ["VISUAL", "EDITOR"]
        .into_iter()
        .find_map(|key| std::env::var(key).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned())
}

fn temp_copy(block: Block, text: &str) -> Result<Utf8PathBuf, CliError> {
    use std::io::Write as _;
    let dir = Utf8PathBuf::from_path_buf(std::env::temp_dir()).map_err(|p| {
        CliError::Failed(format!(
            "temporary directory `{}` is not UTF-8",
            vak_core::prompts::Escaped(&p.to_string_lossy())
        ))
    })?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let path = dir.join(format!(
        "vak-edit-{}-{}-{stamp}.md",
        block,
        std::process::id()
    ));
    let io = |source| CliError::Io {
        context: format!(
            "cannot write the temporary copy `{}`",
            Escaped(path.as_str())
        ),
        source,
    };
    let mut file = vak_core::files::create_new(&path, 0o600)
        .map_err(|error| match error {
            FsError::Io { source, .. } => io(source),
            // Something is at a name no one else makes: never write through it.
            refused @ (FsError::Symlink { .. } | FsError::NotRegular { .. }) => {
                CliError::Failed(refused.to_string())
            }
        })?
        .ok_or_else(|| io(std::io::Error::from(std::io::ErrorKind::AlreadyExists)))?;
    file.write_all(text.as_bytes()).map_err(io)?;
    Ok(path)
}

fn run_editor(path: &Utf8Path) -> Result<(), CliError> {
    let editor = editor();
    // Through the shell, so `EDITOR="code --wait"` works as it does for git.
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("vak-edit")
        .arg(path.as_str())
        .status()
        .map_err(|source| CliError::Io {
            context: format!("cannot start the editor `{}`", Escaped(&editor)),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "the editor `{}` exited with {status}; nothing was saved",
            Escaped(&editor)
        )))
    }
}

/// `vak prompts edit`.
pub(crate) fn edit(args: &EditArgs) -> Result<(), CliError> {
    let (core, target) = args.target.open()?;
    let start = core.edit_start(&target).map_err(edit_error)?;
    let copy = temp_copy(target.block, &start.text)?;
    let finish = || -> Result<Option<vak_core::Saved>, CliError> {
        run_editor(&copy)?;
        let text = read_bounded(
            open_input_file(&copy)?,
            &format!("the edited copy `{}`", Escaped(copy.as_str())),
        )?;
        if text == start.text {
            return Ok(None);
        }
        // Saved against the digest the editor started from, so a change
        // made meanwhile (another editor, the admin UI) is not overwritten.
        let _progress = crate::progress::Progress::status(BUDGETING);
        core.save_block_by(
            &target,
            &text,
            Some(&start.digest),
            &Who::OsUser,
            Action::Save,
            args.over_budget.unchecked(),
        )
        .map(Some)
        .map_err(edit_error)
    };
    match finish() {
        Ok(None) => {
            let _ = vak_core::files::remove_file(&copy);
            if args.format == Format::Json {
                // Nothing written: the file as it was, on both sides.
                let digest = start.exists.then_some(start.digest.as_str());
                let path = target.path(core.selectors());
                return out::print_document(&SavedReport::unchanged(target.block, &path, digest));
            }
            out::println(&format!("no changes to `{}`; nothing saved", target.block))
        }
        Ok(Some(saved)) if args.format == Format::Json => {
            let _ = vak_core::files::remove_file(&copy);
            print_saved(target.block, &saved)
        }
        Ok(Some(saved)) => {
            let _ = vak_core::files::remove_file(&copy);
            report_change(
                &format!(
                    "saved `{}` to `{}` (sha256 {})",
                    target.block,
                    Escaped(saved.outcome.path.as_str()),
                    saved.outcome.digest
                ),
                &saved.preview,
                saved.unrecorded.as_deref(),
            )
        }
        // The user's text is never lost: the copy stays where it is.
        Err(error) => Err(with_note(
            error,
            &format!("your edited text is kept in `{}`", Escaped(copy.as_str())),
        )),
    }
}

/// `vak prompts reset`.
pub(crate) fn reset(args: &ResetArgs) -> Result<(), CliError> {
    let (core, target) = args.target.open()?;
    let progress = crate::progress::Progress::status(BUDGETING);
    let reset = core
        .reset_block_by(
            &target,
            args.if_digest.as_deref(),
            &Who::OsUser,
            args.over_budget.unchecked(),
        )
        .map_err(edit_error)?;
    drop(progress);
    let headline = match &reset.removed {
        Some(_) => format!(
            "reset `{}`: removed `{}`; the block inherits again",
            target.block,
            Escaped(reset.preview.path.as_str())
        ),
        None => format!(
            "nothing to reset: `{}` does not exist, so `{}` already inherits",
            Escaped(reset.preview.path.as_str()),
            target.block
        ),
    };
    if args.format == Format::Json {
        notices(&reset.preview, reset.unrecorded.as_deref());
        return out::print_document(&SavedReport::reset(
            target.block,
            &reset,
            Audience::Terminal,
        ));
    }
    report_change(&headline, &reset.preview, reset.unrecorded.as_deref())
}

fn check_text(budget: &Budget, lints: &[String]) -> String {
    let r = &budget.report;
    let mut out = String::new();
    let cap_from = match &budget.cap.file {
        Some(file) => format!("`prompts.max_tokens` in `{}`", Escaped(file.as_str())),
        None => "the default".to_owned(),
    };
    let _ = writeln!(out, "{}", tokens_line(budget));
    let _ = writeln!(out, "cap {} from {cap_from}", r.cap);
    let _ = writeln!(
        out,
        "\nTokens per block (the prefix adds headings and separators):"
    );
    for b in &r.blocks {
        let _ = writeln!(out, "  {:<20} {:>6}", b.block.wire_name(), b.tokens);
    }
    let _ = writeln!(out, "\nTokens per layer:");
    for l in &r.layers {
        let owner = if l.is_user_owned() {
            ""
        } else if l.is_administrators() {
            "  (set by the machine's administrator)"
        } else {
            "  (not user-editable)"
        };
        let _ = writeln!(
            out,
            "  {:<20} {:>6}{owner}",
            format!("{} ({})", l.layer, l.origin.wire_name()),
            l.tokens
        );
        for s in &l.sources {
            let _ = writeln!(
                out,
                "      {:>6}  {} {}",
                s.tokens,
                s.block,
                Escaped(&s.source().to_string())
            );
        }
    }
    if !lints.is_empty() {
        let _ = writeln!(out, "\nLints:");
        for lint in lints {
            let _ = writeln!(out, "  {}", Escaped(lint));
        }
    }
    if !budget.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings:");
        for w in &budget.warnings {
            let _ = writeln!(out, "  {}", Escaped(w));
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        if r.is_over() {
            format!("OVER the cap by {} tokens", r.over_by())
        } else {
            format!(
                "within the cap ({} tokens to spare)",
                r.cap - r.prefix_tokens
            )
        }
    );
    out
}

/// `vak prompts check`.
pub(crate) fn check(args: &CheckArgs) -> Result<(), CliError> {
    if args.all {
        return check_all(args);
    }
    let core = crate::prompts::synced_for_reading(Core::open(args.selectors.to_selectors()?)?);
    let resolved = core.resolve()?;
    let rules = core.scoped_rules();
    let budget = budget_of(&resolved).with_scoped_rules(&rules);
    let mut lints = lints_of(&resolved);
    lints.extend(vak_core::rule_lints(&core, &rules));
    // A set, so a file of thousands of lints cannot make this quadratic.
    let linted: std::collections::HashSet<&String> = lints.iter().collect();
    // What the resolution skipped or did not read (a refused file, a layer
    // where none is read) beside the budget's own: a check that leaves them
    // out would pass a prompt missing a guardrail without a word. Lints are
    // listed under their own key.
    let warnings: Vec<&String> = budget
        .warnings
        .iter()
        .chain(resolved.warnings.iter().filter(|w| !linted.contains(w)))
        .collect();
    let r = &budget.report;
    match args.format {
        Format::Json => print_json(&json!({
            "tokens": r.summary(),
            "scoped_rules_tokens": budget.scoped_rules_tokens,
            "encoding": r.encoding,
            "approximate": r.approximate,
            "cap_source": budget.cap.source,
            "cap_file": budget.cap.file,
            "over": r.is_over(),
            "blocks": r.blocks,
            "layers": r.layers,
            "offenders": r.offenders(),
            "lints": lints,
            "warnings": warnings,
        }))?,
        Format::Text => {
            // The budget's own are in the text; the resolution's go to
            // stderr, as `show` says them.
            for warning in resolved.warnings.iter().filter(|w| !linted.contains(w)) {
                out::notice("warning", warning);
            }
            out::print(&check_text(&budget, &lints))?;
        }
    }
    if r.is_over() {
        return Err(CliError::OverBudget(r.over_cap_check_message()));
    }
    Ok(())
}

/// `vak prompts check --all`: every chain of the project, one summary.
fn check_all(args: &CheckArgs) -> Result<(), CliError> {
    let core = crate::prompts::synced_for_reading(Core::open(args.selectors.to_selectors()?)?);
    let selectors = core.selectors();
    let checked = vak_core::check_all(selectors)?;
    let config = vak_core::shared_config(&selectors.home);
    let project = &selectors.project;
    let directories: Vec<String> = checked
        .directories
        .iter()
        .map(|d| {
            d.strip_prefix(project)
                .map_or_else(|_| d.to_string(), ToString::to_string)
        })
        .collect();
    match args.format {
        Format::Json => print_json(&json!({
            "project": project,
            "chains": checked.chains,
            "directories": directories,
            "over": !checked.over.is_empty(),
            "over_chains": checked.over.reports(),
            "not_budgeted": checked.left_out.note(),
            "unproven": checked.left_out.unproven(),
            "config": config,
        }))?,
        Format::Text => {
            if let Some(note) = checked.left_out.note() {
                out::notice("warning", &note);
            }
            let dirs = if directories.is_empty() {
                "no directory layers".to_owned()
            } else {
                format!(
                    "directory layers {}",
                    directories
                        .iter()
                        .map(|d| format!("`{}`", Escaped(d)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            if checked.over.is_empty() {
                out::println(&format!(
                    "checked {} chains of `{}` ({dirs}): every one is within its cap",
                    checked.chains,
                    Escaped(project.as_str())
                ))?;
            } else {
                out::println(&format!(
                    "checked {} chains of `{}` ({dirs})",
                    checked.chains,
                    Escaped(project.as_str())
                ))?;
            }
        }
    }
    if checked.over.is_empty() {
        Ok(())
    } else {
        Err(CliError::OverBudget(
            checked.over.summary(&config, "--over-budget to a save"),
        ))
    }
}

/// `--scope managed`: the managed layer is its administrator's, and vak
/// never writes it.
impl Scope {
    /// The layer a save writes to: `--scope managed` is refused, naming who
    /// owns that layer.
    pub(crate) fn writable(self) -> Result<CoreScope, CliError> {
        match self {
            Scope::Shared => Ok(CoreScope::Shared),
            Scope::Project => Ok(CoreScope::Project),
            Scope::Managed => Err(managed_scope()),
        }
    }
}

fn managed_scope() -> CliError {
    CliError::Usage(format!(
        "--scope managed does not exist: the managed layer (`{}`, or `${}` where that is absent) belongs to the machine's administrator, and vak never writes it; edit the files there as its owner, and sign them with `vak managed sign` when it lists `managed_keys`; use --scope shared or --scope project for your own layers",
        vak_core::prompts::SYSTEM_MANAGED_DIR,
        vak_core::prompts::MANAGED_DIR_ENV
    ))
}
