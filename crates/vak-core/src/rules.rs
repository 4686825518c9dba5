//! Scoped rules for a turn: the paths it names, made relative to the
//! project root, and the rules they select, composed for the tail.

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::Source;
use vak_prompt_compose::{ScopedTail, compose_rules};
use vak_prompt_loader::{RuleSet, load_rules, project_path, relative_project_path};
use vak_prompt_trust::Trust;
use vak_session::TurnRule;

use crate::{Core, CoreError};

/// At most this many paths name what one turn touches.
pub const MAX_TURN_PATHS: usize = 256;
/// The longest path a turn may name, in bytes.
pub const MAX_TURN_PATH_BYTES: usize = 4096;

fn bounded(count: usize) -> Result<(), CoreError> {
    if count > MAX_TURN_PATHS {
        return Err(CoreError::TurnPath(format!(
            "{count} paths were named for one turn; at most {MAX_TURN_PATHS} are accepted"
        )));
    }
    Ok(())
}

/// Paths given on the command line (relative to `cwd`, or absolute), made
/// relative to `project`'s root. `..` is resolved by name.
///
/// # Errors
///
/// [`CoreError::NonUtf8Path`] for a path that is not UTF-8;
/// [`CoreError::TurnPath`] for one outside the project, too long, or too
/// many paths.
pub fn paths_from_cwd(
    project: &Utf8Path,
    cwd: &std::path::Path,
    given: &[std::path::PathBuf],
) -> Result<Vec<Utf8PathBuf>, CoreError> {
    bounded(given.len())?;
    let cwd = Utf8Path::from_path(cwd)
        .ok_or_else(|| CoreError::NonUtf8Path(cwd.to_string_lossy().into_owned()))?;
    // The project as the file system names it, so a cwd reached through a
    // symlink (or `/tmp` → `/private/tmp`) still lies inside it.
    let root = vak_fs::canonical(project)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or_else(|| project.to_owned());
    let cwd = vak_fs::canonical(cwd)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or_else(|| cwd.to_owned());
    given
        .iter()
        .map(|path| {
            let path = Utf8Path::from_path(path)
                .ok_or_else(|| CoreError::NonUtf8Path(path.to_string_lossy().into_owned()))?;
            if path.as_str().len() > MAX_TURN_PATH_BYTES {
                return Err(CoreError::TurnPath(format!(
                    "a path of {} bytes was named; at most {MAX_TURN_PATH_BYTES} are accepted",
                    path.as_str().len()
                )));
            }
            project_path(&root, &cwd, path).map_err(CoreError::TurnPath)
        })
        .collect()
}

/// Paths a delivery's body names, already relative to the project root.
///
/// # Errors
///
/// [`CoreError::TurnPath`]: too many, too long, absolute, with `..`, empty
/// or holding a control character; the sentence names the path.
pub fn paths_from_root(given: &[String]) -> Result<Vec<Utf8PathBuf>, CoreError> {
    bounded(given.len())?;
    given
        .iter()
        .map(|path| {
            if path.len() > MAX_TURN_PATH_BYTES {
                return Err(CoreError::TurnPath(format!(
                    "a path of {} bytes was named; at most {MAX_TURN_PATH_BYTES} are accepted",
                    path.len()
                )));
            }
            relative_project_path(path).map_err(CoreError::TurnPath)
        })
        .collect()
}

impl Core {
    /// Every scoped rule of this project and of the home (only the home's
    /// when the project is the home or inside it).
    pub fn scoped_rules(&self) -> RuleSet {
        let selectors = self.selectors();
        let project = (!self.project_is_home()).then_some(selectors.project.as_path());
        load_rules(&selectors.home, project)
    }

    /// [`scoped_rules`](Self::scoped_rules), read through `snapshot`.
    pub fn scoped_rules_in(
        &self,
        snapshot: &mut vak_prompt_loader::Snapshot,
    ) -> std::sync::Arc<RuleSet> {
        let selectors = self.selectors();
        let project = (!self.project_is_home()).then_some(selectors.project.as_path());
        snapshot.rules(&selectors.home, project)
    }

