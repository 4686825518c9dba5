//! The managed layer (`VAK_MANAGED_DIR` standing in for `/etc/vak/prompts`):
//! first in the chain, locks that every narrower layer obeys, a ceiling on
//! the cap, signatures, pinned keys, and refusals that stop every command
//! that would start a session on a prompt missing its floor.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{Env, HANG, mkfifo, output_within, stderr, stdout, write};

/// A managed directory beside an [`Env`], and the commands that see it.
struct Managed {
    env: Env,
    dir: tempfile::TempDir,
}

impl Managed {
    /// The fixture home and `myproj`, trusted, with an empty managed
    /// directory (mode 0755).
    fn new() -> Managed {
        let managed = Managed {
            env: Env::fixture("myproj"),
            dir: tempfile::tempdir().unwrap(),
        };
        fs::set_permissions(managed.dir(), fs::Permissions::from_mode(0o755)).unwrap();
        managed.ok(&["trust"]);
        managed
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// Write a managed file, mode 0644 whatever the umask.
    fn write(&self, name: &str, text: &str) {
        let path = self.path(name);
        write(&path, text);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        if let Some(parent) = path.parent() {
            fs::set_permissions(parent, fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    fn vak(&self, args: &[&str]) -> Output {
        let mut command = self.env.command(args);
        command.env("VAK_MANAGED_DIR", self.dir());
        output_within(&mut command, HANG)
    }

    /// Run `vak` with `input` on stdin.
    fn vak_with_input(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .env
            .command(args)
            .env("VAK_MANAGED_DIR", self.dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
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

    fn ok(&self, args: &[&str]) -> String {
        let out = self.vak(args);
        assert!(
            out.status.success(),
            "vak {args:?} failed: {}",
            stderr(&out)
        );
        stdout(&out)
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// Make a signing key in the env's scratch space; its public key.
    fn keygen(&self, name: &str) -> (PathBuf, String) {
        // Beside the managed directory, never in it: vak writes nothing
        // there, and neither does the administrator's key.
        let key = self.dir().with_extension(format!("{name}.key"));
        let _ = fs::remove_file(&key);
        let public = self.ok(&["managed", "keygen", "--out", key.to_str().unwrap()]);
        (key, public.trim().to_owned())
    }

    /// Sign the managed file `name` with `key` into `name.sig`.
    fn sign(&self, key: &Path, name: &str) {
        let sig = self.ok(&[
            "managed",
            "sign",
            "--key",
            key.to_str().unwrap(),
            self.path(name).to_str().unwrap(),
        ]);
        self.write(&format!("{name}.sig"), &sig);
    }

    /// A signed layer: identity locked, a guardrail, the config listing
    /// `public`; everything signed by `key`.
    fn signed(&self, key: &Path, public: &str) {
        self.write("identity.md", "You are ACME's coding agent.\n");
        self.write("guardrails.md", "- Never push to main.\n");
        self.write(
            "config.toml",
            &format!("[prompts]\nlocked = [\"identity\"]\nmanaged_keys = [\"{public}\"]\n"),
        );
        for name in ["identity.md", "guardrails.md", "config.toml"] {
            self.sign(key, name);
        }
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

/// Sessions in the home's file store.
fn session_count(env: &Env) -> usize {
    fs::read_dir(env.home().join(".vak/sessions"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
                .count()
        })
        .unwrap_or(0)
}

/// Every narrower layer says who the agent is, and a lock keeps the
/// managed text: shared, project root, a directory sub-layer, the surface
/// tier (home and project), the bot and the chat, `SYSTEM.md`, AGENTS.md
/// for the locked operating rules. Each is reported as not applied,
/// naming the lock; the guardrails of every layer still accumulate after
/// the managed one; a role's instructions still add.
#[test]
fn a_locked_identity_survives_every_narrower_layer() {
    let m = Managed::new();
    m.write("identity.md", "You are ACME's coding agent.\n");
    m.write("operating-rules.md", "Follow ACME's change process.\n");
    m.write("guardrails.md", "- Never push to main.\n");
    m.write(
        "config.toml",
        "[prompts]\nlocked = [\"identity\", \"operating-rules\"]\n",
    );
    let env = &m.env;
    env.write_home(".vak/prompts/identity.md", "I am the shared identity.\n");
    env.write_home(
        ".vak/prompts/surface/cli/identity.md",
        "I am the home surface.\n",
    );
    env.write_project(".vak/prompts/identity.md", "I am the project identity.\n");
    env.write_project(".vak/prompts/operating-rules.md", "Project rules.\n");
    env.write_project(
        ".vak/prompts/surface/cli/identity.md",
        "I am the project surface.\n",
    );
    env.write_project("svc/.vak/prompts/identity.md", "I am the directory.\n");
    env.write_project("AGENTS.md", "Agents file rules.\n");
    env.write_project(".vak/SYSTEM.md", "I am the legacy system prompt.\n");
    fs::create_dir_all(env.project().join(".git")).unwrap();

    let show = m.ok(&[
        "prompts",
        "show",
        "--dir",
        "svc",
        "--agent",
        "reviewer",
        "--no-pager",
    ]);
    assert!(show.starts_with("You are ACME's coding agent."), "{show}");
    assert!(show.contains("Follow ACME's change process."), "{show}");
    for narrower in [
        "shared identity",
        "home surface",
        "project identity",
        "project surface",
        "I am the directory",
        "Agents file rules",
        "Project rules",
        "legacy system prompt",
    ] {
        assert!(!show.contains(narrower), "{narrower} applied: {show}");
    }
    // The floor: managed right after the seed, then the narrower layers'.
    let managed_at = show.find("- Never push to main.").unwrap();
    let fixture_at = show.find("Do not run destructive commands").unwrap();
    assert!(fixture_at < managed_at, "{show}");
    assert!(show.contains("## Agent instructions: reviewer"), "{show}");

    // A save to a narrower layer is kept, and says it will not apply.
    let out = m.vak_with_input(
        &["prompts", "set", "--scope", "shared", "identity", "-"],
        "I am the newly saved shared identity.\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("is kept but not applied: locked by managed"),
        "{}",
        stdout(&out)
    );
    let explain = m.ok(&["prompts", "explain", "--dir", "svc", "--no-pager"]);
    assert!(explain.contains("from managed (locked)"), "{explain}");
    let not_applied = explain.matches("not applied: locked by managed").count();
    // identity: shared, home surface, project, project surface, directory,
    // SYSTEM.md; operating rules: shared (the fixture's), project, AGENTS.md.
    assert_eq!(not_applied, 9, "{explain}");

    // The gateway's bot and chat texts too.
    let json = m.json(&["prompts", "show", "--bot", "helpdesk", "--chat", "42"]);
    let identity = json["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["block"] == "identity")
        .unwrap();
    assert_eq!(identity["layers"], serde_json::json!(["managed"]));
    assert_eq!(identity["locked"], true);
    assert!(
        json["demoted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["layer"] == "bot"
                && d["reason"].as_str().unwrap().contains("locked by managed")),
        "{json}"
    );
}

/// Without a lock, managed is the widest user tier: the shared layer
/// overrides its identity, and its guardrails still join the floor.
#[test]
fn an_unlocked_managed_identity_is_the_widest_user_tier() {
    let m = Managed::new();
    m.write("identity.md", "You are ACME's coding agent.\n");
    m.write("guardrails.md", "- Never push to main.\n");
    m.env
        .write_home(".vak/prompts/identity.md", "I am the shared identity.\n");
    fs::remove_file(m.env.project().join(".vak/prompts/identity.md")).unwrap();
    let show = m.ok(&["prompts", "show", "--no-pager"]);
    assert!(show.starts_with("I am the shared identity."), "{show}");
    assert!(show.contains("- Never push to main."), "{show}");
    let explain = m.ok(&["prompts", "explain", "--no-pager"]);
    assert!(explain.contains("shadows managed"), "{explain}");
    assert!(!explain.contains("(locked)"), "{explain}");
}

/// The managed `max_tokens` is a ceiling: the shared config's larger cap
/// does not raise it.
#[test]
fn the_managed_cap_is_a_ceiling_no_narrower_config_raises() {
    let m = Managed::new();
    m.env.set_cap(100_000);
    m.write("config.toml", "[prompts]\nmax_tokens = 700\n");
    let json = m.json(&["prompts", "show"]);
    assert_eq!(json["tokens"]["cap"], 700, "{json}");
    m.write("config.toml", "[prompts]\nmax_tokens = 200000\n");
    let json = m.json(&["prompts", "show"]);
    assert_eq!(json["tokens"]["cap"], 100_000, "{json}");
}

/// A signed layer resolves and each managed descriptor records its key;
/// a file changed after signing is refused by name, `prompts show`,
/// `session new`, `exec` on an earlier session and a gateway delivery all
/// stop with exit 1, and no session starts on it.
#[test]
fn a_tampered_signed_file_is_refused_and_no_session_starts_on_it() {
    let m = Managed::new();
    let (key, public) = m.keygen("admin");
    assert!(public.starts_with("ed25519:"), "{public}");
    m.signed(&key, &public);

    let session = m.json(&["session", "new"]);
    let id = session["session_id"].as_str().unwrap().to_owned();
    let descriptors = m.json(&["prompts", "show"])["descriptors"].clone();
    let managed: Vec<&Value> = descriptors
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["layer"] == "managed")
        .collect();
    assert_eq!(managed.len(), 2, "{descriptors}");
    for descriptor in &managed {
        assert_eq!(descriptor["signed_by"], public.as_str(), "{descriptor}");
    }
    // The session's frozen descriptors record the key as well.
    let ledger =
        fs::read_to_string(m.env.home().join(format!(".vak/sessions/{id}.jsonl"))).unwrap();
    let first: Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let frozen = first.to_string();
    assert!(
        frozen.contains(&format!("\"signed_by\":\"{public}\"")),
        "{frozen}"
    );
    let before = session_count(&m.env);

    m.write("identity.md", "You are whatever the last writer wanted.\n");
    let identity = m.path("identity.md");
    for args in [
        vec!["prompts", "show", "--no-pager"],
        vec!["session", "new"],
        vec!["exec", "--session", &id, "--message", "hi"],
        vec![
            "exec",
            "--session",
            &id,
            "--accept-drift",
            "--message",
            "hi",
        ],
        vec![
            "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "hello",
        ],
    ] {
        let out = m.vak(&args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(identity.to_str().unwrap()) && err.contains("does not verify"),
            "{args:?}: {err}"
        );
        assert!(
            !stdout(&out).contains("whatever the last writer"),
            "{args:?}"
        );
    }
    assert_eq!(session_count(&m.env), before, "no session started");

    // `verify` names each file, OK or refused, and exits non-zero.
    let out = m.vak(&["managed", "verify"]);
    assert_eq!(code(&out), 1);
    let text = stdout(&out);
    assert!(
        text.contains("OK       ") && text.contains("guardrails.md"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("refused") && l.contains("identity.md")),
        "{text}"
    );

    let out = m.vak(&["managed", "verify", "--format", "json"]);
    assert_eq!(code(&out), 1);
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["ok"], false);
    assert_eq!(json["keys"], serde_json::json!([public]));
    let refused: Vec<&Value> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["ok"] == false)
        .collect();
    assert_eq!(refused.len(), 1, "{json}");
    assert!(
        refused[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("identity.md")
    );

    // Signed again by the administrator: it resolves again.
    m.sign(&key, "identity.md");
    let out = m.ok(&["managed", "verify"]);
    assert!(!out.contains("refused"), "{out}");
    assert!(
        m.ok(&["prompts", "show", "--no-pager"])
            .contains("whatever the last writer")
    );
}

/// One way of spoiling a signature.
type Sabotage<'a> = Box<dyn Fn() + 'a>;

/// Unsigned, signed by a key that is not listed, a `.sig` that is not
/// base64, huge, or a FIFO: each refused by name, nothing blocks.
#[test]
fn hostile_signatures_are_refused_by_name() {
    let m = Managed::new();
    let (key, public) = m.keygen("admin");
    let (other, _) = m.keygen("other");
    m.signed(&key, &public);
    let guard = m.path("guardrails.md.sig");
    let cases: Vec<(&str, Sabotage<'_>, &str)> = vec![
        (
            "unsigned",
            Box::new(|| fs::remove_file(&guard).unwrap()),
            "is not signed",
        ),
        (
            "another key",
            Box::new(|| m.sign(&other, "guardrails.md")),
            "does not verify",
        ),
        (
            "not base64",
            Box::new(|| m.write("guardrails.md.sig", "not a signature!\n")),
            "not the base64",
        ),
        (
            "huge",
            Box::new(|| m.write("guardrails.md.sig", &"A".repeat(4096))),
            "larger",
        ),
        (
            "fifo",
            Box::new(|| {
                fs::remove_file(&guard).unwrap();
                mkfifo(&guard)
            }),
            "FIFO",
        ),
    ];
    for (what, make, says) in cases {
        let _ = fs::remove_file(&guard);
        m.sign(&key, "guardrails.md");
        make();
        let out = m.vak(&["prompts", "show", "--no-pager"]);
        assert_eq!(code(&out), 1, "{what}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("guardrails.md") && err.contains(says),
            "{what}: {err}"
        );
        let out = m.vak(&["managed", "verify"]);
        assert_eq!(code(&out), 1, "{what}");
    }
}

/// The config is signed too, and its keys are pinned on first sight: a
/// config re-signed with a new key list is refused until `vak managed
/// unpin`; a layer that drops its keys is refused the same way.
#[test]
fn changed_or_dropped_keys_are_refused_until_unpinned() {
    let m = Managed::new();
    let (key, public) = m.keygen("admin");
    m.signed(&key, &public);
    m.ok(&["prompts", "show", "--no-pager"]);
    let pin = fs::read_to_string(m.env.home().join(".vak/managed-keys.toml")).unwrap();
    assert!(pin.contains(&public), "{pin}");

    // Whoever can write the directory swaps in their own key and signs
    // everything with it: the signatures verify, the pin does not.
    let (evil, evil_public) = m.keygen("evil");
    m.signed(&evil, &evil_public);
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("vak managed unpin"),
        "{}",
        stderr(&out)
    );

    // Dropping the keys altogether is a change too.
    m.write("config.toml", "[prompts]\nlocked = [\"identity\"]\n");
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("none"), "{}", stderr(&out));

    // The administrator meant it: unpin, and the new keys are pinned.
    m.signed(&evil, &evil_public);
    m.ok(&["managed", "unpin"]);
    m.ok(&["prompts", "show", "--no-pager"]);
    let pin = fs::read_to_string(m.env.home().join(".vak/managed-keys.toml")).unwrap();
    assert!(
        pin.contains(&evil_public) && !pin.contains(&public),
        "{pin}"
    );
}

/// A directory or file writable by others is refused naming its mode; a
/// file that is a symlink out of the managed directory, a FIFO, or not
/// UTF-8 is refused by name; a bad lock is refused naming the key. None
/// of them lets the prompt resolve without the floor.
#[test]
fn a_hostile_managed_tree_is_refused_and_the_prompt_does_not_resolve() {
    let m = Managed::new();
    m.write("guardrails.md", "- Never push to main.\n");
    m.ok(&["prompts", "show", "--no-pager"]);

    fs::set_permissions(m.dir(), fs::Permissions::from_mode(0o777)).unwrap();
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("0777"), "{}", stderr(&out));
    fs::set_permissions(m.dir(), fs::Permissions::from_mode(0o755)).unwrap();

    let file = m.path("guardrails.md");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o664)).unwrap();
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("0664") && stderr(&out).contains("guardrails.md"),
        "{}",
        stderr(&out)
    );
    fs::remove_file(&file).unwrap();

    let outside = m.env.home().join("outside.md");
    write(&outside, "- I am not the administrator's.\n");
    std::os::unix::fs::symlink(&outside, &file).unwrap();
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("guardrails.md"), "{}", stderr(&out));
    fs::remove_file(&file).unwrap();

    mkfifo(&file);
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("FIFO"), "{}", stderr(&out));
    fs::remove_file(&file).unwrap();

