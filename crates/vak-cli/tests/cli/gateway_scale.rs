//! Two and four `vak gateway serve` processes on one `$VAK_HOME` and one PostgreSQL
//! database, many signed deliveries over many chats from concurrent
//! clients, with a prompt edit half-way: every chat ends
//! with one binding, rotates exactly once with exactly one `config-change`
//! event, and every 200's turn is in its session's ledger — also when one
//! node is killed with SIGKILL mid-run.
//!
//! The same runs on the file store (two nodes sharing one home's files)
//! checks that its file lock gives the same guarantees across processes.
//!
//! Sizes: `VAK_SCALE_DELIVERIES` (default 2000), 50 chats, 32 clients.
//! PostgreSQL comes from `VAK_TEST_PG_URL` (`.ci/test` starts one); under
//! `CI` a missing URL fails, elsewhere the test is skipped with a note.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use vak_core::prompts::SecurityEvent;

use crate::common::*;
use crate::gateway_service::{post, secret, serve, signed};

const CHATS: usize = 50;
const CLIENTS: usize = 32;

pub use vak_store_pg::testing::{pg_url, scratch_database};

fn deliveries() -> usize {
    std::env::var("VAK_SCALE_DELIVERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Replace the shared guardrails atomically (as `vak prompts set` does), so
/// no resolution reads half a file.
fn edit_prompt(env: &Env) {
    let path = env.home().join(".vak/prompts/guardrails.md");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("\n- The operator changed this half-way.\n");
    let temp = path.with_extension("md.tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, &path).unwrap();
}

fn allow_chats(env: &Env) {
    let mut chats = serde_json::Map::new();
    for i in 0..CHATS {
        chats.insert(format!("c{i}"), serde_json::json!({}));
    }
    let doc = serde_json::json!({ "helpdesk": chats });
    std::fs::write(
        env.home().join(".vak/gateway/allowlist.json"),
        serde_json::to_vec_pretty(&doc).unwrap(),
    )
    .unwrap();
}

struct Run {
    acked: Vec<(String, String, String)>, // chat, session, text
    refused: usize,
}

/// Which store the two nodes share.
enum Shared {
    Postgres,
    Files,
}

fn run(kill_one: bool, shared: &Shared) {
    run_on(2, kill_one, shared);
}

/// [`run`] on `count` nodes; with `kill_one`, the last is SIGKILLed
/// half-way and its clients move to the first.
fn run_on(count: usize, kill_one: bool, shared: &Shared) {
    let db = match shared {
        Shared::Postgres => {
            let Some(url) = pg_url() else { return };
            scratch_database(&url, if kill_one { "kill" } else { "many" })
        }
        Shared::Files => "file".to_owned(),
    };
    let env = Env::fixture("myproj");
    env.trust();
    allow_chats(&env);
    env.ok(&["store", "migrate", "--store", &db]);
    let key = secret(&env, "helpdesk");
    let mut nodes: Vec<_> = (0..count).map(|_| serve(&env, &["--store", &db])).collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let total = deliveries();
    let next = AtomicUsize::new(0);
    let edited = AtomicBool::new(false);
    let killed = AtomicBool::new(false);
    // Requests that found node B dead (refused or cut off mid-delivery)
    // and were sent again, signed afresh, to node A.
    let retried = AtomicUsize::new(0);
    let result = Mutex::new(Run {
        acked: Vec::new(),
        refused: 0,
    });
    let node_b = Mutex::new(Some(nodes.pop().unwrap()));
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    if i == total / 2 && !edited.swap(true, Ordering::SeqCst) {
                        edit_prompt(&env);
                        if kill_one {
                            // SIGKILL node B while its deliveries are in flight.
                            if let Some(mut node) = node_b.lock().unwrap().take() {
                                let _ = node.child.kill();
                                let _ = node.child.wait();
                                killed.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                    let chat = format!("c{}", i % CHATS);
                    let text = format!("message {i} to {chat}");
                    let body = serde_json::json!({ "text": text }).to_string();
                    let path = format!("/v1/bots/helpdesk/chats/{chat}/messages");
                    // Node by turn; a dead node's clients move to the first.
                    let mut node = i % count;
                    let answer = loop {
                        if killed.load(Ordering::SeqCst) && node == count - 1 {
                            node = 0;
                        }
                        match std::panic::catch_unwind(|| {
                            post(
                                &addrs[node],
                                &path,
                                &signed(&key, &path, &body),
                                body.as_bytes(),
                            )
                        }) {
                            Ok(answer) => break answer,
                            Err(_) if kill_one => {
                                retried.fetch_add(1, Ordering::Relaxed);
                                node = 0;
                            }
                            Err(panic) => std::panic::resume_unwind(panic),
                        }
                    };
                    let mut r = result.lock().unwrap();
                    match answer {
                        (200, json) => r.acked.push((
                            chat,
                            json["session_id"].as_str().unwrap().to_owned(),
                            text,
                        )),
                        (status, json) => {
                            assert!(kill_one, "status {status}: {json}");
                            r.refused += 1;
                        }
                    }
                    drop(r);
                }
            });
        }
    });
    drop(node_b);
    let run = result.into_inner().unwrap();
    if kill_one {
        assert!(
            retried.load(Ordering::Relaxed) > 0,
            "the kill interrupted deliveries to node B"
        );
    } else {
        assert_eq!(run.acked.len(), total, "every delivery answered 200");
    }
    assert!(run.acked.len() + run.refused == total);

    let store =
        vak_gateway::open_store(camino::Utf8Path::from_path(env.home()).unwrap(), Some(&db))
            .unwrap();
    let bindings = store.bindings().unwrap();
    assert_eq!(bindings.len(), CHATS, "one binding per chat");
    let mut rotations: BTreeMap<String, usize> = BTreeMap::new();
    for event in store.audit_newest(10_000).unwrap().events {
        if let SecurityEvent::ConfigChange(change) = event {
            *rotations.entry(change.chat).or_default() += 1;
        }
    }
    assert_eq!(rotations.len(), CHATS, "every chat rotated: {rotations:?}");
    assert!(
        rotations.values().all(|n| *n == 1),
        "exactly one config-change per chat: {rotations:?}"
    );
    let mut ledgers: HashMap<String, Vec<String>> = HashMap::new();
    for (_, session, text) in &run.acked {
        let turns = ledgers.entry(session.clone()).or_insert_with(|| {
            let id = vak_core::prompts::SessionId::parse(session).unwrap();
            store
                .read(&id)
                .unwrap()
                .turns()
                .map(|t| t.message.clone())
                .collect()
        });
        assert!(
            turns.contains(text),
            "acknowledged turn {text:?} is in {session}"
        );
    }
    let (_, sessions) = store.list_newest(1).unwrap();
    assert_eq!(
        sessions,
        2 * CHATS,
        "one session per chat before the edit, one after"
    );
    drop(nodes);
}

#[test]
fn two_nodes_one_database_rotate_each_chat_once() {
    run(false, &Shared::Postgres);
}

#[test]
fn a_node_killed_mid_run_loses_nothing_acknowledged() {
    run(true, &Shared::Postgres);
}

/// The file store gives the same guarantees across processes (its lock
/// is a file lock on the home).
#[test]
fn two_nodes_on_one_file_store_rotate_each_chat_once() {
    run(false, &Shared::Files);
}

/// The same with a node SIGKILLed mid-run: a delivery it had half-written
/// (a pending session, an event, a marker) is finished or undone by the
/// next delivery to its chat, so still one binding, one session per chat
/// per prompt and one rotation event each, and every 200 in its ledger.
#[test]
fn a_file_store_node_killed_mid_run_loses_nothing_acknowledged() {
    run(true, &Shared::Files);
}

/// Four nodes on one database, and on one file store, with a node
/// SIGKILLed half-way: the same guarantees as with two.
#[test]
fn four_nodes_one_database_with_one_killed_rotate_each_chat_once() {
    run_on(4, true, &Shared::Postgres);
}

#[test]
fn four_nodes_on_one_file_store_with_one_killed_rotate_each_chat_once() {
    run_on(4, true, &Shared::Files);
}
