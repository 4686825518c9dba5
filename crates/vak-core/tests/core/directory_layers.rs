//! Directory sub-layers on a real filesystem, through the
//! loader, discovery and the facade: random levels of files between a
//! project root and a working directory.

use std::collections::BTreeSet;
use std::fs;

use camino::{Utf8Path, Utf8PathBuf};
use proptest::prelude::*;
use vak_core::prompts::{Block, ResolvedPrompt, Trust, parse_guardrails};
use vak_core::{Core, Selectors};

#[derive(Debug, Clone)]
struct Level {
    identity: Option<String>,
    rules: Option<String>,
    agents_md: Option<String>,
    guardrails: Vec<&'static str>,
}

const WORDS: [&str; 5] = [
    "never push",
    "ask first",
    "no secrets",
    "cite sources",
    "be brief",
];

fn level() -> impl Strategy<Value = Level> {
    (
        prop::option::of("[a-z]{1,8}( [a-z]{1,8}){0,2}"),
        prop::option::of("[a-z]{1,8}( [a-z]{1,8}){0,2}"),
        prop::option::of("[a-z]{1,8}( [a-z]{1,8}){0,2}"),
        prop::collection::vec(prop::sample::select(WORDS.to_vec()), 0..3),
    )
        .prop_map(|(identity, rules, agents_md, guardrails)| Level {
            identity,
            rules,
            agents_md,
            guardrails,
        })
}

fn write(path: &Utf8Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A home, and a project with `.git` whose levels are `root/l1/l2/…`.
fn tree(levels: &[Level]) -> (tempfile::TempDir, Utf8PathBuf, Utf8PathBuf, Utf8PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let home = base.join("home");
    let root = base.join("root");
    fs::create_dir_all(home.join(".vak")).unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    let mut at = root.clone();
    for (i, level) in levels.iter().enumerate() {
        if i > 0 {
            at.push(format!("l{i}"));
        }
        fs::create_dir_all(&at).unwrap();
        let prompts = at.join(".vak/prompts");
        if let Some(t) = &level.identity {
            write(&prompts.join("identity.md"), t);
        }
        if let Some(t) = &level.rules {
            write(&prompts.join("operating-rules.md"), t);
        }
        if let Some(t) = &level.agents_md {
            write(&at.join("AGENTS.md"), t);
        }
        if !level.guardrails.is_empty() {
            let text: String = level
                .guardrails
                .iter()
                .map(|g| format!("- {g}\n"))
                .collect();
            write(&prompts.join("guardrails.md"), &text);
        }
    }
    (dir, home, root, at)
}

fn resolve(home: &Utf8Path, workdir: &Utf8Path) -> ResolvedPrompt {
    let selectors = Selectors::discover(home, workdir).unwrap();
    Core::open(selectors).unwrap().resolve().unwrap()
}

fn text(resolved: &ResolvedPrompt, block: Block) -> String {
    resolved.block(block).unwrap().text.to_string()
}

fn keys(resolved: &ResolvedPrompt) -> BTreeSet<String> {
    parse_guardrails(&text(resolved, Block::Guardrails))
        .items
        .iter()
        .map(|g| g.dedup_key())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn levels_on_disk_compose_by_the_rules(levels in prop::collection::vec(level(), 1..4), drop in any::<prop::sample::Index>(), which in 0usize..3) {
        let (_keep, home, root, deepest) = tree(&levels);
        // Trust the root: every directory below it is trusted with it.
        vak_core::prompts::TrustStore::load(&home).unwrap().trust(&root).unwrap();
        let full = resolve(&home, &deepest);
        prop_assert_eq!(full.trust, Trust::Trusted);

        // Narrowest wins; every level's AGENTS.md follows the winning
        // rules, root first, introduced by its path from the root.
        let want_identity = levels.iter().rev().find_map(|l| l.identity.clone());
        let want_rules = levels.iter().rev().find_map(|l| l.rules.clone());
        if let Some(want) = want_identity {
            prop_assert_eq!(text(&full, Block::Identity), want);
        }
        let rules = text(&full, Block::OperatingRules);
        if let Some(want) = want_rules {
            prop_assert!(rules.starts_with(&want), "{rules:?} does not start with {want:?}");
        }
        let mut from = 0;
        for (i, level) in levels.iter().enumerate() {
            let Some(agents) = &level.agents_md else { continue };
            let path: String = (1..=i).map(|k| format!("l{k}/")).collect();
            let piece = format!("From {path}AGENTS.md:\n\n{agents}");
            let at = rules[from..].find(&piece);
            prop_assert!(at.is_some(), "{piece:?} missing after byte {from} of {rules:?}");
            from += at.unwrap() + piece.len();
        }

        // The floor never shrinks going deeper, trusted or not.
        let mut dir = root.clone();
        let mut wider = keys(&resolve(&home, &root));
        for i in 1..levels.len() {
            dir.push(format!("l{i}"));
            let deeper = keys(&resolve(&home, &dir));
            prop_assert!(wider.is_subset(&deeper));
            wider = deeper;
        }

        // Removing one level's file gives what a tree without it gives.
        let i = drop.index(levels.len());
        let mut without = levels.clone();
        let name = match which {
            0 => { without[i].identity = None; "identity.md" }
            1 => { without[i].rules = None; "operating-rules.md" }
            _ => { without[i].guardrails.clear(); "guardrails.md" }
        };
        let mut level_dir = root.clone();
        for n in 1..=i {
            level_dir.push(format!("l{n}"));
        }
        let file = level_dir.join(".vak/prompts").join(name);
        let _ = fs::remove_file(&file);
        let after = resolve(&home, &deepest);
        let (_keep2, home2, root2, deepest2) = tree(&without);
        vak_core::prompts::TrustStore::load(&home2).unwrap().trust(&root2).unwrap();
        let fresh = resolve(&home2, &deepest2);
        for block in [Block::Identity, Block::OperatingRules, Block::Guardrails] {
            prop_assert_eq!(text(&after, block), text(&fresh, block));
        }
    }
}
