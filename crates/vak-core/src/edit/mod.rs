//! Editing one block of one layer, checked as the prompt would resolve
//! *after* the save, and the budget of a resolution.
//!
//! The CLI (`vak prompts set|edit|reset|check`) and the admin API call the
//! same functions, so a save refused in one is refused in the other with the
//! same words. The order of a save is fixed: validate the target, check the
//! digest the caller started from, resolve the chain with the candidate text
//! substituted, refuse if that pushes the prefix over the cap, and only then
//! write (atomically, re-checking the digest under a lock).
//!
//! Architecture invariant: nothing here composes or counts by itself; it
//! substitutes one contribution in a loaded chain and calls the composer and
//! the budget crate.

use camino::{Utf8Path, Utf8PathBuf};
use thiserror::Error;
use vak_prompt_blocks::{
    Block, Composition, Escaped, ForbiddenChar, GuardrailLint, Name, Origin, PromptLayer,
    Provenance, SurfaceKind, first_forbidden, parse_guardrails,
};
use vak_prompt_budget::{
    BudgetReport, CapSetting, EffectiveCap, ModelInfo, TokenMemo, default_model, effective_cap,
    lookup, under_ceiling,
};
use vak_prompt_compose::{ComposeMemo, ResolvedPrompt, TailContext};
use vak_prompt_loader::{
    LayerDirs, LoadRequest, LoadedChain, LoaderError, ReadRefusal, SaveError, SaveOutcome,
    Snapshot, current_digest, load_chain, read_safely, remove_checked, save_atomic,
};
use vak_prompt_trust::{DemoteReason, Trust, Verdict, prompt_verdict};

use crate::core::resolved;
use crate::history::{Action, VersionRecord, Who, keep_before_change, record_change, target_key};
use crate::over_cap::{OverCap, OverChain};
use crate::{Core, CoreError, Selectors};
use vak_prompt_history::HistoryError;

mod check;
mod plan;
mod trust;

pub(crate) use check::CheckInputs;
pub use plan::*;
pub use trust::*;

/// Which directory layer a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `$VAK_HOME/.vak/prompts/`: the user's own, always trusted.
    Shared,
    /// `<project>/.vak/prompts/`: project-owned, subject to trust.
    Project,
}

/// The sub-layer under a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubLayer {
    /// The scope's base directory (shared or project tier).
    Base,
    /// `surface/<kind>/` (surface tier).
    Surface(SurfaceKind),
    /// `agents/<role>/` (agent tier).
    Agent(Name),
    /// `<dir>/.vak/prompts/` of a directory below the project root, given
    /// relative to the root (`services/payments`): a directory sub-layer of
    /// the project tier. Project scope only.
    Directory(Utf8PathBuf),
}

/// One block file of one layer: what `set`, `edit` and `reset` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditTarget {
    /// Shared or project.
    pub scope: Scope,
    /// Base, surface or agent sub-layer.
    pub sub: SubLayer,
    /// The block; always one of [`Block::EDITABLE`].
    pub block: Block,
}

/// What a save, reset, revert or trust does when a chain it reaches would
/// be over the cap, or not every chain could be budgeted (see
/// [`ChainsLeftOut::unproven`]: a clone decides how many chains there are
/// and how large, so a chain not looked at could be one the change pushes
/// over). The cap is hard by default; `--over-budget` is the explicit
/// exception, the same on every command that checks the budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unchecked {
    /// Refuse with [`EditError::OverBudget`] (every chain over the cap,
    /// in one summary) or [`EditError::Unchecked`], writing nothing.
    #[default]
    Refuse,
    /// Make the change all the same (`--over-budget`, the admin API's
    /// `over_budget`), say what was over or not budgeted, and record in the
    /// version history that the change was made over the cap.
    Accept,
}

impl Unchecked {
    /// What `--over-budget` (the admin API's `over_budget`) asks for.
    pub fn from_over_budget(over_budget: bool) -> Unchecked {
        if over_budget {
            Unchecked::Accept
        } else {
            Unchecked::Refuse
        }
    }
}

/// Why an edit was refused. Each message names the block, file or layer.
#[derive(Debug, Error)]
pub enum EditError {
    /// The block is code-owned or runtime-derived.
    #[error(
        "`{0}` is not editable: it is {1}; editable blocks are identity, operating-rules, guardrails and surface-note"
    )]
    NotEditable(Block, &'static str),
    /// The chain could not be resolved.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The file could not be read, written or removed, or changed meanwhile.
    #[error(transparent)]
    Save(#[from] SaveError),
    /// The store's home side or this node's replica of it refused.
    #[error(transparent)]
    Home(#[from] crate::home::HomeError),
    /// The text could not be kept in, or read back from, the object store
    /// (nothing was written), or a revert named a version that is not kept.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The change would push the assembled prefix over the cap, on the
    /// chain named or on other chains the file takes part in. Every chain
    /// over is in `over`, and the message lists them all. Nothing was
    /// written.
    #[error(
        "refusing to {change} `{block}` (`{}`); nothing was changed or truncated. {}",
        Escaped(.path.as_str()),
        .over.summary(.config, crate::over_cap::OVER_BUDGET_HINT)
    )]
    OverBudget {
        /// `save` or `reset`.
        change: &'static str,
        /// The block.
        block: Block,
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// The budget of the largest chain over the cap.
        report: Box<BudgetReport>,
        /// That chain: `surface chat, agent `reviewer``.
        chain: Option<String>,
        /// Every chain over the cap, grouped and largest first.
        over: Box<OverCap>,
        /// The shared config file that sets the cap.
        config: Utf8PathBuf,
    },
    /// Not every chain the change reaches could be budgeted (the walk that
    /// lists directory layers stopped, or the work bound did; see
    /// [`ChainsLeftOut::unproven`]) and the caller did not accept that
    /// ([`Unchecked::Refuse`]). Nothing was written.
    #[error(
        "refusing to {change} `{block}` (`{}`): {why}; a chain not checked could be over the cap, so nothing was changed. Check the chains named, or pass --over-budget (in the admin API, `over_budget`) to make the change anyway",
        Escaped(.path.as_str())
    )]
    Unchecked {
        /// `save` or `reset`.
        change: &'static str,
        /// The block.
        block: Block,
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// What was not budgeted, and why.
        why: String,
    },
    /// A directory sub-layer was named for the shared scope, or with a path
    /// that is not a plain relative path below the project root where a
    /// layer is read.
    #[error(
        "`{}` is not a directory sub-layer: name a directory inside the project, relative to its root (project scope only; not in a hidden directory, `node_modules` or `target`, at most 8 deep, no control or invisible characters)",
        Escaped(.0.as_str())
    )]
    BadDirectory(Utf8PathBuf),
    /// A project-scope save or reset for a directory inside the vak home,
    /// which is never a project.
    #[error(
        "refusing to change `{}`: `{}` is the vak home or inside it, and the home is never a project; save to the shared scope (`--scope shared`, the API's `scope=shared`), or name a project outside the home",
        Escaped(.path.as_str()),
        Escaped(.project.as_str())
    )]
    ProjectInHome {
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// The directory given as the project.
        project: Utf8PathBuf,
    },
    /// A project-scope save or reset whose file is in the vak home (which
    /// lies inside the project), by its path or through a symlink.
    #[error(
        "refusing to {action} `{}`: it {} the vak home `{}`, which lies inside this project, and a project-scope change never touches the home's files; nothing was changed. Save to the shared scope (`--scope shared`, the API's `scope=shared`), or name a directory outside the home",
        Escaped(.path.as_str()),
        .leads_to.as_ref().map_or_else(|| "is in".to_owned(), |to| format!("leads through a symlink (to `{}`) into", Escaped(to.as_str()))),
        Escaped(.home.as_str())
    )]
    IntoHome {
        /// `write` or `remove`.
        action: &'static str,
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// The vak home.
        home: Utf8PathBuf,
        /// Where the path really leads, when a symlink takes it into the
        /// home (`None`: the path itself is in the home).
        leads_to: Option<Utf8PathBuf>,
    },
    /// The file to be replaced or removed holds what the history cannot
    /// keep (not UTF-8, over the size limit), so the change would lose it
    /// for good (DECISIONS §14: a change that cannot be recorded is not
    /// made).
    #[error(
        "refusing to change `{}`: it {why}, so its text cannot be kept in the history and the change would lose it; nothing was changed. Fix it or move it aside by hand, then try again",
        Escaped(.path.as_str())
    )]
    Unkeepable {
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// Why it cannot be kept.
        why: ReadRefusal,
    },
    /// The text imports a file that cannot be read.
    #[error("refusing to save `{block}` to `{}`: {error}; nothing was changed", Escaped(.path.as_str()))]
    ImportRefused {
        /// The block.
        block: Block,
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// The import refused, naming its line and why.
        error: Box<vak_prompt_loader::ImportError>,
    },
    /// The text holds a character no prompt may contain.
    #[error(
        "refusing to save `{block}` to `{}`: it contains {found}, a control or invisible formatting character no prompt may hold; remove it (line ends must be LF) and save again",
        Escaped(.path.as_str())
    )]
    ForbiddenCharacter {
        /// The block.
        block: Block,
        /// The file that was left unchanged.
        path: Utf8PathBuf,
        /// The character and where it is.
        found: ForbiddenChar,
    },
}