    /// The scoped rules `paths` (relative to the project root) select,
    /// under `trust`, composed for the tail.
    pub fn scoped_tail(&self, paths: &[Utf8PathBuf], trust: Trust) -> (ScopedTail, RuleSet) {
        let set = self.scoped_rules();
        (compose_rules(&set, paths, trust), set)
    }
}

/// What a turn's ledger record says about the rules in force.
pub fn turn_rules(tail: &ScopedTail) -> Vec<TurnRule> {
    tail.active
        .iter()
        .map(|rule| TurnRule {
            name: rule.name.clone(),
            source: rule.provenance.source.clone(),
            layer: rule.provenance.layer.wire_name().to_owned(),
            block: rule.block.to_string(),
            digest: rule.digest.clone(),
            paths: rule.matched.iter().map(|m| m.path.to_string()).collect(),
        })
        .collect()
}

/// Every scoped rule of a project, and for a set of paths which rule
/// matched which path: what `explain --path`, `show --path` and the admin
/// API render. Every string is as read (escaping is the renderer's).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RulesReport {
    /// Every rule, active or not.
    pub rules: Vec<RuleSummary>,
    /// For each path asked about, the rules that matched it.
    pub paths: Vec<PathRules>,
    /// The rules in force for those paths, as a turn's ledger would record them.
    pub active: Vec<TurnRule>,
    /// The rules that matched but do not apply, and why.
    pub demoted: Vec<RuleNote>,
    /// Rule files left out, and why.
    pub skipped: Vec<RuleNote>,
    /// The scoped lines a tail would carry for those paths.
    pub tail: String,
}

/// One rule, for listings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleSummary {
    /// `payments`.
    pub name: String,
    /// Its file.
    pub source: Source,
    /// Its layer's wire name.
    pub layer: String,
    /// `guardrails` or `operating-rules`.
    pub block: String,
    /// The directory its globs are relative to, from the project root
    /// (empty: the root).
    pub base: String,
    /// Its globs, as written.
    pub globs: Vec<String>,
    /// Why it does not apply under the project's trust (an untrusted
    /// project's scoped operating rules), or `None` when it applies.
    pub demoted: Option<String>,
}

/// One path asked about and the rules (with the glob) that matched it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PathRules {
    /// The path, relative to the project root.
    pub path: String,
    /// `(rule file, glob)` for each rule that matched.
    pub matched: Vec<(Source, String)>,
}

/// A rule file and a sentence about it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleNote {
    /// The file.
    pub source: Source,
    /// What is wrong, or why it does not apply.
    pub reason: String,
}

impl Core {
    /// The [`RulesReport`] for `paths` (relative to the project root) under
    /// `trust`.
    pub fn rules_report(&self, paths: &[Utf8PathBuf], trust: Trust) -> RulesReport {
        rules_report_of(&self.scoped_rules(), paths, trust)
    }
}

