//! Scoped rules in the per-turn tail: the rules whose globs match the paths
//! a turn touches, trust applied, rendered after the tail's own lines.
//!
//! Pure, like the rest of composition. Scoped rules never enter the frozen
//! prefix (the prefix stays byte for byte what it is without them, so its
//! digest and a session's drift check do not move when a rule is added or
//! edited); each turn that carries them records them in its ledger record.

use std::sync::Arc;

use camino::Utf8PathBuf;
use vak_prompt_blocks::{Block, GuardrailList, Provenance, clean, contain_markdown, sha256_hex};
use vak_prompt_loader::{PathMatch, RuleSet, ScopedRule};
use vak_prompt_trust::{DemoteReason, Trust, Verdict, prompt_verdict};

/// The line that introduces the scoped guardrails in the tail.
pub const SCOPED_GUARDRAILS_HEADING: &str =
    "Scoped guardrails (for the paths this turn touches; they add to the guardrails above):";
/// The line that introduces the scoped operating rules in the tail.
pub const SCOPED_RULES_HEADING: &str = "Scoped operating rules (for the paths this turn touches):";

/// A rule in force for a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveRule {
    /// `payments`, from `rules/payments.md`.
    pub name: String,
    /// The loader's provenance row: layer, origin, path.
    pub provenance: Arc<Provenance>,
    /// `guardrails` or `operating-rules`.
    pub block: Block,
    /// The text it contributed, cleaned and trimmed as every contribution.
    pub text: String,
    /// The sha256 (hex) of [`text`](Self::text), as a descriptor's digest:
    /// what the ledger records.
    pub digest: String,
    /// Which of the turn's paths it matched, and by which glob.
    pub matched: Vec<PathMatch>,
    /// How the tail names it: `rules/payments`, `services/api/rules/style`
    /// for a directory's, `rules/style (shared)` for the home's. Never an
    /// absolute path: the prompt does not carry the machine's layout.
    pub label: String,
}

/// A rule that matched but does not apply: an untrusted project's scoped
/// operating rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemotedRule {
    /// The rule's name.
    pub name: String,
    /// Where it came from.
    pub provenance: Arc<Provenance>,
    /// Why it does not apply.
    pub reason: DemoteReason,
    /// Which paths it matched.
    pub matched: Vec<PathMatch>,
}

/// The scoped part of a turn's tail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopedTail {
    /// The rendered lines, to follow the tail's own (empty when no rule
    /// applies).
    pub text: String,
    /// The rules in force, in the set's order.
    pub active: Vec<ActiveRule>,
    /// The rules that matched but were demoted.
    pub demoted: Vec<DemotedRule>,
    /// One warning per rule that needed cleaning.
    pub warnings: Vec<String>,
}

/// The scoped rules of `set` that `paths` (relative to the project root)
/// select, under `trust`, rendered for the tail.
pub fn compose_rules(set: &RuleSet, paths: &[Utf8PathBuf], trust: Trust) -> ScopedTail {
    let mut out = ScopedTail::default();
    for (rule, matched) in set.active(paths) {
        match prompt_verdict(&rule.provenance, rule.parsed.block, trust) {
            Verdict::Keep => {
                let text = rule_text(rule, &mut out.warnings);
                out.active.push(ActiveRule {
                    name: rule.name.clone(),
                    provenance: Arc::clone(&rule.provenance),
                    block: rule.parsed.block,
                    digest: sha256_hex(text.as_bytes()),
                    text,
                    matched,
                    label: label(rule),
                });
            }
            Verdict::Demote(reason) => out.demoted.push(DemotedRule {
                name: rule.name.clone(),
                provenance: Arc::clone(&rule.provenance),
                reason,
                matched,
            }),
        }
    }
    out.text = render(&out.active);
    out
}

