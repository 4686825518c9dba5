//! `resolve_prompt`: a loaded chain in, a prefix, a tail and descriptors out.
//! Pure: no I/O, no clock (the tail's instant comes in with the input).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use vak_prompt_blocks::{
    AgentIdentity, CapabilityDescriptor, FrozenContract, ParentSession, PromptLayerDescriptor,
};
use vak_prompt_blocks::{
    Block, Composition, Escaped, GuardrailLint, GuardrailList, Name, Origin, Owner, PromptLayer,
    Provenance, SharedText, SurfaceKind, TextDigest, clean, sha256_hex,
};
use vak_prompt_loader::{Contribution, LoadedChain};
use vak_prompt_trust::{DemoteReason, Trust, Verdict, prompt_verdict};

use crate::catalog::{CATALOG, render_contract};
use crate::config::{ComposeMemo, EffectiveConfig, effective_config};
use crate::descriptors::{Descriptors, Entry};
use crate::seed_model::seed;
use crate::tail::{TailContext, render_tail};

/// What to resolve.
#[derive(Debug, Clone)]
pub struct ResolveInput<'a> {
    /// Everything the loader read.
    pub chain: &'a LoadedChain,
    /// How far the project is trusted.
    pub trust: Trust,
    /// The surface the session runs on.
    pub surface: SurfaceKind,
    /// The worker role, if any.
    pub agent: Option<&'a Name>,
    /// What the per-turn tail is rendered from.
    pub tail: TailContext,
}

/// One layer's winning text for a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contributor {
    /// Where it came from: the loader's provenance row for the input,
    /// shared, not copied (the budget's rows and the report point at the
    /// same one).
    pub provenance: Arc<Provenance>,
    /// Exactly the text it contributed: the file's text after the load's
    /// character rule ([`clean`]), without leading blank lines and trailing
    /// whitespace (for a block that is not a list, trimmed), so a CRLF
    /// conversion or a trailing newline changes neither this nor its digest.
    /// Shared with the loaded chain's text it was cut from, when cleaning
    /// changed nothing but its ends.
    pub text: SharedText,
    /// Whether this is a directory's interop file (`AGENTS.md`), appended to
    /// the operating rules after the winning text rather than competing
    /// with it.
    pub interop: bool,
    /// The files this block file imports, every level, depth first: each
    /// with its own text (cleaned and trimmed as a file's is; `text` above
    /// already holds it in place of its `@` line) and its own descriptor,
    /// which follows this contributor's. Trusted as this contributor is:
    /// only a kept file's imports are here.
    pub imports: Vec<Contributor>,
}

/// The text a layer contributes: forbidden characters
/// removed or turned into line breaks, blank ends trimmed. Every input text
/// passes through here exactly once, on its way into the resolution; a
/// file that needed it is warned about once, naming the first character.
fn contributed<'t>(
    text: &'t str,
    what: impl FnOnce() -> String,
    warnings: &mut Vec<String>,
) -> Cow<'t, str> {
    let cleaned = clean(text);
    if let Some(found) = cleaned.first {
        let what = what();
        warnings.push(format!(
            "{what}: hidden or control character {found}; such characters are removed from the prompt (line breaks other than LF become LF)"
        ));
    }
    // A clean text (nearly every one) is borrowed from the loaded chain, not
    // copied: the only copy is the resolution's own contributor.
    match cleaned.text {
        Cow::Borrowed(text) => Cow::Borrowed(trim_lines(text)),
        Cow::Owned(text) => Cow::Owned(trim_lines(&text).to_owned()),
    }
}

/// A contribution composition keeps: the block it goes to (agent-tier
/// identity and rules become agent instructions), the loader's provenance
/// row (shared), and the cleaned text, borrowed when cleaning changed
/// nothing.
struct Kept<'a> {
    block: Block,
    provenance: &'a Arc<Provenance>,
    text: Cow<'a, str>,
    /// What `text` was cut from, when it was borrowed: the contributor made
    /// of it shares that text rather than copying it.
    base: Option<&'a SharedText>,
    /// For a seed text, its descriptor, made once per process.
    made: Option<&'static PromptLayerDescriptor>,
    /// A directory's interop file: appended, never a winner.
    interop: bool,
    /// The files it imports, each with its cleaned text.
    imports: Vec<(&'a Arc<Provenance>, Cow<'a, str>)>,
    /// The import that was refused, if one was: named when this text is
    /// in force (a shadowed file's is not).
    refused: Option<&'a vak_prompt_loader::ImportError>,
    /// The project directory level it was read at (0: the root, or not a
    /// project directory layer), as the loader set it.
    level: usize,
}

/// What composition derives from the binary alone, built once per process:
/// the seed's contributions, the capability contract, and their
/// descriptors (made by [`PromptLayerDescriptor::of`], so each digest still
/// matches its text), and the catalog's capability descriptors. Pure: the
/// same constants give the same values every time.
struct Builtin {
    seed: Vec<(Block, Arc<Provenance>, SharedText)>,
    contract: Contributor,
    /// The seed's descriptors, in the seed's order, then the contract's.
    descriptors: Vec<(Block, Arc<Provenance>, String, PromptLayerDescriptor)>,
    capabilities: Arc<[CapabilityDescriptor]>,
    /// The generated `Surface:` line of each [`SurfaceKind::ALL`], with
    /// its descriptor: code-owned text, so it is digested once.
    surfaces: Vec<(Contributor, PromptLayerDescriptor)>,
}

fn builtin() -> &'static Builtin {
    static BUILTIN: OnceLock<Builtin> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        // Shared texts: every resolution's contributor for a seed text, the
        // contract or a surface line takes the one built here.
        let seed: Vec<(Block, Arc<Provenance>, SharedText)> = seed()
            .iter()
            .map(|s| {
                let provenance = Arc::new(Provenance::seed(s.file));
                (s.block, provenance, SharedText::from(s.text.trim()))
            })
            .collect();
        let contract = Contributor {
            provenance: Arc::new(Provenance::seed("capability-catalog")),
            text: SharedText::from(render_contract(CATALOG).as_str()),
            interop: false,
            imports: Vec::new(),
        };
        let mut descriptors: Vec<_> = seed
            .iter()
            .map(|(block, provenance, text)| {
                let descriptor = PromptLayerDescriptor::of(*block, provenance, text);
                (*block, provenance.clone(), text.to_string(), descriptor)
            })
            .collect();
        descriptors.push((
            Block::CapabilityContract,
            contract.provenance.clone(),
            contract.text.to_string(),
            PromptLayerDescriptor::of(
                Block::CapabilityContract,
                &contract.provenance,
                &contract.text,
            ),
        ));
        let surfaces = SurfaceKind::ALL
            .iter()
            .map(|surface| {
                let line = surface_line(*surface);
                let descriptor =
                    PromptLayerDescriptor::of(Block::Surface, &line.provenance, &line.text);
                (line, descriptor)
            })
            .collect();
        Builtin {
            seed,
            contract,
            descriptors,
            capabilities: CATALOG.iter().map(|c| c.descriptor()).collect(),
            surfaces,
        }
    })
}