/// [`Core::rules_report`] of rules already read.
pub fn rules_report_of(set: &RuleSet, paths: &[Utf8PathBuf], trust: Trust) -> RulesReport {
    let scoped = compose_rules(set, paths, trust);
    let source = |p: &vak_prompt_blocks::Provenance| p.source.clone();
    RulesReport {
        rules: set
            .rules
            .iter()
            .map(|r| RuleSummary {
                name: r.name.clone(),
                source: source(&r.provenance),
                layer: r.provenance.layer.wire_name().to_owned(),
                block: r.parsed.block.to_string(),
                base: r.base.to_string(),
                globs: r.parsed.globs.clone(),
                demoted: match vak_prompt_trust::prompt_verdict(
                    &r.provenance,
                    r.parsed.block,
                    trust,
                ) {
                    vak_prompt_trust::Verdict::Keep => None,
                    vak_prompt_trust::Verdict::Demote(reason) => Some(reason.explain().to_owned()),
                },
            })
            .collect(),
        paths: paths
            .iter()
            .map(|path| PathRules {
                path: path.to_string(),
                matched: set
                    .rules
                    .iter()
                    .filter_map(|r| {
                        r.matches(path)
                            .map(|glob| (source(&r.provenance), glob.to_owned()))
                    })
                    .collect(),
            })
            .collect(),
        active: turn_rules(&scoped),
        demoted: scoped
            .demoted
            .iter()
            .map(|d| RuleNote {
                source: source(&d.provenance),
                reason: d.reason.explain().to_owned(),
            })
            .collect(),
        skipped: set
            .skipped
            .iter()
            .map(|s| RuleNote {
                source: source(&s.provenance),
                reason: s.reason.clone(),
            })
            .collect(),
        tail: scoped.text,
    }
}

/// Every scoped rule's text as the budget counts it, rendered once for a
/// check that budgets many chains of one project.
#[derive(Debug, Clone, Default)]
pub struct RuleTexts {
    /// The scoped section with every rule active.
    rendered: String,
    /// Each rule's provenance, block and text.
    each: Vec<(
        std::sync::Arc<vak_prompt_blocks::Provenance>,
        vak_prompt_blocks::Block,
        String,
    )>,
}

impl RuleTexts {
    /// The texts of every rule of `set`.
    pub fn of(set: &RuleSet) -> Self {
        RuleTexts {
            rendered: vak_prompt_compose::render_all(set),
            each: vak_prompt_compose::all_rule_texts(set)
                .into_iter()
                .map(|(rule, text)| {
                    (
                        std::sync::Arc::clone(&rule.provenance),
                        rule.parsed.block,
                        text,
                    )
                })
                .collect(),
        }
    }
}

impl crate::Budget {
    /// This budget with every scoped rule of `set` counted as if all were
    /// active at once (the most a turn's tail can carry): their rendered
    /// text's tokens are added to the prefix's count the cap is checked
    /// against, and each rule file is listed under its layer, so a refusal
    /// names the rule files a user could shorten.
    #[must_use]
    pub fn with_scoped_rules(self, set: &RuleSet) -> Self {
        self.with_rule_texts(
            &RuleTexts::of(set),
            &mut vak_prompt_budget::TokenMemo::new(),
        )
    }

    /// [`with_scoped_rules`](Self::with_scoped_rules) of texts rendered
    /// once, counted through `memo`.
    #[must_use]
    pub fn with_rule_texts(
        mut self,
        texts: &RuleTexts,
        memo: &mut vak_prompt_budget::TokenMemo,
    ) -> Self {
        if texts.rendered.is_empty() {
            return self;
        }
        let encoding = self.report.encoding;
        let tokens = memo.count(encoding, &texts.rendered);
        self.scoped_rules_tokens = tokens;
        self.report.prefix_tokens = self.report.prefix_tokens.saturating_add(tokens);
        for (provenance, block, text) in &texts.each {
            let count = memo.count(encoding, text);
            let (layer, origin) = (provenance.layer, provenance.origin);
            let row = vak_prompt_budget::SourceTokens {
                block: *block,
                provenance: std::sync::Arc::clone(provenance),
                tokens: count,
            };
            match self
                .report
                .layers
                .iter_mut()
                .find(|l| l.layer == layer && l.origin == origin)
            {
                Some(existing) => {
                    existing.tokens += count;
                    existing.sources.push(row);
                }
                None => self.report.layers.push(vak_prompt_budget::LayerTokens {
                    layer,
                    origin,
                    tokens: count,
                    sources: vec![row],
                }),
            }
        }
        self
    }
}