/// Every rule's text as it would enter a tail, cleaned and trimmed, with no
/// trust applied: what the budget counts (the worst case, every rule
/// active at once).
pub fn all_rule_texts(set: &RuleSet) -> Vec<(&ScopedRule, String)> {
    let mut ignored = Vec::new();
    set.rules
        .iter()
        .map(|rule| (rule, rule_text(rule, &mut ignored)))
        .collect()
}

/// The whole scoped section a tail would carry if every rule of `set` were
/// active and kept: the budget's worst case.
pub fn render_all(set: &RuleSet) -> String {
    let mut ignored = Vec::new();
    let active: Vec<ActiveRule> = set
        .rules
        .iter()
        .map(|rule| {
            let text = rule_text(rule, &mut ignored);
            ActiveRule {
                name: rule.name.clone(),
                provenance: Arc::clone(&rule.provenance),
                block: rule.parsed.block,
                digest: String::new(),
                text,
                matched: Vec::new(),
                label: label(rule),
            }
        })
        .collect();
    render(&active)
}

/// How the tail names `rule` ([`ActiveRule::label`]).
fn label(rule: &ScopedRule) -> String {
    let mut label = String::new();
    if !rule.base.as_str().is_empty() {
        label.push_str(rule.base.as_str());
        label.push('/');
    }
    label.push_str(&rule.label());
    if rule.provenance.origin == vak_prompt_blocks::Origin::Home {
        label.push_str(" (shared)");
    }
    label
}

fn rule_text(rule: &ScopedRule, warnings: &mut Vec<String>) -> String {
    let cleaned = clean(&rule.parsed.text);
    if let Some(found) = cleaned.first {
        warnings.push(format!(
            "scoped rule `{}`: hidden or control character {found}; such characters are removed from the prompt",
            vak_prompt_blocks::Escaped(&rule.provenance.source.to_string())
        ));
    }
    cleaned.text.trim().to_owned()
}

