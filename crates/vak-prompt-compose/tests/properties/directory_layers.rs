//! Property tests for directory sub-layers: a project root and the
//! directories below it down to the working directory, each with the four
//! files and an optional `AGENTS.md`, as the loader emits them (widest
//! first, project layer, project origin; the `AGENTS.md` marked interop).

use std::collections::BTreeSet;

use proptest::prelude::*;
use vak_prompt_blocks::{Block, Origin, PromptLayer, Provenance, SurfaceKind, parse_guardrails};
use vak_prompt_compose::{ResolveInput, ResolvedPrompt, TailContext, resolve_prompt};
use vak_prompt_loader::{Contribution, LoadedChain};
use vak_prompt_trust::Trust;

const WORDS: [&str; 6] = [
    "never push",
    "ask first",
    "no secrets",
    "stay in tree",
    "cite sources",
    "be brief",
];

/// One directory level's files.
#[derive(Debug, Clone)]
struct Level {
    identity: Option<String>,
    rules: Option<String>,
    guardrails: Option<String>,
    agents_md: Option<String>,
}

fn prose() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z]{1,8}( [a-z]{1,8}){0,3}"]
}

fn guardrails() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS.to_vec()), 0..4)
        .prop_map(|items| items.iter().map(|i| format!("- {i}\n")).collect())
}

fn level() -> impl Strategy<Value = Level> {
    (
        prop::option::of(prose()),
        prop::option::of(prose()),
        prop::option::of(guardrails()),
        prop::option::of(prose()),
    )
        .prop_map(|(identity, rules, guardrails, agents_md)| Level {
            identity,
            rules,
            guardrails,
            agents_md,
        })
}

fn levels() -> impl Strategy<Value = (Option<String>, Vec<Level>)> {
    (
        prop::option::of(guardrails()),
        prop::collection::vec(level(), 1..5),
    )
}

fn dir(index: usize) -> String {
    let mut path = "/p".to_owned();
    for i in 1..=index {
        path.push_str(&format!("/d{i}"));
    }
    path
}

