//! The `vak prompts show --format json` object, shared by the
//! CLI and the admin API so both say the same thing.

use serde::Serialize;
use vak_prompt_blocks::{Block, Composition, Owner, PromptLayer, Source};
use vak_prompt_budget::TokenSummary;
use vak_prompt_compose::{ResolvedBlock, ResolvedPrompt};
use vak_prompt_trust::Trust;
use vak_session::{AgentIdentity, CapabilityDescriptor, PromptLayerDescriptor};

use crate::Budget;

/// One block as the report shows it: a projection of the resolved block,
/// borrowing its text and its provenance rows.
#[derive(Debug, Clone, Serialize)]
pub struct BlockReport<'a> {
    /// Block wire name.
    pub block: &'static str,
    /// Winning layers' wire names, widest first.
    pub layers: Vec<&'static str>,
    /// The composed text.
    pub text: &'a str,
    /// `user` or `code`.
    pub owner: &'static str,
    /// Winning sources, in the order of `layers`.
    pub sources: Vec<&'a Source>,
    /// Layers that had text but lost to a narrower one.
    pub shadowed: Vec<ShadowedReport<'a>>,
    /// Whether the managed layer locks the block (only its text applies).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub locked: bool,
    /// The files the winning block files import, each under the block file
    /// whose text it is part of; left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<ImportReport<'a>>,
}

/// A file imported by a block file in force.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport<'a> {
    /// The imported file.
    pub source: &'a Source,
    /// The block file that imports it (directly, or through another
    /// imported file).
    pub by: &'a Source,
}

/// A layer that lost.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowedReport<'a> {
    /// Layer wire name.
    pub layer: &'static str,
    /// Its source.
    pub source: &'a Source,
}

/// One demoted input.
#[derive(Debug, Clone, Serialize)]
pub struct DemotedReport<'a> {
    /// The block it would have supplied, or `config` for a config key.
    pub block: &'static str,
    /// Layer wire name.
    pub layer: &'static str,
    /// Path or key.
    pub source: &'a Source,
    /// Why it was dropped and how to change that.
    pub reason: &'static str,
    /// The dotted config key, for config demotions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
}

/// The whole report: a projection of one [`ResolvedPrompt`] and its
/// [`Budget`] that copies none of their text — every string is borrowed
/// from the resolution's blocks and the loader's provenance rows they
/// share.
#[derive(Debug, Clone, Serialize)]
pub struct PromptReport<'a> {
    /// The assembled prefix.
    pub prefix: &'a str,
    /// The per-turn tail.
    pub tail: &'a str,
    /// `sha256:…` over the descriptors.
    pub fingerprint: &'a str,
    /// The prefix's token count against the cap and the model's window.
    pub tokens: TokenSummary,
    /// Whether the prefix is over its cap (said, never refused, here).
    pub over_cap: bool,
    /// Every block in render order (never empty: a resolution has the
    /// seed's blocks at least). Left out of the encoding when taken out by
    /// [`crate::output::PromptDocument::with_page_words`], which encodes
    /// each block with the page's words for it instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockReport<'a>>,
    /// One per winning layer per block.
    pub descriptors: &'a [PromptLayerDescriptor],
    /// What trust dropped.
    pub demoted: Vec<DemotedReport<'a>>,
    /// Skips, lints and deprecations: the resolution's, then the budget's.
    pub warnings: Vec<&'a str>,
    /// `trusted` or `untrusted`.
    pub trust: &'static str,
    /// The capability catalog.
    pub capabilities: &'a [CapabilityDescriptor],
    /// The worker role, if one was selected.
    pub agent: Option<&'a AgentIdentity>,
}

impl<'a> PromptReport<'a> {
    /// Shape a resolution and its budget (from [`crate::budget_of`]) for
    /// output.
    pub fn new(resolved: &'a ResolvedPrompt, budget: &'a Budget) -> Self {
        PromptReport {
            prefix: &resolved.prefix,
            tail: &resolved.tail,
            fingerprint: &resolved.fingerprint,
            tokens: budget.report.summary(),
            over_cap: budget.report.is_over(),
            blocks: resolved
                .blocks
                .iter()
                .map(|b| BlockReport {
                    block: b.block.wire_name(),
                    layers: b
                        .contributors
                        .iter()
                        .map(|c| c.provenance.layer.wire_name())
                        .collect(),
                    text: &b.text,
                    owner: match b.block.owner() {
                        Owner::User => "user",
                        Owner::Code => "code",
                    },
                    sources: b
                        .contributors
                        .iter()
                        .map(|c| &c.provenance.source)
                        .collect(),
                    shadowed: b
                        .shadowed
                        .iter()
                        .map(|p| ShadowedReport {
                            layer: p.layer.wire_name(),
                            source: &p.source,
                        })
                        .collect(),
                    locked: b.locked,
                    imports: b
                        .contributors
                        .iter()
                        .flat_map(|c| {
                            c.imports.iter().map(|i| ImportReport {
                                source: &i.provenance.source,
                                by: &c.provenance.source,
                            })
                        })
                        .collect(),
                })
                .collect(),
            descriptors: &resolved.descriptors,
            demoted: resolved
                .demoted
                .iter()
                .map(|d| DemotedReport {
                    block: d.block.map_or("config", Block::wire_name),
                    layer: d.provenance.layer.wire_name(),
                    source: &d.provenance.source,
                    reason: d.reason.explain(),
                    key: d.config_key.as_deref(),
                })
                .collect(),
            warnings: resolved
                .warnings
                .iter()
                .chain(&budget.warnings)
                .map(String::as_str)
                .collect(),
            trust: match resolved.trust {
                Trust::Trusted => "trusted",
                Trust::Untrusted => "untrusted",
            },
            capabilities: &resolved.capabilities[..],
            agent: resolved.agent.as_ref(),
        }
    }
}

/// How layers are named in a [`provenance_summary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerNaming {
    /// Wire names (`shared`, `project`), as the CLI prints them.
    Wire,
    /// Labels for people (`Shared`, `This project`), as the admin UI shows
    /// them; `seed` and `runtime` stay lowercase.
    Label,
}

/// One block's provenance in a few words, as `explain` and the admin UI show it:
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
        Composition::NarrowestWins => {
            // Interop files (`AGENTS.md`) are appended after the winner:
            // counted, since each is named on a line of its own.
            let appended = block.contributors.iter().filter(|c| c.interop).count();
            let summary = match (layers.first(), appended) {
                (None, _) => "empty".to_owned(),
                (Some(layer), 0) => format!("from {}", name(*layer)),
                (Some(layer), 1) => format!("from {} + 1 AGENTS file", name(*layer)),
                (Some(layer), n) => format!("from {} + {n} AGENTS files", name(*layer)),
            };
            if block.locked {
                format!("{summary} (locked)")
            } else {
                summary
            }
        }
        Composition::Accumulate | Composition::Additive => {
            // Directory sub-layers are one tier, `project`,
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
            locked: false,
            block: Block::Guardrails,
            contributors: layers
                .iter()
                .map(|l| Contributor {
                    provenance: Provenance::new(*l, Origin::Project, "x").into(),
                    text: String::new().into(),
                    interop: false,
                    imports: Vec::new(),
                })
                .collect(),
            shadowed: Vec::new(),
            text: String::new().into(),
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
