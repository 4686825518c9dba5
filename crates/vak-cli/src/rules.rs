//! `vak prompts rule set` and `vak prompts rule log`: a project's scoped
//! rule files, saved and versioned like block files. Parsing and rendering
//! only; the library's `Core::save_rule` owns the save.

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};
use serde_json::json;
use vak_core::history::Who;
use vak_core::prompts::{Escaped, Name, NameKind};
use vak_core::{Core, RuleSaveError, RuleTarget};

use crate::CliError;
use crate::edit::{NewTextArgs, OverBudgetArg, edit_error, tokens_line};
use crate::out::{self, print_json};
use crate::selectors::{Format, HomeArg, StoreArg};

/// `vak prompts rule …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum RuleCommand {
    /// Save a scoped rule file (`.vak/prompts/rules/NAME.md`) from a file
    /// or standard input, checked and versioned like a block file.
    Set(RuleSetArgs),
    /// The versions of one scoped rule file saved through vak.
    Log(RuleLogArgs),
}

/// Which rule file: its name, and the directory whose `.vak` holds it.
#[derive(Debug, Clone, Args)]
pub(crate) struct RuleTargetArgs {
    /// The rule's name: `payments` for `.vak/prompts/rules/payments.md`.
    pub(crate) name: String,
    /// The home's rules (`$VAK_HOME/.vak/prompts/rules/`, in every
    /// project's chains) or the project's.
    #[arg(long, value_enum, default_value_t = crate::edit::Scope::Project)]
    pub(crate) scope: crate::edit::Scope,
    /// The rule of the directory SUBDIR/.vak/prompts/rules/ (relative to the
    /// project root; --scope project only) instead of the root's.
    #[arg(long, value_name = "SUBDIR")]
    pub(crate) dir: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    /// The project root, exactly [default: found from the current directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) project: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

impl RuleTargetArgs {
    fn open(&self) -> Result<(Core, RuleTarget), CliError> {
        let name = Name::new(NameKind::Role, &self.name)
            .map_err(|e| CliError::Usage(format!("a rule name is {e}")))?;
        let scope = self.scope.writable()?;
        let core = crate::selectors::open_core(&self.home, self.project.as_ref(), &self.store)?;
        Ok((
            core,
            RuleTarget {
                scope,
                dir: self.dir.clone(),
                name,
            },
        ))
    }
}

/// `vak prompts rule set`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RuleSetArgs {
    #[command(flatten)]
    pub(crate) target: RuleTargetArgs,
    #[command(flatten)]
    pub(crate) over_budget: OverBudgetArg,
    #[command(flatten)]
    pub(crate) text: NewTextArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts rule log`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RuleLogArgs {
    #[command(flatten)]
    pub(crate) target: RuleTargetArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts rule …`
pub(crate) fn rule(command: &RuleCommand) -> Result<(), CliError> {
    match command {
        RuleCommand::Set(args) => set(args),
        RuleCommand::Log(args) => log(args),
    }
}

fn save_error(error: RuleSaveError) -> CliError {
    match error {
        RuleSaveError::Edit(edit) => edit_error(edit),
        RuleSaveError::BadRule { .. } | RuleSaveError::BadDirectory(_) => {
            CliError::Usage(error.to_string())
        }
        RuleSaveError::ProjectInHome(_) | RuleSaveError::ForbiddenCharacter { .. } => {
            CliError::Failed(error.to_string())
        }
    }
}

fn set(args: &RuleSetArgs) -> Result<(), CliError> {
    let text = args.text.read()?;
    let (core, target) = args.target.open()?;
    let saved = core
        .save_rule(
            &target,
            &text,
            args.text.if_digest(),
            &Who::OsUser,
            args.over_budget.unchecked(),
        )
        .map_err(save_error)?;
    if let Some(unrecorded) = &saved.unrecorded {
        out::notice("warning", unrecorded);
    }
    if args.format == Format::Json {
        return print_json(&json!({
            "path": saved.outcome.path,
            "digest": saved.outcome.digest,
            "previous": saved.outcome.previous,
            "recorded": saved.recorded,
            "tokens": saved.budget.report.summary(),
            "scoped_rules_tokens": saved.budget.scoped_rules_tokens,
        }));
    }
    let headline = if saved.recorded || saved.unrecorded.is_some() {
        format!(
            "saved `{}` (sha256 {})",
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest
        )
    } else {
        format!(
            "unchanged: `{}` already holds this text (sha256 {}); no version recorded",
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest
        )
    };
    out::println(&format!("{headline}\n{}", tokens_line(&saved.budget)))
}

fn log(args: &RuleLogArgs) -> Result<(), CliError> {
    let (core, target) = args.target.open()?;
    let key = target.key(&core);
    let versions = core
        .rule_versions(&target)
        .map_err(|e| CliError::Failed(e.to_string()))?;
    if args.format == Format::Json {
        return out::print_document(&vak_core::output::VersionsReport::of(&versions).target(&key));
    }
    crate::history::print_versions(&key, &versions, out::print)
}
