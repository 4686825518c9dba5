//! Imports inside block files (`@parts/tone.md` alone on a line), on the
//! real binary: hostile trees first (cycles, escapes, links out, FIFOs,
//! huge and bad files, too deep), then friendly ones (prose `@` stays text,
//! explain and JSON list imported files under their includer, drift names
//! a changed imported file, a save's imports are checked and budgeted).

use std::fs;
use std::os::unix::fs::symlink;
use std::process::Output;

use serde_json::Value;

use crate::common::*;

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

/// `vak prompts show` must refuse: exit 1, nothing on stdout, and stderr
/// naming every one of `names`.
fn refused(env: &Env, names: &[&str]) -> String {
    let out = output_within(&mut env.command(&["prompts", "show"]), HANG);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "refused with exit 1: {err}");
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(err.contains("the prompt is not resolved"), "{err}");
    for name in names {
        assert!(err.contains(name), "names {name}: {err}");
    }
    err
}

/// A home whose shared identity imports `target` on its second line.
fn importing(target: &str) -> Env {
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_home(
        ".vak/prompts/identity.md",
        &format!("You are Ava.\n{target}\n"),
    );
    env.write_home(".vak/token", "TOKEN-SECRET-1234\n");
    env.write_home(".vak/config.toml", "# CONFIG-SECRET-5678\n");
    env
}

#[test]
fn an_import_cycle_is_refused_naming_every_file_in_it() {
    let env = importing("@a.md");
    env.write_home(".vak/prompts/a.md", "A\n@b.md\n");
    env.write_home(".vak/prompts/b.md", "B\n@a.md\n");
    let err = refused(&env, &["identity.md", "makes a cycle", "line 2"]);
    let home = env.home().join(".vak/prompts");
    let (a, b) = (home.join("a.md"), home.join("b.md"));
    let cycle = format!("`{}` → `{}` → `{}`", a.display(), b.display(), a.display());
    assert!(err.contains(&cycle), "{err}");

    // A file importing itself is the shortest cycle.
    let env = importing("@identity.md");
    refused(&env, &["makes a cycle", "identity.md"]);
}

#[test]
fn an_import_escaping_the_layer_is_refused_by_name_and_nothing_of_it_is_read() {
    for (line, why) in [
        ("@../../.vak/token", "goes up with `..`"),
        ("@../token.md", "goes up with `..`"),
        ("@/etc/passwd", "is an absolute path"),
        ("@/etc/hostname.md", "is an absolute path"),
        ("@~/notes.md", "is an absolute path"),
        ("@parts/notes.txt", "does not name a `.md` file"),
        ("@./x.md", "is not a plain relative path"),
    ] {
        let env = importing(line);
        refused(&env, &[line, why]);
    }

    // A link inside the prompts directory leading to the home's config,
    // token or anything outside the prompts directory.
    let env = importing("@cfg.md");
    symlink(
        env.home().join(".vak/config.toml"),
        env.home().join(".vak/prompts/cfg.md"),
    )
    .unwrap();
    let err = refused(&env, &["cfg.md", "leads outside the prompts directory"]);
    assert!(!err.contains("CONFIG-SECRET"), "{err}");

    let env = importing("@parts/token.md");
    symlink(
        env.home().join(".vak"),
        env.home().join(".vak/prompts/parts"),
    )
    .unwrap();
    let err = refused(
        &env,
        &["parts/token.md", "leads outside the prompts directory"],
    );
    assert!(!err.contains("TOKEN-SECRET"), "{err}");

    // The same from a project: its prompts directory is its limit too.
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_project("secret.md", "PROJECT-SECRET\n");
    env.write_project(".vak/prompts/guardrails.md", "- be careful\n@up.md\n");
    symlink(
        env.project().join("secret.md"),
        env.project().join(".vak/prompts/up.md"),
    )
    .unwrap();
    let err = refused(&env, &["guardrails", "up.md", "leads outside"]);
    assert!(!err.contains("PROJECT-SECRET"), "{err}");
}

