//! `vak prompts set|edit|reset|check` (editing and budget), on the real
//! binary with temporary homes and projects.

use std::fs;

use serde_json::Value;

use crate::common::*;

const SHARED: &str = ".vak/prompts";

fn code(out: &std::process::Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn block_text(report: &Value, name: &str) -> String {
    report["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["block"] == name)
        .unwrap_or_else(|| panic!("no block {name}"))["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn block_tokens(check: &Value, name: &str) -> u64 {
    check["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["block"] == name)
        .unwrap_or_else(|| panic!("no block {name} in {check}"))["tokens"]
        .as_u64()
        .unwrap()
}

/// `vak prompts check --format json`, which exits 4 when over the cap.
fn check_json(env: &Env, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["prompts", "check", "--format", "json"];
    all.extend(args);
    let out = env.vak(&all);
    (code(&out), serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn save_over_the_cap_is_refused_naming_layers_and_leaves_the_file_unchanged() {
    let env = Env::empty();
    env.trust();
    env.write_home(".vak/config.toml", "[prompts]\nmax_tokens = 900\n");
    env.write_home(
        &format!("{SHARED}/guardrails.md"),
        "- Never push to main without asking.\n",
    );
    let project_identity = "You are Kite, the project's agent. ".repeat(20);
    env.write_project(&format!("{SHARED}/identity.md"), &project_identity);
    let before = b"Be brief.\r\nNo trailing newline, odd bytes kept: \xc3\xa9";
    let rules = env.project().join(SHARED).join("operating-rules.md");
    fs::write(&rules, before).unwrap();

    let huge = "Explain every step in great detail before doing it. ".repeat(120);
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "project",
            "operating-rules",
            "-",
        ],
        &huge,
    );
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert_eq!(
        fs::read(&rules).unwrap(),
        before,
        "file changed despite the refusal"
    );
    let err = stderr(&out);
    assert!(err.contains("over the cap of 900"), "{err}");
    // Every user-owned contributing layer, largest first, with counts.
    let project_at = err.find("project layer (project)").expect(&err);
    let shared_at = err.find("shared layer (home)").expect(&err);
    assert!(project_at < shared_at, "{err}");
    assert!(
        err.contains("identity.md")
            && err.contains("operating-rules.md")
            && err.contains("guardrails.md"),
        "{err}"
    );
    assert!(
        !err.contains("builtin:"),
        "seed named as an offender: {err}"
    );

    // Within the cap, the same command saves.
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "project",
            "operating-rules",
            "-",
        ],
        "Be thorough.\n",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&rules).unwrap(), "Be thorough.\n");
}

#[test]
fn reset_returns_exactly_the_inherited_text() {
    let env = Env::empty();
    env.trust();
    env.write_home(
        &format!("{SHARED}/identity.md"),
        "You are Vak, on this user's machine.\n",
    );
    let inherited = block_text(&env.json(&["prompts", "show"]), "identity");
    let new = env.project().join("new-identity.md");
    fs::write(&new, "You are Kite.").unwrap();
    env.ok(&[
        "prompts",
        "set",
        "--scope",
        "project",
        "identity",
        "--file",
        new.to_str().unwrap(),
    ]);
    assert_eq!(
        block_text(&env.json(&["prompts", "show"]), "identity"),
        "You are Kite."
    );
    let out = env.ok(&["prompts", "reset", "--scope", "project", "identity"]);
    assert!(out.contains("inherits again"), "{out}");
    assert!(!env.project().join(SHARED).join("identity.md").exists());
    assert_eq!(
        block_text(&env.json(&["prompts", "show"]), "identity"),
        inherited
    );
    // A second reset has nothing to do, and says so.
    let out = env.ok(&["prompts", "reset", "--scope", "project", "identity"]);
    assert!(out.contains("nothing to reset"), "{out}");
}

#[test]
fn if_digest_refuses_a_stale_save() {
    let env = Env::empty();
    let path = env.home().join(SHARED).join("guardrails.md");
    // "" means "I believe there is no file yet".
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--if-digest",
            "",
            "-",
        ],
        "- One.\n",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let digest = stdout(&out).split("sha256 ").nth(1).unwrap()[..64].to_owned();
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--if-digest",
            "",
            "-",
        ],
        "- Two.\n",
    );
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("changed since you read it"),
        "{}",
        stderr(&out)
    );
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--if-digest",
            &digest,
            "-",
        ],
        "- Three.\n",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The digest we started from is now stale.
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--if-digest",
            &digest,
            "-",
        ],
        "- Four.\n",
    );
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(path.to_str().unwrap()),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "- Three.\n");
    let out = env.vak(&[
        "prompts",
        "reset",
        "--scope",
        "shared",
        "guardrails",
        "--if-digest",
        &digest,
    ]);
    assert_eq!(code(&out), 1);
    assert!(path.exists());
    let out = env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--if-digest",
            "xyz",
            "-",
        ],
        "- Five.\n",
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

