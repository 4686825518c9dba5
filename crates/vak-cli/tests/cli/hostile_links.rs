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
