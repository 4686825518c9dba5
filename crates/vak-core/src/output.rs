//! The JSON documents the CLI's `--format json` and the admin API both
//! answer, one `Serialize` type per concept: the effective prompt
//! ([`PromptDocument`]), a save's, revert's or reset's result
//! ([`SavedReport`]), the versions of a file ([`VersionsReport`]), a diff
//! between two of them ([`VersionDiff`]), what changed since a session froze
//! its prompt ([`TextChangeReport`]), what trusting a project would change
//! ([`TrustPreviewReport`]), the chains over a cap ([`OverChainReport`],
//! [`BudgetRefusal`]), the scoped rules ([`RulesListing`]) and a page of the
//! security log ([`AuditPage`]).
//!
//! Each is a projection of what the library's operation returned; it
//! borrows and computes nothing the operation did not (a diff reads its two
//! texts in [`VersionDiff::between`], once, for both). Where the terminal
//! and the admin page really say different things (the page's URL already
//! names the block; a terminal prints warnings on stderr, the page shows
//! them inline; the page never names the server's project), the difference
//! is a documented [`Audience`] or builder option on the one type, never a
//! second document.
//!
//! Both front ends encode a document through [`serde_json::Value`] (see
//! [`to_value`]), whose map orders keys by name: the field order here is
//! for the reader, and the bytes on the wire are the same either way.

use camino::Utf8Path;
use serde::Serialize;
use vak_prompt_blocks::{Block, Composition};
use vak_prompt_budget::{BudgetReport, LayerTokens, TokenSummary};
use vak_prompt_compose::ResolvedPrompt;
use vak_prompt_trust::Trust;

use crate::history::{
    BlockPreview, CurrentText, ElsewherePreview, History, HistoryError, TextChange, TrustPreview,
    VersionRecord, Versions,
};
use crate::report::BlockReport;
use crate::{Budget, OverCap, OverChain, PromptReport, Reset, RulesReport, Saved};

/// Encode a document as the JSON value both front ends print or answer.
///
/// # Errors
/// When a field cannot be encoded (a map with non-string keys: none of the
/// documents here has one).
pub fn to_value(document: &impl Serialize) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_value(document)
}

/// A trust level as every document names it: `trusted` or `untrusted`.
pub fn trust_name(trust: Trust) -> &'static str {
    match trust {
        Trust::Trusted => "trusted",
        Trust::Untrusted => "untrusted",
    }
}

/// Who reads a document, for the few fields that differ between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// `vak … --json`: the block is named in the document (a script may
    /// have saved several), counts before and after are bare numbers, and
    /// warnings go to stderr rather than into the document.
    Terminal,
    /// The admin page: the URL names the block, counts before and after
    /// are whole token summaries (the page draws the cap and the window),
    /// and the preview's lints, `not_applied` and any `unrecorded` warning
    /// are fields the page shows.
    Page,
}

/// A prefix's token count in a save's result: a bare number for a
/// terminal, the whole summary for the page ([`Audience`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Tokens {
    /// The prefix's tokens.
    Count(usize),
    /// The prefix's tokens against the cap and the window.
    Summary(TokenSummary),
}

impl Tokens {
    fn of(report: &vak_prompt_budget::BudgetReport, audience: Audience) -> Tokens {
        match audience {
            Audience::Terminal => Tokens::Count(report.prefix_tokens),
            Audience::Page => Tokens::Summary(report.summary()),
        }
    }
}

/// What a save, a revert or a reset of one block file answers.
///
/// A field left `None` is absent from the document; an inner `None` is a
/// JSON `null` (a reset's `digest`: no file after it).
#[derive(Debug, Clone, Serialize)]
pub struct SavedReport<'a> {
    /// The block's wire name ([`Audience::Terminal`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<&'static str>,
    /// The file written or removed.
    pub path: &'a Utf8Path,
    /// The file's digest now (`null`: no file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<Option<&'a str>>,
    /// The file's digest before (`null`: there was none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Option<&'a str>>,
    /// A reset's: the digest of the file it removed (`null`: none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Option<&'a str>>,
    /// The prefix's tokens after the change, against the cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenSummary>,
    /// The prefix's tokens before the change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<Tokens>,
    /// The prefix's tokens after the change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<Tokens>,
    /// Whether the change was made over the cap, as asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_cap: Option<bool>,
    /// Whether a version and an audit event were kept.
    pub recorded: bool,
    /// Why the change was made but not recorded ([`Audience::Page`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrecorded: Option<Option<&'a str>>,
    /// The text's lints ([`Audience::Page`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lints: Option<&'a [String]>,
    /// Why the layer's text does not apply here ([`Audience::Page`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applied: Option<Option<&'a str>>,
}