#[test]
fn token_counts_equal_the_encoding_on_known_strings() {
    let env = Env::empty();
    env.set_cap(1500);
    // Token ids from the published encodings: "hello world" is [24912, 2375]
    // in o200k_base and [15339, 1917] in cl100k_base; "👍" is one o200k
    // token (82514) and three cl100k tokens (9468, 239, 235).
    env.write_home(&format!("{SHARED}/identity.md"), "hello world");
    env.write_home(&format!("{SHARED}/operating-rules.md"), "👍");
    let (status, check) = check_json(&env, &[]);
    assert_eq!(status, 0, "{check}");
    assert_eq!(check["encoding"], "o200k_base");
    assert_eq!(check["tokens"]["model"], "gpt-4o");
    assert_eq!(check["tokens"]["context_window"], 128_000);
    assert_eq!(check["tokens"]["cap"], 1500);
    assert_eq!(block_tokens(&check, "identity"), 2);
    assert_eq!(block_tokens(&check, "operating-rules"), 1);

    env.write_home(".vak/config.toml", "model = \"gpt-4\"\n");
    let (_, check) = check_json(&env, &[]);
    assert_eq!(check["encoding"], "cl100k_base");
    assert_eq!(check["tokens"]["context_window"], 8192);
    assert_eq!(block_tokens(&check, "identity"), 2);
    assert_eq!(block_tokens(&check, "operating-rules"), 3);

    // show --format json carries the same prefix count.
    let report = env.json(&["prompts", "show"]);
    assert_eq!(report["tokens"], check["tokens"]);
}

#[test]
fn check_exits_4_when_over_and_an_untrusted_project_cannot_raise_the_cap() {
    let env = Env::empty();
    env.set_cap(1500);
    env.write_project(".vak/config.toml", "[prompts]\nmax_tokens = 100000\n");
    let (status, check) = check_json(&env, &[]);
    assert_eq!(status, 0);
    assert_eq!(check["tokens"]["cap"], 1500);
    let warnings = check["warnings"].to_string();
    assert!(
        warnings.contains("untrusted") && warnings.contains("config.toml"),
        "{warnings}"
    );

    // Lowering is allowed from an untrusted project, and the seed alone is
    // over 100 tokens: check says so with exit 4.
    env.write_project(".vak/config.toml", "[prompts]\nmax_tokens = 100\n");
    let out = env.vak(&["prompts", "check"]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(stdout(&out).contains("OVER the cap"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("built-in prompt alone"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_prints_layers_cap_window_and_lints() {
    let env = Env::empty();
    env.set_cap(1500);
    env.write_home(&format!("{SHARED}/identity.md"), "");
    env.write_home(
        &format!("{SHARED}/guardrails.md"),
        "Prose first.\n- Never push to main.\n- Never push to main.\n",
    );
    let out = env.ok(&["prompts", "check"]);
    for want in [
        "/ 1500 tokens (cap)",
        "window 128000",
        "Tokens per block",
        "Tokens per layer",
        "shared (home)",
        "seed (built-in)",
        "Lints:",
        "`identity` is empty",
        "before the first bullet",
        "duplicate guardrail",
        "within the cap",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn only_editable_blocks_can_be_set() {
    let env = Env::empty();
    for block in [
        "capability-contract",
        "surface",
        "skills",
        "agent-instructions",
    ] {
        let out = env.vak_stdin(&["prompts", "set", "--scope", "shared", block, "-"], "x");
        assert_eq!(code(&out), 2, "{block}: {}", stderr(&out));
        assert!(stderr(&out).contains("is not editable"), "{}", stderr(&out));
    }
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "shared", "identiti", "-"],
        "x",
    );
    assert_eq!(code(&out), 2);
    let out = env.vak(&["prompts", "set", "--scope", "shared", "identity"]);
    assert_eq!(code(&out), 2, "no input source: {}", stderr(&out));
    assert!(
        !env.home().join(".vak").exists(),
        "a refused set wrote something"
    );
}

#[test]
fn saving_into_an_untrusted_project_says_what_will_not_apply() {
    let env = Env::empty();
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "project", "identity", "-"],
        "You are Kite.",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("untrusted")
            && text.contains("`identity`")
            && text.contains("will not apply"),
        "{text}"
    );
    assert!(env.project().join(SHARED).join("identity.md").exists());
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "project", "guardrails", "-"],
        "- Stay in this repository.\n",
    );
    assert!(!stdout(&out).contains("will not apply"), "{}", stdout(&out));
    let show = env.ok(&["prompts", "show"]);
    assert!(show.contains("Stay in this repository."));
    assert!(!show.contains("You are Kite."));
}

#[test]
fn surface_and_agent_sub_layers_are_written_where_the_loader_reads_them() {
    let env = Env::empty();
    env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "--surface",
            "chat",
            "surface-note",
            "-",
        ],
        "Replies render as plain text.",
    );
    assert!(
        env.home()
            .join(SHARED)
            .join("surface/chat/surface-note.md")
            .exists()
    );
    let show = env.ok(&["prompts", "show", "--surface", "chat"]);
    assert!(show.contains("Replies render as plain text."));
    let out = env.vak_stdin(
        &[
            "prompts", "set", "--scope", "shared", "--agent", "reviewer", "identity", "-",
        ],
        "Review for correctness first.",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let show = env.ok(&["prompts", "show", "--agent", "reviewer"]);
    assert!(show.contains("Review for correctness first."));
    let out = env.vak_stdin(
        &[
            "prompts", "set", "--scope", "shared", "--agent", "../x", "identity", "-",
        ],
        "x",
    );
    assert_eq!(code(&out), 2);
}

