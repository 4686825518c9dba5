//! A delivery's reads of a large gateway file: `allowlist.json` of about
//! 1 MB, 4,096 chats with prompts over 4 bots. `admission_alone` is one
//! admission with nothing kept (the CLI's unlisted-id warning parses the
//! file for one question); `admission_from_owner` is an admission by an
//! owner that has read this text before (the gateway's prompt cache, every
//! delivery after the first); `first_delivery` is a delivery whose owner
//! has not (both files' admission, then the chat's chain).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use camino::Utf8PathBuf;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use vak_core::prompts::{GatewayFile, Name, NameKind};
use vak_prompt_loader::{GatewayTables, Snapshot, gateway_entry_listed};

const BOTS: usize = 4;
const CHATS: usize = 4096;

fn populate(home: &Path) -> Utf8PathBuf {
    let gateway = home.join(".vak/gateway");
    fs::create_dir_all(&gateway).unwrap();
    let bots: Vec<String> = (0..BOTS)
        .map(|b| format!(r#""bot{b}": {{"prompts": {{"identity": "You are bot {b}."}}}}"#))
        .collect();
    fs::write(
        gateway.join("bots.json"),
        format!("{{{}}}", bots.join(", ")),
    )
    .unwrap();
    let per_bot = CHATS / BOTS;
    let allow: Vec<String> = (0..BOTS)
        .map(|b| {
            let chats: Vec<String> = (0..per_bot)
                .map(|c| {
                    let n = b * per_bot + c;
                    format!(
                        r#""{n}": {{"name": "Room {n}", "prompts": {{"guardrails": "- chat {n} is the team of room {n}; answer in its language, keep it short, never paste secrets", "surface-note": "Chat {n} reads on a wall screen; keep lines under 60 characters."}}}}"#
                    )
                })
                .collect();
            format!(r#""bot{b}": {{{}}}"#, chats.join(", "))
        })
        .collect();
    let text = format!("{{{}}}", allow.join(", "));
    assert!(
        text.len() > 900_000 && text.len() <= 1024 * 1024,
        "{}",
        text.len()
    );
    fs::write(gateway.join("allowlist.json"), text).unwrap();
    Utf8PathBuf::from_path_buf(home.to_path_buf()).unwrap()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let home = populate(dir.path());
    let bot = Name::new(NameKind::Bot, "bot3").unwrap();
    let chat = Name::new(NameKind::Chat, "4000").unwrap();
    let admit = |tables: Option<&GatewayTables>| {
        gateway_entry_listed(&home, GatewayFile::Bots, bot.as_str(), None, tables).unwrap()
            && gateway_entry_listed(
                &home,
                GatewayFile::Allowlist,
                bot.as_str(),
                Some(chat.as_str()),
                tables,
            )
            .unwrap()
    };
    let mut group = c.benchmark_group("gateway");
    group.bench_function("admission_alone", |b| b.iter(|| black_box(admit(None))));
    let owner = GatewayTables::default();
    for _ in 0..4 {
        assert!(admit(Some(&owner)));
    }
    group.bench_function("admission_from_owner", |b| {
        b.iter(|| black_box(admit(Some(&owner))))
    });
    group.bench_function("first_delivery", |b| {
        b.iter(|| {
            let owner = GatewayTables::default();
            assert!(admit(Some(&owner)));
            let found = Snapshot::once_sharing(&owner).chat_contributions(&home, &bot, &chat);
            black_box(found)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