/// [`EditError::OverBudget`] when `over` holds a chain and the caller did
/// not accept going over the cap.
pub(crate) fn refuse_over(
    over: &OverCap,
    unchecked: Unchecked,
    change: &'static str,
    block: Block,
    path: &Utf8Path,
    home: &Utf8Path,
) -> Result<(), EditError> {
    match (over.largest(), unchecked) {
        (Some(largest), Unchecked::Refuse) => Err(EditError::OverBudget {
            change,
            block,
            path: path.to_owned(),
            report: Box::new(largest.report.clone()),
            chain: Some(largest.chain.clone()),
            over: Box::new(over.clone()),
            config: crate::over_cap::shared_config(home),
        }),
        _ => Ok(()),
    }
}

/// The warning a change made over the cap carries.
fn went_over_note(over: &OverCap) -> Option<String> {
    (!over.is_empty()).then(|| {
        format!(
            "made over the cap, as asked (recorded in the version history): {}",
            over.chains_text()
        )
    })
}

/// [`EditError::Unchecked`] when `left_out` cannot vouch for every chain
/// and the caller did not accept that.
pub(crate) fn refuse_unchecked(
    left_out: &ChainsLeftOut,
    unchecked: Unchecked,
    change: &'static str,
    block: Block,
    path: &Utf8Path,
) -> Result<(), EditError> {
    match (left_out.unproven(), unchecked) {
        (Some(why), Unchecked::Refuse) => Err(EditError::Unchecked {
            change,
            block,
            path: path.to_owned(),
            why,
        }),
        _ => Ok(()),
    }
}

impl EditTarget {
    /// A target for `block` in `scope`/`sub`.
    ///
    /// # Errors
    ///
    /// [`EditError::NotEditable`] for code-owned and runtime blocks.
    pub fn new(scope: Scope, sub: SubLayer, block: Block) -> Result<Self, EditError> {
        if !block.is_editable() {
            let why = match block.composition() {
                Composition::Fixed => "code-owned (the factual description of the tools)",
                Composition::RuntimeDerived => "derived by the runtime at every resolution",
                _ => "assembled from the agent tier's identity.md and operating-rules.md",
            };
            return Err(EditError::NotEditable(block, why));
        }
        if let SubLayer::Directory(dir) = &sub
            && (scope != Scope::Project || !vak_prompt_loader::is_layer_dir(dir))
        {
            return Err(EditError::BadDirectory(dir.clone()));
        }
        Ok(EditTarget { scope, sub, block })
    }

    /// The tier the file belongs to.
    pub fn layer(&self) -> PromptLayer {
        match (&self.sub, self.scope) {
            (SubLayer::Base, Scope::Shared) => PromptLayer::Shared,
            (SubLayer::Base | SubLayer::Directory(_), Scope::Project) => PromptLayer::Project,
            (SubLayer::Directory(_), Scope::Shared) => PromptLayer::Shared,
            (SubLayer::Surface(_), _) => PromptLayer::Surface,
            (SubLayer::Agent(_), _) => PromptLayer::Agent,
        }
    }

    /// Where the file physically lives, for trust.
    pub fn origin(&self) -> Origin {
        match self.scope {
            Scope::Shared => Origin::Home,
            Scope::Project => Origin::Project,
        }
    }

    /// The directory the file must stay inside: the home or the project.
    pub fn root<'a>(&self, selectors: &'a Selectors) -> &'a Utf8Path {
        match self.scope {
            Scope::Shared => &selectors.home,
            Scope::Project => &selectors.project,
        }
    }

    /// The file's path.
    pub fn path(&self, selectors: &Selectors) -> Utf8PathBuf {
        let (surface, agent) = match &self.sub {
            SubLayer::Base | SubLayer::Directory(_) => (selectors.surface, None),
            SubLayer::Surface(kind) => (*kind, None),
            SubLayer::Agent(role) => (selectors.surface, Some(role)),
        };
        let root = match &self.sub {
            SubLayer::Directory(dir) => self.root(selectors).join(dir),
            _ => self.root(selectors).to_owned(),
        };
        let dirs = LayerDirs::new(&root, surface, agent);
        let dir = match (&self.sub, dirs.agent) {
            (SubLayer::Base | SubLayer::Directory(_), _) => dirs.base,
            (SubLayer::Surface(_), _) => dirs.surface,
            (SubLayer::Agent(_), Some(agent)) => agent,
            (SubLayer::Agent(_), None) => dirs.base,
        };
        // Editable blocks always have a file name (checked in `new`).
        dir.join(self.block.file_name().unwrap_or("block.md"))
    }

    /// The provenance the loader gives this file.
    pub fn provenance(&self, selectors: &Selectors) -> Provenance {
        Provenance::new(self.layer(), self.origin(), self.path(selectors).as_str())
    }

    /// The selectors that resolve a chain this file takes part in: the
    /// target's surface or role selected, everything else as given.
    pub fn selectors(&self, mut base: Selectors) -> Selectors {
        match &self.sub {
            SubLayer::Base => {}
            SubLayer::Surface(kind) => base.surface = *kind,
            SubLayer::Agent(role) => base.agent = Some(role.clone()),
            SubLayer::Directory(dir) => {
                // The chain must hold the directory's layer; a working
                // directory already below it keeps its deeper layers.
                let target = base.project.join(dir);
                let keep = base
                    .workdir
                    .as_ref()
                    .is_some_and(|w| w.starts_with(&target));
                if !keep {
                    base.workdir = Some(target);
                }
            }
        }
        base
    }

    /// The block the file's text lands in: at the agent tier identity and
    /// operating rules become agent instructions.
    pub fn effective_block(&self) -> Block {
        if self.layer() == PromptLayer::Agent
            && matches!(self.block, Block::Identity | Block::OperatingRules)
        {
            Block::AgentInstructions
        } else {
            self.block
        }
    }
}

/// A resolution's budget: the counts, the cap in force and why, and
/// anything about the config the user should hear.
#[derive(Debug, Clone)]
pub struct Budget {
    /// Counts against the cap and the window.
    pub report: BudgetReport,
    /// The cap and where it came from.
    pub cap: EffectiveCap,
    /// Config values not applied (an untrusted raise, an unknown model).
    pub warnings: Vec<String>,
    /// The tokens of every scoped rule of the project, counted as if all
    /// were active at once and included in `report.prefix_tokens` (0 when
    /// none, or when this budget was made without them:
    /// [`Budget::with_scoped_rules`]).
    pub scoped_rules_tokens: usize,
}

/// The budget of `resolved`: model and cap from its merged config, counts
/// per block and layer from its contributors.
pub fn budget_of(resolved: &ResolvedPrompt) -> Budget {
    budget_with(resolved, &mut TokenMemo::new())
}

