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

/// What trusting a project does to the budget, on every chain it reaches.
#[derive(Debug, Clone)]
pub struct TrustBudget {
    /// The named chain, untrusted.
    pub before: Budget,
    /// The named chain, trusted.
    pub after: Budget,
    /// Every chain trusting would push over the cap, named, each with its
    /// budget once trusted; its `cap` is the one in force before trust
    /// when the project's config would raise it.
    pub over: OverCap,
    /// The chains that were not budgeted (see [`ChainsLeftOut`]).
    pub left_out: ChainsLeftOut,
}

impl TrustBudget {
    /// Why this budget cannot vouch for every chain trusting reaches, when
    /// it cannot: the walk that lists directory layers stopped at its bound,
    /// or chains were not counted at all for the work bound. A clone decides
    /// how many directories and how large its roles are, so either could
    /// hide a layer over the cap; `vak trust` refuses as for one over the
    /// cap, unless told `--over-budget`.
    pub fn unproven(&self) -> Option<String> {
        self.left_out.unproven()
    }
}

/// Whether trusting pushes a chain over the cap, judged by the cap in force
/// before trust as well as the one after: a trusted project's config may
/// raise the cap, but trusting it must not be how its layers get room the
/// user never gave (the raised cap applies once trusted, to later saves).
fn trust_pushes_over(before: &BudgetReport, after: &BudgetReport) -> Option<BudgetReport> {
    if pushes_over(before, after) {
        return Some(after.clone());
    }
    (after.cap > before.cap && after.prefix_tokens > before.prefix_tokens.max(before.cap)).then(
        || BudgetReport {
            cap: before.cap,
            ..after.clone()
        },
    )
}

/// What [`untrust`] did.
#[derive(Debug, Clone)]
pub struct UntrustOutcome {
    /// The trust store's key for the directory asked about.
    pub key: String,
    /// Each trust store entry removed, with the budget of the prompt it
    /// resolves to now when that is over the cap.
    pub removed: Vec<(Utf8PathBuf, Option<BudgetReport>)>,
}

/// Stop trusting `project` in `home`'s trust store. Never
/// refused: it is how a user takes a clone's instructions back. But it can
/// bring back a longer shared identity the project had replaced, so each
/// project it removes is resolved again, and a prompt now over the cap is
/// returned for the caller to warn with, rather than learned from the next
/// session's refusal.
///
/// # Errors
///
/// The trust store cannot be read or written.
pub fn untrust(home: &Utf8Path, project: &Utf8Path) -> Result<UntrustOutcome, CoreError> {
    let mut store = vak_prompt_trust::TrustStore::load(home)?;
    let done = store.untrust(project)?;
    let removed = done
        .removed
        .into_iter()
        .map(|removed| {
            let removed = Utf8PathBuf::from(removed);
            let over = Core::open(Selectors::new(home.to_owned(), removed.clone()))
                .and_then(|core| core.resolve())
                .map(|resolved| budget_of(&resolved).report)
                .ok()
                .filter(BudgetReport::is_over);
            (removed, over)
        })
        .collect();
    Ok(UntrustOutcome {
        key: done.key,
        removed,
    })
}

/// The budget before and after trusting `selectors.project`, on the chain
/// named and on every chain trusting it reaches (see
/// [`ChainPlan::for_trust`]), with every chain trusting pushes over the
/// cap.
///
/// # Errors
///
/// When the named chain cannot be loaded at all.
pub fn trust_budget(selectors: &Selectors) -> Result<TrustBudget, CoreError> {
    use std::ops::ControlFlow;
    let mut budget: Option<TrustBudget> = None;
    let left_out = walk_trust_chains(selectors, |step| {
        let budget = budget.get_or_insert_with(|| TrustBudget {
            before: step.before,
            after: step.after,
            over: OverCap::default(),
            left_out: ChainsLeftOut::default(),
        });
        if let Some((chain, report)) = step.over {
            budget.over.push(OverChain::here(chain, *report));
        }
        ControlFlow::<()>::Continue(())
    })?;
    let mut budget = budget
        .ok_or_else(|| CoreError::Loader(LoaderError::ProjectMissing(selectors.project.clone())))?;
    budget.left_out = left_out;
    Ok(budget)
}

/// One chain trusting a project reaches, composed untrusted and trusted
/// and budgeted both ways.
#[derive(Debug)]
pub struct TrustStep<'a> {
    /// The chain.
    pub core: &'a Core,
    /// Composed as the project is now taken, untrusted.
    pub untrusted: ResolvedPrompt,
    /// Composed as if it were trusted.
    pub trusted: ResolvedPrompt,
    /// The budget untrusted.
    pub before: Budget,
    /// The budget trusted.
    pub after: Budget,
    /// When trusting pushes this chain over the cap: the chain, named, and
    /// its budget trusted.
    pub over: Option<(String, Box<BudgetReport>)>,
}

