//! Hostile inputs against the managed layer and imports, each found by
//! trying to break them on the real binary: a careless administrator's
//! config typo, a byte-order mark before an import line, a budget refusal
//! that sent a user to the administrator's file, and a gateway delivery
//! that answered a refused prompt with a generic 500.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{Env, HANG, output_within, stderr, stdout, write};
use crate::gateway_service::{post, secret, signed, spawn_served};

/// A managed directory (mode 0755) beside a fixture home and the trusted
/// `myproj`.
struct Floor {
    env: Env,
    dir: tempfile::TempDir,
}

impl Floor {
    fn new() -> Floor {
        let floor = Floor {
            env: Env::fixture("myproj"),
            dir: tempfile::tempdir().unwrap(),
        };
        fs::set_permissions(floor.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir_all(floor.env.project().join(".git")).unwrap();
        floor.env.trust();
        floor
    }

    /// Write a managed file, mode 0644 whatever the umask.
    fn write(&self, name: &str, text: &str) {
        let path = self.dir.path().join(name);
        write(&path, text);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.env.command(args);
        command.env("VAK_MANAGED_DIR", self.dir.path());
        command
    }

    fn vak(&self, args: &[&str]) -> Output {
        output_within(&mut self.command(args), HANG)
    }

    fn vak_with_input(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// A typo in the managed config (`lock` for `locked`, `[prompt]` for
/// `[prompts]`) used to be ignored: the identity the administrator meant to
/// lock was quietly overridable. The config is now refused naming the key,
/// like every other managed problem (fail closed).
#[test]
fn a_typo_in_the_managed_config_is_refused_naming_the_key() {
    let floor = Floor::new();
    floor.write("identity.md", "You are ACME's coding agent.\n");
    for (config, key) in [
        ("[prompts]\nlock = [\"identity\"]\n", "prompts.lock"),
        ("[prompt]\nlocked = [\"identity\"]\n", "prompt"),
        ("locked = [\"identity\"]\n", "locked"),
        ("[prompts]\nmax_token = 500\n", "prompts.max_token"),
    ] {
        floor.write("config.toml", config);
        let out = floor.vak(&["prompts", "show", "--no-pager"]);
        assert_eq!(code(&out), 1, "{config}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("`{key}`")), "{config}: {err}");
        assert!(err.contains("config.toml"), "{err}");
        assert!(!stdout(&out).contains("ACME"), "{config}");
        // `vak managed verify` says the same and fails.
        let out = floor.vak(&["managed", "verify"]);
        assert_eq!(code(&out), 1, "{config}");
        assert!(stdout(&out).contains(&format!("`{key}`")), "{config}");
    }
    // The keys it knows still resolve, and the lock holds.
    floor.write(
        "config.toml",
        "[prompts]\nlocked = [\"identity\"]\nmax_tokens = 5000\n",
    );
    floor
        .env
        .write_project(".vak/prompts/identity.md", "I am the project.\n");
    let out = floor.vak(&["prompts", "show", "--no-pager"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("You are ACME's coding agent."));
    assert!(!stdout(&out).contains("I am the project."));
}

/// A byte-order mark (Windows editors write one) before an import on the
/// first line used to keep the line as text: the import silently did not
/// happen. The mark is a hidden character, removed with a warning; the
/// line under it imports.
#[test]
fn a_byte_order_mark_before_an_import_line_does_not_hide_it() {
    let env = Env::fixture("myproj");
    env.trust();
    env.write_project(".vak/prompts/parts/persona.md", "I speak like a pirate.\n");
    env.write_project(
        ".vak/prompts/identity.md",
        "\u{feff}@parts/persona.md\r\nI review payments code.\r\n",
    );
    let out = env.vak(&["prompts", "show", "--no-pager"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let show = stdout(&out);
    assert!(
        show.starts_with("I speak like a pirate.\nI review payments code."),
        "{show}"
    );
    assert!(!show.contains("@parts"), "{show}");
    assert!(!show.contains('\u{feff}'), "{show}");
    // A mark before a line that is not an import leaves it text.
    env.write_project(".vak/prompts/identity.md", "\u{feff}me@example.com\n");
    let show = env.ok(&["prompts", "show", "--no-pager"]);
    assert!(show.starts_with("me@example.com"), "{show}");
    // Nor does it unfence a code block: the line inside stays text, as it
    // renders.
    env.write_project(
        ".vak/prompts/identity.md",
        "\u{feff}```\n@parts/persona.md\n```\n",
    );
    let show = env.ok(&["prompts", "show", "--no-pager"]);
    assert!(show.starts_with("```\n@parts/persona.md\n```"), "{show}");
    assert!(!show.contains("pirate"), "{show}");
}

/// A refused save names the layers a user can shorten; the managed text is
/// counted but named as the administrator's, never as one of them.
#[test]
fn a_budget_refusal_does_not_send_the_user_to_the_managed_layer() {
    let floor = Floor::new();
    let long: String = (0..120)
        .map(|i| format!("- ACME rule number {i}: never do thing {i} without review.\n"))
        .collect();
    floor.write("guardrails.md", &long);
    let json: Value = serde_json::from_str(&stdout(
        &floor.vak(&["prompts", "show", "--format", "json"]),
    ))
    .unwrap();
    let prefix = json["tokens"]["prefix"].as_u64().unwrap();
    floor.env.set_cap(usize::try_from(prefix).unwrap() + 20);
    // Shared guardrails accumulate: every token of them counts.
    let talkative: String = (0..40)
        .map(|i| format!("- Always explain point {i} at great length.\n"))
        .collect();
    let out = floor.vak_with_input(
        &["prompts", "set", "--scope", "shared", "guardrails", "-"],
        &talkative,
    );
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    let err = stderr(&out);
    let shared_at = err.find("shared layer").expect(&err);
    let managed_at = err.find("not yours to shorten: managed layer").expect(&err);
    assert!(shared_at < managed_at, "{err}");
    assert!(err.contains("set by the machine's administrator"), "{err}");

    // Over the cap as it is: `prompts check` names the same layers, and
    // its JSON offenders leave the managed one out.
    floor.env.set_cap(usize::try_from(prefix).unwrap() - 50);
    let out = floor.vak(&["prompts", "check", "--format", "json"]);
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let lists = find_all(&json, "offenders");
    assert!(!lists.is_empty(), "{json}");
    for list in lists {
        for entry in list.as_array().into_iter().flatten() {
            assert_ne!(entry["layer"], "managed", "{json}");
        }
    }
}

/// When the managed `max_tokens` is the cap that binds, a refusal does not
/// tell the user to raise the shared cap (a larger one changes nothing): it
/// names the managed config as the administrator's to raise.
#[test]
fn a_refusal_under_the_managed_ceiling_does_not_say_to_raise_the_shared_cap() {
    let floor = Floor::new();
    let json: Value = serde_json::from_str(&stdout(
        &floor.vak(&["prompts", "show", "--format", "json"]),
    ))
    .unwrap();
    let prefix = json["tokens"]["prefix"].as_u64().unwrap();
    floor.env.set_cap(100_000);
    floor.write(
        "config.toml",
        &format!("[prompts]\nmax_tokens = {}\n", prefix + 20),
    );
    let talkative: String = (0..40)
        .map(|i| format!("- Always explain point {i} at great length.\n"))
        .collect();
    let out = floor.vak_with_input(
        &["prompts", "set", "--scope", "shared", "guardrails", "-"],
        &talkative,
    );
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("the managed layer's ceiling"), "{err}");
    let managed_config = floor.dir.path().join("config.toml");
    assert!(err.contains(managed_config.to_str().unwrap()), "{err}");
    assert!(!err.contains("in the shared config"), "{err}");

    // Over it as it is: `prompts show` warns the same way.
    floor.write(
        "config.toml",
        &format!("[prompts]\nmax_tokens = {}\n", prefix - 50),
    );
    let out = floor.vak(&["prompts", "show", "--no-pager"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("the managed layer's ceiling"), "{err}");
    assert!(!err.contains("in the shared config"), "{err}");
}

/// Every value named `key` anywhere in `value`.
fn find_all<'a>(value: &'a Value, key: &str) -> Vec<&'a Value> {
    let mut out = Vec::new();
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == key {
                    out.push(v);
                }
                out.extend(find_all(v, key));
            }
        }
        Value::Array(items) => {
            for v in items {
                out.extend(find_all(v, key));
            }
        }
        _ => {}
    }
    out
}

/// A served delivery on a prompt that is refused — a tampered signed
/// managed file, an import that leads out of the prompts directory —
/// answers a 409 naming the class of problem, writes nothing, and does
/// not tell the sender the server's paths (the log names the file).
#[test]
fn a_served_delivery_on_a_refused_prompt_answers_409_without_paths() {
    let floor = Floor::new();
    let secret = secret(&floor.env, "helpdesk");
    let served = spawn_served(floor.command(&["gateway", "serve", "--listen", "127.0.0.1:0"]));
    let path = "/v1/bots/helpdesk/chats/42/messages";
    let deliver = |text: &str| {
        let body = format!("{{\"text\":\"{text}\"}}");
        post(
            &served.addr,
            path,
            &signed(&secret, path, &body),
            body.as_bytes(),
        )
    };
    let (status, answer) = deliver("first");
    assert_eq!(status, 200, "{answer}");

    // Keys listed, the identity unsigned: the managed layer is refused.
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("admin.key");
    let out = floor.vak(&["managed", "keygen", "--out", key.to_str().unwrap()]);
    let public = stdout(&out).trim().lines().last().unwrap().to_owned();
    floor.write("identity.md", "You are ACME's coding agent.\n");
    floor.write(
        "config.toml",
        &format!("[prompts]\nmanaged_keys = [\"{public}\"]\n"),
    );
    let sig = floor.vak(&[
        "managed",
        "sign",
        "--key",
        key.to_str().unwrap(),
        floor.dir.path().join("config.toml").to_str().unwrap(),
    ]);
    floor.write("config.toml.sig", &stdout(&sig));
    let (status, answer) = deliver("on a refused floor");
    assert_eq!(status, 409, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("managed prompt layer is refused"), "{error}");
    assert!(!error.contains('/'), "a path reached the sender: {error}");

    // No managed layer; an import escaping the prompts directory. The keys
    // were pinned on first sight, so dropping them needs the unpin.
    for name in ["identity.md", "config.toml", "config.toml.sig"] {
        fs::remove_file(floor.dir.path().join(name)).unwrap();
    }
    let (status, answer) = deliver("keys dropped");
    assert_eq!(status, 409, "{answer}");
    let out = floor.vak(&["managed", "unpin"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let prompts = floor.env.home().join(".vak/prompts");
    std::os::unix::fs::symlink("../config.toml", prompts.join("leak.md")).unwrap();
    // In the shared guardrails: in force on every chain (they accumulate).
    write(&prompts.join("guardrails.md"), "- Be careful.\n@leak.md\n");
    let body = r#"{"text":"through an escaping import"}"#;
    let headers = signed(&secret, path, body);
    let (status, answer) = post(&served.addr, path, &headers, body.as_bytes());
    assert_eq!(status, 409, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("imports a file that cannot be read"),
        "{error}"
    );
    assert!(!error.contains('/'), "a path reached the sender: {error}");
    assert!(!error.contains("leak.md"), "{error}");

    // Fixed, the same signed request delivers: no refusal took its
    // signature. The shared guardrails changed since "first", so the chat
    // rotates to a session that begins with this message.
    write(&prompts.join("guardrails.md"), "- Be careful.\n");
    let (status, answer) = post(&served.addr, path, &headers, body.as_bytes());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "rotated", "{answer}");
    let tail = answer["request"]["tail"].as_str().unwrap();
    assert!(
        tail.contains("Session intent: through an escaping import"),
        "{tail}"
    );
}

/// `vak managed verify` escapes what it prints: a managed directory whose
/// name holds a terminal escape does not reach the terminal raw.
#[test]
fn managed_verify_escapes_a_hostile_directory_name() {
    let env = Env::fixture("myproj");
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("floor\u{1b}]0;pwned\u{7}\u{1b}[2J");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    write(&dir.join("identity.md"), "ACME\n");
    fs::set_permissions(dir.join("identity.md"), fs::Permissions::from_mode(0o644)).unwrap();
    let mut command = env.command(&["managed", "verify"]);
    command.env("VAK_MANAGED_DIR", &dir);
    let out = output_within(&mut command, HANG);
    assert_eq!(code(&out), 1);
    for stream in [&out.stdout, &out.stderr] {
        assert!(
            !stream.contains(&0x1b),
            "{}",
            String::from_utf8_lossy(stream)
        );
        assert!(
            !stream.contains(&0x07),
            "{}",
            String::from_utf8_lossy(stream)
        );
    }
    assert!(stdout(&out).contains("its mode 0777"), "{}", stdout(&out));
}

/// A relative `VAK_MANAGED_DIR` used to be found from the working
/// directory, so a cloned project shipping that directory (its files the
/// user's own, so passing the owner check) set the floor. It is refused.
#[test]
fn a_relative_managed_directory_is_refused_not_found_in_the_project() {
    let env = Env::fixture("myproj");
    fs::create_dir_all(env.project().join(".git")).unwrap();
    env.trust();
    let floor = env.project().join("floor");
    fs::create_dir(&floor).unwrap();
    fs::set_permissions(&floor, fs::Permissions::from_mode(0o755)).unwrap();
    write(&floor.join("identity.md"), "I am the repository's floor.\n");
    write(
        &floor.join("config.toml"),
        "[prompts]\nlocked = [\"identity\"]\n",
    );
    for name in ["identity.md", "config.toml"] {
        fs::set_permissions(floor.join(name), fs::Permissions::from_mode(0o644)).unwrap();
    }
    for args in [
        &["prompts", "show", "--no-pager"][..],
        &["managed", "verify"],
    ] {
        let mut command = env.command(args);
        command.env("VAK_MANAGED_DIR", "floor");
        let out = output_within(&mut command, HANG);
        assert_eq!(code(&out), 1, "{args:?}: {}", stdout(&out));
        assert!(!stdout(&out).contains("repository's floor"), "{args:?}");
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(said.contains("is a relative path"), "{args:?}: {said}");
    }
}

/// `vak store import` never carries the managed layer, nor the keys this
/// home pinned for it: a node on the store has neither, and its prompts
/// hold none of the managed text. Needs PostgreSQL (`VAK_TEST_PG_URL`);
/// skipped without it.
#[test]
fn a_store_import_never_carries_the_managed_layer() {
    let Some(base) = crate::gateway_scale::pg_url() else {
        return;
    };
    let url = crate::gateway_scale::scratch_database(&base, "redteam_managed");
    let floor = Floor::new();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("admin.key");
    let out = floor.vak(&["managed", "keygen", "--out", key.to_str().unwrap()]);
    let public = stdout(&out).trim().lines().last().unwrap().to_owned();
    floor.write("guardrails.md", "- ACME: never push to main.\n");
    floor.write(
        "config.toml",
        &format!("[prompts]\nmanaged_keys = [\"{public}\"]\n"),
    );
    for name in ["guardrails.md", "config.toml"] {
        let sig = floor.vak(&[
            "managed",
            "sign",
            "--key",
            key.to_str().unwrap(),
            floor.dir.path().join(name).to_str().unwrap(),
        ]);
        floor.write(&format!("{name}.sig"), &stdout(&sig));
    }
    // The operator's own prompt has the floor, and pinned its key.
    let out = floor.vak(&["prompts", "show", "--no-pager"]);
    assert!(
        stdout(&out).contains("ACME: never push"),
        "{}",
        stderr(&out)
    );
    assert!(floor.env.home().join(".vak/managed-keys.toml").exists());

    let out = floor.vak(&["store", "migrate", "--store", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let secret = secret(&floor.env, "helpdesk");
    let out = floor.vak(&[
        "store", "import", "--from", "file", "--store", &url, "--format", "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let imported: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        imported["home_files"], 9,
        "the fixture's 9 only: {imported}"
    );

    let node = Env::empty();
    let served = crate::gateway_service::serve(&node, &["--store", &url]);
    assert!(!node.home().join(".vak/managed-keys.toml").exists());
    let path = "/v1/bots/helpdesk/chats/42/messages";
    let body = r#"{"text":"hi"}"#;
    let (status, answer) = post(
        &served.addr,
        path,
        &signed(&secret, path, body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let prefix = answer["request"]["prefix"].as_str().unwrap();
    assert!(!prefix.contains("ACME"), "{prefix}");
}
