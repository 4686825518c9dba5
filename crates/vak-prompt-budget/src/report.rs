//! Token counts per block and per contributing layer, against the cap.
//!
//! The parts do not add up to the whole: the composer adds headings and
//! separators between blocks, and BPE merges across the joins. So the cap is
//! applied to the count of the assembled prefix, and the per-block and
//! per-layer figures exist to say *where* the tokens are, so a refusal can
//! name the layers a user could shorten.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::Serialize;
use vak_prompt_blocks::{Block, Composition, Origin, PromptLayer, Provenance};
use vak_prompt_compose::ResolvedBlock;

use crate::{Encoding, ModelInfo, TokenMemo};

/// The tokens every contribution to one block adds up to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockTokens {
    /// The block.
    pub block: Block,
    /// Sum of its contributions' counts; for an accumulating block
    /// (guardrails, surface notes), the count of its text as rendered, each
    /// duplicate dropped.
    pub tokens: usize,
}

/// One contributed text's count, inside a [`LayerTokens`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceTokens {
    /// The block it went into.
    pub block: Block,
    /// The contributor's provenance row, shared with the resolution (not a
    /// copy of its path). Serialized as `source`, the path or gateway key.
    #[serde(rename = "source", serialize_with = "source_wire")]
    pub provenance: Arc<Provenance>,
    /// Its count.
    pub tokens: usize,
}

impl SourceTokens {
    /// The file or gateway key, as the provenance names it.
    pub fn source(&self) -> &vak_prompt_blocks::Source {
        &self.provenance.source
    }
}

/// Everything one layer contributed, with its count.
///
/// A layer here is a tier *and* an origin: the surface and agent tiers each
/// have a home and a project directory, and a user shortening "the surface
/// layer" needs to know which of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerTokens {
    /// The tier.
    #[serde(serialize_with = "layer_wire")]
    pub layer: PromptLayer,
    /// The physical origin.
    #[serde(serialize_with = "origin_wire")]
    pub origin: Origin,
    /// Sum of the layer's contributions.
    pub tokens: usize,
    /// Each contributed text, in the order given.
    pub sources: Vec<SourceTokens>,
}

impl LayerTokens {
    /// Whether a user or operator wrote this layer (not the shipped seed,
    /// not text the runtime makes up itself). Only these are named in a
    /// refusal, because only these can be shortened by the person reading
    /// it. The skills and MCP inventories are derived, but from files in
    /// the home or the project (each `SKILL.md`, the `[mcp]` config): a
    /// clone's thousand skills are its own to shorten, and a refusal that
    /// left them out would send the user to the wrong file.
    ///
    /// The managed layer is not user-owned: the machine's administrator
    /// sets it, vak never writes it, and a refusal that told a user to
    /// shorten it would send them to a file they cannot change.
    pub fn is_user_owned(&self) -> bool {
        !matches!(self.layer, PromptLayer::Seed | PromptLayer::Managed)
            && !matches!(self.origin, Origin::BuiltIn | Origin::Runtime)
    }

    /// Whether this is text the machine's administrator set (the managed
    /// layer): counted, named in a refusal as such, never offered as a
    /// layer to shorten.
    pub fn is_administrators(&self) -> bool {
        self.layer == PromptLayer::Managed
    }
}

impl fmt::Display for LayerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.layer == PromptLayer::Runtime {
            write!(
                f,
                "skills and MCP servers from the {}: {} tokens",
                self.origin.wire_name(),
                self.tokens
            )?;
        } else {
            write!(
                f,
                "{} layer ({}): {} tokens",
                self.layer,
                self.origin.wire_name(),
                self.tokens
            )?;
        }
        for (index, s) in self.sources.iter().enumerate() {
            f.write_str(if index == 0 { " — " } else { ", " })?;
            write!(
                f,
                "`{}` ({} {})",
                vak_prompt_blocks::Escaped(&s.source().to_string()),
                s.block,
                s.tokens
            )?;
        }
        Ok(())
    }
}