/// The generated `Surface:` line for `surface`.
fn surface_line(surface: SurfaceKind) -> Contributor {
    Contributor {
        provenance: Arc::new(Provenance::runtime(format!("surface/{surface}"))),
        text: SharedText::from(format!("Surface: {}", surface.observation()).as_str()),
        interop: false,
        imports: Vec::new(),
    }
}

/// The descriptor of `text` contributed to `block` from `provenance`: the
/// one made once for a built-in text, when it is exactly that text.
fn descriptor(block: Block, provenance: &Arc<Provenance>, text: &str) -> Entry {
    if provenance.origin == Origin::BuiltIn
        && let Some((.., made)) = builtin()
            .descriptors
            .iter()
            .find(|(b, p, t, _)| *b == block && **p == **provenance && t == text)
    {
        return Entry::Made(made);
    }
    Entry::of(block, provenance, text)
}

/// `text` without leading blank lines and trailing whitespace. The first
/// line keeps its indentation: in a guardrails file, it decides whether
/// that line is a bullet.
fn trim_lines(text: &str) -> &str {
    let text = text.trim_end();
    let body = text.trim_start();
    let line_start = text[..text.len() - body.len()]
        .rfind('\n')
        .map_or(0, |newline| newline + 1);
    &text[line_start..]
}

/// An input string that is rendered inside one line (a skill name or
/// description, an MCP inventory line): cleaned, line breaks folded.
fn one_line(text: &str, what: impl FnOnce() -> String, warnings: &mut Vec<String>) -> String {
    let text = contributed(text, what, warnings);
    let mut out = String::with_capacity(text.len());
    push_one_line(&text, &mut out);
    out
}

/// Append `text` to `out` as [`one_line`] renders an already cleaned text:
/// its lines trimmed, blank ones dropped, the rest joined by spaces.
fn push_one_line(text: &str, out: &mut String) {
    let start = out.len();
    for line in vak_prompt_blocks::lines::split_lines(text)
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        if out.len() > start {
            out.push(' ');
        }
        out.push_str(line);
    }
}

/// One block of the resolved prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedBlock {
    /// Which block.
    pub block: Block,
    /// Every winning layer, widest first. For narrowest-wins blocks, one.
    pub contributors: Vec<Contributor>,
    /// Layers that had text for this block but lost to a narrower one:
    /// their provenance rows, shared.
    pub shadowed: Vec<Arc<Provenance>>,
    /// The composed text, without its heading. Empty renders nothing.
    /// Shared with its one contributor's when it is that text unchanged
    /// (the capability contract, a narrowest-wins block's winner).
    pub text: SharedText,
    /// Whether the managed layer locks the block: only its text applies.
    pub locked: bool,
}

impl ResolvedBlock {
    /// The winning layers, widest first.
    pub fn layers(&self) -> Vec<PromptLayer> {
        self.contributors
            .iter()
            .map(|c| c.provenance.layer)
            .collect()
    }
}

/// A contribution that was dropped because of trust, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demotion {
    /// The block it would have supplied; `None` for a config key.
    pub block: Option<Block>,
    /// The dotted config key, for a demoted config key.
    pub config_key: Option<String>,
    /// Where it was: the loader's row for a dropped input.
    pub provenance: Arc<Provenance>,
    /// Why it was dropped.
    pub reason: DemoteReason,
}

impl Demotion {
    /// What was dropped: the config key, or the block's wire name.
    pub fn subject(&self) -> String {
        match (&self.config_key, self.block) {
            (Some(key), _) => key.clone(),
            (None, Some(block)) => block.wire_name().to_owned(),
            (None, None) => "input".to_owned(),
        }
    }
}

/// The result of a resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPrompt {
    /// The assembled prefix: what the budget cap and fingerprint cover.
    pub prefix: String,
    /// The per-turn tail, rendered for the input's instant.
    pub tail: String,
    /// Every block, in render order.
    pub blocks: Vec<ResolvedBlock>,
    /// One descriptor per winning layer per block, in render order.
    pub descriptors: Descriptors,
    /// `sha256:…` over `descriptors`.
    pub fingerprint: String,
    /// The capability catalog in force: the binary's own, built once per
    /// process and shared by every resolution.
    pub capabilities: Arc<[CapabilityDescriptor]>,
    /// The worker role's identity, when a role was selected.
    pub agent: Option<AgentIdentity>,
    /// The text the identity's digest is the sha256 of (`role\tNAME`, then
    /// a `block\tdigest` line per agent-tier text), kept beside a session's
    /// texts so that digest resolves too.
    pub agent_text: Option<String>,
    /// What trust dropped.
    pub demoted: Vec<Demotion>,
    /// Skipped inputs, lints and deprecations, as sentences.
    pub warnings: Vec<String>,
    /// Each kept block file whose import was refused, as a sentence naming
    /// the file, the line, the import and why. The text of such a file is
    /// its own, unexpanded: a resolution with any is not one to run on, and
    /// `vak-core` refuses it.
    pub refused_imports: Vec<String>,
    /// The merged config, after demotion.
    pub config: EffectiveConfig,
    /// How far the project was trusted.
    pub trust: Trust,
}

impl ResolvedPrompt {
    /// The resolved block `block`.
    pub fn block(&self, block: Block) -> Option<&ResolvedBlock> {
        self.blocks.iter().find(|b| b.block == block)
    }