/// Compose and budget every chain trusting `selectors.project` reaches
/// ([`ChainPlan::for_trust`]), the named one first, and hand each to
/// `visit` until it answers `Break`. The trusted prefix's tokens rank the
/// chains to cross. A chain other than the named one that cannot be loaded
/// (a role directory removed meanwhile) is passed over. Returns what was
/// left out (nothing, once `visit` stopped).
///
/// # Errors
///
/// When the named chain cannot be loaded at all.
pub fn walk_trust_chains(
    selectors: &Selectors,
    mut visit: impl FnMut(TrustStep<'_>) -> std::ops::ControlFlow<()>,
) -> Result<ChainsLeftOut, CoreError> {
    use std::ops::ControlFlow;
    let base = Selectors {
        agent: None,
        ..selectors.clone()
    };
    let plan = ChainPlan::for_trust(&base);
    // Bounded by the cap in force before trust (the project's config
    // cannot buy its layers more work than the user's cap gives).
    let cap = Core::open(selectors.clone())?.budget()?.1.report.cap;
    let mut named = true;
    let opened = Core::open(plan.base().clone())?.pinned();
    let CheckInputs {
        mut snapshot,
        mut tokens,
        mut compose,
        ..
    } = CheckInputs::default();
    // Every chain's budget covers every scoped rule of the project.
    let rules = crate::rules::RuleTexts::of(&opened.scoped_rules_in(&mut snapshot));
    let flow = plan.visit_within(&mut Work::for_cap(cap), |chain| {
        let first = std::mem::take(&mut named);
        let core = opened.reselect(chain.clone());
        let loaded = match core.load_from(&mut snapshot) {
            Ok(loaded) => loaded,
            Err(error) if first => return ControlFlow::Break(Err(error)),
            Err(_) => return ControlFlow::Continue(None),
        };
        let untrusted =
            core.compose_with(&loaded, Trust::Untrusted, TailContext::now(), &mut compose);
        let trusted = core.compose_with(&loaded, Trust::Trusted, TailContext::now(), &mut compose);
        let before = budget_with(&untrusted, &mut tokens).with_rule_texts(&rules, &mut tokens);
        let after = budget_with(&trusted, &mut tokens).with_rule_texts(&rules, &mut tokens);
        let visited = Visited {
            tokens: after.report.prefix_tokens,
            work: chain_work(&loaded, [&before.report, &after.report]),
        };
        let over = trust_pushes_over(&before.report, &after.report).map(|report| {
            (
                describe_chain(core.selectors(), Trust::Untrusted),
                Box::new(report),
            )
        });
        let step = TrustStep {
            core: &core,
            untrusted,
            trusted,
            before,
            after,
            over,
        };
        match visit(step) {
            ControlFlow::Continue(()) => ControlFlow::Continue(Some(visited)),
            ControlFlow::Break(()) => ControlFlow::Break(Ok(())),
        }
    });
    match flow {
        ControlFlow::Continue(left_out) => Ok(left_out),
        ControlFlow::Break(Ok(())) => Ok(ChainsLeftOut::default()),
        ControlFlow::Break(Err(error)) => Err(error),
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
            provenance.source.as_deref().unwrap_or("?"),
            DemoteReason::LockedByManaged
        ));
    }
    match prompt_verdict(&provenance, target.effective_block(), trust) {
        Verdict::Keep => None,
        Verdict::Demote(reason) => Some(format!(
            "this project is untrusted: the saved `{}` in `{}` will not apply ({reason})",
            target.block,
            provenance.source.as_deref().unwrap_or("?")
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
                error: Box::new(error),
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
            (std::fs::canonicalize(project), resolved(&project.join(dir)))
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
            std::fs::canonicalize(&selectors.home),
            std::fs::canonicalize(&selectors.project),
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
                    let mut t = b.text.clone();
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

impl Core {
    /// Every chain a change to `target` takes part in (DECISIONS §12,
    /// [`ChainPlan::for_change`]): each surface kind (or the one
    /// sub-layer's), with no role and with every role that has a directory
    /// (or the one role's), each directory layer, each gateway bot and
    /// chat, and for a project file in an untrusted project also as if
    /// trusted, since `vak trust` would apply it. A file of the home (the
    /// shared scope) reaches every project, so it is checked the same way
    /// in every other trusted project that is still there too (a trusted
    /// project whose directory is gone is passed over with a warning), all
    /// under one work bound ([`WORK_PER_CAP_TOKEN`] times `cap`). Adds
    /// every chain the change would push over the cap to `over` (never
    /// stopping at the first), and says which chains were not budgeted
    /// (see [`ChainsLeftOut`]); the caller refuses either unless told
    /// otherwise ([`Unchecked`]).
    /// The budget check a save of `text` as `target`'s file (`None`: a
    /// reset) makes before it writes, without writing: the preview of the
    /// named chain, then every chain over the cap after the change and the
    /// chains left out of the check. What `vak prompts set` waits for, and
    /// what the `budget` benchmark measures.
    ///
    /// # Errors
    ///
    /// As [`preview`](Self::preview), and [`EditError::Core`] when the
    /// trust store or a chain cannot be read.
    pub fn check_change(
        &self,
        target: &EditTarget,
        text: Option<&str>,
    ) -> Result<(Preview, OverCap, ChainsLeftOut), EditError> {
        let target = &self.real_target(target)?;
        let inputs = &mut CheckInputs::default();
        let preview = self.preview_in(target, text, &mut inputs.snapshot)?;
        let (over, left_out) = self.over_cap_of(target, text, &preview, inputs)?;
        Ok((preview, over, left_out))
    }

    /// Every chain a change to `target` (`None`: its file removed) puts
    /// over the cap: the chain `preview` composed, then every other chain
    /// the change reaches; and the chains left out of the check.
    fn over_cap_of(
        &self,
        target: &EditTarget,
        text: Option<&str>,
        preview: &Preview,
        inputs: &mut CheckInputs,
    ) -> Result<(OverCap, ChainsLeftOut), EditError> {
        let mut over = OverCap::default();
        if preview.over_budget() {
            // Named as `check_plan` names the same chain.
            over.push(OverChain::here(
                describe_chain(self.selectors(), Trust::Untrusted),
                preview.budget.report.clone(),
            ));
        }
        let cap = preview.budget_before.report.cap;
        let left_out = self.check_reach(target, text, cap, (&mut over, inputs))?;
        Ok((over, left_out))
    }

    /// Every chain a new text of the imported file `path` (in the prompts
    /// directory of `reach`'s layer) puts over the cap, and what the check
    /// left out: the chains a block file of that layer reaches, each loaded
    /// as it is and again from `after`, a snapshot that reads the new text
    /// there; for a file of the home, in every trusted project too. `cap`
    /// bounds the work, as a save's own chain has it.
    pub(crate) fn check_imported(
        &self,
        reach: &EditTarget,
        path: &Utf8Path,
        after: &std::cell::RefCell<Snapshot>,
        cap: usize,
    ) -> Result<(OverCap, ChainsLeftOut), EditError> {
        let mut work = Work::for_cap(cap);
        let mut over = OverCap::default();
        let inputs = &mut CheckInputs::default();
        let trust = self.trust()?;
        let mut trusts = vec![trust];
        if reach.scope == Scope::Project && trust == Trust::Untrusted {
            trusts.push(Trust::Trusted);
        }
        let entries = &mut None;
        let change = Change::Imported { path, after };
        let plan = ChainPlan::for_change_in(self.selectors(), reach, entries);
        let mut left_out = self.check_plan(
            &plan,
            &change,
            None,
            &trusts,
            None,
            (&mut work, &mut over, inputs),
        )?;
        if reach.scope == Scope::Shared {
            for project in self.other_trusted_projects()? {
                if work.is_spent() {
                    left_out.projects.push(project);
                    continue;
                }
                let base = Selectors {
                    surface: self.selectors().surface,
                    ..Selectors::new(self.selectors().home.clone(), project.clone())
                };
                let plan = ChainPlan::for_change_in(&base, reach, entries);
                let other = self.check_plan(
                    &plan,
                    &change,
                    None,
                    &[Trust::Trusted],
                    Some(&project),
                    (&mut work, &mut over, inputs),
                )?;
                left_out.merge(other);
            }
        }
        Ok((over, left_out))
    }

    fn check_reach(
        &self,
        target: &EditTarget,
        text: Option<&str>,
        cap: usize,
        (over, inputs): (&mut OverCap, &mut CheckInputs),
    ) -> Result<ChainsLeftOut, EditError> {
        let mut work = Work::for_cap(cap);
        let trust = self.trust()?;
        let mut trusts = vec![trust];
        if target.scope == Scope::Project && trust == Trust::Untrusted {
            trusts.push(Trust::Trusted);
        }
        let entries = &mut None;
        let plan = ChainPlan::for_change_in(self.selectors(), target, entries);
        let change = Change::File(target);
        // One snapshot for every project (the preview's): the home's files,
        // the gateway files and the roles' are read once for all of them.
        let mut left_out = self.check_plan(
            &plan,
            &change,
            text,
            &trusts,
            None,
            (&mut work, over, inputs),
        )?;
        if target.scope != Scope::Shared {
            return Ok(left_out);
        }
        for project in self.other_trusted_projects()? {
            // Not even walked: walking is work too.
            if work.is_spent() {
                left_out.projects.push(project);
                continue;
            }
            let base = Selectors {
                surface: self.selectors().surface,
                ..Selectors::new(self.selectors().home.clone(), project.clone())
            };
            let plan = ChainPlan::for_change_in(&base, target, entries);
            let other = self.check_plan(
                &plan,
                &change,
                text,
                &[Trust::Trusted],
                Some(&project),
                (&mut work, over, inputs),
            )?;
            left_out.merge(other);
        }
        Ok(left_out)
    }

    /// The projects of the trust store other than this one, in its order,
    /// each still a directory; one that is gone (deleted, moved, a mount
    /// not there now) is passed over with a warning, since no chain can be
    /// resolved there until it is back.
    pub(crate) fn other_trusted_projects(&self) -> Result<Vec<Utf8PathBuf>, CoreError> {
        let home = &self.selectors().home;
        let this = std::fs::canonicalize(&self.selectors().project).ok();
        let store = vak_prompt_trust::TrustStore::load(home)?;
        let mut out = Vec::new();
        for listed in store.list() {
            let project = Utf8PathBuf::from(listed);
            if this.as_deref() == Some(project.as_std_path()) || project == self.selectors().project
            {
                continue;
            }
            if !project.is_dir() {
                tracing::warn!(
                    project = %Escaped(listed),
                    "a trusted project's directory is gone, so a shared save cannot budget its chains; `vak untrust DIR` takes it off the trust store"
                );
                continue;
            }
            out.push(project);
        }
        Ok(out)
    }

    /// Budget `change` on every chain of `plan`, under each of `trusts`,
    /// counting against `work`. `other` names the trusted project the plan
    /// is for when it is not this core's, for a refusal to name, and then a
    /// project that went away meanwhile is passed over.
    fn check_plan(
        &self,
        plan: &ChainPlan,
        change: &Change<'_>,
        text: Option<&str>,
        trusts: &[Trust],
        other: Option<&Utf8Path>,
        (work, over, inputs): (&mut Work, &mut OverCap, &mut CheckInputs),
    ) -> Result<ChainsLeftOut, EditError> {
        use std::ops::ControlFlow;
        // Opened once per plan; each chain is chosen from it and from the
        // snapshot, composed and counted in memory.
        let base = match Core::open(plan.base().clone()) {
            Ok(core) => core.pinned(),
            Err(CoreError::Loader(LoaderError::ProjectMissing(_))) if other.is_some() => {
                return Ok(ChainsLeftOut::default());
            }
            Err(error) => return Err(error.into()),
        };
        let CheckInputs {
            snapshot,
            tokens,
            compose,
            reach,
        } = inputs;
        // The candidate's imports, read once for every chain it goes into.
        let mut expanded: Option<(Provenance, Option<(String, vak_prompt_loader::Imports)>)> = None;
        // Every chain's budget covers every scoped rule of its project.
        let rules = crate::rules::RuleTexts::of(&base.scoped_rules_in(snapshot));
        let flow = plan.visit_within(work, |selectors| {
            // A file's change leaves a chat's own texts as they are: its
            // chain is bounded from its bot's, and composed only when the
            // bound does not prove it within the cap (`reach`).
            if matches!(change, Change::File(_))
                && let Some(visited) = reach.fits(selectors, trusts.len(), snapshot)
            {
                return ControlFlow::Continue(Some(visited));
            }
            let core = base.reselect(selectors.clone());
            let loaded = match change {
                Change::File(target) => core.load_for_in(target, snapshot),
                Change::Gateway { .. } | Change::Imported { .. } => core.load_from(snapshot),
            };
            let chain = match loaded {
                Ok(chain) => chain,
                // A role directory that vanished meanwhile reaches nothing.
                Err(CoreError::Loader(
                    LoaderError::UnknownRole { .. } | LoaderError::RoleRefused { .. },
                )) => {
                    return ControlFlow::Continue(None);
                }
                // Nor does another project removed meanwhile.
                Err(CoreError::Loader(LoaderError::ProjectMissing(_))) if other.is_some() => {
                    return ControlFlow::Continue(None);
                }
                Err(error) => return ControlFlow::Break(error.into()),
            };
            let mut after_chain = chain.clone();
            match change {
                Change::File(target) => {
                    let provenance = target.provenance(core.selectors());
                    let candidate = match &expanded {
                        Some((read_for, candidate)) if *read_for == provenance => candidate.clone(),
                        _ => {
                            let candidate =
                                text.map(|t| vak_prompt_loader::expand_imports(&provenance, t));
                            expanded = Some((provenance.clone(), candidate.clone()));
                            candidate
                        }
                    };
                    after_chain.substitute_expanded(target.block, &provenance, candidate);
                }
                Change::Gateway { block, provenance } => {
                    after_chain.substitute(*block, provenance, text);
                }
                Change::Imported { after, .. } => {
                    after_chain = match core.load_from(&mut after.borrow_mut()) {
                        Ok(chain) => chain,
                        Err(error) => return ControlFlow::Break(error.into()),
                    };
                }
            }
            let mut visited = Visited::default();
            let mut counted = Vec::with_capacity(2 * trusts.len());
            for (index, &trust) in trusts.iter().enumerate() {
                let resolved = core.compose_with(&after_chain, trust, TailContext::now(), compose);
                // The scoped rules count in every chain of the project, a
                // chat's as its bot's: the bound noted carries them.
                let after = budget_with(&resolved, tokens).with_rule_texts(&rules, tokens);
                reach.note(selectors, index, &resolved, &after.report, tokens);
                // Only a chain over the cap after the change needs its
                // length before (a change that shortens it is allowed): most
                // chains are composed and counted once, not twice.
                if after.report.is_over() {
                    let before = budget_with(
                        &core.compose_with(&chain, trust, TailContext::now(), compose),
                        tokens,
                    )
                    .with_rule_texts(&rules, tokens);
                    if pushes_over(&before.report, &after.report) {
                        // Said with every other chain over, not alone.
                        // ", project trusted" only for an untrusted
                        // project's chains checked as if trusted.
                        let named = if other.is_none() && trusts.len() > 1 {
                            trust
                        } else {
                            Trust::Untrusted
                        };
                        over.push(OverChain {
                            chain: describe_chain(core.selectors(), named),
                            project: other.map(Utf8Path::to_owned),
                            report: after.report.clone(),
                        });
                    }
                    counted.push(before.report);
                }
                visited.tokens = visited.tokens.max(after.report.prefix_tokens);
                counted.push(after.report);
            }
            visited.work = chain_work(&after_chain, &counted);
            ControlFlow::Continue(Some(visited))
        });
        tracing::debug!(
            bounded = reach.bounded,
            "chats' chains bounded from their bots', not composed, so far"
        );
        match flow {
            ControlFlow::Continue(left_out) => Ok(left_out),
            ControlFlow::Break(error) => Err(error),
        }
    }
}

/// What one check reads and counts once, however many chains it budgets
/// (DECISIONS §18): the snapshot every chain is chosen from and composed
/// in memory, and the token counts made so far, by text.
#[derive(Debug, Default)]
pub(crate) struct CheckInputs {
    /// Every input the check's chains read, each read once.
    pub(crate) snapshot: Snapshot,
    /// Token counts by text digest.
    pub(crate) tokens: TokenMemo,
    /// What composing is done once for every chain (a config's demotion).
    pub(crate) compose: ComposeMemo,
    /// The bots' chains and the chats' texts a chat's chain is bounded by.
    pub(crate) reach: crate::reach::Reach,
}

/// What a check puts in place in every chain it loads.
enum Change<'a> {
    /// A layer file.
    File(&'a EditTarget),
    /// One key of a gateway entry (`bots.json#/BOT/prompts/KEY`, or the
    /// chat's in `allowlist.json`).
    Gateway {
        block: Block,
        provenance: &'a Provenance,
    },
    /// A file block files import (`@parts/tone.md`): every chain is loaded
    /// as it is and again from `after`, a snapshot that reads the file's new
    /// text.
    Imported {
        path: &'a Utf8Path,
        after: &'a std::cell::RefCell<Snapshot>,
    },
}

impl Change<'_> {
    /// What a refusal names: the file, or the gateway key.
    fn path(&self, selectors: &Selectors) -> Utf8PathBuf {
        match self {
            Change::File(target) => target.path(selectors),
            Change::Gateway { provenance, .. } => {
                Utf8PathBuf::from(provenance.source.as_deref().unwrap_or_default())
            }
            Change::Imported { path, .. } => (*path).to_owned(),
        }
    }
}

impl Core {
    /// Budget a change of one gateway key on every chain it reaches,
    /// in this core's project and with its trust: the
    /// chat's chain for a chat's key; for a bot's key the bot's chain and
    /// the chain of every chat of that bot with prompts of its own (each
    /// takes the bot's text unless it has its own). Each on the chat
    /// surface, with no role and with every role that has a directory,
    /// under a work bound of [`WORK_PER_CAP_TOKEN`] times `cap`.
    /// `provenance` is the key's, as the loader gives it. Every chain the
    /// change would push over the cap is added to `over` (with any the
    /// caller found already); unless `unchecked` accepts, a non-empty
    /// `over` is refused naming them all, and so is a check that could not
    /// budget every chain; else says which chains were left out.
    ///
    /// # Errors
    ///
    /// [`EditError::OverBudget`] naming every chain, [`EditError::Unchecked`],
    /// [`EditError::Core`] when the trust store or a chain cannot be read.
    pub fn check_gateway_reach(
        &self,
        key: (&Name, Option<&Name>, Block),
        provenance: &Provenance,
        text: Option<&str>,
        unchecked: Unchecked,
        cap: usize,
        over: &mut OverCap,
    ) -> Result<ChainsLeftOut, EditError> {
        let (bot, chat, block) = key;
        let change = if text.is_some() { "save" } else { "reset" };
        let trust = self.trust()?;
        let plan = ChainPlan::for_gateway(self.selectors(), bot, chat);
        let reach = Change::Gateway { block, provenance };
        let left_out = self.check_plan(
            &plan,
            &reach,
            text,
            &[trust],
            None,
            (&mut Work::for_cap(cap), over, &mut CheckInputs::default()),
        )?;
        let path = reach.path(self.selectors());
        let home = &self.selectors().home;
        refuse_over(over, unchecked, change, block, &path, home)?;
        refuse_unchecked(&left_out, unchecked, change, block, &path)?;
        Ok(left_out)
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

/// At most this many gateway bots and chats are budgeted: a bound on the
/// memory a check's list of entries takes, far past any real gateway (a
/// chat's chains cost a few additions each, bounded from its bot's), not a
/// limit a home meets.
pub const MAX_GATEWAY_CHAINS: usize = 1 << 20;

/// The work bound per token of the default cap: the work a plan may do
/// grows with the room its chains may take, since a chain at the cap costs
/// about that many tokens to compose and count.
pub const WORK_PER_CAP_TOKEN: usize = 8_000;

/// At most this much work is done across all the chains one plan visits,
/// counted as [`chain_work`] counts it: the tokens every budget counted
/// (each layer's whole text, repeats included) and a token per 4 bytes
/// read. The work grows with roles × layers × their sizes, and counting
/// the prefix alone missed what repeats cost: 100 directory layers under a
/// root of 65,000 repeated bullets (one in the prefix, all of them read,
/// composed and counted on every chain) took `trust` and a save 6.5 s
/// without tripping it. It is [`WORK_PER_CAP_TOKEN`] times the default cap
/// (about 65 M): measured in release at about 20–30 ns per unit, so a
/// check stops after a second and a half or so of counting; a monorepo of
/// 30 `AGENTS.md` and 5 roles near a 1500-token cap costs 2.7 M for a
/// shared save and 5.5 M for `trust`, and chains near the default cap
/// about five times that. Chains past the bound are not budgeted, which
/// is said and refused unless accepted ([`Unchecked`]).
pub const MAX_PLAN_WORK: usize = WORK_PER_CAP_TOKEN * vak_prompt_budget::DEFAULT_MAX_TOKENS;

/// What composing and budgeting one chain of a plan weighed and cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Visited {
    /// Its longest prefix, in tokens: what ranks it for crossing.
    pub tokens: usize,
    /// The work it took ([`chain_work`]), counted against
    /// [`MAX_PLAN_WORK`].
    pub work: usize,
}

/// The work of reading `chain` once and budgeting it as `budgets`: every
/// token each budget counted ([`BudgetReport::tokens_counted`]: each
/// layer's whole text, not only what the prefix keeps of it, so a file of
/// repeated bullets costs what it costs to read, compose and count), and a
/// token per 4 bytes the load read (a shadowed file is read, though no
/// budget counts it).
pub fn chain_work<'a>(
    chain: &LoadedChain,
    budgets: impl IntoIterator<Item = &'a BudgetReport>,
) -> usize {
    budgets
        .into_iter()
        .fold(chain.text_bytes() / 4, |work, report| {
            work.saturating_add(report.tokens_counted())
        })
}

/// What one directory visited by the walk that lists directory layers
/// costs, in the units of [`MAX_PLAN_WORK`]: about 8 µs in release, what
/// counting 300 tokens takes. A walk stops at
/// [`vak_prompt_loader::MAX_VISITED`] directories, but a shared save walks
/// every trusted project, so walking is counted like composing.
pub const WORK_PER_DIRECTORY: usize = 300;

/// The work one check has done, across every plan it visits (a shared
/// save visits one per trusted project), against its bound: by default
/// [`MAX_PLAN_WORK`], or [`WORK_PER_CAP_TOKEN`] times the cap in force
/// ([`Work::for_cap`]), since a larger cap lets every chain weigh more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    spent: usize,
    bound: usize,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            spent: 0,
            bound: MAX_PLAN_WORK,
        }
    }
}