/// The prefix's count against the cap and the model's window, per block and
/// per layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetReport {
    /// The encoding the counts were made with.
    pub encoding: Encoding,
    /// The model budgeted for.
    pub model: &'static str,
    /// Its context window in tokens.
    pub context_window: u32,
    /// Whether the encoding only approximates the model's tokenizer.
    pub approximate: bool,
    /// The cap on the assembled prefix.
    pub cap: usize,
    /// The assembled prefix's count: the number the cap applies to.
    pub prefix_tokens: usize,
    /// Per block, in render order; blocks nothing contributed to are left out.
    pub blocks: Vec<BlockTokens>,
    /// Per contributing layer, widest first.
    pub layers: Vec<LayerTokens>,
    /// The managed config whose `max_tokens` set `cap`, when that ceiling
    /// is what binds: then only the machine's administrator can raise it,
    /// and a refusal must not send the user to the shared config.
    #[serde(skip)]
    pub cap_ceiling: Option<camino::Utf8PathBuf>,
}

/// The `tokens` object of `vak prompts show --format json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenSummary {
    /// The assembled prefix's count.
    pub prefix: usize,
    /// The cap.
    pub cap: usize,
    /// The model budgeted for.
    pub model: &'static str,
    /// Its context window.
    pub context_window: u32,
}

impl BudgetReport {
    /// Count `prefix` and every contributor of the resolved `blocks` with
    /// `model`'s encoding: the rows composition made, counted where they
    /// are, with the provenance the loader gave them.
    pub fn measure(model: &ModelInfo, cap: usize, prefix: &str, blocks: &[ResolvedBlock]) -> Self {
        BudgetReport::measure_with(model, cap, prefix, blocks, &mut TokenMemo::new())
    }

    /// [`measure`](Self::measure), counting each text through `memo`: a
    /// check that budgets many chains counts a layer text shared by all of
    /// them once.
    pub fn measure_with(
        model: &ModelInfo,
        cap: usize,
        prefix: &str,
        blocks: &[ResolvedBlock],
        memo: &mut TokenMemo,
    ) -> Self {
        let encoding = model.encoding;
        let contributions = blocks
            .iter()
            .flat_map(|b| b.contributors.iter().map(move |c| (b.block, c)));
        let mut per_block: BTreeMap<Block, usize> = BTreeMap::new();
        let mut layers: BTreeMap<(PromptLayer, Origin), LayerTokens> = BTreeMap::new();
        for (block, c) in contributions {
            let tokens = memo.count_shared(encoding, &c.text);
            *per_block.entry(block).or_default() += tokens;
            let layer = layers
                .entry((c.provenance.layer, c.provenance.origin))
                .or_insert_with(|| LayerTokens {
                    layer: c.provenance.layer,
                    origin: c.provenance.origin,
                    tokens: 0,
                    sources: Vec::new(),
                });
            layer.tokens += tokens;
            layer.sources.push(SourceTokens {
                block,
                provenance: Arc::clone(&c.provenance),
                tokens,
            });
        }
        // An accumulating block is what it renders, each duplicate dropped:
        // the sum of its files would count 200 copies of one bullet 200
        // times, for a block the prefix holds once.
        for block in blocks
            .iter()
            .filter(|b| b.block.composition() == Composition::Accumulate)
        {
            if let Some(tokens) = per_block.get_mut(&block.block) {
                *tokens = memo.count(encoding, &block.text);
            }
        }
        BudgetReport {
            cap_ceiling: None,
            encoding,
            model: model.name,
            context_window: model.context_window,
            approximate: model.approximate,
            cap,
            prefix_tokens: memo.count(encoding, prefix),
            blocks: per_block
                .into_iter()
                .map(|(block, tokens)| BlockTokens { block, tokens })
                .collect(),
            layers: layers.into_values().collect(),
        }
    }

    /// Every token [`measure`](Self::measure) counted to make this report:
    /// each contributor's whole text (a file of a thousand repeated bullets
    /// counted in full, though the prefix holds one), each accumulating
    /// block as rendered, and the prefix. The work the count took, which a
    /// caller budgeting many chains bounds; far more than `prefix_tokens`
    /// when layers repeat each other.
    pub fn tokens_counted(&self) -> usize {
        let layers: usize = self.layers.iter().map(|l| l.tokens).sum();
        let accumulated: usize = self
            .blocks
            .iter()
            .filter(|b| b.block.composition() == Composition::Accumulate)
            .map(|b| b.tokens)
            .sum();
        layers
            .saturating_add(accumulated)
            .saturating_add(self.prefix_tokens)
    }