#[test]
fn edit_runs_the_editor_on_a_copy_and_saves_with_the_same_checks() {
    let env = Env::empty();
    env.set_cap(1500);
    let replacement = env.project().join("replacement.md");
    fs::write(&replacement, "You are Vak, edited.\n").unwrap();
    let editor = format!("cp {}", replacement.display());
    let out = env
        .command(&["prompts", "edit", "--scope", "shared", "identity"])
        .env("EDITOR", &editor)
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let path = env.home().join(SHARED).join("identity.md");
    assert_eq!(fs::read_to_string(&path).unwrap(), "You are Vak, edited.\n");

    // An editor that changes nothing saves nothing.
    let out = env
        .command(&["prompts", "edit", "--scope", "shared", "operating-rules"])
        .env("EDITOR", "true")
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("no changes"), "{}", stdout(&out));
    assert!(!env.home().join(SHARED).join("operating-rules.md").exists());

    // Over the cap: refused with exit 4, file unchanged, edited text kept.
    fs::write(&replacement, "Verbose. ".repeat(2000)).unwrap();
    let out = env
        .command(&["prompts", "edit", "--scope", "shared", "identity"])
        .env("EDITOR", &editor)
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "You are Vak, edited.\n");
    let err = stderr(&out);
    let kept = err
        .split("kept in `")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .expect(&err);
    assert_eq!(fs::read_to_string(kept).unwrap(), "Verbose. ".repeat(2000));
    fs::remove_file(kept).unwrap();
}

#[test]
fn killed_vak_set_never_leaves_a_torn_file() {
    use std::io::Write as _;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let env = Env::empty();
    // A cap high enough that large texts save, so a kill can land mid-write.
    env.write_home(".vak/config.toml", "[prompts]\nmax_tokens = 200000\n");
    let path = env.home().join(SHARED).join("operating-rules.md");
    let versions = [
        "Old rule, kept.\n".repeat(6_000),
        "New rule, longer than the old.\n".repeat(4_000),
    ];
    env.vak_stdin(
        &[
            "prompts",
            "set",
            "--scope",
            "shared",
            "operating-rules",
            "-",
        ],
        &versions[0],
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), versions[0]);

    let started = Instant::now();
    let mut seed = u64::from(std::process::id())
        ^ started.elapsed().subsec_nanos() as u64
        ^ 0x2545_f491_4f6c_dd1d;
    let (mut runs, mut completed) = (0, 0);
    // Bounded in count, never in time: a loaded machine runs them all, slower.
    while runs < 24 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let text = &versions[runs % 2];
        let mut child = env
            .command(&[
                "prompts",
                "set",
                "--scope",
                "shared",
                "operating-rules",
                "-",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
        std::thread::sleep(Duration::from_millis(150 + seed % 450));
        let _ = child.kill(); // SIGKILL; may already have exited
        let status = child.wait().unwrap();
        completed += usize::from(status.success());
        let now = fs::read_to_string(&path).unwrap();
        assert!(
            now == versions[0] || now == versions[1],
            "torn file after run {runs} ({} bytes)",
            now.len()
        );
        runs += 1;
    }
    eprintln!("crash test: {runs} runs of `vak prompts set`, {completed} finished before the kill");
}

#[test]
fn a_save_of_nothing_from_standard_input_says_so() {
    let env = Env::fixture("myproj");
    env.trust();
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "project", "guardrails", "-"],
        "",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the new `guardrails` is empty"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn two_saves_at_once_that_together_go_over_the_cap_leave_one_refused() {
    // Each text fits the cap alone; both together do not. Saved at the same
    // moment from two processes, the budget check of one must see the other.
    let env = Env::empty();
    env.set_cap(1500);
    fs::create_dir_all(env.project().join(".git")).unwrap();
    let words: String = (0..250).map(|i| format!("word{i} ")).collect();
    let guards: String = (0..160).map(|i| format!("- guard word{i}\n")).collect();
    fs::write(env.project().join("id.txt"), &words).unwrap();
    fs::write(env.project().join("g.txt"), &guards).unwrap();
    for round in 0..4 {
        let _ = fs::remove_dir_all(env.home().join(".vak/prompts"));
        let spawn = |block: &str, file: &str| {
            env.command(&["prompts", "set", "--scope", "shared", block, "--file", file])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn("identity", "id.txt"), spawn("guardrails", "g.txt"));
        let codes = [a, b].map(|c| c.wait_with_output().unwrap().status.code());
        let mut sorted = codes;
        sorted.sort();
        assert_eq!(
            sorted,
            [Some(0), Some(4)],
            "round {round}: one save fits, the second must be refused"
        );
        let check = env.vak(&["prompts", "check"]);
        assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    }
}