/// The chain the loader would read: the shared guardrails, then every level
/// widest first, each level's `AGENTS.md` after its own files.
fn loaded(shared: &Option<String>, levels: &[Level]) -> LoadedChain {
    let mut chain = LoadedChain::default();
    let mut push = |block, layer, origin, source: String, text: &String, level: usize| {
        let interop = source.ends_with("/AGENTS.md");
        chain.contributions.push(Contribution {
            block,
            provenance: Provenance::new(layer, origin, source).into(),
            text: text.clone().into(),
            interop,
            imports: Default::default(),
            level,
        });
    };
    if let Some(text) = shared {
        push(
            Block::Guardrails,
            PromptLayer::Shared,
            Origin::Home,
            "/h/.vak/prompts/guardrails.md".to_owned(),
            text,
            0,
        );
    }
    for (index, level) in levels.iter().enumerate() {
        let base = format!("{}/.vak/prompts", dir(index));
        let project = |name: &str| format!("{base}/{name}");
        if let Some(text) = &level.identity {
            push(
                Block::Identity,
                PromptLayer::Project,
                Origin::Project,
                project("identity.md"),
                text,
                index,
            );
        }
        if let Some(text) = &level.rules {
            push(
                Block::OperatingRules,
                PromptLayer::Project,
                Origin::Project,
                project("operating-rules.md"),
                text,
                index,
            );
        }
        if let Some(text) = &level.guardrails {
            push(
                Block::Guardrails,
                PromptLayer::Project,
                Origin::Project,
                project("guardrails.md"),
                text,
                index,
            );
        }
        if let Some(text) = &level.agents_md {
            push(
                Block::OperatingRules,
                PromptLayer::Project,
                Origin::Project,
                format!("{}/AGENTS.md", dir(index)),
                text,
                index,
            );
        }
    }
    chain.project_levels = (0..levels.len()).map(|i| dir(i).into()).collect();
    chain
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

fn guardrail_keys(resolved: &ResolvedPrompt) -> BTreeSet<String> {
    parse_guardrails(&resolved.block(Block::Guardrails).unwrap().text)
        .items
        .iter()
        .map(|g| g.dedup_key())
        .collect()
}

fn trust() -> impl Strategy<Value = Trust> {
    prop_oneof![Just(Trust::Trusted), Just(Trust::Untrusted)]
}

/// The text the narrowest level holding `pick` gives, else the seed's.
fn expected(levels: &[Level], pick: impl Fn(&Level) -> Option<&String>) -> Option<String> {
    levels.iter().rev().find_map(|l| pick(l).cloned())
}

/// What the operating rules render as, trusted: the winning text, then
/// each directory's non-empty `AGENTS.md`, root first, each introduced by
/// its path relative to the root.
fn expected_rules(winner: &str, levels: &[Level]) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !winner.is_empty() {
        parts.push(winner.to_owned());
    }
    for (index, level) in levels.iter().enumerate() {
        let Some(text) = level.agents_md.as_deref().map(str::trim) else {
            continue;
        };
        if text.is_empty() {
            continue;
        }
        let relative = dir(index)
            .strip_prefix("/p")
            .unwrap()
            .trim_start_matches('/')
            .to_owned();
        let path = if relative.is_empty() {
            "AGENTS.md".to_owned()
        } else {
            format!("{relative}/AGENTS.md")
        };
        parts.push(format!("From {path}:\n\n{text}"));
    }
    parts.join("\n\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Going one directory deeper never loses a guardrail, trusted or not.
    #[test]
    fn the_floor_never_shrinks_going_deeper((shared, levels) in levels(), trust in trust()) {
        for depth in 1..levels.len() {
            let wider = guardrail_keys(&resolve(&loaded(&shared, &levels[..depth]), trust));
            let deeper = guardrail_keys(&resolve(&loaded(&shared, &levels[..=depth]), trust));
            prop_assert!(wider.is_subset(&deeper), "level {depth} lost {:?}", wider.difference(&deeper).collect::<Vec<_>>());
        }
    }

    /// Trusted, the narrowest directory that has the file wins; every
    /// directory's `AGENTS.md` is appended after the winner, root first,
    /// whether or not that directory has an `operating-rules.md`.
    #[test]
    fn the_narrowest_directory_wins_and_every_agents_md_is_appended((shared, levels) in levels()) {
        let resolved = resolve(&loaded(&shared, &levels), Trust::Trusted);
        let identity = resolved.block(Block::Identity).unwrap();
        match expected(&levels, |l| l.identity.as_ref()) {
            Some(want) => {
                prop_assert_eq!(&identity.text, want.trim());
                prop_assert_eq!(identity.contributors[0].provenance.layer, PromptLayer::Project);
            }
            None => prop_assert_ne!(identity.contributors.first().map(|c| c.provenance.layer), Some(PromptLayer::Project)),
        }
        let rules = resolved.block(Block::OperatingRules).unwrap();
        let winner = &rules.contributors[0];
        prop_assert!(!winner.interop);
        match expected(&levels, |l| l.rules.as_ref()) {
            Some(want) => prop_assert_eq!(winner.text.as_str(), want.trim()),
            None => prop_assert_ne!(winner.provenance.layer, PromptLayer::Project),
        }
        prop_assert_eq!(&rules.text, &expected_rules(&winner.text, &levels));
        // One contributor, and so one descriptor, per AGENTS.md, root first.
        let appended: Vec<_> = rules.contributors[1..].iter().map(|c| c.provenance.source.to_string()).collect();
        let present: Vec<_> = levels.iter().enumerate().filter(|(_, l)| l.agents_md.is_some()).map(|(i, _)| format!("{}/AGENTS.md", dir(i))).collect();
        prop_assert_eq!(&appended, &present);
        prop_assert!(rules.contributors[1..].iter().all(|c| c.interop));
        for source in &present {
            prop_assert_eq!(resolved.descriptors.iter().filter(|d| d.source == Some(source.as_str().into())).count(), 1);
        }
        // Untrusted, no directory says who the agent is or how it works,
        // and each AGENTS.md is reported once as not applied.
        let untrusted = resolve(&loaded(&shared, &levels), Trust::Untrusted);
        for block in [Block::Identity, Block::OperatingRules] {
            let got = untrusted.block(block).unwrap();
            prop_assert!(got.contributors.iter().all(|c| c.provenance.origin != Origin::Project));
        }
        for source in &present {
            prop_assert_eq!(untrusted.demoted.iter().filter(|d| d.provenance.source == source.as_str().into()).count(), 1);
        }
    }

    /// Removing one directory's file gives exactly what it would have
    /// inherited: the same resolution as a chain that never had the file.
    #[test]
    fn removing_a_directory_file_returns_the_inherited_text(
        (shared, levels) in levels(),
        at in any::<prop::sample::Index>(),
        which in 0usize..3,
        trust in trust(),
    ) {
        let i = at.index(levels.len());
        let mut without = levels.clone();
        let (block, name) = match which {
            0 => { without[i].identity = None; (Block::Identity, "identity.md") }
            1 => { without[i].rules = None; (Block::OperatingRules, "operating-rules.md") }
            _ => { without[i].guardrails = None; (Block::Guardrails, "guardrails.md") }
        };
        // Through the same substitution an edit preview uses.
        let mut substituted = loaded(&shared, &levels);
        let provenance = Provenance::new(
            PromptLayer::Project,
            Origin::Project,
            format!("{}/.vak/prompts/{name}", dir(i)),
        );
        substituted.substitute(block, &provenance, None);
        let expected_chain = loaded(&shared, &without);
        let got = resolve(&substituted, trust);
        let want = resolve(&expected_chain, trust);
        prop_assert_eq!(&got.prefix, &want.prefix);
        prop_assert_eq!(&got.descriptors, &want.descriptors);
        // And putting a text back lands at its own level, not after deeper ones.
        let original_text = match which {
            0 => &levels[i].identity,
            1 => &levels[i].rules,
            _ => &levels[i].guardrails,
        };
        if let Some(text) = original_text {
            let mut back = loaded(&shared, &without);
            back.substitute(block, &provenance, Some(text));
            let original = resolve(&loaded(&shared, &levels), trust);
            prop_assert_eq!(resolve(&back, trust).prefix, original.prefix);
        }
    }
}