    fs::write(&file, b"- bad \xff byte\n").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("UTF-8"), "{}", stderr(&out));
    fs::remove_file(&file).unwrap();

    m.write("config.toml", "[prompts]\nlocked = [\"guardrails\"]\n");
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("prompts.locked"), "{}", stderr(&out));
}

/// A managed directory owned by someone else than root or the user is
/// refused naming the owner. Needs root to hand the directory away; an
/// unprivileged run checks nothing and says so.
#[test]
fn a_managed_directory_owned_by_another_user_is_refused() {
    let m = Managed::new();
    m.write("guardrails.md", "- Never push to main.\n");
    let chown = std::process::Command::new("chown")
        .args(["65534", m.dir().to_str().unwrap()])
        .status()
        .unwrap();
    if !chown.success() {
        eprintln!("skipped: cannot hand the directory to another user here");
        return;
    }
    let out = m.vak(&["prompts", "show", "--no-pager"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("uid 65534"), "{}", stderr(&out));
}

/// A change to a managed file is drift: `exec` stops with exit 3 and
/// `session diff` names the managed file.
#[test]
fn a_managed_change_is_drift_named_by_session_diff() {
    let m = Managed::new();
    m.write("guardrails.md", "- Never push to main.\n");
    let id = m.json(&["session", "new"])["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.write(
        "guardrails.md",
        "- Never push to main.\n- Never merge on Fridays.\n",
    );
    let out = m.vak(&["exec", "--session", &id, "--message", "hi"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let diff = m.ok(&["session", "diff", &id]);
    assert!(
        diff.contains("managed") && diff.contains("Never merge on Fridays"),
        "{diff}"
    );
}

/// The administrator's tools: a key file in another format is refused
/// saying which format is expected; `--scope managed` does not exist; the
/// completions offer `managed`.
#[test]
fn the_administrators_tools_say_what_they_expect() {
    let m = Managed::new();
    m.write("identity.md", "You are ACME's coding agent.\n");
    let not_a_key = m.env.home().join("id_ed25519");
    write(&not_a_key, "-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n");
    let out = m.vak(&[
        "managed",
        "sign",
        "--key",
        not_a_key.to_str().unwrap(),
        m.path("identity.md").to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("base64 of a 32-byte ed25519 seed"),
        "{}",
        stderr(&out)
    );
    // keygen never overwrites.
    let (key, _) = m.keygen("admin");
    let out = m.vak(&["managed", "keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
    assert_eq!(
        fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let out = m.vak_with_input(
        &["prompts", "set", "--scope", "managed", "identity", "-"],
        "mine",
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("never writes it"), "{}", stderr(&out));
    assert!(
        fs::read_to_string(m.path("identity.md"))
            .unwrap()
            .contains("ACME")
    );

    let mut command = m.env.command(&["--", "vak", "man"]);
    command
        .env("VAK_COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", "1")
        .env("_CLAP_IFS", "\n");
    let out = output_within(&mut command, HANG);
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("managed")),
        "{}",
        stdout(&out)
    );
}

/// A managed `surface/<kind>/` file applies on that surface only, first
/// among the notes; an unlocked managed rule is the widest text, which
/// the project's own rules and AGENTS.md follow as usual.
#[test]
fn managed_surface_files_apply_on_their_surface_and_unlocked_rules_are_widest() {
    let m = Managed::new();
    m.write("surface/chat/surface-note.md", "Managed chat note.\n");
    m.write("operating-rules.md", "Follow ACME's change process.\n");
    m.env
        .write_project("AGENTS.md", "Run the linters before a commit.\n");
    fs::create_dir_all(m.env.project().join(".git")).unwrap();
    let chat = m.ok(&["prompts", "show", "--surface", "chat", "--no-pager"]);
    assert!(chat.contains("Managed chat note."), "{chat}");
    // First among the notes: before the project's and the home surface's.
    let managed_note = chat.find("- Managed chat note.").unwrap();
    let project_note = chat.find("- The developer works on a laptop").unwrap();
    let home_surface_note = chat
        .find("- Messages arrive from a shared team channel")
        .unwrap();
    assert!(
        managed_note < project_note && project_note < home_surface_note,
        "{chat}"
    );
    let cli = m.ok(&["prompts", "show", "--surface", "cli", "--no-pager"]);
    assert!(!cli.contains("Managed chat note."), "{cli}");
    // The fixture home's own operating-rules.md is narrower: it wins, and
    // the project's AGENTS.md is appended after it.
    assert!(!cli.contains("Follow ACME's change process."), "{cli}");
    assert!(cli.contains("Run the linters before a commit."), "{cli}");
    let explain = m.ok(&["prompts", "explain", "--no-pager"]);
    assert!(explain.contains("shadows managed"), "{explain}");
}
