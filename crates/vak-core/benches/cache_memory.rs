//! `cache_memory`: the resident memory of a process whose `PromptCache`
//! holds one resolution per chat, as the gateway service's does, printed
//! after every 1,450 new chats up to four times the bound (a measurement,
//! not a timing: `cargo bench -p vak-core --bench cache_memory`). The
//! numbers are in BENCHMARKS.md; past the bound they must stay flat.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs;

use vak_core::prompts::{Name, NameKind, SurfaceKind};
use vak_core::{InboundPrompts, MAX_CACHED, PromptCache, Selectors};

/// Resident set size in KiB, from `/proc/self/statm` (pages × 4 KiB).
fn rss_kib() -> u64 {
    let statm = fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs benches with no
    // argument and wants nothing measured.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let prompts = home.path().join(".vak/prompts");
    fs::create_dir_all(&prompts).unwrap();
    // A realistic operator prompt: a few KiB per block.
    let para = "Answer in the customer's language, cite the ticket, never promise dates. ";
    for (file, lines) in [
        ("identity.md", 8),
        ("operating-rules.md", 40),
        ("guardrails.md", 30),
    ] {
        let text: String = (0..lines).map(|i| format!("- {i}: {para}\n")).collect();
        fs::write(prompts.join(file), text).unwrap();
    }
    fs::create_dir_all(home.path().join(".vak/gateway")).unwrap();
    fs::write(
        home.path().join(".vak/gateway/bots.json"),
        r#"{"alpha": {"identity": "You are ALPHA, the help desk."}}"#,
    )
    .unwrap();
    let cache = PromptCache::new();
    let step = 1450;
    println!("bound {MAX_CACHED}; chats, entries, rss_kib");
    println!("0, 0, {}", rss_kib());
    // At least 11,600 chats: four times the bound, and past the 5,800 the
    // service was first measured at.
    let chats = (4 * MAX_CACHED).max(11_600).div_ceil(step) * step;
    for chat in 0..chats {
        let inbound = InboundPrompts::open(Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(Name::new(NameKind::Bot, "alpha").unwrap()),
            chat: Some(Name::new(NameKind::Chat, &format!("c{chat}")).unwrap()),
            ..Selectors::new(
                home.path().to_str().unwrap(),
                project.path().to_str().unwrap(),
            )
        })
        .unwrap();
        cache.resolve(&inbound).unwrap();
        if (chat + 1) % step == 0 {
            println!("{}, {}, {}", chat + 1, cache.len(), rss_kib());
        }
    }
}