    /// Where each non-empty block is in [`prefix`](Self::prefix), in
    /// render order: from the start of its heading (or its text, for a
    /// block rendered without one) to the end of its text, separators left
    /// out. `None` if the prefix is not laid out as the blocks say (a
    /// resolution edited by hand): a caller that reasons about the layout
    /// then composes instead. What a budget check bounds a chain's count
    /// by, section by section, without composing it.
    pub fn sections(&self) -> Option<Vec<(Block, std::ops::Range<usize>)>> {
        let agent = self.agent.as_ref().map(|a| a.role.as_str());
        let mut out = Vec::with_capacity(self.blocks.len());
        let mut at = 0;
        let mut heading = String::new();
        for resolved in self.blocks.iter().filter(|b| !b.text.is_empty()) {
            if !out.is_empty() {
                let separator = if resolved.block == Block::SurfaceNote {
                    "\n"
                } else {
                    "\n\n"
                };
                at += self
                    .prefix
                    .get(at..)?
                    .starts_with(separator)
                    .then_some(separator.len())?;
            }
            heading.clear();
            push_heading(&mut heading, resolved.block, agent);
            let rest = self.prefix.get(at..)?;
            let body = rest.strip_prefix(heading.as_str())?;
            body.starts_with(resolved.text.as_str()).then_some(())?;
            let end = at + heading.len() + resolved.text.len();
            out.push((resolved.block, at..end));
            at = end;
        }
        (self.prefix.get(at..)? == "\n").then_some(out)
    }

    /// What a session started from this resolution freezes:
    /// the one place a contract is made from a resolution.
    pub fn freeze(&self, parent: Option<ParentSession>) -> FrozenContract {
        FrozenContract {
            capabilities: self.capabilities.to_vec(),
            prompt_layers: self.descriptors.to_vec(),
            fingerprint: self.fingerprint.clone(),
            prefix: self.prefix.clone(),
            agent: self.agent.clone(),
            parent,
        }
    }
}

/// The sentence naming a refused import of the block file `provenance`.
fn import_refused(
    block: Block,
    provenance: &Provenance,
    error: &vak_prompt_loader::ImportError,
) -> String {
    format!("`{block}` in {provenance} imports what cannot be read: {error}")
}

/// The operating rules with the directories' interop files appended: the
/// winning text, then each interop file root first, introduced by a plain
/// line naming it relative to the project `root` (`From services/AGENTS.md:`).
/// Each piece is contained on its own (a fence one file leaves open is
/// closed at that file's end), so no file's Markdown reaches into the next
/// file's introduction or the next section.
fn with_interop(
    contributors: &[Contributor],
    root: Option<&camino::Utf8PathBuf>,
    memo: &mut ComposeMemo,
) -> String {
    let mut out = String::with_capacity(contributors.iter().map(|c| c.text.len() + 64).sum());
    for c in contributors.iter().filter(|c| !c.text.is_empty()) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        if c.interop {
            // An interop file is always a file; its path is named from
            // the project root, as a path, not as a string.
            let file = c
                .provenance
                .source
                .path()
                .unwrap_or(camino::Utf8Path::new(""));
            let relative = root
                .and_then(|root| file.strip_prefix(root).ok())
                .unwrap_or(file)
                .as_str();
            out.push_str("From ");
            out.push_str(relative);
            out.push_str(":\n\n");
        }
        out.push_str(&memo.contain(&c.text));
    }
    out
}

/// Render the accumulated items of a guardrails or surface-note block,
/// widest first, dropping later duplicates.
fn accumulate(block: Block, contributors: &[Contributor], warnings: &mut Vec<String>) -> String {
    let mut list =
        GuardrailList::with_capacity(contributors.iter().map(|c| c.text.len() + 8).sum());
    let mut lints = Vec::new();
    for contributor in contributors {
        let (mut said, mut more) = (0usize, 0usize);
        lints.clear();
        list.add_into(&contributor.text, &mut lints);
        for lint in &lints {
            // A surface note is prose by nature; only guardrails are lists.
            if block == Block::SurfaceNote
                && matches!(lint, GuardrailLint::ProseBeforeFirstBullet { .. })
            {
                continue;
            }
            if said == MAX_LINTS_PER_FILE {
                more += 1;
                continue;
            }
            said += 1;
            warnings.push(format!(
                "`{block}` in {}: {}",
                contributor.provenance,
                lint.worded_for(block)
            ));
        }
        if more > 0 {
            warnings.push(format!(
                "`{block}` in {}: and {more} more lints of this file, not each said",
                contributor.provenance
            ));
        }
    }
    list.into_rendered()
}

/// At most this many lints are said for one file of one block; the rest
/// are counted in one line.
pub const MAX_LINTS_PER_FILE: usize = 20;

/// `parts` joined by `separator` into one string, empty parts skipped:
/// one allocation, where collecting and joining makes a vector too.
fn join_nonempty<S: AsRef<str>>(parts: impl Iterator<Item = S> + Clone, separator: &str) -> String {
    let size = parts
        .clone()
        .map(|part| part.as_ref().len() + separator.len())
        .sum();
    let mut out = String::with_capacity(size);
    for part in parts {
        let part = part.as_ref();
        if part.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str(separator);
        }
        out.push_str(part);
    }
    out
}

/// A skill's description: its front matter's `description:`, else its
/// first line of prose, cut at 160 characters (then ending in `…`).
/// Borrowed from `text` unless it was cut.
fn skill_description(text: &str) -> Cow<'_, str> {
    let mut lines = text.lines();
    let mut description = None;
    if text.starts_with("---") {
        lines.next();
        for line in lines.by_ref() {
            if line.trim() == "---" {
                break;
            }
            if let Some(value) = line.strip_prefix("description:") {
                description = Some(value.trim().trim_matches('"'));
            }
        }
    }
    let description = description.unwrap_or_else(|| {
        lines
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")
            .unwrap_or("")
    });
    // The first 160 characters, sliced rather than collected one by one.
    let Some((end, _)) = description.char_indices().nth(160) else {
        return Cow::Borrowed(description);
    };
    let mut short = String::with_capacity(end + '…'.len_utf8());
    short.push_str(&description[..end]);
    short.push('…');
    Cow::Owned(short)
}

/// Resolve the prompt: apply trust, compose every block, render the prefix
/// and the tail, and describe every winning layer.
pub fn resolve_prompt(input: &ResolveInput<'_>) -> ResolvedPrompt {
    resolve_prompt_with(input, &mut ComposeMemo::new())
}