#[test]
fn a_fifo_a_huge_file_bad_utf8_and_a_missing_file_are_refused_by_name() {
    let env = importing("@pipe.md");
    mkfifo(&env.home().join(".vak/prompts/pipe.md"));
    refused(&env, &["pipe.md", "is not a regular file (a FIFO)"]);

    let env = importing("@huge.md");
    env.write_home(".vak/prompts/huge.md", &"x".repeat(300 * 1024));
    refused(&env, &["huge.md", "larger than the 262144-byte limit"]);

    let env = importing("@bad.md");
    fs::write(env.home().join(".vak/prompts/bad.md"), b"ok \xff\xfe").unwrap();
    refused(&env, &["bad.md", "not valid UTF-8 at byte 3"]);

    let env = importing("@tpyo.md");
    refused(&env, &["tpyo.md", "does not exist"]);
}

#[test]
fn four_levels_of_imports_are_read_and_a_fifth_is_refused() {
    let env = importing("@1.md");
    for level in 1..=4 {
        env.write_home(
            &format!(".vak/prompts/{level}.md"),
            &format!("level {level}\n@{}.md\n", level + 1),
        );
    }
    env.write_home(".vak/prompts/5.md", "level 5\n");
    let err = refused(&env, &["5.md", "is more than 4 imports deep"]);
    assert!(err.contains("4.md"), "{err}");

    env.write_home(".vak/prompts/4.md", "level 4\n");
    let shown = env.ok(&["prompts", "show"]);
    assert!(
        shown.contains("You are Ava.\nlevel 1\nlevel 2\nlevel 3\nlevel 4\n"),
        "{shown}"
    );
}

#[test]
fn at_signs_in_prose_in_code_and_in_agents_md_stay_text() {
    let env = importing("@parts/tone.md");
    env.write_home(
        ".vak/prompts/identity.md",
        "You are Ava.\n  @parts/tone.md  \r\nme@example.com\n@handle\nAsk @alice.\n\\@parts/tone.md\n```\n@parts/tone.md\n```\n",
    );
    env.write_home(".vak/prompts/parts/tone.md", "Be brief.\n");
    env.write_project("AGENTS.md", "Build with make.\n@parts/tone.md\n");
    env.trust();
    let shown = env.ok(&["prompts", "show"]);
    assert!(
        shown.contains(
            "You are Ava.\nBe brief.\nme@example.com\n@handle\nAsk @alice.\n\\@parts/tone.md\n```\n@parts/tone.md\n```"
        ),
        "{shown}"
    );
    assert_eq!(shown.matches("Be brief.").count(), 1, "{shown}");
    // AGENTS.md does not import: its line is text.
    assert!(
        shown.contains("Build with make.\n@parts/tone.md"),
        "{shown}"
    );

    // Nor does a gateway text: a bot's identity line stays as written.
    env.write_home(
        ".vak/gateway/bots.json",
        r#"{"helpdesk": {"prompts": {"identity": "You are Help.\n@parts/tone.md"}}}"#,
    );
    let shown = env.ok(&["prompts", "show", "--bot", "helpdesk"]);
    assert!(shown.contains("You are Help.\n@parts/tone.md"), "{shown}");
    assert!(!shown.contains("Be brief."), "{shown}");
}

