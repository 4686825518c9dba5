//! The home side served from the PostgreSQL store: two
//! `vak gateway serve` nodes, each with its own EMPTY `$VAK_HOME`, on one
//! database share the operator's prompts through the store; an edit through
//! one node's admin API rotates the chat once on the other node and no node
//! ever rotates it back. Real binary, real PostgreSQL (`VAK_TEST_PG_URL`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};

use serde_json::{Value, json};
use vak_core::prompts::sha256_hex;

use crate::common::*;
use crate::gateway_scale::{pg_url, scratch_database};
use crate::gateway_service::{post, request, serve, signed};

const TOKEN: &str = "home-store-test-token-0123456789abcdef";

/// A running `vak admin serve`; killed when dropped.
struct Admin {
    child: Child,
    addr: String,
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Admin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn admin(env: &Env, url: &str) -> Admin {
    let mut child = env
        .command(&["admin", "serve", "--listen", "127.0.0.1:0", "--store", url])
        .env("VAK_ADMIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("first line is the URL: {first:?}"))
        .to_owned();
    Admin {
        child,
        addr,
        _stdout: stdout,
    }
}

/// Send SIGTERM to `child` and wait for it.
fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait().unwrap()
}

/// One authenticated admin request; the status and the JSON answer.
fn call(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = [("Authorization", format!("Bearer {TOKEN}"))];
    request(addr, method, path, &auth, body.as_bytes())
}

fn save_guardrails(addr: &str, text: &str, if_digest: &str) -> (u16, Value) {
    call(
        addr,
        "PUT",
        "/api/layers/guardrails?scope=shared",
        Some(&json!({"text": text, "if_digest": if_digest})),
    )
}

fn deliver(node: &str, secret: &str, text: &str) -> Value {
    let body = json!({ "text": text }).to_string();
    let (status, answer) = post(
        node,
        "/v1/bots/helpdesk/chats/42/messages",
        &signed(secret, "/v1/bots/helpdesk/chats/42/messages", &body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    answer
}

fn config_changes(env: &Env, url: &str) -> usize {
    let audit = env.json(&["audit", "list", "--store", url]);
    audit
        .as_array()
        .or_else(|| audit["events"].as_array())
        .unwrap_or_else(|| panic!("audit list: {audit}"))
        .iter()
        .filter(|e| e["type"] == "config-change" || e["kind"] == "config-change")
        .count()
}

/// The operator's home (the fixture) imported into a fresh database.
fn seeded(tag: &str) -> Option<(String, Env, String)> {
    let url = scratch_database(&pg_url()?, tag);
    let operator = Env::fixture("myproj");
    operator.ok(&["store", "migrate", "--store", &url]);
    let secret = operator
        .ok(&["gateway", "secret", "helpdesk"])
        .trim()
        .to_owned();
    let imported = operator.json(&["store", "import", "--from", "file", "--store", &url]);
    assert_eq!(
        imported["home_files"], 9,
        "prompts, gateway, config, skill: {imported}"
    );
    assert_eq!(imported["secrets"], 1, "{imported}");
    // Idempotent: again, everything is already there.
    let again = operator.json(&["store", "import", "--from", "file", "--store", &url]);
    assert_eq!(again["home_files"], 0, "{again}");
    assert_eq!(again["home_already_there"], 9, "{again}");
    Some((url, operator, secret))
}

#[test]
fn two_nodes_with_empty_homes_share_the_home_side_and_rotate_once() {
    let Some((url, _operator, secret)) = seeded("two") else {
        return;
    };
    let (a, b) = (Env::empty(), Env::empty());
    // The secret comes from the store on a node with an empty home.
    assert_eq!(
        b.ok(&["gateway", "secret", "helpdesk", "--store", &url])
            .trim(),
        secret
    );
    assert!(!b.home().join(".vak/gateway/secrets/helpdesk").exists());
    let node_a = serve(&a, &["--store", &url]);
    let node_b = serve(&b, &["--store", &url]);
    // Each node's replica holds the operator's files.
    let guardrails =
        std::fs::read_to_string(fixtures().join("home/.vak/prompts/guardrails.md")).unwrap();
    for node in [&a, &b] {
        assert_eq!(
            std::fs::read_to_string(node.home().join(".vak/prompts/guardrails.md")).unwrap(),
            guardrails
        );
    }

    let first = deliver(&node_a.addr, &secret, "one");
    assert_eq!(first["outcome"], "created", "{first}");
    let session = first["session_id"].as_str().unwrap().to_owned();
    assert!(
        first["request"]["prefix"]
            .as_str()
            .unwrap()
            .contains("Never push to `main` directly")
    );
    for (i, node) in [&node_b, &node_a, &node_b].into_iter().enumerate() {
        let next = deliver(&node.addr, &secret, &format!("turn {i}"));
        assert_eq!(next["outcome"], "continued", "{next}");
        assert_eq!(next["session_id"], session.as_str());
    }

    // An edit through node A's admin API.
    let admin_a = admin(&a, &url);
    let edited = format!("{guardrails}- Never deploy on Fridays.\n");
    let (status, saved) = save_guardrails(&admin_a.addr, &edited, &sha256_hex(&guardrails));
    assert_eq!(status, 200, "{saved}");

    // The very next delivery, on node B, rotates: once.
    let rotated = deliver(&node_b.addr, &secret, "after the edit");
    assert_eq!(rotated["outcome"], "rotated", "{rotated}");
    assert_eq!(rotated["previous_session"], session.as_str());
    assert!(
        rotated["request"]["prefix"]
            .as_str()
            .unwrap()
            .contains("Never deploy on Fridays")
    );
    let fresh = rotated["session_id"].as_str().unwrap().to_owned();
    // A reader on a third empty home with the store chosen by VAK_STORE
    // sees the edit: `vak prompts show` and `check` sync before reading.
    let c = Env::empty();
    for args in [["prompts", "show"], ["prompts", "check"]] {
        let out = c.command(&args).env("VAK_STORE", &url).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        if args[1] == "show" {
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("Never deploy on Fridays"),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    for (i, node) in [&node_a, &node_b, &node_a, &node_b].into_iter().enumerate() {
        let next = deliver(&node.addr, &secret, &format!("later {i}"));
        assert_eq!(next["outcome"], "continued", "never back: {next}");
        assert_eq!(next["session_id"], fresh.as_str());
    }
    assert_eq!(config_changes(&a, &url), 1);
    assert_eq!(
        std::fs::read_to_string(b.home().join(".vak/prompts/guardrails.md")).unwrap(),
        edited
    );
    let (_, health_a) = call(&node_a.addr, "GET", "/healthz", None);
    let (_, health_b) = call(&node_b.addr, "GET", "/healthz", None);
    assert_eq!(health_a["store"], "postgres", "{health_a}");
    assert!(
        health_a["home_generation"].as_i64().unwrap() > 1,
        "{health_a}"
    );
    assert_eq!(health_a["home_generation"], health_b["home_generation"]);
    // Nothing changes under node B's home now: its deliveries check the
    // replica against the store no more (no manifest read, no file hashed).
    let checks = health_b["replica_checks"].as_u64();
    assert!(checks.is_some(), "{health_b}");
    for i in 0..5 {
        let next = deliver(&node_b.addr, &secret, &format!("quiet {i}"));
        assert_eq!(next["outcome"], "continued", "{next}");
    }
    let (_, health_b) = call(&node_b.addr, "GET", "/healthz", None);
    assert_eq!(health_b["replica_checks"].as_u64(), checks, "{health_b}");

    // A save that started from the old text is refused on the other node.
    let admin_b = admin(&b, &url);
    let (status, stale) = save_guardrails(&admin_b.addr, "- other\n", &sha256_hex(&guardrails));
    assert_eq!(status, 409, "{stale}");

    // `vak prompts set` on node B with the store chosen by VAK_STORE goes
    // through the store too: node A's next delivery rotates, once.
    let mut set = b.command(&["prompts", "set", "--scope", "shared", "guardrails", "-"]);
    let out = set
        .env("VAK_STORE", &url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = out;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"- Only the CLI said this.\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let again = deliver(&node_a.addr, &secret, "after the CLI edit");
    assert_eq!(again["outcome"], "rotated", "{again}");
    assert_eq!(again["previous_session"], fresh.as_str());
    let next = deliver(&node_b.addr, &secret, "and on B");
    assert_eq!(next["outcome"], "continued", "{next}");
    assert_eq!(next["session_id"], again["session_id"]);
    assert_eq!(config_changes(&a, &url), 2);

    // Both saves (A's admin API, B's CLI) are one history in the store,
    // listed the same on either node whatever its own home is.
    let logs: Vec<Value> = [&a, &b]
        .into_iter()
        .map(|node| {
            let text = node.ok(&[
                "prompts",
                "log",
                "--scope",
                "shared",
                "guardrails",
                "--store",
                &url,
                "--format",
                "json",
            ]);
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    assert_eq!(logs[0], logs[1]);
    assert_eq!(logs[0]["target"], "$VAK_HOME/.vak/prompts/guardrails.md");
    let versions = logs[0]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{}", logs[0]);
    assert!(
        versions[0]["who"]
            .as_str()
            .unwrap()
            .starts_with("admin-token:")
    );
    assert_eq!(versions[0]["before"], sha256_hex(&guardrails).as_str());
    assert_eq!(versions[1]["before"], sha256_hex(&edited).as_str());
    // Every text either node resolved on is kept in the store: the rotated
    // session diffs against now on the other node.
    let diff = b.ok(&["session", "diff", &fresh, "--store", &url]);
    assert!(diff.contains("Never deploy on Fridays"), "{diff}");
    assert!(diff.contains("Only the CLI said this"), "{diff}");

    // A bot prompt edited through node B's admin API (the gateway JSON goes
    // to the store whole): node A rotates on it.
    let identity = "You are the Helpdesk bot for the platform team. You answer questions about our services and open tickets; you do not change code.";
    let (status, saved) = call(
        &admin_b.addr,
        "PUT",
        "/api/gateway/bots/helpdesk/identity",
        Some(
            &json!({"text": "You are the store's Helpdesk bot.", "if_digest": sha256_hex(identity)}),
        ),
    );
    assert_eq!(status, 200, "{saved}");
    let bot_edit = deliver(&node_a.addr, &secret, "after the bot edit");
    assert_eq!(bot_edit["outcome"], "rotated", "{bot_edit}");
    assert!(
        bot_edit["request"]["prefix"]
            .as_str()
            .unwrap()
            .contains("the store's Helpdesk bot")
    );
    assert!(
        std::fs::read_to_string(a.home().join(".vak/gateway/bots.json"))
            .unwrap()
            .contains("the store's Helpdesk bot")
    );
    assert_eq!(config_changes(&a, &url), 3);
}

#[test]
fn two_admin_saves_racing_on_two_nodes_one_wins() {
    let Some((url, _operator, _secret)) = seeded("race") else {
        return;
    };
    let (a, b) = (Env::empty(), Env::empty());
    let admin_a = admin(&a, &url);
    let admin_b = admin(&b, &url);
    let replica = a.home().join(".vak/prompts/guardrails.md");
    for round in 0..5 {
        // Both start from the text node A's replica holds now (synced by
        // the last request to it).
        let digest = sha256_hex(std::fs::read_to_string(&replica).unwrap());
        let (da, db) = (digest.clone(), digest);
        let (addr_a, addr_b) = (admin_a.addr.clone(), admin_b.addr.clone());
        let ta = std::thread::spawn(move || {
            save_guardrails(&addr_a, &format!("- from A {round}\n"), &da).0
        });
        let tb = std::thread::spawn(move || {
            save_guardrails(&addr_b, &format!("- from B {round}\n"), &db).0
        });
        let mut statuses = [ta.join().unwrap(), tb.join().unwrap()];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}");
        // Node A's replica follows whichever won (its next request syncs).
        let (status, _) = call(&admin_a.addr, "GET", "/api/layers?scope=shared", None);
        assert_eq!(status, 200);
    }
}

#[test]
fn a_local_file_the_store_lacks_refuses_the_node_with_the_import_hint() {
    let Some((url, _operator, _secret)) = seeded("unknown") else {
        return;
    };
    let node = Env::empty();
    node.write_home(".vak/prompts/surface/telegram/identity.md", "I am local.\n");
    let out = node.vak(&[
        "gateway",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        &url,
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("vak store import --from file --store URL"),
        "{err}"
    );
    assert!(err.contains("surface/telegram/identity.md"), "{err}");
    // Nothing was written over or beside it.
    assert_eq!(
        std::fs::read_to_string(
            node.home()
                .join(".vak/prompts/surface/telegram/identity.md")
        )
        .unwrap(),
        "I am local.\n"
    );
    assert!(!node.home().join(".vak/prompts/guardrails.md").exists());
}

#[test]
fn a_replica_edited_by_hand_or_a_row_altered_in_the_database_is_refused() {
    let Some((url, operator, secret)) = seeded("altered") else {
        return;
    };
    let a = Env::empty();
    let node = serve(&a, &["--store", &url]);
    assert_eq!(deliver(&node.addr, &secret, "one")["outcome"], "created");

    // A row altered behind vak's back is never served.
    let status = std::process::Command::new("psql")
        .args([
            url.as_str(),
            "-qc",
            "UPDATE vak_home_files SET text = text || '- injected' WHERE path = '.vak/prompts/guardrails.md'; UPDATE vak_home_generation SET generation = generation + 1",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let body = json!({"text": "two"}).to_string();
    let (status, answer) = post(
        &node.addr,
        "/v1/bots/helpdesk/chats/42/messages",
        &signed(&secret, "/v1/bots/helpdesk/chats/42/messages", &body),
        body.as_bytes(),
    );
    assert_eq!(status, 500, "{answer}");
    assert!(
        !std::fs::read_to_string(a.home().join(".vak/prompts/guardrails.md"))
            .unwrap()
            .contains("injected")
    );
    // A node on PostgreSQL stops cleanly on SIGTERM: its store's client is
    // dropped after the runtime, not inside it (which panicked, exit 101).
    let mut node = node;
    assert!(terminate(&mut node.child).success());

    // A file edited by hand on a node is reported, not overwritten.
    let b = Env::empty();
    let fresh_url = scratch_database(&pg_url().unwrap(), "byhand");
    operator.ok(&["store", "migrate", "--store", &fresh_url]);
    operator.ok(&["store", "import", "--from", "file", "--store", &fresh_url]);
    let admin_b = admin(&b, &fresh_url);
    b.write_home(".vak/prompts/operating-rules.md", "- edited by hand\n");
    // Noticed at the very next request, though the store did not move.
    let (status, answer) = call(&admin_b.addr, "GET", "/api/layers?scope=shared", None);
    assert_eq!(status, 500, "{answer}");
    assert!(answer.to_string().contains("by hand"), "{answer}");
    let a2 = Env::empty();
    let admin_a2 = admin(&a2, &fresh_url);
    let rules =
        std::fs::read_to_string(fixtures().join("home/.vak/prompts/operating-rules.md")).unwrap();
    let (status, answer) = call(
        &admin_a2.addr,
        "PUT",
        "/api/layers/operating-rules?scope=shared",
        Some(&json!({"text": "- from the store\n", "if_digest": sha256_hex(&rules)})),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = call(&admin_b.addr, "GET", "/api/layers?scope=shared", None);
    assert_eq!(status, 500, "{answer}");
    assert!(answer.to_string().contains("by hand"), "{answer}");
    assert_eq!(
        std::fs::read_to_string(b.home().join(".vak/prompts/operating-rules.md")).unwrap(),
        "- edited by hand\n"
    );
    // So does an admin server on PostgreSQL.
    let mut admin_a2 = admin_a2;
    assert!(terminate(&mut admin_a2.child).success());
}

#[test]
fn a_home_side_built_through_one_nodes_admin_api_serves_another_node() {
    let Some(pg) = pg_url() else {
        return;
    };
    let url = scratch_database(&pg, "built");
    let (a, b) = (Env::empty(), Env::empty());
    a.ok(&["store", "migrate", "--store", &url]);
    let admin_a = admin(&a, &url);
    let (status, saved) = call(
        &admin_a.addr,
        "PUT",
        "/api/layers/guardrails?scope=shared",
        Some(&json!({"text": "- Built through the admin API.\n", "if_digest": ""})),
    );
    assert_eq!(status, 200, "{saved}");
    // The gateway tiers, written through the same API.
    let (status, saved) = call(
        &admin_a.addr,
        "PUT",
        "/api/gateway/bots/helpdesk/identity",
        Some(&json!({"text": "You are the built bot.", "if_digest": "", "create_entry": true})),
    );
    assert_eq!(status, 200, "{saved}");
    let (status, saved) = call(
        &admin_a.addr,
        "PUT",
        "/api/gateway/chats/helpdesk/7/surface-note",
        Some(&json!({"text": "Chat seven.", "if_digest": "", "create_entry": true})),
    );
    assert_eq!(status, 200, "{saved}");
    let secret = a
        .ok(&["gateway", "secret", "helpdesk", "--store", &url])
        .trim()
        .to_owned();
    let node_b = serve(&b, &["--store", &url]);
    let body = json!({"text": "hello"}).to_string();
    let (status, answer) = post(
        &node_b.addr,
        "/v1/bots/helpdesk/chats/7/messages",
        &signed(&secret, "/v1/bots/helpdesk/chats/7/messages", &body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let prefix = answer["request"]["prefix"].as_str().unwrap();
    for text in [
        "Built through the admin API",
        "You are the built bot",
        "Chat seven",
    ] {
        assert!(prefix.contains(text), "{text} in {prefix}");
    }
}

/// `n` distinct bullet lines tagged `tag`.
fn bullets(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- {tag} rule {i}: answer in plain words.\n"))
        .collect()
}

/// The composed prefix's tokens on `env`'s node, after a request to its
/// admin server brought its replica up to the store.
fn prefix_tokens(env: &Env, admin: &Admin) -> u64 {
    let (status, answer) = call(&admin.addr, "GET", "/api/layers?scope=shared", None);
    assert_eq!(status, 200, "{answer}");
    env.json(&["prompts", "show"])["tokens"]["prefix"]
        .as_u64()
        .unwrap()
}

fn put_block(admin: &Admin, block: &str, text: &str, if_digest: &str) -> (u16, Value) {
    call(
        &admin.addr,
        "PUT",
        &format!("/api/layers/{block}?scope=shared"),
        Some(&json!({"text": text, "if_digest": if_digest})),
    )
}

fn reset_block(admin: &Admin, block: &str, text: &str) {
    let (status, answer) = call(
        &admin.addr,
        "DELETE",
        &format!(
            "/api/layers/{block}?scope=shared&if_digest={}",
            sha256_hex(text)
        ),
        None,
    );
    assert_eq!(status, 200, "{answer}");
}

/// How many lines of `block` take `share` percent of the room under `cap`
/// on `env`'s node: measured with two saves (a block's text may replace
/// the built-in one or add to it), so the test never goes vacuous when the
/// built-in prompt changes.
fn lines_for(env: &Env, admin: &Admin, block: &str, cap: u64, share: u64) -> usize {
    let base = prefix_tokens(env, admin);
    let (short, long) = (bullets("X", 20), bullets("X", 40));
    assert_eq!(put_block(admin, block, &short, "").0, 200);
    let t20 = prefix_tokens(env, admin);
    assert_eq!(put_block(admin, block, &long, &sha256_hex(&short)).0, 200);
    let t40 = prefix_tokens(env, admin);
    reset_block(admin, block, &long);
    assert_eq!(prefix_tokens(env, admin), base);
    let per_line = (t40 - t20) / 20;
    let fixed = i64::try_from(t20).unwrap() - i64::try_from(base + 20 * per_line).unwrap();
    let want = i64::try_from((cap - base) * share / 100).unwrap();
    usize::try_from((want - fixed) / i64::try_from(per_line).unwrap()).unwrap()
}

#[test]
fn two_admin_servers_saving_different_shared_blocks_at_once_never_go_over_the_cap_together() {
    const CAP: u64 = 1500;
    const ROUNDS: usize = 8;
    let Some(pg) = pg_url() else {
        return;
    };
    let url = scratch_database(&pg, "budget");
    let (a, b) = (Env::empty(), Env::empty());
    // The cap is in the shared config, which the store carries to every
    // node (B's home is empty: its replica gets it).
    a.set_cap(usize::try_from(CAP).unwrap());
    a.ok(&["store", "migrate", "--store", &url]);
    a.ok(&["store", "import", "--from", "file", "--store", &url]);
    let admin_a = admin(&a, &url);
    let admin_b = admin(&b, &url);
    // Node A saves operating rules, node B guardrails: each alone takes
    // 70% of the room under the cap, so either fits and both do not.
    let lines_a = lines_for(&a, &admin_a, "operating-rules", CAP, 70);
    let lines_b = lines_for(&b, &admin_b, "guardrails", CAP, 70);
    let base = prefix_tokens(&a, &admin_a);
    for round in 0..ROUNDS {
        let text_a = bullets(&format!("A{round}"), lines_a);
        let text_b = bullets(&format!("B{round}"), lines_b);
        // Both start from the same point: neither block saved, every node
        // synced (the measurement's last request).
        assert_eq!(prefix_tokens(&b, &admin_b), base, "round {round}");
        let (addr_a, addr_b) = (admin_a.addr.clone(), admin_b.addr.clone());
        let (ta, tb) = (text_a.clone(), text_b.clone());
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let (sa, sb) = (start.clone(), start);
        let save_a = std::thread::spawn(move || {
            sa.wait();
            call(
                &addr_a,
                "PUT",
                "/api/layers/operating-rules?scope=shared",
                Some(&json!({"text": ta, "if_digest": ""})),
            )
        });
        let save_b = std::thread::spawn(move || {
            sb.wait();
            call(
                &addr_b,
                "PUT",
                "/api/layers/guardrails?scope=shared",
                Some(&json!({"text": tb, "if_digest": ""})),
            )
        });
        let (a_saved, b_saved) = (save_a.join().unwrap(), save_b.join().unwrap());
        let mut statuses = [a_saved.0, b_saved.0];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [200, 422],
            "round {round}: exactly one save is refused over the cap: {a_saved:?} {b_saved:?}"
        );
        let refused = if a_saved.0 == 422 {
            &a_saved.1
        } else {
            &b_saved.1
        };
        assert!(
            refused["chains"].as_array().is_some_and(|c| !c.is_empty()),
            "round {round}: the refusal names the chains: {refused}"
        );
        // Whichever won, both nodes resolve a prompt within the cap.
        for (env, admin) in [(&a, &admin_a), (&b, &admin_b)] {
            let tokens = prefix_tokens(env, admin);
            assert!(tokens <= CAP, "round {round}: {tokens} tokens");
            let check = env.vak(&["prompts", "check", "--all"]);
            assert!(check.status.success(), "round {round}: {}", stderr(&check));
        }
        // Back to the starting point for the next round.
        if a_saved.0 == 200 {
            reset_block(&admin_a, "operating-rules", &text_a);
        } else {
            reset_block(&admin_b, "guardrails", &text_b);
        }
        assert_eq!(prefix_tokens(&a, &admin_a), base, "round {round}");
    }
}

/// `vak prompts set --scope shared BLOCK -` through the store.
fn cli_set(env: &Env, url: &str, block: &str, text: &str) -> std::process::Output {
    env.vak_stdin(
        &[
            "prompts", "set", "--scope", "shared", block, "-", "--store", url,
        ],
        text,
    )
}

#[test]
fn two_cli_saves_on_two_nodes_at_once_never_go_over_the_cap_together() {
    const CAP: usize = 1500;
    const ROUNDS: usize = 4;
    let Some(pg) = pg_url() else {
        return;
    };
    let url = scratch_database(&pg, "clibudget");
    let (a, b) = (Env::empty(), Env::empty());
    // The cap travels in the shared config, through the store.
    a.set_cap(CAP);
    a.ok(&["store", "migrate", "--store", &url]);
    a.ok(&["store", "import", "--from", "file", "--store", &url]);
    let tokens = |env: &Env| {
        env.json(&["prompts", "show"])["tokens"]["prefix"]
            .as_u64()
            .unwrap()
    };
    // Measured on node A as the admin test measures (see `lines_for`):
    // each text takes 70% of the room under the cap.
    let base = tokens(&a);
    let mut lines = Vec::new();
    for block in ["operating-rules", "guardrails"] {
        assert!(cli_set(&a, &url, block, &bullets("X", 20)).status.success());
        let t20 = tokens(&a);
        assert!(cli_set(&a, &url, block, &bullets("X", 40)).status.success());
        let t40 = tokens(&a);
        a.ok(&[
            "prompts", "reset", "--scope", "shared", block, "--store", &url,
        ]);
        let per_line = (t40 - t20) / 20;
        let fixed = i64::try_from(t20).unwrap() - i64::try_from(base + 20 * per_line).unwrap();
        let want = i64::try_from((CAP as u64 - base) * 70 / 100).unwrap();
        lines.push(usize::try_from((want - fixed) / i64::try_from(per_line).unwrap()).unwrap());
    }
    for round in 0..ROUNDS {
        let text_a = bullets(&format!("A{round}"), lines[0]);
        let text_b = bullets(&format!("B{round}"), lines[1]);
        let start = std::sync::Barrier::new(2);
        let (out_a, out_b) = std::thread::scope(|s| {
            let save_a = s.spawn(|| {
                start.wait();
                cli_set(&a, &url, "operating-rules", &text_a)
            });
            let save_b = s.spawn(|| {
                start.wait();
                cli_set(&b, &url, "guardrails", &text_b)
            });
            (save_a.join().unwrap(), save_b.join().unwrap())
        });
        let mut codes = [out_a.status.code(), out_b.status.code()];
        codes.sort_unstable();
        assert_eq!(
            codes,
            [Some(0), Some(4)],
            "round {round}: exactly one save is refused over the cap (exit 4): A: {} B: {}",
            stderr(&out_a),
            stderr(&out_b)
        );
        let (winner, loser, block) = if out_a.status.success() {
            (&a, &out_b, "operating-rules")
        } else {
            (&b, &out_a, "guardrails")
        };
        assert!(stderr(loser).contains("over"), "{}", stderr(loser));
        // Both replicas hold the winner's text alone (the loser synced to
        // it when it checked again): within the cap on every chain.
        for env in [&a, &b] {
            assert!(tokens(env) <= CAP as u64, "round {round}: {}", tokens(env));
            let check = env.vak(&["prompts", "check", "--all"]);
            assert!(check.status.success(), "round {round}: {}", stderr(&check));
        }
        winner.ok(&[
            "prompts", "reset", "--scope", "shared", block, "--store", &url,
        ]);
    }
}

/// What a node serves is what the operator has: `vak store import` carries
/// the home's `config.toml` (its MCP servers included, its `[store]` table
/// not: that is node-local) and skills with the prompt files, so a node
/// started on an EMPTY home continues a chat bound before the import (no
/// rotation), its prompt lists the same skill, and its start-up log has no
/// line per replica file.
#[test]
fn a_node_on_an_empty_home_continues_a_chat_bound_before_the_import() {
    let Some(pg) = pg_url() else {
        return;
    };
    let url = scratch_database(&pg, "wholehome");
    let operator = Env::fixture("myproj");
    let secret = operator
        .ok(&["gateway", "secret", "helpdesk"])
        .trim()
        .to_owned();
    // Bound on the file store, before the store holds anything.
    let bound = operator.json(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "hello",
    ]);
    let session = bound["session_id"].as_str().unwrap().to_owned();
    // The operator's config names the store: node-local, never carried.
    let config = operator.home().join(".vak/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("[mcp.servers.docs]"), "{text}");
    text.push_str(&format!("\n[store]\nurl = \"{url}\"\n"));
    std::fs::write(&config, &text).unwrap();
    operator.ok(&["store", "migrate", "--store", &url]);
    let imported = operator.json(&["store", "import", "--from", "file", "--store", &url]);
    assert_eq!(
        imported["home_files"], 9,
        "config and skill too: {imported}"
    );

    let node = Env::empty();
    let project = operator.project().to_str().unwrap().to_owned();
    let log = node.home().join("serve.log");
    let mut command = operator.command(&[
        "gateway",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        &url,
        "--project",
        &project,
    ]);
    command
        .env("VAK_HOME", node.home())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut served = crate::gateway_service::spawn_served_with_stderr(command);
    let body = json!({ "text": "again" }).to_string();
    let path = "/v1/bots/helpdesk/chats/42/messages";
    let (status, answer) = post(
        &served.addr,
        path,
        &signed(&secret, path, &body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "continued", "{answer}");
    assert_eq!(answer["session_id"], session.as_str(), "{answer}");
    terminate(&mut served.child);

    // The replica holds the skill and the config without the operator's
    // `[store]` table; the node's prompt lists the skill.
    assert_eq!(
        std::fs::read_to_string(node.home().join(".vak/skills/changelog/SKILL.md")).unwrap(),
        std::fs::read_to_string(operator.home().join(".vak/skills/changelog/SKILL.md")).unwrap()
    );
    let replica = std::fs::read_to_string(node.home().join(".vak/config.toml")).unwrap();
    assert!(replica.contains("[mcp.servers.docs]"), "{replica}");
    assert!(
        !replica.contains("[store]") && !replica.contains(&url),
        "{replica}"
    );
    let shown = operator
        .command(&["prompts", "show", "--surface", "chat"])
        .env("VAK_HOME", node.home())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("changelog"), "{shown}");

    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!said.contains("prompt layer file saved"), "{said}");
}

/// A request that is refused for its signature (401) never waits for the
/// store: the bot's secret is kept by the service, so with the node's one
/// pooled connection held by a delivery that waits on the chat's lock, a
/// wrongly signed request is still answered — before the lock is let go —
/// and the waiting delivery then goes through.
#[test]
fn a_wrong_signature_is_refused_while_every_connection_waits_on_a_delivery() {
    use std::io::Write as _;
    let Some(pg) = pg_url() else {
        return;
    };
    let url = scratch_database(&pg, "secretwait");
    let env = Env::fixture("myproj");
    env.ok(&["store", "migrate", "--store", &url]);
    let secret = env
        .ok(&["gateway", "secret", "helpdesk", "--store", &url])
        .trim()
        .to_owned();
    let node = serve(&env, &["--store", &format!("{url}?vak_pool=1")]);
    let first = deliver(&node.addr, &secret, "first");
    assert_eq!(first["outcome"], "created", "{first}");

    // Another client holds the chat's binding row.
    let mut holder = std::process::Command::new("psql")
        .args([url.as_str(), "-qAt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut sql = holder.stdin.take().unwrap();
    sql.write_all(
        b"BEGIN;\nSELECT 1 FROM vak_bindings WHERE bot = 'helpdesk' AND chat = '42' FOR UPDATE;\n",
    )
    .unwrap();
    sql.flush().unwrap();
    // Only this test's database: other tests share the cluster, and their
    // open transactions and lock waits are none of this one's.
    let count = |query: &str| {
        let query = format!("{query} AND datname = current_database()");
        crate::history_store::psql(&url, &query)
    };
    wait_until("the binding row is held", || {
        count("SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'") == "1"
    });
    // A delivery now waits on it, holding the node's only connection.
    let (addr, key) = (node.addr.clone(), secret.clone());
    let waiting = std::thread::spawn(move || deliver(&addr, &key, "second"));
    wait_until("the delivery waits on the chat's lock", || {
        count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == "1"
    });

    let body = json!({ "text": "forged" }).to_string();
    let path = "/v1/bots/helpdesk/chats/42/messages";
    let wrong = signed("not the secret, but long enough to be one", path, &body);
    let (status, answer) = post(&node.addr, path, &wrong, body.as_bytes());
    assert_eq!(status, 401, "{answer}");
    // Answered while the delivery still waits: the lock is let go only now.
    assert_eq!(
        count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"),
        "1"
    );
    sql.write_all(b"COMMIT;\n").unwrap();
    drop(sql);
    holder.wait().unwrap();
    let second = waiting.join().unwrap();
    assert_eq!(second["outcome"], "continued", "{second}");
}

/// Two admin servers on one store: node A's `/api/prompt`, answered from
/// memory while nothing changed, shows node B's save at A's very next
/// request (A's replica syncs first, and what it answered from memory goes).
#[test]
fn one_nodes_prompt_view_shows_another_nodes_save_at_once() {
    let Some(pg) = pg_url() else {
        return;
    };
    let url = scratch_database(&pg, "admin_view");
    let (a, b) = (Env::empty(), Env::empty());
    a.ok(&["store", "migrate", "--store", &url]);
    let (admin_a, admin_b) = (admin(&a, &url), admin(&b, &url));
    let (status, saved) = save_guardrails(&admin_a.addr, "- First, through A.\n", "");
    assert_eq!(status, 200, "{saved}");
    for _ in 0..2 {
        let (status, view) = call(&admin_a.addr, "GET", "/api/prompt", None);
        assert_eq!(status, 200, "{view}");
        assert!(
            view["prefix"]
                .as_str()
                .unwrap()
                .contains("First, through A.")
        );
    }
    let digest = saved["digest"].as_str().unwrap().to_owned();
    let (status, saved) = save_guardrails(&admin_b.addr, "- Then, through B.\n", &digest);
    assert_eq!(status, 200, "{saved}");
    let (status, view) = call(&admin_a.addr, "GET", "/api/prompt", None);
    assert_eq!(status, 200, "{view}");
    let prefix = view["prefix"].as_str().unwrap();
    assert!(prefix.contains("Then, through B."), "{prefix}");
    assert!(!prefix.contains("First, through A."), "{prefix}");
}

/// `vak store import` carries skills read as hostile: a `skills`
/// directory linked out of the home is refused by name and nothing of what
/// it leads to reaches the database; a `SKILL.md` that is a FIFO is refused
/// without blocking.
#[test]
fn import_refuses_skills_linked_out_of_the_home_or_not_regular_files() {
    let Some(pg) = pg_url() else {
        return;
    };
    for case in ["linked out", "fifo"] {
        let url = scratch_database(&pg, "skills_hostile");
        let env = Env::fixture("myproj");
        env.ok(&["store", "migrate", "--store", &url]);
        let skills = env.home().join(".vak/skills");
        let outside = tempfile::tempdir().unwrap();
        match case {
            "linked out" => {
                std::fs::remove_dir_all(&skills).ok();
                write(
                    &outside.path().join("stolen/SKILL.md"),
                    "---\nname: stolen\ndescription: text from outside the home\n---\n",
                );
                std::os::unix::fs::symlink(outside.path(), &skills).unwrap();
            }
            _ => {
                std::fs::create_dir_all(skills.join("piped")).unwrap();
                mkfifo(&skills.join("piped/SKILL.md"));
            }
        }
        let out = output_within(
            &mut env.command(&["store", "import", "--from", "file", "--store", &url]),
            HANG,
        );
        let said = stderr(&out);
        assert!(!out.status.success(), "{case}: refused: {said}");
        assert!(said.contains("skills"), "{case}: names it: {said}");
        // What a node on an empty home would serve from that database.
        let node = Env::empty();
        let shown = node
            .command(&["prompts", "show", "--format", "json"])
            .env("VAK_STORE", &url)
            .output()
            .unwrap();
        assert!(
            !stdout(&shown).contains("text from outside the home"),
            "{case}: {}",
            stdout(&shown)
        );
    }
}
