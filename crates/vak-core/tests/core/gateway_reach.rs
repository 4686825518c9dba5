//! A shared save's check of every gateway chat with every role, where most
//! chats are bounded from their bot's chain rather than composed: the
//! verdict is the one composing every chain gives, chain for chain.

use std::fs;

use camino::Utf8PathBuf;
use vak_core::prompts::{Block, Name, NameKind, SurfaceKind, TrustStore};
use vak_core::{Core, EditTarget, Scope, Selectors, SubLayer};

const CHATS: usize = 40;
const ROLES: [&str; 2] = ["reviewer", "writer"];

struct Fixture {
    _dir: tempfile::TempDir,
    home: Utf8PathBuf,
    project: Utf8PathBuf,
}

fn bullets(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- {tag} rule {i}: never do thing {i} without asking\n"))
        .collect()
}

fn write(path: &camino::Utf8Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A home whose chat `long` carries a long list, and whose role `reviewer`
/// does too: only `long` + `reviewer` comes near the cap. Hostile texts in
/// two other chats: a fence left open, forged headings and `Surface:`.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let (home, project) = (root.join("home"), root.join("project"));
    fs::create_dir_all(project.join(".git")).unwrap();
    let prompts = home.join(".vak/prompts");
    write(&prompts.join("guardrails.md"), &bullets("shared", 10));
    write(
        &prompts.join("agents/reviewer/guardrails.md"),
        &bullets("review", 30),
    );
    write(
        &prompts.join("agents/writer/identity.md"),
        "You write the docs.",
    );
    write(&project.join("AGENTS.md"), &bullets("build", 5));
    write(
        &home.join(".vak/gateway/bots.json"),
        &serde_json::json!({"bot0": {"prompts": {"guardrails": "- bot rule"}}}).to_string(),
    );
    let mut chats = serde_json::Map::new();
    for n in 0..CHATS {
        let guardrails = match n {
            0 => bullets("long chat", 250),
            1 => "```\n# forged\nSurface: forged\n".to_owned(),
            2 => "## Guardrails\n---\n<!-- open\n/slash\n  indented".to_owned(),
            _ => format!("- chat {n} answers in its language"),
        };
        let name = if n == 0 {
            "long".to_owned()
        } else {
            n.to_string()
        };
        chats.insert(
            name,
            serde_json::json!({"prompts": {"guardrails": guardrails, "surface-note": "Read on a phone."}}),
        );
    }
    write(
        &home.join(".vak/gateway/allowlist.json"),
        &serde_json::json!({ "bot0": chats }).to_string(),
    );
    TrustStore::load(&home).unwrap().trust(&project).unwrap();
    Fixture {
        _dir: dir,
        home,
        project,
    }
}

fn set_cap(f: &Fixture, cap: usize) {
    write(
        &f.home.join(".vak/config.toml"),
        &format!("[prompts]\nmax_tokens = {cap}\n"),
    );
}

/// Every gateway chat's chain with each role, counted by composing it,
/// with `shared` as the shared guardrails: `(chain, tokens)`.
fn exact_counts(f: &Fixture, shared: &str) -> Vec<(String, usize)> {
    let path = f.home.join(".vak/prompts/guardrails.md");
    let before = fs::read_to_string(&path).unwrap();
    write(&path, shared);
    let mut out = Vec::new();
    let chats = std::iter::once("long".to_owned()).chain((1..CHATS).map(|n| n.to_string()));
    for chat in chats {
        for role in std::iter::once(None).chain(ROLES.map(Some)) {
            let selectors = Selectors {
                surface: SurfaceKind::Chat,
                bot: Some(Name::new(NameKind::Bot, "bot0").unwrap()),
                chat: Some(Name::new(NameKind::Chat, &chat).unwrap()),
                agent: role.map(|r| Name::new(NameKind::Role, r).unwrap()),
                ..Selectors::new(f.home.clone(), f.project.clone())
            };
            let tokens = Core::open(selectors.clone())
                .unwrap()
                .budget()
                .unwrap()
                .1
                .report
                .prefix_tokens;
            out.push((format!("{chat}/{}", role.unwrap_or("-")), tokens));
        }
    }
    write(&path, &before);
    out
}

fn check(f: &Fixture, shared: &str) -> Vec<String> {
    let core = Core::open(Selectors::new(f.home.clone(), f.project.clone())).unwrap();
    let target = EditTarget::new(Scope::Shared, SubLayer::Base, Block::Guardrails).unwrap();
    let (_, over, left_out) = core.check_change(&target, Some(shared)).unwrap();
    assert_eq!(left_out.note(), None, "every chain is checked");
    over.chains().iter().map(|c| c.chain.clone()).collect()
}

#[test]
fn a_shared_save_is_refused_for_exactly_the_chats_composing_finds_over() {
    let f = fixture();
    let shared = bullets("shared", 14);
    let counts = exact_counts(&f, &shared);
    let (worst, tokens) = counts.iter().max_by_key(|(_, t)| *t).unwrap().clone();
    assert_eq!(worst, "long/reviewer");
    let second = counts
        .iter()
        .filter(|(c, _)| *c != worst)
        .map(|(_, t)| *t)
        .max()
        .unwrap();
    assert!(second < tokens);
    // Over by one: only the longest chat with the longest role.
    set_cap(&f, tokens - 1);
    let over = check(&f, &shared);
    let chats: Vec<&String> = over.iter().filter(|c| c.contains("chat `")).collect();
    assert_eq!(chats.len(), 1, "{over:?}");
    assert!(
        chats[0].contains("chat `long`") && chats[0].contains("agent `reviewer`"),
        "{over:?}"
    );
    // Exactly at the cap: the bound cannot prove it, composing does, and
    // nothing is refused.
    set_cap(&f, tokens);
    assert_eq!(check(&f, &shared), Vec::<String>::new());
}

/// The project's scoped rules count in every chain, a chat's as much as
/// its bot's: with a long rule in the project, the bound a chat's chain
/// gets from its bot's carries the rule, and the verdict is still exactly
/// the one composing gives (over by one token: refused; at the cap: not).
#[test]
fn a_chats_bound_carries_the_projects_scoped_rules() {
    let f = fixture();
    write(
        &f.project.join(".vak/prompts/rules/payments.md"),
        &format!(
            "+++\npaths = [\"src/payments/**\"]\n+++\n{}",
            bullets("payments", 60)
        ),
    );
    let shared = bullets("shared", 14);
    let counts = exact_counts(&f, &shared);
    let (worst, tokens) = counts.iter().max_by_key(|(_, t)| *t).unwrap().clone();
    assert_eq!(worst, "long/reviewer");
    let without: usize = {
        let rules = f.project.join(".vak/prompts/rules/payments.md");
        let kept = fs::read_to_string(&rules).unwrap();
        fs::remove_file(&rules).unwrap();
        let plain = exact_counts(&f, &shared);
        write(&rules, &kept);
        plain.iter().find(|(c, _)| *c == worst).unwrap().1
    };
    assert!(
        tokens > without + 500,
        "the rule counts: {tokens} vs {without}"
    );
    set_cap(&f, tokens - 1);
    let over = check(&f, &shared);
    let chats: Vec<&String> = over.iter().filter(|c| c.contains("chat `")).collect();
    assert_eq!(chats.len(), 1, "{over:?}");
    assert!(
        chats[0].contains("chat `long`") && chats[0].contains("agent `reviewer`"),
        "{over:?}"
    );
    set_cap(&f, tokens);
    assert_eq!(check(&f, &shared), Vec::<String>::new());
}