/// [`budget_of`], counting through `tokens`: a check that budgets many
/// chains counts each text they share once.
pub(crate) fn budget_with(resolved: &ResolvedPrompt, tokens: &mut TokenMemo) -> Budget {
    let mut warnings = Vec::new();
    let model: &'static ModelInfo = match &resolved.config.model {
        None => default_model(),
        Some(sourced) => match lookup(&sourced.value) {
            Ok(model) => model,
            Err(error) => {
                warnings.push(format!(
                    "{error} (in `{}`); budgeting for `{}`",
                    sourced.file(),
                    default_model().name
                ));
                default_model()
            }
        },
    };
    let last = |origin: Origin| {
        resolved
            .config
            .max_tokens
            .iter()
            .rev()
            .find(|s| s.origin == origin)
            .map(|s| CapSetting::new(s.value, s.file()))
    };
    let cap = effective_cap(
        last(Origin::Home).as_ref(),
        last(Origin::Project).as_ref(),
        resolved.trust == Trust::Trusted,
    );
    let cap = under_ceiling(cap, last(Origin::Managed).as_ref());
    warnings.extend(cap.warnings.iter().map(ToString::to_string));
    // No cap is above the model's window: a prefix that cannot be sent at
    // all is not "under the cap", whatever `prompts.max_tokens` says.
    let mut cap = cap;
    let window = usize::try_from(model.context_window).unwrap_or(usize::MAX);
    if cap.tokens > window {
        warnings.push(format!(
            "`prompts.max_tokens` {} is over the {window}-token context window of `{}`; the window is the cap",
            cap.tokens, model.name
        ));
        cap.tokens = window;
    }
    let mut report = BudgetReport::measure_with(
        model,
        cap.tokens,
        &resolved.prefix,
        &resolved.blocks,
        tokens,
    );
    if cap.source == vak_prompt_budget::CapSource::Managed {
        report.cap_ceiling = cap.file.clone();
    }
    Budget {
        report,
        cap,
        warnings,
        scoped_rules_tokens: 0,
    }
}

/// Refuse a resolution whose prefix is larger than its model's context
/// window: `session new`, `exec` and `deliver` never freeze or run one.
///
/// # Errors
///
/// [`CoreError::OverContextWindow`], naming the layers to shorten.
pub fn check_window(resolved: &ResolvedPrompt) -> Result<Budget, CoreError> {
    let budget = budget_of(resolved);
    if budget.report.fits_window() {
        Ok(budget)
    } else {
        Err(CoreError::OverContextWindow(
            budget.report.over_window_message(),
        ))
    }
}

/// Lints of a resolution the user should fix: empty identity, guardrails
/// repeated across layers (dropped), plus the per-file lints the composer
/// reported (prose before the first bullet, duplicates within a file).
pub fn lints_of(resolved: &ResolvedPrompt) -> Vec<String> {
    let mut out: Vec<String> = resolved
        .warnings
        .iter()
        .filter(|w| w.starts_with("`guardrails`") || w.starts_with("`surface-note`"))
        .cloned()
        .collect();
    if let Some(identity) = resolved.block(Block::Identity)
        && identity.text.trim().is_empty()
    {
        let from = identity
            .contributors
            .last()
            .map_or_else(|| "no layer".to_owned(), |c| c.provenance.to_string());
        out.push(format!(
            "`identity` is empty (from {from}): the agent is told nothing about who it is; delete the file to inherit, or write one"
        ));
    }
    if let Some(guardrails) = resolved.block(Block::Guardrails) {
        // Linear in the number of bullets: a hash of every key seen, first
        // occurrence kept (a clone must not make `check` quadratic).
        let mut seen: std::collections::HashMap<String, &Provenance> =
            std::collections::HashMap::new();
        for c in &guardrails.contributors {
            let mut in_this: Vec<String> = Vec::new();
            let (mut said, mut more) = (0usize, 0usize);
            for item in parse_guardrails(&c.text).items {
                let key = item.dedup_key();
                match seen.get(&key) {
                    // A project's copy reaches only this project: never
                    // advise removing the user's own, which reaches all.
                    Some(first)
                        if first.origin == Origin::Project
                            && c.provenance.origin != Origin::Project => {}
                    // A file of thousands of repeats is said in one line.
                    Some(_) if said == vak_prompt_compose::MAX_LINTS_PER_FILE => more += 1,
                    Some(first) => {
                        said += 1;
                        out.push(format!(
                            "guardrail `{}` in {} repeats one from {first} and is dropped; remove it from the narrower file",
                            Escaped(&key),
                            c.provenance
                        ));
                    }
                    None => in_this.push(key),
                }
            }
            if more > 0 {
                out.push(format!(
                    "and {more} more guardrails in {} repeat wider ones and are dropped",
                    c.provenance
                ));
            }
            for key in in_this {
                seen.entry(key).or_insert(&c.provenance);
            }
        }
    }
    out
}

/// Lints of one candidate text for `block`, shown when it is saved.
pub fn lints_of_text(block: Block, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    match block {
        Block::Identity if text.trim().is_empty() => out.push(
            "the new `identity` is empty: the agent will be told nothing about who it is (delete the file with `reset` to inherit instead)".to_owned(),
        ),
        // An empty text from an empty or closed standard input is easy to
        // save by accident; say so.
        _ if text.trim().is_empty() => out.push(format!(
            "the new `{block}` is empty: this layer now adds nothing to it (if the text came from a closed or empty standard input, `vak prompts revert` brings the last version back; `reset` deletes the file to inherit instead)"
        )),
        Block::Guardrails | Block::SurfaceNote => {
            for lint in parse_guardrails(text).lints {
                if block == Block::SurfaceNote
                    && matches!(lint, GuardrailLint::ProseBeforeFirstBullet { .. })
                {
                    continue;
                }
                out.push(format!("`{block}`: {}", lint.worded_for(block)));
            }
        }
        _ => {}
    }
    out
}

/// `text` would not apply from `target` under `trust`: the sentence that
/// says so, naming the block, the file and the way to change it.
fn not_applied_note(
    target: &EditTarget,
    selectors: &Selectors,
    trust: Trust,
    locked: bool,
) -> Option<String> {
    let provenance = target.provenance(selectors);
    if locked {
        return Some(format!(
            "the saved `{}` in `{}` is kept but {}",
            target.block,
            provenance.source,
            DemoteReason::LockedByManaged
        ));
    }
    match prompt_verdict(&provenance, target.effective_block(), trust) {
        Verdict::Keep => None,
        Verdict::Demote(reason) => Some(format!(
            "this project is untrusted: the saved `{}` in `{}` will not apply ({reason})",
            target.block, provenance.source
        )),
    }
}

/// What a save or reset would do, before anything is written.
#[derive(Debug, Clone)]
pub struct Preview {
    /// The file.
    pub path: Utf8PathBuf,
    /// The prompt as it resolves now.
    pub before: ResolvedPrompt,
    /// The prompt as it would resolve after the change.
    pub after: ResolvedPrompt,
    /// The budget after the change.
    pub budget: Budget,
    /// The budget now.
    pub budget_before: Budget,
    /// Lints of the new text.
    pub lints: Vec<String>,
    /// Set when the saved text will not apply (untrusted project).
    pub not_applied: Option<String>,
}

/// Whether a change from `before` to `after` must be refused: it leaves
/// the prefix over the cap and longer than it was (a change that shortens
/// an already-too-long prompt is always allowed).
pub fn pushes_over(before: &BudgetReport, after: &BudgetReport) -> bool {
    after.is_over() && after.prefix_tokens > before.prefix_tokens.max(after.cap)
}

impl Preview {
    /// Whether the change is refused for the budget: it leaves the prefix
    /// over the cap and does not shrink a prefix that was already over
    /// (shrinking must stay possible, or an over-cap prompt could never be
    /// fixed one file at a time).
    pub fn over_budget(&self) -> bool {
        pushes_over(&self.budget_before.report, &self.budget.report)
    }
}

/// What a save did.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The write.
    pub outcome: SaveOutcome,
    /// The checks it passed.
    pub preview: Preview,
    /// Set when the file was written but its version record or its
    /// contributed texts could not be kept: the sentence to warn with.
    pub unrecorded: Option<String>,
    /// Whether a version was recorded: `false` when the file already held
    /// the text (nothing written, no version) or when recording failed.
    pub recorded: bool,
    /// Whether the change was made with chains over the cap, as asked
    /// (`--over-budget`); the version record says so too.
    pub over_cap: bool,
}

/// What a reset did.
#[derive(Debug, Clone)]
pub struct Reset {
    /// The removed file's digest, `None` when there was no file.
    pub removed: Option<String>,
    /// The checks it passed.
    pub preview: Preview,
    /// As [`Saved::unrecorded`].
    pub unrecorded: Option<String>,
    /// Whether a version was recorded: `false` when there was no file to
    /// remove or when recording failed.
    pub recorded: bool,
    /// As [`Saved::over_cap`].
    pub over_cap: bool,
}

