//! What changed in a session's instructions: each frozen text paired with
//! the current one (or the one a later turn recorded), kept texts diffed.

#[allow(clippy::wildcard_imports)]
use super::*;
use vak_prompt_blocks::Source;

/// One block and layer whose text differs between a frozen contract and
/// the current resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextChange {
    /// The block's wire name.
    pub block: String,
    /// The layer's wire name (the current one when the winner moved).
    pub layer: String,
    /// The source (path or gateway key), current when present, else frozen.
    pub source: Option<Source>,
    /// The frozen digest (`None`: the layer was added since).
    pub frozen: Option<String>,
    /// The current digest (`None`: the layer was removed since).
    pub current: Option<String>,
    /// The unified diff, or why there is none (`text not kept`).
    pub diff: Result<String, String>,
    /// What happened to the block and layer.
    pub kind: TextChangeKind,
    /// The layer the frozen text came from (`None`: added since).
    pub frozen_layer: Option<String>,
    /// The source the frozen text came from (`None`: added since, or a
    /// layer without a source).
    pub frozen_source: Option<Source>,
}

/// What happened to one block and layer since a contract froze.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextChangeKind {
    /// The same layer and source, another text.
    Changed,
    /// A layer that contributes now and did not then.
    Added,
    /// A layer that contributed then and does not now.
    Removed,
    /// A text now contributed from another layer or source: a
    /// narrowest-wins block whose winning layer moved (the session froze
    /// the shared identity, now the project's wins), from the frozen
    /// winner's text to the current one's; or, in any block, the same text
    /// from another place (a guardrail file moved from the project root
    /// into a directory layer), with an empty diff.
    Moved,
    /// The same text in the same layer, at another place in its block's
    /// order (a skill listed earlier, a guardrail file read before another):
    /// drift, though no text changed.
    Reordered,
}

impl TextChangeKind {
    /// The word `--format json` and the admin API give.
    pub fn as_str(self) -> &'static str {
        match self {
            TextChangeKind::Changed => "changed",
            TextChangeKind::Added => "added",
            TextChangeKind::Removed => "removed",
            TextChangeKind::Moved => "moved",
            TextChangeKind::Reordered => "reordered",
        }
    }
}

/// Whether `block` (a wire name) has one winner per chain, so a frozen
/// winner and a current one of another layer are one change, not two.
fn single_winner(block: &str) -> bool {
    block
        .parse::<Block>()
        .is_ok_and(|b| b.composition() == vak_prompt_blocks::Composition::NarrowestWins)
}

/// Per block and layer, the text diff between `frozen` descriptors and the
/// `current` resolution's, paired as the drift check pairs them
/// ([`vak_prompt_drift::pair`]). A text removed from one place and added at
/// another of the same block is one [`TextChangeKind::Moved`] change naming
/// both layers and sources: for a narrowest-wins block whatever the two
/// texts (the winner moved), for any other when the text is the same (a
/// file moved to another layer or directory). Nothing is reported for what
/// the drift check ignores (a home moved, a file moved between homes).
pub fn text_changes(
    history: &dyn History,
    frozen: &[PromptLayerDescriptor],
    current: &ResolvedPrompt,
) -> Vec<TextChange> {
    // Descriptors are made one per contributor, each followed by one per
    // file it imports, in this same order.
    let texts: Vec<Result<String, String>> = current
        .blocks
        .iter()
        .flat_map(|b| b.contributors.iter())
        .flat_map(|c| std::iter::once(c).chain(&c.imports))
        .map(|c| Ok(c.text.to_string()))
        .collect();
    pair_and_diff(history, frozen, &current.descriptors, &texts, "now")
}

/// Per block and layer, the text diff between two frozen contracts (a
/// rotation's old and new session), both sides read from the object store
/// and paired as [`text_changes`] pairs them.
pub fn contract_changes(
    history: &dyn History,
    old: &[PromptLayerDescriptor],
    new: &[PromptLayerDescriptor],
) -> Vec<TextChange> {
    let texts: Vec<Result<String, String>> =
        new.iter().map(|d| text_of(history, &d.digest)).collect();
    pair_and_diff(history, old, new, &texts, "new")
}

fn text_of(history: &dyn History, digest: &str) -> Result<String, String> {
    match history.get_object(digest) {
        Ok(text) => Ok(text),
        Err(error) if error.is_not_kept() => Err(format!("text not kept ({digest})")),
        Err(error) => Err(error.to_string()),
    }
}