/// The lints of the scoped rules: each glob that matches no file in the
/// project tree (misspelt, or left behind by a rename), and each rule file
/// left out. Sentences naming the file.
pub fn rule_lints(core: &Core, set: &RuleSet) -> Vec<String> {
    let mut lints: Vec<String> = set
        .skipped
        .iter()
        .map(|s| format!("scoped rule {s}"))
        .collect();
    if set.rules.is_empty() || core.project_is_home() {
        return lints;
    }
    let selectors = core.selectors();
    let (files, complete) =
        vak_prompt_loader::project_files(&selectors.project, &selectors.home, set);
    for (rule, glob) in set.unmatched_globs(&files) {
        lints.push(format!(
            "scoped rule `{}`: the glob `{}` matches nothing in the project tree (no file){}",
            vak_prompt_blocks::Escaped(&rule.provenance.source.to_string()),
            vak_prompt_blocks::Escaped(glob),
            if complete {
                ""
            } else {
                " (as far as the bounded walk looked)"
            }
        ));
    }
    lints
}

/// A scoped rule a session's turns carried whose text is not what the rule
/// file holds now (or whose file is gone): not drift (a rule is per turn),
/// but what `vak session diff` shows beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleChange {
    /// The rule's name.
    pub name: String,
    /// Its file.
    pub source: Source,
    /// The digest the last turn that carried it recorded.
    pub recorded: String,
    /// When that turn was.
    pub recorded_at: String,
    /// The digest of its text now; `None` when the file is gone or left out.
    pub current: Option<String>,
    /// The unified diff from the recorded text to the current one, or why
    /// it cannot be shown (the recorded text was not kept).
    pub diff: Result<String, String>,
}

/// The scoped rules `turns` carried whose text changed since the last turn
/// that carried each, against `set` as read now; texts from `history`.
pub fn rule_changes<'t>(
    history: &dyn vak_prompt_history::History,
    turns: impl IntoIterator<Item = &'t vak_session::Turn>,
    set: &RuleSet,
) -> Vec<RuleChange> {
    let mut last: Vec<(&TurnRule, &str)> = Vec::new();
    for turn in turns {
        for rule in &turn.rules {
            match last.iter_mut().find(|(r, _)| r.source == rule.source) {
                Some(slot) => *slot = (rule, turn.at.as_str()),
                None => last.push((rule, turn.at.as_str())),
            }
        }
    }
    let now = vak_prompt_compose::all_rule_texts(set);
    last.into_iter()
        .filter_map(|(rule, at)| {
            let current = now.iter().find(|(r, _)| r.provenance.source == rule.source);
            let current_digest = current.map(|(_, text)| vak_prompt_blocks::sha256_hex(text));
            if current_digest.as_deref() == Some(rule.digest.as_str()) {
                return None;
            }
            let old = history.get_object(&rule.digest).map_err(|e| {
                format!("the text this rule had at {at} was not kept ({e}), so it cannot be shown")
            });
            let name = format!("{} (turn {at})", rule.source);
            let diff = old.map(|old| match current {
                Some((_, new)) => {
                    vak_prompt_history::unified_diff(&name, &rule.source.to_string(), &old, new)
                }
                None => vak_prompt_history::unified_diff(&name, "(removed)", &old, ""),
            });
            Some(RuleChange {
                name: rule.name.clone(),
                source: rule.source.clone(),
                recorded: rule.digest.clone(),
                recorded_at: at.to_owned(),
                current: current_digest,
                diff,
            })
        })
        .collect()
}

/// A scoped rule file: the project's `<dir>/.vak/prompts/rules/<name>.md`,
/// or the home's `$VAK_HOME/.vak/prompts/rules/<name>.md` (which counts in
/// every project), what `vak prompts rule set` and `rule log` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTarget {
    /// The home's rules, or the project's.
    pub scope: crate::Scope,
    /// The directory whose `.vak` holds it, relative to the project root
    /// (`None`: the root; project scope only).
    pub dir: Option<Utf8PathBuf>,
    /// The rule's name.
    pub name: vak_prompt_blocks::Name,
}

