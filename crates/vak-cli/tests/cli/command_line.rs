//! The command line as users of cargo, jj and gh expect it (issue 28):
//! JSON from every command that changes something, empty answers said on
//! stderr, headers on a terminal, "did you mean", completions that know
//! vak's names, a pager and progress on a terminal only.

use serde_json::Value;

use crate::common::*;

const SHARED: &str = ".vak/prompts";

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// Every changing command answers `--format json` with what changed: the
/// file, its digest before (`previous`) and after (`digest`), the prefix
/// tokens before and after, and whether a version was recorded.
#[test]
fn every_changing_command_answers_json_with_what_changed() {
    let env = Env::empty();
    env.trust();
    let path = env.project().join(SHARED).join("identity.md");
    let text = env.project().join("new.md");
    write(&text, "You are Kite.\n");
    let file = text.to_str().unwrap();

    let set = env.json(&[
        "prompts", "set", "--scope", "project", "identity", "--file", file,
    ]);
    for key in [
        "path",
        "digest",
        "previous",
        "tokens_before",
        "tokens_after",
        "recorded",
    ] {
        assert!(set.get(key).is_some(), "set lacks {key}: {set}");
    }
    assert_eq!(set["path"], path.to_str().unwrap());
    assert_eq!(set["previous"], Value::Null);
    assert_eq!(set["recorded"], true);
    let first = set["digest"].as_str().unwrap().to_owned();

    // The same text again changes nothing and records nothing.
    let again = env.json(&[
        "prompts", "set", "--scope", "project", "identity", "--file", file,
    ]);
    assert_eq!(again["recorded"], false, "{again}");
    assert_eq!(again["digest"], again["previous"], "{again}");

    // `edit` through an editor that appends a line.
    let mut edit = env.command(&[
        "prompts", "edit", "--scope", "project", "identity", "--format", "json",
    ]);
    edit.env("EDITOR", "printf 'Be brief.\\n' >>");
    let out = output_within(&mut edit, HANG);
    assert!(out.status.success(), "{}", stderr(&out));
    let edited: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(edited["previous"], first.as_str(), "{edited}");
    assert_eq!(edited["recorded"], true, "{edited}");
    assert!(
        edited["tokens_after"].as_u64() > edited["tokens_before"].as_u64(),
        "{edited}"
    );
    let second = edited["digest"].as_str().unwrap().to_owned();

    // An editor that changes nothing: nothing saved, said in JSON too.
    let mut edit = env.command(&[
        "prompts", "edit", "--scope", "project", "identity", "--format", "json",
    ]);
    edit.env("EDITOR", "true");
    let out = output_within(&mut edit, HANG);
    assert!(out.status.success(), "{}", stderr(&out));
    let unchanged: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(unchanged["recorded"], false, "{unchanged}");
    assert_eq!(unchanged["digest"], second.as_str(), "{unchanged}");

    let revert = env.json(&[
        "prompts", "revert", "--scope", "project", "identity", "--to", &first,
    ]);
    assert_eq!(revert["previous"], second.as_str(), "{revert}");
    assert_eq!(revert["digest"], first.as_str(), "{revert}");
    assert_eq!(revert["recorded"], true, "{revert}");
    for key in ["tokens_before", "tokens_after", "path"] {
        assert!(revert.get(key).is_some(), "revert lacks {key}: {revert}");
    }

    let reset = env.json(&["prompts", "reset", "--scope", "project", "identity"]);
    assert_eq!(reset["previous"], first.as_str(), "{reset}");
    assert_eq!(reset["removed"], first.as_str(), "{reset}");
    assert_eq!(reset["digest"], Value::Null, "{reset}");
    assert_eq!(reset["recorded"], true, "{reset}");
    assert!(reset.get("tokens_before").is_some() && reset.get("tokens_after").is_some());

    let listed = env.json(&["trust", "--list"]);
    assert_eq!(keys(&listed), ["trusted"]);
    assert_eq!(listed["trusted"].as_array().unwrap().len(), 1);

    let untrust = env.json(&["untrust"]);
    for key in [
        "project",
        "untrusted",
        "changed",
        "tokens_before",
        "tokens_after",
        "recorded",
    ] {
        assert!(untrust.get(key).is_some(), "untrust lacks {key}: {untrust}");
    }
    assert_eq!(untrust["changed"], true, "{untrust}");
    let again = env.json(&["untrust"]);
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["untrusted"], serde_json::json!([]), "{again}");

    let trust = env.json(&["trust"]);
    for key in ["trusted", "tokens_before", "tokens_after", "recorded"] {
        assert!(trust.get(key).is_some(), "trust lacks {key}: {trust}");
    }
}

