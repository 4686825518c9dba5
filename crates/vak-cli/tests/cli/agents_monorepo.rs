//! `AGENTS.md` files on a monorepo shaped like the public ones: from the
//! project root down to the working directory, in each directory the first
//! of `AGENTS.override.md` and `AGENTS.md`, rendered root first inside the
//! Operating rules section after the winning operating-rules text, each
//! introduced by `From <path>:`; headings nested under the section, code
//! fences kept as written; the default cap; trust, sessions and drift.
//!
//! The fixture is `fixtures/projects/agents-monorepo`, copied under a `.git`
//! root; the home is made here, with a shared `operating-rules.md` and no
//! config, so the default cap applies.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};
use serde_json::Value;

use crate::common::{Env, copy_tree, fixtures, stderr, stdout, write};

/// The shared operating rules of the test home.
const SHARED_RULE: &str = "Shared rule: keep each pull request under four hundred lines.";

/// Each AGENTS file of the fixture, relative to its root, and its marker.
const ROOT: (&str, &str) = (
    "AGENTS.md",
    "Kestrel: every change in this monorepo names the ticket it closes.",
);
const SERVICES: (&str, &str) = (
    "services/AGENTS.md",
    "Heron: services talk to each other only through the published protobuf contracts.",
);
const PAYMENTS: (&str, &str) = (
    "services/payments/AGENTS.md",
    "Osprey: amounts are integers in minor units, never floats.",
);
const API: (&str, &str) = (
    "services/payments/api/AGENTS.md",
    "Plover: every endpoint is idempotent under a client-supplied key.",
);
const HANDLERS: (&str, &str) = (
    "services/payments/api/handlers/AGENTS.md",
    "Curlew: handlers never open database transactions themselves.",
);
const REFUNDS: (&str, &str) = (
    "services/payments/api/handlers/refunds/AGENTS.md",
    "Dunlin: a refund never exceeds the captured amount it reverses.",
);
const GATEWAY: (&str, &str) = (
    "services/gateway/AGENTS.md",
    "Read `ARCHITECTURE.md` before making middleware changes.",
);
const WEB_OVERRIDE: (&str, &str) = (
    "web/AGENTS.override.md",
    "Avocet: during the freeze, fix only what the release checklist lists.",
);
const WEB_SHADOWED: (&str, &str) = (
    "web/AGENTS.md",
    "Godwit: run the component gallery before touching shared components.",
);

const ALL: [(&str, &str); 9] = [
    ROOT,
    SERVICES,
    PAYMENTS,
    API,
    HANDLERS,
    REFUNDS,
    GATEWAY,
    WEB_OVERRIDE,
    WEB_SHADOWED,
];

/// The deepest directory, five levels down.
const DEEPEST: &str = "services/payments/api/handlers/refunds";

/// Each working directory (relative to the root) and the files that apply
/// there, root first. `web/src` has no file of its own.
fn chains() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        (".", vec![ROOT]),
        ("services", vec![ROOT, SERVICES]),
        ("services/payments", vec![ROOT, SERVICES, PAYMENTS]),
        ("services/payments/api", vec![ROOT, SERVICES, PAYMENTS, API]),
        (
            "services/payments/api/handlers",
            vec![ROOT, SERVICES, PAYMENTS, API, HANDLERS],
        ),
        (
            DEEPEST,
            vec![ROOT, SERVICES, PAYMENTS, API, HANDLERS, REFUNDS],
        ),
        ("services/gateway", vec![ROOT, SERVICES, GATEWAY]),
        ("web", vec![ROOT, WEB_OVERRIDE]),
        ("web/src", vec![ROOT, WEB_OVERRIDE]),
    ]
}

/// A temporary home whose shared operating rules are [`SHARED_RULE`] and
/// whose config sets nothing, and a copy of the fixture under a `.git` root.
fn agents_monorepo() -> Env {
    let env = Env::empty();
    env.write_home(
        ".vak/prompts/operating-rules.md",
        &format!("{SHARED_RULE}\n"),
    );
    copy_tree(&fixtures().join("projects/agents-monorepo"), env.project());
    fs::create_dir(env.project().join(".git")).unwrap();
    env
}