    /// Whether the assembled prefix is over the cap.
    pub fn is_over(&self) -> bool {
        self.prefix_tokens > self.cap
    }

    /// How many tokens over the cap the prefix is (0 when within it).
    pub fn over_by(&self) -> usize {
        self.prefix_tokens.saturating_sub(self.cap)
    }

    /// Whether the prefix fits the model's context window at all.
    pub fn fits_window(&self) -> bool {
        self.prefix_tokens <= self.context_window as usize
    }

    /// Every user-owned contributing layer, largest first (ties widest
    /// first): the layers a refusal names, since they are the ones a user
    /// can shorten.
    pub fn offenders(&self) -> Vec<&LayerTokens> {
        let mut out: Vec<&LayerTokens> = self.layers.iter().filter(|l| l.is_user_owned()).collect();
        out.sort_by(|a, b| {
            b.tokens
                .cmp(&a.tokens)
                .then((a.layer, a.origin).cmp(&(b.layer, b.origin)))
        });
        out
    }

    /// What a project brings (its layers, and the skills and config it
    /// ships, which the runtime renders), largest first: what trusting it
    /// adds, and so what a refused `vak trust` names.
    pub fn project_layers(&self) -> Vec<&LayerTokens> {
        let mut out: Vec<&LayerTokens> = self
            .layers
            .iter()
            .filter(|l| l.origin == Origin::Project)
            .collect();
        out.sort_by(|a, b| b.tokens.cmp(&a.tokens).then(a.layer.cmp(&b.layer)));
        out
    }

    /// The `tokens` object for JSON output.
    pub fn summary(&self) -> TokenSummary {
        TokenSummary {
            prefix: self.prefix_tokens,
            cap: self.cap,
            model: self.model,
            context_window: self.context_window,
        }
    }

    /// A refusal a user can act on: the totals, then one line per offender.
    /// Worded for a save that was refused.
    pub fn over_cap_message(&self) -> String {
        self.over_cap_lines(format!(
            "the assembled prompt prefix would be {} tokens, over the cap of {} by {}; nothing was saved or truncated.",
            self.prefix_tokens,
            self.cap,
            self.over_by()
        ))
    }

    /// A refusal to freeze a session whose prefix does not fit the model's
    /// context window at all.
    pub fn over_window_message(&self) -> String {
        // Raising the cap cannot help here: only shorter layers (or a model
        // with a larger window) can.
        let mut out = format!(
            "the assembled prompt prefix is {} tokens, larger than the {}-token context window of `{}`; no session was frozen with it. Shorten one of these layers (largest first), or choose a model with a larger window:",
            self.prefix_tokens, self.context_window, self.model
        );
        self.offender_lines(&mut out);
        out
    }

    /// The same, worded for a check of the prompt as it is.
    pub fn over_cap_check_message(&self) -> String {
        self.over_cap_lines(format!(
            "the assembled prompt prefix is {} tokens, over the cap of {} by {}.",
            self.prefix_tokens,
            self.cap,
            self.over_by()
        ))
    }

    fn over_cap_lines(&self, mut out: String) -> String {
        // A cap at the model's window cannot be raised any further.
        if let Some(config) = &self.cap_ceiling {
            let _ = write!(
                out,
                " Shorten one of these layers (largest first); the cap is the managed layer's ceiling (`prompts.max_tokens` in `{}`), which only the machine's administrator can raise:",
                vak_prompt_blocks::Escaped(config.as_str())
            );
        } else if u64::try_from(self.cap).unwrap_or(u64::MAX) >= u64::from(self.context_window) {
            out.push_str(" Shorten one of these layers (largest first), or choose a model with a larger window:");
        } else {
            out.push_str(" Shorten one of these layers (largest first) or raise `prompts.max_tokens` in the shared config:");
        }
        self.offender_lines(&mut out);
        out
    }

    /// The managed layer's contributions, when it has any: counted in the
    /// prefix, but the machine's administrator's to shorten, not the user's.
    pub fn administrators_layers(&self) -> Vec<&LayerTokens> {
        self.layers
            .iter()
            .filter(|l| l.is_administrators() && l.tokens > 0)
            .collect()
    }

