//! `vak prompts imported set` and `vak prompts imported log`: a file block
//! files import (`@parts/tone.md`), saved and versioned like a block file.
//! Parsing and rendering only; the library's `Core::save_imported` owns
//! the save.

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};
use serde_json::json;
use vak_core::history::Who;
use vak_core::prompts::Escaped;
use vak_core::{Core, ImportedSaveError, ImportedTarget};

use crate::CliError;
use crate::edit::{NewTextArgs, OverBudgetArg, edit_error};
use crate::out::{self, print_json};
use crate::selectors::{Format, HomeArg, StoreArg};

/// `vak prompts imported …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum ImportedCommand {
    /// Save a file block files import (`.vak/prompts/parts/tone.md`) from a
    /// file or standard input, checked on every chain its layer reaches and
    /// versioned like a block file.
    Set(ImportedSetArgs),
    /// The versions of one imported file saved through vak.
    Log(ImportedLogArgs),
}

/// Which imported file: the layer's prompts directory and the path below it.
#[derive(Debug, Clone, Args)]
pub(crate) struct ImportedTargetArgs {
    /// The prompts directory that holds the file.
    #[arg(long, value_enum)]
    pub(crate) scope: crate::edit::Scope,
    /// The file of SUBDIR/.vak/prompts/ (relative to the project root;
    /// --scope project only) instead of the root's.
    #[arg(long, value_name = "SUBDIR")]
    pub(crate) dir: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    /// The project root, exactly [default: found from the current directory].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) project: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// The file, relative to the prompts directory: `parts/tone.md`.
    #[arg(value_name = "FILE")]
    pub(crate) path: String,
}

impl ImportedTargetArgs {
    fn open(&self) -> Result<(Core, ImportedTarget), CliError> {
        let scope = self.scope.writable()?;
        let core = crate::selectors::open_core(&self.home, self.project.as_ref(), &self.store)?;
        Ok((
            core,
            ImportedTarget {
                scope,
                dir: self.dir.clone(),
                file: self.path.clone(),
            },
        ))
    }
}

/// `vak prompts imported set`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ImportedSetArgs {
    #[command(flatten)]
    pub(crate) target: ImportedTargetArgs,
    #[command(flatten)]
    pub(crate) over_budget: OverBudgetArg,
    #[command(flatten)]
    pub(crate) text: NewTextArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts imported log`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ImportedLogArgs {
    #[command(flatten)]
    pub(crate) target: ImportedTargetArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak prompts imported …`
pub(crate) fn imported(command: &ImportedCommand) -> Result<(), CliError> {
    match command {
        ImportedCommand::Set(args) => set(args),
        ImportedCommand::Log(args) => log(args),
    }
}

fn save_error(error: ImportedSaveError) -> CliError {
    match error {
        ImportedSaveError::Edit(edit) => edit_error(edit),
        ImportedSaveError::BadPath { .. }
        | ImportedSaveError::NotImported { .. }
        | ImportedSaveError::BadDirectory(_) => CliError::Usage(error.to_string()),
        ImportedSaveError::ForbiddenCharacter { .. } | ImportedSaveError::ImportRefused { .. } => {
            CliError::Failed(error.to_string())
        }
    }
}

fn set(args: &ImportedSetArgs) -> Result<(), CliError> {
    let text = args.text.read()?;
    let (core, target) = args.target.open()?;
    let saved = core
        .save_imported(
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
            "tokens": saved.tokens,
        }));
    }
    let headline = if saved.recorded || saved.unrecorded.is_some() {
        format!(
            "saved `{}` (sha256 {}, {} tokens)",
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest,
            saved.tokens
        )
    } else {
        format!(
            "unchanged: `{}` already holds this text (sha256 {}); no version recorded",
            Escaped(saved.outcome.path.as_str()),
            saved.outcome.digest
        )
    };
    out::println(&headline)
}

fn log(args: &ImportedLogArgs) -> Result<(), CliError> {
    let (core, target) = args.target.open()?;
    let key = target.key(&core);
    let versions = core
        .imported_versions(&target)
        .map_err(|e| CliError::Failed(e.to_string()))?;
    if args.format == Format::Json {
        return out::print_document(&vak_core::output::VersionsReport::of(&versions).target(&key));
    }
    crate::history::print_versions(&key, &versions, out::print)
}
