//! The budget check of a change: every chain it reaches, in every trusted
//! project it reaches, composed in memory from one snapshot with the change
//! in place (a block file, a gateway key, an imported file), a chat's chain
//! bounded from its bot's where it can be (`crate::reach`).

#[allow(clippy::wildcard_imports)]
use super::*;

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
    pub(super) fn over_cap_of(
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
        let left_out = self.check_reach(
            target,
            &Change::File(target),
            text,
            cap,
            (&mut over, inputs),
        )?;
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
        let mut over = OverCap::default();
        let change = Change::Imported { path, after };
        let inputs = &mut CheckInputs::default();
        let left_out = self.check_reach(reach, &change, None, cap, (&mut over, inputs))?;
        Ok((over, left_out))
    }

    /// Budget `change` (to a file of `target`'s layer; `text` its new
    /// text) on every chain `target` reaches in this project, and for a
    /// file of the home in every other trusted project, counting against
    /// one work bound.
    fn check_reach(
        &self,
        target: &EditTarget,
        change: &Change<'_>,
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
        let plan =
            ChainPlan::for_change_in(self.selectors(), target, entries, &mut inputs.snapshot);
        // One snapshot for every project (the preview's): the home's files,
        // the gateway files and the roles' are read once for all of them.
        let mut left_out = self.check_plan(
            &plan,
            change,
            text,
            &trusts,
            None,
            (&mut work, over, inputs),
        )?;
        if target.scope != Scope::Shared {
            return Ok(left_out);
        }
        self.check_other_projects(
            |base, snapshot| {
                let base = Selectors {
                    surface: self.selectors().surface,
                    ..base.clone()
                };
                ChainPlan::for_change_in(&base, target, entries, snapshot)
            },
            change,
            text,
            (&mut work, &mut left_out, over, inputs),
        )?;
        Ok(left_out)
    }

    /// Budget `change` in every trusted project but this one, trusted, on
    /// the plan `plan_for` makes from each project's base selectors, against
    /// the same work: what a change to the home's own inputs (a shared
    /// file, a gateway key) reaches beyond this project. A project the work
    /// bound leaves no room for is not even walked, and is named.
    fn check_other_projects(
        &self,
        mut plan_for: impl FnMut(&Selectors, &mut Snapshot) -> ChainPlan,
        change: &Change<'_>,
        text: Option<&str>,
        (work, left_out, over, inputs): (
            &mut Work,
            &mut ChainsLeftOut,
            &mut OverCap,
            &mut CheckInputs,
        ),
    ) -> Result<(), EditError> {
        for project in self.other_trusted_projects()? {
            // Not even walked: walking is work too.
            if work.is_spent() {
                left_out.projects.push(project);
                continue;
            }
            let plan = plan_for(
                &Selectors::new(self.selectors().home.clone(), project.clone()),
                &mut inputs.snapshot,
            );
            let other = self.check_plan(
                &plan,
                change,
                text,
                &[Trust::Trusted],
                Some(&project),
                (&mut *work, &mut *over, &mut *inputs),
            )?;
            left_out.merge(other);
        }
        Ok(())
    }

    /// The projects of the trust store other than this one, in its order,
    /// each still a directory; one that is gone (deleted, moved, a mount
    /// not there now) is passed over with a warning, since no chain can be
    /// resolved there until it is back.
    pub(crate) fn other_trusted_projects(&self) -> Result<Vec<Utf8PathBuf>, CoreError> {
        let home = &self.selectors().home;
        let this = vak_fs::canonical(&self.selectors().project).ok();
        let store = vak_prompt_trust::TrustStore::load(home)?;
        let mut out = Vec::new();
        for listed in store.list() {
            let project = Utf8PathBuf::from(listed);
            if this.as_deref() == Some(project.as_std_path()) || project == self.selectors().project
            {
                continue;
            }
            if vak_fs::is_dir(&project) != Some(true) {
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
        let flow = plan.visit_within(work, |chain| {
            let selectors = chain.selectors;
            // A file's change leaves a chat's own texts as they are: its
            // chain is bounded from its bot's, and composed only when the
            // bound does not prove it within the cap (`reach`).
            if change.leaves_chat_texts()
                && let Some(visited) = reach.fits(chain, trusts.len(), snapshot)
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
                reach.note(
                    selectors,
                    index,
                    &resolved,
                    &after.report,
                    after.scoped_rules_tokens,
                    tokens,
                );
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
    /// Whether every gateway chat's own texts are as the snapshot read
    /// them once the change is in place, so a chat's chain can be bounded
    /// from its bot's (`crate::reach`): a file's change and a bot key's
    /// do; a chat key's change is that chat's own text.
    fn leaves_chat_texts(&self) -> bool {
        match self {
            Change::File(_) => true,
            Change::Gateway { provenance, .. } => matches!(
                &provenance.source,
                vak_prompt_blocks::Source::Gateway(key) if key.chat.is_none()
            ),
            Change::Imported { .. } => false,
        }
    }

    /// What a refusal names: the file, or the gateway key.
    fn path(&self, selectors: &Selectors) -> Utf8PathBuf {
        match self {
            Change::File(target) => target.path(selectors),
            Change::Gateway { provenance, .. } => Utf8PathBuf::from(provenance.source.to_string()),
            Change::Imported { path, .. } => (*path).to_owned(),
        }
    }
}

impl Core {
    /// Budget a change of one gateway key on every chain it reaches,
    /// in this core's project with its trust and in every other trusted
    /// project trusted (a gateway key is the home's, like a shared file): the
    /// chat's chain for a chat's key; for a bot's key the bot's chain and
    /// the chain of every chat of that bot with prompts of its own (each
    /// takes the bot's text unless it has its own; bounded from the bot's
    /// chain with the change in place, as a file's change bounds them).
    /// Each on the chat surface, with no role and with every role that has
    /// a directory, under one work bound of [`WORK_PER_CAP_TOKEN`] times
    /// `cap`.
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
        let mut work = Work::for_cap(cap);
        // One snapshot for every project: the home's files and the gateway
        // files are read once for all of them.
        let inputs = &mut CheckInputs::default();
        let mut left_out = self.check_plan(
            &plan,
            &reach,
            text,
            &[trust],
            None,
            (&mut work, over, inputs),
        )?;
        // A gateway key is the home's, as a shared file is: every trusted
        // project's chats take it.
        self.check_other_projects(
            |base, _| ChainPlan::for_gateway(base, bot, chat),
            &reach,
            text,
            (&mut work, &mut left_out, over, inputs),
        )?;
        let path = reach.path(self.selectors());
        let home = &self.selectors().home;
        refuse_over(over, unchecked, change, block, &path, home)?;
        refuse_unchecked(&left_out, unchecked, change, block, &path)?;
        Ok(left_out)
    }
}