impl Work {
    /// No work done yet, bounded by [`WORK_PER_CAP_TOKEN`] times `cap`.
    pub fn for_cap(cap: usize) -> Self {
        Work {
            spent: 0,
            bound: WORK_PER_CAP_TOKEN.saturating_mul(cap.max(1)),
        }
    }

    /// Whether the bound is reached: nothing more is visited, or walked.
    pub fn is_spent(&self) -> bool {
        self.spent >= self.bound
    }

    /// The bound.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The work counted so far.
    pub fn spent(&self) -> usize {
        self.spent
    }

    fn add(&mut self, work: usize) {
        self.spent = self.spent.saturating_add(work);
    }
}

/// At most this many projects are named in a note that says some were
/// left out; the rest are counted.
const MAX_PROJECTS_NAMED: usize = 3;

/// What a check could not budget: said, never silent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainsLeftOut {
    /// Gateway bots and chats not budgeted at all.
    pub gateway: usize,
    /// The projects whose walk that lists directory layers stopped before
    /// it looked everywhere ([`vak_prompt_loader::MAX_LAYERS`] layers or
    /// [`vak_prompt_loader::MAX_VISITED`] directories).
    pub unlisted_in: Vec<Utf8PathBuf>,
    /// Chains not budgeted because the check had counted
    /// [`MAX_PLAN_WORK`] already.
    pub over_work: usize,
    /// Trusted projects a shared save reaches that were not looked at, not
    /// even walked, because the check had counted [`MAX_PLAN_WORK`] before
    /// it came to them.
    pub projects: Vec<Utf8PathBuf>,
    /// The work bound the check ran under ([`Work::bound`]), for the note.
    pub work_bound: usize,
}