    /// One line per user-owned layer, largest first; then the managed
    /// text, named as what the reader cannot edit.
    fn offender_lines(&self, out: &mut String) {
        let offenders = self.offenders();
        let fixed = self.administrators_layers();
        if offenders.is_empty() {
            out.push_str(if fixed.is_empty() {
                "\n  (no user-owned layer contributes: the built-in prompt alone is over the cap)"
            } else {
                "\n  (no user-owned layer contributes: the built-in prompt and the managed layer alone are over the cap)"
            });
        }
        for layer in offenders {
            let _ = write!(out, "\n  {layer}");
        }
        for layer in fixed {
            let _ = write!(
                out,
                "\n  not yours to shorten: {layer} (set by the machine's administrator; vak never writes it)"
            );
        }
    }
}

impl fmt::Display for BudgetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let approx = if self.approximate {
            ", approximate"
        } else {
            ""
        };
        writeln!(
            f,
            "prefix: {} / {} tokens (cap); model {} window {} tokens ({}{approx})",
            self.prefix_tokens, self.cap, self.model, self.context_window, self.encoding
        )?;
        for b in &self.blocks {
            writeln!(f, "  block {:<20} {:>6}", b.block.wire_name(), b.tokens)?;
        }
        for l in &self.layers {
            writeln!(
                f,
                "  layer {:<20} {:>6}",
                format!("{} ({})", l.layer, l.origin.wire_name()),
                l.tokens
            )?;
        }
        Ok(())
    }
}

fn source_wire<S: serde::Serializer>(
    provenance: &Arc<Provenance>,
    s: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&provenance.source, s)
}

fn layer_wire<S: serde::Serializer>(layer: &PromptLayer, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(layer.wire_name())
}

