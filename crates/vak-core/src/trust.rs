//! Trusting a project: the one function `vak trust` runs. The budget of
//! every chain trusting reaches is checked first; every chain it would push
//! over the cap is named in one refusal, unless the user accepts going over
//! (`--over-budget`), which is then written to the security audit log.

use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::Escaped;
use vak_session::{ChainOverCap, SecurityEvent, TrustOverCap};
use vak_store_file::AuditLog;

use crate::edit::{TrustBudget, Unchecked, trust_budget};
use crate::history::Who;
use crate::over_cap::{OverCap, shared_config};
use crate::{CoreError, Selectors};

/// Why a project was not trusted. The trust store is unchanged.
#[derive(Debug, Error)]
pub enum TrustRefusal {
    /// Trusting would push chains over the cap; every one is named.
    #[error(
        "refusing to trust `{}`: the trust store is unchanged. {}{}",
        Escaped(.project.as_str()),
        .over.summary(.config, "--over-budget"),
        .raised_to.map_or_else(String::new, |cap| format!(". Trusting is judged by the cap in force before it: the project's config would raise it to {cap} once trusted"))
    )]
    OverBudget {
        /// The project.
        project: Utf8PathBuf,
        /// The cap the project's own config would bring once trusted, when
        /// it is larger than the one the chains are judged by.
        raised_to: Option<usize>,
        /// Every chain over the cap once trusted.
        over: Box<OverCap>,
        /// The shared config file that sets the cap.
        config: Utf8PathBuf,
    },
    /// Not every chain could be budgeted, and going ahead was not asked.
    #[error(
        "refusing to trust `{}`: {why}; a layer not looked at could be over the cap, and the trust store is unchanged. Check the chains named, or pass --over-budget to trust it anyway",
        Escaped(.project.as_str())
    )]
    Unchecked {
        /// The project.
        project: Utf8PathBuf,
        /// What was not budgeted, and why.
        why: String,
    },
    /// The chain, the trust store or the audit log could not be read or
    /// written.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The home's save lock could not be taken.
    #[error(transparent)]
    Home(#[from] crate::home::HomeError),
}

/// What [`trust_project`] did.
#[derive(Debug)]
pub struct Trusted {
    /// The trust store's key for the project.
    pub key: String,
    /// The budget before and after, on the chain named (the working
    /// directory's, when `selectors.workdir` is set) and every chain over.
    pub budget: TrustBudget,
    /// Set when the audit event of a trust over the cap could not be
    /// written: the sentence to warn with (the project is trusted).
    pub unrecorded: Option<String>,
}

impl Trusted {
    /// Whether the project was trusted with chains over the cap.
    pub fn over_cap(&self) -> bool {
        !self.budget.over.is_empty()
    }
}

/// Trust `selectors.project`, after budgeting every chain trusting reaches
/// ([`crate::ChainPlan::for_trust`]), under the home's save lock so no save
/// slips in between. Refused, naming every chain over the cap, unless
/// `unchecked` accepts; then trusted, and a `trust-over-cap` event naming
/// those chains is appended to the home's security audit log.
///
/// # Errors
///
/// [`TrustRefusal::OverBudget`], [`TrustRefusal::Unchecked`], or
/// [`TrustRefusal::Core`] when the chain or the trust store cannot be read.
pub fn trust_project(
    selectors: &Selectors,
    unchecked: Unchecked,
    who: &Who,
) -> Result<Trusted, TrustRefusal> {
    let home = &selectors.home;
    let mut store = vak_prompt_trust::TrustStore::load(home).map_err(CoreError::from)?;
    let _saving = crate::home::lock_saves(home)?;
    let budget = trust_budget(selectors)?;
    let project = selectors.project.clone();
    if unchecked == Unchecked::Refuse {
        if !budget.over.is_empty() {
            let raised_to =
                Some(budget.after.report.cap).filter(|&after| after > budget.before.report.cap);
            return Err(TrustRefusal::OverBudget {
                project,
                raised_to,
                over: Box::new(budget.over),
                config: shared_config(home),
            });
        }
        if let Some(why) = budget.unproven() {
            return Err(TrustRefusal::Unchecked { project, why });
        }
    }
    let key = store.trust(&project).map_err(CoreError::from)?;
    let unrecorded = (!budget.over.is_empty())
        .then(|| {
            let event = SecurityEvent::TrustOverCap(TrustOverCap {
                at: vak_session::now_rfc3339(),
                project: key.clone(),
                who: who.label(),
                chains: budget
                    .over
                    .chains()
                    .iter()
                    .map(|c| ChainOverCap {
                        chain: c.chain.clone(),
                        prefix_tokens: c.report.prefix_tokens,
                        cap: c.report.cap,
                    })
                    .collect(),
            });
            AuditLog::new(home).append(&event).err().map(|error| {
                format!(
                    "trusted over the cap, but the audit event could not be written to `{}`: {error}",
                    Escaped(AuditLog::new(home).path().as_str())
                )
            })
        })
        .flatten();
    Ok(Trusted {
        key,
        budget,
        unrecorded,
    })
}