/// `paths` as a note names them: the first few, then how many more.
fn some_paths(paths: &[Utf8PathBuf]) -> String {
    let mut named: Vec<String> = paths
        .iter()
        .take(MAX_PROJECTS_NAMED)
        .map(|p| format!("`{}`", Escaped(p.as_str())))
        .collect();
    if paths.len() > MAX_PROJECTS_NAMED {
        named.push(format!("{} more", paths.len() - MAX_PROJECTS_NAMED));
    }
    named.join(", ")
}

impl ChainsLeftOut {
    /// Why a check cannot vouch for every chain, when it cannot: the walk
    /// that lists directory layers stopped at its bound, or chains were not
    /// counted at all for the work bound. A clone decides how many
    /// directories and chains it has and how large their prompts are, so
    /// either could hide one over the cap: `vak trust` and every save,
    /// reset and revert refuse, unless told `--over-budget`. (Gateway
    /// entries past [`MAX_GATEWAY_CHAINS`] are the user's own, in the home,
    /// and only said.)
    pub fn unproven(&self) -> Option<String> {
        (!self.unlisted_in.is_empty() || self.over_work > 0 || !self.projects.is_empty())
            .then(|| self.note())
            .flatten()
    }

    /// Add what another plan of the same check left out.
    pub(crate) fn merge(&mut self, other: ChainsLeftOut) {
        // Every plan lists the same home's gateway entries.
        self.gateway = self.gateway.max(other.gateway);
        self.unlisted_in.extend(other.unlisted_in);
        self.over_work = self.over_work.saturating_add(other.over_work);
        self.projects.extend(other.projects);
        self.work_bound = self.work_bound.max(other.work_bound);
    }