impl RuleTarget {
    /// The rule file's path for `selectors`' home or project.
    pub fn path(&self, selectors: &crate::Selectors) -> Utf8PathBuf {
        let base = match (self.scope, &self.dir) {
            (crate::Scope::Shared, _) => selectors.home.clone(),
            (crate::Scope::Project, Some(dir)) => selectors.project.join(dir),
            (crate::Scope::Project, None) => selectors.project.clone(),
        };
        vak_prompt_loader::prompt_dir(&base)
            .join(vak_prompt_loader::RULES_DIR)
            .join(format!("{}.md", self.name))
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
            crate::Scope::Shared => &selectors.home,
            crate::Scope::Project => &selectors.project,
        }
    }
}

/// Why a rule save was refused. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum RuleSaveError {
    /// The text is not a rule: front matter missing or wrong.
    #[error("refusing to save `{}`: the text {error}", vak_prompt_blocks::Escaped(.path.as_str()))]
    BadRule {
        /// The file left unchanged.
        path: Utf8PathBuf,
        /// What is wrong with the text.
        error: vak_prompt_loader::RuleError,
    },
    /// The directory is not one a rule is read from.
    #[error(
        "`{}` is not a directory a rule is read from: name a directory inside the project, relative to its root (not hidden, not `node_modules` or `target`, at most 8 deep)",
        vak_prompt_blocks::Escaped(.0.as_str())
    )]
    BadDirectory(Utf8PathBuf),
    /// The project is the vak home: its rules are the home's, edited as files.
    #[error(
        "refusing to save `{}`: the project is the vak home or inside it; edit the home's rules as files",
        vak_prompt_blocks::Escaped(.0.as_str())
    )]
    ProjectInHome(Utf8PathBuf),
    /// The text holds a character no prompt may hold.
    #[error(
        "refusing to save `{}`: it holds {found}, which no prompt text may hold; nothing was written",
        vak_prompt_blocks::Escaped(.path.as_str())
    )]
    ForbiddenCharacter {
        /// The file left unchanged.
        path: Utf8PathBuf,
        /// The first such character.
        found: vak_prompt_blocks::ForbiddenChar,
    },
    /// Over the cap, or the chain could not be resolved, or the write or
    /// its history failed: as a block file's save says it.
    #[error(transparent)]
    Edit(#[from] crate::EditError),
}

impl From<CoreError> for RuleSaveError {
    fn from(error: CoreError) -> Self {
        RuleSaveError::Edit(crate::EditError::Core(error))
    }
}

impl From<vak_prompt_loader::SaveError> for RuleSaveError {
    fn from(error: vak_prompt_loader::SaveError) -> Self {
        RuleSaveError::Edit(crate::EditError::Save(error))
    }
}

impl From<crate::history::HistoryError> for RuleSaveError {
    fn from(error: crate::history::HistoryError) -> Self {
        RuleSaveError::Edit(crate::EditError::History(error))
    }
}

/// What a rule save did.
#[derive(Debug, Clone)]
pub struct RuleSaved {
    /// The write (`previous` is the digest before).
    pub outcome: vak_prompt_loader::SaveOutcome,
    /// The budget with the new text: the prefix and every rule.
    pub budget: crate::Budget,
    /// Whether a version was recorded (`false`: the file already held the
    /// text, or recording failed: then `unrecorded` says why).
    pub recorded: bool,
    /// Set when the file was written but its history was not.
    pub unrecorded: Option<String>,
}