/// The text an editor should start from, and the digest to save against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditStart {
    /// The file's text, or the effective text it would inherit.
    pub text: String,
    /// The file's digest; [`vak_prompt_loader::ABSENT_DIGEST`] when absent.
    pub digest: String,
    /// Whether the file exists.
    pub exists: bool,
}

impl Core {
    /// A core whose selectors select `target`'s surface or role.
    pub fn for_target(selectors: Selectors, target: &EditTarget) -> Result<Self, CoreError> {
        Core::open(target.selectors(selectors))
    }

    /// The budget of the prompt as it resolves now, every scoped rule of
    /// the project counted as if active.
    pub fn budget(&self) -> Result<(ResolvedPrompt, Budget), CoreError> {
        let resolved = self.resolve()?;
        let budget = budget_of(&resolved).with_scoped_rules(&self.scoped_rules());
        Ok((resolved, budget))
    }

    /// Load the chain for an edit: a role that has no directory yet is
    /// loaded without its tier, since the save is what creates it.
    fn load_for(&self, target: &EditTarget) -> Result<LoadedChain, CoreError> {
        self.load_for_in(target, &mut Snapshot::new())
    }

    /// [`load_for`](Self::load_for), chosen from `snapshot`.
    fn load_for_in(
        &self,
        target: &EditTarget,
        snapshot: &mut Snapshot,
    ) -> Result<LoadedChain, CoreError> {
        match self.load_from(snapshot) {
            Err(CoreError::Loader(
                LoaderError::UnknownRole { .. } | LoaderError::RoleRefused { .. },
            )) if matches!(target.sub, SubLayer::Agent(_)) => Ok(snapshot.load(&LoadRequest {
                agent: None,
                ..self.selectors().load_request()
            })?),
            other => other,
        }
    }

    /// Resolve the prompt with `text` in `target`'s file (`None`: the file
    /// deleted), without writing anything. A directory sub-layer named
    /// through a symlink is previewed where it leads ([`Core::real_target`]).
    pub fn preview(&self, target: &EditTarget, text: Option<&str>) -> Result<Preview, EditError> {
        self.preview_in(target, text, &mut Snapshot::new())
    }

    /// [`preview`](Self::preview), its chain chosen from `snapshot`: a save
    /// previews the named chain from the snapshot its check then budgets
    /// every other chain from, so no file is read twice.
    fn preview_in(
        &self,
        target: &EditTarget,
        text: Option<&str>,
        snapshot: &mut Snapshot,
    ) -> Result<Preview, EditError> {
        let target = &self.real_target(target)?;
        let selectors = self.selectors();
        let trust = self.trust()?;
        let path = target.path(selectors);
        let chain = self.load_for_in(target, snapshot)?;
        let before = self.compose(&chain, trust, TailContext::now());
        let mut after_chain = chain;
        substitute_target(&mut after_chain, target, selectors, text);
        if let SubLayer::Agent(_) = target.sub
            && let Some(dir) = path.parent()
            && text.is_some()
            && !after_chain.role_dirs.iter().any(|d| d == dir)
        {
            after_chain.role_dirs.push(dir.to_owned());
        }
        let after = self.compose(&after_chain, trust, TailContext::now());
        let locked = after_chain
            .managed
            .as_ref()
            .is_some_and(|m| m.locks(target.effective_block()));
        // The worst case a turn can send: the prefix and every scoped rule
        // active at once, before and after alike.
        let rules = self.scoped_rules_in(snapshot);
        Ok(Preview {
            budget: budget_of(&after).with_scoped_rules(&rules),
            budget_before: budget_of(&before).with_scoped_rules(&rules),
            lints: text
                .map(|t| lints_of_text(target.block, t))
                .unwrap_or_default(),
            not_applied: text.and_then(|_| not_applied_note(target, selectors, trust, locked)),
            path,
            before,
            after,
        })
    }

    /// Save `text` as `target`'s file, unless the file changed since
    /// `if_digest` or the result would be over the cap.
    ///
    /// # Errors
    ///
    /// [`EditError::OverBudget`] with the offending layers (the file is left
    /// byte for byte as it was), [`EditError::Unchecked`] when not every
    /// chain it reaches could be budgeted, [`EditError::Save`] for a stale
    /// digest or a refused path.
    pub fn save_block(
        &self,
        target: &EditTarget,
        text: &str,
        if_digest: Option<&str>,
    ) -> Result<Saved, EditError> {
        self.save_block_by(
            target,
            text,
            if_digest,
            &Who::OsUser,
            Action::Save,
            Unchecked::Refuse,
        )
    }

    /// [`save_block`](Self::save_block), recorded in the version log as
    /// `action` by `who`. Before the write the file's current
    /// text and the new text are kept in the object store (a store that
    /// cannot keep them refuses the save, nothing written); after it, one
    /// version record is appended and the new resolution's contributed texts
    /// are kept. `unchecked` decides what happens when not every chain the
    /// file reaches could be budgeted.
    ///
    /// # Errors
    ///
    /// As [`save_block`](Self::save_block), and [`EditError::History`].
    pub fn save_block_by(
        &self,
        target: &EditTarget,
        text: &str,
        if_digest: Option<&str>,
        who: &Who,
        action: Action,
        unchecked: Unchecked,
    ) -> Result<Saved, EditError> {
        let target = &self.real_target(target)?;
        let path = target.path(self.selectors());
        self.stays_out_of_home(target, &path, "write")?;
        let _saving = crate::home::lock_saves(&self.selectors().home)?;
        crate::home::retried(
            || self.save_checked(target, &path, text, if_digest, (who, action), unchecked),
            home_error,
        )
    }

    /// One attempt of [`save_block_by`](Self::save_block_by), under the
    /// save lock: sync, check, write. A home side shared by several nodes
    /// can move between the check and the write; the write then refuses
    /// ([`crate::home::HomeError::KeptMoving`]) and the whole attempt is
    /// made again on the new state.
    fn save_checked(
        &self,
        target: &EditTarget,
        path: &Utf8Path,
        text: &str,
        if_digest: Option<&str>,
        (who, action): (&Who, Action),
        unchecked: Unchecked,
    ) -> Result<Saved, EditError> {
        let path = path.to_owned();
        // The budget runs on the replica: bring it up to the store first,
        // and write only if the store is still at that generation.
        let at = crate::home::sync_if_shared(&self.selectors().home, &**self.store(), false)?
            .map(|synced| synced.generation);
        if let Some(found) = first_forbidden(text) {
            return Err(EditError::ForbiddenCharacter {
                block: target.block,
                path,
                found,
            });
        }
        // A text whose import cannot be read would stop every resolution
        // it is in force in: refused before anything is written.
        let provenance = target.provenance(self.selectors());
        if let (
            _,
            vak_prompt_loader::Imports {
                refused: Some(error),
                ..
            },
        ) = vak_prompt_loader::expand_imports(&provenance, text)
        {
            return Err(EditError::ImportRefused {
                block: target.block,
                path,
                error,
            });
        }
        // Fail fast on a stale digest; `save_atomic` checks again under a lock.
        let current = current_digest(&path, target.root(self.selectors()))?;
        if let Some(expected) = if_digest
            && current.as_deref().unwrap_or("") != expected
        {
            return Err(EditError::Save(save_atomic_check_only(
                &path, expected, current,
            )));
        }
        let inputs = &mut CheckInputs::default();
        let mut preview = self.preview_in(target, Some(text), &mut inputs.snapshot)?;
        // The file already holds the text: nothing to write or record.
        if let Some(digest) = current.as_deref()
            && digest == vak_prompt_blocks::sha256_hex(text.as_bytes())
        {
            return Ok(Saved {
                outcome: SaveOutcome {
                    path,
                    digest: digest.to_owned(),
                    previous: Some(digest.to_owned()),
                },
                preview,
                unrecorded: None,
                recorded: false,
                over_cap: false,
            });
        }
        let (over, left_out) = self.over_cap_of(target, Some(text), &preview, inputs)?;
        let home = &self.selectors().home;
        refuse_over(&over, unchecked, "save", target.block, &path, home)?;
        refuse_unchecked(&left_out, unchecked, "save", target.block, &path)?;
        preview.budget.warnings.extend(left_out.note());
        preview.budget.warnings.extend(went_over_note(&over));
        self.keep_current(target, &path, &preview.before)?;
        self.store().history().put_object(text)?;
        let outcome = match crate::home::write_shared(
            &**self.store(),
            &self.selectors().home,
            &path,
            Some(text),
            if_digest,
            at,
            &who.label(),
        )? {
            Some(outcome) => outcome,
            None => save_atomic(&path, target.root(self.selectors()), text, if_digest)?,
        };
        let key = target_key(self, target);
        let mut record = VersionRecord::new(&key, target.block.wire_name(), action);
        record.before.clone_from(&outcome.previous);
        record.after = Some(outcome.digest.clone());
        record.tokens = Some(preview.budget.report.encoding.count(text));
        record.over_cap = !over.is_empty();
        let unrecorded = self.record(record, who, &preview.after);
        Ok(Saved {
            outcome,
            preview,
            recorded: unrecorded.is_none(),
            unrecorded,
            over_cap: !over.is_empty(),
        })
    }

