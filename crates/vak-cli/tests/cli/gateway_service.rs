//! `vak gateway serve` and `vak gateway secret`: the real binary on a
//! loopback port, requests signed as DECISIONS §13 says, a raw HTTP/1.1
//! client so nothing hides a status.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::common::*;

/// A running `vak gateway serve`; killed when dropped.
pub struct Served {
    pub child: Child,
    pub addr: String,
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve(env: &Env, extra: &[&str]) -> Served {
    let mut args = vec!["gateway", "serve", "--listen", "127.0.0.1:0"];
    args.extend(extra);
    spawn_served(env.command(&args))
}

/// Start `command` (a `vak gateway serve`) and read its URL.
pub fn spawn_served(mut command: std::process::Command) -> Served {
    command.stderr(Stdio::null());
    spawn_served_with_stderr(command)
}

/// [`spawn_served`], leaving `command`'s stderr as the caller set it.
pub fn spawn_served_with_stderr(mut command: std::process::Command) -> Served {
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("first line is the URL: {first:?}"))
        .to_owned();
    Served {
        child,
        addr,
        _stdout: stdout,
    }
}

pub fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// POST `body` to `path` with `headers`; the status and the JSON answer.
pub fn post(addr: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
    request(addr, "POST", path, headers, body)
}

/// One HTTP/1.1 request with `headers` and a JSON `body`, on its own
/// connection; the status and the JSON answer (`Null` when it is not JSON).
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status: u16 = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {raw:?}"));
    let json = raw
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// `v2` signature headers, dated now, for `body` sent to `path`
/// (`/v1/bots/{bot}/chats/{chat}/messages`, whose bot and chat it names).
pub fn signed(secret: &str, path: &str, body: &str) -> Vec<(&'static str, String)> {
    let ts = now().to_string();
    let parts: Vec<&str> = path.split('/').collect();
    let (bot, chat) = match parts[..] {
        ["", "v1", "bots", bot, "chats", chat, "messages"] => (bot, chat),
        _ => ("", ""),
    };
    vec![
        (
            "X-Vak-Signature",
            vak_gateway::sign_v2(secret, &ts, bot, chat, body.as_bytes()),
        ),
        ("X-Vak-Timestamp", ts),
    ]
}

pub fn secret(env: &Env, bot: &str) -> String {
    env.ok(&["gateway", "secret", bot]).trim().to_owned()
}

fn messages(bot: &str, chat: &str) -> String {
    format!("/v1/bots/{bot}/chats/{chat}/messages")
}

