//! Saving a file block files import (`@parts/tone.md` in an identity.md):
//! the one save of such a file, checked on every chain its layer reaches
//! and versioned like a block file.

use std::cell::RefCell;

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::{Block, Escaped};
use vak_prompt_loader::Snapshot;

use crate::edit::{EditError, EditTarget, Scope, SubLayer, refuse_over, refuse_unchecked};
use crate::{Core, CoreError};

/// Which imported file: the layer whose `.vak/prompts/` holds it, and its
/// path below that directory (`parts/tone.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedTarget {
    /// The home's prompts directory, or the project's.
    pub scope: Scope,
    /// For the project scope, the directory sub-layer (relative to the
    /// project root) whose `.vak/prompts/` holds the file.
    pub dir: Option<Utf8PathBuf>,
    /// The file, relative to that prompts directory.
    pub file: String,
}

impl ImportedTarget {
    /// The prompts directory the file lies in (and an import of it is
    /// confined to).
    pub fn prompts_dir(&self, selectors: &crate::Selectors) -> Utf8PathBuf {
        let base = match (self.scope, &self.dir) {
            (Scope::Shared, _) => selectors.home.clone(),
            (Scope::Project, Some(dir)) => selectors.project.join(dir),
            (Scope::Project, None) => selectors.project.clone(),
        };
        vak_prompt_loader::prompt_dir(&base)
    }

    /// The file's path.
    pub fn path(&self, selectors: &crate::Selectors) -> Utf8PathBuf {
        self.prompts_dir(selectors).join(&self.file)
    }

    /// The name the version log keeps its versions under, as a block
    /// file's is named ([`crate::history::target_key`]).
    pub fn key(&self, core: &Core) -> String {
        let selectors = core.selectors();
        crate::history::file_key(core, &self.path(selectors), self.root(selectors))
    }

    /// The directory a write is confined to: the home, or the project.
    fn root<'a>(&self, selectors: &'a crate::Selectors) -> &'a Utf8Path {
        match self.scope {
            Scope::Shared => &selectors.home,
            Scope::Project => &selectors.project,
        }
    }

    /// The chains a block file of the same prompts directory reaches: the
    /// file may be imported by any of them (a superset when it lies under
    /// `surface/` or `agents/`).
    fn reach(&self) -> Result<EditTarget, EditError> {
        let sub = match &self.dir {
            Some(dir) => SubLayer::Directory(dir.clone()),
            None => SubLayer::Base,
        };
        EditTarget::new(self.scope, sub, Block::Identity)
    }
}

/// Why an imported file's save was refused. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImportedSaveError {
    /// The path is not one an import may name.
    #[error(
        "`{}` is not a file a block file may import: it {}",
        Escaped(.file.as_str()),
        .why.explain()
    )]
    BadPath {
        /// The path given.
        file: String,
        /// Which rule it breaks.
        why: vak_prompt_blocks::TargetRefusal,
    },
    /// The path is a block file or a scoped rule, which have saves of
    /// their own.
    #[error(
        "`{}` is {what}, not an imported file; save it with `{command}`",
        Escaped(.file.as_str())
    )]
    NotImported {
        /// The path given.
        file: String,
        /// `a block file` or `a scoped rule`.
        what: &'static str,
        /// The command that saves it.
        command: &'static str,
    },
    /// A directory sub-layer named for the shared scope, or one that is
    /// not read as a layer.
    #[error(
        "`{}` is not a directory sub-layer: name a directory inside the project, relative to its root (project scope only)",
        Escaped(.0.as_str())
    )]
    BadDirectory(Utf8PathBuf),
    /// The text holds a character no prompt may hold.
    #[error(
        "refusing to save `{}`: it holds {found}, which no prompt text may hold; nothing was written",
        Escaped(.path.as_str())
    )]
    ForbiddenCharacter {
        /// The file left unchanged.
        path: Utf8PathBuf,
        /// The first such character.
        found: vak_prompt_blocks::ForbiddenChar,
    },
    /// The new text imports what cannot be read (missing, outside the
    /// prompts directory, a cycle, too deep).
    #[error(
        "refusing to save `{}`: {}; nothing was written",
        Escaped(.path.as_str()),
        .why.join("; and ")
    )]
    ImportRefused {
        /// The file left unchanged.
        path: Utf8PathBuf,
        /// Each refusal, naming the file and line.
        why: Vec<String>,
    },
    /// Over the cap, not every chain checked, the chain unresolved, or the
    /// write or its history failed: as a block file's save says it.
    #[error(transparent)]
    Edit(#[from] EditError),
}

impl From<CoreError> for ImportedSaveError {
    fn from(error: CoreError) -> Self {
        ImportedSaveError::Edit(EditError::Core(error))
    }
}

impl From<vak_prompt_loader::SaveError> for ImportedSaveError {
    fn from(error: vak_prompt_loader::SaveError) -> Self {
        ImportedSaveError::Edit(EditError::Save(error))
    }
}

impl From<crate::history::HistoryError> for ImportedSaveError {
    fn from(error: crate::history::HistoryError) -> Self {
        ImportedSaveError::Edit(EditError::History(error))
    }
}

/// What an imported file's save did.
#[derive(Debug, Clone)]
pub struct ImportedSaved {
    /// The write (`previous` is the digest before).
    pub outcome: vak_prompt_loader::SaveOutcome,
    /// Whether a version was recorded (`false`: the file already held the
    /// text, nothing written).
    pub recorded: bool,
    /// Why the version could not be recorded, when it could not.
    pub unrecorded: Option<String>,
    /// The tokens of the text saved.
    pub tokens: usize,
}