/// [`resolve_prompt`], sharing with the other chains composed through
/// `memo` what is the same for all of them (an untrusted config's
/// demotion): what a check that composes every chain of a snapshot calls.
pub fn resolve_prompt_with(input: &ResolveInput<'_>, memo: &mut ComposeMemo) -> ResolvedPrompt {
    let chain = input.chain;
    let mut demoted = Vec::new();
    let mut refused_imports = Vec::new();
    let mut warnings: Vec<String> = chain
        .skipped
        .iter()
        .map(|s| format!("{s}; skipped"))
        .collect();

    // The seed, then every loaded contribution that trust keeps. At the
    // agent tier, identity and operating rules become additive agent
    // instructions: a role refines the agent, it never replaces who it is.
    let builtin = builtin();
    let mut kept: Vec<Kept<'_>> =
        Vec::with_capacity(builtin.seed.len() + chain.contributions.len() + 2);
    kept.extend(builtin.seed.iter().zip(&builtin.descriptors).map(
        |((block, provenance, text), (.., made))| Kept {
            block: *block,
            provenance,
            text: Cow::Borrowed(text.as_str()),
            base: Some(text),
            made: Some(made),
            interop: false,
            imports: Vec::new(),
            refused: None,
            level: 0,
        },
    ));
    // Only the root's own `.vak/prompts/` files decide against SYSTEM.md: a
    // directory sub-layer below the root, or the root's `AGENTS.md`, is not
    // "the project's own identity.md or operating-rules.md" (DECISIONS §4,
    // §15).
    let at_root = |c: &Contribution| c.provenance.layer == PromptLayer::Project && c.level == 0;
    // At the root, a project-layer text that is not the interop file is
    // one of the root's own `.vak/prompts/` files.
    let project_base_sets_identity = chain.contributions.iter().any(|c| {
        matches!(c.block, Block::Identity | Block::OperatingRules) && !c.interop && at_root(c)
    });
    let root_has_rules = chain
        .contributions
        .iter()
        .any(|c| c.block == Block::OperatingRules && !c.interop && at_root(c));
    let locked = |block: Block| chain.managed.as_ref().is_some_and(|m| m.locks(block));
    for contribution in &chain.contributions {
        let what = || format!("`{}` in {}", contribution.block, contribution.provenance);
        let text = if contribution.imports.files.is_empty() {
            contributed(&contribution.text, what, &mut warnings)
        } else {
            // The text holds its imports' too, each warned about by its own
            // path below: this file's warning is about its own characters.
            let _ = contributed(&contribution.imports.own, what, &mut warnings);
            contributed(&contribution.text, what, &mut Vec::new())
        };
        let mut block = contribution.block;
        if contribution.provenance.layer == PromptLayer::Agent
            && matches!(block, Block::Identity | Block::OperatingRules)
        {
            block = Block::AgentInstructions;
        }
        // A block the managed layer locks has the managed text only: a
        // narrower file for it (an AGENTS.md too) is reported, never applied.
        let verdict = if locked(block) && contribution.provenance.layer > PromptLayer::Managed {
            Verdict::Demote(DemoteReason::LockedByManaged)
        } else {
            prompt_verdict(&contribution.provenance, block, input.trust)
        };
        match verdict {
            Verdict::Keep => {
                // An import is trusted as the file that imports it: kept
                // with it, or demoted with it below.
                let imports = contribution
                    .imports
                    .files
                    .iter()
                    .map(|file| {
                        let text = contributed(
                            &file.text,
                            || format!("`{block}` imported in {}", file.provenance),
                            &mut warnings,
                        );
                        (&file.provenance, text)
                    })
                    .collect();
                kept.push(Kept {
                    block,
                    provenance: &contribution.provenance,
                    text,
                    base: Some(&contribution.text),
                    made: None,
                    interop: contribution.interop,
                    imports,
                    refused: contribution.imports.refused.as_deref(),
                    level: contribution.level,
                });
            }
            Verdict::Demote(reason) => {
                if let Some(error) = &contribution.imports.refused {
                    warnings.push(format!(
                        "{} (not applied: the file is demoted)",
                        import_refused(block, &contribution.provenance, error)
                    ));
                }
                demoted.push(Demotion {
                    block: Some(block),
                    config_key: None,
                    provenance: contribution.provenance.clone(),
                    reason,
                });
            }
        }
    }

    // Legacy `.vak/SYSTEM.md`: never a replacement for the whole prompt.
    if let Some(legacy) = &chain.legacy_system {
        let provenance = &legacy.provenance;
        let legacy_text = contributed(&legacy.text, || provenance.to_string(), &mut warnings);
        if input.trust == Trust::Untrusted {
            demoted.push(Demotion {
                block: Some(Block::Identity),
                config_key: None,
                provenance: provenance.clone(),
                reason: DemoteReason::UntrustedLegacySystem,
            });
        } else if locked(Block::Identity) {
            demoted.push(Demotion {
                block: Some(Block::Identity),
                config_key: None,
                provenance: provenance.clone(),
                reason: DemoteReason::LockedByManaged,
            });
        } else if project_base_sets_identity {
            warnings.push(format!(
                "`{}` is ignored because the project has its own identity.md or operating-rules.md; delete it",
                legacy.path()
            ));
        } else {
            warnings.push(format!(
                "`{}` is deprecated: it now stands in for `identity` only (operating-rules empty); move it to `.vak/prompts/identity.md`",
                legacy.path()
            ));
            // Root-level project text goes after the shared layer and the
            // root's other files, before any directory sub-layer and the
            // surface tier, where a root identity.md would have been.
            let at = kept
                .iter()
                .rposition(|c| {
                    c.provenance.layer < PromptLayer::Project
                        || (c.provenance.layer == PromptLayer::Project && c.level == 0)
                })
                .map_or(0, |i| i + 1);
            let mut legacy = vec![Kept {
                block: Block::Identity,
                provenance,
                text: legacy_text,
                base: None,
                made: None,
                interop: false,
                imports: Vec::new(),
                refused: None,
                level: 0,
            }];
            // The root's AGENTS.md stays its operating rules; locked ones
            // stay the managed text.
            if !root_has_rules && !locked(Block::OperatingRules) {
                legacy.push(Kept {
                    block: Block::OperatingRules,
                    provenance,
                    text: Cow::Borrowed(""),
                    base: None,
                    made: None,
                    interop: false,
                    imports: Vec::new(),
                    refused: None,
                    level: 0,
                });
            }
            kept.splice(at..at, legacy);
        }
    }

    let mut config = effective_config(&chain.configs, input.trust, &mut demoted, memo);
    if let Some(managed) = &chain.managed {
        config.add_managed(managed);
        for block in &managed.locked {
            if !managed.files.iter().any(|f| f.block == *block) {
                warnings.push(format!(
                    "`{block}` is locked by the managed layer `{}`, which has no `{}`: no narrower layer applies, so the built-in text stands",
                    Escaped(managed.dir.as_str()),
                    block.file_name().unwrap_or_default()
                ));
            }
        }
    }
    warnings.extend(config.warnings.iter().cloned());

    // Descriptors are made as each block is composed, in render order,
    // while it is still known which kept text each contributor came from:
    // a seed text's descriptor was made once per process, and an agent
    // text's digest is the one its descriptor already holds.
    let mut descriptors = Descriptors::with_capacity(kept.len() + 16);
    let mut kept_digest: Vec<Option<usize>> = vec![None; kept.len()];
    // Which kept texts ended up in force: a refused import in one that did
    // not (shadowed) is a warning, not a refusal.
    let mut in_force = vec![false; kept.len()];
    // Each block's kept texts, in kept order (widest first): one counting
    // pass, so each block reads its own rather than filtering every kept
    // text three or four times over.
    let mut starts = [0usize; Block::ALL.len() + 1];
    for c in &kept {
        starts[c.block.index() + 1] += 1;
    }
    for at in 1..starts.len() {
        starts[at] += starts[at - 1];
    }
    let mut by_block = vec![0usize; kept.len()];
    let mut next = starts;
    for (index, c) in kept.iter().enumerate() {
        let slot = &mut next[c.block.index()];
        if let Some(place) = by_block.get_mut(*slot) {
            *place = index;
        }
        *slot += 1;
    }
    let mut blocks = Vec::with_capacity(Block::ALL.len());
    for block in Block::ALL {
        let mine = by_block
            .get(starts[block.index()]..starts[block.index() + 1])
            .unwrap_or_default();
        // A list parses its lines; any other block is its text, trimmed.
        let accumulates = block.composition() == Composition::Accumulate;
        let mut contributor = |index: usize| {
            let c = &kept[index];
            let text = if accumulates {
                c.text.as_ref()
            } else {
                c.text.trim()
            };
            let same = text.len() == c.text.len();
            descriptors.push(match c.made {
                Some(made) if same => Entry::Made(made),
                _ => descriptor(block, c.provenance, text),
            });
            if same {
                kept_digest[index] = Some(descriptors.recorded() - 1);
            }
            in_force[index] = true;
            if let Some(error) = c.refused {
                refused_imports.push(import_refused(block, c.provenance, error));
            }
            // Each imported file's descriptor follows its includer's, so a
            // change in one is named by its own path.
            let imports = c
                .imports
                .iter()
                .map(|(provenance, text)| {
                    descriptors.push(descriptor(block, provenance, text));
                    Contributor {
                        provenance: Arc::clone(provenance),
                        text: SharedText::from(text.clone()),
                        interop: false,
                        imports: Vec::new(),
                    }
                })
                .collect();
            Contributor {
                provenance: Arc::clone(c.provenance),
                text: SharedText::share_or_copy(c.base, text),
                interop: c.interop,
                imports,
            }
        };
        let of_block = || mine.iter().copied().filter(|i| !kept[*i].interop);
        // Set when the block's pieces were contained one by one.
        let mut contained = false;
        let resolved = match block.composition() {
            // Only the narrowest text is kept; the layers it shadows are
            // named by provenance alone, so their text is never copied.
            Composition::NarrowestWins => {
                let count = of_block().count();
                let shadowed: Vec<Arc<Provenance>> = of_block()
                    .take(count.saturating_sub(1))
                    .map(|i| Arc::clone(kept[i].provenance))
                    .collect();
                let winner = of_block().next_back().map(&mut contributor);
                let mut contributors: Vec<Contributor> = winner.into_iter().collect();
                let appended = mine.iter().copied().filter(|i| kept[*i].interop);
                contributors.extend(appended.map(&mut contributor));
                let text = if contributors.iter().any(|c| c.interop) {
                    contained = true;
                    SharedText::from(with_interop(
                        &contributors,
                        chain.project_levels.first(),
                        memo,
                    ))
                } else {
                    contributors
                        .first()
                        .map(|w| w.text.clone())
                        .unwrap_or_default()
                };
                ResolvedBlock {
                    locked: false,
                    block,
                    text,
                    shadowed,
                    contributors,
                }
            }
            Composition::Accumulate => {
                let mut candidates = Vec::with_capacity(of_block().count());
                candidates.extend(of_block().map(&mut contributor));
                ResolvedBlock {
                    locked: false,
                    block,
                    text: accumulate(block, &candidates, &mut warnings).into(),
                    contributors: candidates,
                    shadowed: Vec::new(),
                }
            }
            Composition::Additive => {
                let mut candidates = Vec::with_capacity(of_block().count());
                candidates.extend(of_block().map(&mut contributor));
                // Each layer's text is contained on its own, as each file
                // of the operating rules is.
                contained = true;
                let pieces: Vec<Cow<'_, str>> =
                    candidates.iter().map(|c| memo.contain(&c.text)).collect();
                let text = join_nonempty(pieces.iter(), "\n\n");
                ResolvedBlock {
                    locked: false,
                    block,
                    text: text.into(),
                    contributors: candidates,
                    shadowed: Vec::new(),
                }
            }
            Composition::Fixed => {
                let contract = &builtin.contract;
                if let Some((.., made)) = builtin.descriptors.last() {
                    descriptors.push(Entry::Made(made));
                }
                ResolvedBlock {
                    locked: false,
                    block,
                    contributors: vec![contract.clone()],
                    text: contract.text.clone(),
                    shadowed: Vec::new(),
                }
            }
            Composition::RuntimeDerived => {
                let resolved = runtime_block(block, input, &config, &mut demoted, &mut warnings);
                match (block, builtin.surfaces.get(surface_index(input.surface))) {
                    (Block::Surface, Some((_, made))) => descriptors.push(Entry::Made(made)),
                    _ => {
                        for c in &resolved.contributors {
                            descriptors.push(descriptor(block, &c.provenance, &c.text));
                        }
                    }
                }
                resolved
            }
        };
        let mut resolved = resolved;
        // Structural containment: a line of user text, or of a name from
        // input, never reads as the prefix's own structure; its headings
        // are nested under the block's section.
        if !contained
            && (block.owner() == Owner::User || matches!(block, Block::Skills | Block::Mcp))
            && let Cow::Owned(text) = memo.contain(&resolved.text)
        {
            resolved.text = text.into();
        }
        resolved.locked = locked(block);
        blocks.push(resolved);
    }

    for (c, _) in kept.iter().zip(&in_force).filter(|(_, used)| !**used) {
        if let Some(error) = c.refused {
            warnings.push(format!(
                "{} (not in force: a narrower layer's file wins)",
                import_refused(c.block, c.provenance, error)
            ));
        }
    }
    let prefix = render_prefix(&blocks, input.agent);
    let (agent, agent_text) = input
        .agent
        .map(|role| agent_identity(role, &kept, &kept_digest, &descriptors, chain))
        .unzip();

    ResolvedPrompt {
        prefix,
        tail: render_tail(&input.tail),
        fingerprint: descriptors.fingerprint(),
        descriptors,
        capabilities: Arc::clone(&builtin.capabilities),
        agent,
        agent_text,
        blocks,
        demoted,
        warnings,
        refused_imports,
        config,
        trust: input.trust,
    }
}