/// `frozen` against `current` (whose texts are `texts`, one per
/// descriptor), as [`text_changes`] describes.
fn pair_and_diff(
    store: &dyn History,
    frozen: &[PromptLayerDescriptor],
    current: &[PromptLayerDescriptor],
    texts: &[Result<String, String>],
    when: &str,
) -> Vec<TextChange> {
    let text = |i: usize| {
        texts
            .get(i)
            .cloned()
            .unwrap_or_else(|| Err("text not resolved".to_owned()))
    };
    let pairs = vak_prompt_drift::pair(frozen, current);
    // The current descriptors no frozen one pairs with: each is added,
    // unless a frozen one left without a partner moved there.
    let mut added: Vec<Option<usize>> = pairs
        .iter()
        .filter(|p| p.frozen.is_none())
        .map(|p| p.current)
        .collect();
    let mut out = Vec::new();
    for p in &pairs {
        let Some(fi) = p.frozen else { continue };
        let f = &frozen[fi];
        let (ci, kind) = match p.current {
            Some(ci) if current[ci].digest == f.digest => continue,
            Some(ci) => (Some(ci), TextChangeKind::Changed),
            None => {
                let moved_to = added.iter_mut().find(|slot| {
                    slot.is_some_and(|ci| {
                        let d = &current[ci];
                        d.block == f.block && (single_winner(&f.block) || d.digest == f.digest)
                    })
                });
                match moved_to.and_then(Option::take) {
                    Some(ci) => (Some(ci), TextChangeKind::Moved),
                    None => (None, TextChangeKind::Removed),
                }
            }
        };
        let Some(ci) = ci else {
            let diff = text_of(store, &f.digest)
                .map(|old| unified_diff(&label(f, "frozen"), "(removed)", &old, ""));
            out.push(TextChange {
                block: f.block.to_string(),
                layer: f.layer.to_string(),
                source: f.source.clone(),
                frozen: Some(f.digest.clone()),
                current: None,
                diff,
                kind,
                frozen_layer: Some(f.layer.to_string()),
                frozen_source: f.source.clone(),
            });
            continue;
        };
        let d = &current[ci];
        // The same text moved: nothing to read, nothing to diff.
        let diff = if d.digest == f.digest {
            Ok(String::new())
        } else {
            text_of(store, &f.digest).and_then(|old| {
                let new = text(ci)?;
                Ok(unified_diff(
                    &label(f, "frozen"),
                    &label(d, when),
                    &old,
                    &new,
                ))
            })
        };
        out.push(TextChange {
            block: f.block.to_string(),
            layer: d.layer.to_string(),
            source: d.source.clone(),
            frozen: Some(f.digest.clone()),
            current: Some(d.digest.clone()),
            diff,
            kind,
            frozen_layer: Some(f.layer.to_string()),
            frozen_source: f.source.clone(),
        });
    }
    for ci in added.into_iter().flatten() {
        let d = &current[ci];
        out.push(TextChange {
            block: d.block.to_string(),
            layer: d.layer.to_string(),
            source: d.source.clone(),
            frozen: None,
            current: Some(d.digest.clone()),
            diff: text(ci).map(|text| unified_diff("(absent)", &label(d, when), "", &text)),
            kind: TextChangeKind::Added,
            frozen_layer: None,
            frozen_source: None,
        });
    }
    out
}

