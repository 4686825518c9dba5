//! `vak trust --preview`: what trusting a project would change, block by
//! block and config key by key, before anything is written.

use super::*;
#[allow(clippy::wildcard_imports)]
use vak_prompt_blocks::Source;

/// One block that trusting a project would change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockPreview {
    /// The block's wire name.
    pub block: String,
    /// `added` (empty before), `replaced`, or `removed`.
    pub change: &'static str,
    /// The block's composed text now (untrusted).
    pub before: String,
    /// The block's composed text once trusted.
    pub after: String,
    /// A unified diff from `before` to `after`.
    pub diff: String,
}

/// A change trusting would make on chains other than the one named.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ElsewherePreview {
    /// The change.
    #[serde(flatten)]
    pub preview: BlockPreview,
    /// Every chain it shows on (`surface chat, agent reviewer`, …).
    pub chains: Vec<String>,
}

/// What `vak trust --preview` shows: nothing is written.
#[derive(Debug, Clone)]
pub struct TrustPreview {
    /// Every block whose text trusting would change on the chain named.
    pub blocks: Vec<BlockPreview>,
    /// Every other change trusting would make, on the other chains it
    /// reaches (each surface, role and directory layer): a directory
    /// layer's identity or a role's rules are shown too, not only what the
    /// named chain would show.
    pub elsewhere: Vec<ElsewherePreview>,
    /// The budget before and after, every chain trusting would push over
    /// the cap and what was left out: [`crate::trust_budget`]'s, the one
    /// `vak trust` decides by, so the preview says what trust would do.
    pub budget: crate::TrustBudget,
    /// The chains whose changes are not shown in `elsewhere`, when some
    /// are not: each chain shown is composed both ways, so a home of many
    /// chats or roles stops listing at the work bound (the budget above
    /// still covers every chain).
    pub changes_left_out: Option<String>,
    /// The config keys the project sets that would apply once trusted
    /// (`model`, `max_tokens`, …), each with its file.
    pub config_keys: Vec<(String, Source)>,
}

/// Every block whose text differs between `untrusted` and `trusted`.
fn block_changes(untrusted: &ResolvedPrompt, trusted: &ResolvedPrompt) -> Vec<BlockPreview> {
    let mut blocks = Vec::new();
    for after in &trusted.blocks {
        let before = untrusted
            .block(after.block)
            .map(|b| b.text.as_str())
            .unwrap_or("");
        if after.text == before {
            continue;
        }
        let name = after.block.wire_name();
        blocks.push(BlockPreview {
            block: name.to_owned(),
            change: match (before.is_empty(), after.text.is_empty()) {
                (true, _) => "added",
                (false, true) => "removed",
                (false, false) => "replaced",
            },
            diff: unified_diff(
                &format!("{name} (untrusted, now)"),
                &format!("{name} (trusted)"),
                before,
                &after.text,
            ),
            before: before.to_owned(),
            after: after.text.to_string(),
        });
    }
    blocks
}

/// What trusting `selectors.project` would change: on the chain named, on
/// every other chain it reaches (see [`crate::ChainPlan::for_trust`]), and to the
/// budget of each. Writes nothing.
///
/// # Errors
///
/// When the named chain cannot be loaded at all.
pub fn trust_preview(selectors: &Selectors) -> Result<TrustPreview, crate::CoreError> {
    trust_preview_with(selectors, |_| {})
}

/// [`trust_preview`], calling `progress` with the number of chains composed
/// so far after each one, for a caller that shows progress.
///
/// # Errors
///
/// As [`trust_preview`].
pub fn trust_preview_with(
    selectors: &Selectors,
    mut progress: impl FnMut(usize),
) -> Result<TrustPreview, crate::CoreError> {
    use crate::{TrustBudget, describe_chain};
    use vak_prompt_trust::Trust;
    let mut preview: Option<TrustPreview> = None;
    let mut chains = 0;
    let left_out = crate::walk_trust_chains(selectors, |step| {
        chains += 1;
        progress(chains);
        let changes = block_changes(&step.untrusted, &step.trusted);
        let over = step
            .over
            .map(|(chain, report)| crate::OverChain::here(chain, *report));
        // The first chain is the one named.
        let Some(preview) = &mut preview else {
            let config_keys =
                config_keys_applied(&step.untrusted, &step.trusted, &step.before, &step.after);
            preview = Some(TrustPreview {
                blocks: changes,
                elsewhere: Vec::new(),
                budget: TrustBudget {
                    before: step.before,
                    after: step.after,
                    over: over
                        .into_iter()
                        .fold(crate::OverCap::default(), |mut all, o| {
                            all.push(o);
                            all
                        }),
                    left_out: crate::ChainsLeftOut::default(),
                },
                changes_left_out: None,
                config_keys,
            });
            return std::ops::ControlFlow::Continue(());
        };
        if let Some(over) = over {
            preview.budget.over.push(over);
        }
        let chain = describe_chain(step.core.selectors(), Trust::Untrusted);
        for change in changes {
            let same = |p: &BlockPreview| {
                p.block == change.block && p.before == change.before && p.after == change.after
            };
            if preview.blocks.iter().any(same) {
                continue;
            }
            match preview.elsewhere.iter_mut().find(|e| same(&e.preview)) {
                Some(e) => e.chains.push(chain.clone()),
                None => preview.elsewhere.push(ElsewherePreview {
                    preview: change,
                    chains: vec![chain.clone()],
                }),
            }
        }
        std::ops::ControlFlow::Continue(())
    })?;
    let mut preview = preview.ok_or_else(|| {
        crate::CoreError::Loader(vak_prompt_loader::LoaderError::ProjectMissing(
            selectors.project.clone(),
        ))
    })?;
    let not_listed = left_out.over_work.saturating_add(left_out.gateway);
    preview.changes_left_out = (not_listed > 0).then(|| {
        format!(
            "the changes on {not_listed} more chain{} are not listed: composing each both ways would take too long (the budget above covers every chain)",
            if not_listed == 1 { "" } else { "s" }
        )
    });
    // The verdict is trust's own: chats bounded from their bots, chains
    // counted untrusted only where trusted they are over.
    preview.budget = crate::trust_budget(selectors)?;
    Ok(preview)
}

/// The config keys an untrusted project sets that trusting it would apply,
/// each with its file: every key demoted untrusted and not trusted, and
/// the two an untrusted project is only warned about, `model` (ignored)
/// and `prompts.max_tokens` (which may only lower the cap), when trusting
/// changes what they decide.
fn config_keys_applied(
    untrusted: &ResolvedPrompt,
    trusted: &ResolvedPrompt,
    before: &crate::Budget,
    after: &crate::Budget,
) -> Vec<(String, Source)> {
    let mut keys: Vec<(String, Source)> = untrusted
        .demoted
        .iter()
        .filter_map(|d| {
            let key = d.config_key.clone()?;
            let still = trusted
                .demoted
                .iter()
                .any(|t| t.config_key.as_deref() == Some(key.as_str()));
            (!still).then(|| (key, d.provenance.source.clone()))
        })
        .collect();
    if let Some(model) = &trusted.config.model
        && model.origin == vak_prompt_blocks::Origin::Project
        && untrusted.config.model.as_ref() != Some(model)
    {
        keys.push(("model".to_owned(), model.source.clone()));
    }
    if after.cap.tokens != before.cap.tokens
        && let Some(file) = &after.cap.file
    {
        let source = vak_prompt_blocks::Source::ConfigKey {
            file: file.clone().into(),
            key: "prompts.max_tokens".into(),
            name: None,
        };
        keys.push(("prompts.max_tokens".to_owned(), source));
    }
    keys
}