    /// Save the version of `target` kept under `to` back, through every
    /// check of a save, recorded as a revert.
    ///
    /// # Errors
    ///
    /// [`EditError::History`] when `to` is not a version `target`'s log
    /// records, is not kept or was altered; then as
    /// [`save_block`](Self::save_block).
    pub fn revert_block(
        &self,
        target: &EditTarget,
        to: &str,
        if_digest: Option<&str>,
        who: &Who,
        unchecked: Unchecked,
    ) -> Result<Saved, EditError> {
        let target = &self.real_target(target)?;
        let records = crate::history::versions(self, target)?.records;
        let text = crate::history::revert_text(
            self.store().history(),
            &records,
            target.path(self.selectors()).as_str(),
            to,
        )?;
        self.save_block_by(target, &text, if_digest, who, Action::Revert, unchecked)
    }

    /// Check the version log can take the change's record; keep the file's
    /// text as it is now, so the first change's "before" resolves, and the
    /// contributed texts of the resolution before the change. A file that
    /// cannot be read is left to the save's own checks.
    fn keep_current(
        &self,
        target: &EditTarget,
        path: &Utf8Path,
        before: &ResolvedPrompt,
    ) -> Result<(), EditError> {
        let current = match read_safely(path, target.root(self.selectors())) {
            Ok(current) => current,
            Err(why @ (ReadRefusal::NotUtf8 { .. } | ReadRefusal::TooLarge { .. })) => {
                return Err(EditError::Unkeepable {
                    path: path.to_owned(),
                    why,
                });
            }
            // A link, a FIFO, an unreadable file: the write refuses it.
            Err(_) => None,
        };
        // What resolves before the change: a session frozen on it resolves.
        keep_before_change(
            self.store().history(),
            current.as_deref().as_slice(),
            before,
        )?;
        Ok(())
    }

    /// Append `record` and keep `after`'s contributed texts; a failure is
    /// returned as the sentence to warn with (the file is already written).
    fn record(&self, record: VersionRecord, who: &Who, after: &ResolvedPrompt) -> Option<String> {
        record_change(self.store().history(), record, who, after)
    }

    /// Delete `target`'s file so the block inherits again, with the same
    /// digest and budget checks as a save (inheriting can grow the prefix).
    ///
    /// # Errors
    ///
    /// As [`save_block`](Self::save_block).
    pub fn reset_block(
        &self,
        target: &EditTarget,
        if_digest: Option<&str>,
    ) -> Result<Reset, EditError> {
        self.reset_block_by(target, if_digest, &Who::OsUser, Unchecked::Refuse)
    }

    /// [`reset_block`](Self::reset_block), recorded as a reset by `who`;
    /// the removed text is kept first. `unchecked` as for
    /// [`save_block_by`](Self::save_block_by).
    ///
    /// # Errors
    ///
    /// As [`reset_block`](Self::reset_block), and [`EditError::History`].
    pub fn reset_block_by(
        &self,
        target: &EditTarget,
        if_digest: Option<&str>,
        who: &Who,
        unchecked: Unchecked,
    ) -> Result<Reset, EditError> {
        let target = &self.real_target(target)?;
        let path = target.path(self.selectors());
        self.stays_out_of_home(target, &path, "remove")?;
        let _saving = crate::home::lock_saves(&self.selectors().home)?;
        crate::home::retried(
            || self.reset_checked(target, &path, if_digest, who, unchecked),
            home_error,
        )
    }

    /// One attempt of [`reset_block_by`](Self::reset_block_by), as
    /// [`save_checked`](Self::save_checked) is of a save.
    fn reset_checked(
        &self,
        target: &EditTarget,
        path: &Utf8Path,
        if_digest: Option<&str>,
        who: &Who,
        unchecked: Unchecked,
    ) -> Result<Reset, EditError> {
        let path = path.to_owned();
        let at = crate::home::sync_if_shared(&self.selectors().home, &**self.store(), false)?
            .map(|synced| synced.generation);
        let inputs = &mut CheckInputs::default();
        let mut preview = self.preview_in(target, None, &mut inputs.snapshot)?;
        let (over, left_out) = self.over_cap_of(target, None, &preview, inputs)?;
        let home = &self.selectors().home;
        refuse_over(&over, unchecked, "reset", target.block, &path, home)?;
        refuse_unchecked(&left_out, unchecked, "reset", target.block, &path)?;
        preview.budget.warnings.extend(left_out.note());
        preview.budget.warnings.extend(went_over_note(&over));
        // Confined to the home or the project: a `.vak/prompts` (or any
        // sub-layer directory) symlinked elsewhere deletes nothing there.
        self.keep_current(target, &path, &preview.before)?;
        let removed = match crate::home::write_shared(
            &**self.store(),
            &self.selectors().home,
            &path,
            None,
            if_digest,
            at,
            &who.label(),
        )? {
            Some(outcome) => outcome.previous,
            None => remove_checked(&path, target.root(self.selectors()), if_digest)?,
        };
        let unrecorded = removed.as_ref().and_then(|digest| {
            let key = target_key(self, target);
            let mut record = VersionRecord::new(&key, target.block.wire_name(), Action::Reset);
            record.before = Some(digest.clone());
            record.over_cap = !over.is_empty();
            self.record(record, who, &preview.after)
        });
        Ok(Reset {
            recorded: removed.is_some() && unrecorded.is_none(),
            removed,
            preview,
            unrecorded,
            over_cap: !over.is_empty(),
        })
    }

    /// `target` as the loader reads it. A directory sub-layer named
    /// through a symlink (`--dir LINK`, the admin's `dir=LINK`) is the
    /// directory the link leads to, relative to the project root: that is
    /// the directory whose chain the loader reads (a working directory is
    /// resolved the same way, and the walk that lists directory layers does
    /// not follow links), and the layers below it are the ones its file
    /// reaches, so it is saved, budgeted, previewed and kept in the history
    /// there. Refused ([`EditError::BadDirectory`]) when that is where no
    /// layer is read (a hidden directory, `node_modules`, `target`, too
    /// deep; see [`vak_prompt_loader::is_layer_dir`]), so a save is never
    /// reported for a file that would not apply, and when it is inside a
    /// nested repository. A link leading out of the project is left as
    /// named, for the save's own confinement to refuse, naming it; every
    /// other target is returned as it is.
    ///
    /// # Errors
    ///
    /// [`EditError::BadDirectory`], [`CoreError::NestedRepository`].
    pub fn real_target(&self, target: &EditTarget) -> Result<EditTarget, EditError> {
        let SubLayer::Directory(dir) = &target.sub else {
            return Ok(target.clone());
        };
        let project = &self.selectors().project;
        let (Ok(real_project), Some((_, real))) =
            (vak_fs::canonical(project), resolved(&project.join(dir)))
        else {
            return Ok(target.clone());
        };
        // Judged where the path leads: `docs/new` through a link into a
        // vendored clone lands in that clone.
        if let (Some(real_project), Some(real)) = (
            Utf8Path::from_path(&real_project),
            Utf8Path::from_path(&real),
        ) && let Some(nested) = vak_prompt_loader::nested_repository(real_project, real)
        {
            return Err(CoreError::NestedRepository {
                project: project.clone(),
                workdir: project.join(dir),
                nested,
            }
            .into());
        }
        match real.strip_prefix(&real_project) {
            Ok(rel) => match Utf8Path::from_path(rel) {
                Some(rel) if vak_prompt_loader::is_layer_dir(rel) => Ok(EditTarget {
                    sub: SubLayer::Directory(rel.to_owned()),
                    ..target.clone()
                }),
                _ => Err(EditError::BadDirectory(dir.clone())),
            },
            Err(_) => Ok(target.clone()),
        }
    }

