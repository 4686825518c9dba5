//! Counting the ~1500-token fixture prefix with each candidate tokenizer, in
//! one run, so the figures are comparable. Encoders are warmed up first: the
//! one-time load (nothing, for the chosen tables) is measured separately (see README.md).

#![expect(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]

use criterion::{Criterion, black_box, criterion_group, criterion_main};

const PROMPT: &str = include_str!("system-prompt.md");

fn count(c: &mut Criterion) {
    let chosen = vak_prompt_budget::Encoding::O200kBase;
    let tiktoken = tiktoken::encoding::o200k_base();
    let tiktoken_rs = tiktoken_rs::o200k_base_singleton();
    let bpe = bpe_openai::o200k_base();
    let n = chosen.count(PROMPT);
    assert_eq!(tiktoken.count(PROMPT), n);
    assert_eq!(tiktoken_rs.count_ordinary(PROMPT), n);
    assert_eq!(bpe.count(PROMPT), n);

    let mut group = c.benchmark_group(format!("count o200k_base {n}-token prefix"));
    group.bench_function("build-time tables (chosen, vak-prompt-budget)", |b| {
        b.iter(|| chosen.count(black_box(PROMPT)))
    });
    group.bench_function("tiktoken", |b| b.iter(|| tiktoken.count(black_box(PROMPT))));
    group.bench_function("tiktoken-rs", |b| {
        b.iter(|| tiktoken_rs.count_ordinary(black_box(PROMPT)))
    });
    group.bench_function("bpe-openai", |b| b.iter(|| bpe.count(black_box(PROMPT))));
    group.finish();
}

criterion_group!(benches, count);
criterion_main!(benches);