/// The same, trusted with default settings.
fn trusted() -> Env {
    let env = agents_monorepo();
    let out = env.vak(&["trust"]);
    assert_eq!(
        code(&out),
        0,
        "`vak trust` with the default cap: {}",
        stderr(&out)
    );
    env
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn dir(env: &Env, rel: &str) -> PathBuf {
    if rel == "." {
        env.project().to_path_buf()
    } else {
        env.project().join(rel)
    }
}

/// Run `vak` with the working directory `rel` (relative to the root).
fn vak_in(env: &Env, rel: &str, args: &[&str]) -> Output {
    env.command(args)
        .current_dir(dir(env, rel))
        .output()
        .unwrap()
}

fn ok_in(env: &Env, rel: &str, args: &[&str]) -> String {
    let out = vak_in(env, rel, args);
    assert!(
        out.status.success(),
        "vak {args:?} in {rel} failed ({}): {}",
        code(&out),
        stderr(&out)
    );
    stdout(&out)
}

fn show_in(env: &Env, rel: &str) -> Value {
    serde_json::from_str(&ok_in(env, rel, &["prompts", "show", "--format", "json"])).unwrap()
}

fn prefix(json: &Value) -> &str {
    json["prefix"].as_str().unwrap()
}

fn fixture_text(rel: &str) -> String {
    fs::read_to_string(fixtures().join("projects/agents-monorepo").join(rel)).unwrap()
}

/// The byte offset of the line that is exactly `line`, if any.
fn line_offset(text: &str, line: &str) -> Option<usize> {
    let mut offset = 0;
    for l in text.split('\n') {
        if l == line {
            return Some(offset);
        }
        offset += l.len() + 1;
    }
    None
}

/// `path` relative to the project root, whether it is given relative,
/// absolute or absolute through the canonical form of the root.
fn relative_to_root(env: &Env, path: &str) -> String {
    let roots = [
        env.project().to_path_buf(),
        fs::canonicalize(env.project()).unwrap(),
    ];
    for root in &roots {
        if let Ok(rest) = Path::new(path).strip_prefix(root) {
            return rest.to_string_lossy().into_owned();
        }
    }
    path.to_owned()
}

/// Whether `line` names `rel`: its path from the root, or `rel` itself not
/// preceded by a path character (so `AGENTS.md` does not match
/// `services/AGENTS.md`).
fn names(env: &Env, line: &str, rel: &str) -> bool {
    let absolute = [
        env.project().join(rel),
        fs::canonicalize(env.project()).unwrap().join(rel),
    ];
    if absolute
        .iter()
        .any(|a| line.contains(a.to_string_lossy().as_ref()))
    {
        return true;
    }
    line.match_indices(rel).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + rel.len()..].chars().next();
        !matches!(before, Some(c) if c == '/' || c.is_alphanumeric() || c == '.' || c == '_' || c == '-')
            && !matches!(after, Some(c) if c.is_alphanumeric() || c == '/' || c == '_' || c == '-')
    })
}

/// Headings of the parsed Markdown: (level, text).
fn headings(markdown: &str) -> Vec<(HeadingLevel, String)> {
    let mut found = Vec::new();
    let mut current: Option<(HeadingLevel, String)> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => current = Some((level, String::new())),
            Event::End(TagEnd::Heading(_)) => found.extend(current.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, text)) = current.as_mut() {
                    text.push_str(&t);
                }
            }
            _ => {}
        }
    }
    found
}

/// Fenced code blocks of the parsed Markdown: (info string, contents).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut current: Option<(String, String)> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                current = Some((info.to_string(), String::new()));
            }
            Event::End(TagEnd::CodeBlock) => found.extend(current.take()),
            Event::Text(t) => {
                if let Some((_, body)) = current.as_mut() {
                    body.push_str(&t);
                }
            }
            _ => {}
        }
    }
    found
}

/// The source text of each fenced code block of `markdown`, fences included.
fn fenced_sources(markdown: &str) -> Vec<String> {
    Parser::new(markdown)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) => {
                Some(markdown[range].trim_end_matches('\n').to_owned())
            }
            _ => None,
        })
        .collect()
}