/// An empty listing prints nothing on stdout, so a script reads an empty
/// list, and says so on stderr for the person, as gh does.
#[test]
fn empty_listings_say_so_on_stderr_and_keep_stdout_clean() {
    let env = Env::empty();
    for (args, said) in [
        (&["trust", "--list"][..], "no trusted projects"),
        (&["session", "list"][..], "no sessions"),
        (&["audit", "list"][..], "no security events"),
    ] {
        let out = env.vak(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{args:?}");
        assert!(stderr(&out).starts_with(said), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(
        env.json(&["trust", "--list"]),
        serde_json::json!({"trusted": []})
    );
    // On a terminal the sentence shows, and no header over nothing.
    let (shown, code) = on_terminal(&env, &["session", "list"], "", &[]);
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.starts_with("no sessions"), "{shown}");
    assert!(!shown.contains("SESSION"), "{shown}");
}

/// `session list` and `audit list` have a header row on a terminal, and
/// none when piped.
#[test]
fn listings_have_a_header_row_on_a_terminal_only() {
    let env = Env::empty();
    let id = env.json(&["session", "new"])["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let piped = env.ok(&["session", "list"]);
    assert!(piped.starts_with(&id), "{piped}");
    let (shown, code) = on_terminal(&env, &["session", "list"], "", &[]);
    assert_eq!(code, Some(0), "{shown}");
    let mut lines = shown.lines();
    let header = lines.next().unwrap();
    for column in ["SESSION", "CREATED", "SURFACE", "PROJECT"] {
        assert!(header.contains(column), "{shown}");
    }
    let row = lines.next().unwrap();
    assert!(row.starts_with(&id), "{shown}");
    // The columns line up under the header.
    assert_eq!(header.find("CREATED"), row.find("20"), "{shown}");

    // A security event: a project trusted over the cap.
    env.set_cap(1500);
    env.write_project(
        &format!("{SHARED}/identity.md"),
        &"You are Kite, the project's agent. ".repeat(300),
    );
    env.ok(&["trust", "--over-budget"]);
    let piped = env.ok(&["audit", "list"]);
    assert!(piped.contains("trust-over-cap"), "{piped}");
    assert!(!piped.contains("TIME"), "{piped}");
    let (shown, code) = on_terminal(&env, &["audit", "list"], "", &[]);
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.starts_with("TIME  EVENT"), "{shown}");
    assert!(shown.contains("trust-over-cap"), "{shown}");
}

/// A misspelt command, flag or value is answered with the one meant, as
/// cargo and jj do, and exits 2.
#[test]
fn a_misspelt_command_flag_or_value_gets_a_did_you_mean() {
    let env = Env::empty();
    for (args, meant) in [
        (&["prompt", "show"][..], "'prompts'"),
        (&["prompts", "shwo"][..], "'show'"),
        (&["prompts", "show", "--fromat", "json"][..], "'--format'"),
        (
            &["prompts", "reset", "--scope", "shraed", "identity"][..],
            "shared",
        ),
    ] {
        let out = env.vak(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let said = stderr(&out);
        assert!(
            said.contains("similar") || said.contains("did you mean"),
            "{args:?}: {said}"
        );
        assert!(said.contains(meant), "{args:?}: {said}");
    }
}

/// `set` over an existing file says what it replaced, lines and prompt
/// tokens before → after, on stderr, and names the diff command, which
/// works as given.
#[test]
fn set_says_what_it_replaced_and_how_to_see_the_diff() {
    let env = Env::empty();
    env.trust();
    let set = [
        "prompts",
        "set",
        "--scope",
        "project",
        "--surface",
        "cli",
        "identity",
        "-",
    ];
    let out = env.vak_stdin(&set, "You are Kite.\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("replaced"),
        "a new file replaces nothing: {}",
        stderr(&out)
    );
    let out = env.vak_stdin(&set, "You are Kite.\nBe brief.\nBe kind.\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("replaced `"), "{said}");
    assert!(said.contains("1 → 3 lines"), "{said}");
    assert!(said.contains("tokens"), "{said}");
    assert!(
        !stdout(&out).contains("replaced"),
        "stdout stays the result"
    );
    let command = said
        .split('`')
        .find(|part| part.starts_with("vak prompts diff"))
        .unwrap_or_else(|| panic!("no diff command in {said}"));
    assert_eq!(
        command,
        "vak prompts diff --scope project --surface cli identity"
    );
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let diff = env.ok(&args);
    assert!(diff.contains("+Be brief."), "{diff}");
}

/// `prompts log` prints every digest at one length, in full: the before
/// and after of each change alike, each one `revert --to` takes as it is.
#[test]
fn log_prints_every_digest_in_full() {
    let env = Env::empty();
    env.trust();
    let set = ["prompts", "set", "--scope", "project", "guardrails", "-"];
    for text in ["- one\n", "- two\n", "- three\n"] {
        let out = env.vak_stdin(&set, text);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let log = env.ok(&["prompts", "log", "--scope", "project", "guardrails"]);
    let mut digests = 0;
    for line in log.lines().skip(1) {
        for word in line.split_whitespace() {
            let hexish = word.len() >= 4
                && word
                    .trim_end_matches('…')
                    .chars()
                    .all(|c| c.is_ascii_hexdigit())
                && !word.chars().all(|c| c.is_ascii_digit());
            if hexish {
                assert_eq!(word.len(), 64, "{word} in\n{log}");
                digests += 1;
            }
        }
    }
    assert_eq!(digests, 5, "{log}");
    // The first change's after, as printed, is what revert takes.
    let second_line = log.lines().nth(2).unwrap();
    let before = second_line.split_whitespace().nth(3).unwrap();
    assert_eq!(before.len(), 64, "{log}");
    let out = env.vak(&[
        "prompts",
        "revert",
        "--scope",
        "project",
        "guardrails",
        "--to",
        before,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `explain` names each demoted input once, under `Demoted:`; the closing
/// note only counts them and says how to trust.
#[test]
fn explain_lists_each_demoted_input_once() {
    let env = Env::fixture("cloned-repo");
    let explained = env.ok(&["prompts", "explain"]);
    let source = env.project().join(".vak/prompts/identity.md");
    let source = std::fs::canonicalize(source).unwrap();
    let named = format!("`{}`", source.display());
    assert_eq!(explained.matches(&named).count(), 1, "{explained}");
    assert!(explained.contains("Demoted:"), "{explained}");
    assert!(explained.contains("listed above"), "{explained}");
    assert!(
        explained
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .contains("vak trust"),
        "{explained}"
    );
    // `show` has no list above, so its note still names them.
    let shown = env.ok(&["prompts", "show"]);
    assert_eq!(shown.matches(&named).count(), 1, "{shown}");
}

/// A revert to the text the file already holds writes nothing and records
/// no version (`recorded: false`), as a save of the same text does.
#[test]
fn a_revert_that_changes_nothing_records_no_version() {
    let env = Env::empty();
    env.trust();
    let set = ["prompts", "set", "--scope", "project", "guardrails", "-"];
    assert!(env.vak_stdin(&set, "- one\n").status.success());
    let log = env.json(&["prompts", "log", "--scope", "project", "guardrails"]);
    let now = log["versions"][0]["after"].as_str().unwrap().to_owned();
    let revert = env.json(&[
        "prompts",
        "revert",
        "--scope",
        "project",
        "guardrails",
        "--to",
        &now,
    ]);
    assert_eq!(revert["recorded"], false, "{revert}");
    assert_eq!(revert["digest"], revert["previous"], "{revert}");
    let log = env.json(&["prompts", "log", "--scope", "project", "guardrails"]);
    assert_eq!(log["versions"].as_array().unwrap().len(), 1, "{log}");
}

/// The default home `~/vak-home` is not made silently: the command that
/// creates it says so on stderr, once.
#[test]
fn creating_the_default_home_is_said_once() {
    let env = Env::fixture("myproj");
    let user = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut command = env.command(args);
        command.env_remove("VAK_HOME").env("HOME", user.path());
        output_within(&mut command, HANG)
    };
    // Reading creates nothing and says nothing.
    let out = run(&["prompts", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("created the vak home"),
        "{}",
        stderr(&out)
    );
    let out = run(&["trust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let home = user.path().join("vak-home");
    assert!(home.is_dir());
    let said = stderr(&out);
    assert!(
        said.contains(&format!("created the vak home `{}`", home.display())),
        "{said}"
    );
    assert!(!stdout(&out).contains("created"), "stdout stays the result");
    let out = run(&["untrust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("created the vak home"),
        "{}",
        stderr(&out)
    );
}

/// On a terminal, long-output commands go through the pager (`$PAGER`;
/// `less -FRX` by default); `--no-pager`, `PAGER=cat` or a pipe print
/// straight out.
#[test]
fn long_output_is_paged_on_a_terminal_only() {
    let env = Env::fixture("myproj");
    env.trust();
    let set = ["prompts", "set", "--scope", "project", "guardrails", "-"];
    assert!(env.vak_stdin(&set, "- one\n").status.success());
    assert!(env.vak_stdin(&set, "- two\n").status.success());
    let pager = [("PAGER", "sed 's/^/paged: /'")];
    let history = ["--scope", "project", "guardrails"];
    for args in [
        vec!["prompts", "show"],
        vec!["prompts", "explain"],
        [&["prompts", "log"][..], &history[..]].concat(),
        [&["prompts", "diff"][..], &history[..]].concat(),
        vec!["trust", "--preview"],
    ] {
        let (shown, code) = on_terminal(&env, &args, "", &pager);
        assert_eq!(code, Some(0), "{args:?}: {shown}");
        assert!(
            shown.lines().any(|l| l.starts_with("paged: ")),
            "{args:?}: {shown}"
        );
        let mut plain = args.clone();
        plain.push("--no-pager");
        let (shown, code) = on_terminal(&env, &plain, "", &pager);
        assert_eq!(code, Some(0), "{plain:?}: {shown}");
        assert!(!shown.contains("paged: "), "{plain:?}: {shown}");
        let (shown, _) = on_terminal(&env, &args, "", &[("PAGER", "cat")]);
        assert!(
            !shown.contains("paged: ") && !shown.is_empty(),
            "{args:?}: {shown}"
        );
        // Piped: never paged.
        let mut piped = env.command(&args);
        piped.env("PAGER", pager[0].1);
        let out = output_within(&mut piped, HANG);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains("paged: "), "{args:?}");
    }
    // Without $PAGER, `less -FRX` (here a stand-in named less on PATH).
    let bin = tempfile::tempdir().unwrap();
    write(
        &bin.path().join("less"),
        "#!/bin/sh\necho \"less $*\"; cat >/dev/null\n",
    );
    std::process::Command::new("chmod")
        .args(["+x", bin.path().join("less").to_str().unwrap()])
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap()
    );
    let (shown, code) = on_terminal(
        &env,
        &["prompts", "show"],
        "",
        &[("PATH", &path), ("PAGER", "")],
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        !shown.contains("less -FRX"),
        "an empty PAGER is no pager: {shown}"
    );
    let (shown, code) = on_terminal_without(
        &env,
        &["prompts", "show"],
        &[("PATH", &path)],
        &["PAGER", "VAK_PAGER"],
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("less -FRX"), "{shown}");
}

/// Long work draws a progress line on stderr when that is a terminal, and
/// erases it when done; piped or to a file, stderr gets none of it.
#[test]
fn progress_shows_on_a_terminal_stderr_only() {
    let env = Env::fixture("myproj");
    let errors = env.project().join("stderr.txt");
    let to_file = format!("2>{}", shell_quote(errors.to_str().unwrap()));
    let cases: [(&[&str], &str); 2] = [
        (&["trust", "--preview", "--no-pager"], "composing chains: 1"),
        (
            &[
                "prompts",
                "set",
                "--scope",
                "shared",
                "guardrails",
                "--file",
                "guard.md",
            ],
            "budgeting every chain this change reaches…",
        ),
    ];
    write(&env.project().join("guard.md"), "- one\n");
    for (args, line) in cases {
        let (shown, code) = on_terminal(&env, args, "", &[]);
        assert_eq!(code, Some(0), "{args:?}: {shown}");
        assert!(shown.contains(line), "{args:?}: {shown:?}");
        // Erased once done: the line is followed by `\r ESC [ K`.
        assert!(shown.contains("\r\u{1b}[K"), "{args:?}: {shown:?}");
        // stdout on the terminal, stderr to a file: no progress in it.
        let (shown, code) = on_terminal(&env, args, &to_file, &[]);
        assert_eq!(code, Some(0), "{args:?}: {shown}");
        let said = std::fs::read_to_string(&errors).unwrap();
        assert!(
            !said.contains(line) && !said.contains('\r'),
            "{args:?}: {said:?}"
        );
        assert!(!shown.contains(line), "{args:?}: {shown:?}");
    }
    // Piped altogether: nothing either.
    let out = env.vak(&["trust", "--preview"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("composing chains"),
        "{}",
        stderr(&out)
    );
}

/// `store import` counts the sessions it copies on a terminal's stderr.
/// Needs PostgreSQL (`VAK_TEST_PG_URL`); skipped without it.
#[test]
fn store_import_shows_its_progress_on_a_terminal() {
    let Some(url) = crate::gateway_scale::pg_url() else {
        return;
    };
    let db = crate::gateway_scale::scratch_database(&url, "importprogress");
    let env = Env::fixture("myproj");
    for _ in 0..3 {
        env.ok(&["session", "new"]);
    }
    env.ok(&["store", "migrate", "--store", &db]);
    let (shown, code) = on_terminal(
        &env,
        &["store", "import", "--from", "file", "--store", &db],
        "",
        &[],
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("copying sessions: 3/3"), "{shown:?}");
    let out = env.vak(&["store", "import", "--from", "file", "--store", &db]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("copying sessions"),
        "{}",
        stderr(&out)
    );
}
