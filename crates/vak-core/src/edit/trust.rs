//! What trusting a project does to the budget: every chain of the project
//! composed untrusted and trusted, and the chains trust would push over the
//! cap; untrusting.

#[allow(clippy::wildcard_imports)]
use super::*;

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
    let left_out = walk_chains(selectors, Chats::Bounded, |step| {
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
    visit: impl FnMut(TrustStep<'_>) -> std::ops::ControlFlow<()>,
) -> Result<ChainsLeftOut, CoreError> {
    walk_chains(selectors, Chats::Composed, visit)
}

/// How [`walk_chains`] takes a gateway chat's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chats {
    /// Each composed and handed to the visitor (a preview shows each).
    Composed,
    /// Bounded from its bot's chain (`crate::reach`), and composed only
    /// when the bound does not prove trust leaves it within the cap: a
    /// budget needs only the chains trust could push over, and a home with
    /// thousands of chats would otherwise spend the work bound on them.
    /// Any other chain is composed untrusted only when its trusted count is
    /// not within the cap (a save's check does the same), and handed to the
    /// visitor only then: the budget collects only chains over.
    Bounded,
}

/// `after`, judged by the lower of its cap and `cap_before`: what a chain
/// must be within for trust not to push it over ([`trust_pushes_over`]).
fn within_both(after: &BudgetReport, cap_before: usize) -> BudgetReport {
    BudgetReport {
        cap: after.cap.min(cap_before),
        ..after.clone()
    }
}

/// [`walk_trust_chains`], with chat chains taken as `chats` says.
fn walk_chains(
    selectors: &Selectors,
    chats: Chats,
    mut visit: impl FnMut(TrustStep<'_>) -> std::ops::ControlFlow<()>,
) -> Result<ChainsLeftOut, CoreError> {
    use std::ops::ControlFlow;
    let base = Selectors {
        agent: None,
        ..selectors.clone()
    };
    let CheckInputs {
        mut snapshot,
        mut tokens,
        mut compose,
        mut reach,
    } = CheckInputs::default();
    let plan = ChainPlan::for_trust_in(&base, &mut snapshot);
    // Bounded by the cap in force before trust (the project's config
    // cannot buy its layers more work than the user's cap gives).
    let cap = Core::open(selectors.clone())?.budget()?.1.report.cap;
    let mut named = true;
    let opened = Core::open(plan.base().clone())?.pinned();
    // Every chain's budget covers every scoped rule of the project.
    let rules = crate::rules::RuleTexts::of(&opened.scoped_rules_in(&mut snapshot));
    let mut cap_before: Option<usize> = None;
    let flow = plan.visit_within(&mut Work::for_cap(cap), |chain| {
        let first = std::mem::take(&mut named);
        // The named chain is always composed: its budget is the one shown.
        if chats == Chats::Bounded
            && !first
            && let Some(visited) = reach.fits(chain, 1, &mut snapshot)
        {
            return ControlFlow::Continue(Some(visited));
        }
        let core = opened.reselect(chain.selectors.clone());
        let loaded = match core.load_from(&mut snapshot) {
            Ok(loaded) => loaded,
            Err(error) if first => return ControlFlow::Break(Err(error)),
            Err(_) => return ControlFlow::Continue(None),
        };
        let trusted = core.compose_with(&loaded, Trust::Trusted, TailContext::now(), &mut compose);
        let after = budget_with(&trusted, &mut tokens).with_rule_texts(&rules, &mut tokens);
        if chats == Chats::Bounded
            && let Some(cap_before) = cap_before
        {
            // Trust pushes a chain over only past the cap after trust or,
            // where the project's config raises it, past the one before
            // ([`trust_pushes_over`]); within the lower of the two, a chain
            // needs no untrusted count, and bounds its chats the same way.
            let within = within_both(&after.report, cap_before);
            reach.note(
                chain.selectors,
                0,
                &trusted,
                &within,
                after.scoped_rules_tokens,
                &mut tokens,
            );
            if !within.is_over() {
                return ControlFlow::Continue(Some(Visited {
                    tokens: after.report.prefix_tokens,
                    work: chain_work(&loaded, [&after.report]),
                }));
            }
        }
        let untrusted =
            core.compose_with(&loaded, Trust::Untrusted, TailContext::now(), &mut compose);
        let before = budget_with(&untrusted, &mut tokens).with_rule_texts(&rules, &mut tokens);
        // Every chain of the project has the same cap before trust (the
        // home's config, lowered only by the project's own), read from the
        // named chain, which is always composed both ways.
        if first {
            cap_before = Some(before.report.cap);
            if chats == Chats::Bounded {
                let within = within_both(&after.report, before.report.cap);
                reach.note(
                    chain.selectors,
                    0,
                    &trusted,
                    &within,
                    after.scoped_rules_tokens,
                    &mut tokens,
                );
            }
        }
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
