//! `resolve`: a chain with every tier populated (32 inputs), beside the
//! floor it is compared to, merely reading and hashing the same files:
//!
//! - `cold`: every file read and parsed, then composed;
//! - `warm`: nothing changed since the last resolution, answered by
//!   `CachedResolver` (one check of the change notifications, an `Arc`);
//! - `changed_one_file`: one input touched, so the cache arms its watch again
//!   and reads and composes (what a change costs through the cache);
//! - `compose_only`: composing an already-loaded chain (what `warm` measured
//!   before the cache);
//! - `load_only`, `load_only_sparse`: `load_chain` alone, on this chain and
//!   on the bundled fixture project, whose surface and agent directories
//!   are missing.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use camino::Utf8PathBuf;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use vak_core::prompts::{
    LoadRequest, Name, NameKind, ResolveInput, SurfaceKind, TailContext, Trust, TrustStore,
    load_chain, resolve_prompt, sha256_hex,
};
use vak_core::{CachedResolver, Selectors};

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
    let cached = CachedResolver::open(Selectors {
        home: request.home.clone(),
        project: request.project.clone(),
        surface: request.surface,
        bot: request.bot.clone(),
        chat: request.chat.clone(),
        agent: request.agent.clone(),
        force_untrusted: false,
        workdir: None,
    })
    .unwrap();
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

criterion_group!(benches, bench);
criterion_main!(benches);