/// Whether `file` (below a prompts directory) is a block file, whose save
/// is `vak prompts set`, or a scoped rule, whose save is `rule set`.
fn other_kind(file: &str) -> Option<(&'static str, &'static str)> {
    let parts: Vec<&str> = file.split('/').collect();
    let layer_file = |name: &str| vak_session::LAYER_FILES.contains(&name);
    match parts.as_slice() {
        [name] if layer_file(name) => Some(("a block file", "vak prompts set")),
        ["surface" | "agents", _, name] if layer_file(name) => {
            Some(("a block file", "vak prompts set"))
        }
        ["rules", _] => Some(("a scoped rule", "vak prompts rule set")),
        _ => None,
    }
}

impl Core {
    /// Save `text` as the imported file `target`, unless the file changed
    /// since `if_digest`, the text imports what cannot be read, or a chain
    /// the file's layer reaches would go over the cap (`unchecked` decides
    /// what a check that could not reach every chain does). Both texts are
    /// kept and one version is recorded, as for a block file.
    ///
    /// # Errors
    ///
    /// [`ImportedSaveError`], naming the file; nothing is written.
    pub fn save_imported(
        &self,
        target: &ImportedTarget,
        text: &str,
        if_digest: Option<&str>,
        who: &crate::history::Who,
        unchecked: crate::Unchecked,
    ) -> Result<ImportedSaved, ImportedSaveError> {
        vak_prompt_blocks::check_target(&target.file).map_err(|why| {
            ImportedSaveError::BadPath {
                file: target.file.clone(),
                why,
            }
        })?;
        if let Some((what, command)) = other_kind(&target.file) {
            return Err(ImportedSaveError::NotImported {
                file: target.file.clone(),
                what,
                command,
            });
        }
        if let Some(dir) = &target.dir
            && (target.scope == Scope::Shared || !vak_prompt_loader::is_layer_dir(dir))
        {
            return Err(ImportedSaveError::BadDirectory(dir.clone()));
        }
        let selectors = self.selectors();
        let path = target.path(selectors);
        if let Some(found) = vak_prompt_blocks::first_forbidden(text) {
            return Err(ImportedSaveError::ForbiddenCharacter { path, found });
        }
        let reach = target.reach()?;
        if target.scope == Scope::Project && self.project_is_home() {
            return Err(EditError::ProjectInHome {
                path,
                project: selectors.project.clone(),
            }
            .into());
        }
        let root = target.root(selectors);
        if target.scope == Scope::Project {
            vak_prompt_loader::refuse_nested_link(&path, root, "write")?;
        }
        let _saving = crate::home::lock_saves(&selectors.home).map_err(EditError::Home)?;
        let current = vak_prompt_loader::current_digest(&path, root)?;
        let tokens = vak_prompt_budget::Encoding::default().count(text);
        if let Some(outcome) =
            vak_prompt_loader::SaveOutcome::unchanged(path.clone(), current.as_deref(), text)
        {
            return Ok(ImportedSaved {
                outcome,
                recorded: false,
                unrecorded: None,
                tokens,
            });
        }
        // Every chain is composed as it is and again from a snapshot that
        // reads the new text at the file's path.
        let after = RefCell::new(Snapshot::with_text(
            &path,
            &target.prompts_dir(selectors),
            text,
        ));
        let trust = self.trust()?;
        let now = vak_prompt_compose::TailContext::now;
        let here = self.load_from(&mut after.borrow_mut())?;
        let resolved = self.compose(&here, trust, now());
        // Refused only for what this text breaks: an import refused now
        // that was not before (the file's own imports). A save that fixes
        // a missing or broken file must go through.
        let was = self.compose(&self.load_from(&mut Snapshot::new())?, trust, now());
        let broken: Vec<String> = resolved
            .refused_imports
            .iter()
            .filter(|why| !was.refused_imports.contains(why))
            .cloned()
            .collect();
        if !broken.is_empty() {
            return Err(ImportedSaveError::ImportRefused { path, why: broken });
        }
        let block = includer_block(&here, &path);
        let cap = crate::budget_of(&resolved).report.cap;
        let (over, left_out) = self.check_imported(&reach, &path, &after, cap)?;
        refuse_over(&over, unchecked, "save", block, &path, &selectors.home)?;
        refuse_unchecked(&left_out, unchecked, "save", block, &path)?;
        let mut record = crate::history::VersionRecord::new(
            &target.key(self),
            block.wire_name(),
            crate::history::Action::Save,
        );
        record.tokens = Some(tokens);
        record.over_cap = !over.is_empty();
        let (outcome, unrecorded) = crate::history::write_versioned(
            self,
            (&path, root),
            (text, if_digest),
            record,
            who,
            &resolved,
        )?;
        Ok(ImportedSaved {
            outcome,
            recorded: unrecorded.is_none(),
            unrecorded,
            tokens,
        })
    }

    /// The versions of the imported file `target` saved through vak,
    /// oldest first.
    ///
    /// # Errors
    ///
    /// The version log could not be read.
    pub fn imported_versions(
        &self,
        target: &ImportedTarget,
    ) -> Result<vak_prompt_history::Versions, crate::history::HistoryError> {
        self.store().history().versions_of(&target.key(self))
    }
}

/// The block of the first contribution of `chain` that imports `path`: what
/// a refusal names (`identity`, for a persona file an identity.md
/// imports); identity when no chain of this one imports it yet.
fn includer_block(chain: &vak_prompt_loader::LoadedChain, path: &Utf8Path) -> Block {
    chain
        .contributions
        .iter()
        .find(|c| {
            c.imports
                .files
                .iter()
                .any(|f| f.provenance.source.path() == Some(path))
        })
        .map_or(Block::Identity, |c| c.block)
}