impl<'a> SavedReport<'a> {
    /// The fields every change answers, from its preview.
    fn change(
        block: Block,
        preview: &'a crate::Preview,
        recorded: bool,
        over_cap: bool,
        unrecorded: Option<&'a str>,
        audience: Audience,
    ) -> Self {
        let page = audience == Audience::Page;
        SavedReport {
            block: (!page).then(|| block.wire_name()),
            path: &preview.path,
            digest: None,
            previous: None,
            removed: None,
            tokens: Some(preview.budget.report.summary()),
            tokens_before: Some(Tokens::of(&preview.budget_before.report, audience)),
            tokens_after: Some(Tokens::of(&preview.budget.report, audience)),
            over_cap: Some(over_cap),
            recorded,
            unrecorded: page.then_some(unrecorded),
            lints: page.then_some(preview.lints.as_slice()),
            not_applied: page.then_some(preview.not_applied.as_deref()),
        }
    }

    /// A save's or a revert's result.
    pub fn saved(block: Block, saved: &'a Saved, audience: Audience) -> SavedReport<'a> {
        SavedReport {
            path: &saved.outcome.path,
            digest: Some(Some(&saved.outcome.digest)),
            previous: Some(saved.outcome.previous.as_deref()),
            ..SavedReport::change(
                block,
                &saved.preview,
                saved.recorded,
                saved.over_cap,
                saved.unrecorded.as_deref(),
                audience,
            )
        }
    }

    /// A reset's result. A terminal also reads it as a save answers one:
    /// the file's digest before (`previous`), and none after (`digest`).
    pub fn reset(block: Block, reset: &'a Reset, audience: Audience) -> SavedReport<'a> {
        let removed = reset.removed.as_deref();
        let terminal = audience == Audience::Terminal;
        SavedReport {
            removed: Some(removed),
            digest: terminal.then_some(None),
            previous: terminal.then_some(removed),
            ..SavedReport::change(
                block,
                &reset.preview,
                reset.recorded,
                reset.over_cap,
                reset.unrecorded.as_deref(),
                audience,
            )
        }
    }

    /// An edit that changed nothing: the file as it was, on both sides
    /// (`digest` `null` when there is no file), nothing written or counted.
    pub fn unchanged(block: Block, path: &'a Utf8Path, digest: Option<&'a str>) -> SavedReport<'a> {
        SavedReport {
            block: Some(block.wire_name()),
            path,
            digest: Some(digest),
            previous: Some(digest),
            removed: None,
            tokens: None,
            tokens_before: None,
            tokens_after: None,
            over_cap: None,
            recorded: false,
            unrecorded: None,
            lints: None,
            not_applied: None,
        }
    }
}

/// One chain a change or a check found over its cap.
#[derive(Debug, Clone, Serialize)]
pub struct OverChainReport<'a> {
    /// The chain, as [`describe_chain`](crate::describe_chain) names it.
    pub chain: &'a str,
    /// The trusted project it is in (`null`: the project named).
    pub project: Option<&'a Utf8Path>,
    /// Its prefix's tokens.
    pub prefix_tokens: usize,
    /// Its cap.
    pub cap: usize,
    /// How far over.
    pub over_by: usize,
    /// The user-owned layers that contribute, largest first.
    pub offenders: Vec<&'a LayerTokens>,
}

impl OverChain {
    /// This chain as a refusal or a check reports it.
    pub fn report(&self) -> OverChainReport<'_> {
        OverChainReport {
            chain: &self.chain,
            project: self.project.as_deref(),
            prefix_tokens: self.report.prefix_tokens,
            cap: self.report.cap,
            over_by: self.report.over_by(),
            offenders: self.report.offenders(),
        }
    }
}

impl OverCap {
    /// Every chain over its cap ([`OverChain::report`]), in order.
    pub fn reports(&self) -> Vec<OverChainReport<'_>> {
        self.chains().iter().map(OverChain::report).collect()
    }
}

/// What a change refused over the cap carries beside its sentence (the
/// admin's `422`): the largest chain's totals, its user-owned layers
/// largest first, and every chain over.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetRefusal<'a> {
    /// The largest chain's prefix against the cap.
    pub tokens: TokenSummary,
    /// How far over.
    pub over_by: usize,
    /// Its user-owned layers, largest first, with their files and counts.
    pub offenders: Vec<&'a LayerTokens>,
    /// Every chain over the cap, each with its own.
    pub chains: Vec<OverChainReport<'a>>,
}

impl<'a> BudgetRefusal<'a> {
    /// The refusal of a change whose largest chain over is `report`.
    pub fn of(report: &'a BudgetReport, over: &'a OverCap) -> Self {
        BudgetRefusal {
            tokens: report.summary(),
            over_by: report.over_by(),
            offenders: report.offenders(),
            chains: over.reports(),
        }
    }
}