/// Whether a session's frozen contract still holds for `current`: the
/// drift of its layers ([`vak_prompt_drift::diff`]), and, when no layer
/// changed, whether the frozen prefix the ledger holds is what those layers
/// render now. One that is not (the ledger edited by hand, or a build that
/// renders differently) is a change of the prefix itself (block `prefix`,
/// layer `ledger`), so a named session fails closed on it as on any drift
/// rather than sending text no descriptor vouches for. So is a contract
/// whose layer list was emptied by hand ([`Baseline::Emptied`], block
/// `prompt-layers`, layer `ledger`): only a ledger from before layers were
/// recorded is an unknown baseline. What `exec` decides on and what
/// `vak session diff` shows.
///
/// [`Baseline::Emptied`]: vak_session::Baseline::Emptied
pub fn session_drift(
    contract: &vak_session::FrozenContract,
    current: &ResolvedPrompt,
) -> vak_prompt_drift::DriftReport {
    if contract.baseline() == vak_session::Baseline::Emptied {
        let fingerprint = contract.fingerprint.strip_prefix("sha256:");
        return vak_prompt_drift::DriftReport {
            unknown_baseline: false,
            changes: vec![vak_session::LayerChange {
                block: LAYERS_BLOCK.to_owned(),
                layer: PREFIX_LAYER.to_owned(),
                occurrence: 0,
                kind: vak_session::ChangeKind::Removed,
                frozen_digest: fingerprint.map(str::to_owned),
                current_digest: None,
                source: Some(Source::Ledger(
                    "the ledger lists no prompt layers, though it holds the fingerprint or frozen prefix written beside them: the list was emptied"
                        .into(),
                )),
            }],
        };
    }
    let mut drift = vak_prompt_drift::diff(&contract.prompt_layers, &current.descriptors);
    if drift.is_drifted()
        || drift.unknown_baseline
        || contract.prefix.is_empty()
        || contract.prefix == current.prefix
    {
        return drift;
    }
    drift.changes.push(vak_session::LayerChange {
        block: PREFIX_BLOCK.to_owned(),
        layer: PREFIX_LAYER.to_owned(),
        occurrence: 0,
        kind: vak_session::ChangeKind::Changed,
        frozen_digest: Some(vak_prompt_blocks::sha256_hex(&contract.prefix)),
        current_digest: Some(vak_prompt_blocks::sha256_hex(&current.prefix)),
        source: Some(Source::Ledger(
            "the ledger's frozen prefix is not what its layers render now, though no layer changed"
                .into(),
        )),
    });
    drift
}

/// The block name [`session_drift`] gives a frozen prefix its layers no
/// longer render.
pub const PREFIX_BLOCK: &str = "prefix";
/// The block name [`session_drift`] gives a contract whose layer list was
/// emptied.
pub const LAYERS_BLOCK: &str = "prompt-layers";
/// The layer name of either change: what changed is the ledger's own.
pub const PREFIX_LAYER: &str = vak_prompt_blocks::LEDGER_LAYER;

/// Every change [`session_drift`] finds between a session's frozen
/// contract and `current`, as text changes: the per-layer diffs of
/// [`text_changes`] (paired as the drift check pairs), then each text that
/// only moved within its block ([`TextChangeKind::Reordered`], no diff),
/// then a change of the ledger's own (a frozen prefix its layers no longer
/// render, or a layer list emptied), diffed as the frozen prefix against
/// the prefix rendered now. Empty exactly when `session_drift` finds no
/// drift, so `vak session diff` shows a change whenever `exec` would
/// refuse, and none when it would not.
pub fn session_changes(
    history: &dyn History,
    contract: &vak_session::FrozenContract,
    current: &ResolvedPrompt,
) -> Vec<TextChange> {
    let drift = session_drift(contract, current);
    if !drift.is_drifted() {
        return Vec::new();
    }
    // An emptied list has nothing to pair: every layer would read "added",
    // when what changed is the ledger.
    let mut out = if contract.baseline() == vak_session::Baseline::Emptied {
        Vec::new()
    } else {
        text_changes(history, &contract.prompt_layers, current)
    };
    for change in drift.changes {
        let reordered = change.kind == vak_session::ChangeKind::Reordered;
        let ledger = change.layer == PREFIX_LAYER
            && (change.block == PREFIX_BLOCK || change.block == LAYERS_BLOCK);
        if !reordered && !ledger {
            continue;
        }
        let diff = if ledger {
            let frozen = if change.block == LAYERS_BLOCK {
                "prefix (frozen in a ledger whose layer list was emptied)"
            } else {
                "prefix (frozen in the ledger)"
            };
            Ok(unified_diff(
                frozen,
                "prefix (its layers rendered now)",
                &contract.prefix,
                &current.prefix,
            ))
        } else {
            Ok(String::new())
        };
        // A prefix change's sentence is said by its diff's labels; an
        // emptied list's is the only word on what happened, so it stays.
        let keep_source = !ledger || change.block == LAYERS_BLOCK;
        out.push(TextChange {
            block: change.block,
            layer: change.layer.clone(),
            source: change.source.clone().filter(|_| keep_source),
            frozen: change.frozen_digest,
            current: change.current_digest,
            diff,
            kind: match change.kind {
                _ if reordered => TextChangeKind::Reordered,
                vak_session::ChangeKind::Removed => TextChangeKind::Removed,
                _ => TextChangeKind::Changed,
            },
            frozen_layer: Some(change.layer),
            frozen_source: change.source.filter(|_| keep_source),
        });
    }
    out
}

fn label(d: &PromptLayerDescriptor, when: &str) -> String {
    format!(
        "{} {} {} ({when}, {})",
        d.block,
        d.layer,
        d.source
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string),
        vak_session::short_digest(&d.digest)
    )
}
