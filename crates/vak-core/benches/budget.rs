//! `budget`: the budget check of a shared save, `vak prompts set --scope
//! shared guardrails`, in a home as large as a busy gateway makes it: 4,096
//! chats with prompts of their own over 4 bots, 3 roles with a directory,
//! and 10 trusted projects, each with a root layer, an `AGENTS.md` and one
//! directory layer. "Every chain" is each surface kind, each role with a
//! directory, each gateway bot and chat, each directory layer, in every
//! trusted project (DECISIONS §12); `Core::check_change` is the library call
//! the save makes before it writes.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use camino::Utf8PathBuf;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use vak_core::prompts::{Block, TrustStore};
use vak_core::{Core, EditTarget, Scope, Selectors, SubLayer};

const BOTS: usize = 4;
const CHATS: usize = 4096;
const ROLES: [&str; 3] = ["reviewer", "writer", "ops"];
const PROJECTS: usize = 10;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn bullets(what: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- {what} rule {i}: never do thing {i} without asking first\n"))
        .collect()
}

fn utf8(path: &Path) -> Utf8PathBuf {
    Utf8PathBuf::from_path_buf(path.to_path_buf()).unwrap()
}

/// The home and its projects; returns the projects, the first being the
/// one the save is made from.
fn populate(home: &Path, projects: &Path) -> Vec<Utf8PathBuf> {
    let prompts = home.join(".vak/prompts");
    write(
        &home.join(".vak/config.toml"),
        "[prompts]\nmax_tokens = 8192\n",
    );
    write(
        &prompts.join("identity.md"),
        &"You are the careful assistant of this team. ".repeat(8),
    );
    write(&prompts.join("operating-rules.md"), &bullets("working", 12));
    write(&prompts.join("guardrails.md"), &bullets("shared", 20));
    write(
        &prompts.join("surface/chat/surface-note.md"),
        "People read this on a phone: keep answers short.",
    );
    for role in ROLES {
        let dir = prompts.join("agents").join(role);
        write(
            &dir.join("identity.md"),
            &format!("You are the {role}. ").repeat(10),
        );
        write(&dir.join("guardrails.md"), &bullets(role, 8));
    }
    let bots: Vec<String> = (0..BOTS)
        .map(|b| {
            format!(
                r#""bot{b}": {{"prompts": {{"identity": "You are bot {b} of the helpdesk.", "guardrails": "- bot {b} never shares tickets"}}}}"#
            )
        })
        .collect();
    write(
        &home.join(".vak/gateway/bots.json"),
        &format!("{{{}}}", bots.join(", ")),
    );
    let per_bot = CHATS / BOTS;
    let allow: Vec<String> = (0..BOTS)
        .map(|b| {
            let chats: Vec<String> = (0..per_bot)
                .map(|c| {
                    let n = b * per_bot + c;
                    format!(
                        r#""{n}": {{"prompts": {{"guardrails": "- chat {n} is the team of room {n}; answer in its language", "surface-note": "Chat {n} reads on a wall screen."}}}}"#
                    )
                })
                .collect();
            format!(r#""bot{b}": {{{}}}"#, chats.join(", "))
        })
        .collect();
    write(
        &home.join(".vak/gateway/allowlist.json"),
        &format!("{{{}}}", allow.join(", ")),
    );
    let home = utf8(home);
    let mut store = TrustStore::load(&home).unwrap();
    let mut out = Vec::new();
    for p in 0..PROJECTS {
        let project = projects.join(format!("project{p}"));
        fs::create_dir_all(project.join(".git")).unwrap();
        let layer = project.join(".vak/prompts");
        write(
            &layer.join("identity.md"),
            &format!("You work on project {p}. ").repeat(6),
        );
        write(
            &layer.join("guardrails.md"),
            &bullets(&format!("project {p}"), 10),
        );
        write(&project.join("AGENTS.md"), &bullets("build", 15));
        write(&project.join("services/api/AGENTS.md"), &bullets("api", 10));
        let project = utf8(&project);
        store.trust(&project).unwrap();
        out.push(project);
    }
    out
}

fn bench(c: &mut Criterion) {
    let home = tempfile::tempdir().unwrap();
    let projects = tempfile::tempdir().unwrap();
    let all = populate(home.path(), projects.path());
    let core = Core::open(Selectors::new(utf8(home.path()), all[0].clone())).unwrap();
    let target = EditTarget::new(Scope::Shared, SubLayer::Base, Block::Guardrails).unwrap();
    let text = format!("{}- one more shared rule\n", bullets("shared", 20));
    let (_, over, left_out) = core.check_change(&target, Some(&text)).unwrap();
    assert!(over.is_empty(), "the bench's chains fit the cap");
    if let Some(note) = left_out.note() {
        eprintln!("budget/shared_save_4096_chats_10_projects: {note}");
    }
    let mut group = c.benchmark_group("budget");
    group.sample_size(10);
    group.bench_function("shared_save_4096_chats_10_projects", |b| {
        b.iter(|| black_box(core.check_change(&target, Some(&text)).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