    /// A project that contains the vak home (the project is `~`, the home
    /// `~/vak-home`) can reach the shared layer through a symlink that never
    /// leaves the project, which the loader's confinement allows; a
    /// project-scope save or reset must still never touch a file of the home.
    fn stays_out_of_home(
        &self,
        target: &EditTarget,
        path: &Utf8Path,
        action: &'static str,
    ) -> Result<(), EditError> {
        let selectors = self.selectors();
        if target.scope != Scope::Project {
            return Ok(());
        }
        // A file's trust is that of the project it really lives in: nothing
        // is saved or removed through a link into a nested repository.
        vak_prompt_loader::refuse_nested_link(path, &selectors.project, action)?;
        let (Ok(home), Ok(project)) = (
            vak_fs::canonical(&selectors.home),
            vak_fs::canonical(&selectors.project),
        ) else {
            return Ok(());
        };
        // Inside the home there is no project: a file saved
        // there would never be read as one.
        if project.starts_with(&home) {
            return Err(EditError::ProjectInHome {
                path: path.to_owned(),
                project: selectors.project.clone(),
            });
        }
        if !home.starts_with(&project) {
            return Ok(());
        }
        // The file itself when it exists, else its nearest existing directory.
        match resolved(path) {
            Some((real, _)) if real.starts_with(&home) => Err(EditError::IntoHome {
                action,
                path: path.to_owned(),
                home: selectors.home.clone(),
                leads_to: (!path.starts_with(&selectors.home) && !path.starts_with(&home))
                    .then(|| Utf8PathBuf::from_path_buf(real).ok())
                    .flatten(),
            }),
            _ => Ok(()),
        }
    }