    /// What to tell the user, when anything was left out.
    pub fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.gateway > 0 {
            parts.push(format!(
                "{} gateway bot{} or chat{} not at all (past the first {MAX_GATEWAY_CHAINS}; check one with `vak prompts check --surface chat --bot BOT --chat CHAT`)",
                self.gateway,
                if self.gateway == 1 { "" } else { "s" },
                if self.gateway == 1 { "" } else { "s" }
            ));
        }
        if self.over_work > 0 {
            parts.push(format!(
                "{} chain{} not at all, because there are so many chains, or their layers are so large (repeated text included), that counting every one would take too long (the bound of {} tokens of work was reached; check one with `vak prompts check --surface S --agent ROLE --dir DIR`)",
                self.over_work,
                if self.over_work == 1 { "" } else { "s" },
                self.work_bound
            ));
        }
        if !self.projects.is_empty() {
            parts.push(format!(
                "{} other trusted project{} not at all ({}), because the bound of {} tokens of work was reached before {}; check one with `vak prompts check --project DIR`",
                self.projects.len(),
                if self.projects.len() == 1 { "" } else { "s" },
                some_paths(&self.projects),
                self.work_bound,
                if self.projects.len() == 1 { "it" } else { "them" }
            ));
        }
        if !self.unlisted_in.is_empty() {
            parts.push(format!(
                "the walk that lists directory layers stopped (at {} layers or {} directories) in {}, so layers past it were not looked at; check one with `vak prompts check --dir DIR`",
                vak_prompt_loader::MAX_LAYERS,
                vak_prompt_loader::MAX_VISITED,
                some_paths(&self.unlisted_in)
            ));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "not every chain was budgeted everywhere: {}",
                parts.join("; ")
            )
        })
    }
}

