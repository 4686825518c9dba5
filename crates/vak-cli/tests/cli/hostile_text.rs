//! Hostile and careless text on the real binary: a
//! formatting-only edit is not drift, adding a skill reports that skill
//! only, the user's own `#general` line is kept, hidden characters are
//! warned about once per file, and large guardrail files stay linear.

use std::fs;

use serde_json::Value;

use crate::common::{Env, HANG, output_within, stderr, stdout};

fn new_session(env: &Env) -> String {
    env.json(&["session", "new"])["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn trusted_myproj() -> Env {
    let env = Env::fixture("myproj");
    env.trust();
    env
}

fn block_text(json: &Value, block: &str) -> String {
    json["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["block"] == block)
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn warnings(json: &Value) -> Vec<String> {
    json["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn trailing_newlines_and_crlf_are_not_drift() {
    let env = trusted_myproj();
    let before = env.json(&["prompts", "show"]);
    let id = new_session(&env);

    let identity = env.project().join(".vak/prompts/identity.md");
    let text = fs::read_to_string(&identity).unwrap();
    fs::write(&identity, format!("{text}\n\n")).unwrap();
    let guardrails = env.home().join(".vak/prompts/guardrails.md");
    let text = fs::read_to_string(&guardrails).unwrap();
    fs::write(&guardrails, text.replace('\n', "\r\n")).unwrap();

    let after = env.json(&["prompts", "show"]);
    assert_eq!(before["prefix"], after["prefix"]);
    assert_eq!(before["fingerprint"], after["fingerprint"]);
    assert!(
        !warnings(&after).iter().any(|w| w.contains("U+")),
        "CRLF line ends are not hidden characters: {:?}",
        warnings(&after)
    );
    let out = env.vak(&["exec", "--session", &id, "--message", "go on"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a formatting-only edit is not drift: {}",
        stderr(&out)
    );
}

#[test]
fn adding_a_skill_reports_only_that_skill() {
    let env = trusted_myproj();
    let id = new_session(&env);
    // Sorts between the home's `changelog` and the project's `release-notes`:
    // paired by position, every skill after it would be reported too.
    env.write_home(
        ".vak/skills/deploy/SKILL.md",
        "---\ndescription: Deploy the service.\n---\n",
    );
    let out = env.vak(&["exec", "--session", &id, "--message", "go on"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    let changes: Vec<&str> = err.lines().filter(|l| l.contains("(runtime")).collect();
    assert_eq!(changes.len(), 1, "{err}");
    assert!(
        changes[0].contains("skills (runtime): added") && changes[0].contains("deploy"),
        "{err}"
    );
}

#[test]
fn a_hash_word_line_of_the_users_guardrail_is_kept() {
    let env = Env::fixture("myproj");
    env.write_home(
        ".vak/prompts/guardrails.md",
        "- Post release notes only in\n#general, never in direct messages.\n",
    );
    let json = env.json(&["prompts", "show"]);
    let guardrails = block_text(&json, "guardrails");
    assert!(
        guardrails.contains("- Post release notes only in\n  #general, never in direct messages."),
        "{guardrails}"
    );
    assert!(
        !warnings(&json).iter().any(|w| w.contains("heading")),
        "{:?}",
        warnings(&json)
    );
}

#[test]
fn a_hidden_character_is_removed_and_warned_once_naming_where() {
    let env = Env::fixture("myproj");
    env.write_project(
        ".vak/prompts/guardrails.md",
        "- Keep it short.\n- Nev\u{202e}er \u{200b}push\u{0}.\u{2028}- Ask first.\n",
    );
    let json = env.json(&["prompts", "show"]);
    let prefix = json["prefix"].as_str().unwrap();
    assert!(prefix.contains("- Never push.\n- Ask first."), "{prefix}");
    let found: Vec<String> = warnings(&json)
        .into_iter()
        .filter(|w| w.contains("U+"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("U+202E at line 2, column 6"), "{found:?}");
    // And people see it too, escaped.
    let out = env.vak(&["prompts", "show"]);
    let err = stderr(&out);
    assert!(err.contains("U+202E at line 2, column 6"), "{err}");
    assert!(!stdout(&out).contains('\u{202e}'));
}

#[test]
fn check_on_two_large_guardrail_files_answers() {
    let env = Env::fixture("myproj");
    let mut shared = String::new();
    let mut project = String::new();
    let mut n = 0u64;
    while shared.len() < 250 * 1024 {
        n += 1;
        let line = format!(
            "- rule {n} about {} things\n",
            n.wrapping_mul(2_654_435_761)
        );
        shared.push_str(&line);
        if n.is_multiple_of(2) {
            project.push_str(&line);
        } else {
            project.push_str(&format!("- project rule {n}\n"));
        }
    }
    env.write_home(".vak/prompts/guardrails.md", &shared);
    env.write_project(".vak/prompts/guardrails.md", &project);
    // How fast is `hostile/two_large_guardrail_files`'s business
    // (BENCHMARKS.md); here `check` must answer, without a panic.
    let out = output_within(&mut env.command(&["prompts", "check"]), HANG);
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_ne!(out.status.code(), Some(101), "{}", stderr(&out));
}