fn origin_wire<S: serde::Serializer>(origin: &Origin, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(origin.wire_name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup;
    use vak_prompt_blocks::Provenance;
    use vak_prompt_compose::Contributor;

    /// Resolved blocks holding `rows` in order, consecutive rows of one
    /// block in one block.
    fn resolved(rows: &[(Block, &Provenance, &str)]) -> Vec<ResolvedBlock> {
        let mut blocks: Vec<ResolvedBlock> = Vec::new();
        for (block, provenance, text) in rows {
            let contributor = Contributor {
                provenance: Arc::new((*provenance).clone()),
                text: (*text).to_owned().into(),
                interop: false,
                imports: Vec::new(),
            };
            match blocks.last_mut() {
                Some(last) if last.block == *block => {
                    // As composing renders it: one line each, duplicates
                    // dropped.
                    for line in text.lines() {
                        if !last.text.lines().any(|l| l == line) {
                            let mut joined = last.text.to_string();
                            joined.push('\n');
                            joined.push_str(line);
                            last.text = joined.into();
                        }
                    }
                    last.contributors.push(contributor);
                }
                _ => blocks.push(ResolvedBlock {
                    locked: false,
                    block: *block,
                    contributors: vec![contributor],
                    shadowed: Vec::new(),
                    text: (*text).to_owned().into(),
                }),
            }
        }
        blocks
    }

    fn prov(layer: PromptLayer, origin: Origin, source: &str) -> Provenance {
        Provenance::new(layer, origin, source)
    }

    #[test]
    fn tokens_counted_holds_every_repeated_bullet_the_prefix_drops() {
        let shared = prov(
            PromptLayer::Shared,
            Origin::Home,
            "/h/.vak/prompts/guardrails.md",
        );
        let project = prov(
            PromptLayer::Project,
            Origin::Project,
            "/p/.vak/prompts/guardrails.md",
        );
        let repeated = "- hello world\n".repeat(1000);
        let rows = [
            (Block::Guardrails, &shared, "- hello world"),
            (Block::Guardrails, &project, repeated.as_str()),
        ];
        let blocks = resolved(&rows);
        let model = lookup("gpt-4o").unwrap();
        let report = BudgetReport::measure(model, 1500, &blocks[0].text, &blocks);
        let e = Encoding::O200kBase;
        // The prefix holds the bullet once; the count read every copy.
        assert_eq!(report.prefix_tokens, e.count("- hello world"));
        assert_eq!(
            report.tokens_counted(),
            e.count("- hello world") + e.count(&repeated) // the layers
                + e.count("- hello world") // the block as rendered
                + report.prefix_tokens
        );
        assert!(report.tokens_counted() > 500 * report.prefix_tokens);
    }

    #[test]
    fn counts_per_block_and_layer_and_names_offenders_largest_first() {
        let seed = Provenance::seed("identity");
        let runtime = Provenance::runtime("surface");
        let shared = prov(
            PromptLayer::Shared,
            Origin::Home,
            "/h/.vak/prompts/guardrails.md",
        );
        let project_id = prov(
            PromptLayer::Project,
            Origin::Project,
            "/p/.vak/prompts/identity.md",
        );
        let project_gr = prov(
            PromptLayer::Project,
            Origin::Project,
            "/p/.vak/prompts/guardrails.md",
        );
        let surf_home = prov(
            PromptLayer::Surface,
            Origin::Home,
            "/h/.vak/prompts/surface/cli/surface-note.md",
        );
        let long = "hello world ".repeat(50); // "hello" + 49 × " hello" + " world" pieces
        let rows = [
            (Block::Identity, &seed, "You are Vak."),
            (Block::Identity, &project_id, long.as_str()),
            (Block::Guardrails, &shared, "- hello world"),
            (Block::Guardrails, &project_gr, "- hello world\n- rer"),
            (Block::Surface, &runtime, "Surface: cli"),
            (Block::SurfaceNote, &surf_home, ""),
        ];
        let model = lookup("gpt-4o").unwrap();
        let prefix = rows.iter().map(|r| r.2).collect::<Vec<_>>().join("\n\n");
        let report = BudgetReport::measure(model, 40, &prefix, &resolved(&rows));

        let e = Encoding::O200kBase;
        assert_eq!(report.prefix_tokens, e.count(&prefix));
        assert!(report.is_over());
        assert_eq!(report.over_by(), report.prefix_tokens - 40);
        let block = |b| {
            report
                .blocks
                .iter()
                .find(|x| x.block == b)
                .map(|x| x.tokens)
        };
        assert_eq!(
            block(Block::Identity),
            Some(e.count("You are Vak.") + e.count(&long))
        );
        // Rendered, the repeated bullet once.
        assert_eq!(
            block(Block::Guardrails),
            Some(e.count("- hello world\n- rer"))
        );
        assert_eq!(block(Block::SurfaceNote), Some(0));
        assert_eq!(block(Block::Skills), None);

        let layers: Vec<_> = report.layers.iter().map(|l| (l.layer, l.origin)).collect();
        assert_eq!(
            layers,
            [
                (PromptLayer::Seed, Origin::BuiltIn),
                (PromptLayer::Shared, Origin::Home),
                (PromptLayer::Project, Origin::Project),
                (PromptLayer::Surface, Origin::Home),
                (PromptLayer::Runtime, Origin::Runtime),
            ]
        );
        let offenders: Vec<_> = report
            .offenders()
            .iter()
            .map(|l| (l.layer, l.tokens))
            .collect();
        assert_eq!(
            offenders,
            [
                (
                    PromptLayer::Project,
                    e.count(&long) + e.count("- hello world\n- rer")
                ),
                (PromptLayer::Shared, e.count("- hello world")),
                (PromptLayer::Surface, 0),
            ]
        );
        let msg = report.over_cap_message();
        assert!(msg.contains("/p/.vak/prompts/identity.md"), "{msg}");
        assert!(msg.contains("over the cap of 40"), "{msg}");
        assert!(!msg.contains("builtin:"), "{msg}");
        let first_project = msg.find("project layer").unwrap();
        assert!(first_project < msg.find("shared layer").unwrap(), "{msg}");
    }

    #[test]
    fn the_managed_layer_is_counted_but_never_offered_to_shorten() {
        let managed = Provenance::managed("/etc/vak/prompts/guardrails.md", None);
        let shared = prov(
            PromptLayer::Shared,
            Origin::Home,
            "/h/.vak/prompts/guardrails.md",
        );
        let big = "- never do this thing\n".repeat(40);
        let rows = [
            (Block::Guardrails, &managed, big.as_str()),
            (Block::Guardrails, &shared, "- hello world"),
        ];
        let model = lookup("gpt-4o").unwrap();
        let prefix = rows.iter().map(|r| r.2).collect::<Vec<_>>().join("\n");
        let report = BudgetReport::measure(model, 20, &prefix, &resolved(&rows));
        assert!(report.is_over());
        let offenders: Vec<_> = report.offenders().iter().map(|l| l.layer).collect();
        assert_eq!(offenders, [PromptLayer::Shared]);
        let msg = report.over_cap_message();
        // The managed file is named, but as the administrator's, after the
        // layers the reader can shorten.
        let shared_at = msg.find("shared layer").unwrap();
        let managed_at = msg.find("not yours to shorten: managed layer").unwrap();
        assert!(shared_at < managed_at, "{msg}");
        assert!(msg.contains("set by the machine's administrator"), "{msg}");

        // Only the managed text over the cap: no user layer to blame.
        let alone = [(Block::Guardrails, &managed, big.as_str())];
        let mut report = BudgetReport::measure(model, 20, &big, &resolved(&alone));
        assert!(report.offenders().is_empty());
        let msg = report.over_cap_message();
        assert!(msg.contains("the managed layer alone"), "{msg}");
        assert!(msg.contains("in the shared config"), "{msg}");
        // Under the managed ceiling, raising the shared cap is no way out.
        report.cap_ceiling = Some("/etc/vak/prompts/config.toml".into());
        let msg = report.over_cap_check_message();
        assert!(msg.contains("the managed layer's ceiling"), "{msg}");
        assert!(msg.contains("/etc/vak/prompts/config.toml"), "{msg}");
        assert!(!msg.contains("in the shared config"), "{msg}");
    }

    #[test]
    fn exact_counts_on_known_strings() {
        let seed = Provenance::seed("identity");
        let c = resolved(&[(Block::Identity, &seed, "hello world")]);
        let report = BudgetReport::measure(lookup("gpt-4").unwrap(), 1500, "hello world", &c);
        assert_eq!(report.encoding, Encoding::Cl100kBase);
        assert_eq!(report.prefix_tokens, 2);
        assert_eq!(
            report.blocks,
            [BlockTokens {
                block: Block::Identity,
                tokens: 2
            }]
        );
        assert!(!report.is_over());
        assert!(report.offenders().is_empty());
        assert!(report.over_cap_message().contains("built-in prompt alone"));
    }

    #[test]
    fn a_source_row_is_the_contributors_provenance_and_serializes_as_before() {
        let shared = prov(
            PromptLayer::Shared,
            Origin::Home,
            "/h/.vak/prompts/identity.md",
        );
        let blocks = resolved(&[(Block::Identity, &shared, "hello world")]);
        let report = BudgetReport::measure(lookup("gpt-4o").unwrap(), 1500, "hello world", &blocks);
        let row = &report.layers[0].sources[0];
        // The same allocation as the contributor's, not a copy of its path.
        assert!(Arc::ptr_eq(
            &row.provenance,
            &blocks[0].contributors[0].provenance
        ));
        assert_eq!(row.source().to_string(), "/h/.vak/prompts/identity.md");
        assert_eq!(
            serde_json::to_value(row).unwrap(),
            serde_json::json!({"block": "identity", "source": "/h/.vak/prompts/identity.md", "tokens": 2})
        );
    }

    #[test]
    fn at_the_cap_is_not_over() {
        let report = BudgetReport::measure(lookup("gpt-4o").unwrap(), 2, "hello world", &[]);
        assert_eq!(report.prefix_tokens, 2);
        assert!(!report.is_over());
        assert!(report.fits_window());
    }

    #[test]
    fn summary_has_the_json_shape_of_decisions_8() {
        let report = BudgetReport::measure(lookup("gpt-4o").unwrap(), 1500, "hello world", &[]);
        let json = serde_json::to_value(report.summary()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"prefix": 2, "cap": 1500, "model": "gpt-4o", "context_window": 128000})
        );
        let full = serde_json::to_value(&report).unwrap();
        assert_eq!(full["encoding"], "o200k_base");
    }
}