impl Core {
    /// Save `text` as the rule file `target`, recorded in the version log
    /// like a block file: the text must parse as a rule, hold no forbidden
    /// character, and keep the prefix plus every rule within the cap
    /// (unless `unchecked` accepts it); the file is written atomically,
    /// confined to the project, unless it changed since `if_digest`.
    ///
    /// # Errors
    ///
    /// [`RuleSaveError`], naming the file; nothing is written.
    pub fn save_rule(
        &self,
        target: &RuleTarget,
        text: &str,
        if_digest: Option<&str>,
        who: &crate::history::Who,
        unchecked: crate::Unchecked,
    ) -> Result<RuleSaved, RuleSaveError> {
        let selectors = self.selectors();
        let path = target.path(selectors);
        let shared = target.scope == crate::Scope::Shared;
        if let Some(dir) = &target.dir
            && (shared || !vak_prompt_loader::is_layer_dir(dir))
        {
            return Err(RuleSaveError::BadDirectory(dir.clone()));
        }
        if !shared && self.project_is_home() {
            return Err(RuleSaveError::ProjectInHome(path));
        }
        let parsed =
            vak_prompt_loader::parse_rule(text).map_err(|error| RuleSaveError::BadRule {
                path: path.clone(),
                error,
            })?;
        if let Some(found) = vak_prompt_blocks::first_forbidden(text) {
            return Err(RuleSaveError::ForbiddenCharacter { path, found });
        }
        let root = target.root(selectors);
        if !shared {
            vak_prompt_loader::refuse_nested_link(&path, root, "write")?;
        }
        let _saving = crate::home::lock_saves(&selectors.home)
            .map_err(|e| RuleSaveError::Edit(crate::EditError::Home(e)))?;
        let current = vak_prompt_loader::current_digest(&path, root)?;
        let resolved = self.resolve()?;
        let set = self.scoped_rules();
        let before = crate::budget_of(&resolved).with_scoped_rules(&set);
        if let Some(outcome) =
            vak_prompt_loader::SaveOutcome::unchanged(path.clone(), current.as_deref(), text)
        {
            return Ok(RuleSaved {
                outcome,
                budget: before,
                recorded: false,
                unrecorded: None,
            });
        }
        let (layer, origin) = if shared {
            (
                vak_prompt_blocks::PromptLayer::Shared,
                vak_prompt_blocks::Origin::Home,
            )
        } else {
            (
                vak_prompt_blocks::PromptLayer::Project,
                vak_prompt_blocks::Origin::Project,
            )
        };
        let rule = vak_prompt_loader::ScopedRule {
            name: target.name.to_string(),
            provenance: std::sync::Arc::new(vak_prompt_blocks::Provenance::new(
                layer,
                origin,
                path.as_str(),
            )),
            base: target.dir.clone().unwrap_or_default(),
            parsed: parsed.clone(),
        };
        let with_rule = |set: &RuleSet| {
            let mut candidate = set.clone();
            match candidate
                .rules
                .iter_mut()
                .find(|r| r.provenance.source.path() == Some(path.as_path()))
            {
                Some(existing) => *existing = rule.clone(),
                None => candidate.rules.push(rule.clone()),
            }
            candidate
        };
        let candidate = with_rule(&set);
        let after = crate::budget_of(&resolved).with_scoped_rules(&candidate);
        // A rule counts in every chain of its project — a home's rule in
        // every trusted project's — so the candidate is checked on each.
        let mut over = crate::OverCap::default();
        let trust = self.trust()?;
        let mut left_out = self
            .rules_over_cap(self.selectors(), trust, (&set, &candidate), &mut over)
            .map_err(|e| RuleSaveError::Edit(e.into()))?;
        if shared {
            for project in self.other_trusted_projects()? {
                let base = crate::Selectors::new(selectors.home.clone(), project.clone());
                let current = load_rules(&selectors.home, Some(&project));
                let other = self
                    .rules_over_cap(
                        &base,
                        Trust::Trusted,
                        (&current, &with_rule(&current)),
                        &mut over,
                    )
                    .map_err(|e| RuleSaveError::Edit(e.into()))?;
                left_out.merge(other);
            }
        }
        let over_cap = !over.is_empty();
        if over_cap {
            crate::edit::refuse_over(
                &over,
                unchecked,
                "save",
                parsed.block,
                &path,
                &selectors.home,
            )?;
        }
        crate::edit::refuse_unchecked(&left_out, unchecked, "save", parsed.block, &path)?;
        let mut record = crate::history::VersionRecord::new(
            &target.key(self),
            parsed.block.wire_name(),
            crate::history::Action::Save,
        );
        record.tokens = Some(after.report.encoding.count(text));
        record.over_cap = over_cap;
        let (outcome, unrecorded) = crate::history::write_versioned(
            self,
            (&path, root),
            (text, if_digest),
            record,
            who,
            &resolved,
        )?;
        Ok(RuleSaved {
            outcome,
            budget: after,
            recorded: unrecorded.is_none(),
            unrecorded,
        })
    }