/// The versions of one file (or gateway key), oldest first.
#[derive(Debug, Clone, Serialize)]
pub struct VersionsReport<'a> {
    /// What the versions are of, as a terminal names it ([`Self::target()`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<&'a str>,
    /// The block's wire name, for a block file or a gateway key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<&'static str>,
    /// The file ([`Self::at_path`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'a Utf8Path>,
    /// The gateway key ([`Self::at_key`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
    /// The digest the file has now, which a page sends back with a revert
    /// ([`Self::with_current`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_digest: Option<&'a str>,
    /// The records, oldest first.
    pub versions: &'a [VersionRecord],
    /// How many lines of the log were skipped; a terminal warns on stderr
    /// instead ([`Self::with_current`] adds it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<usize>,
}

impl<'a> VersionsReport<'a> {
    /// `versions` as a document; the builder methods say what they are of.
    pub fn of(versions: &'a Versions) -> Self {
        VersionsReport {
            target: None,
            block: None,
            path: None,
            key: None,
            current_digest: None,
            versions: &versions.records,
            skipped: None,
        }
    }
}

impl<'a> VersionsReport<'a> {
    /// Name what the versions are of, as a terminal does (`target`).
    #[must_use]
    pub fn target(mut self, target: &'a str) -> Self {
        self.target = Some(target);
        self
    }

    /// Name the block.
    #[must_use]
    pub fn block(mut self, block: Block) -> Self {
        self.block = Some(block.wire_name());
        self
    }

    /// Name the file, as the admin page does.
    #[must_use]
    pub fn at_path(mut self, path: &'a Utf8Path) -> Self {
        self.path = Some(path);
        self
    }

    /// Name the gateway key, as the admin page does.
    #[must_use]
    pub fn at_key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }

    /// Add the digest the file has now and the count of skipped lines, as
    /// the admin page shows them.
    #[must_use]
    pub fn with_current(mut self, digest: &'a str, skipped: usize) -> Self {
        self.current_digest = Some(digest);
        self.skipped = Some(skipped);
        self
    }
}

/// A unified diff between two versions of one file or gateway key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionDiff {
    /// The block's wire name ([`Self::of_file`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<&'static str>,
    /// The file, or the gateway key, as a terminal names it
    /// ([`Self::of_file`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The gateway key, as the admin page names it ([`Self::of_key`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The older version's digest (`null`: no file).
    pub from: Option<String>,
    /// The newer version's digest (`null`: no file).
    pub to: Option<String>,
    /// The unified diff (empty: the same text).
    pub diff: String,
}

impl VersionDiff {
    /// The diff from `from` to `to` (`None`: no file, or no key), each
    /// read from `history`, or from `current` when it is the text's digest
    /// now (edited by hand, or by a `git pull`, and never recorded).
    /// `label` heads both sides with the digest's short form, or `absent`.
    ///
    /// # Errors
    /// When either version is neither kept nor the current text.
    pub fn between(
        history: &dyn History,
        label: &str,
        absent: &str,
        from: Option<String>,
        to: Option<String>,
        current: Option<&CurrentText>,
    ) -> Result<VersionDiff, HistoryError> {
        let old = crate::history::text_or_current(history, from.as_deref(), current)?;
        let new = crate::history::text_or_current(history, to.as_deref(), current)?;
        let short = |d: &Option<String>| {
            d.as_deref()
                .map_or_else(|| absent.to_owned(), vak_prompt_blocks::short_digest)
        };
        let diff = crate::history::unified(
            &format!("{label} {}", short(&from)),
            &format!("{label} {}", short(&to)),
            &old,
            &new,
        );
        Ok(VersionDiff {
            block: None,
            path: None,
            key: None,
            from,
            to,
            diff,
        })
    }

    /// Name the block and its file (or key), as a terminal does.
    #[must_use]
    pub fn of_file(mut self, block: Block, path: String) -> Self {
        self.block = Some(block.wire_name());
        self.path = Some(path);
        self
    }

    /// Name the gateway key, as the admin page does.
    #[must_use]
    pub fn of_key(mut self, key: String) -> Self {
        self.key = Some(key);
        self
    }
}

