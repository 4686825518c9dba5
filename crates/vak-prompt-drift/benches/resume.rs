//! Resume = read one session's ledger + drift check against the current
//! descriptors, with 1,000, 10,000 and 100,000 sessions in the store. The
//! store is never scanned on this path, so the figures should be flat.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed setup step should stop it loudly"
)]

use std::hint::black_box;

use camino::Utf8PathBuf;
use criterion::{BenchmarkId, Criterion, criterion_main};
use vak_prompt_blocks::{Block, Origin, PromptLayer, Provenance};
use vak_prompt_drift::{ResumePath, decide, diff};
use vak_session::{
    FrozenContract, PromptLayerDescriptor, Record, SessionId, SessionMeta, Turn, fingerprint,
};
use vak_store_file::SessionStore;

/// A contract shaped like a real one: every block, a few layers each, and a
/// prefix of about 1,500 tokens.
fn descriptors(identity: &str) -> Vec<PromptLayerDescriptor> {
    let mut out = Vec::new();
    let home = Provenance::new(
        PromptLayer::Shared,
        Origin::Home,
        "/home/u/vak-home/.vak/prompts/identity.md",
    );
    out.push(PromptLayerDescriptor::of(Block::Identity, &home, identity));
    out.push(PromptLayerDescriptor::of(
        Block::OperatingRules,
        &Provenance::seed("operating-rules"),
        "rules",
    ));
    for (i, layer) in [
        PromptLayer::Seed,
        PromptLayer::Shared,
        PromptLayer::Project,
        PromptLayer::Surface,
    ]
    .into_iter()
    .enumerate()
    {
        let p = Provenance::new(layer, Origin::Home, format!("/x/{i}/guardrails.md"));
        out.push(PromptLayerDescriptor::of(
            Block::Guardrails,
            &p,
            &format!("- guardrail {i}"),
        ));
    }
    for block in [
        Block::CapabilityContract,
        Block::Surface,
        Block::SurfaceNote,
        Block::Skills,
        Block::Mcp,
    ] {
        out.push(PromptLayerDescriptor::of(
            block,
            &Provenance::runtime(block.wire_name()),
            block.label(),
        ));
    }
    out
}

fn store_with(n: usize) -> (tempfile::TempDir, SessionStore, SessionId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8 temp dir");
    let store = SessionStore::at(root);
    let layers = descriptors("You are Vak.");
    let contract = FrozenContract {
        fingerprint: fingerprint(&layers),
        prompt_layers: layers,
        prefix: "You are Vak, an agent runtime. ".repeat(200),
        ..FrozenContract::default()
    };
    let template = store.create(SessionMeta::now(), contract).expect("create");
    for i in 0..10 {
        let turn = Turn::now(
            format!("message {i}"),
            "Now: 2026-12-02T14:00:00Z. Intent: fix the tests.",
        );
        store
            .append(&template, &Record::Turn(turn))
            .expect("append");
    }
    // The rest of the store is copies: the file name is the id, so a copy
    // under a fresh id is a valid, distinct session.
    let bytes = std::fs::read(store.path_of(&template)).expect("read template");
    let mut middle = template.clone();
    for i in 1..n {
        let id = SessionId::generate();
        std::fs::write(store.path_of(&id), &bytes).expect("write copy");
        if i == n / 2 {
            middle = id;
        }
    }
    (dir, store, middle)
}

fn resume(c: &mut Criterion) {
    let current = descriptors("You are Vak, edited.");
    let sizes: &[usize] = if std::env::var_os("VAK_BENCH_SMALL").is_some() {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut group = c.benchmark_group("resume");
    for &n in sizes {
        let (_dir, store, id) = store_with(n);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let ledger = store.read(black_box(&id)).expect("read");
                let report = diff(&ledger.contract().prompt_layers, black_box(&current));
                black_box(decide(
                    ResumePath::NamedSession {
                        accept_drift: false,
                    },
                    &report,
                ))
            });
        });
    }
    group.finish();
}

/// The group `criterion_main!` runs; written out instead of using
/// `criterion_group!`, whose generated function has no doc comment.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    resume(&mut c);
}
criterion_main!(benches);
