//! `pg deliver`: deliveries per second to bound chats through `PgStore`
//! (each a signed request's claim, a home generation check and a turn),
//! beside PostgreSQL's own floor on the same server: a one-row insert and
//! commit on a connection of its own. Two threads each, for three seconds,
//! in half-second slices taken in turn, so that a disk whose flushes slow
//! down for a while (other work on the machine) slows both alike.
//! A measurement, not a timing assertion; it needs a server
//! (`VAK_TEST_PG_URL`, as the tests: `bash -c 'source .ci/pg.sh; pg_start;
//! cargo bench -p vak-store-pg --bench deliver'`) and says so without one.
//! The numbers are in BENCHMARKS.md.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vak_prompt_blocks::{Name, NameKind};
use vak_session::{
    Bound, ChatPlan, Claim, FreshSession, FrozenContract, HomeStore, SessionMeta, Store, Turn,
};
use vak_store_pg::PgStore;

const THREADS: usize = 2;
const SLICE: Duration = Duration::from_millis(500);
const SLICES: u32 = 6;

fn scratch(url: &str) -> String {
    let name = format!("vak_bench_deliver_{}", std::process::id());
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    // Two statements: neither may run inside a transaction block.
    for statement in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&statement).unwrap();
    }
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// How many times `work` ran in one [`SLICE`] on [`THREADS`] threads.
fn slice(work: &(impl Fn(usize) + Sync)) -> u64 {
    let done = AtomicU64::new(0);
    let until = Instant::now() + SLICE;
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let done = &done;
            s.spawn(move || {
                let mut n = 0;
                while Instant::now() < until {
                    work(thread);
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            });
        }
    });
    done.load(Ordering::Relaxed)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some(url) = std::env::var("VAK_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("pg deliver: VAK_TEST_PG_URL is unset; nothing measured");
        return;
    };
    let url = scratch(&url);
    PgStore::connect(&url).unwrap().migrate().unwrap();
    let store = PgStore::open(&url).unwrap();
    let bot = Name::new(NameKind::Bot, "helpdesk").unwrap();
    let chats: Vec<Name> = (0..THREADS)
        .map(|i| Name::new(NameKind::Chat, &format!("c{i}")).unwrap())
        .collect();
    let generation = store.home_generation().unwrap();
    let signed = AtomicU64::new(0);
    let deliver = |thread: usize| {
        let n = signed.fetch_add(1, Ordering::Relaxed);
        let key = format!("v2=bench-{thread}-{n}-{}", std::process::id());
        let claim = Claim {
            key: &key,
            at: 0,
            window_secs: 300,
        };
        store
            .deliver_at(
                &bot,
                &chats[thread],
                Some(generation),
                Some(&claim),
                &mut |bound| {
                    Some(match bound {
                        Bound::Live(_) => ChatPlan::Continue {
                            turn: Turn::now("the build is red", ""),
                        },
                        _ => ChatPlan::Fresh(Box::new(FreshSession {
                            meta: SessionMeta::default(),
                            contract: FrozenContract::default(),
                            change: None,
                            turn: Turn::now("hello", ""),
                        })),
                    })
                },
            )
            .unwrap()
            .unwrap();
    };
    for thread in 0..THREADS {
        deliver(thread);
    }

    let mut setup = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    setup
        .batch_execute("CREATE TABLE floor (id bigserial PRIMARY KEY, text text)")
        .unwrap();
    // Prepared once, as the store prepares its statements once per
    // connection: BEGIN, INSERT, COMMIT, three round trips.
    let clients: Vec<std::sync::Mutex<(postgres::Client, postgres::Statement)>> = (0..THREADS)
        .map(|_| {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let statement = client
                .prepare("INSERT INTO floor (text) VALUES ($1)")
                .unwrap();
            std::sync::Mutex::new((client, statement))
        })
        .collect();
    let insert = |thread: usize| {
        let mut guard = clients[thread].lock().unwrap();
        let (client, statement) = &mut *guard;
        let statement = statement.clone();
        let mut tx = client.transaction().unwrap();
        tx.execute(&statement, &[&"the build is red"]).unwrap();
        tx.commit().unwrap();
    };
    let (mut delivered, mut inserted) = (0, 0);
    for _ in 0..SLICES {
        delivered += slice(&deliver);
        inserted += slice(&insert);
    }
    let seconds = (SLICE * SLICES).as_secs_f64();
    let (deliveries, floor) = (delivered as f64 / seconds, inserted as f64 / seconds);
    println!(
        "pg deliver: {deliveries:.0} deliveries/s, one-row insert and commit {floor:.0}/s ({:.2} of the floor)",
        deliveries / floor
    );
}