/// One block and layer whose text changed since a session froze it: what
/// `vak session diff` and the admin's rotation diff list.
#[derive(Debug, Clone, Serialize)]
pub struct TextChangeReport<'a> {
    /// The block's wire name.
    pub block: &'a str,
    /// The layer's wire name.
    pub layer: &'a str,
    /// The source (path or gateway key).
    pub source: Option<&'a vak_prompt_blocks::Source>,
    /// The frozen digest (`null`: added since).
    pub frozen: Option<&'a str>,
    /// The current digest (`null`: removed since).
    pub current: Option<&'a str>,
    /// The unified diff (`null` when there is none: see `error`).
    pub diff: Option<&'a str>,
    /// Why there is no diff (`text not kept`).
    pub error: Option<&'a str>,
    /// `changed`, `added`, `removed`, `moved` or `reordered`.
    pub kind: &'static str,
    /// The layer the frozen text came from.
    pub frozen_layer: Option<&'a str>,
    /// The source the frozen text came from.
    pub frozen_source: Option<&'a vak_prompt_blocks::Source>,
}

impl TextChange {
    /// This change as a document.
    pub fn report(&self) -> TextChangeReport<'_> {
        let (diff, error) = match &self.diff {
            Ok(diff) => (Some(diff.as_str()), None),
            Err(why) => (None, Some(why.as_str())),
        };
        TextChangeReport {
            block: &self.block,
            layer: &self.layer,
            source: self.source.as_ref(),
            frozen: self.frozen.as_deref(),
            current: self.current.as_deref(),
            diff,
            error,
            kind: self.kind.as_str(),
            frozen_layer: self.frozen_layer.as_deref(),
            frozen_source: self.frozen_source.as_ref(),
        }
    }
}

/// A prefix's tokens before and after trusting, and the cap after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokensBeforeAfter {
    /// Before (untrusted).
    pub before: usize,
    /// After (trusted).
    pub after: usize,
    /// The cap once trusted.
    pub cap: usize,
}

/// The largest chain trusting would push over its cap.
#[derive(Debug, Clone, Serialize)]
pub struct OverSummary<'a> {
    /// The chain.
    pub chain: &'a str,
    /// Its prefix's tokens once trusted.
    pub prefix_tokens: usize,
    /// Its cap.
    pub cap: usize,
}

/// A config key trusting would apply, and the file that sets it.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigKeyReport<'a> {
    /// The dotted key.
    pub key: &'a str,
    /// The file and key.
    pub source: &'a vak_prompt_blocks::Source,
}

/// What trusting a project would change: `vak trust --preview --json` and
/// `GET /api/trust-preview`.
#[derive(Debug, Clone, Serialize)]
pub struct TrustPreviewReport<'a> {
    /// The project, as a terminal names it ([`Self::on_chain`]); the page
    /// never shows the server's paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<&'a Utf8Path>,
    /// The chain the blocks are shown on ([`Self::on_chain`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// Whether the project is trusted already ([`Self::trusted()`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted: Option<bool>,
    /// Every block whose text trusting would change on the chain.
    pub blocks: &'a [BlockPreview],
    /// Every other change, with the chains it shows on.
    pub elsewhere: &'a [ElsewherePreview],
    /// Which chains could not be budgeted, when some could not.
    pub not_budgeted: Option<String>,
    /// Why trusting could not be shown to stay under the cap, when not.
    pub unproven: Option<String>,
    /// The chains whose changes `elsewhere` does not list, when some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes_not_shown: Option<&'a str>,
    /// The named chain's prefix before and after.
    pub tokens: TokensBeforeAfter,
    /// The largest chain trusting would push over its cap.
    pub over: Option<OverSummary<'a>>,
    /// Every chain trusting would push over its cap.
    pub over_chains: Vec<OverChainReport<'a>>,
    /// The config keys that would apply.
    pub config_keys: Vec<ConfigKeyReport<'a>>,
}

impl TrustPreview {
    /// This preview as a document.
    pub fn report(&self) -> TrustPreviewReport<'_> {
        let budget = &self.budget;
        TrustPreviewReport {
            project: None,
            chain: None,
            trusted: None,
            blocks: &self.blocks,
            elsewhere: &self.elsewhere,
            not_budgeted: budget.left_out.note(),
            unproven: budget.unproven(),
            changes_not_shown: self.changes_left_out.as_deref(),
            tokens: TokensBeforeAfter {
                before: budget.before.report.prefix_tokens,
                after: budget.after.report.prefix_tokens,
                cap: budget.after.report.cap,
            },
            over: budget.over.largest().map(|o| OverSummary {
                chain: &o.chain,
                prefix_tokens: o.report.prefix_tokens,
                cap: o.report.cap,
            }),
            over_chains: budget.over.reports(),
            config_keys: self
                .config_keys
                .iter()
                .map(|(key, source)| ConfigKeyReport { key, source })
                .collect(),
        }
    }
}

