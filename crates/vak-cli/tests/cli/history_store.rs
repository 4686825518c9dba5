//! The prompt history behind the store handle on the real
//! binary: with `--store postgres://…` every kept text and version record
//! goes to the database and nothing to the home; a row altered in the
//! database is refused; a gateway key's versions are listed; a session
//! whose winning layer moved diffs as one change.

use std::fs;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::{Env, stderr, stdout};
use crate::gateway_scale::{pg_url, scratch_database};

fn code(out: &std::process::Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// A migrated scratch database, or `None` (skipped) without a server.
fn database(tag: &str) -> Option<(Env, String)> {
    let url = pg_url()?;
    let db = scratch_database(&url, tag);
    let env = Env::empty();
    assert!(
        env.ok(&["store", "migrate", "--store", &db])
            .contains("applied migration 1, 2, 3")
    );
    Some((env, db))
}

pub fn psql(db: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([db, "-qAtc", sql])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().to_owned()
}

fn set(env: &Env, db: &str, block: &str, text: &str) -> String {
    let out = env.vak_stdin(
        &[
            "prompts", "set", "--scope", "project", block, "-", "--store", db,
        ],
        text,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .split("sha256 ")
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .unwrap()
        .to_owned()
}

fn nothing_kept_in_the_home(env: &Env) {
    for dir in [".vak/objects", ".vak/history"] {
        assert!(
            !env.home().join(dir).exists(),
            "{dir} was written to the home"
        );
    }
}

#[test]
fn save_log_diff_and_revert_go_through_a_postgres_store() {
    let Some((env, db)) = database("hist") else {
        return;
    };
    env.trust();
    env.write_project(".vak/prompts/guardrails.md", "- written by hand\n");
    let first = set(&env, &db, "guardrails", "- never push to main\n");
    let second = set(
        &env,
        &db,
        "guardrails",
        "- never push to main\n- ask first\n",
    );

    let log = env.json(&[
        "prompts",
        "log",
        "--scope",
        "project",
        "guardrails",
        "--store",
        &db,
    ]);
    let versions = log["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{log}");
    assert_eq!(versions[0]["after"], first.as_str());
    assert_eq!(versions[1]["before"], first.as_str());
    assert_eq!(versions[1]["after"], second.as_str());
    assert!(versions[1]["tokens"].as_u64().unwrap() > 0);
    // The versions are in the database, not in the home: the file store
    // has none.
    let file_log = env.json(&["prompts", "log", "--scope", "project", "guardrails"]);
    assert_eq!(file_log["versions"], json!([]));
    nothing_kept_in_the_home(&env);
    assert_eq!(
        psql(&db, "SELECT count(*) FROM vak_versions"),
        "2",
        "one row per change"
    );

    // The default diff is the last change; the hand-written text before the
    // first save was kept in the database too.
    let diff = env.ok(&[
        "prompts",
        "diff",
        "--scope",
        "project",
        "guardrails",
        "--store",
        &db,
    ]);
    assert!(diff.contains("\n+- ask first\n"), "{diff}");
    let before = versions[0]["before"].as_str().unwrap();
    let diff = env.json(&[
        "prompts",
        "diff",
        "--scope",
        "project",
        "guardrails",
        "--from",
        before,
        "--to",
        &second,
        "--store",
        &db,
    ]);
    assert!(
        diff["diff"]
            .as_str()
            .unwrap()
            .contains("-- written by hand"),
        "{diff}"
    );

    // Revert by a prefix, read from the database, through the save path.
    let out = env.vak(&[
        "prompts",
        "revert",
        "--scope",
        "project",
        "guardrails",
        "--to",
        &first[..10],
        "--store",
        &db,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let path = env.project().join(".vak/prompts/guardrails.md");
    assert_eq!(fs::read_to_string(&path).unwrap(), "- never push to main\n");
    let log = env.json(&[
        "prompts",
        "log",
        "--scope",
        "project",
        "guardrails",
        "--store",
        &db,
    ]);
    assert_eq!(log["versions"][2]["action"], "revert");
    assert_eq!(log["versions"][2]["after"], first.as_str());
    nothing_kept_in_the_home(&env);

    // VAK_STORE chooses the same store.
    let out = env
        .command(&["prompts", "log", "--scope", "project", "guardrails"])
        .env("VAK_STORE", &db)
        .output()
        .unwrap();
    assert!(stdout(&out).contains(&second), "{}", stdout(&out));

    // A row altered in the database is refused by name, never served.
    psql(
        &db,
        &format!(
            "UPDATE vak_objects SET content = convert_to('- tampered', 'UTF8') WHERE digest = '{second}'"
        ),
    );
    let out = env.vak(&[
        "prompts",
        "diff",
        "--scope",
        "project",
        "guardrails",
        "--from",
        &first,
        "--to",
        &second,
        "--store",
        &db,
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains(&second) && message.contains("altered"),
        "{message}"
    );
    assert!(message.contains("PostgreSQL store"), "{message}");
    assert!(!stdout(&out).contains("tampered"));
    let out = env.vak(&[
        "prompts",
        "revert",
        "--scope",
        "project",
        "guardrails",
        "--to",
        &second,
        "--store",
        &db,
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "- never push to main\n",
        "an altered text is never saved back"
    );
}

#[test]
fn a_digest_the_database_never_kept_says_text_not_kept() {
    let Some((env, db)) = database("notkept") else {
        return;
    };
    env.trust();
    set(&env, &db, "guardrails", "- one\n");
    let never = "ab".repeat(32);
    let out = env.vak(&[
        "prompts",
        "diff",
        "--scope",
        "project",
        "guardrails",
        "--from",
        &never,
        "--to",
        &never,
        "--store",
        &db,
    ]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(&format!("text not kept: no object {never}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn session_diff_of_a_postgres_session_reads_its_texts_from_postgres() {
    let Some((env, db)) = database("sdiff") else {
        return;
    };
    env.trust();
    set(&env, &db, "guardrails", "- one\n");
    let session = env.json(&["session", "new", "--store", &db]);
    let id = session["session_id"].as_str().unwrap().to_owned();
    set(&env, &db, "guardrails", "- one\n- two\n");
    let diff = env.json(&["session", "diff", &id, "--store", &db]);
    let changes = diff["changes"].as_array().unwrap();
    let guardrails: Vec<_> = changes
        .iter()
        .filter(|c| c["block"] == "guardrails" && c["layer"] == "project")
        .collect();
    assert_eq!(guardrails.len(), 1, "{diff}");
    assert_eq!(guardrails[0]["kind"], "changed");
    assert_eq!(guardrails[0]["error"], Value::Null, "{diff}");
    assert!(
        guardrails[0]["diff"].as_str().unwrap().contains("+- two"),
        "{diff}"
    );
    nothing_kept_in_the_home(&env);
    assert!(!env.home().join(".vak/sessions").exists());
}

#[test]
fn session_diff_shows_a_winner_that_moved_layer_as_one_change() {
    let env = Env::empty();
    env.trust();
    env.write_home(
        ".vak/prompts/identity.md",
        "You are the shared assistant.\n",
    );
    let session = env.json(&["session", "new"]);
    let id = session["session_id"].as_str().unwrap().to_owned();
    // Now the project's identity wins over the shared one the session froze.
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "project", "identity", "-"],
        "You are the project's assistant.\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let diff = env.json(&["session", "diff", &id]);
    let identity: Vec<_> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["block"] == "identity")
        .collect();
    assert_eq!(identity.len(), 1, "one change of the block: {diff}");
    let change = identity[0];
    assert_eq!(change["kind"], "moved");
    assert_eq!(change["frozen_layer"], "shared");
    assert_eq!(change["layer"], "project");
    assert!(
        change["frozen_source"]
            .as_str()
            .unwrap()
            .ends_with(".vak/prompts/identity.md")
    );
    assert_ne!(change["frozen_source"], change["source"]);
    let text = change["diff"].as_str().unwrap();
    assert!(
        text.contains("-You are the shared assistant.")
            && text.contains("+You are the project's assistant."),
        "{text}"
    );
    let words = env.ok(&["session", "diff", &id]);
    assert!(
        words.contains("`identity` moved from shared (") && words.contains(") to project ("),
        "{words}"
    );
}

/// `vak admin serve` on a free port; its address and token.
pub(crate) struct Admin {
    child: std::process::Child,
    /// Kept open: the server prints more lines, and a closed pipe would
    /// end it.
    _stdout: BufReader<std::process::ChildStdout>,
    addr: String,
    token: String,
}

impl Drop for Admin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Admin {
    pub(crate) fn start(env: &Env, store: &str) -> Admin {
        Admin::start_with(env, store, &[])
    }

    /// [`Admin::start`] with more environment variables set.
    pub(crate) fn start_with(env: &Env, store: &str, vars: &[(&str, &std::path::Path)]) -> Admin {
        let token = "a-test-token-that-is-long-enough".to_owned();
        let mut child = env
            .command(&[
                "admin",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--store",
                store,
            ])
            .envs(vars.iter().copied())
            .env("VAK_ADMIN_TOKEN", &token)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        Admin {
            child,
            _stdout: stdout,
            addr,
            token,
        }
    }

    pub(crate) fn send(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            self.token,
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let text = String::from_utf8_lossy(&response).into_owned();
        let status: u16 = text[9..12].parse().unwrap();
        let (_, rest) = text.split_once("\r\n\r\n").unwrap();
        // Chunked or not: the JSON object is between the first `{` and the
        // last `}`.
        let json = match (rest.find('{'), rest.rfind('}')) {
            (Some(a), Some(b)) => serde_json::from_str(&rest[a..=b]).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        (status, json)
    }
}

#[test]
fn a_gateway_keys_versions_are_listed_by_log_from_the_store_the_admin_wrote() {
    let Some((_, db)) = database("gwkey") else {
        return;
    };
    let env = Env::fixture("myproj");
    env.trust();
    let bots = env.home().join(".vak/gateway/bots.json");
    let original: Value = serde_json::from_str(&fs::read_to_string(&bots).unwrap()).unwrap();
    let old = original["helpdesk"]["prompts"]["identity"]
        .as_str()
        .unwrap()
        .to_owned();
    let admin = Admin::start(&env, &db);
    let new = "You are the Helpdesk bot. Be brief.";
    let (status, saved) = admin.send(
        "PUT",
        "/api/gateway/bots/helpdesk/identity",
        Some(&json!({"text": new, "if_digest": sha(&old)})),
    );
    assert_eq!(status, 200, "{saved}");
    let (status, history) = admin.send("GET", "/api/gateway/bots/helpdesk/identity/history", None);
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["key"], "bots.json#/helpdesk/prompts/identity");
    assert_eq!(history["versions"].as_array().unwrap().len(), 1);
    assert_eq!(history["current_digest"], sha(new));

    // The CLI lists the key's versions from the same store.
    let log = env.json(&[
        "prompts", "log", "--scope", "bot", "--bot", "helpdesk", "identity", "--store", &db,
    ]);
    assert_eq!(log["target"], "bots.json#/helpdesk/prompts/identity");
    let versions = log["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1, "{log}");
    assert_eq!(versions[0]["before"], sha(&old));
    assert_eq!(versions[0]["after"], sha(new));
    assert!(
        versions[0]["who"]
            .as_str()
            .unwrap()
            .starts_with("admin-token:")
    );
    let diff = env.ok(&[
        "prompts", "diff", "--scope", "bot", "--bot", "helpdesk", "identity", "--store", &db,
    ]);
    assert!(
        diff.contains("+You are the Helpdesk bot. Be brief."),
        "{diff}"
    );
    nothing_kept_in_the_home(&env);

    // Revert through the admin API: the key's old value comes back from
    // the database and the revert is a version of its own.
    let (status, reverted) = admin.send(
        "POST",
        "/api/gateway/bots/helpdesk/identity/history/revert",
        Some(&json!({"to": sha(&old), "if_digest": sha(new)})),
    );
    assert_eq!(status, 200, "{reverted}");
    let now: Value = serde_json::from_str(&fs::read_to_string(&bots).unwrap()).unwrap();
    assert_eq!(now["helpdesk"]["prompts"]["identity"], old.as_str());
    let log = env.json(&[
        "prompts", "log", "--scope", "bot", "--bot", "helpdesk", "identity", "--store", &db,
    ]);
    assert_eq!(log["versions"][1]["action"], "revert");

    // A chat's key, and a hostile or missing name, are usage errors.
    let out = env.vak(&[
        "prompts", "log", "--scope", "chat", "--bot", "helpdesk", "identity",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = env.vak(&[
        "prompts", "log", "--scope", "bot", "--bot", "../etc", "identity",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let chat = env.json(&[
        "prompts", "log", "--scope", "chat", "--bot", "helpdesk", "--chat", "42", "identity",
        "--store", &db,
    ]);
    assert_eq!(
        chat["target"],
        "allowlist.json#/helpdesk/42/prompts/identity"
    );
    assert_eq!(chat["versions"], json!([]));
}

/// sha256 of `text`, hex, by `sha256sum` (the test does not re-implement it).
fn sha(text: &str) -> String {
    let mut child = std::process::Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

#[test]
fn store_import_copies_the_kept_texts_and_the_version_log_and_verifies_them() {
    let Some((env, db)) = database("himport") else {
        return;
    };
    env.trust();
    let set_file = |text: &str| {
        let out = env.vak_stdin(
            &["prompts", "set", "--scope", "project", "guardrails", "-"],
            text,
        );
        assert!(out.status.success(), "{}", stderr(&out));
    };
    set_file("- one\n");
    set_file("- one\n- two\n");
    let objects = fs::read_dir(env.home().join(".vak/objects"))
        .unwrap()
        .count();
    assert!(objects >= 2);
    // One object altered on disk: reported by digest, not copied.
    let second = sha("- one\n- two\n");
    let path = env.home().join(".vak/objects").join(&second);
    fs::remove_file(&path).unwrap();
    fs::write(&path, "- tampered\n").unwrap();

    let out = env.vak(&[
        "store", "import", "--from", "file", "--store", &db, "--format", "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["versions"], 2, "{report}");
    assert_eq!(report["objects"], objects - 1, "{report}");
    assert_eq!(report["objects_refused"].as_array().unwrap().len(), 1);
    assert!(stderr(&out).contains(&second), "{}", stderr(&out));
    assert_eq!(psql(&db, "SELECT count(*) FROM vak_versions"), "2");
    assert_eq!(
        psql(
            &db,
            &format!("SELECT count(*) FROM vak_objects WHERE digest = '{second}'")
        ),
        "0",
        "an altered object is never copied"
    );
    // The log reads the same from the database as from the files.
    let from_files = env.json(&["prompts", "log", "--scope", "project", "guardrails"]);
    let from_db = env.json(&[
        "prompts",
        "log",
        "--scope",
        "project",
        "guardrails",
        "--store",
        &db,
    ]);
    assert_eq!(from_files["versions"], from_db["versions"]);
    // Importing again copies no version twice.
    let again = env.json(&["store", "import", "--from", "file", "--store", &db]);
    assert_eq!(again["versions"], 0, "{again}");
    assert_eq!(psql(&db, "SELECT count(*) FROM vak_versions"), "2");
    // An import killed half-way (the last record missing) is finished by
    // the next one.
    psql(
        &db,
        "DELETE FROM vak_versions WHERE seq = (SELECT max(seq) FROM vak_versions)",
    );
    let finished = env.json(&["store", "import", "--from", "file", "--store", &db]);
    assert_eq!(finished["versions"], 1, "{finished}");
    let from_db = env.json(&[
        "prompts",
        "log",
        "--scope",
        "project",
        "guardrails",
        "--store",
        &db,
    ]);
    assert_eq!(from_files["versions"], from_db["versions"]);
    // A database holding other versions is refused, naming why.
    psql(
        &db,
        "DELETE FROM vak_versions WHERE seq = (SELECT min(seq) FROM vak_versions)",
    );
    let out = env.vak(&["store", "import", "--from", "file", "--store", &db]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("version records"), "{}", stderr(&out));
}

#[test]
fn a_delivery_keeps_its_texts_in_postgres_even_on_a_one_connection_pool() {
    let Some((_, db)) = database("deliver") else {
        return;
    };
    let env = Env::fixture("myproj");
    env.trust();
    // One connection: a delivery that kept its texts while holding the
    // chat's transaction would wait for a second connection forever.
    let store = format!("{db}?vak_pool=1");
    let deliver = |text: &str| {
        let mut command = env.command(&[
            "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", text, "--store",
            &store, "--format", "json",
        ]);
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success());
                break;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "the delivery hung"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let first = deliver("hello");
    assert_eq!(first["outcome"], "created", "{first}");
    env.write_home(".vak/prompts/guardrails.md", "- Changed by the operator.\n");
    let second = deliver("again");
    assert_eq!(second["outcome"], "rotated", "{second}");
    nothing_kept_in_the_home(&env);
    // Both sessions' frozen texts resolve from the database.
    for session in [&first, &second] {
        let id = session["session_id"].as_str().unwrap();
        let diff = env.json(&["session", "diff", id, "--store", &db]);
        for change in diff["changes"].as_array().unwrap() {
            assert_eq!(change["error"], Value::Null, "{diff}");
        }
    }
    let diff = env.json(&[
        "session",
        "diff",
        first["session_id"].as_str().unwrap(),
        "--store",
        &db,
    ]);
    assert!(
        diff["changes"]
            .to_string()
            .contains("Changed by the operator."),
        "{diff}"
    );
}

#[test]
fn a_gateway_key_saved_through_the_admin_refuses_what_a_layer_save_refuses() {
    let env = Env::fixture("myproj");
    let bots = env.home().join(".vak/gateway/bots.json");
    let before = fs::read(&bots).unwrap();
    let original: Value = serde_json::from_slice(&before).unwrap();
    let old = original["helpdesk"]["prompts"]["identity"]
        .as_str()
        .unwrap()
        .to_owned();
    let admin = Admin::start(&env, "file");
    for hostile in [
        "evil \u{1b}]0;x\u{7}",
        "note\r\n## Guardrails",
        "x\u{85}y",
        "a\u{202e}b",
        "zero\u{200b}width",
        "tag\u{e0041}",
    ] {
        let (status, answer) = admin.send(
            "PUT",
            "/api/gateway/bots/helpdesk/identity",
            Some(&json!({"text": hostile, "if_digest": sha(&old)})),
        );
        assert_eq!(status, 400, "{hostile:?}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("U+"), "{answer}");
    }
    // Nothing written, nothing recorded.
    assert_eq!(fs::read(&bots).unwrap(), before);
    let (status, history) = admin.send("GET", "/api/gateway/bots/helpdesk/identity/history", None);
    assert_eq!(status, 200, "{history}");
    assert_eq!(
        history["versions"].as_array().unwrap().len(),
        0,
        "{history}"
    );
}

#[test]
fn home_side_versions_saved_with_the_file_store_are_found_through_the_store_after_an_import() {
    let Some((env, db)) = database("homever") else {
        return;
    };
    let home = env.home().canonicalize().unwrap();
    let set_home = |args: &[&str], text: &str| {
        let mut all = vec!["prompts", "set", "--scope", "shared"];
        all.extend(args);
        all.push("-");
        let out = env.vak_stdin(&all, text);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // Two edits of a home-side file with the file store, and one of a
    // surface sub-layer's.
    set_home(&["guardrails"], "- one\n");
    set_home(&["guardrails"], "- one\n- two\n");
    set_home(&["--surface", "chat", "guardrails"], "- in chat\n");
    let log = |args: &[&str]| {
        let mut all = vec!["prompts", "log", "--scope", "shared"];
        all.extend(args);
        env.json(&all)
    };
    let from_files = log(&["guardrails"]);
    assert_eq!(
        from_files["target"],
        home.join(".vak/prompts/guardrails.md").to_str().unwrap()
    );
    let first = from_files["versions"][0]["after"]
        .as_str()
        .unwrap()
        .to_owned();

    let report = env.json(&["store", "import", "--from", "file", "--store", &db]);
    assert_eq!(report["versions"], 3, "{report}");
    assert_eq!(report["versions_under_old_keys"], 0, "{report}");
    assert_eq!(
        psql(
            &db,
            "SELECT count(*) FROM vak_versions WHERE target LIKE '/%'"
        ),
        "0",
        "no home-side record is keyed by this home's path"
    );

    // `log` through the store lists the same versions, under the name the
    // store's own saves give the file.
    for (args, rel) in [
        (&["guardrails"][..], ".vak/prompts/guardrails.md"),
        (
            &["--surface", "chat", "guardrails"][..],
            ".vak/prompts/surface/chat/guardrails.md",
        ),
    ] {
        let mut with_store = args.to_vec();
        with_store.extend(["--store", &db]);
        let (files, db_log) = (log(args), log(&with_store));
        assert_eq!(db_log["target"], format!("$VAK_HOME/{rel}"), "{db_log}");
        let versions = db_log["versions"].as_array().unwrap();
        assert!(!versions.is_empty(), "{db_log}");
        for (ours, theirs) in versions.iter().zip(files["versions"].as_array().unwrap()) {
            for field in ["time", "who", "action", "before", "after", "tokens"] {
                assert_eq!(ours[field], theirs[field], "{field}: {db_log}");
            }
        }
    }
    // Importing again copies nothing twice: the renamed records are the
    // file log's.
    let again = env.json(&["store", "import", "--from", "file", "--store", &db]);
    assert_eq!(again["versions"], 0, "{again}");

    // `diff` through the store: the last change, from the store's texts.
    let diff = env.ok(&[
        "prompts",
        "diff",
        "--scope",
        "shared",
        "guardrails",
        "--store",
        &db,
    ]);
    assert!(diff.contains("\n+- two\n"), "{diff}");

    // `revert` through the store finds the first version and saves it back.
    let out = env.vak(&[
        "prompts",
        "revert",
        "--scope",
        "shared",
        "guardrails",
        "--to",
        &first,
        "--store",
        &db,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(env.home().join(".vak/prompts/guardrails.md")).unwrap(),
        "- one\n"
    );
    let after = log(&["guardrails", "--store", &db]);
    let versions = after["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3, "{after}");
    assert_eq!(versions[2]["action"], "revert");
    assert_eq!(versions[2]["after"], first.as_str());
}

#[test]
fn records_an_earlier_import_left_under_the_files_path_are_kept_and_said() {
    let Some((env, db)) = database("oldkeys") else {
        return;
    };
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "shared", "guardrails", "-"],
        "- one\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    env.json(&["store", "import", "--from", "file", "--store", &db]);
    // As a build before home-relative names copied it: under the path.
    let path = env
        .home()
        .canonicalize()
        .unwrap()
        .join(".vak/prompts/guardrails.md");
    let path = path.to_str().unwrap();
    psql(
        &db,
        &format!(
            "UPDATE vak_versions SET target = '{path}', record = replace(record, '$VAK_HOME/.vak/prompts/guardrails.md', '{path}')"
        ),
    );
    let out = env.vak(&[
        "store", "import", "--from", "file", "--store", &db, "--format", "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["versions"], 0, "{report}");
    assert_eq!(report["versions_under_old_keys"], 1, "{report}");
    assert!(
        stderr(&out).contains("stay under the file's path"),
        "{}",
        stderr(&out)
    );
}