#[test]
fn the_secret_is_made_once_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::fixture("myproj");
    let first = secret(&env, "helpdesk");
    assert_eq!(first.len(), 64);
    assert_eq!(secret(&env, "helpdesk"), first);
    let path = env.home().join(".vak/gateway/secrets/helpdesk");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let out = env.vak(&["gateway", "secret", "../x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn refusals_are_json_and_write_nothing_and_a_signed_delivery_answers_like_deliver() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let served = serve(&env, &[]);
    let addr = &served.addr;
    let body = r#"{"text":"the build is red"}"#;
    let path = messages("helpdesk", "42");

    let (status, answer) = post(addr, &path, &[], body.as_bytes());
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["status"], 401);
    assert!(answer["error"].as_str().unwrap().contains("not signed"));

    let wrong = signed("a different secret that is long enough", &path, body);
    assert_eq!(post(addr, &path, &wrong, body.as_bytes()).0, 401);

    let stale_ts = (now() - 301).to_string();
    let stale = vec![
        (
            "X-Vak-Signature",
            vak_gateway::sign_v2(&key, &stale_ts, "helpdesk", "42", body.as_bytes()),
        ),
        ("X-Vak-Timestamp", stale_ts),
    ];
    assert_eq!(post(addr, &path, &stale, body.as_bytes()).0, 401);

    let big = format!(r#"{{"text":"{}"}}"#, "a".repeat(70 * 1024));
    let (status, answer) = post(addr, &path, &signed(&key, &path, &big), big.as_bytes());
    assert_eq!(status, 413, "{answer}");
    // Chunked, so no length is declared: still told apart from a body cut
    // off, and refused as too large.
    {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        for _ in 0..3 {
            let chunk = "a".repeat(30 * 1024);
            let _ = stream.write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes());
        }
        let _ = stream.write_all(b"0\r\n\r\n");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }

    assert_eq!(
        post(addr, &messages("help..desk", "42"), &[], body.as_bytes()).0,
        400
    );

    let other = r#"{"text":"not on the list"}"#;
    let (status, answer) = post(
        addr,
        &messages("helpdesk", "99"),
        &signed(&key, &messages("helpdesk", "99"), other),
        other.as_bytes(),
    );
    assert_eq!(status, 403, "{answer}");
    let stranger = secret(&env, "stranger");
    let (status, _) = post(
        addr,
        &messages("stranger", "42"),
        &signed(&stranger, &messages("stranger", "42"), other),
        other.as_bytes(),
    );
    assert_eq!(status, 403);

    let bad = r#"{"message":"hi"}"#;
    assert_eq!(
        post(addr, &path, &signed(&key, &path, bad), bad.as_bytes()).0,
        400
    );
    // `text` twice is refused, not read as the last one.
    let twice = r#"{"text":"hi","text":"evil"}"#;
    let (status, answer) = post(addr, &path, &signed(&key, &path, twice), twice.as_bytes());
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("twice"),
        "{answer}"
    );
    // Correctly signed bytes that are not UTF-8, or not JSON at all.
    for raw in [&b"{\"text\":\"\xff\xfe\"}"[..], &b"\x00\x01not json"[..]] {
        let ts = now().to_string();
        let headers = vec![
            (
                "X-Vak-Signature",
                vak_gateway::sign_v2(&key, &ts, "helpdesk", "42", raw),
            ),
            ("X-Vak-Timestamp", ts),
        ];
        let (status, answer) = post(addr, &path, &headers, raw);
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }

    assert!(
        !env.home().join(".vak/sessions").exists(),
        "a refusal wrote a session"
    );
    assert!(!env.home().join(".vak/gateway/bindings.json").exists());
    for claims in ["replay", "claims"] {
        assert!(
            !env.home().join(".vak/gateway").join(claims).exists(),
            "a refusal took no signature"
        );
    }

    let headers = signed(&key, &path, body);
    let (status, answer) = post(addr, &path, &headers, body.as_bytes());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "created");
    let replayed = post(addr, &path, &headers, body.as_bytes());
    assert_eq!(replayed.0, 401, "a replay is refused: {}", replayed.1);
    // The same signature spelled another way (hex in another case) is the
    // same signature, and refused as a replay too.
    let respelled: Vec<(&str, String)> = headers
        .iter()
        .map(|(name, value)| match *name {
            "X-Vak-Signature" => (*name, format!("v2={}", value[3..].to_uppercase())),
            _ => (*name, value.clone()),
        })
        .collect();
    let replayed = post(addr, &path, &respelled, body.as_bytes());
    assert_eq!(
        replayed.0, 401,
        "a respelled replay is refused: {}",
        replayed.1
    );
    // A v2 signature names its bot and chat: delivered where it is
    // addressed, and no use for any other chat, even one it never reached.
    let ts = now().to_string();
    let v2_body = r#"{"text":"v2 hello"}"#;
    let v2 = vec![
        (
            "X-Vak-Signature",
            vak_gateway::sign_v2(&key, &ts, "helpdesk", "42", v2_body.as_bytes()),
        ),
        ("X-Vak-Timestamp", ts),
    ];
    let (status, answer) = post(addr, &messages("helpdesk", "43"), &v2, v2_body.as_bytes());
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("does not match"),
        "{answer}"
    );
    let (status, answer) = post(addr, &path, &v2, v2_body.as_bytes());
    assert_eq!(status, 200, "{answer}");

    let cli = env.json(&[
        "gateway",
        "deliver",
        "--bot",
        "helpdesk",
        "--chat",
        "42",
        "--text",
        "from the cli",
    ]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&answer), keys(&cli));
    assert_eq!(cli["session_id"], answer["session_id"]);
    assert_eq!(cli["outcome"], "continued");
}