/// Guardrail rules as bullets under one line (deduplicated as the prefix's
/// guardrails are), then each operating-rules rule introduced by a plain
/// line naming it and contained on its own, so a heading or an open fence
/// in one rule cannot reach past it.
fn render(active: &[ActiveRule]) -> String {
    let mut text = String::new();
    let mut guardrails = GuardrailList::new();
    let mut any_guardrail = false;
    for rule in active.iter().filter(|r| r.block == Block::Guardrails) {
        any_guardrail = true;
        guardrails.add(&rule.text);
    }
    let bullets = guardrails.into_rendered();
    if any_guardrail && !bullets.trim().is_empty() {
        text.push_str(SCOPED_GUARDRAILS_HEADING);
        text.push('\n');
        // Contained as the prefix's guardrails are: a fence a bullet opens
        // is closed before the operating rules that follow.
        text.push_str(contain_markdown(&bullets).trim_end());
        text.push('\n');
    }
    let prose: Vec<&ActiveRule> = active
        .iter()
        .filter(|r| r.block == Block::OperatingRules && !r.text.is_empty())
        .collect();
    if !prose.is_empty() {
        // A blank line after the bullets, so the line is not read as the
        // last bullet's continuation.
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(SCOPED_RULES_HEADING);
        text.push('\n');
        for rule in prose {
            text.push_str(&format!("From {}:\n", rule.label));
            text.push_str(contain_markdown(&rule.text).trim_end());
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::{Origin, PromptLayer};

    fn set(rules: &[(&str, Origin, &str)]) -> RuleSet {
        RuleSet {
            rules: rules
                .iter()
                .map(|(name, origin, text)| {
                    let layer = match origin {
                        Origin::Home => PromptLayer::Shared,
                        _ => PromptLayer::Project,
                    };
                    ScopedRule {
                        name: (*name).into(),
                        provenance: Arc::new(Provenance::new(layer, *origin, *name)),
                        base: Utf8PathBuf::new(),
                        parsed: vak_prompt_loader::parse_rule(text)
                            .unwrap_or_else(|e| panic!("{e}")),
                    }
                })
                .collect(),
            skipped: Vec::new(),
            complete: true,
        }
    }

    #[test]
    fn only_matching_rules_enter_and_untrusted_prose_is_demoted() {
        let set = set(&[
            (
                "payments",
                Origin::Project,
                "+++\npaths = [\"src/payments/**\"]\n+++\n- Never log card numbers.\n",
            ),
            (
                "style",
                Origin::Project,
                "+++\npaths = [\"src/**\"]\nblock = \"operating-rules\"\n+++\n# Style\nUse rustfmt.\n",
            ),
        ]);
        let payments = [Utf8PathBuf::from("src/payments/x.rs")];
        let readme = [Utf8PathBuf::from("README.md")];
        let trusted = compose_rules(&set, &payments, Trust::Trusted);
        assert_eq!(trusted.active.len(), 2);
        assert!(trusted.text.contains("- Never log card numbers."));
        assert!(
            trusted
                .text
                .contains("From rules/style:\n### Style\nUse rustfmt.")
        );
        assert_eq!(trusted.active[0].digest.len(), 64);
        let untrusted = compose_rules(&set, &payments, Trust::Untrusted);
        assert_eq!(untrusted.active.len(), 1);
        assert_eq!(untrusted.demoted.len(), 1);
        assert!(!untrusted.text.contains("rustfmt"));
        let none = compose_rules(&set, &readme, Trust::Trusted);
        assert!(none.active.is_empty() && none.text.is_empty());
        assert!(render_all(&set).contains("rustfmt"));
    }

    /// Read as CommonMark, whatever a guardrail rule holds, the line that
    /// introduces the scoped operating rules is text outside any code
    /// block, and no heading above level 3 appears.
    #[test]
    fn a_guardrail_rule_cannot_swallow_the_prose_after_it() {
        use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
        for hostile in [
            "```\nopen",
            "- ```\n- # heading",
            "~~~\n# h1\n<!--",
            "# Top\n```",
        ] {
            let rule = format!("+++\npaths = [\"**\"]\n+++\n{hostile}\n");
            let set = set(&[
                ("a", Origin::Project, rule.as_str()),
                (
                    "b",
                    Origin::Home,
                    "+++\npaths = [\"**\"]\nblock = \"operating-rules\"\n+++\nProse.\n",
                ),
            ]);
            let tail = compose_rules(&set, &[Utf8PathBuf::from("x")], Trust::Trusted).text;
            let mut in_code = false;
            let mut seen = false;
            for event in Parser::new(&tail) {
                match event {
                    Event::Start(Tag::CodeBlock(_)) => in_code = true,
                    Event::End(TagEnd::CodeBlock) => in_code = false,
                    Event::Start(Tag::Heading { level, .. }) => {
                        assert!(level >= HeadingLevel::H3, "{hostile:?}: {tail}");
                    }
                    Event::Text(text) if text.contains("Scoped operating rules") => {
                        assert!(!in_code, "{hostile:?}: {tail}");
                        seen = true;
                    }
                    _ => {}
                }
            }
            assert!(seen, "{hostile:?}: {tail}");
        }
    }

    #[test]
    fn an_open_fence_in_a_rule_is_closed_before_the_next() {
        let set = set(&[
            (
                "a",
                Origin::Home,
                "+++\npaths = [\"**\"]\nblock = \"operating-rules\"\n+++\n```\nopen fence\n",
            ),
            (
                "b",
                Origin::Home,
                "+++\npaths = [\"**\"]\nblock = \"operating-rules\"\n+++\nSecond rule.\n",
            ),
        ]);
        let tail = compose_rules(&set, &[Utf8PathBuf::from("x")], Trust::Trusted).text;
        let second = tail.find("From rules/b (shared):").unwrap_or(0);
        assert!(second > 0, "{tail}");
        let fences = tail[..second].matches("```").count();
        assert_eq!(fences % 2, 0, "{tail}");
    }
}