impl<'a> TrustPreviewReport<'a> {
    /// Name the project and the chain shown, as a terminal does.
    #[must_use]
    pub fn on_chain(mut self, project: &'a Utf8Path, chain: String) -> Self {
        self.project = Some(project);
        self.chain = Some(chain);
        self
    }

    /// Say whether the project is trusted already, as the page does.
    #[must_use]
    pub fn trusted(mut self, trusted: bool) -> Self {
        self.trusted = Some(trusted);
        self
    }
}

/// The scoped rules as `GET /api/rules` lists them: the [`RulesReport`]
/// that `vak prompts show --format json` carries as `scoped_rules`, beside
/// the trust it was read under.
#[derive(Debug, Clone, Serialize)]
pub struct RulesListing<'a> {
    /// `trusted` or `untrusted`.
    pub trust: &'static str,
    /// The rules, their matches and what was left out.
    #[serde(flatten)]
    pub report: &'a RulesReport,
}

impl RulesReport {
    /// This report as a listing read under `trust`.
    pub fn listing(&self, trust: Trust) -> RulesListing<'_> {
        RulesListing {
            trust: trust_name(trust),
            report: self,
        }
    }
}

/// The newest events of the security log: `vak audit list --format json`
/// and `GET /api/audit`.
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage<'a> {
    /// Where the log is, as the page shows it ([`Self::at`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'a str>,
    /// The events, newest first.
    pub events: &'a [vak_session::SecurityEvent],
    /// How many events the log holds in all.
    pub total: usize,
    /// How many were asked for.
    pub limit: usize,
    /// Records of a kind this build does not know, skipped.
    pub skipped_unknown: usize,
    /// Lines that are not records, skipped.
    pub skipped_lines: usize,
    /// What was wrong with the first of those lines.
    pub warnings: Vec<String>,
}

impl<'a> AuditPage<'a> {
    /// The page of `entries` read for `limit` events.
    pub fn of(entries: &'a vak_session::AuditEntries, limit: usize) -> Self {
        AuditPage {
            path: None,
            events: &entries.events,
            total: entries.total,
            limit,
            skipped_unknown: entries.skipped_unknown,
            skipped_lines: entries.skipped_lines,
            warnings: entries.warnings.iter().map(ToString::to_string).collect(),
        }
    }

    /// Name where the log is, as the page does.
    #[must_use]
    pub fn at(mut self, path: &'a str) -> Self {
        self.path = Some(path);
        self
    }
}

/// A block's composition as the page names it.
pub fn composition_name(block: Block) -> &'static str {
    match block.composition() {
        Composition::NarrowestWins => "narrowest-wins",
        Composition::Accumulate => "accumulate",
        Composition::Fixed => "fixed",
        Composition::RuntimeDerived => "runtime",
        Composition::Additive => "additive",
    }
}

/// One block of the effective prompt with the page's words for it.
#[derive(Debug, Clone, Serialize)]
pub struct PageBlock<'a> {
    /// The block, as the report has it.
    #[serde(flatten)]
    pub block: BlockReport<'a>,
    /// The block's label (`Operating rules`).
    pub label: &'static str,
    /// How it composes ([`composition_name`]).
    pub composition: &'static str,
    /// Its provenance in a few words with the page's layer labels
    /// (`from Shared`, `seed + Shared + 2`).
    pub summary: String,
}

/// The effective prompt as `vak prompts show|explain --format json` and
/// `GET /api/prompt` answer it: the [`PromptReport`], with what each front
/// end adds to it as an option here.
#[derive(Debug, Clone, Serialize)]
pub struct PromptDocument<'a> {
    /// The report.
    #[serde(flatten)]
    pub report: PromptReport<'a>,
    /// Each block with the page's words for it ([`Self::with_page_words`]),
    /// in place of the report's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<PageBlock<'a>>>,
    /// The whole per-block and per-layer budget ([`Self::with_budget`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<&'a BudgetReport>,
    /// The budget's warnings ([`Self::with_budget`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_warnings: Option<&'a [String]>,
    /// The scoped rules and which matched the paths asked about
    /// ([`Self::with_rules`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scoped_rules: Option<&'a RulesReport>,
}

impl<'a> PromptDocument<'a> {
    /// The report alone.
    pub fn new(report: PromptReport<'a>) -> Self {
        PromptDocument {
            report,
            blocks: None,
            budget: None,
            budget_warnings: None,
            scoped_rules: None,
        }
    }

    /// Add each block's label, composition and provenance summary, as the
    /// page shows them; `resolved` is the resolution the report was made
    /// from.
    #[must_use]
    pub fn with_page_words(mut self, resolved: &'a ResolvedPrompt) -> Self {
        let blocks = std::mem::take(&mut self.report.blocks);
        self.blocks = Some(
            blocks
                .into_iter()
                .zip(&resolved.blocks)
                .map(|(block, resolved)| PageBlock {
                    block,
                    label: resolved.block.label(),
                    composition: composition_name(resolved.block),
                    summary: crate::provenance_summary(resolved, crate::LayerNaming::Label),
                })
                .collect(),
        );
        self
    }