fn get(addr: &str, path: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let json = raw
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

#[test]
fn an_edit_while_serving_rotates_the_very_next_delivery() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    // No waiting for timestamps to age: the cache is vak-core's, told of
    // the edit by a change notification.
    let served = serve(&env, &[]);
    let path = messages("helpdesk", "42");
    let send = |text: &str| {
        let body = serde_json::json!({ "text": text }).to_string();
        let (status, answer) = post(
            &served.addr,
            &path,
            &signed(&key, &path, &body),
            body.as_bytes(),
        );
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let first = send("one");
    assert_eq!(send("two")["outcome"], "continued");
    let (status, health) = get(&served.addr, "/healthz");
    assert_eq!(status, 200);
    // Unauthenticated: the store's kind, never the home's path.
    assert_eq!(health["store"], "file", "{health}");
    assert_eq!(health["resolution_cache"]["hits"], 1, "{health}");
    assert_eq!(health["resolution_cache"]["misses"], 1, "{health}");
    let rules = env.home().join(".vak/prompts/guardrails.md");
    let mut text = std::fs::read_to_string(&rules).unwrap();
    text.push_str("\n- Edited while the service runs.\n");
    std::fs::write(&rules, text).unwrap();
    let third = send("three");
    assert_eq!(third["outcome"], "rotated", "{third}");
    assert_eq!(third["previous_session"], first["session_id"]);
    assert_eq!(send("four")["outcome"], "continued");
    let (_, health) = get(&served.addr, "/healthz");
    // "three" missed (the edit), "four" was answered from memory.
    let cache = &health["resolution_cache"];
    assert_eq!(
        (cache["hits"].as_u64(), cache["misses"].as_u64()),
        (Some(2), Some(2)),
        "{health}"
    );
    let events = env.json(&["audit", "list"])["events"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(events, 1);
}

#[test]
fn sigterm_stops_the_service_cleanly() {
    let env = Env::fixture("myproj");
    let mut served = serve(&env, &[]);
    let (status, answer) = post(&served.addr, "/healthz", &[], b"");
    assert_eq!(status, 405, "healthz is GET");
    assert_eq!(answer["status"], 405, "a JSON error: {answer}");
    let (status, answer) = post(&served.addr, "/v1/bots/%FF/chats/1/messages", &[], b"{}");
    assert_eq!(
        (status, answer["status"].clone()),
        (400, serde_json::json!(400))
    );
    let (status, answer) = post(&served.addr, "/nowhere", &[], b"{}");
    assert_eq!(
        (status, answer["status"].clone()),
        (404, serde_json::json!(404))
    );
    let pid = served.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = served.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigterm_finishes_the_delivery_in_flight() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let mut served = serve(&env, &[]);
    // Hold the file store's chat lock, so the delivery below is in flight
    // (waiting for it) when the service is told to stop.
    let lock_path = env.home().join(".vak/gateway/bindings.json.lock");
    std::fs::create_dir_all(lock_path.parent().unwrap()).unwrap();
    let lock = std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .unwrap();
    lock.lock().unwrap();
    let addr = served.addr.clone();
    let in_flight = std::thread::spawn(move || {
        let body = r#"{"text":"delivered while stopping"}"#;
        post(
            &addr,
            &messages("helpdesk", "42"),
            &signed(&key, &messages("helpdesk", "42"), body),
            body.as_bytes(),
        )
    });
    // Wait until the delivery is blocked on that lock:
    // /proc/locks lists a waiter with `->`, by device and inode. A fixed
    // sleep here raced the service on a loaded machine.
    let inode = std::os::unix::fs::MetadataExt::ino(&lock.metadata().unwrap());
    let waiting = |locks: &str| {
        locks
            .lines()
            .any(|l| l.contains("->") && l.contains(&format!(":{inode} ")))
    };
    wait_until("the delivery waiting on the chat lock", || {
        waiting(&std::fs::read_to_string("/proc/locks").unwrap())
    });
    let pid = served.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Stopping closes the listener: wait for that.
    wait_until("the listener closing while stopping", || {
        TcpStream::connect(&served.addr).is_err()
    });
    assert!(
        served.child.try_wait().unwrap().is_none(),
        "the service waits for the delivery in flight"
    );
    lock.unlock().unwrap();
    let (status, answer) = in_flight.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "created");
    let status = served.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let ledger = env.json(&["session", "show", answer["session_id"].as_str().unwrap()]);
    assert_eq!(ledger["records"][0]["message"], "delivered while stopping");
}

#[test]
fn a_request_replayed_to_another_node_is_refused() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let a = serve(&env, &[]);
    let b = serve(&env, &[]);
    let body = r#"{"text":"once only"}"#;
    let path = messages("helpdesk", "42");
    let headers = signed(&key, &path, body);
    assert_eq!(post(&a.addr, &path, &headers, body.as_bytes()).0, 200);
    let (status, answer) = post(&b.addr, &path, &headers, body.as_bytes());
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("replay"));
}