    /// What an editor should open for `target`: the file, or when there is
    /// none the effective text (narrowest-wins blocks) or nothing
    /// (accumulating blocks, whose wider items are kept anyway).
    pub fn edit_start(&self, target: &EditTarget) -> Result<EditStart, EditError> {
        let target = &self.real_target(target)?;
        let path = target.path(self.selectors());
        let root = target.root(self.selectors());
        let digest = current_digest(&path, root)?;
        if digest.is_some() {
            let text = read_safely(&path, root)
                .map_err(|refusal| {
                    EditError::Save(SaveError::Io {
                        action: "read",
                        path: path.clone(),
                        source: std::io::Error::other(refusal.to_string()),
                    })
                })?
                .unwrap_or_default();
            return Ok(EditStart {
                digest: digest.unwrap_or_default(),
                text,
                exists: true,
            });
        }
        let text = if target.block.composition() == Composition::NarrowestWins
            && target.effective_block() == target.block
        {
            let chain = self.load_for(target)?;
            let resolved = self.compose(&chain, self.trust()?, TailContext::now());
            resolved
                .block(target.block)
                .map(|b| {
                    let mut t = b.text.to_string();
                    if !t.is_empty() {
                        t.push('\n');
                    }
                    t
                })
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(EditStart {
            text,
            digest: String::new(),
            exists: false,
        })
    }
}

/// Put `text` in place of `target`'s file in a loaded chain (`None`: the
/// file removed), as the loader would read the directory afterwards. A
/// directory's interop file (`AGENTS.md`) is never a save's target and
/// stays as it is: it is appended to the operating rules whatever the
/// directory's `operating-rules.md` says.
fn substitute_target(
    chain: &mut LoadedChain,
    target: &EditTarget,
    selectors: &Selectors,
    text: Option<&str>,
) {
    chain.substitute(target.block, &target.provenance(selectors), text);
}

/// How a refusal names a chain: `surface chat, agent reviewer`.
pub fn describe_chain(selectors: &Selectors, trust: Trust) -> String {
    let mut out = format!("surface `{}`", selectors.surface);
    if let Some(bot) = &selectors.bot {
        out.push_str(&format!(", bot `{bot}`"));
    }
    if let Some(chat) = &selectors.chat {
        out.push_str(&format!(", chat `{chat}`"));
    }
    if let Some(agent) = &selectors.agent {
        out.push_str(&format!(", agent `{agent}`"));
    }
    if let Some(dir) = selectors.subdir() {
        out.push_str(&format!(", directory `{}`", Escaped(dir.as_str())));
    }
    if trust == Trust::Trusted {
        out.push_str(", project trusted");
    }
    out
}

/// The [`crate::home::HomeError`] inside an edit's error, for
/// [`crate::home::retried`].
pub(crate) fn home_error(error: &mut EditError) -> Option<&mut crate::home::HomeError> {
    match error {
        EditError::Home(home) => Some(home),
        _ => None,
    }
}

fn save_atomic_check_only(path: &Utf8Path, expected: &str, actual: Option<String>) -> SaveError {
    if expected.is_empty()
        || (expected.len() == 64
            && expected
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    {
        SaveError::Stale {
            path: path.to_owned(),
            expected: expected.to_owned(),
            actual,
        }
    } else {
        SaveError::BadDigest(expected.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use vak_prompt_blocks::NameKind;

    fn env() -> (tempfile::TempDir, Selectors) {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        fs::create_dir_all(root.join("home")).unwrap();
        fs::create_dir_all(root.join("proj")).unwrap();
        (dir, Selectors::new(root.join("home"), root.join("proj")))
    }

    /// A home whose shared config sets the cap, for tests that need one.
    fn cap_home(s: &Selectors, max_tokens: usize) {
        fs::create_dir_all(s.home.join(".vak")).unwrap();
        fs::write(
            s.home.join(".vak/config.toml"),
            format!("[prompts]\nmax_tokens = {max_tokens}\n"),
        )
        .unwrap();
    }

    fn target(scope: Scope, sub: SubLayer, block: Block) -> EditTarget {
        EditTarget::new(scope, sub, block).unwrap()
    }

    #[test]
    fn a_plan_stops_counting_at_its_work_bound_and_says_how_many_it_left() {
        use std::ops::ControlFlow;
        let (_keep, s) = env();
        for i in 0..8 {
            fs::create_dir_all(s.project.join(format!(".vak/prompts/agents/r{i}"))).unwrap();
        }
        let mut all = 0;
        let flow = ChainPlan::for_trust(&s).visit(|_| {
            all += 1;
            ControlFlow::<(), Option<Visited>>::Continue(Some(Visited { tokens: 1, work: 1 }))
        });
        let ControlFlow::Continue(left_out) = flow else {
            panic!("stopped");
        };
        assert_eq!(left_out.over_work, 0);
        // Each chain costing a third of the bound: three are counted,
        // however little their prefixes weigh.
        let mut counted = 0;
        let flow = ChainPlan::for_trust(&s).visit(|_| {
            counted += 1;
            ControlFlow::<(), Option<Visited>>::Continue(Some(Visited {
                tokens: 1,
                work: MAX_PLAN_WORK / 3 + 1,
            }))
        });
        let ControlFlow::Continue(left_out) = flow else {
            panic!("stopped");
        };
        assert_eq!(counted, 3);
        assert_eq!(left_out.over_work, all - 3);
        assert!(left_out.note().is_some_and(|n| n.contains("not at all")));
        // A plan visited after another spent the check's work (a shared
        // save's next trusted project) visits nothing and counts it all.
        let mut work = Work {
            spent: MAX_PLAN_WORK,
            ..Work::default()
        };
        let mut visited = 0;
        let flow = ChainPlan::for_trust(&s).visit_within(&mut work, |_| {
            visited += 1;
            ControlFlow::<(), Option<Visited>>::Continue(None)
        });
        let ControlFlow::Continue(left_out) = flow else {
            panic!("stopped");
        };
        assert_eq!(visited, 0);
        assert_eq!(left_out.over_work, all);
        assert!(left_out.unproven().is_some());
    }

    #[test]
    fn what_several_plans_left_out_is_said_once_naming_a_few_projects() {
        let mut left_out = ChainsLeftOut {
            gateway: 2,
            unlisted_in: vec![Utf8PathBuf::from("/p")],
            ..ChainsLeftOut::default()
        };
        left_out.merge(ChainsLeftOut {
            gateway: 2,
            over_work: 7,
            projects: (0..5)
                .map(|i| Utf8PathBuf::from(format!("/t{i}")))
                .collect(),
            ..ChainsLeftOut::default()
        });
        assert_eq!(left_out.gateway, 2, "one home, said once");
        let note = left_out.unproven().unwrap();
        for said in [
            "2 gateway bots or chats",
            "7 chains not at all",
            "5 other trusted projects not at all (`/t0`, `/t1`, `/t2`, 2 more)",
            "directories) in `/p`",
        ] {
            assert!(note.contains(said), "{said}: {note}");
        }
        // Gateway entries past the bound are the user's own: said, but no
        // reason to refuse.
        let gateway_only = ChainsLeftOut {
            gateway: 1,
            ..ChainsLeftOut::default()
        };
        assert!(gateway_only.note().is_some() && gateway_only.unproven().is_none());
    }

    #[test]
    fn a_chains_work_counts_the_repeats_the_prefix_drops_and_what_was_read() {
        let (_keep, s) = env();
        fs::create_dir_all(s.project.join(".vak/prompts")).unwrap();
        let repeated = "- Never do x.\n".repeat(4000);
        fs::write(s.project.join(".vak/prompts/guardrails.md"), &repeated).unwrap();
        // Shadowed by the project's identity below: read, never counted.
        fs::create_dir_all(s.home.join(".vak/prompts")).unwrap();
        fs::write(s.home.join(".vak/prompts/identity.md"), "x".repeat(40_000)).unwrap();
        fs::write(
            s.project.join(".vak/prompts/identity.md"),
            "You are Kite.\n",
        )
        .unwrap();
        let core = Core::open(s).unwrap();
        let chain = core.load().unwrap();
        let budget = budget_of(&core.compose(&chain, Trust::Trusted, TailContext::now()));
        let encoding = budget.report.encoding;
        // The prefix holds the bullet once and not the shadowed identity...
        assert!(
            budget.report.prefix_tokens < 1000,
            "{}",
            budget.report.prefix_tokens
        );
        // ...while the work holds every repeat and every byte read.
        let work = chain_work(&chain, [&budget.report]);
        assert!(
            work >= encoding.count(&repeated) + 10_000 + budget.report.prefix_tokens,
            "{work}"
        );
        assert_eq!(
            chain_work(&chain, [&budget.report, &budget.report]) - work,
            budget.report.tokens_counted()
        );
    }

    #[test]
    fn a_plan_weighs_every_role_on_every_surface_and_every_chat_with_prompts() {
        use std::ops::ControlFlow;
        let (_keep, s) = env();
        for i in 0..70 {
            fs::create_dir_all(s.project.join(format!(".vak/prompts/agents/r{i:02}"))).unwrap();
        }
        fs::create_dir_all(s.project.join(".vak/prompts/agents/zz")).unwrap();
        // One directory layer, so there is something to cross roles with.
        fs::create_dir_all(s.project.join(".git")).unwrap();
        fs::create_dir_all(s.project.join("sub/.vak/prompts")).unwrap();
        fs::write(s.project.join("sub/.vak/prompts/identity.md"), "Sub.\n").unwrap();
        fs::create_dir_all(s.home.join(".vak/gateway")).unwrap();
        let chats: String = (0..300)
            .map(|i| format!(r#""c{i}": {{}}"#))
            .chain(std::iter::once(
                r#""late": {"prompts": {"guardrails": "- x"}}"#.to_owned(),
            ))
            .collect::<Vec<_>>()
            .join(", ");
        fs::write(
            s.home.join(".vak/gateway/allowlist.json"),
            format!(r#"{{"bot": {{{chats}}}}}"#),
        )
        .unwrap();
        fs::write(s.home.join(".vak/gateway/bots.json"), r#"{"bot": {}}"#).unwrap();
        // `zz` weighs nothing but on the chat surface, where it is longest;
        // every other role weighs a little everywhere.
        let weight = |c: &Selectors| match c.agent.as_ref().map(Name::as_str) {
            Some("zz") if c.surface == SurfaceKind::Chat && c.bot.is_none() => 5000,
            Some("zz") => 0,
            Some(_) => 10,
            None => 1,
        };
        let sub = Some(s.project.join("sub"));
        // Trusting crosses every role with the layer.
        let mut crossed = 0;
        let flow = ChainPlan::for_trust(&s).visit(|c| {
            let c = c.selectors;
            crossed += usize::from(c.agent.is_some() && c.workdir == sub);
            ControlFlow::<(), Option<Visited>>::Continue(Some(Visited {
                tokens: weight(c),
                work: 1,
            }))
        });
        let ControlFlow::Continue(left_out) = flow else {
            panic!("stopped");
        };
        assert_eq!(left_out.note(), None, "{left_out:?}");
        assert_eq!(crossed, 71 * SurfaceKind::ALL.len());
        // A save crosses every role with the layer too, not the heaviest
        // few: one code path for both.
        let save = ChainPlan::for_change(
            &s,
            &target(Scope::Shared, SubLayer::Base, Block::Guardrails),
        );
        let mut visited: Vec<Selectors> = Vec::new();
        let flow = save.visit(|c| {
            let c = c.selectors;
            visited.push(c.clone());
            ControlFlow::<(), Option<Visited>>::Continue(Some(Visited {
                tokens: weight(c),
                work: 1,
            }))
        });
        let ControlFlow::Continue(left_out) = flow else {
            panic!("stopped");
        };
        assert_eq!(left_out.note(), None, "{left_out:?}");
        let crossed = visited
            .iter()
            .filter(|c| c.agent.is_some() && c.workdir == sub && c.bot.is_none())
            .count();
        assert_eq!(crossed, 71 * SurfaceKind::ALL.len());
        let roles: Vec<String> = std::iter::once("zz".to_owned())
            .chain((0..70).map(|i| format!("r{i:02}")))
            .collect();
        for role in &roles {
            for surface in SurfaceKind::ALL {
                assert!(
                    visited.iter().any(|c| c.surface == surface
                        && c.agent.as_ref().map(Name::as_str) == Some(role.as_str())),
                    "{role} on {surface}"
                );
            }
        }
        // The heaviest role is crossed with the layer first.
        let first_crossed = visited
            .iter()
            .find(|c| c.agent.is_some() && c.workdir == sub)
            .and_then(|c| c.agent.as_ref().map(Name::as_str));
        assert_eq!(first_crossed, Some("zz"));
        // The chat with its own prompts is measured; one without, through
        // its bot.
        let chat = |name: &str| {
            visited
                .iter()
                .any(|c| c.chat.as_ref().map(Name::as_str) == Some(name))
        };
        assert!(chat("late"));
        assert!(!chat("c0"));
        assert!(visited.iter().any(|c| c.bot.is_some() && c.chat.is_none()));
        // Each chain once.
        let unique: std::collections::HashSet<&Selectors> = visited.iter().collect();
        assert_eq!(unique.len(), visited.len());
    }

    #[test]
    fn only_editable_blocks_are_targets() {
        for block in Block::ALL {
            let t = EditTarget::new(Scope::Shared, SubLayer::Base, block);
            assert_eq!(t.is_ok(), block.is_editable(), "{block}");
        }
        let msg = EditTarget::new(Scope::Project, SubLayer::Base, Block::CapabilityContract)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`capability-contract` is not editable"),
            "{msg}"
        );
    }

    #[test]
    fn paths_per_scope_and_sub_layer() {
        let (_keep, s) = env();
        let role = Name::new(NameKind::Role, "reviewer").unwrap();
        let cases = [
            (
                Scope::Shared,
                SubLayer::Base,
                "home/.vak/prompts/identity.md",
                PromptLayer::Shared,
            ),
            (
                Scope::Project,
                SubLayer::Base,
                "proj/.vak/prompts/identity.md",
                PromptLayer::Project,
            ),
            (
                Scope::Shared,
                SubLayer::Surface(SurfaceKind::Chat),
                "home/.vak/prompts/surface/chat/identity.md",
                PromptLayer::Surface,
            ),
            (
                Scope::Project,
                SubLayer::Agent(role),
                "proj/.vak/prompts/agents/reviewer/identity.md",
                PromptLayer::Agent,
            ),
        ];
        for (scope, sub, want, layer) in cases {
            let t = target(scope, sub, Block::Identity);
            assert!(t.path(&s).as_str().ends_with(want), "{}", t.path(&s));
            assert_eq!(t.layer(), layer);
        }
    }

    #[test]
    fn reset_save_and_edit_through_a_prompt_dir_symlinked_into_the_home_touch_nothing() {
        // The admin API's DELETE and PUT run these same functions.
        let (_keep, s) = env();
        let shared = s.home.join(".vak/prompts/guardrails.md");
        fs::create_dir_all(shared.parent().unwrap()).unwrap();
        fs::write(&shared, "- shared\n").unwrap();
        fs::create_dir_all(s.project.join(".vak")).unwrap();
        std::os::unix::fs::symlink(s.home.join(".vak/prompts"), s.project.join(".vak/prompts"))
            .unwrap();
        let core = Core::open(s.clone()).unwrap();
        let t = target(Scope::Project, SubLayer::Base, Block::Guardrails);
        let err = core.reset_block(&t, None).unwrap_err().to_string();
        assert!(
            err.contains("refusing to remove") && err.contains(s.home.as_str()),
            "{err}"
        );
        let err = core
            .save_block(&t, "- mine\n", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("leads outside"), "{err}");
        assert!(core.edit_start(&t).is_err());
        assert_eq!(fs::read_to_string(&shared).unwrap(), "- shared\n");
    }

    #[test]
    fn save_then_reset_returns_the_inherited_text() {
        let (_keep, s) = env();
        let core = Core::open(s.clone()).unwrap();
        let inherited = core
            .resolve()
            .unwrap()
            .block(Block::Identity)
            .unwrap()
            .text
            .clone();
        let t = target(Scope::Shared, SubLayer::Base, Block::Identity);
        let saved = core.save_block(&t, "You are Kite.", None).unwrap();
        assert_eq!(
            core.resolve().unwrap().block(Block::Identity).unwrap().text,
            "You are Kite."
        );
        assert_eq!(
            saved.preview.after.block(Block::Identity).unwrap().text,
            "You are Kite."
        );
        let reset = core.reset_block(&t, Some(&saved.outcome.digest)).unwrap();
        assert_eq!(
            reset.removed.as_deref(),
            Some(saved.outcome.digest.as_str())
        );
        assert_eq!(
            core.resolve().unwrap().block(Block::Identity).unwrap().text,
            inherited
        );
    }

    #[test]
    fn over_cap_is_refused_before_writing_and_names_user_layers() {
        let (_keep, s) = env();
        cap_home(&s, 1500);
        fs::create_dir_all(s.home.join(".vak/prompts")).unwrap();
        fs::write(
            s.home.join(".vak/prompts/guardrails.md"),
            "- Keep secrets secret.\n",
        )
        .unwrap();
        let core = Core::open(s.clone()).unwrap();
        let t = target(Scope::Shared, SubLayer::Base, Block::Identity);
        let long = "You are a very verbose agent. ".repeat(400);
        let err = core.save_block(&t, &long, None).unwrap_err();
        let EditError::OverBudget { report, path, .. } = &err else {
            panic!("{err}")
        };
        assert!(!path.exists(), "file written despite refusal");
        let offenders: Vec<_> = report.offenders().iter().map(|l| l.layer).collect();
        assert_eq!(offenders, [PromptLayer::Shared]);
        let msg = err.to_string();
        assert!(msg.contains("identity.md"), "{msg}");
        assert!(msg.contains("guardrails.md"), "{msg}");
    }

    #[test]
    fn shrinking_an_already_over_prompt_is_allowed() {
        let (_keep, s) = env();
        cap_home(&s, 1500);
        fs::create_dir_all(s.home.join(".vak/prompts")).unwrap();
        fs::write(
            s.home.join(".vak/prompts/identity.md"),
            "You are verbose. ".repeat(600),
        )
        .unwrap();
        let core = Core::open(s.clone()).unwrap();
        assert!(core.budget().unwrap().1.report.is_over());
        let t = target(Scope::Shared, SubLayer::Base, Block::Identity);
        assert!(matches!(
            core.save_block(&t, &"You are verbose. ".repeat(700), None),
            Err(EditError::OverBudget { .. })
        ));
        core.save_block(&t, &"You are verbose. ".repeat(500), None)
            .unwrap();
        core.save_block(&t, "You are brief.", None).unwrap();
        assert!(!core.budget().unwrap().1.report.is_over());
    }

    #[test]
    fn stale_digest_is_refused_and_absent_digest_means_no_file() {
        let (_keep, s) = env();
        let core = Core::open(s.clone()).unwrap();
        let t = target(Scope::Shared, SubLayer::Base, Block::OperatingRules);
        let first = core.save_block(&t, "Be brief.", Some("")).unwrap();
        let err = core.save_block(&t, "Be long.", Some("")).unwrap_err();
        assert!(
            matches!(err, EditError::Save(SaveError::Stale { .. })),
            "{err}"
        );
        core.save_block(&t, "Be kind.", Some(&first.outcome.digest))
            .unwrap();
        let err = core
            .save_block(&t, "Be late.", Some(&first.outcome.digest))
            .unwrap_err();
        assert!(
            err.to_string().contains("changed since you read it"),
            "{err}"
        );
    }

    #[test]
    fn untrusted_project_save_is_written_but_says_it_will_not_apply() {
        let (_keep, s) = env();
        let core = Core::open(s.clone()).unwrap();
        let identity = target(Scope::Project, SubLayer::Base, Block::Identity);
        let saved = core.save_block(&identity, "You are Kite.", None).unwrap();
        let note = saved.preview.not_applied.unwrap();
        assert!(
            note.contains("untrusted") && note.contains("`identity`"),
            "{note}"
        );
        assert!(saved.outcome.path.exists());
        let guardrails = target(Scope::Project, SubLayer::Base, Block::Guardrails);
        let saved = core
            .save_block(&guardrails, "- Stay in the repo.", None)
            .unwrap();
        assert_eq!(saved.preview.not_applied, None);
    }

    #[test]
    fn first_file_of_a_new_role_is_budgeted_with_its_tier() {
        let (_keep, s) = env();
        let role = Name::new(NameKind::Role, "reviewer").unwrap();
        let t = target(Scope::Shared, SubLayer::Agent(role), Block::Identity);
        let core = Core::for_target(s, &t).unwrap();
        let saved = core
            .save_block(&t, "Review for correctness first.", None)
            .unwrap();
        let agent = saved.preview.after.block(Block::AgentInstructions).unwrap();
        assert_eq!(agent.text, "Review for correctness first.");
        assert!(
            core.resolve()
                .unwrap()
                .prefix
                .contains("Review for correctness first.")
        );
    }

    #[test]
    fn lints_flag_empty_identity_and_cross_layer_duplicates() {
        let (_keep, s) = env();
        fs::create_dir_all(s.home.join(".vak/prompts")).unwrap();
        fs::create_dir_all(s.project.join(".vak/prompts")).unwrap();
        fs::write(s.home.join(".vak/prompts/identity.md"), "").unwrap();
        fs::write(
            s.home.join(".vak/prompts/guardrails.md"),
            "- Never push to main.\n",
        )
        .unwrap();
        fs::write(
            s.project.join(".vak/prompts/guardrails.md"),
            "Prose first.\n- Never  push to main.\n",
        )
        .unwrap();
        let lints = lints_of(&Core::open(s).unwrap().resolve().unwrap());
        assert!(
            lints.iter().any(|l| l.contains("`identity` is empty")),
            "{lints:?}"
        );
        assert!(
            lints.iter().any(|l| l.contains("repeats one from")),
            "{lints:?}"
        );
        assert!(
            lints.iter().any(|l| l.contains("before the first bullet")),
            "{lints:?}"
        );
        assert!(
            lints_of_text(Block::Guardrails, "- a\n- a\n")
                .iter()
                .any(|l| l.contains("duplicate"))
        );
        assert!(!lints_of_text(Block::Identity, "").is_empty());
    }
}