/// The roles that have a directory under the home or the project (a
/// symlink staying inside its root counts), each name valid, sorted by
/// name. Bounded by the first 4096 entries of each `agents/` directory.
pub fn roles_with_dirs(selectors: &Selectors) -> Vec<Name> {
    let mut roles: Vec<Name> = Vec::new();
    for root in [&selectors.home, &selectors.project] {
        let dir = vak_prompt_loader::prompt_dir(root).join("agents");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten().take(4096) {
            // Followed: a role directory that is a symlink staying inside
            // its root is read by the loader like any other, so it is
            // budgeted and previewed like any other.
            let is_dir = std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir());
            if let (true, Some(name)) = (is_dir, entry.file_name().to_str())
                && let Ok(role) = Name::new(vak_prompt_blocks::NameKind::Role, name)
            {
                roles.push(role);
            }
        }
    }
    roles.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    roles.dedup_by(|a, b| a.as_str() == b.as_str());
    roles
}

/// Every gateway bot (`bots.json`) of the home, and every chat
/// (`allowlist.json`) with prompts of its own, valid names only, bots
/// first. A chat without its own prompts resolves as its bot does, so its
/// bot's chain stands for it.
fn gateway_entries(home: &Utf8Path) -> Vec<(Name, Option<Name>)> {
    use vak_prompt_blocks::NameKind;
    let mut out = Vec::new();
    if let Ok(Some(doc)) =
        vak_prompt_loader::read_gateway(home, vak_prompt_loader::GatewayFile::Bots)
    {
        out.extend(
            doc.entries
                .keys()
                .filter_map(|bot| Name::new(NameKind::Bot, bot).ok())
                .map(|bot| (bot, None)),
        );
    }
    if let Ok(Some(doc)) =
        vak_prompt_loader::read_gateway(home, vak_prompt_loader::GatewayFile::Allowlist)
    {
        for (bot, chats) in &doc.entries {
            let (Ok(bot), Some(chats)) = (Name::new(NameKind::Bot, bot), chats.as_object()) else {
                continue;
            };
            let has_prompts = |entry: &serde_json::Value| {
                entry
                    .get("prompts")
                    .and_then(serde_json::Value::as_object)
                    .is_some_and(|prompts| !prompts.is_empty())
            };
            out.extend(
                chats
                    .iter()
                    .filter(|(_, entry)| has_prompts(entry))
                    .filter_map(|(chat, _)| Name::new(NameKind::Chat, chat).ok())
                    .map(|chat| (bot.clone(), Some(chat))),
            );
        }
    }
    out
}

/// No role, then every role with a directory: the roles a plan reaches.
fn no_role_then_each(base: &Selectors) -> Vec<Option<Name>> {
    std::iter::once(None)
        .chain(roles_with_dirs(base).into_iter().map(Some))
        .collect()
}

/// The chains a check visits: every surface, every
/// role with a directory (or the one role), the root and every directory
/// layer (or those below the one changed), and every gateway bot and chat.
#[derive(Debug, Clone)]
pub struct ChainPlan {
    base: Selectors,
    surfaces: Vec<SurfaceKind>,
    /// `None` is "no role"; a plan for one role's file holds only it.
    roles: Vec<Option<Name>>,
    /// The named working directory first.
    workdirs: Vec<Option<Utf8PathBuf>>,
    gateway: Vec<(Name, Option<Name>)>,
    gateway_left_out: usize,
    /// What listing the directory layers took.
    walk: Walked,
}

/// What the walk that listed a plan's directory layers took.
#[derive(Debug, Clone, Copy, Default)]
struct Walked {
    /// Whether it looked everywhere it looks.
    complete: bool,
    /// How many directories it visited.
    visited: usize,
}

impl ChainPlan {
    /// The chains a change to `target` reaches from `base`: every surface
    /// (or the one sub-layer's) crossed with every role that has a
    /// directory (or the one role's) and with the root and every directory
    /// layer (those at or below the one changed, for a directory file),
    /// bounded only by [`MAX_PLAN_WORK`], as for trusting.
    pub fn for_change(base: &Selectors, target: &EditTarget) -> ChainPlan {
        ChainPlan::for_change_in(base, target, &mut None)
    }

    /// [`for_change`](Self::for_change), with the home's gateway entries
    /// listed once for every plan of a check (`entries`, filled by the
    /// first plan that lists them): a shared save makes one plan per
    /// trusted project, all with the same home.
    pub(crate) fn for_change_in(
        base: &Selectors,
        target: &EditTarget,
        entries: &mut Option<Vec<(Name, Option<Name>)>>,
    ) -> ChainPlan {
        let surfaces = match &target.sub {
            SubLayer::Surface(kind) => vec![*kind],
            _ => SurfaceKind::ALL.to_vec(),
        };
        let roles = match &target.sub {
            SubLayer::Agent(role) => vec![Some(role.clone())],
            _ => no_role_then_each(base),
        };
        let below = match &target.sub {
            SubLayer::Directory(dir) => Some(dir.as_path()),
            _ => None,
        };
        let (workdirs, walk) = layer_workdirs(base, below);
        ChainPlan::new(base, surfaces, roles, workdirs, walk, entries)
    }