/// The level-1/2 heading each non-empty block renders under, in order
/// (identity and the surface blocks have none).
fn fixed_sections(json: &Value) -> Vec<String> {
    json["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| !b["text"].as_str().unwrap_or("").is_empty())
        .filter_map(|b| match b["block"].as_str().unwrap() {
            "operating-rules" => Some("Operating rules".to_owned()),
            "guardrails" => Some("Guardrails".to_owned()),
            "capability-contract" => Some("Capabilities".to_owned()),
            "skills" => Some("Skills".to_owned()),
            "mcp" => Some("MCP servers".to_owned()),
            "agent-instructions" => Some("Agent instructions: role".to_owned()),
            _ => None,
        })
        .collect()
}

#[test]
fn trust_succeeds_with_the_default_cap() {
    let env = agents_monorepo();
    let out = env.vak(&["trust"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Every chain fits the default cap, the deepest included.
    let json = show_in(&env, DEEPEST);
    assert_eq!(json["trust"], "trusted", "{json}");
    assert_eq!(json["tokens"]["cap"], 8192, "{}", json["tokens"]);
    let tokens = json["tokens"]["prefix"].as_u64().unwrap();
    assert!(tokens <= 7_000, "the deepest chain is {tokens} tokens");
}

#[test]
fn every_directory_composes_its_agents_files_root_first() {
    let env = trusted();
    for (rel, chain) in chains() {
        let json = show_in(&env, rel);
        let prefix = prefix(&json);
        // Each file of the chain, introduced by its `From` line, in order.
        let mut last = 0;
        for (path, marker) in &chain {
            let from = line_offset(prefix, &format!("From {path}:"))
                .unwrap_or_else(|| panic!("in {rel}: no line `From {path}:` in\n{prefix}"));
            let at = prefix
                .find(marker)
                .unwrap_or_else(|| panic!("in {rel}: `{path}` not applied:\n{prefix}"));
            assert!(
                from >= last && from < at,
                "in {rel}: `From {path}:` is not just before its text, after the one above it:\n{prefix}"
            );
            last = at;
        }
        assert_eq!(
            prefix.lines().filter(|l| l.starts_with("From ")).count(),
            chain.len(),
            "in {rel}: one `From` line per file:\n{prefix}"
        );
        // Nothing from a sibling directory or a shadowed file.
        for (path, marker) in ALL {
            if !chain.iter().any(|(p, _)| *p == path) {
                assert!(
                    !prefix.contains(marker),
                    "in {rel}: `{path}` applied, but it is not on the way down:\n{prefix}"
                );
            }
        }
        // The user's shared operating rules win over the seed and come
        // first, then the files.
        let shared = prefix
            .find(SHARED_RULE)
            .unwrap_or_else(|| panic!("in {rel}: the shared operating rules are gone:\n{prefix}"));
        let first_from = prefix.find("\nFrom ").unwrap();
        assert!(
            shared < first_from,
            "in {rel}: the shared rules are not before the files"
        );
        let section = prefix.find("## Operating rules\n").unwrap();
        assert!(section < shared, "in {rel}: outside the section");
        let guardrails = prefix.find("## Guardrails\n").unwrap();
        assert!(
            last < guardrails,
            "in {rel}: the files are not inside the Operating rules section"
        );
    }
}

#[test]
fn the_override_wins_in_its_directory() {
    let env = trusted();
    for rel in ["web", "web/src"] {
        let json = show_in(&env, rel);
        let prefix = prefix(&json);
        assert!(prefix.contains(WEB_OVERRIDE.1), "{prefix}");
        assert!(
            prefix.contains("\nFrom web/AGENTS.override.md:\n"),
            "{prefix}"
        );
        assert!(!prefix.contains(WEB_SHADOWED.1), "{prefix}");
        assert!(!prefix.contains("From web/AGENTS.md:"), "{prefix}");
        assert!(prefix.contains(ROOT.1), "{prefix}");
    }
}

#[test]
fn the_prefix_keeps_its_sections_and_readable_markdown() {
    let env = trusted();
    for (rel, chain) in chains() {
        let json = show_in(&env, rel);
        let prefix = prefix(&json);
        let parsed = headings(prefix);
        // Level 1 and 2: exactly the fixed sections, in order.
        let top: Vec<String> = parsed
            .iter()
            .filter(|(level, _)| matches!(level, HeadingLevel::H1 | HeadingLevel::H2))
            .map(|(_, text)| text.clone())
            .collect();
        assert_eq!(top, fixed_sections(&json), "in {rel}:\n{prefix}");
        // Headings inside a file are nested under the section, words kept.
        let root_headings = [
            (
                HeadingLevel::H3,
                "Tallyhall monorepo: guide for coding agents",
            ),
            (HeadingLevel::H4, "Layout"),
            (HeadingLevel::H5, "Environments"),
            (HeadingLevel::H4, "Code style"),
            (HeadingLevel::H5, "Rust"),
        ];
        for (level, text) in root_headings {
            assert!(
                parsed.iter().any(|(l, t)| *l == level && t == text),
                "in {rel}: no {level:?} `{text}` in {parsed:?}"
            );
        }
        // Readable: no backslash-escaped heading or fence.
        for line in prefix.lines() {
            assert!(
                !line.starts_with("\\#")
                    && !line.starts_with("\\```")
                    && !line.starts_with("\\~~~"),
                "in {rel}: escaped line `{line}`"
            );
        }
        // Every fenced block of every file applied is there as written, and
        // parses as the same block.
        let blocks = fenced_blocks(prefix);
        for (path, _) in &chain {
            let text = fixture_text(path);
            for source in fenced_sources(&text) {
                assert!(
                    prefix.contains(&source),
                    "in {rel}: the block of `{path}` is not verbatim:\n{source}"
                );
            }
            for block in fenced_blocks(&text) {
                assert!(
                    blocks.contains(&block),
                    "in {rel}: the ```{} block of `{path}` does not parse as a fence",
                    block.0
                );
            }
        }
        // The generated surface line is the only one.
        assert_eq!(
            prefix.lines().filter(|l| l.starts_with("Surface:")).count(),
            1,
            "in {rel}"
        );
    }
}

#[test]
fn explain_lists_each_agents_file_once() {
    let env = trusted();
    for (rel, chain) in chains() {
        let explain = ok_in(&env, rel, &["prompts", "explain"]);
        for (path, _) in &chain {
            let lines = explain.lines().filter(|l| names(&env, l, path)).count();
            assert_eq!(lines, 1, "in {rel}: `{path}` on {lines} lines:\n{explain}");
        }
    }
}

#[test]
fn a_shared_guardrail_can_be_added_after_trust() {
    let env = trusted();
    let out = env.vak_stdin(
        &["prompts", "set", "--scope", "shared", "guardrails", "-"],
        "- Never force-push.\n",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json = show_in(&env, DEEPEST);
    let prefix = prefix(&json);
    assert!(prefix.contains("Never force-push."), "{prefix}");
    assert!(prefix.contains(REFUNDS.1), "{prefix}");
    // The directory guardrail of `services/payments` still applies.
    assert!(
        prefix.contains("Never print, log or echo a full card number"),
        "{prefix}"
    );
}

#[test]
fn a_session_drifts_when_a_nested_agents_file_changes() {
    let env = trusted();
    let created: Value = serde_json::from_str(&ok_in(
        &env,
        DEEPEST,
        &["session", "new", "--format", "json"],
    ))
    .unwrap();
    let id = created["session_id"].as_str().unwrap().to_owned();

    // Nothing edited: no drift.
    let out = vak_in(
        &env,
        DEEPEST,
        &["exec", "--session", &id, "--message", "hi"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // The depth-3 file changes: drift, naming it.
    write(
        &env.project().join(API.0),
        &format!(
            "{}\nPlover: the idempotency key is now required.\n",
            fixture_text(API.0)
        ),
    );
    let out = vak_in(
        &env,
        DEEPEST,
        &["exec", "--session", &id, "--message", "hi"],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let diff = ok_in(&env, DEEPEST, &["session", "diff", &id]);
    assert!(
        diff.lines().any(|l| names(&env, l, API.0)),
        "the diff does not name `{}`:\n{diff}",
        API.0
    );
}

#[test]
fn an_untrusted_copy_applies_no_agents_file_and_reports_each_once() {
    let env = trusted();
    let out = env.vak(&["untrust"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for (rel, chain) in chains() {
        let json = show_in(&env, rel);
        assert_eq!(json["trust"], "untrusted", "in {rel}");
        let prefix = prefix(&json);
        for (path, marker) in ALL {
            assert!(
                !prefix.contains(marker),
                "in {rel}: `{path}` applied untrusted"
            );
        }
        assert!(!prefix.contains("\nFrom "), "in {rel}:\n{prefix}");
        // The user's own rules still apply.
        assert!(prefix.contains(SHARED_RULE), "in {rel}:\n{prefix}");
        let demoted: Vec<String> = json["demoted"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["source"].as_str())
            .map(|s| relative_to_root(&env, s))
            .collect();
        for (path, _) in &chain {
            let reported = demoted.iter().filter(|s| s.as_str() == *path).count();
            assert_eq!(
                reported, 1,
                "in {rel}: `{path}` reported {reported} times as not applied: {demoted:?}"
            );
        }
    }
}
