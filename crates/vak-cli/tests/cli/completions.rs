//! Small things users of cargo and jj expect: shell completions generated
//! from the clap definitions, and log lines without colour codes.

use crate::common::{Env, stderr, stdout};

#[test]
fn completions_are_generated_for_bash_zsh_and_fish() {
    let env = Env::empty();
    for (shell, marker) in [
        ("bash", "_vak()"),
        ("zsh", "#compdef vak"),
        ("fish", "complete -c vak"),
    ] {
        let out = env.vak(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {script}");
        // Generated from the definitions: every subcommand and new flag is there.
        for word in ["prompts", "explain", "trust", "completions", "dir"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let out = env.vak(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn log_lines_carry_no_colour_codes() {
    let env = Env::empty();
    // A refused file makes the loader log a warning.
    env.write_project(".vak/prompts/identity.md", "");
    std::fs::write(env.project().join(".vak/prompts/guardrails.md"), b"\xff").unwrap();
    for no_color in [None, Some("1")] {
        let mut command = env.command(&["prompts", "show"]);
        command.env("VAK_LOG", "warn");
        match no_color {
            Some(value) => command.env("NO_COLOR", value),
            None => command.env_remove("NO_COLOR"),
        };
        let out = command.output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("WARN"), "{err}");
        assert!(!err.contains('\u{1b}'), "{err:?}");
    }
}
