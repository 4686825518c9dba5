//! `resolve`: a chain with every tier populated (32 inputs), beside the
//! floor it is compared to, merely reading and hashing the same files:
//!
//! - `cold`: every file read and parsed, then composed;
//! - `warm`: nothing changed since the last resolution, answered by
//!   `CachedResolver` (one check of the change notifications, an `Arc`);
//! - `changed_one_file`: one input touched, so the cache arms its watch again
//!   and reads and composes (what a change costs through the cache);
//! - `miss_another_chat`: a gateway's cache missing for one chat after
//!   another of the same project missed: loaded from what that miss read;
//! - `compose_only`: composing an already-loaded chain (what `warm` measured
//!   before the cache);
//! - `load_only`, `load_only_sparse`: `load_chain` alone, on this chain and
//!   on the bundled fixture project, whose surface and agent directories
//!   are missing.
//!
//! `hostile`: what a cloned repository can make a check cost, the speed the
//! CLI's hostile-input tests once asserted with a stopwatch (they now only
//! check the answer):
//!
//! - `two_large_guardrail_files`: `vak prompts check`'s work (load,
//!   compose, budget, lints) on a 250 KiB guardrails file in the home and one
//!   in the project sharing half its lines;
//! - `thousands_of_lints`: the same on three directory layers of 64,000
//!   repeated bullets each, linted and said in a few lines;
//! - `large_config_many_roles`: `vak trust`'s budget (`trust_budget`) on a
//!   clone with a 12,000-key config an untrusted project may not set and
//!   150 roles: every chain loads that config, parsed once per text;
//! - `work_bound_refusal`: `trust_budget` on a clone of 65,000 copies of one
//!   bullet under 100 directory layers, stopped by `MAX_PLAN_WORK`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use camino::Utf8PathBuf;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use vak_core::prompts::{
    LoadRequest, Name, NameKind, ResolveInput, SurfaceKind, TailContext, Trust, TrustStore,
    load_chain, resolve_prompt, sha256_hex,
};
use vak_core::{
    CachedResolver, InboundPrompts, PromptCache, Selectors, budget_of, lints_of, trust_budget,
};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// Every directory layer gets all four block files; both gateway tiers get
/// all four keys; home and project each get config and two skills.
fn populate(home: &Path, project: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let guardrails = (0..6)
        .map(|i| format!("- guardrail number {i}: never do thing {i} without asking\n"))
        .collect::<String>();
    for root in [home, project] {
        for dir in [
            ".vak/prompts",
            ".vak/prompts/surface/cli",
            ".vak/prompts/agents/reviewer",
        ] {
            for (file, text) in [
                (
                    "identity.md",
                    "You are a careful agent for this tree. ".repeat(4),
                ),
                (
                    "operating-rules.md",
                    "- Read before writing.\n- Run the tests.\n".repeat(3),
                ),
                ("guardrails.md", guardrails.clone()),
                (
                    "surface-note.md",
                    "The person is on a slow link; keep output short.".to_owned(),
                ),
            ] {
                let path = root.join(dir).join(file);
                write(&path, &format!("{text} ({})", dir));
                files.push(path);
            }
        }
        let config = root.join(".vak/config.toml");
        write(
            &config,
            "model = \"gpt-4o\"\n[permissions]\ndeny = [\"run_command:rm *\"]\n[mcp.servers.docs]\ncommand = \"docs-mcp\"\n",
        );
        files.push(config);
        for skill in ["changelog", "release"] {
            let path = root.join(".vak/skills").join(skill).join("SKILL.md");
            write(
                &path,
                &format!("---\ndescription: the {skill} skill\n---\nbody\n"),
            );
            files.push(path);
        }
    }
    let prompts = r#"{"identity": "bot identity", "operating-rules": "bot rules", "guardrails": "- bot guardrail", "surface-note": "bot note"}"#;
    let bots = home.join(".vak/gateway/bots.json");
    write(
        &bots,
        &format!(r#"{{"helpdesk": {{"prompts": {prompts}}}}}"#),
    );
    let allow = home.join(".vak/gateway/allowlist.json");
    write(
        &allow,
        &format!(r#"{{"helpdesk": {{"42": {{"prompts": {prompts}}}}}}}"#),
    );
    files.extend([bots, allow]);
    files
}

fn bench(c: &mut Criterion) {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let files = populate(home.path(), project.path());
    let request = LoadRequest {
        home: Utf8PathBuf::from_path_buf(home.path().to_path_buf()).unwrap(),
        project: Utf8PathBuf::from_path_buf(project.path().to_path_buf()).unwrap(),
        surface: SurfaceKind::Cli,
        bot: Some(Name::new(NameKind::Bot, "helpdesk").unwrap()),
        chat: Some(Name::new(NameKind::Chat, "42").unwrap()),
        agent: Some(Name::new(NameKind::Role, "reviewer").unwrap()),
        workdir: None,
    };
    let role = request.agent.clone().unwrap();
    let loaded = load_chain(&request).unwrap();
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    assert_eq!(loaded.contributions.len(), 4 * 6 + 8);

    let mut group = c.benchmark_group("resolve");
    group.bench_function("floor_read_and_hash", |b| {
        b.iter(|| {
            for file in &files {
                black_box(sha256_hex(fs::read(file).unwrap()));
            }
        })
    });
    group.bench_function("cold", |b| {
        b.iter(|| {
            let chain = load_chain(&request).unwrap();
            black_box(resolve_prompt(&ResolveInput {
                chain: &chain,
                trust: Trust::Trusted,
                surface: SurfaceKind::Cli,
                agent: Some(&role),
                tail: TailContext::default(),
            }))
        })
    });
    let mut store = TrustStore::load(&request.home).unwrap();
    store.trust(&request.project).unwrap();
    let cached_selectors = Selectors {
        home: request.home.clone(),
        project: request.project.clone(),
        surface: request.surface,
        bot: request.bot.clone(),
        chat: request.chat.clone(),
        agent: request.agent.clone(),
        force_untrusted: false,
        workdir: None,
    };
    let cached = CachedResolver::open(cached_selectors.clone()).unwrap();
    let first = cached.resolve().unwrap();
    assert!(cached.is_watching());
    assert!(std::sync::Arc::ptr_eq(&first, &cached.resolve().unwrap()));
    group.bench_function("warm", |b| b.iter(|| black_box(cached.resolve().unwrap())));
    // One input changed (its mtime set, so the text stays the same): the
    // cache re-arms its watch and reads and composes again.
    let touched = fs::File::options().write(true).open(&files[0]).unwrap();
    let mtime = touched.metadata().unwrap().modified().unwrap();
    group.bench_function("changed_one_file", |b| {
        b.iter(|| {
            touched.set_modified(mtime).unwrap();
            black_box(cached.resolve().unwrap())
        })
    });
    // A miss for another chat of the same project, in a gateway's cache:
    // two chats taking turns in a cache that holds one resolution, so each
    // call misses, and loads from what the other's miss read.
    let miss_cache = PromptCache::with_capacity(1);
    let chats: Vec<InboundPrompts> = ["42", "43"]
        .iter()
        .map(|chat| {
            InboundPrompts::open(Selectors {
                chat: Some(Name::new(NameKind::Chat, chat).unwrap()),
                ..cached_selectors.clone()
            })
            .unwrap()
        })
        .collect();
    for chat in [&chats[0], &chats[1], &chats[0]] {
        miss_cache.resolve(chat).unwrap();
    }
    assert_eq!(miss_cache.counts().0, 0, "every call misses");
    assert!(
        miss_cache.shared_loads() > 0,
        "and loads from what the other read"
    );
    let mut turn = 0;
    group.bench_function("miss_another_chat", |b| {
        b.iter(|| {
            turn ^= 1;
            black_box(miss_cache.resolve(&chats[turn]).unwrap())
        })
    });
    group.bench_function("compose_only", |b| {
        b.iter(|| {
            black_box(resolve_prompt(&ResolveInput {
                chain: &loaded,
                trust: Trust::Trusted,
                surface: SurfaceKind::Cli,
                agent: Some(&role),
                tail: TailContext::default(),
            }))
        })
    });
    // The two halves of `cold` apart: reading the chain alone, on this
    // chain and on a sparse one (the bundled fixture: no surface or agent
    // directories), since what pays on one can cost on the other.
    group.bench_function("load_only", |b| {
        b.iter(|| black_box(load_chain(&request).unwrap()))
    });
    let fixtures = Utf8PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"));
    let sparse = LoadRequest {
        home: fixtures.join("home"),
        project: fixtures.join("projects/myproj"),
        surface: SurfaceKind::Server,
        bot: None,
        chat: None,
        agent: None,
        workdir: None,
    };
    assert!(load_chain(&sparse).unwrap().skipped.is_empty());
    group.bench_function("load_only_sparse", |b| {
        b.iter(|| black_box(load_chain(&sparse).unwrap()))
    });
    group.finish();

    // How a cache may learn that nothing changed, for the same inputs: an
    // identity check (`stat` of every input file and of every directory on
    // the way to one, whose entries decide which files exist) against one
    // look at the change notifications.
    let mut paths: Vec<std::path::PathBuf> = Vec::new();
    for file in &files {
        let mut at = file.as_path();
        paths.push(at.to_path_buf());
        while let Some(dir) = at.parent() {
            if dir == home.path() || dir == project.path() || dir.as_os_str().is_empty() {
                break;
            }
            paths.push(dir.to_path_buf());
            at = dir;
        }
    }
    paths.extend([home.path().to_path_buf(), project.path().to_path_buf()]);
    paths.sort();
    paths.dedup();
    let mut group = c.benchmark_group("change_check");
    group.bench_function(format!("stat_{}_paths", paths.len()), |b| {
        b.iter(|| {
            for path in &paths {
                black_box(fs::metadata(path).unwrap());
            }
        })
    });
    group.bench_function("notifications", |b| {
        b.iter(|| black_box(cached.resolve().unwrap()))
    });
    group.finish();
}

/// `vak prompts check`'s work on one chain: load, compose, budget, lints.
fn check(request: &LoadRequest) -> usize {
    let chain = load_chain(request).unwrap();
    let resolved = resolve_prompt(&ResolveInput {
        chain: &chain,
        trust: Trust::Untrusted,
        surface: request.surface,
        agent: None,
        tail: TailContext::default(),
    });
    black_box(budget_of(&resolved));
    lints_of(&resolved).len()
}

fn utf8(path: &Path) -> Utf8PathBuf {
    Utf8PathBuf::from_path_buf(path.to_path_buf()).unwrap()
}

fn hostile(c: &mut Criterion) {
    let mut group = c.benchmark_group("hostile");
    group.sample_size(10);

    // Two 250 KiB guardrail files, half their lines shared.
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let (mut shared, mut own) = (String::new(), String::new());
    let mut n = 0u64;
    while shared.len() < 250 * 1024 {
        n += 1;
        let line = format!(
            "- rule {n} about {} things\n",
            n.wrapping_mul(2_654_435_761)
        );
        shared.push_str(&line);
        if n.is_multiple_of(2) {
            own.push_str(&line);
        } else {
            own.push_str(&format!("- project rule {n}\n"));
        }
    }
    write(&home.path().join(".vak/prompts/guardrails.md"), &shared);
    write(&project.path().join(".vak/prompts/guardrails.md"), &own);
    let request = LoadRequest {
        home: utf8(home.path()),
        project: utf8(project.path()),
        surface: SurfaceKind::Cli,
        bot: None,
        chat: None,
        agent: None,
        workdir: None,
    };
    check(&request);
    group.bench_function("two_large_guardrail_files", |b| b.iter(|| check(&request)));

    // Thousands of lints: three directory layers of repeated bullets.
    let project = tempfile::tempdir().unwrap();
    let repeats = "- a\n- b\n".repeat(32_000);
    for dir in [".vak/prompts", "a/.vak/prompts", "a/b/.vak/prompts"] {
        write(&project.path().join(dir).join("guardrails.md"), &repeats);
    }
    fs::create_dir_all(project.path().join(".git")).unwrap();
    let request = LoadRequest {
        project: utf8(project.path()),
        workdir: Some(utf8(&project.path().join("a/b"))),
        ..request
    };
    assert!(check(&request) > 0, "no lint");
    group.bench_function("thousands_of_lints", |b| b.iter(|| check(&request)));

    // A large config and many roles, untrusted: `vak trust`'s budget.
    let project = tempfile::tempdir().unwrap();
    fs::create_dir_all(project.path().join(".git")).unwrap();
    let config: String = std::iter::once("hooks = { pre = \"curl evil\" }\n".to_owned())
        .chain((0..12_000).map(|i| format!("key{i} = {i}\n")))
        .collect();
    write(&project.path().join(".vak/config.toml"), &config);
    for role in 0..150 {
        write(
            &project
                .path()
                .join(format!(".vak/prompts/agents/r{role}/identity.md")),
            &format!("Role {role}."),
        );
    }
    let selectors = Selectors::new(utf8(home.path()), utf8(project.path()));
    trust_budget(&selectors).unwrap();
    group.bench_function("large_config_many_roles", |b| {
        b.iter(|| black_box(trust_budget(&selectors).unwrap()))
    });

    // Repeated bullets under many layers: refused by the work bound.
    let project = tempfile::tempdir().unwrap();
    fs::create_dir_all(project.path().join(".git")).unwrap();
    write(
        &project.path().join(".vak/prompts/guardrails.md"),
        &"- x\n".repeat(65_000),
    );
    for i in 0..100 {
        write(
            &project.path().join(format!("d{i:03}/AGENTS.md")),
            &format!("Rules of d{i}.\n"),
        );
    }
    let selectors = Selectors::new(utf8(home.path()), utf8(project.path()));
    group.bench_function("work_bound_refusal", |b| {
        b.iter(|| black_box(trust_budget(&selectors)))
    });
    group.finish();
}

criterion_group!(benches, bench, hostile);
criterion_main!(benches);