fn runtime_block(
    block: Block,
    input: &ResolveInput<'_>,
    config: &EffectiveConfig,
    demoted: &mut Vec<Demotion>,
    warnings: &mut Vec<String>,
) -> ResolvedBlock {
    let contributors: Vec<Contributor> = match block {
        Block::Surface => vec![
            builtin()
                .surfaces
                .get(surface_index(input.surface))
                .map_or_else(|| surface_line(input.surface), |(line, _)| line.clone()),
        ],
        Block::Skills => {
            let mut lines = Vec::new();
            for skill in &input.chain.skills {
                let provenance = &skill.provenance;
                // Trust is decided by origin; the demotion is reported at the
                // project layer, where the user would go to fix it.
                if let Verdict::Demote(reason) =
                    prompt_verdict(provenance, Block::Skills, input.trust)
                {
                    demoted.push(Demotion {
                        block: Some(Block::Skills),
                        config_key: None,
                        provenance: Arc::new(Provenance {
                            layer: PromptLayer::Project,
                            ..provenance.as_ref().clone()
                        }),
                        reason,
                    });
                    continue;
                }
                let what = || format!("skill `{}`", Escaped(skill.path().as_str()));
                let text = contributed(&skill.text, what, warnings);
                // Name and description are cleaned (and warned about) in
                // that order, then folded straight into the line.
                let name = contributed(&skill.name, || format!("the name of {}", what()), warnings);
                let description = skill_description(&text);
                let description = contributed(&description, what, warnings);
                let mut line = String::with_capacity(name.len() + description.len() + 6);
                line.push_str("- `");
                push_one_line(&name, &mut line);
                line.push_str("`: ");
                push_one_line(&description, &mut line);
                lines.push(Contributor {
                    provenance: Arc::clone(provenance),
                    text: line.into(),
                    interop: false,
                    imports: Vec::new(),
                });
            }
            lines
        }
        Block::Mcp => config
            .mcp_servers
            .iter()
            .map(|server| Contributor {
                provenance: Arc::new(Provenance {
                    layer: PromptLayer::Runtime,
                    origin: server.origin,
                    source: server.source.clone(),
                    signed_by: None,
                }),
                text: one_line(
                    &server.value.line,
                    || format!("MCP server `{}`", Escaped(&server.source.to_string())),
                    warnings,
                )
                .into(),
                interop: false,
                imports: Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    // Every line, empty ones too, as a join of them would.
    let mut text = String::with_capacity(contributors.iter().map(|c| c.text.len() + 1).sum());
    for (index, c) in contributors.iter().enumerate() {
        if index > 0 {
            text.push('\n');
        }
        text.push_str(&c.text);
    }
    ResolvedBlock {
        locked: false,
        block,
        contributors,
        shadowed: Vec::new(),
        text: text.into(),
    }
}

/// Where `surface` is in [`SurfaceKind::ALL`].
fn surface_index(surface: SurfaceKind) -> usize {
    SurfaceKind::ALL
        .iter()
        .position(|s| *s == surface)
        .unwrap_or(usize::MAX)
}

/// Append the heading `block` renders under, if any, and its line break.
fn push_heading(prefix: &mut String, block: Block, agent: Option<&str>) {
    let heading = match block {
        Block::Identity | Block::Surface | Block::SurfaceNote => return,
        Block::OperatingRules => "## Operating rules",
        Block::Guardrails => "## Guardrails",
        Block::CapabilityContract => "## Capabilities",
        Block::Skills => {
            "## Skills\nLoad a skill with `use_skill` when its description fits the task."
        }
        Block::Mcp => "## MCP servers",
        Block::AgentInstructions => {
            prefix.push_str("## Agent instructions: ");
            prefix.push_str(agent.unwrap_or("role"));
            "\nThese refine tone, workflow and focus for this role; everything above still applies."
        }
    };
    prefix.push_str(heading);
    prefix.push('\n');
}

/// Render the prefix: blocks in their fixed order, empty ones omitted,
/// surface notes directly under the generated `Surface:` line.
fn render_prefix(blocks: &[ResolvedBlock], agent: Option<&Name>) -> String {
    // Written into one string sized up front: sections are separated by a
    // blank line, except that a surface note follows the section before it
    // on the next line.
    let size = blocks.iter().map(|b| b.text.len() + 160).sum::<usize>();
    let mut prefix = String::with_capacity(size);
    for resolved in blocks {
        if resolved.text.is_empty() {
            continue;
        }
        if !prefix.is_empty() {
            prefix.push_str(if resolved.block == Block::SurfaceNote {
                "\n"
            } else {
                "\n\n"
            });
        }
        push_heading(&mut prefix, resolved.block, agent.map(Name::as_str));
        prefix.push_str(&resolved.text);
    }
    prefix.push('\n');
    prefix
}

/// The role's identity: a digest over the role name and each agent-tier
/// text's block and digest. A text that went into a descriptor unchanged
/// is not digested again: its descriptor's digest is the same hash.
fn agent_identity(
    role: &Name,
    kept: &[Kept<'_>],
    kept_digest: &[Option<usize>],
    descriptors: &Descriptors,
    chain: &LoadedChain,
) -> (AgentIdentity, String) {
    // Sized by the agent-tier texts alone: one line each of a block name
    // (at most 20 bytes), a tab, a digest and a line break.
    let agent_texts = kept
        .iter()
        .filter(|c| c.provenance.layer == PromptLayer::Agent)
        .count();
    let mut canonical = String::with_capacity(role.as_str().len() + 7 + 86 * agent_texts);
    for part in ["role\t", role.as_str(), "\n"] {
        canonical.push_str(part);
    }
    for (index, c) in kept.iter().enumerate() {
        if c.provenance.layer != PromptLayer::Agent {
            continue;
        }
        canonical.push_str(c.block.wire_name());
        canonical.push('\t');
        match kept_digest
            .get(index)
            .copied()
            .flatten()
            .and_then(|d| descriptors.entry(d))
        {
            Some(entry) => entry.push_hex(&mut canonical),
            None => TextDigest::of(&c.text).push_hex(&mut canonical),
        }
        canonical.push('\n');
    }
    let identity = AgentIdentity {
        role: role.to_string(),
        digest: sha256_hex(&canonical),
        sources: chain.role_dirs.iter().map(ToString::to_string).collect(),
    };
    (identity, canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_descriptors_are_the_ones_made_from_their_text() {
        for (block, provenance, text, made) in &builtin().descriptors {
            assert_eq!(
                *made,
                PromptLayerDescriptor::of(*block, provenance, text),
                "{provenance}"
            );
            let entry = descriptor(*block, provenance, text);
            assert!(matches!(entry, Entry::Made(m) if std::ptr::eq(m, made)));
        }
        // A built-in provenance with another text is digested afresh.
        let (block, provenance, _, made) = &builtin().descriptors[0];
        let other = descriptor(*block, provenance, "something else").written();
        assert_ne!(other.digest, made.digest);
        assert_eq!(
            other,
            PromptLayerDescriptor::of(*block, provenance, "something else")
        );
        assert_eq!(builtin().contract.text, render_contract(CATALOG));
    }

    /// A project block file that imports `file` (already expanded by the
    /// loader), and whether its import was refused.
    fn importing(block: Block, file: &str, refused: bool) -> Contribution {
        let provenance = Provenance::new(PromptLayer::Project, Origin::Project, "/p/x.md");
        let imported = vak_prompt_loader::Imported {
            provenance: Arc::new(Provenance::new(PromptLayer::Project, Origin::Project, file)),
            text: "- imported rule\n".to_owned(),
            depth: 1,
            imported_by: "/p/x.md".into(),
        };
        let imports = if refused {
            vak_prompt_loader::Imports {
                own: String::new(),
                files: Vec::new(),
                refused: Some(Box::new(vak_prompt_loader::ImportError {
                    file: "/p/x.md".into(),
                    line: 1,
                    target: "gone.md".to_owned(),
                    why: vak_prompt_loader::ImportRefusal::Missing("/p/gone.md".into()),
                })),
            }
        } else {
            vak_prompt_loader::Imports {
                files: vec![imported],
                refused: None,
                own: "- own rule\n@more.md\n".to_owned(),
            }
        };
        Contribution {
            block,
            provenance: Arc::new(provenance),
            text: "- own rule\n- imported rule\n".to_owned().into(),
            interop: false,
            imports,
            level: 0,
        }
    }

    fn resolve(chain: &LoadedChain, trust: Trust) -> ResolvedPrompt {
        resolve_prompt(&ResolveInput {
            chain,
            trust,
            surface: SurfaceKind::Cli,
            agent: None,
            tail: TailContext::default(),
        })
    }

    /// The sections tile the prefix: each block's text where it says, under
    /// its heading, and only separators between them; a prefix edited by
    /// hand has none.
    #[test]
    fn sections_say_where_each_block_is_in_the_prefix() {
        let text = |block, t: &str| Contribution {
            block,
            provenance: Arc::new(Provenance::new(
                PromptLayer::Shared,
                Origin::Home,
                "/h/x.md",
            )),
            text: t.to_owned().into(),
            interop: false,
            imports: vak_prompt_loader::Imports::default(),
            level: 0,
        };
        let chain = LoadedChain {
            contributions: vec![
                text(Block::Identity, "You help."),
                text(Block::Guardrails, "- never\n# forged"),
                text(Block::SurfaceNote, "  indented note"),
            ],
            ..LoadedChain::default()
        };
        let mut resolved = resolve(&chain, Trust::Trusted);
        let sections = resolved.sections().expect("laid out as composed");
        let mut at = 0;
        for (block, range) in &sections {
            let between = &resolved.prefix[at..range.start];
            assert!(matches!(between, "" | "\n" | "\n\n"), "{between:?}");
            let body = resolved
                .block(*block)
                .map(|b| b.text.as_str())
                .unwrap_or_default();
            assert!(resolved.prefix[range.clone()].ends_with(body), "{block}");
            at = range.end;
        }
        assert_eq!(&resolved.prefix[at..], "\n");
        let blocks: Vec<Block> = sections.iter().map(|(b, _)| *b).collect();
        assert!(blocks.contains(&Block::SurfaceNote) && blocks.contains(&Block::Guardrails));
        resolved.prefix.insert(0, 'x');
        assert_eq!(resolved.sections(), None);
    }

    #[test]
    fn an_imported_file_is_a_descriptor_after_its_includer_kept_or_demoted_with_it() {
        let chain = LoadedChain {
            contributions: vec![
                importing(Block::Identity, "/p/who.md", false),
                importing(Block::Guardrails, "/p/more.md", false),
            ],
            ..LoadedChain::default()
        };
        let sources = |r: &ResolvedPrompt| -> Vec<(String, Option<String>)> {
            r.descriptors
                .iter()
                .filter(|d| d.layer == "project")
                .map(|d| {
                    (
                        d.block.to_string(),
                        d.source.as_ref().map(ToString::to_string),
                    )
                })
                .collect()
        };
        let trusted = resolve(&chain, Trust::Trusted);
        let pair = |b: &str, s: &str| (b.to_owned(), Some(s.to_owned()));
        assert_eq!(
            sources(&trusted),
            [
                pair("identity", "/p/x.md"),
                pair("identity", "/p/who.md"),
                pair("guardrails", "/p/x.md"),
                pair("guardrails", "/p/more.md"),
            ]
        );
        let imported = &trusted.descriptors[trusted
            .descriptors
            .iter()
            .position(|d| d.source == Some("/p/who.md".into()))
            .unwrap()];
        assert_eq!(imported.digest, sha256_hex("- imported rule"));
        let identity = trusted.block(Block::Identity).unwrap();
        assert_eq!(identity.contributors[0].imports.len(), 1);

        // Untrusted: the identity goes with its import; the guardrails
        // stay with theirs.
        let untrusted = resolve(&chain, Trust::Untrusted);
        assert_eq!(
            sources(&untrusted),
            [
                pair("guardrails", "/p/x.md"),
                pair("guardrails", "/p/more.md")
            ]
        );
        assert!(untrusted.refused_imports.is_empty());
    }

    #[test]
    fn a_refused_import_is_named_only_when_its_file_is_in_force() {
        let chain = LoadedChain {
            contributions: vec![importing(Block::Identity, "", true)],
            ..LoadedChain::default()
        };
        let trusted = resolve(&chain, Trust::Trusted);
        assert_eq!(trusted.refused_imports.len(), 1);
        assert!(trusted.refused_imports[0].contains("gone.md"));
        let untrusted = resolve(&chain, Trust::Untrusted);
        assert!(untrusted.refused_imports.is_empty());
        assert!(
            untrusted
                .warnings
                .iter()
                .any(|w| w.contains("not applied: the file is demoted"))
        );

        // A shared file shadowed by the project's: named, stops nothing.
        let mut shared = importing(Block::Identity, "", true);
        shared.provenance = Arc::new(Provenance::new(
            PromptLayer::Shared,
            Origin::Home,
            "/h/identity.md",
        ));
        let chain = LoadedChain {
            contributions: vec![shared, importing(Block::Identity, "/p/who.md", false)],
            ..LoadedChain::default()
        };
        let shadowed = resolve(&chain, Trust::Trusted);
        assert!(shadowed.refused_imports.is_empty());
        assert!(
            shadowed
                .warnings
                .iter()
                .any(|w| w.contains("/h/identity.md") && w.contains("not in force")),
            "{:?}",
            shadowed.warnings
        );
    }

    fn managed_layer(locked: &[Block]) -> Arc<vak_prompt_loader::ManagedLayer> {
        let provenance = Arc::new(Provenance::managed("/etc/vak/prompts/identity.md", None));
        Arc::new(vak_prompt_loader::ManagedLayer {
            dir: "/etc/vak/prompts".into(),
            config: Some("/etc/vak/prompts/config.toml".into()),
            locked: locked.to_vec(),
            keys: Vec::new(),
            max_tokens: None,
            files: vec![vak_prompt_loader::ManagedFile {
                block: Block::Identity,
                surface: None,
                provenance,
                text: "You are ACME's agent.".to_owned().into(),
            }],
            config_signed_by: None,
        })
    }

    const NARROWER: [(PromptLayer, Origin); 6] = [
        (PromptLayer::Shared, Origin::Home),
        (PromptLayer::Project, Origin::Project),
        (PromptLayer::Surface, Origin::Project),
        (PromptLayer::Bot, Origin::Gateway),
        (PromptLayer::Chat, Origin::Gateway),
        (PromptLayer::Agent, Origin::Home),
    ];

    proptest::proptest! {
        /// Whatever narrower layers say about a block the managed layer
        /// locks, and however far the project is trusted, the block is the
        /// managed text and every narrower text is reported not applied;
        /// unlocked, the narrowest says it as before. A role's text still
        /// becomes its instructions.
        #[test]
        fn a_locked_block_is_the_managed_text_whatever_narrower_layers_say(
            present in proptest::collection::vec(proptest::bool::ANY, NARROWER.len()),
            texts in proptest::collection::vec("[a-z ]{0,12}", NARROWER.len()),
            trusted: bool,
            lock: bool,
        ) {
            let managed = managed_layer(if lock { &[Block::Identity] } else { &[] });
            let mut chain = LoadedChain {
                managed: Some(Arc::clone(&managed)),
                ..LoadedChain::default()
            };
            chain.contributions.push(Contribution {
                block: Block::Identity,
                provenance: Arc::clone(&managed.files[0].provenance),
                text: managed.files[0].text.clone(),
                interop: false,
                imports: Default::default(),
                level: 0,
            });
            for (i, (layer, origin)) in NARROWER.iter().enumerate() {
                if present[i] {
                    chain.contributions.push(Contribution {
                        block: Block::Identity,
                        provenance: Arc::new(Provenance::new(*layer, *origin, format!("/x/{i}"))),
                        text: format!("narrower {i} {}", texts[i]).into(),
                        interop: false,
                        imports: Default::default(),
                        level: 0,
                    });
                }
            }
            let role = Name::new(vak_prompt_blocks::NameKind::Role, "reviewer").unwrap();
            let resolved = resolve_prompt(&ResolveInput {
                chain: &chain,
                trust: if trusted { Trust::Trusted } else { Trust::Untrusted },
                surface: SurfaceKind::Cli,
                agent: Some(&role),
                tail: TailContext::now(),
            });
            let identity = resolved.block(Block::Identity).unwrap();
            let locked_out = resolved
                .demoted
                .iter()
                .filter(|d| d.reason == DemoteReason::LockedByManaged)
                .count();
            if lock {
                proptest::prop_assert_eq!(&identity.text, "You are ACME's agent.");
                proptest::prop_assert!(identity.locked);
                // The agent tier's text is instructions, never locked out.
                let narrower = present[..5].iter().filter(|p| **p).count();
                proptest::prop_assert_eq!(locked_out, narrower);
                if present[5] {
                    let agent = resolved.block(Block::AgentInstructions).unwrap();
                    proptest::prop_assert!(agent.text.contains("narrower 5"));
                }
            } else {
                proptest::prop_assert_eq!(locked_out, 0);
                proptest::prop_assert!(!identity.locked);
            }
        }
    }
}
