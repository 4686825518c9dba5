//! A signed request's signature is taken by the delivery that commits it:
//! a delivery that fails leaves it free, so the sender's
//! retry of the same signed request is delivered; a replay of a delivered
//! one is refused (401) with nothing written; the same signed request sent
//! to two nodes at once is delivered once.

use std::sync::Barrier;

use crate::common::*;
use crate::gateway_scale::{pg_url, scratch_database};
use crate::gateway_service::{post, secret, serve, signed};

const PATH: &str = "/v1/bots/helpdesk/chats/42/messages";

/// The sessions and turns in the store the nodes share.
fn sessions_and_turns(env: &Env, db: &str) -> (usize, usize) {
    let store = vak_gateway::open_store(camino::Utf8Path::from_path(env.home()).unwrap(), Some(db))
        .unwrap();
    let (ids, total) = store.list_newest(100).unwrap();
    let turns = ids
        .iter()
        .map(|id| store.read(id).unwrap().turns().count())
        .sum();
    (total, turns)
}

#[test]
fn a_signed_request_refused_inside_its_delivery_is_delivered_when_retried() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let node = serve(&env, &[]);
    // Two guardrail files, each under the per-file limit, far over the
    // model's window together: the delivery's plan refuses it (422) under
    // the chat's lock, after the signature was checked.
    let layers = [
        ".vak/prompts/guardrails.md",
        ".vak/prompts/surface/chat/guardrails.md",
    ];
    for (path, tag) in layers.iter().zip(["alpha", "beta"]) {
        env.write_project(path, &large_guardrails(tag));
    }
    let body = r#"{"text":"sent while the prompt was too long"}"#;
    let headers = signed(&key, PATH, body);
    let (status, answer) = post(&node.addr, PATH, &headers, body.as_bytes());
    assert_eq!(status, 422, "{answer}");
    assert_eq!(sessions_and_turns(&env, "file"), (0, 0));

    for path in layers {
        std::fs::remove_file(env.project().join(path)).unwrap();
    }
    let (status, answer) = post(&node.addr, PATH, &headers, body.as_bytes());
    assert_eq!(status, 200, "the same signed request, retried: {answer}");
    assert_eq!(answer["outcome"], "created");
    assert_eq!(sessions_and_turns(&env, "file"), (1, 1));

    let (status, answer) = post(&node.addr, PATH, &headers, body.as_bytes());
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("replay"),
        "{answer}"
    );
    assert_eq!(
        sessions_and_turns(&env, "file"),
        (1, 1),
        "a replay writes nothing"
    );
}

/// Two nodes on one store get the same signed request at the same moment.
fn one_signed_request_on_two_nodes_at_once(db: &str) {
    let env = Env::fixture("myproj");
    env.trust();
    env.ok(&["store", "migrate", "--store", db]);
    let key = secret(&env, "helpdesk");
    let nodes = [serve(&env, &["--store", db]), serve(&env, &["--store", db])];
    for round in 0..5 {
        let body = serde_json::json!({ "text": format!("round {round}") }).to_string();
        let headers = signed(&key, PATH, &body);
        let start = Barrier::new(2);
        let mut statuses: Vec<u16> = std::thread::scope(|scope| {
            let sent: Vec<_> = nodes
                .iter()
                .map(|node| {
                    let (start, headers, body) = (&start, &headers, &body);
                    scope.spawn(move || {
                        start.wait();
                        post(&node.addr, PATH, headers, body.as_bytes()).0
                    })
                })
                .collect();
            sent.into_iter().map(|s| s.join().unwrap()).collect()
        });
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 401], "round {round}");
        assert_eq!(
            sessions_and_turns(&env, db),
            (1, round + 1),
            "one turn per signed request"
        );
    }
}

#[test]
fn one_signed_request_on_two_nodes_of_one_database_is_delivered_once() {
    let Some(url) = pg_url() else { return };
    one_signed_request_on_two_nodes_at_once(&scratch_database(&url, "replay"));
}

#[test]
fn one_signed_request_on_two_nodes_of_one_file_store_is_delivered_once() {
    one_signed_request_on_two_nodes_at_once("file");
}
