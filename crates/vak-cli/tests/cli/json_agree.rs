//! The CLI's `--format json` and the admin API answer the same concept
//! with the same document: both run here on one home and one project, and
//! every field they share must be equal. The fields only one side has are
//! pinned too, so a difference cannot creep in unannounced.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::common::*;
use crate::history_store::Admin;

/// The object's keys.
fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// Assert `a` and `b` hold equal values for every key in `shared`.
fn agree(what: &str, a: &Value, b: &Value, shared: &[&str]) {
    for key in shared {
        assert!(a.get(key).is_some(), "{what}: the CLI has no `{key}`: {a}");
        assert_eq!(
            a[key], b[key],
            "{what}: `{key}` differs\nCLI {a}\nadmin {b}"
        );
    }
}

fn set(env: &Env, block: &str, text: &str) -> Value {
    let out = env.vak_stdin(
        &[
            "prompts", "set", "--scope", "project", block, "--format", "json", "-",
        ],
        text,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_save_its_versions_their_diff_and_a_reset_read_the_same_from_both() {
    let env = Env::fixture("myproj");
    env.trust();
    let admin = Admin::start(&env, "file");

    // A save from the terminal, then one from the page over it.
    let cli = set(&env, "identity", "You are the terminal's.\n");
    assert_eq!(
        keys(&cli),
        BTreeSet::from([
            "block",
            "path",
            "digest",
            "previous",
            "tokens",
            "tokens_before",
            "tokens_after",
            "over_cap",
            "recorded",
        ]),
        "{cli}"
    );
    let (status, page) = admin.send(
        "PUT",
        "/api/layers/identity?scope=project",
        Some(&json!({"text": "You are the page's.\n", "if_digest": cli["digest"]})),
    );
    assert_eq!(status, 200, "{page}");
    // The page's URL names the block; it shows lints and why a text does
    // not apply inline, and counts before and after as whole summaries.
    assert_eq!(
        keys(&page),
        BTreeSet::from([
            "path",
            "digest",
            "previous",
            "tokens",
            "tokens_before",
            "tokens_after",
            "over_cap",
            "recorded",
            "unrecorded",
            "lints",
            "not_applied",
        ]),
        "{page}"
    );
    agree("save", &cli, &page, &["path", "over_cap", "recorded"]);
    assert_eq!(page["previous"], cli["digest"]);
    // The page counts from where the terminal's save left the prefix.
    assert_eq!(page["tokens_before"]["prefix"], cli["tokens_after"]);
    assert_eq!(page["tokens_after"], page["tokens"]);
    assert_eq!(cli["tokens_after"], cli["tokens"]["prefix"]);

    // The versions both saves kept, listed by both.
    let log = env.json(&["prompts", "log", "--scope", "project", "identity"]);
    let (status, history) = admin.send("GET", "/api/history/identity?scope=project", None);
    assert_eq!(status, 200, "{history}");
    agree("versions", &log, &history, &["block", "versions"]);
    assert_eq!(log["versions"].as_array().map(Vec::len), Some(2), "{log}");
    assert_eq!(history["current_digest"], page["digest"]);

    // The diff between them.
    let (from, to) = (
        cli["digest"].as_str().unwrap(),
        page["digest"].as_str().unwrap(),
    );
    let diff = env.json(&[
        "prompts", "diff", "--scope", "project", "identity", "--from", from, "--to", to,
    ]);
    let (status, page_diff) = admin.send(
        "GET",
        &format!("/api/history/identity/diff?scope=project&from={from}&to={to}"),
        None,
    );
    assert_eq!(status, 200, "{page_diff}");
    agree("diff", &diff, &page_diff, &["from", "to", "diff"]);
    assert!(
        diff["diff"]
            .as_str()
            .unwrap()
            .contains("+You are the page's."),
        "{diff}"
    );
    assert_eq!(keys(&page_diff), BTreeSet::from(["from", "to", "diff"]));
    assert_eq!(diff["path"], cli["path"]);

    // A reset from the page, and the same reset from the terminal: the
    // same file removed, the same prefix after.
    let (status, page_reset) = admin.send(
        "DELETE",
        &format!("/api/layers/identity?scope=project&if_digest={to}"),
        None,
    );
    assert_eq!(status, 200, "{page_reset}");
    let again = set(&env, "identity", "You are the page's.\n");
    let cli_reset = env.json(&["prompts", "reset", "--scope", "project", "identity"]);
    agree(
        "reset",
        &cli_reset,
        &page_reset,
        &["path", "removed", "tokens", "over_cap", "recorded"],
    );
    assert_eq!(cli_reset["removed"], again["digest"]);
    assert_eq!(cli_reset["previous"], cli_reset["removed"]);
    assert_eq!(cli_reset["digest"], Value::Null);
    assert!(page_reset.get("digest").is_none(), "{page_reset}");
}

#[test]
fn a_trust_preview_reads_the_same_from_both_but_the_page_names_no_path() {
    let env = Env::fixture("myproj");
    let admin = Admin::start(&env, "file");
    let cli = env.json(&["trust", "--preview"]);
    let (status, page) = admin.send("GET", "/api/trust-preview", None);
    assert_eq!(status, 200, "{page}");
    let shared = [
        "blocks",
        "elsewhere",
        "not_budgeted",
        "unproven",
        "tokens",
        "over",
        "over_chains",
        "config_keys",
    ];
    agree("trust preview", &cli, &page, &shared);
    // Something would change, or the comparison proves little.
    assert!(
        !cli["blocks"].as_array().unwrap().is_empty(),
        "the fixture's project changes a block once trusted: {cli}"
    );
    let only = |all: &Value| -> BTreeSet<String> {
        keys(all)
            .into_iter()
            .filter(|k| !shared.contains(k))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        only(&cli),
        BTreeSet::from(["project".into(), "chain".into()])
    );
    assert_eq!(only(&page), BTreeSet::from(["trusted".into()]));
    assert_eq!(page["trusted"], false);
}

#[test]
fn a_sessions_changes_read_the_same_as_the_rotation_the_page_shows() {
    let env = Env::fixture("myproj");
    env.trust();
    let admin = Admin::start(&env, "file");
    let old = env.json(&["session", "new"]);
    let old = old["session_id"].as_str().unwrap().to_owned();
    set(
        &env,
        "identity",
        "You are changed since the session froze.\n",
    );
    let new = env.json(&["session", "new"]);
    let new = new["session_id"].as_str().unwrap().to_owned();

    // What changed since `old` froze is what `new` froze differently.
    let cli = env.json(&["session", "diff", &old]);
    let (status, page) = admin.send("GET", &format!("/api/audit/diff?old={old}&new={new}"), None);
    assert_eq!(status, 200, "{page}");
    let changes = cli["changes"].as_array().unwrap();
    assert!(changes.iter().any(|c| c["block"] == "identity"), "{cli}");
    let (cli, page) = (&cli["changes"], &page["changes"]);
    assert_eq!(cli.as_array().map(Vec::len), page.as_array().map(Vec::len));
    for (a, b) in cli.as_array().unwrap().iter().zip(page.as_array().unwrap()) {
        assert_eq!(keys(a), keys(b));
        let shared: Vec<&str> = keys(a).into_iter().filter(|k| *k != "diff").collect();
        agree("session change", a, b, &shared);
        // The diff's second header names its side: the text `now` for a
        // session, the `new` session's for a rotation; the hunks agree.
        fn body(v: &Value) -> Vec<&str> {
            v["diff"].as_str().unwrap().lines().skip(2).collect()
        }
        assert_eq!(body(a), body(b));
        assert!(a["diff"].as_str().unwrap().contains("(now, "), "{a}");
        assert!(b["diff"].as_str().unwrap().contains("(new, "), "{b}");
    }
}

#[test]
fn the_effective_prompt_reads_the_same_from_both_and_the_page_adds_its_words() {
    let env = Env::fixture("myproj");
    env.trust();
    let admin = Admin::start(&env, "file");
    let cli = env.json(&["prompts", "show"]);
    let (status, page) = admin.send("GET", "/api/prompt", None);
    assert_eq!(status, 200, "{page}");
    agree(
        "prompt",
        &cli,
        &page,
        &[
            "prefix",
            "fingerprint",
            "descriptors",
            "demoted",
            "trust",
            "capabilities",
            "agent",
        ],
    );
    // The page adds its words to each block, and the budget in full; the
    // terminal adds the scoped rules. The rest of each block is the same.
    let words = ["label", "composition", "summary"];
    let (a, b) = (
        cli["blocks"].as_array().unwrap(),
        page["blocks"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len());
    assert!(!a.is_empty());
    for (a, b) in a.iter().zip(b) {
        for word in words {
            assert!(a.get(word).is_none(), "{a}");
            assert!(b.get(word).is_some(), "{b}");
        }
        let mut b = b.clone();
        for word in words {
            b.as_object_mut().unwrap().remove(word);
        }
        assert_eq!(a, &b);
    }
    assert!(page.get("budget").is_some() && page.get("budget_warnings").is_some());
    assert!(cli.get("budget").is_none() && page.get("scoped_rules").is_none());
    assert!(cli.get("scoped_rules").is_some(), "{cli}");
}

#[test]
fn the_security_log_reads_the_same_from_both() {
    let env = Env::fixture("myproj");
    // Three events, a line that is no record and one of a kind this build
    // does not know: every count has something to agree on.
    let event = |n: usize| {
        format!(
            r#"{{"type":"config-change","at":"2026-01-01T00:00:00Z","bot":"b","chat":"c{n}","old_session":"01J0000000OLDLEDGER0000000","new_session":"01J0000000NEWLEDGER0000000"}}"#
        )
    };
    let log = format!(
        "{}\n{}\nnot a record\n{{\"type\":\"from-the-future\",\"at\":\"2026-01-01T00:00:00Z\"}}\n{}\n",
        event(1),
        event(2),
        event(3)
    );
    env.write_home(".vak/audit/security.jsonl", &log);
    let admin = Admin::start(&env, "file");
    let cli = env.json(&["audit", "list", "--limit", "20"]);
    let (status, page) = admin.send("GET", "/api/audit?limit=20", None);
    assert_eq!(status, 200, "{page}");
    let shared = [
        "events",
        "total",
        "limit",
        "skipped_unknown",
        "skipped_lines",
        "warnings",
    ];
    agree("audit", &cli, &page, &shared);
    assert_eq!(cli["events"].as_array().map(Vec::len), Some(3), "{cli}");
    assert_eq!(cli["events"][0]["chat"], "c3", "newest first: {cli}");
    assert!(
        cli["skipped_lines"].as_u64().is_some_and(|n| n > 0),
        "{cli}"
    );
    assert_eq!(keys(&cli), BTreeSet::from(shared));
    assert_eq!(keys(&page).len(), shared.len() + 1);
    assert!(page["path"].is_string(), "{page}");
}
