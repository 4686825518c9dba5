//! Hostile input to `vak gateway serve`, third round: times at the edges of
//! the integers, signatures that do not name their chat, framing that is
//! not HTTP/1.1. The real binary on a loopback port.

use crate::common::*;
use crate::gateway_scale::{pg_url, scratch_database};
use crate::gateway_service::{now, post, raw_exchange, request, secret, serve};

const PATH: &str = "/v1/bots/helpdesk/chats/42/messages";

/// `v2` headers for `body` to helpdesk/42 dated `ts` (any string).
fn signed_at(key: &str, ts: &str, body: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "X-Vak-Signature",
            vak_gateway::sign_v2(key, ts, "helpdesk", "42", body.as_bytes()),
        ),
        ("X-Vak-Timestamp", ts.to_owned()),
    ]
}

/// A correctly signed request dated at the edges of the integers (now −
/// 2^63, `i64::MIN`/`MAX`, values past `u64`) is refused as stale, and so
/// is its second copy: nothing is delivered, on either store.
fn times_at_the_edges_are_stale(db: &str) {
    let env = Env::fixture("myproj");
    env.trust();
    env.ok(&["store", "migrate", "--store", db]);
    let key = secret(&env, "helpdesk");
    let served = serve(&env, &["--store", db]);
    let now = now();
    let edges = [
        (now + i64::MIN).to_string(),
        i64::MIN.to_string(),
        (i64::MIN + 1).to_string(),
        i64::MAX.to_string(),
        (now - (1_i64 << 62)).to_string(),
        u64::MAX.to_string(),
        "99999999999999999999999999".to_owned(),
    ];
    for ts in &edges {
        let body = format!(r#"{{"text":"dated {ts}"}}"#);
        for copy in ["first", "second"] {
            let (status, answer) = post(
                &served.addr,
                PATH,
                &signed_at(&key, ts, &body),
                body.as_bytes(),
            );
            assert_eq!(status, 401, "{ts}, {copy} copy: {answer}");
            assert!(
                answer["error"].as_str().unwrap().contains("300 s"),
                "{ts}: {answer}"
            );
        }
    }
    let body = r#"{"text":"on time"}"#;
    let (status, answer) = post(
        &served.addr,
        PATH,
        &signed_at(&key, &now.to_string(), body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["outcome"], "created",
        "nothing dated at an edge was delivered before: {answer}"
    );
}

#[test]
fn times_at_the_edges_are_stale_on_the_file_store() {
    times_at_the_edges_are_stale("file");
}

#[test]
fn times_at_the_edges_are_stale_on_postgres() {
    let Some(url) = pg_url() else { return };
    times_at_the_edges_are_stale(&scratch_database(&url, "edges"));
}

/// `v1` headers for `body` dated now: they cover the body and the time,
/// not the bot and chat.
fn signed_v1(key: &str, body: &str) -> Vec<(&'static str, String)> {
    let ts = now().to_string();
    vec![
        (
            "X-Vak-Signature",
            vak_gateway::sign(key, &ts, body.as_bytes()),
        ),
        ("X-Vak-Timestamp", ts),
    ]
}

/// A `v1` signature does not name its chat, so a captured one could be
/// sent to another chat of the bot: refused (401) unless the shared config
/// turns it on; a project's config cannot.
#[test]
fn a_v1_signature_is_refused_unless_the_shared_config_accepts_it() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let body = r#"{"text":"signed the old way"}"#;

    // The default, and a project that says yes: refused, and told how.
    for project_says in [false, true] {
        if project_says {
            env.write_project(".vak/config.toml", "[gateway]\naccept_v1 = true\n");
        }
        let served = serve(&env, &[]);
        let (status, answer) = post(&served.addr, PATH, &signed_v1(&key, body), body.as_bytes());
        assert_eq!(
            status, 401,
            "project config says yes: {project_says}: {answer}"
        );
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains("v1") && error.contains("v2") && error.contains("accept_v1"),
            "{error}"
        );
        let body = format!(r#"{{"text":"signed with v2, project says yes: {project_says}"}}"#);
        let v2 = signed_at(&key, &now().to_string(), &body);
        let (status, answer) = post(&served.addr, PATH, &v2, body.as_bytes());
        assert_eq!(status, 200, "{answer}");
    }

    // The shared config turns it on.
    let shared = env.home().join(".vak/config.toml");
    let mut config = std::fs::read_to_string(&shared).unwrap_or_default();
    config.push_str("\n[gateway]\naccept_v1 = true\n");
    std::fs::write(&shared, config).unwrap();
    let served = serve(&env, &[]);
    let (status, answer) = post(&served.addr, PATH, &signed_v1(&key, body), body.as_bytes());
    assert_eq!(status, 200, "{answer}");
}

/// An HTTP/2 connection preface is not HTTP/1.1: answered with the JSON
/// 400 every refusal of the service is, not a silent close; whole, or cut
/// after its request line. The service still answers afterwards.
#[test]
fn an_http2_preface_is_answered_with_a_json_400() {
    let env = Env::fixture("myproj");
    let served = serve(&env, &[]);
    for preface in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        &b"PRI * HTTP/2.0\r\n"[..],
    ] {
        let (status, answer) = raw_exchange(&served.addr, preface);
        assert!(status.starts_with("HTTP/1.1 400"), "{status}");
        assert_eq!(answer["status"], 400, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("HTTP/1.1"),
            "{answer}"
        );
    }
    assert_eq!(request(&served.addr, "GET", "/healthz", &[], b"").0, 200);
}

/// A chat whose bound session's ledger is gone is bound to a fresh session,
/// and the delivery says so: a warning naming the chat and the session in
/// the service's answer and in `vak gateway deliver --format json`.
#[test]
fn a_chat_whose_ledger_is_gone_is_rebound_with_a_warning() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let served = serve(&env, &[]);
    let body = r#"{"text":"first"}"#;
    let (status, first) = post(
        &served.addr,
        PATH,
        &signed_at(&key, &now().to_string(), body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{first}");
    let gone = first["session_id"].as_str().unwrap().to_owned();
    std::fs::remove_file(env.home().join(format!(".vak/sessions/{gone}.jsonl"))).unwrap();

    let body = r#"{"text":"second"}"#;
    let (status, second) = post(
        &served.addr,
        PATH,
        &signed_at(&key, &now().to_string(), body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["outcome"], "rebound", "{second}");
    let warned = second["warnings"].to_string();
    assert!(
        warned.contains(&gone) && warned.contains("helpdesk/42") && warned.contains("gone"),
        "{second}"
    );

    // The command line says the same, from the same library.
    let now_gone = second["session_id"].as_str().unwrap().to_owned();
    std::fs::remove_file(env.home().join(format!(".vak/sessions/{now_gone}.jsonl"))).unwrap();
    let delivered = env.json(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "third",
    ]);
    assert_eq!(delivered["outcome"], "rebound", "{delivered}");
    assert!(
        delivered["warnings"].to_string().contains(&now_gone),
        "{delivered}"
    );

    // And the audit log has one `rebound` event for each.
    let audit = env.ok(&["audit", "list"]);
    for (gone, now_bound) in [
        (&gone, second["session_id"].as_str().unwrap()),
        (&now_gone, delivered["session_id"].as_str().unwrap()),
    ] {
        let line = format!("rebound helpdesk/42: session {gone} (ledger gone) → {now_bound}");
        assert_eq!(audit.matches(&line).count(), 1, "{line} in {audit}");
    }
}
