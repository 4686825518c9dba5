//! Crash windows: a delivery killed (`SIGKILL`) between any two steps of
//! its writes recovers to "delivered once" or "not delivered". A debug
//! build kills itself at the step `VAK_CRASH_AT` names; each test walks
//! every step, then retries the same request on a fresh process and checks
//! what every store reader sees: one turn of the message, no session
//! nobody is bound to, one binding, one event per change.

use std::process::Stdio;

use serde_json::Value;

use crate::common::*;
use crate::gateway_scale::{pg_url, scratch_database};
use crate::gateway_service::{secret, serve, signed};

const PATH: &str = "/v1/bots/helpdesk/chats/42/messages";

/// What the store holds: every listed session's turns' messages, the
/// bindings, and the audit events, read through the library as the CLI
/// does.
struct Seen {
    sessions: usize,
    messages: Vec<String>,
    bound: Vec<String>,
    events: Vec<Value>,
}

fn seen(env: &Env, store: &str) -> Seen {
    let opened = vak_gateway::open_store(
        camino::Utf8Path::from_path(env.home()).unwrap(),
        Some(store),
    )
    .unwrap();
    let (ids, sessions) = opened.list_newest(1000).unwrap();
    let messages = ids
        .iter()
        .flat_map(|id| {
            opened
                .read(id)
                .unwrap()
                .turns()
                .map(|t| t.message.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    let bound = opened
        .bindings()
        .unwrap()
        .into_iter()
        .map(|(_, _, b)| b.session_id.to_string())
        .collect();
    let events = env.json(&["audit", "list", "--store", store])["events"]
        .as_array()
        .unwrap()
        .clone();
    Seen {
        sessions,
        messages,
        bound,
        events,
    }
}

/// POST on a raw connection, tolerating a process killed mid-request: the
/// status, or `None` when the connection closed without an answer.
fn try_post(addr: &str, headers: &[(&str, String)], body: &str) -> Option<u16> {
    try_post_to(addr, PATH, headers, body)
}

/// [`try_post`] to `path`.
fn try_post_to(addr: &str, path: &str, headers: &[(&str, String)], body: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .ok()?;
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// How the chat stands before the killed delivery.
#[derive(Debug, Clone, Copy)]
enum Before {
    /// Never delivered to: the delivery creates its first session.
    Unbound,
    /// One turn in a session whose prompt still holds: it continues.
    Live,
    /// One turn, then the prompt changed: the delivery rotates.
    Changed,
    /// One turn, then its ledger was deleted: the delivery rebinds.
    Gone,
}

impl Before {
    /// Sessions listed once the killed message is delivered, and the
    /// events its change writes.
    fn expected(self) -> (usize, &'static str) {
        match self {
            Before::Unbound | Before::Live => (1, ""),
            Before::Changed => (2, "config-change"),
            Before::Gone => (1, "rebound"),
        }
    }

    /// Whether a delivery from this state reaches `step` (and so is
    /// killed there): the test must walk each step it can.
    fn reaches(self, step: &str, store: &str) -> bool {
        if store != "file" {
            return step.starts_with("transaction-");
        }
        if step.starts_with("transaction-") || step.starts_with("batch-") {
            return false;
        }
        match self {
            Before::Unbound => step != "fresh-event",
            Before::Live => !step.starts_with("fresh-"),
            Before::Changed | Before::Gone => true,
        }
    }

    fn prepare(self, env: &Env, deliver: &dyn Fn(&str)) {
        if matches!(self, Before::Unbound) {
            return;
        }
        deliver("earlier");
        match self {
            Before::Changed => {
                let rules = env.home().join(".vak/prompts/guardrails.md");
                let mut text = std::fs::read_to_string(&rules).unwrap();
                text.push_str("\n- Changed before the killed delivery.\n");
                std::fs::write(&rules, text).unwrap();
            }
            Before::Gone => {
                for entry in std::fs::read_dir(env.home().join(".vak/sessions")).unwrap() {
                    let path = entry.unwrap().path();
                    if path.extension().is_some_and(|e| e == "jsonl") {
                        std::fs::remove_file(path).unwrap();
                    }
                }
            }
            Before::Unbound | Before::Live => {}
        }
    }
}

fn event_kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect()
}

/// One signed delivery killed at `step` on a node of `store`, then retried
/// on a fresh node: delivered once, whatever the step.
fn killed_signed_delivery_recovers(store: &str, before: Before, step: &str) {
    let env = Env::fixture("myproj");
    env.trust();
    if store != "file" {
        env.ok(&["store", "migrate", "--store", store]);
    }
    let key = secret(&env, "helpdesk");
    let store_args = ["--store", store];
    {
        let node = serve(&env, &store_args);
        before.prepare(&env, &|text| {
            let body = serde_json::json!({ "text": text }).to_string();
            let status = try_post(&node.addr, &signed(&key, PATH, &body), &body);
            assert_eq!(status, Some(200), "{before:?}: {text}");
        });
    }
    let earlier = usize::from(!matches!(before, Before::Unbound | Before::Gone));
    let body = serde_json::json!({ "text": "the killed one" }).to_string();
    let headers = signed(&key, PATH, &body);

    let mut doomed = env.command(&["gateway", "serve", "--listen", "127.0.0.1:0"]);
    doomed.args(store_args).env("VAK_CRASH_AT", step);
    let mut node = crate::gateway_service::spawn_served(doomed);
    let first = try_post(&node.addr, &headers, &body);
    assert_eq!(
        first.is_none(),
        before.reaches(step, store),
        "{before:?}: killed at {step} exactly when the delivery reaches it ({first:?})"
    );
    if first.is_none() {
        // Killed at the step: nothing answered, the process is gone.
        let status = node.child.wait().unwrap();
        assert!(!status.success(), "{before:?} at {step}: {status:?}");
    }
    drop(node);

    // The sender retries the same signed request on another node.
    let node = serve(&env, &store_args);
    let retried = try_post(&node.addr, &headers, &body);
    let after = seen(&env, store);
    let delivered = after
        .messages
        .iter()
        .filter(|m| *m == "the killed one")
        .count();
    let context = format!(
        "{store}, {before:?}, killed at {step}: first {first:?}, retry {retried:?}, sessions {}, messages {:?}, events {:?}",
        after.sessions,
        after.messages,
        event_kinds(&after.events)
    );
    assert_eq!(delivered, 1, "delivered once: {context}");
    match first {
        Some(status) => assert_eq!(status, 200, "{context}"),
        // A retry of a delivery that committed is a replay (401, nothing
        // written); one that did not is delivered now.
        None => assert!(matches!(retried, Some(200 | 401)), "{context}"),
    }
    if first.is_none() && retried == Some(401) {
        assert!(
            matches!(
                step,
                "turn-appended" | "marker-committed" | "transaction-committed"
            ),
            "refused as a replay though its turn was not there: {context}"
        );
    }
    let (sessions, event) = before.expected();
    assert_eq!(after.sessions, sessions, "no orphan session: {context}");
    assert_eq!(after.messages.len(), earlier + 1, "{context}");
    assert_eq!(after.bound.len(), 1, "one binding: {context}");
    let kinds = event_kinds(&after.events);
    let changes = kinds
        .iter()
        .filter(|k| *k == "config-change" || *k == "rebound")
        .count();
    assert_eq!(changes, usize::from(!event.is_empty()), "{context}");
    if !event.is_empty() {
        assert!(kinds.iter().any(|k| k == event), "{context}");
    }
    // The bound session is one `session list` shows, with the turn.
    let listed = env.json(&["session", "list", "--store", store]);
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert!(
        ids.contains(&after.bound[0].as_str()),
        "{context}: {listed}"
    );

    // And once more: a replay, with nothing written.
    assert_eq!(
        try_post(&node.addr, &headers, &body),
        Some(401),
        "{context}"
    );
    assert_eq!(seen(&env, store).messages.len(), earlier + 1, "{context}");
}

#[test]
fn a_first_delivery_killed_at_any_step_is_delivered_once() {
    for step in vak_session::crash::STEPS {
        killed_signed_delivery_recovers("file", Before::Unbound, step);
    }
}

#[test]
fn a_continued_delivery_killed_at_any_step_is_delivered_once() {
    for step in vak_session::crash::STEPS {
        killed_signed_delivery_recovers("file", Before::Live, step);
    }
}

#[test]
fn a_rotation_killed_at_any_step_rotates_once_and_delivers_once() {
    for step in vak_session::crash::STEPS {
        killed_signed_delivery_recovers("file", Before::Changed, step);
    }
}

#[test]
fn a_rebind_killed_at_any_step_rebinds_once_and_delivers_once() {
    for step in vak_session::crash::STEPS {
        killed_signed_delivery_recovers("file", Before::Gone, step);
    }
}

/// PostgreSQL commits a delivery in one transaction: a kill before its
/// COMMIT leaves nothing, one after leaves it whole (and its claim taken).
/// The file store's steps never run there.
#[test]
fn postgres_deliveries_killed_at_any_step_are_delivered_once() {
    let Some(url) = pg_url() else { return };
    for before in [Before::Unbound, Before::Live, Before::Changed] {
        for step in ["transaction-written", "transaction-committed", "marked"] {
            let db = scratch_database(&url, &format!("crash_{}", step.replace('-', "_")));
            killed_signed_delivery_recovers(&db, before, step);
        }
    }
}

/// A node killed in the middle of a batch (continuing deliveries to
/// several chats written in one transaction), before or after its commit:
/// every delivery of it, retried on a fresh node, is delivered once, and
/// each chat keeps one binding.
#[test]
fn postgres_deliveries_killed_mid_batch_are_delivered_once() {
    let Some(url) = pg_url() else { return };
    for step in ["batch-written", "batch-committed"] {
        let store = scratch_database(&url, &format!("crash_{}", step.replace('-', "_")));
        let env = Env::fixture("myproj");
        env.trust();
        env.ok(&["store", "migrate", "--store", &store]);
        let key = secret(&env, "helpdesk");
        let chats: Vec<String> = (1..=6).map(|n| format!("b{n}")).collect();
        let allowed: serde_json::Map<String, Value> = chats
            .iter()
            .map(|c| (c.clone(), serde_json::json!({})))
            .collect();
        std::fs::write(
            env.home().join(".vak/gateway/allowlist.json"),
            serde_json::json!({ "helpdesk": allowed }).to_string(),
        )
        .unwrap();
        let request = |chat: &str, text: &str| {
            let path = format!("/v1/bots/helpdesk/chats/{chat}/messages");
            let body = serde_json::json!({ "text": text }).to_string();
            (path.clone(), signed(&key, &path, &body), body)
        };
        let mut doomed = env.command(&["gateway", "serve", "--listen", "127.0.0.1:0"]);
        doomed.args(["--store", &store]).env("VAK_CRASH_AT", step);
        let mut node = crate::gateway_service::spawn_served(doomed);
        // Two deliveries to each chat on this node, so it plans the next
        // from memory: those are the ones it batches.
        for chat in &chats {
            for text in ["first", "second"] {
                let (path, headers, body) = request(chat, text);
                let (status, answer) =
                    crate::gateway_service::post(&node.addr, &path, &headers, body.as_bytes());
                assert_eq!(status, 200, "{step}: {chat} {text}: {answer}");
            }
        }
        let third: Vec<_> = chats.iter().map(|c| request(c, "third")).collect();
        let answers: Vec<Option<u16>> = std::thread::scope(|scope| {
            let threads: Vec<_> = third
                .iter()
                .map(|(path, headers, body)| {
                    let addr = &node.addr;
                    scope.spawn(move || try_post_to(addr, path, headers, body))
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(
            answers.iter().any(Option::is_none),
            "{step}: the node was killed in a batch: {answers:?}"
        );
        let status = node.child.wait().unwrap();
        assert!(!status.success(), "{step}: {status:?}");
        drop(node);

        // The senders retry every request on a fresh node.
        let node = serve(&env, &["--store", &store]);
        for ((path, headers, body), first) in third.iter().zip(&answers) {
            let retried = try_post_to(&node.addr, path, headers, body);
            match first {
                Some(status) => assert_eq!(*status, 200, "{step}: acknowledged"),
                None => assert!(matches!(retried, Some(200 | 401)), "{step}: {retried:?}"),
            }
        }
        let after = seen(&env, &store);
        let context = format!("{step}: first {answers:?}, messages {:?}", after.messages);
        assert_eq!(
            after.bound.len(),
            chats.len(),
            "one binding each: {context}"
        );
        assert_eq!(after.sessions, chats.len(), "no orphan session: {context}");
        for text in ["first", "second", "third"] {
            let n = after.messages.iter().filter(|m| *m == text).count();
            assert_eq!(
                n,
                chats.len(),
                "{text} delivered once to each chat: {context}"
            );
        }
    }
}

/// The old layout's marker a kill cut short (created, never written) is
/// read as "not proven": the retry is delivered, not refused.
#[test]
fn an_empty_replay_marker_does_not_refuse_the_retry() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let body = r#"{"text":"after an empty marker"}"#;
    let headers = signed(&key, PATH, body);
    let signature = &headers
        .iter()
        .find(|(name, _)| *name == "X-Vak-Signature")
        .unwrap()
        .1;
    let digest = vak_core::prompts::sha256_hex(signature.as_bytes());
    let replay = env.home().join(".vak/gateway/replay");
    std::fs::create_dir_all(&replay).unwrap();
    std::fs::write(replay.join(&digest), "").unwrap();
    let node = serve(&env, &[]);
    assert_eq!(try_post(&node.addr, &headers, body), Some(200));
    assert_eq!(seen(&env, "file").messages, ["after an empty marker"]);
    assert_eq!(try_post(&node.addr, &headers, body), Some(401));
    assert_eq!(
        std::fs::read_to_string(replay.join(&digest))
            .unwrap()
            .lines()
            .last(),
        Some("committed")
    );
}

/// A delivery whose binding cannot be written (here: the bindings'
/// temporary name is a directory) is refused and leaves no session; the
/// retry, once the way is clear, is delivered once.
#[test]
fn a_delivery_refused_at_its_binding_leaves_no_session() {
    let env = Env::fixture("myproj");
    env.trust();
    let blocker = env.home().join(".vak/gateway/bindings.json.tmp");
    std::fs::create_dir_all(blocker.join("x")).unwrap();
    let deliver = || {
        env.command(&[
            "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "hello",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
    };
    let out = deliver();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("bindings.json.tmp"),
        "{}",
        stderr(&out)
    );
    let after = seen(&env, "file");
    assert_eq!((after.sessions, after.bound.len()), (0, 0));
    assert!(
        std::fs::read_dir(env.home().join(".vak/sessions/pending"))
            .unwrap()
            .next()
            .is_none(),
        "nothing is left pending"
    );
    std::fs::remove_dir_all(&blocker).unwrap();
    assert!(deliver().status.success());
    let after = seen(&env, "file");
    assert_eq!((after.sessions, after.messages.len()), (1, 1));
}

/// A chat bound to a session a killed delivery left pending is imported
/// with that session: `vak store import` promotes it first, so the first
/// delivery on PostgreSQL continues it instead of rebinding the chat.
#[test]
fn store_import_carries_a_session_left_pending_by_a_kill() {
    let Some(url) = pg_url() else { return };
    let env = Env::fixture("myproj");
    env.trust();
    let mut doomed = env.command(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "first",
    ]);
    doomed.env("VAK_CRASH_AT", "fresh-bound");
    assert!(!doomed.output().unwrap().status.success(), "killed");
    assert_eq!(seen(&env, "file").sessions, 0, "pending, not listed");
    let db = scratch_database(&url, "pending_import");
    env.ok(&["store", "import", "--from", "file", "--store", &db]);
    let delivered = env.json(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "second", "--store",
        &db,
    ]);
    assert_eq!(delivered["outcome"], "continued", "{delivered}");
    let after = seen(&env, &db);
    assert_eq!(
        (after.sessions, after.messages.len()),
        (1, 1),
        "{:?}",
        after.messages
    );
}
