//! The `vak prompts show --format json` object (DECISIONS §8), shared by the
//! CLI and the admin API so both say the same thing.

use serde::Serialize;
use vak_prompt_blocks::{Composition, Owner, PromptLayer};
use vak_prompt_budget::TokenSummary;
use vak_prompt_compose::{ResolvedBlock, ResolvedPrompt};
use vak_prompt_trust::Trust;
use vak_session::{AgentIdentity, CapabilityDescriptor, PromptLayerDescriptor};

/// One block as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct BlockReport {
    /// Block wire name.
    pub block: String,
    /// Winning layers' wire names, widest first.
    pub layers: Vec<String>,
    /// The composed text.
    pub text: String,
    /// `user` or `code`.
    pub owner: &'static str,
    /// Winning sources, in the order of `layers`.
    pub sources: Vec<Option<String>>,
    /// Layers that had text but lost to a narrower one.
    pub shadowed: Vec<ShadowedReport>,
}

/// A layer that lost.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowedReport {
    /// Layer wire name.
    pub layer: String,
    /// Its source.
    pub source: Option<String>,
}

/// One demoted input.
#[derive(Debug, Clone, Serialize)]
pub struct DemotedReport {
    /// The block it would have supplied, or `config` for a config key.
    pub block: String,
    /// Layer wire name.
    pub layer: String,
    /// Path or key.
    pub source: Option<String>,
    /// Why it was dropped and how to change that.
    pub reason: String,
    /// The dotted config key, for config demotions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct PromptReport {
    /// The assembled prefix.
    pub prefix: String,
    /// The per-turn tail.
    pub tail: String,
    /// `sha256:…` over the descriptors.
    pub fingerprint: String,
    /// The prefix's token count against the cap and the model's window.
    pub tokens: TokenSummary,
    /// Every block in render order.
    pub blocks: Vec<BlockReport>,
    /// One per winning layer per block.
    pub descriptors: Vec<PromptLayerDescriptor>,
    /// What trust dropped.
    pub demoted: Vec<DemotedReport>,
    /// Skips, lints and deprecations.
    pub warnings: Vec<String>,
    /// `trusted` or `untrusted`.
    pub trust: &'static str,
    /// The capability catalog.
    pub capabilities: Vec<CapabilityDescriptor>,
    /// The worker role, if one was selected.
    pub agent: Option<AgentIdentity>,
}

impl PromptReport {
    /// Shape a resolution for output.
    pub fn new(resolved: &ResolvedPrompt) -> Self {
        let budget = crate::edit::budget_of(resolved);
        PromptReport {
            prefix: resolved.prefix.clone(),
            tail: resolved.tail.clone(),
            fingerprint: resolved.fingerprint.clone(),
            tokens: budget.report.summary(),
            blocks: resolved
                .blocks
                .iter()
                .map(|b| BlockReport {
                    block: b.block.wire_name().to_owned(),
                    layers: b
                        .layers()
                        .iter()
                        .map(|l| l.wire_name().to_owned())
                        .collect(),
                    text: b.text.clone(),
                    owner: match b.block.owner() {
                        Owner::User => "user",
                        Owner::Code => "code",
                    },
                    sources: b
                        .contributors
                        .iter()
                        .map(|c| c.provenance.source.clone())
                        .collect(),
                    shadowed: b
                        .shadowed
                        .iter()
                        .map(|p| ShadowedReport {
                            layer: p.layer.wire_name().to_owned(),
                            source: p.source.clone(),
                        })
                        .collect(),
                })
                .collect(),
            descriptors: resolved.descriptors.clone(),
            demoted: resolved
                .demoted
                .iter()
                .map(|d| DemotedReport {
                    block: d
                        .block
                        .map_or_else(|| "config".to_owned(), |b| b.wire_name().to_owned()),
                    layer: d.provenance.layer.wire_name().to_owned(),
                    source: d.provenance.source.clone(),
                    reason: d.reason.explain().to_owned(),
                    key: d.config_key.clone(),
                })
                .collect(),
            warnings: resolved
                .warnings
                .iter()
                .chain(&budget.warnings)
                .cloned()
                .collect(),
            trust: match resolved.trust {
                Trust::Trusted => "trusted",
                Trust::Untrusted => "untrusted",
            },
            capabilities: resolved.capabilities.clone(),
            agent: resolved.agent.clone(),
        }
    }
}