    /// The chains trusting `base.project` reaches, `base` first: every role
    /// crossed with every directory layer on every surface, bounded only by
    /// [`MAX_PLAN_WORK`].
    pub fn for_trust(base: &Selectors) -> ChainPlan {
        let (workdirs, walk) = layer_workdirs(base, None);
        ChainPlan::new(
            base,
            SurfaceKind::ALL.to_vec(),
            no_role_then_each(base),
            workdirs,
            walk,
            &mut None,
        )
    }

    /// The chains a change of one gateway key reaches from `base`'s
    /// project, at its root, on the chat surface, each with no role and
    /// with every role that has a directory: `bot`'s chain and each of its
    /// chats with prompts of its own, or `chat`'s chain alone.
    pub fn for_gateway(base: &Selectors, bot: &Name, chat: Option<&Name>) -> ChainPlan {
        let base = Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(bot.clone()),
            chat: chat.cloned(),
            workdir: None,
            ..base.clone()
        };
        let mut gateway: Vec<(Name, Option<Name>)> = match chat {
            Some(_) => Vec::new(),
            None => gateway_entries(&base.home)
                .into_iter()
                .filter(|(of, chat)| of == bot && chat.is_some())
                .collect(),
        };
        let gateway_left_out = gateway.len().saturating_sub(MAX_GATEWAY_CHAINS);
        gateway.truncate(MAX_GATEWAY_CHAINS);
        ChainPlan {
            roles: no_role_then_each(&base),
            base,
            surfaces: vec![SurfaceKind::Chat],
            workdirs: vec![None],
            gateway,
            gateway_left_out,
            walk: Walked {
                complete: true,
                visited: 0,
            },
        }
    }

    /// The selectors the plan's chains vary.
    pub fn base(&self) -> &Selectors {
        &self.base
    }

    fn new(
        base: &Selectors,
        surfaces: Vec<SurfaceKind>,
        roles: Vec<Option<Name>>,
        workdirs: Vec<Option<Utf8PathBuf>>,
        walk: Walked,
        entries: &mut Option<Vec<(Name, Option<Name>)>>,
    ) -> ChainPlan {
        let mut gateway = if surfaces.contains(&SurfaceKind::Chat) {
            entries
                .get_or_insert_with(|| gateway_entries(&base.home))
                .clone()
        } else {
            Vec::new()
        };
        let gateway_left_out = gateway.len().saturating_sub(MAX_GATEWAY_CHAINS);
        gateway.truncate(MAX_GATEWAY_CHAINS);
        ChainPlan {
            base: base.clone(),
            surfaces,
            roles,
            workdirs,
            gateway,
            gateway_left_out,
            walk,
        }
    }

    /// Visit each chain once, `visit` answering what the chain weighed and
    /// cost (`None`: it could not be loaded) or `Break` to stop; once the
    /// work answered adds up to [`MAX_PLAN_WORK`], the chains left are
    /// counted, not visited. First every
    /// role in the named working directory and every directory layer with
    /// the plan's first role, each on every surface, weighed by its longest
    /// prompt, and every gateway bot and chat with that first role; then
    /// every surface × every directory layer × every role, the heaviest of
    /// that first pass first; then every
    /// gateway bot and chat × every other role, the heaviest role first
    /// (after the chains a delivery uses, which have no role).
    /// Every one, not the heaviest few: a clone chooses its texts, and
    /// guardrails a role repeats from heavy layers are dropped there as
    /// duplicates (counting nothing), so a light layer can make the longest
    /// chain with it. The order only decides which chains are left out when
    /// the work bound stops the visit, and those are counted.
    pub fn visit<B>(
        &self,
        visit: impl FnMut(&Selectors) -> std::ops::ControlFlow<B, Option<Visited>>,
    ) -> std::ops::ControlFlow<B, ChainsLeftOut> {
        self.visit_within(&mut Work::default(), visit)
    }

    /// [`visit`](Self::visit), counting against `work`, which other plans
    /// of the same check share (a shared save visits one plan per trusted
    /// project): walking this plan's directories counts too
    /// ([`WORK_PER_DIRECTORY`]), as it has been done.
    pub fn visit_within<B>(
        &self,
        work: &mut Work,
        mut visit: impl FnMut(&Selectors) -> std::ops::ControlFlow<B, Option<Visited>>,
    ) -> std::ops::ControlFlow<B, ChainsLeftOut> {
        use std::collections::HashSet;
        use std::ops::ControlFlow;
        work.add(self.walk.visited.saturating_mul(WORK_PER_DIRECTORY));
        let base = &self.base;
        let surface0 = if self.surfaces.contains(&base.surface) {
            base.surface
        } else {
            self.surfaces[0]
        };
        // A chain is named by indices (surface, working directory, role,
        // gateway entry) until it is visited: a check reaches hundreds of
        // thousands of chains, and cloning and hashing each one's
        // selectors cost more than bounding it (`reach`).
        const NO_ENTRY: usize = usize::MAX;
        // A gateway entry that is the base's own bot and chat is the
        // base's chain: visited once.
        let entry_key = |index: usize| {
            let (bot, chat) = &self.gateway[index];
            if base.bot.as_ref() == Some(bot) && base.chat == *chat {
                NO_ENTRY
            } else {
                index
            }
        };
        let surface_at = |surface: SurfaceKind| {
            SurfaceKind::ALL
                .iter()
                .position(|s| *s == surface)
                .unwrap_or(usize::MAX)
        };
        let mut seen: HashSet<(usize, usize, usize)> = HashSet::new();
        // Gateway chains are each met once (the first role's in the first
        // pass, every other role's in the last), so they are counted, not
        // remembered: a home may list a million chats and thousands of roles.
        let entry_chains = std::cell::Cell::new(0usize);
        // Work counted so far, and chains skipped once past the bound.
        // Written back to `work` at the end: a `Break` ends the check.
        let spent = std::cell::Cell::new(*work);
        let over_work = std::cell::Cell::new(0usize);
        // One set of selectors, each field set only when it changes.
        let mut current = base.clone();
        let mut go = |surface: SurfaceKind,
                      workdir: usize,
                      role: usize,
                      entry: usize,
                      seen: &mut HashSet<(usize, usize, usize)>| {
            let entry = if entry == NO_ENTRY {
                NO_ENTRY
            } else {
                entry_key(entry)
            };
            if entry == NO_ENTRY {
                if !seen.insert((surface_at(surface), workdir, role)) {
                    return ControlFlow::Continue(None);
                }
            } else {
                entry_chains.set(entry_chains.get() + 1);
            }
            if spent.get().is_spent() {
                over_work.set(over_work.get() + 1);
                return ControlFlow::Continue(None);
            }
            current.surface = surface;
            if current.workdir != self.workdirs[workdir] {
                current.workdir.clone_from(&self.workdirs[workdir]);
            }
            if current.agent != self.roles[role] {
                current.agent.clone_from(&self.roles[role]);
            }
            let (bot, chat) = match entry {
                NO_ENTRY => (base.bot.as_ref(), &base.chat),
                index => (Some(&self.gateway[index].0), &self.gateway[index].1),
            };
            if current.bot.as_ref() != bot {
                current.bot = bot.cloned();
            }
            if current.chat != *chat {
                current.chat.clone_from(chat);
            }
            let flow = visit(&current);
            if let ControlFlow::Continue(Some(visited)) = &flow {
                let mut now = spent.get();
                now.add(visited.work);
                spent.set(now);
            }
            flow.map_continue(|visited| visited.map(|v| v.tokens))
        };
        // Each role and each layer on every surface, weighed by its longest:
        // a role that adds nothing on one surface (its bullets repeat that
        // surface's) may add much on another.
        let surfaces: Vec<SurfaceKind> = std::iter::once(surface0)
            .chain(self.surfaces.iter().copied().filter(|s| *s != surface0))
            .collect();
        let mut role_weight: Vec<(usize, usize)> = Vec::new();
        for index in 0..self.roles.len() {
            let mut weight = 0;
            for surface in &surfaces {
                let measured = go(*surface, 0, index, NO_ENTRY, &mut seen)?;
                weight = weight.max(measured.unwrap_or(0));
            }
            role_weight.push((weight, index));
        }
        let mut dir_weight: Vec<(usize, usize)> = vec![(usize::MAX, 0)];
        for index in 1..self.workdirs.len() {
            let mut weight = 0;
            for surface in &surfaces {
                let measured = go(*surface, index, 0, NO_ENTRY, &mut seen)?;
                weight = weight.max(measured.unwrap_or(0));
            }
            dir_weight.push((weight, index));
        }
        for entry in 0..self.gateway.len() {
            go(SurfaceKind::Chat, 0, 0, entry, &mut seen)?;
        }
        // The heaviest first ("no role" last, the named directory first),
        // so a bound that stops the visit leaves out the lightest.
        let heaviest = |mut weights: Vec<(usize, usize)>| {
            weights.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            weights
                .into_iter()
                .map(|(_, index)| index)
                .collect::<Vec<_>>()
        };
        let (no_role, with_role): (Vec<_>, Vec<_>) = role_weight
            .into_iter()
            .partition(|(_, index)| self.roles[*index].is_none());
        let mut roles = heaviest(with_role);
        roles.extend(no_role.into_iter().map(|(_, index)| index));
        let dirs = heaviest(dir_weight);
        for surface in &self.surfaces {
            for &dir in &dirs {
                for &role in &roles {
                    go(*surface, dir, role, NO_ENTRY, &mut seen)?;
                }
            }
        }
        // A delivery may run a chat under any role, so a change that
        // reaches the chats reaches each with every role (a chat's list and
        // a role's can each fit beside the changed text and not both).
        for &role in roles.iter().filter(|role| **role != 0) {
            for entry in 0..self.gateway.len() {
                go(SurfaceKind::Chat, 0, role, entry, &mut seen)?;
            }
        }
        // How close a check came to its bound, for whoever tunes it.
        *work = spent.get();
        tracing::debug!(
            project = %Escaped(base.project.as_str()),
            chains = seen.len() + entry_chains.get() - over_work.get(),
            walked = self.walk.visited,
            work = work.spent(),
            left_out = over_work.get(),
            "budgeted the chains of one plan"
        );
        ControlFlow::Continue(ChainsLeftOut {
            gateway: self.gateway_left_out,
            unlisted_in: if self.walk.complete {
                Vec::new()
            } else {
                vec![base.project.clone()]
            },
            over_work: over_work.get(),
            projects: Vec::new(),
            work_bound: work.bound(),
        })
    }
}