    /// Add the whole budget and its warnings, as the page shows them.
    #[must_use]
    pub fn with_budget(mut self, budget: &'a Budget) -> Self {
        self.budget = Some(&budget.report);
        self.budget_warnings = Some(&budget.warnings);
        self
    }

    /// Add the scoped rules, as a terminal shows them; `tail` is the
    /// report's tail with the rules' lines for the paths asked about
    /// ([`tail_with_rules`]), when there are any.
    #[must_use]
    pub fn with_rules(mut self, rules: &'a RulesReport, tail: Option<&'a str>) -> Self {
        self.scoped_rules = Some(rules);
        if let Some(tail) = tail {
            self.report.tail = tail;
        }
        self
    }
}

/// The tail a turn touching the paths asked about would carry, whole: the
/// report's, then the scoped rules' lines; `None` when no rule matched.
pub fn tail_with_rules(tail: &str, rules: &RulesReport) -> Option<String> {
    (!rules.tail.is_empty()).then(|| format!("{}\n{}", tail.trim_end(), rules.tail.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::TextChangeKind;
    use proptest::prelude::*;
    use serde_json::json;

    /// A session's change as `vak session diff` and the rotation diff
    /// spelled it with `json!` before this type: the wire format to keep.
    fn former(c: &TextChange) -> serde_json::Value {
        let (diff, not_kept) = match &c.diff {
            Ok(diff) => (Some(diff.as_str()), None),
            Err(why) => (None, Some(why.as_str())),
        };
        json!({
            "block": c.block, "layer": c.layer, "source": c.source,
            "frozen": c.frozen, "current": c.current, "diff": diff, "error": not_kept,
            "kind": c.kind.as_str(), "frozen_layer": c.frozen_layer,
            "frozen_source": c.frozen_source,
        })
    }

    fn kind() -> impl Strategy<Value = TextChangeKind> {
        prop_oneof![
            Just(TextChangeKind::Changed),
            Just(TextChangeKind::Added),
            Just(TextChangeKind::Removed),
            Just(TextChangeKind::Moved),
            Just(TextChangeKind::Reordered),
        ]
    }

    proptest! {
        #[test]
        fn a_text_change_reads_as_it_did_byte_for_byte(
            block in ".{0,8}",
            layer in ".{0,8}",
            source in proptest::option::of(".{0,12}"),
            frozen in proptest::option::of("[0-9a-f]{0,8}"),
            current in proptest::option::of("[0-9a-f]{0,8}"),
            diff in prop_oneof![".{0,20}".prop_map(Ok), ".{0,20}".prop_map(Err)],
            kind in kind(),
            frozen_layer in proptest::option::of(".{0,8}"),
            frozen_source in proptest::option::of(".{0,12}"),
        ) {
            let change = TextChange {
                block,
                layer,
                source: source.map(vak_prompt_blocks::Source::from),
                frozen,
                current,
                diff,
                kind,
                frozen_layer,
                frozen_source: frozen_source.map(vak_prompt_blocks::Source::from),
            };
            let now = to_value(&change.report()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(now.to_string(), former(&change).to_string());
            // Exactly one of a diff and why there is none.
            prop_assert!(now["diff"].is_null() != now["error"].is_null());
        }
    }

    #[test]
    fn counts_before_and_after_are_numbers_for_a_terminal_and_summaries_for_the_page() {
        let count = to_value(&Tokens::Count(42)).ok();
        assert_eq!(count, Some(json!(42)));
        let summary = TokenSummary {
            prefix: 42,
            cap: 100,
            model: "m",
            context_window: 1000,
        };
        let page = to_value(&Tokens::Summary(summary)).ok();
        assert_eq!(
            page,
            Some(json!({"prefix": 42, "cap": 100, "model": "m", "context_window": 1000}))
        );
    }

    #[test]
    fn an_unchanged_edit_names_the_file_on_both_sides_and_counts_nothing() {
        let path = Utf8Path::new("/p/.vak/prompts/identity.md");
        let unchanged = SavedReport::unchanged(vak_prompt_blocks::Block::Identity, path, None);
        assert_eq!(
            to_value(&unchanged).ok(),
            Some(json!({
                "block": "identity",
                "path": "/p/.vak/prompts/identity.md",
                "digest": null,
                "previous": null,
                "recorded": false,
            }))
        );
    }

    #[test]
    fn versions_say_only_what_they_are_of_when_asked() {
        let versions = Versions {
            records: Vec::new(),
            skipped: 3,
        };
        assert_eq!(
            to_value(&VersionsReport::of(&versions)).ok(),
            Some(json!({"versions": []}))
        );
        let path = Utf8Path::new("/p/x.md");
        let page = VersionsReport::of(&versions)
            .block(vak_prompt_blocks::Block::Identity)
            .at_path(path)
            .with_current("abc", versions.skipped);
        assert_eq!(
            to_value(&page).ok(),
            Some(json!({
                "block": "identity", "path": "/p/x.md", "current_digest": "abc",
                "versions": [], "skipped": 3,
            }))
        );
        let terminal = VersionsReport::of(&versions).target("bots.json#/b/prompts/identity");
        assert_eq!(
            to_value(&terminal).ok(),
            Some(json!({"target": "bots.json#/b/prompts/identity", "versions": []}))
        );
    }

    #[test]
    fn a_rules_listing_is_the_report_beside_its_trust() {
        let report = RulesReport {
            tail: "- a rule".to_owned(),
            ..RulesReport::default()
        };
        assert_eq!(
            to_value(&report.listing(Trust::Untrusted)).ok(),
            Some(json!({
                "trust": "untrusted", "rules": [], "paths": [], "active": [],
                "demoted": [], "skipped": [], "tail": "- a rule",
            }))
        );
    }

    /// A real save and reset in a temporary home and project, read by both
    /// audiences, against what the CLI and the admin spelled with `json!`
    /// before this type: byte for byte, once encoded.
    #[test]
    fn a_save_and_a_reset_read_as_they_did_for_the_terminal_and_the_page() {
        use crate::{Core, EditTarget, Scope, Selectors, SubLayer};
        use vak_prompt_blocks::Block;
        let dir = tempfile::tempdir().unwrap();
        let root = camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("proj")).unwrap();
        let core = Core::open(Selectors::new(root.join("home"), root.join("proj"))).unwrap();
        let target = EditTarget::new(Scope::Project, SubLayer::Base, Block::Identity).unwrap();
        let saved = core
            .save_block(&target, "You are mine.\n", Some(""))
            .unwrap();
        let p = &saved.preview;
        let terminal = json!({
            "block": "identity",
            "path": saved.outcome.path,
            "digest": saved.outcome.digest,
            "previous": saved.outcome.previous,
            "tokens": p.budget.report.summary(),
            "tokens_before": p.budget_before.report.prefix_tokens,
            "tokens_after": p.budget.report.prefix_tokens,
            "over_cap": saved.over_cap,
            "recorded": saved.recorded,
        });
        let page = json!({
            "tokens": p.budget.report.summary(),
            "tokens_before": p.budget_before.report.summary(),
            "tokens_after": p.budget.report.summary(),
            "lints": p.lints,
            "not_applied": p.not_applied,
            "path": saved.outcome.path,
            "digest": saved.outcome.digest,
            "previous": saved.outcome.previous,
            "unrecorded": saved.unrecorded,
            "recorded": saved.recorded,
            "over_cap": saved.over_cap,
        });
        for (audience, former) in [(Audience::Terminal, terminal), (Audience::Page, page)] {
            let now = to_value(&SavedReport::saved(Block::Identity, &saved, audience)).unwrap();
            assert_eq!(now.to_string(), former.to_string(), "{audience:?}");
        }

        let reset = core
            .reset_block(&target, Some(&saved.outcome.digest))
            .unwrap();
        assert!(reset.removed.is_some());
        let p = &reset.preview;
        let terminal = json!({
            "block": "identity",
            "path": p.path,
            "removed": reset.removed,
            "previous": reset.removed,
            "digest": null,
            "tokens": p.budget.report.summary(),
            "tokens_before": p.budget_before.report.prefix_tokens,
            "tokens_after": p.budget.report.prefix_tokens,
            "over_cap": reset.over_cap,
            "recorded": reset.recorded,
        });
        let page = json!({
            "tokens": p.budget.report.summary(),
            "tokens_before": p.budget_before.report.summary(),
            "tokens_after": p.budget.report.summary(),
            "lints": p.lints,
            "not_applied": p.not_applied,
            "path": p.path,
            "removed": reset.removed,
            "unrecorded": reset.unrecorded,
            "recorded": reset.recorded,
            "over_cap": reset.over_cap,
        });
        for (audience, former) in [(Audience::Terminal, terminal), (Audience::Page, page)] {
            let now = to_value(&SavedReport::reset(Block::Identity, &reset, audience)).unwrap();
            assert_eq!(now.to_string(), former.to_string(), "{audience:?}");
        }
    }

    /// The effective prompt, with the page's words and budget and with a
    /// terminal's scoped rules, against what the admin and the CLI made of
    /// the report's JSON by hand before this type: byte for byte.
    #[test]
    fn the_effective_prompt_reads_as_it_did_for_the_page_and_the_terminal() {
        use crate::{Core, Selectors};
        let dir = tempfile::tempdir().unwrap();
        let root = camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("proj/.vak/prompts")).unwrap();
        std::fs::write(
            root.join("proj/.vak/prompts/guardrails.md"),
            "- Never push.\n",
        )
        .unwrap();
        let core = Core::open(Selectors::new(root.join("home"), root.join("proj"))).unwrap();
        let resolved = core.resolve().unwrap();
        let budget = crate::budget_of(&resolved);

        // The page's, as `prompt_json_with_tail` built it.
        let mut former = to_value(&PromptReport::new(&resolved, &budget)).unwrap();
        let blocks = former["blocks"].as_array_mut().unwrap();
        assert!(!blocks.is_empty());
        for (json, block) in blocks.iter_mut().zip(&resolved.blocks) {
            let json = json.as_object_mut().unwrap();
            json.insert("label".to_owned(), block.block.label().into());
            json.insert(
                "composition".to_owned(),
                composition_name(block.block).into(),
            );
            let summary = crate::provenance_summary(block, crate::LayerNaming::Label);
            json.insert("summary".to_owned(), summary.into());
        }
        former["budget"] = json!(budget.report);
        former["budget_warnings"] = json!(budget.warnings);
        let page = PromptDocument::new(PromptReport::new(&resolved, &budget))
            .with_page_words(&resolved)
            .with_budget(&budget);
        assert_eq!(to_value(&page).unwrap().to_string(), former.to_string());

        // A terminal's, as `with_rules` built it, with a rule's tail.
        let rules = RulesReport {
            tail: "- Check the migrations.\n".to_owned(),
            ..RulesReport::default()
        };
        let mut former = to_value(&PromptReport::new(&resolved, &budget)).unwrap();
        let whole = format!("{}\n{}", resolved.tail.trim_end(), rules.tail.trim_end());
        former["tail"] = whole.into();
        former["scoped_rules"] = json!(rules);
        let tail = tail_with_rules(&resolved.tail, &rules);
        let terminal = PromptDocument::new(PromptReport::new(&resolved, &budget))
            .with_rules(&rules, tail.as_deref());
        assert_eq!(to_value(&terminal).unwrap().to_string(), former.to_string());
        // No rule matched: the tail is the report's own.
        assert_eq!(
            tail_with_rules(&resolved.tail, &RulesReport::default()),
            None
        );
    }

    /// A save refused over the cap: its figures against the 422 detail the
    /// admin spelled with `json!` (and each chain as `OverChain::to_json`
    /// did) before these types.
    #[test]
    fn a_refusal_over_the_cap_reads_as_it_did() {
        use crate::{Core, EditError, EditTarget, Scope, Selectors, SubLayer};
        use vak_prompt_blocks::Block;
        let dir = tempfile::tempdir().unwrap();
        let root = camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(root.join("home/.vak")).unwrap();
        std::fs::create_dir_all(root.join("proj")).unwrap();
        std::fs::write(
            root.join("home/.vak/config.toml"),
            "[prompts]\nmax_tokens = 1500\n",
        )
        .unwrap();
        let core = Core::open(Selectors::new(root.join("home"), root.join("proj"))).unwrap();
        let target = EditTarget::new(Scope::Shared, SubLayer::Base, Block::Identity).unwrap();
        let long = "You are a very verbose agent. ".repeat(400);
        let refused = core.save_block(&target, &long, None);
        let Err(EditError::OverBudget { report, over, .. }) = refused else {
            panic!("a save over the cap is refused: {refused:?}");
        };
        assert!(!over.is_empty());
        let chains: Vec<serde_json::Value> = over
            .chains()
            .iter()
            .map(|c| {
                json!({
                    "chain": c.chain,
                    "project": c.project,
                    "prefix_tokens": c.report.prefix_tokens,
                    "cap": c.report.cap,
                    "over_by": c.report.over_by(),
                    "offenders": c.report.offenders(),
                })
            })
            .collect();
        let former = json!({
            "tokens": report.summary(),
            "over_by": report.over_by(),
            "offenders": report.offenders(),
            "chains": chains,
        });
        let now = to_value(&BudgetRefusal::of(&report, &over)).unwrap();
        assert_eq!(now.to_string(), former.to_string());
        assert!(
            now["offenders"].as_array().is_some_and(|o| !o.is_empty()),
            "{now}"
        );
    }
}