/// How layers are named in a [`provenance_summary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerNaming {
    /// Wire names (`shared`, `project`), as the CLI prints them.
    Wire,
    /// Labels for people (`Shared`, `This project`), as the admin UI shows
    /// them; `seed` and `runtime` stay lowercase, as doc 45's sketch has them.
    Label,
}

/// One block's provenance in a few words, as doc 45's sketch shows it:
/// `from shared`, `seed + shared + 2`, `locked`, `runtime, 2 entries`.
pub fn provenance_summary(block: &ResolvedBlock, naming: LayerNaming) -> String {
    let name = |layer: PromptLayer| match (naming, layer) {
        (LayerNaming::Wire, _) | (_, PromptLayer::Seed | PromptLayer::Runtime) => {
            layer.wire_name().to_owned()
        }
        (LayerNaming::Label, other) => other.label().to_owned(),
    };
    let layers = block.layers();
    match block.block.composition() {
        Composition::Fixed => "locked".to_owned(),
        Composition::RuntimeDerived => match layers.len() {
            0 => "runtime, empty".to_owned(),
            1 => "runtime".to_owned(),
            n => format!("runtime, {n} entries"),
        },
        Composition::NarrowestWins => match layers.first() {
            Some(layer) => format!("from {}", name(*layer)),
            None => "empty".to_owned(),
        },
        Composition::Accumulate | Composition::Additive => {
            // Directory sub-layers (DECISIONS §15) are one tier, `project`,
            // from several directories: named once, with the count.
            let directories = layers
                .iter()
                .filter(|l| **l == PromptLayer::Project)
                .count();
            let mut distinct = layers.clone();
            distinct.dedup();
            let note = if directories > 1 {
                format!(" ({directories} directories)")
            } else {
                String::new()
            };
            let joined = match distinct.as_slice() {
                [] => return "empty".to_owned(),
                [one] => name(*one),
                [first, second] => format!("{} + {}", name(*first), name(*second)),
                all if directories > 1 => {
                    all.iter().map(|l| name(*l)).collect::<Vec<_>>().join(" + ")
                }
                [first, second, rest @ ..] => {
                    format!("{} + {} + {}", name(*first), name(*second), rest.len())
                }
            };
            format!("{joined}{note}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::{Block, Origin, Provenance};
    use vak_prompt_compose::Contributor;

    fn block(layers: &[PromptLayer]) -> ResolvedBlock {
        ResolvedBlock {
            block: Block::Guardrails,
            contributors: layers
                .iter()
                .map(|l| Contributor {
                    provenance: Provenance::new(*l, Origin::Project, "x").into(),
                    text: String::new(),
                })
                .collect(),
            shadowed: Vec::new(),
            text: String::new(),
        }
    }

    #[test]
    fn directory_layers_are_one_tier_with_a_count() {
        use PromptLayer::{Project, Seed, Shared, Surface};
        let summary = |l: &[PromptLayer]| provenance_summary(&block(l), LayerNaming::Wire);
        assert_eq!(
            summary(&[Seed, Shared, Project, Project]),
            "seed + shared + project (2 directories)"
        );
        assert_eq!(summary(&[Seed, Shared, Project]), "seed + shared + 1");
        assert_eq!(
            summary(&[Seed, Project, Project]),
            "seed + project (2 directories)"
        );
        assert_eq!(
            summary(&[Seed, Shared, Project, Project, Surface]),
            "seed + shared + project + surface (2 directories)"
        );
    }
}
