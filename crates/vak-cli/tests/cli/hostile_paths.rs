//! Hostile paths (DECISIONS §11 "Paths", "Sizes", "Non-regular files"): a
//! project whose `.vak`, `.vak/prompts` or a sub-layer directory is a
//! symlink into the shared layer or out of the checkout; the trust store as
//! a FIFO, written concurrently, untrusted by a path that no longer
//! resolves; oversized and ill-formed gateway JSON and config.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::{Env, fixtures, stderr, stdout, write};

const SHARED: &str = "- shared guardrail the user wrote\n";

/// An env whose home has shared guardrails at every directory layer a
/// project could be pointed at.
fn env_with_shared() -> Env {
    let env = Env::empty();
    for dir in [
        ".vak/prompts",
        ".vak/prompts/surface/cli",
        ".vak/prompts/agents/reviewer",
    ] {
        env.write_home(&format!("{dir}/guardrails.md"), SHARED);
    }
    env
}

fn shared_intact(env: &Env, dir: &str) {
    let path = env.home().join(dir).join("guardrails.md");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap_or_default(),
        SHARED,
        "{} was deleted or changed",
        path.display()
    );
}

fn mkdirs(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
}

#[test]
fn reset_through_a_symlinked_prompt_dir_never_deletes_the_shared_file() {
    // (project link, its target in the home, reset arguments, shared dir hit)
    let cases: [(&str, &str, &[&str], &str); 4] = [
        (".vak/prompts", ".vak/prompts", &[], ".vak/prompts"),
        (".vak", ".vak", &[], ".vak/prompts"),
        (
            ".vak/prompts/surface/cli",
            ".vak/prompts/surface/cli",
            &["--surface", "cli"],
            ".vak/prompts/surface/cli",
        ),
        (
            ".vak/prompts/agents/reviewer",
            ".vak/prompts/agents/reviewer",
            &["--agent", "reviewer"],
            ".vak/prompts/agents/reviewer",
        ),
    ];
    for (link, target, sub, hit) in cases {
        let env = env_with_shared();
        let link_path = env.project().join(link);
        mkdirs(link_path.parent().unwrap());
        symlink(env.home().join(target), &link_path).unwrap();
        let mut args = vec!["prompts", "reset", "--scope", "project"];
        args.extend_from_slice(sub);
        args.push("guardrails");
        let out = env.vak(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{link}: {err}");
        assert!(err.contains("refusing to remove"), "{link}: {err}");
        assert!(err.contains("leads outside"), "{link}: {err}");
        shared_intact(&env, hit);
        // The admin API's DELETE runs the same core function; a save is
        // refused the same way and writes nothing there.
        let out = env.vak_stdin(
            &[
                &["prompts", "set", "--scope", "project"][..],
                sub,
                &["guardrails", "-"],
            ]
            .concat(),
            "- from the project\n",
        );
        assert_eq!(out.status.code(), Some(1), "{link}: {}", stderr(&out));
        assert!(stderr(&out).contains("leads outside"), "{}", stderr(&out));
        shared_intact(&env, hit);
    }
}

#[test]
fn a_prompt_dir_symlinked_out_of_the_project_is_refused_like_vak() {
    let outside = tempfile::tempdir().unwrap();
    write(
        &outside.path().join("prompts/identity.md"),
        "OUTSIDE-IDENTITY",
    );
    write(
        &outside.path().join("vak/prompts/identity.md"),
        "OUTSIDE-VAK",
    );
    for (link, target) in [(".vak/prompts", "prompts"), (".vak", "vak")] {
        let env = Env::empty();
        let link_path = env.project().join(link);
        mkdirs(link_path.parent().unwrap());
        symlink(outside.path().join(target), &link_path).unwrap();
        env.trust();
        let report = env.json(&["prompts", "show"]);
        let prefix = report["prefix"].as_str().unwrap();
        assert!(!prefix.contains("OUTSIDE"), "{link}: read from outside");
        let skipped = report["warnings"].to_string() + &report["demoted"].to_string();
        assert!(
            skipped.contains(link) && skipped.contains("leads outside"),
            "{link}: not reported: {skipped}"
        );
    }
}

#[test]
fn a_symlink_inside_the_project_to_the_project_is_allowed() {
    let env = Env::empty();
    env.write_project("docs/guardrails.md", "- INSIDE-PROJECT rule\n");
    mkdirs(&env.project().join(".vak/prompts"));
    symlink(
        "../../docs/guardrails.md",
        env.project().join(".vak/prompts/guardrails.md"),
    )
    .unwrap();
    let report = env.json(&["prompts", "show"]);
    assert!(
        report["prefix"]
            .as_str()
            .unwrap()
            .contains("INSIDE-PROJECT"),
        "{report}"
    );
}

#[allow(dead_code)]
fn fixture(name: &str) -> std::path::PathBuf {
    fixtures().join("hostile/paths").join(name)
}

#[allow(dead_code)]
fn both(out: &std::process::Output) -> String {
    stdout(out) + &stderr(out)
}