#[test]
fn explain_and_json_list_each_imported_file_under_its_includer() {
    let env = importing("@parts/tone.md");
    env.write_home(".vak/prompts/parts/tone.md", "Be brief.\n@style.md\n");
    env.write_home(".vak/prompts/parts/style.md", "Use plain words.\n");
    let prompts = env.home().join(".vak/prompts");
    let (identity, tone, style) = (
        prompts.join("identity.md"),
        prompts.join("parts/tone.md"),
        prompts.join("parts/style.md"),
    );

    let explain = env.ok(&["prompts", "explain"]);
    let listed = format!(
        "shared {}\n{:<20}     imports {}\n{:<20}     imports {}\n",
        identity.display(),
        "",
        tone.display(),
        "",
        style.display()
    );
    assert!(explain.contains(&listed), "{explain}");

    let json = env.json(&["prompts", "show"]);
    let block = json["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["block"] == "identity")
        .unwrap();
    let imports: Vec<(&str, &str)> = block["imports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["source"].as_str().unwrap(), i["by"].as_str().unwrap()))
        .collect();
    let id = identity.to_str().unwrap();
    assert_eq!(
        imports,
        [(tone.to_str().unwrap(), id), (style.to_str().unwrap(), id)]
    );
    // Each imported file is a descriptor of its own, after its includer's.
    let sources: Vec<&str> = json["descriptors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["block"] == "identity")
        .filter_map(|d| d["source"].as_str())
        .collect();
    assert_eq!(
        sources,
        [id, tone.to_str().unwrap(), style.to_str().unwrap()]
    );
    assert!(
        json["prefix"]
            .as_str()
            .unwrap()
            .contains("You are Ava.\nBe brief.\nUse plain words.")
    );
}

/// The drift table, for an imported file: `exec` fails closed naming it,
/// `session diff` shows its change, a chat rotates.
#[test]
fn a_change_in_an_imported_file_is_drift() {
    let env = Env::fixture("myproj");
    env.trust();
    env.write_project(
        ".vak/prompts/identity.md",
        "You are Vak.\n@parts/persona.md\n",
    );
    env.write_project(".vak/prompts/parts/persona.md", "You speak English.\n");
    let guardrails = env.project().join(".vak/prompts/guardrails.md");
    let rules = fs::read_to_string(&guardrails).unwrap();
    write(&guardrails, &format!("{rules}\n@parts/extra.md\n"));
    env.write_project(
        ".vak/prompts/parts/extra.md",
        "- Never deploy on Fridays.\n",
    );
    let created = env.json(&["session", "new"]);
    let id = created["session_id"].as_str().unwrap().to_owned();
    let chat = env.json(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "hi",
    ]);

    env.write_project(".vak/prompts/parts/persona.md", "You speak Hindi.\n");
    let out = env.vak(&["exec", "--session", &id, "--message", "next"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 3, "{err}");
    assert!(err.contains("parts/persona.md"), "{err}");
    assert!(err.contains("identity (project"), "{err}");

    let diff = env.ok(&["session", "diff", &id]);
    assert!(diff.contains("parts/persona.md"), "{diff}");
    assert!(diff.contains("-You speak English."), "{diff}");
    assert!(diff.contains("+You speak Hindi."), "{diff}");

    // The bot's own identity shadows the project's in its chats: that
    // import is not in force there, so its change is no drift for a chat.
    let again = env.json(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "again",
    ]);
    assert_eq!(again["outcome"], "continued", "{again}");
    env.write_project(".vak/prompts/parts/extra.md", "- Never deploy.\n");
    let again = env.json(&[
        "gateway", "deliver", "--bot", "helpdesk", "--chat", "42", "--text", "again",
    ]);
    assert_eq!(again["outcome"], "rotated", "{again}");
    let changes = again["changes"].to_string();
    assert!(changes.contains("parts/extra.md"), "{changes}");
    assert_ne!(again["session_id"], chat["session_id"]);
}

#[test]
fn an_import_is_trusted_exactly_as_its_includer() {
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_project(".vak/prompts/identity.md", "@who.md\n");
    env.write_project(".vak/prompts/who.md", "You are ROOTKIT.\n");
    env.write_project(".vak/prompts/guardrails.md", "- be careful\n@more.md\n");
    env.write_project(".vak/prompts/more.md", "- never push to main\n");

    let json = env.json(&["prompts", "show"]);
    let prefix = json["prefix"].as_str().unwrap();
    assert!(!prefix.contains("ROOTKIT"), "{prefix}");
    assert!(prefix.contains("- never push to main"), "{prefix}");
    let demoted: Vec<&str> = json["demoted"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["block"].as_str())
        .collect();
    assert!(demoted.contains(&"identity"), "{json}");
    let sources: Vec<&str> = json["descriptors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["source"].as_str())
        .collect();
    assert!(
        sources.iter().any(|s| s.ends_with("/more.md")),
        "{sources:?}"
    );
    assert!(
        !sources.iter().any(|s| s.ends_with("/who.md")),
        "{sources:?}"
    );

    // A demoted file's refused import is named, but stops nothing.
    env.write_project(".vak/prompts/identity.md", "@../../etc/x.md\n");
    let out = env.vak(&["prompts", "show"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("not applied: the file is demoted"));

    // Trusted, the import applies.
    env.write_project(".vak/prompts/identity.md", "@who.md\n");
    env.trust();
    assert!(env.ok(&["prompts", "show"]).contains("You are ROOTKIT."));
}

#[test]
fn a_save_whose_import_cannot_be_read_is_refused_and_one_that_can_is_budgeted() {
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    env.trust();
    env.set_cap(3000);
    let file = env.project().join("identity.md");
    write(&file, "You are Vak.\n@missing.md\n");
    let out = env.vak(&[
        "prompts",
        "set",
        "--scope",
        "project",
        "identity",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("missing.md"), "{}", stderr(&out));
    assert!(!env.project().join(".vak/prompts/identity.md").exists());

    // An import that pushes the prompt over the cap is refused as over it.
    let big: String = (0..4000).map(|i| format!("word{i} ")).collect();
    env.write_project(".vak/prompts/big.md", &big);
    write(&file, "You are Vak.\n@big.md\n");
    let out = env.vak(&[
        "prompts",
        "set",
        "--scope",
        "project",
        "identity",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));

    env.write_project(".vak/prompts/small.md", "You answer in French.\n");
    write(&file, "You are Vak.\n@small.md\n");
    env.ok(&[
        "prompts",
        "set",
        "--scope",
        "project",
        "identity",
        "--file",
        file.to_str().unwrap(),
    ]);
    let json: Value = env.json(&["prompts", "show"]);
    assert!(
        json["prefix"]
            .as_str()
            .unwrap()
            .contains("You are Vak.\nYou answer in French.")
    );
}

/// Every directory layer imports from its own prompts directory: a
/// surface sub-layer, an agent role (whose text becomes agent
/// instructions) and a monorepo directory below the root.
#[test]
fn sub_layers_and_directory_layers_import_from_their_own_prompts_directory() {
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_home(".vak/prompts/surface/cli/surface-note.md", "@note.md\n");
    env.write_home(
        ".vak/prompts/surface/cli/note.md",
        "The terminal is narrow.\n",
    );
    env.write_home(".vak/prompts/agents/reviewer/identity.md", "@focus.md\n");
    env.write_home(
        ".vak/prompts/agents/reviewer/focus.md",
        "Review for correctness first.\n",
    );
    env.write_project("services/pay/.vak/prompts/guardrails.md", "@money.md\n");
    env.write_project(
        "services/pay/.vak/prompts/money.md",
        "- Store money as integer cents.\n",
    );
    env.trust();

    let shown = env.ok(&[
        "prompts",
        "show",
        "--agent",
        "reviewer",
        "--dir",
        "services/pay",
    ]);
    for text in [
        "The terminal is narrow.",
        "Review for correctness first.",
        "- Store money as integer cents.",
    ] {
        assert!(shown.contains(text), "{text}: {shown}");
    }
    let explain = env.ok(&[
        "prompts",
        "explain",
        "--agent",
        "reviewer",
        "--dir",
        "services/pay",
    ]);
    for file in [
        "cli/note.md",
        "reviewer/focus.md",
        "pay/.vak/prompts/money.md",
    ] {
        assert!(explain.contains(file), "{file}: {explain}");
    }

    // A directory layer's import may not reach the root's prompts
    // directory: each layer is its own.
    env.write_project(
        "services/pay/.vak/prompts/guardrails.md",
        "@../../../../.vak/prompts/x.md\n",
    );
    let out = env.vak(&["prompts", "show", "--dir", "services/pay"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("goes up with `..`"),
        "{}",
        stderr(&out)
    );
}

/// A store that holds the home side carries imported files too: imported
/// from one home, written to a node with an empty one, and in force in
/// that node's chats. Needs PostgreSQL (`VAK_TEST_PG_URL`); skipped
/// without it.
#[test]
fn an_imported_file_travels_through_a_shared_store() {
    let Some(base) = crate::gateway_scale::pg_url() else {
        return;
    };
    let url = crate::gateway_scale::scratch_database(&base, "imports");
    let operator = Env::fixture("myproj");
    let guardrails = operator.home().join(".vak/prompts/guardrails.md");
    let rules = fs::read_to_string(&guardrails).unwrap();
    write(&guardrails, &format!("{rules}\n@parts/extra.md\n"));
    operator.write_home(
        ".vak/prompts/parts/extra.md",
        "- Never deploy on Fridays.\n",
    );
    operator.ok(&["store", "migrate", "--store", &url]);
    let secret = operator
        .ok(&["gateway", "secret", "helpdesk"])
        .trim()
        .to_owned();
    let imported = operator.json(&["store", "import", "--from", "file", "--store", &url]);
    assert_eq!(
        imported["home_files"], 10,
        "the fixture's 9 and one imported file: {imported}"
    );

    let node = Env::empty();
    let served = crate::gateway_service::serve(&node, &["--store", &url]);
    assert_eq!(
        fs::read_to_string(node.home().join(".vak/prompts/parts/extra.md")).unwrap(),
        "- Never deploy on Fridays.\n"
    );
    let path = "/v1/bots/helpdesk/chats/42/messages";
    let body = serde_json::json!({ "text": "hi" }).to_string();
    let (status, answer) = crate::gateway_service::post(
        &served.addr,
        path,
        &crate::gateway_service::signed(&secret, path, &body),
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["request"]["prefix"]
            .as_str()
            .unwrap()
            .contains("- Never deploy on Fridays."),
        "{answer}"
    );
}

/// A hidden character in an imported file is removed and warned about
/// naming that file, not the file that imports it.
#[test]
fn a_hidden_character_in_an_imported_file_is_named_by_that_file() {
    let env = importing("@parts/tone.md");
    env.write_home(".vak/prompts/parts/tone.md", "Be\u{202e} brief.\n");
    let out = env.vak(&["prompts", "show"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(stdout(&out).contains("Be brief."), "{}", stdout(&out));
    assert_eq!(err.matches("U+202E").count(), 1, "{err}");
    assert!(err.contains("parts/tone.md"), "{err}");
}

/// A file block files import is saved through vak like a block file:
/// checked (its path, its text's own imports, every chain its layer
/// reaches against the cap) and versioned; a block file or a rule is
/// pointed at its own save.
#[test]
fn an_imported_file_is_saved_checked_and_versioned_like_a_block_file() {
    let env = importing("@parts/tone.md");
    env.write_home(".vak/prompts/parts/tone.md", "Answer briefly.\n");
    let set = |args: &[&str], text: &str| {
        let mut all = vec!["prompts", "imported", "set"];
        all.extend_from_slice(args);
        all.push("-");
        env.vak_stdin(&all, text)
    };
    let saved = set(
        &["--scope", "shared", "parts/tone.md"],
        "Answer in short sentences.\n",
    );
    assert_eq!(code(&saved), 0, "{}", stderr(&saved));
    assert_eq!(
        fs::read_to_string(env.home().join(".vak/prompts/parts/tone.md")).unwrap(),
        "Answer in short sentences.\n"
    );
    let shown = env.vak(&["prompts", "show"]);
    assert!(stdout(&shown).contains("Answer in short sentences."));
    let log = env.vak(&[
        "prompts",
        "imported",
        "log",
        "--scope",
        "shared",
        "parts/tone.md",
        "--format",
        "json",
    ]);
    let log: Value = serde_json::from_str(&stdout(&log)).unwrap();
    assert_eq!(log["versions"].as_array().unwrap().len(), 1, "{log}");
    // The same text again changes nothing and records nothing.
    let again = set(
        &["--scope", "shared", "parts/tone.md"],
        "Answer in short sentences.\n",
    );
    assert!(stdout(&again).contains("unchanged"), "{}", stdout(&again));

    // Not an imported file: pointed at the right save, nothing written.
    for (file, says) in [
        ("identity.md", "vak prompts set"),
        ("agents/reviewer/guardrails.md", "vak prompts set"),
        ("rules/payments.md", "vak prompts rule set"),
        ("../token.md", "goes up with `..`"),
        ("parts/notes.txt", "does not name a `.md` file"),
    ] {
        let out = set(&["--scope", "shared", file], "x\n");
        assert_eq!(code(&out), 2, "{file}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{file}: {}", stderr(&out));
    }
    // A text whose own import cannot be read: exit 1, nothing written.
    let out = set(&["--scope", "shared", "parts/tone.md"], "@missing.md\n");
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("missing.md"), "{}", stderr(&out));

    // Over the cap on a chain the home's layer reaches (a role's): exit 4,
    // the file as it was.
    env.write_home(
        ".vak/prompts/agents/reviewer/guardrails.md",
        &(0..150)
            .map(|i| format!("- review rule {i}: never merge without a second look\n"))
            .collect::<String>(),
    );
    let role = env.vak(&[
        "prompts", "check", "--agent", "reviewer", "--format", "json",
    ]);
    let role: Value = serde_json::from_str(&stdout(&role)).unwrap();
    let tokens = role["tokens"]["prefix"]
        .as_u64()
        .unwrap_or_else(|| panic!("{role}"));
    env.write_home(
        ".vak/config.toml",
        &format!("[prompts]\nmax_tokens = {}\n", tokens + 100),
    );
    let long: String = (0..120)
        .map(|i| format!("Say point {i} of the house style plainly.\n"))
        .collect();
    let out = set(&["--scope", "shared", "parts/tone.md"], &long);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(stderr(&out).contains("reviewer"), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(env.home().join(".vak/prompts/parts/tone.md")).unwrap(),
        "Answer in short sentences.\n"
    );
}

/// The fix for a missing import can be saved through vak: the save is
/// refused only for what its own text breaks, never for the broken state
/// it repairs, nor for another file's broken import.
#[test]
fn saving_the_missing_imported_file_repairs_the_prompt() {
    let env = importing("@parts/missing.md");
    refused(&env, &["parts/missing.md", "does not exist"]);
    // Another layer's file saves while the shared identity is broken.
    let other = env.vak_stdin(
        &[
            "prompts", "imported", "set", "--scope", "project", "notes.md", "-",
        ],
        "A project note.\n",
    );
    assert_eq!(code(&other), 0, "{}", stderr(&other));
    let fixed = env.vak_stdin(
        &[
            "prompts",
            "imported",
            "set",
            "--scope",
            "shared",
            "parts/missing.md",
            "-",
        ],
        "Answer briefly.\n",
    );
    assert_eq!(code(&fixed), 0, "{}", stderr(&fixed));
    let shown = env.vak(&["prompts", "show"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert!(
        stdout(&shown).contains("Answer briefly."),
        "{}",
        stdout(&shown)
    );
}

/// Saving an imported file never writes through what a hostile home holds:
/// a directory on the way linked out of the home, a FIFO at the name, a
/// name with control or bidi characters; each refused, nothing written
/// outside, no hang.
#[test]
fn an_imported_file_save_refuses_links_fifos_and_forged_names() {
    let env = importing("@parts/tone.md");
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), env.home().join(".vak/prompts/parts")).unwrap();
    let text = env.tmp.path().join("imported-text.md");
    fs::write(&text, "Answer briefly.\n").unwrap();
    let text = text.to_str().unwrap().to_owned();
    let set = |file: &str| {
        output_within(
            &mut env.command(&[
                "prompts", "imported", "set", "--scope", "shared", file, "--file", &text,
            ]),
            HANG,
        )
    };
    let out = set("parts/tone.md");
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(stderr(&out).contains("leads outside"), "{}", stderr(&out));
    assert!(
        fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing outside"
    );

    let fifo = env.home().join(".vak/prompts/fifo.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let out = set("fifo.md");
    assert_ne!(code(&out), 0);
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );

    for forged in ["bad\u{202e}name.md", "line\nbreak.md", "tab\tname.md"] {
        let out = set(forged);
        assert_eq!(code(&out), 2, "{forged:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains('\u{202e}'),
            "escaped: {}",
            stderr(&out)
        );
    }
}
