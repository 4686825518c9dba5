//! `contain`: what structural containment costs a contribution, beside the
//! floor it is compared to, the line-by-line `neutralise` it replaced:
//!
//! - `agents_md/…`: the bundled agents-monorepo fixture's root `AGENTS.md`
//!   (about 16 KB, 3,900 tokens: headings of three levels, fenced code,
//!   lists and tables), the shape of a real team's file;
//! - `prose/…`: the same size of plain paragraphs, which `contain_markdown`
//!   answers without parsing;
//! - `hostile/…`: 256 KiB (the per-file bound) of lines that each open
//!   structure (`---` under a paragraph line, unclosed `<!--`), so every
//!   line needs a backslash.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use vak_prompt_blocks::{contain_markdown, neutralise};

fn inputs() -> Vec<(&'static str, String)> {
    let agents = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/projects/agents-monorepo/AGENTS.md"
    ))
    .unwrap();
    let mut prose = String::new();
    while prose.len() < agents.len() {
        prose.push_str(
            "Keep each change small and say why in the commit message, so a reviewer can follow it.\n\n",
        );
    }
    let mut hostile = String::new();
    while hostile.len() < 256 * 1024 {
        hostile.push_str("a paragraph line\n---\n<!-- never closed\n");
    }
    vec![
        ("agents_md", agents),
        ("prose", prose),
        ("hostile", hostile),
    ]
}

fn contain(c: &mut Criterion) {
    let mut group = c.benchmark_group("contain");
    for (name, text) in inputs() {
        group.bench_function(format!("{name}/contain_markdown"), |b| {
            b.iter(|| contain_markdown(black_box(&text)).len())
        });
        group.bench_function(format!("{name}/neutralise"), |b| {
            b.iter(|| neutralise(black_box(&text)).len())
        });
    }
    group.finish();
}

criterion_group!(benches, contain);
criterion_main!(benches);
