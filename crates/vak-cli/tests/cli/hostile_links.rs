//! Hostile links, third round: trust follows a file to where it really
//! lives (a link into a nested repository brings nothing of it into the
//! outer project), the home is never a project layer even inside a
//! project, and the home's own files never resolve outside the home.

use std::fs;
use std::os::unix::fs::symlink;

use crate::common::{Env, stderr, stdout};

const NESTED: &str = "NESTED REPOSITORY TEXT";

/// A trusted project with a nested repository `vendor/n` whose
/// `AGENTS.md` and `.vak/prompts` say [`NESTED`].
fn trusted_with_nested() -> Env {
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    fs::create_dir_all(env.project().join("vendor/n/.git")).unwrap();
    env.write_project("vendor/n/AGENTS.md", &format!("{NESTED} (agents)\n"));
    env.write_project(
        "vendor/n/.vak/prompts/identity.md",
        &format!("{NESTED} (identity)\n"),
    );
    env.write_project(
        "vendor/n/.vak/prompts/guardrails.md",
        &format!("- {NESTED} (guardrails)\n"),
    );
    env.trust();
    env
}

fn both(out: &std::process::Output) -> String {
    stdout(out) + &stderr(out)
}

#[test]
fn a_link_into_a_nested_repository_brings_none_of_its_text_into_a_trusted_project() {
    // (link, target relative to the link's directory, --dir to show from)
    let cases: [(&str, &str, Option<&str>); 5] = [
        ("a/AGENTS.md", "../vendor/n/AGENTS.md", Some("a")),
        ("c/AGENTS.override.md", "../vendor/n/AGENTS.md", Some("c")),
        ("b/.vak", "../vendor/n/.vak", Some("b")),
        (".vak", "vendor/n/.vak", None),
        (".vak/prompts", "../vendor/n/.vak/prompts", None),
    ];
    for (link, target, dir) in cases {
        let env = trusted_with_nested();
        let path = env.project().join(link);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, &path).unwrap();
        let mut args = vec!["prompts", "show", "--format", "json"];
        if let Some(dir) = dir {
            args.extend(["--dir", dir]);
        }
        let out = env.vak(&args);
        let all = both(&out);
        assert!(out.status.success(), "{link}: {all}");
        assert!(!all.contains(NESTED), "{link}: nested text came in: {all}");
        assert!(
            all.contains("vendor/n"),
            "{link}: the nested repository is named: {all}"
        );
        assert!(
            all.contains("repository of its own"),
            "{link}: the refusal says why: {all}"
        );
        let link_name = link.rsplit('/').next().unwrap();
        assert!(all.contains(link_name), "{link}: the link is named: {all}");
    }
}

#[test]
fn a_save_or_reset_through_a_link_into_a_nested_repository_is_refused() {
    for link in ["b/.vak", "b/.vak/prompts"] {
        let env = trusted_with_nested();
        let path = env.project().join(link);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let depth = link.matches('/').count();
        let target = format!("{}vendor/n/{}", "../".repeat(depth), &link[2..]);
        symlink(&target, &path).unwrap();
        let nested = env.project().join("vendor/n/.vak/prompts/guardrails.md");
        let before = fs::read_to_string(&nested).unwrap();
        let text = env.project().join("g.md");
        fs::write(&text, "- mine\n").unwrap();
        for args in [
            vec![
                "prompts",
                "set",
                "--scope",
                "project",
                "--dir",
                "b",
                "guardrails",
                "--file",
                text.to_str().unwrap(),
            ],
            vec![
                "prompts",
                "reset",
                "--scope",
                "project",
                "--dir",
                "b",
                "guardrails",
            ],
        ] {
            let out = env.vak(&args);
            let err = stderr(&out);
            assert!(!out.status.success(), "{link} {args:?}: {err}");
            assert!(
                err.contains("repository of its own"),
                "{link} {args:?}: {err}"
            );
            assert!(err.contains("vendor/n"), "{link} {args:?}: {err}");
            assert_eq!(
                fs::read_to_string(&nested).unwrap(),
                before,
                "{link} {args:?}"
            );
        }
    }
}

const HOME_RULE: &str = "HOME GUARDRAIL ONCE";

