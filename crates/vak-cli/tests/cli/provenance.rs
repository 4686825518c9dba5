//! Sources in a session's ledger: each input is named as it always was (a
//! path, a gateway key, a config key, a `builtin:` or `runtime:` name), and
//! what a ledger names is read back as what it is. A file whose path looks
//! like another kind of source stays that file: no string is cut to learn
//! what a source is.

use std::fs;

use serde_json::{Value, json};

use crate::common::Env;

/// A directory name that reads like a built-in name, a config key and a
/// gateway key at once.
const ODD: &str = "builtin:x#mcp.servers.y";

fn ledger_text(env: &Env, id: &str) -> String {
    fs::read_to_string(env.home().join(format!(".vak/sessions/{id}.jsonl"))).unwrap()
}

fn sources(layers: &Value) -> Vec<String> {
    layers
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["source"].as_str().unwrap_or("-").to_owned())
        .collect()
}

/// A chain with every kind of source: the seed, the home and a project
/// directory named like other kinds of source (its guardrails: every
/// contributor of an accumulating block is recorded), its `AGENTS.md`, a bot's and
/// a chat's gateway keys, an MCP server and the runtime's surface line.
fn every_kind() -> Env {
    let env = Env::fixture("myproj");
    env.trust();
    env.write_project(&format!("{ODD}/.vak/prompts/guardrails.md"), "- be odd");
    env.write_project(&format!("{ODD}/AGENTS.md"), "Work oddly.");
    env.write_home(
        ".vak/gateway/bots.json",
        &json!({"helpdesk": {"prompts": {"identity": "You help."}}}).to_string(),
    );
    env.write_home(
        ".vak/gateway/allowlist.json",
        &json!({"helpdesk": {"42": {"prompts": {"guardrails": "- be kind to 42"}}}}).to_string(),
    );
    env.write_home(
        ".vak/config.toml",
        "[mcp.servers.db]\ncommand = \"db-mcp\"\n",
    );
    env
}

fn new_session(env: &Env) -> String {
    let out = env.json(&[
        "session",
        "new",
        "--surface",
        "chat",
        "--bot",
        "helpdesk",
        "--chat",
        "42",
        "--dir",
        ODD,
    ]);
    out["session_id"].as_str().unwrap().to_owned()
}

fn resume(env: &Env, id: &str) -> Value {
    env.json(&["exec", "--session", id, "--message", "still here?"])
}

#[test]
fn a_ledger_names_every_kind_of_source_and_reads_them_back_unchanged() {
    let env = every_kind();
    let id = new_session(&env);
    let text = ledger_text(&env, &id);
    let created: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let frozen = &created["contract"]["prompt_layers"];
    let named = sources(frozen);
    let project = env.project().canonicalize().unwrap();
    let home = env.home().canonicalize().unwrap();
    for want in [
        "builtin:guardrails.md".to_owned(),
        "bots.json#/helpdesk/prompts/identity".to_owned(),
        "allowlist.json#/helpdesk/42/prompts/guardrails".to_owned(),
        format!("{}/.vak/config.toml#mcp.servers.db", home.display()),
        format!("{}/{ODD}/.vak/prompts/guardrails.md", project.display()),
        format!("{}/{ODD}/AGENTS.md", project.display()),
        "runtime:surface/chat".to_owned(),
    ] {
        assert!(named.contains(&want), "no `{want}` in {named:#?}");
    }

    // Read back and written again by `session show`: the same descriptors,
    // source for source.
    let shown = env.json(&["session", "show", &id]);
    assert_eq!(&shown["created"]["contract"]["prompt_layers"], frozen);
    // Resumed on the same inputs: no drift, so every source read back from
    // the ledger paired with the one the loader made now.
    let out = resume(&env, &id);
    assert_eq!(out["decision"], "continue", "{out}");
    assert!(
        out["drift"]["changes"].as_array().unwrap().is_empty(),
        "{out}"
    );
    // The ledger was only appended to: its first record is byte for byte
    // what was written.
    assert!(ledger_text(&env, &id).starts_with(text.lines().next().unwrap()));
}

#[test]
fn a_file_named_like_another_source_drifts_as_that_file() {
    let env = every_kind();
    let id = new_session(&env);
    // Change the oddly named directory's guardrails and add a second MCP
    // server: each is reported as itself, by its own source.
    env.write_project(&format!("{ODD}/.vak/prompts/guardrails.md"), "- be odder");
    env.write_home(
        ".vak/config.toml",
        "[mcp.servers.db]\ncommand = \"db-mcp\"\n\n[mcp.servers.zz]\ncommand = \"zz-mcp\"\n",
    );
    let out = env.vak(&[
        "exec",
        "--session",
        &id,
        "--message",
        "x",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(3), "drift refused exits 3");
    let refused: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(refused["decision"], "refuse");
    let changes = refused["drift"]["changes"].as_array().unwrap();
    let named: Vec<(String, String, String)> = changes
        .iter()
        .map(|c| {
            (
                c["block"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
                c["source"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let project = env.project().canonicalize().unwrap();
    let odd = format!("{}/{ODD}/.vak/prompts/guardrails.md", project.display());
    let home = env.home().canonicalize().unwrap();
    let added = format!("{}/.vak/config.toml#mcp.servers.zz", home.display());
    assert_eq!(
        named,
        [
            ("guardrails".to_owned(), "changed".to_owned(), odd),
            ("mcp".to_owned(), "added".to_owned(), added),
        ],
        "one change per input, each named by its own source"
    );
}
