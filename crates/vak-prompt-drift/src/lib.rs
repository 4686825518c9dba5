//! The difference between a session's frozen prompt and the current
//! resolution, and what each way of resuming a session does about it.
//!
//! Pure: no I/O, no composition. The caller resolves the current prompt and
//! reads the ledger; this crate compares descriptors and decides.
//!
//! | Resume path | Drifted | Undrifted |
//! |---|---|---|
//! | [`ResumePath::ChatBinding`] | [`ResumeDecision::Rotate`]: fresh session, old ledger intact, `config-change` event | [`ResumeDecision::Continue`] |
//! | [`ResumePath::NamedSession`] | [`ResumeDecision::Refuse`] (exit 3), or with `accept_drift` [`ResumeDecision::ProceedOnFrozen`] and a `drift-accepted` record | [`ResumeDecision::Continue`] |

mod diff;
mod policy;

pub use diff::{DriftReport, Pair, diff, pair};
pub use policy::{ResumeDecision, ResumePath, decide};
pub use vak_prompt_blocks::{ChangeKind, LayerChange};