    /// Every chain of this project (each surface, role, directory layer
    /// and gateway chat with each role) that `candidate` in place of
    /// `current` as the project's scoped rules pushes over the cap, and
    /// what the walk left out. Rules add the same text to every chain, so
    /// a candidate that renders as the rules it replaces pushes none.
    fn rules_over_cap(
        &self,
        selectors: &crate::Selectors,
        trust: Trust,
        (current, candidate): (&RuleSet, &RuleSet),
        over: &mut crate::OverCap,
    ) -> Result<crate::ChainsLeftOut, CoreError> {
        use std::ops::ControlFlow;
        let (before_rules, after_rules) = (RuleTexts::of(current), RuleTexts::of(candidate));
        if after_rules.rendered == before_rules.rendered {
            return Ok(crate::ChainsLeftOut::default());
        }
        let base = crate::Selectors {
            agent: None,
            workdir: None,
            ..selectors.clone()
        };
        let mut inputs = crate::edit::CheckInputs::default();
        let plan = crate::ChainPlan::for_trust_in(&base, &mut inputs.snapshot);
        let opened = match Core::open(plan.base().clone()) {
            Ok(core) => core.pinned(),
            // Another trusted project removed meanwhile reaches nothing.
            Err(CoreError::Loader(vak_prompt_loader::LoaderError::ProjectMissing(_)))
                if selectors.project != self.selectors().project =>
            {
                return Ok(crate::ChainsLeftOut::default());
            }
            Err(error) => return Err(error),
        };
        let flow = plan.visit(|chain| {
            let core = opened.reselect(chain.selectors.clone());
            let Ok(loaded) = core.load_from(&mut inputs.snapshot) else {
                // A role or directory gone meanwhile reaches nothing.
                return ControlFlow::<CoreError, _>::Continue(None);
            };
            let resolved = core.compose_with(
                &loaded,
                trust,
                vak_prompt_compose::TailContext::now(),
                &mut inputs.compose,
            );
            let plain = crate::edit::budget_with(&resolved, &mut inputs.tokens);
            let before = plain
                .clone()
                .with_rule_texts(&before_rules, &mut inputs.tokens);
            let after = plain.with_rule_texts(&after_rules, &mut inputs.tokens);
            if crate::pushes_over(&before.report, &after.report) {
                over.push(crate::over_cap::OverChain::here(
                    crate::describe_chain(core.selectors(), trust),
                    after.report.clone(),
                ));
            }
            ControlFlow::Continue(Some(crate::edit::Visited {
                tokens: after.report.prefix_tokens,
                work: crate::edit::chain_work(&loaded, [&before.report, &after.report]),
            }))
        });
        match flow {
            ControlFlow::Continue(left_out) => Ok(left_out),
            ControlFlow::Break(error) => Err(error),
        }
    }

    /// The versions of the rule file `target` saved through vak, oldest
    /// first.
    ///
    /// # Errors
    ///
    /// The version log could not be read.
    pub fn rule_versions(
        &self,
        target: &RuleTarget,
    ) -> Result<vak_prompt_history::Versions, crate::history::HistoryError> {
        self.store().history().versions_of(&target.key(self))
    }
}