#[test]
fn a_home_inside_a_project_is_never_read_as_a_project_layer() {
    let env = Env::empty();
    fs::create_dir_all(env.project().join(".git")).unwrap();
    let home = env.project().join("home");
    env.write_project(
        "home/.vak/prompts/guardrails.md",
        &format!("- {HOME_RULE}\n"),
    );
    env.write_project("home/sub/AGENTS.md", "HOME SUB AGENTS\n");
    let vak = |args: &[&str]| env.command(args).env("VAK_HOME", &home).output().unwrap();
    assert!(vak(&["trust"]).status.success());
    for dir in [None, Some("home"), Some("home/sub")] {
        let mut args = vec!["prompts", "show", "--format", "json"];
        if let Some(dir) = dir {
            args.extend(["--dir", dir]);
        }
        let out = vak(&args);
        let all = both(&out);
        if dir.is_none() {
            assert!(out.status.success(), "{all}");
        }
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap_or_default();
        let prefix = json["prefix"].as_str().unwrap_or_default();
        // Guardrails are deduplicated in the text, so the descriptors say
        // whether the home's file was read twice.
        let from_home_as_project = json["descriptors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["layer"] == "project")
            .filter(|d| d["source"].as_str().is_some_and(|s| s.contains("/home/")))
            .count();
        assert_eq!(from_home_as_project, 0, "{dir:?}: {json}");
        assert!(
            prefix.matches(HOME_RULE).count() <= 1,
            "{dir:?}: the home's guardrail twice: {prefix}"
        );
        assert!(!prefix.contains("HOME SUB AGENTS"), "{dir:?}: {prefix}");
        if dir.is_some() {
            assert!(all.contains("vak home"), "{dir:?}: said why: {all}");
        }
    }
    // The walk over every directory layer (the trust preview, the budget
    // of a save) never counts the home as one.
    let out = vak(&["trust", "--preview", "--format", "json"]);
    let preview = stdout(&out);
    assert!(!preview.contains("\"home\""), "{preview}");
    assert!(!preview.contains("home/sub"), "{preview}");
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_home_s_own_vak_linked_out_of_the_home_is_refused_for_trust() {
    let env = Env::empty();
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(outside.path().join("vak")).unwrap();
    // An outside trust store that lists the project.
    let project = fs::canonicalize(env.project()).unwrap();
    fs::write(
        outside.path().join("vak/trust.toml"),
        format!("trusted = [{:?}]\n", project.to_str().unwrap()),
    )
    .unwrap();
    symlink(outside.path().join("vak"), env.home().join(".vak")).unwrap();
    // Read: not honoured.
    let out = env.vak(&["prompts", "show", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap_or_default();
    assert_ne!(json["trust"], "trusted", "{}", both(&out));
    // Written: refused, naming the link and what to do, nothing written.
    fs::remove_file(outside.path().join("vak/trust.toml")).unwrap();
    let out = env.vak(&["trust"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(".vak"), "{err}");
    assert!(err.contains("VAK_HOME"), "{err}");
    assert!(
        files_under(outside.path()).is_empty(),
        "{:?}",
        files_under(outside.path())
    );
}

#[test]
fn the_home_s_stores_linked_out_of_the_home_are_refused() {
    // (the home's directory linked out, the command that writes there)
    let cases: [(&str, &[&str]); 3] = [
        (".vak/sessions", &["session", "new"]),
        (".vak/audit", &["audit", "list"]),
        (
            ".vak/objects",
            &[
                "prompts",
                "set",
                "guardrails",
                "--scope",
                "shared",
                "--file",
            ],
        ),
    ];
    for (dir, args) in cases {
        let env = Env::empty();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(env.home().join(".vak")).unwrap();
        symlink(outside.path(), env.home().join(dir)).unwrap();
        let text = env.project().join("g.md");
        fs::write(&text, "- a guardrail\n").unwrap();
        let mut args = args.to_vec();
        if args.last() == Some(&"--file") {
            args.push(text.to_str().unwrap());
        }
        let out = env.vak(&args);
        let all = both(&out);
        assert!(
            files_under(outside.path()).is_empty(),
            "{dir}: written outside: {:?}: {all}",
            files_under(outside.path())
        );
        assert!(
            all.contains(dir.rsplit('/').next().unwrap()),
            "{dir}: {all}"
        );
        assert!(all.contains("VAK_HOME"), "{dir}: said how to fix: {all}");
    }
}