#[test]
fn one_log_line_per_delivery_without_text_or_secret() {
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let log = env.home().join("serve.log");
    let mut child = env
        .command(&["gateway", "serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first.trim().trim_start_matches("http://").to_owned();
    let body = r#"{"text":"a secret plan: hunter2"}"#;
    let (status, answer) = post(
        &addr,
        &messages("helpdesk", "42"),
        &signed(&key, &messages("helpdesk", "42"), body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, _) = post(&addr, &messages("helpdesk", "42"), &[], body.as_bytes());
    assert_eq!(status, 401);
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let deliveries: Vec<&str> = text.lines().filter(|l| l.contains(" delivery ")).collect();
    assert_eq!(deliveries.len(), 2, "{text}");
    let session = answer["session_id"].as_str().unwrap();
    assert!(deliveries[0].contains(r#"bot="helpdesk""#) && deliveries[0].contains(r#"chat="42""#));
    assert!(deliveries[0].contains(r#"outcome="created""#) && deliveries[0].contains(session));
    assert!(deliveries[0].contains("duration_ms="), "{text}");
    assert!(deliveries[1].contains("status=401"), "{text}");
    assert!(
        !text.contains("hunter2") && !text.contains("secret plan"),
        "{text}"
    );
    assert!(!text.contains(&key), "the secret is never logged");
}

#[test]
fn a_request_the_file_store_delivered_is_a_replay_after_store_import() {
    let Some(url) = crate::gateway_scale::pg_url() else {
        return;
    };
    let db = crate::gateway_scale::scratch_database(&url, "importreplay");
    let env = Env::fixture("myproj");
    env.trust();
    let key = secret(&env, "helpdesk");
    let body = r#"{"text":"delivered once"}"#;
    let headers = signed(&key, &messages("helpdesk", "42"), body);
    let served = serve(&env, &[]);
    let (status, answer) = post(
        &served.addr,
        &messages("helpdesk", "42"),
        &headers,
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    drop(served);
    env.ok(&["store", "migrate", "--store", &db]);
    let report = env.json(&["store", "import", "--from", "file", "--store", &db]);
    assert_eq!(report["replay_markers"], 1, "{report}");
    // The same signed request, within its window, to a node on the database.
    let served = serve(&env, &["--store", &db]);
    let (status, answer) = post(
        &served.addr,
        &messages("helpdesk", "42"),
        &headers,
        body.as_bytes(),
    );
    assert_eq!(status, 401, "{answer}");
    let id = answer_session(&env, &db);
    let ledger = env.json(&["session", "show", &id, "--store", &db]);
    let turns = ledger["records"].as_array().expect("records");
    assert_eq!(turns.len(), 1, "{ledger}");
    assert_eq!(turns[0]["message"], "delivered once");
}

/// The one session the database at `db` holds.
fn answer_session(env: &Env, db: &str) -> String {
    let list = env.json(&["session", "list", "--store", db]);
    let sessions = list["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{list}");
    sessions[0]["session_id"].as_str().expect("id").to_owned()
}

/// A database a newer vak migrated (its schema past this build's newest
/// migration) is refused by `store migrate` and `store import`: exit 1,
/// the versions named, nothing written — not even this build's missing
/// migration.
#[test]
fn store_migrate_and_import_refuse_a_schema_newer_than_this_build() {
    use crate::history_store::psql;
    let Some(url) = crate::gateway_scale::pg_url() else {
        return;
    };
    let db = crate::gateway_scale::scratch_database(&url, "newer");
    let env = Env::fixture("myproj");
    env.trust();
    env.ok(&["store", "migrate", "--store", &db]);
    let known: i32 = psql(&db, "SELECT max(version) FROM vak_schema_migrations")
        .parse()
        .unwrap();
    // A newer build's migration, and one of ours it lacks: a migrate that
    // went ahead would apply ours.
    psql(
        &db,
        &format!(
            "INSERT INTO vak_schema_migrations (version, name) VALUES (99, 'future'); DELETE FROM vak_schema_migrations WHERE version = {known}; DROP TABLE vak_settings"
        ),
    );
    let before = psql(
        &db,
        "SELECT string_agg(version::text, ',' ORDER BY version) FROM vak_schema_migrations",
    );
    env.ok(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "hello",
    ]);
    for args in [
        &["store", "migrate", "--store", &db][..],
        &["store", "import", "--from", "file", "--store", &db][..],
    ] {
        let out = env.vak(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("version 99") && said.contains(&format!("version {known}")),
            "{args:?}: {said}"
        );
        assert!(said.contains("nothing was changed"), "{said}");
        assert_eq!(
            psql(
                &db,
                "SELECT string_agg(version::text, ',' ORDER BY version) FROM vak_schema_migrations"
            ),
            before,
            "{args:?} applied nothing"
        );
        assert_eq!(psql(&db, "SELECT count(*) FROM vak_sessions"), "0");
        assert_eq!(
            psql(&db, "SELECT to_regclass('vak_settings') IS NULL"),
            "t",
            "{args:?} created nothing"
        );
    }
}

/// Send `raw` (a request hyper refuses before the router sees it) on its
/// own connection; the status line and the JSON body of the answer.
pub fn raw_exchange(addr: &str, raw: &[u8]) -> (String, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let _ = stream.write_all(raw);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {answer:?}"));
    let status = head.lines().next().unwrap_or_default().to_owned();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{answer:?}"
    );
    (
        status,
        serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {answer:?}")),
    )
}

/// What hyper answers on its own — a head over 64 KiB (431), a request that
/// is not HTTP (400) — is JSON like every other refusal of the service.
#[test]
fn a_head_too_large_or_malformed_is_answered_in_json() {
    let env = Env::fixture("myproj");
    let served = serve(&env, &[]);
    let addr = &served.addr;
    let big = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nX-Padding: {}\r\n\r\n",
        messages("helpdesk", "42"),
        "a".repeat(70 * 1024)
    );
    let (status, answer) = raw_exchange(addr, big.as_bytes());
    assert!(status.starts_with("HTTP/1.1 431"), "{status}");
    assert_eq!(answer["status"], 431, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("64 KiB"),
        "{answer}"
    );

    let (status, answer) = raw_exchange(addr, b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n");
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    assert_eq!(answer["status"], 400, "{answer}");
    assert!(answer["error"].is_string(), "{answer}");
    // The service still answers afterwards.
    assert_eq!(get(addr, "/healthz").0, 200);
}

/// The service keeps each bot's secret in memory (a 401 never waits for
/// the store), and still sees a secret replaced while it runs: a request
/// signed with the new one reads it again (at most once every few seconds
/// per bot), and from then on the old one is refused.
#[test]
fn a_secret_replaced_while_serving_is_seen_and_the_old_one_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::fixture("myproj");
    env.trust();
    let old = secret(&env, "helpdesk");
    let served = serve(&env, &[]);
    let addr = &served.addr;
    let path = messages("helpdesk", "42");
    let body = r#"{"text":"first"}"#;
    let (status, answer) = post(addr, &path, &signed(&old, &path, body), body.as_bytes());
    assert_eq!(status, 200, "{answer}");

    let new = "b".repeat(64);
    let file = env.home().join(".vak/gateway/secrets/helpdesk");
    std::fs::write(&file, &new).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut n = 0;
    wait_until("a request signed with the new secret delivered", || {
        n += 1;
        let body = format!(r#"{{"text":"new {n}"}}"#);
        let (status, answer) = post(addr, &path, &signed(&new, &path, &body), body.as_bytes());
        assert!(status == 200 || status == 401, "{status} {answer}");
        status == 200
    });
    let body = r#"{"text":"old again"}"#;
    let (status, answer) = post(addr, &path, &signed(&old, &path, body), body.as_bytes());
    assert_eq!(status, 401, "{answer}");
}
