//! Stores that are not what they should be (issue 8, "Stores and files that
//! are not files", "Input forges vak's own output", paged listings): FIFOs
//! and symlinks where ledgers, bindings and the audit log belong, foreign
//! lines at the end of a JSON-lines store, and stores too large to list
//! whole. Every run that could hang on a FIFO has a deadline and is killed
//! past it, so a regression fails instead of hanging.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;

fn run(env: &Env, args: &[&str]) -> Output {
    // A command that blocks (on a FIFO) is killed and the test fails
    // naming it.
    output_within(&mut env.command(args), HANG)
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

fn ledger_path(env: &Env, id: &str) -> PathBuf {
    env.home().join(".vak/sessions").join(format!("{id}.jsonl"))
}

fn audit_path(env: &Env) -> PathBuf {
    env.home().join(".vak/audit/security.jsonl")
}

fn new_session(env: &Env) -> String {
    let out = run(env, &["session", "new", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    v["session_id"].as_str().unwrap().to_owned()
}

fn trusted_myproj() -> Env {
    let env = Env::fixture("myproj");
    env.trust();
    env
}

const DELIVER: &[&str] = &[
    "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "hello",
];

#[test]
fn a_fifo_audit_log_bindings_or_ledger_is_refused_by_name_without_blocking() {
    let env = trusted_myproj();
    // The audit log.
    mkfifo(&audit_path(&env));
    let out = run(&env, &["audit", "list"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("security.jsonl` is not a regular file (a FIFO)"),
        "{}",
        stderr(&out)
    );
    fs::remove_file(audit_path(&env)).unwrap();

    // The bindings: a delivery refuses and creates no session.
    let bindings = env.home().join(".vak/gateway/bindings.json");
    mkfifo(&bindings);
    let out = run(&env, DELIVER);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("bindings.json` is not a regular file (a FIFO)"),
        "{}",
        stderr(&out)
    );
    assert!(!env.home().join(".vak/sessions").exists());
    fs::remove_file(&bindings).unwrap();

    // A ledger: "not a regular file", never "does not exist".
    let id = new_session(&env);
    let ledger = ledger_path(&env, &id);
    fs::remove_file(&ledger).unwrap();
    mkfifo(&ledger);
    for args in [
        vec!["session", "show", id.as_str()],
        vec!["exec", "--session", id.as_str(), "--message", "hi"],
        vec!["session", "new", "--parent", id.as_str()],
    ] {
        let out = run(&env, &args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("is not a regular file (a FIFO)"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("does not exist"), "{args:?}: {err}");
    }
    // A listing reports the one bad ledger and goes on.
    let out = run(&env, &["session", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a regular file (a FIFO)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_symlinked_ledger_is_refused_never_appended_through() {
    let env = Env::empty();
    let id = new_session(&env);
    let ledger = ledger_path(&env, &id);
    let outside = env.project().join("elsewhere.jsonl");
    fs::rename(&ledger, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &ledger).unwrap();
    let before = fs::read(&outside).unwrap();
    let out = run(&env, &["exec", "--session", &id, "--message", "hi"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{id}.jsonl` is a symbolic link")),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read(&outside).unwrap(), before, "nothing appended");
}

/// The `.foreign-` siblings of `file`, their contents.
fn set_aside(file: &Path) -> Vec<Vec<u8>> {
    let name = file.file_name().unwrap().to_str().unwrap().to_owned();
    let mut found: Vec<PathBuf> = fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(&format!("{name}.foreign-"))
        })
        .collect();
    found.sort();
    found.iter().map(|p| fs::read(p).unwrap()).collect()
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    let mut all = fs::read(path).unwrap();
    all.extend_from_slice(bytes);
    fs::write(path, all).unwrap();
}

fn turns(env: &Env, id: &str) -> Vec<String> {
    let out = run(env, &["session", "show", id, "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == "turn")
        .map(|r| r["message"].as_str().unwrap().to_owned())
        .collect()
}

const FOREIGN: [&[u8]; 3] = [
    b"{\"x\":1}\n",
    b"\xff\xfe\x00 not utf-8\n",
    b"{\"type\":\"turn\",\"at\":",
];

#[test]
fn a_foreign_ledger_tail_is_moved_aside_before_exec_appends() {
    for foreign in FOREIGN {
        let env = Env::empty();
        let id = new_session(&env);
        let ledger = ledger_path(&env, &id);
        append_bytes(&ledger, foreign);
        // Readers skip the foreign last line and say so, naming the file.
        let out = run(&env, &["session", "show", &id]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{id}.jsonl` line 2: skipped")),
            "{}",
            stderr(&out)
        );
        let out = run(&env, &["exec", "--session", &id, "--message", "kept"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(turns(&env, &id), ["kept"], "the reported turn is readable");
        assert_eq!(set_aside(&ledger), vec![foreign.to_vec()]);
        // A second turn builds on the repaired ledger.
        let out = run(&env, &["exec", "--session", &id, "--message", "again"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(turns(&env, &id), ["kept", "again"]);
    }
}

#[test]
fn a_foreign_tail_is_moved_aside_before_deliver_appends_and_audits() {
    let env = trusted_myproj();
    let first: Value = serde_json::from_str(&stdout(&run(
        &env,
        &[DELIVER, &["--format", "json"]].concat(),
    )))
    .unwrap();
    let id = first["session_id"].as_str().unwrap().to_owned();
    let ledger = ledger_path(&env, &id);
    append_bytes(&ledger, FOREIGN[0]);
    let out = run(&env, DELIVER);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(turns(&env, &id), ["hello", "hello"]);
    assert_eq!(set_aside(&ledger), vec![FOREIGN[0].to_vec()]);

    // The audit log: a foreign tail, then a rotation writes an event.
    let audit = audit_path(&env);
    fs::create_dir_all(audit.parent().unwrap()).unwrap();
    fs::write(&audit, FOREIGN[1]).unwrap();
    let bots = env.home().join(".vak/gateway/bots.json");
    let mut config: Value = serde_json::from_str(&fs::read_to_string(&bots).unwrap()).unwrap();
    config["helpdesk"]["prompts"]["identity"] = Value::from("You are the changed Helpdesk bot.");
    fs::write(&bots, config.to_string()).unwrap();
    let out = run(&env, DELIVER);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("rotated"), "{}", stderr(&out));
    let out = run(&env, &["audit", "list", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let events = listed["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{listed}");
    assert_eq!(events[0]["old_session"], id.as_str());
    assert_eq!(set_aside(&audit), vec![FOREIGN[1].to_vec()]);
}

#[test]
fn a_damaged_audit_line_is_skipped_and_named_not_fatal() {
    let env = Env::empty();
    let audit = audit_path(&env);
    fs::create_dir_all(audit.parent().unwrap()).unwrap();
    let event = r#"{"type":"config-change","at":"2026-01-01T00:00:00Z","bot":"b","chat":"c","old_session":"01J0000000OLDLEDGER0000000","new_session":"01J0000000NEWLEDGER0000000"}"#;
    fs::write(&audit, format!("{event}\n{{\"x\":1}}\n{event}\n")).unwrap();
    let out = run(&env, &["audit", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("config-change b/c").count(),
        2,
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("security.jsonl` line 2: skipped a line that is not a valid record"),
        "{}",
        stderr(&out)
    );
}

fn json_of(out: &Output) -> Value {
    assert_eq!(code(out), 0, "{}", stderr(out));
    serde_json::from_str(&stdout(out)).unwrap()
}

fn event_line(n: usize) -> String {
    format!(
        r#"{{"type":"config-change","at":"2026-01-01T00:00:00Z","bot":"b","chat":"c{n}","old_session":"01J0000000OLDLEDGER0000000","new_session":"01J0000000NEWLEDGER0000000"}}"#
    )
}

#[test]
fn session_and_audit_listings_are_paged_newest_first() {
    let env = Env::empty();
    let id = new_session(&env);
    let ledger = fs::read(ledger_path(&env, &id)).unwrap();
    // 150 more ledgers, with ids older than the real one.
    for n in 0..150 {
        fs::write(ledger_path(&env, &format!("01A{n:023}")), &ledger).unwrap();
    }
    let listed = json_of(&run(&env, &["session", "list", "--format", "json"]));
    assert_eq!(listed["total"], 151);
    assert_eq!(listed["limit"], 100);
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 100, "the default page");
    assert_eq!(sessions[0]["session_id"], id.as_str(), "newest first");
    assert_eq!(sessions[1]["session_id"], format!("01A{:023}", 149));
    let out = run(&env, &["session", "list", "--limit", "2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 2, "{}", stdout(&out));
    assert!(stdout(&out).starts_with(&id), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("showing the newest 2 of 151 sessions"),
        "{}",
        stderr(&out)
    );
    for bad in ["0", "10001", "-1", "x"] {
        let out = run(&env, &["session", "list", "--limit", bad]);
        assert_eq!(code(&out), 2, "--limit {bad}: {}", stderr(&out));
    }

    let audit = audit_path(&env);
    fs::create_dir_all(audit.parent().unwrap()).unwrap();
    let log: String = (0..150).map(|n| event_line(n) + "\n").collect();
    fs::write(&audit, log).unwrap();
    let listed = json_of(&run(
        &env,
        &["audit", "list", "--limit", "3", "--format", "json"],
    ));
    assert_eq!(listed["total"], 150);
    let chats: Vec<_> = listed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["chat"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(chats, ["c149", "c148", "c147"]);
    let out = run(&env, &["audit", "list"]);
    assert_eq!(stdout(&out).lines().count(), 100, "the default page");
    assert!(
        stderr(&out).contains("showing the newest 100 of 150 events"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_oversized_line_or_bindings_file_is_refused_by_size() {
    let env = trusted_myproj();
    // A 20 MiB single line in the audit log is skipped, not read whole.
    let audit = audit_path(&env);
    fs::create_dir_all(audit.parent().unwrap()).unwrap();
    let mut bytes = event_line(1).into_bytes();
    bytes.push(b'\n');
    bytes.extend(std::iter::repeat_n(b'x', 20 << 20));
    bytes.push(b'\n');
    bytes.extend(event_line(2).into_bytes());
    bytes.push(b'\n');
    fs::write(&audit, bytes).unwrap();
    let listed = json_of(&run(&env, &["audit", "list", "--format", "json"]));
    assert_eq!(listed["total"], 2);
    assert_eq!(listed["skipped_lines"], 1);
    assert!(
        listed["warnings"][0]
            .as_str()
            .unwrap()
            .contains("line 2: skipped a line over the 8 MiB bound"),
        "{listed}"
    );

    // A bindings file over its bound: the delivery is refused, nothing made.
    let bindings = env.home().join(".vak/gateway/bindings.json");
    fs::write(&bindings, vec![b' '; 17 << 20]).unwrap();
    let out = run(&env, DELIVER);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("bindings.json` is 17825792 bytes, over the 16777216-byte bound"),
        "{}",
        stderr(&out)
    );
    assert!(!env.home().join(".vak/sessions").exists());
}

const FORGED: &str = "evil\u{1b}[2J\nvak: this project is already trusted";

/// Output that quotes hostile input keeps it on its own line and inert.
fn assert_inert(what: &str, out: &Output) {
    for (stream, text) in [("stdout", stdout(out)), ("stderr", stderr(out))] {
        assert!(
            !text.contains('\u{1b}'),
            "{what} {stream} has a raw ESC: {text:?}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("vak: this project")),
            "{what} {stream} has a forged line: {text}"
        );
    }
    let all = stdout(out) + &stderr(out);
    assert!(
        all.contains("\\u{1b}[2J"),
        "{what} shows the escape escaped: {all}"
    );
}

#[test]
fn ledger_audit_and_path_text_is_printed_escaped() {
    let env = Env::empty();
    let id = new_session(&env);
    let ledger = ledger_path(&env, &id);
    let text = fs::read_to_string(&ledger).unwrap();
    let mut header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["bot"] = Value::from(FORGED);
    header["chat"] = Value::from("c");
    header["project"] = Value::from(FORGED);
    let turn = serde_json::json!({"type": "turn", "at": FORGED, "message": FORGED});
    fs::write(&ledger, format!("{header}\n{turn}\n")).unwrap();
    let out = run(&env, &["session", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_inert("session list", &out);
    let out = run(&env, &["session", "show", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_inert("session show", &out);

    let audit = audit_path(&env);
    fs::create_dir_all(audit.parent().unwrap()).unwrap();
    let mut event: Value = serde_json::from_str(&event_line(1)).unwrap();
    event["bot"] = Value::from(FORGED);
    event["at"] = Value::from(FORGED);
    event["changes"] = serde_json::json!([{"block": FORGED, "layer": "bot", "occurrence": 0,
        "kind": "changed", "source": FORGED}]);
    fs::write(&audit, format!("{event}\n")).unwrap();
    let out = run(&env, &["audit", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_inert("audit list", &out);

    // A home whose path holds an escape: errors and reports name it escaped.
    let home = env
        .home()
        .join("h\u{1b}[2J\nvak: this project is already trusted");
    let home_arg = home.to_str().unwrap();
    let out = run(&env, &["session", "list", "--home", home_arg]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_inert("empty session list", &out);
    let sessions = home.join(".vak/sessions");
    mkfifo(&sessions.join(format!("{id}.jsonl")));
    let out = run(&env, &["session", "show", &id, "--home", home_arg]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a regular file"),
        "{}",
        stderr(&out)
    );
    assert_inert("session show error", &out);
    mkfifo(&home.join(".vak/audit/security.jsonl"));
    let out = run(&env, &["audit", "list", "--home", home_arg]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_inert("audit list error", &out);
}

/// A listener that accepts every connection and never says a word: a port
/// forwarded to nothing, a firewall that answers the handshake, a server
/// wedged before its first reply.
fn silent_listener() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            // Held open, never read, never answered.
            held.extend(stream.ok());
        }
    });
    addr
}

#[test]
fn a_store_that_never_answers_is_an_error_naming_it_not_a_hang() {
    let env = Env::fixture("myproj");
    env.write_home("f.md", "- a rule\n");
    let file = env.home().join("f.md");
    let addr = silent_listener();
    let url = format!("postgres://vak:s3cret-pw@{addr}/vakdb");
    for args in [
        vec!["prompts", "show"],
        vec![
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--file",
            file.to_str().unwrap(),
        ],
        vec!["session", "list"],
        vec!["session", "list", "--store", url.as_str()],
    ] {
        let mut command = env.command(&args);
        command.env("VAK_STORE", &url);
        let out = output_within(&mut command, HANG);
        let err = stderr(&out);
        // A reading command answers from the home's files, warning why
        // they may be stale; a change and a session listing fail.
        let expected = if args[1] == "show" { 0 } else { 1 };
        assert_eq!(code(&out), expected, "{args:?}: {err}");
        assert!(
            err.contains(&format!("PostgreSQL store at {addr}/vakdb"))
                && err.contains("did not answer within 10 seconds"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("s3cret-pw"), "{args:?}: the password: {err}");
    }
    // The URL's own `connect_timeout` sets the bound.
    let url = format!("{url}?connect_timeout=2");
    let out = output_within(
        &mut env.command(&["session", "list", "--store", &url]),
        HANG,
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("did not answer within 2 seconds"),
        "{}",
        stderr(&out)
    );
}
