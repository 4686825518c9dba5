//! `vak prompts check --all`: every chain of a project budgeted at once, as
//! it stands, with one summary of every chain over its cap.

use camino::Utf8PathBuf;
use vak_prompt_compose::TailContext;
use vak_prompt_loader::LoaderError;

use crate::edit::{ChainPlan, ChainsLeftOut, CheckInputs, Visited, Work, budget_with, chain_work};
use crate::over_cap::{OverCap, OverChain};
use crate::{Core, CoreError, Selectors, describe_chain, layer_directories};

/// What checking every chain of a project found.
#[derive(Debug, Clone)]
pub struct CheckAll {
    /// How many chains were budgeted.
    pub chains: usize,
    /// The project's directory layers (each directory with its own
    /// `.vak/prompts/` or interop file), relative to the root.
    pub directories: Vec<Utf8PathBuf>,
    /// Every chain over its cap, grouped and largest first.
    pub over: OverCap,
    /// The chains that were not budgeted (see [`ChainsLeftOut`]).
    pub left_out: ChainsLeftOut,
}

/// Budget every chain of `selectors.project` as it stands, with the trust
/// it has: every surface, with no role and every role that has a
/// directory, at the root and in every directory layer, and each gateway
/// bot and chat, as a save or `vak trust` plans them
/// ([`ChainPlan::for_trust`]), under a work bound of
/// [`crate::WORK_PER_CAP_TOKEN`] times the root chain's cap. Writes
/// nothing; never stops at the first chain over.
///
/// # Errors
///
/// When the root chain cannot be loaded at all.
pub fn check_all(selectors: &Selectors) -> Result<CheckAll, CoreError> {
    use std::ops::ControlFlow;
    let base = Selectors {
        agent: None,
        workdir: None,
        ..selectors.clone()
    };
    let cap = Core::open(base.clone())?.budget()?.1.report.cap;
    let CheckInputs {
        mut snapshot,
        mut tokens,
        mut compose,
        mut reach,
    } = CheckInputs::default();
    let plan = ChainPlan::for_trust_in(&base, &mut snapshot);
    let mut over = OverCap::default();
    let mut chains = 0;
    let opened = Core::open(plan.base().clone())?.pinned();
    // Every chain of the project has its trust: the trust store is read once.
    let trust = opened.trust()?;
    // Every chain's budget covers every scoped rule of the project.
    let rules = crate::rules::RuleTexts::of(&opened.scoped_rules_in(&mut snapshot));
    let flow = plan.visit_within(&mut Work::for_cap(cap), |chain| {
        // A chat's chain is bounded from its bot's (`crate::reach`) and
        // composed only when the bound does not prove it within the cap:
        // only a composed chain is ever reported over.
        if let Some(visited) = reach.fits(chain, 1, &mut snapshot) {
            chains += 1;
            return ControlFlow::Continue(Some(visited));
        }
        let core = opened.reselect(chain.selectors.clone());
        let loaded = match core.load_from(&mut snapshot) {
            Ok(loaded) => loaded,
            // A role directory removed meanwhile reaches nothing.
            Err(CoreError::Loader(
                LoaderError::UnknownRole { .. } | LoaderError::RoleRefused { .. },
            )) => {
                return ControlFlow::Continue(None);
            }
            Err(error) => return ControlFlow::Break(error),
        };
        let resolved = core.compose_with(&loaded, trust, TailContext::now(), &mut compose);
        let budget = budget_with(&resolved, &mut tokens).with_rule_texts(&rules, &mut tokens);
        reach.note(
            chain.selectors,
            0,
            &resolved,
            &budget.report,
            budget.scoped_rules_tokens,
            &mut tokens,
        );
        chains += 1;
        if budget.report.is_over() {
            // Named without ", project trusted": every chain here has the
            // project's own trust.
            over.push(OverChain::here(
                describe_chain(core.selectors(), vak_prompt_trust::Trust::Untrusted),
                budget.report.clone(),
            ));
        }
        ControlFlow::Continue(Some(Visited {
            tokens: budget.report.prefix_tokens,
            work: chain_work(&loaded, [&budget.report]),
        }))
    });
    let left_out = match flow {
        ControlFlow::Continue(left_out) => left_out,
        ControlFlow::Break(error) => return Err(error),
    };
    let directories = layer_directories(&base);
    Ok(CheckAll {
        chains,
        directories,
        over,
        left_out,
    })
}
