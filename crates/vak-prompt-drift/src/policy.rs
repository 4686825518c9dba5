use serde::Serialize;

use crate::DriftReport;

/// Who chose the session being resumed; the resume table keys on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "path", rename_all = "kebab-case")]
pub enum ResumePath {
    /// A gateway chat's implicit binding: the operator never named the
    /// session, so a changed prompt starts a new one.
    ChatBinding,
    /// `vak exec --session <id>`: the user named the session, so running
    /// different instructions silently would be the wrong surprise.
    NamedSession {
        /// `--accept-drift` was given.
        accept_drift: bool,
    },
}

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResumeDecision {
    /// No drift (or an unknown baseline): resume on the frozen prefix.
    Continue,
    /// Keep the old ledger untouched, create a fresh session from the
    /// current resolution, rebind, and write a `config-change` event.
    Rotate,
    /// Fail closed: name each change and exit 3.
    Refuse,
    /// Run on the frozen prefix and record a `drift-accepted` record.
    ProceedOnFrozen,
}

/// Doc 45's resume table as a function.
pub fn decide(path: ResumePath, report: &DriftReport) -> ResumeDecision {
    if !report.is_drifted() {
        return ResumeDecision::Continue;
    }
    match path {
        ResumePath::ChatBinding => ResumeDecision::Rotate,
        ResumePath::NamedSession {
            accept_drift: false,
        } => ResumeDecision::Refuse,
        ResumePath::NamedSession { accept_drift: true } => ResumeDecision::ProceedOnFrozen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff;
    use vak_prompt_blocks::PromptLayerDescriptor;

    fn d(digest: &str) -> PromptLayerDescriptor {
        PromptLayerDescriptor {
            block: "identity".into(),
            layer: "shared".into(),
            source: None,
            digest: digest.into(),
            bytes: 1,
            signed_by: None,
        }
    }

    #[test]
    fn the_resume_table() {
        let drifted = diff(&[d("a")], &[d("b")]);
        let same = diff(&[d("a")], &[d("a")]);
        let unknown = diff(&[], &[d("b")]);
        let named = |accept_drift| ResumePath::NamedSession { accept_drift };
        let rows = [
            (ResumePath::ChatBinding, &drifted, ResumeDecision::Rotate),
            (ResumePath::ChatBinding, &same, ResumeDecision::Continue),
            (ResumePath::ChatBinding, &unknown, ResumeDecision::Continue),
            (named(false), &drifted, ResumeDecision::Refuse),
            (named(true), &drifted, ResumeDecision::ProceedOnFrozen),
            (named(false), &same, ResumeDecision::Continue),
            (named(true), &same, ResumeDecision::Continue),
            (named(false), &unknown, ResumeDecision::Continue),
        ];
        for (path, report, expected) in rows {
            assert_eq!(decide(path, report), expected, "{path:?}");
        }
    }
}
