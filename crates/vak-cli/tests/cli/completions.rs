//! Small things users of cargo and jj expect: shell completions generated
//! from the clap definitions, and log lines without colour codes.

use crate::common::{Env, HANG, output_within, stderr, stdout};

#[test]
fn completions_are_generated_for_bash_zsh_and_fish() {
    let env = Env::empty();
    for (shell, marker) in [
        ("bash", "_clap_complete_vak()"),
        ("zsh", "#compdef vak"),
        ("fish", "complete --keep-order --exclusive --command vak"),
    ] {
        let out = env.vak(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {script}");
        // The script asks `vak` itself, so it never disagrees with it.
        assert!(
            script.contains(&format!("VAK_COMPLETE=\"{shell}\""))
                || script.contains(&format!("VAK_COMPLETE={shell}")),
            "{shell}: {script}"
        );
    }
    let out = env.vak(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

/// An env whose home knows a role, two bots and a chat, and whose
/// gateway files also hold names that are not valid (never offered).
fn named_env() -> Env {
    let env = Env::empty();
    env.write_home(".vak/prompts/agents/reviewer/identity.md", "You review.\n");
    env.write_project(".vak/prompts/agents/planner/identity.md", "You plan.\n");
    env.write_home(
        ".vak/gateway/bots.json",
        r#"{"helpdesk": {}, "ops": {}, "bad\u001b[2Jname": {}}"#,
    );
    env.write_home(
        ".vak/gateway/allowlist.json",
        r##"{"helpdesk": {"42": {"name": "#oncall"}, "x\ny": {}}}"##,
    );
    env
}

/// What `vak` answers the script of `shell` for `line` (the last word is
/// the one being completed), candidates one per line without descriptions.
fn candidates(env: &Env, shell: &str, line: &[&str]) -> Vec<String> {
    let mut args = vec!["--", "vak"];
    args.extend(line);
    let mut command = env.command(&args);
    command
        .env("VAK_COMPLETE", shell)
        .env("_CLAP_COMPLETE_INDEX", line.len().to_string())
        .env("_CLAP_IFS", "\n");
    let out = output_within(&mut command, HANG);
    assert!(out.status.success(), "{shell} {line:?}: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| l.split(['\t', ':']).next().unwrap_or("").to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Scopes, surface kinds, block names, roles (home and project), bots and
/// chats (the gateway files) complete, for each shell's protocol; a name
/// the files hold that is not a valid name is never offered.
#[test]
fn completions_know_scopes_surfaces_blocks_roles_bots_and_chats() {
    let env = named_env();
    for shell in ["zsh", "fish"] {
        let offered = |line: &[&str]| candidates(&env, shell, line);
        assert_eq!(
            offered(&["prompts", "set", "--scope", ""]),
            ["shared", "project"]
        );
        assert_eq!(
            offered(&["prompts", "show", "--surface", ""]),
            ["cli", "desktop", "server", "chat", "background"]
        );
        assert_eq!(
            offered(&["prompts", "set", "--scope", "project", ""])
                .into_iter()
                .filter(|c| !c.starts_with('-'))
                .collect::<Vec<_>>(),
            ["identity", "operating-rules", "guardrails", "surface-note"]
        );
        assert_eq!(
            offered(&["prompts", "show", "--agent", ""]),
            ["planner", "reviewer"]
        );
        assert_eq!(
            offered(&["prompts", "show", "--bot", ""]),
            ["helpdesk", "ops"]
        );
        assert_eq!(offered(&["gateway", "deliver", "--chat", ""]), ["42"]);
        assert_eq!(
            offered(&["prompts", "log", "--scope", "bot", "--bot", "h"]),
            ["helpdesk"]
        );
    }
}

/// The bash script, sourced in a real bash, completes from `vak` on PATH.
#[test]
fn the_bash_script_completes_in_bash() {
    let env = named_env();
    let script = env.project().join("vak.bash");
    std::fs::write(&script, env.ok(&["completions", "bash"])).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_vak"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut bash = std::process::Command::new("bash");
    bash.arg("-c")
        .arg(
            r#"source "$1"
complete -p vak >/dev/null || exit 9
reply() {
  COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9
  _clap_complete_vak vak "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
  local IFS=' '; echo "${COMPREPLY[*]}"
}
reply vak prompts set --scope pro
reply vak prompts set --scope project --agent ''
reply vak prompts show --bot ''
reply vak prompts set --scope shared guard"#,
        )
        .arg("bash")
        .arg(&script)
        .env("PATH", path)
        .env("VAK_HOME", env.home())
        .current_dir(env.project());
    let out = output_within(&mut bash, HANG);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(|l| l.trim().to_owned()).collect();
    assert_eq!(
        lines,
        ["project", "planner reviewer", "helpdesk ops", "guardrails"],
        "{}",
        stderr(&out)
    );
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

/// A `COMPLETE` variable another tool exported changes nothing: vak's
/// scripts ask under `VAK_COMPLETE`.
#[test]
fn a_stray_complete_variable_does_not_break_vak() {
    let env = Env::empty();
    let mut command = env.command(&["--version"]);
    command.env("COMPLETE", "1");
    let out = output_within(&mut command, HANG);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("vak "), "{}", stdout(&out));
}
