//! One file-store delivery that continues a chat (`FileStore::deliver_at`,
//! signed, with its replay marker), as the chat grows long and as other
//! chats are bound: both figures should stay flat, since a delivery reads
//! its ledger's two ends and the bindings file only when it changed.
//!
//! - `deliver/turns/{5,10000}`: chats with about that many earlier turns;
//! - `deliver/bound/{0,10000}`: 50 chats delivered to in turn, with that
//!   many other chats bound.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed setup step should stop it loudly"
)]

use std::sync::atomic::{AtomicU64, Ordering};

use camino::Utf8Path;
use criterion::{BenchmarkId, Criterion, criterion_main};
use vak_prompt_blocks::{Name, NameKind};
use vak_session::{Bound, ChatPlan, Claim, FreshSession, FrozenContract, SessionMeta, Store, Turn};
use vak_store_file::FileStore;

static KEYS: AtomicU64 = AtomicU64::new(0);

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

/// Deliver one signed message to `chat`: continue its session, or create
/// one for a chat never delivered to.
fn deliver(store: &FileStore, bot: &Name, chat: &Name) {
    let key = format!("v2={}", KEYS.fetch_add(1, Ordering::Relaxed));
    let claim = Claim {
        key: &key,
        at: now(),
        window_secs: 300,
    };
    store
        .deliver_at(bot, chat, None, Some(&claim), &mut |bound| {
            Some(match bound {
                Bound::Live(_) => ChatPlan::Continue {
                    turn: Turn::now("a message of a usual length, some forty bytes", ""),
                },
                _ => ChatPlan::Fresh(Box::new(FreshSession {
                    meta: SessionMeta::default(),
                    contract: FrozenContract::default(),
                    change: None,
                    turn: Turn::now("first", ""),
                })),
            })
        })
        .expect("delivered");
}

fn chat(n: usize) -> Name {
    Name::new(NameKind::Chat, &n.to_string()).expect("chat")
}

fn bench(c: &mut Criterion) {
    let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
    let mut group = c.benchmark_group("deliver");
    group.sample_size(30);
    // Short chats: 200 of them, delivered to in turn, so each stays short
    // while the benchmark appends; the long one grows by a tenth at most.
    for (turns, chats) in [(5usize, 200usize), (10_000, 1)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::new(Utf8Path::from_path(dir.path()).expect("utf8"));
        for n in 0..turns * chats {
            deliver(&store, &bot, &chat(n % chats));
        }
        let mut next = 0;
        group.bench_with_input(BenchmarkId::new("turns", turns), &turns, |b, _| {
            b.iter(|| {
                next = (next + 1) % chats;
                deliver(&store, &bot, &chat(next));
            });
        });
    }
    for others in [0usize, 10_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::new(Utf8Path::from_path(dir.path()).expect("utf8"));
        {
            let mut guard =
                vak_store_file::BindingStore::new(Utf8Path::from_path(dir.path()).expect("utf8"))
                    .lock()
                    .expect("lock");
            for n in 0..others {
                guard.bind(
                    &bot,
                    &chat(1_000_000 + n),
                    vak_session::SessionId::generate(),
                );
            }
            guard.commit().expect("commit");
        }
        for n in 0..50 {
            deliver(&store, &bot, &chat(n));
        }
        let mut next = 0;
        group.bench_with_input(BenchmarkId::new("bound", others), &others, |b, _| {
            b.iter(|| {
                next = (next + 1) % 50;
                deliver(&store, &bot, &chat(next));
            });
        });
    }
    group.finish();
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
}

criterion_main!(benches);