/// The file names read as a directory's operating rules (`[prompts]
/// interop` of the shared config, else `AGENTS.md`), as the loader reads
/// them: a directory whose only layer is a configured `CLAUDE.md` is a
/// layer the budget and the preview must see.
pub fn interop_names(base: &Selectors) -> Vec<String> {
    let request = LoadRequest {
        agent: None,
        workdir: None,
        ..base.load_request()
    };
    load_chain(&request).map_or_else(
        |_| {
            vak_prompt_loader::DEFAULT_INTEROP
                .iter()
                .map(|n| (*n).to_owned())
                .collect()
        },
        |chain| chain.interop_names,
    )
}

/// Every directory layer of `base`'s project, relative to its root, found
/// with the interop names the shared config sets ([`interop_names`]).
pub fn layer_directories(base: &Selectors) -> Vec<Utf8PathBuf> {
    let names = interop_names(base);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    vak_prompt_loader::directory_layers(&base.project, &names, &base.home)
}

/// The named working directory, then (unless `below` is given) the project
/// root, then every directory layer of the project (at or below `below`,
/// when given), and what the walk that lists them took (whether it stopped
/// at its bound, how many directories it visited).
/// Every layer, not only the deepest: identity and operating rules are
/// narrowest-wins, so a middle directory's chain (its long identity) can be
/// longer than that of a deeper one that replaces it with a short one. Any
/// other directory's chain is that of its nearest layer (or the root's).
fn layer_workdirs(
    base: &Selectors,
    below: Option<&Utf8Path>,
) -> (Vec<Option<Utf8PathBuf>>, Walked) {
    let mut out = vec![base.workdir.clone()];
    if below.is_none() && base.workdir.is_some() {
        out.push(None);
    }
    let names = interop_names(base);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let walk = vak_prompt_loader::directory_layers_walked(&base.project, &names, &base.home);
    for dir in walk
        .layers
        .iter()
        .filter(|d| below.is_none_or(|b| d.starts_with(b)))
    {
        let workdir = Some(base.project.join(dir));
        if !out.contains(&workdir) {
            out.push(workdir);
        }
    }
    (
        out,
        Walked {
            complete: walk.complete,
            visited: walk.visited,
        },
    )
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
