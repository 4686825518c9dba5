//! Whatever reaches the terminal from input (an argument clap refuses or
//! accepts, an environment variable, a path derived from one) is escaped:
//! no input can send a control character, reorder the text or start a line
//! of vak's report.

use crate::common::{Env, HANG, output_within};

/// Inputs that try to forge a line, clear the screen, return the cursor or
/// reverse what follows.
const PAYLOADS: [&str; 4] = [
    "x\u{1b}[2J\nFORGED esc",
    "x\rFORGED cr",
    "x\nFORGED lf",
    "x\u{202e}\nFORGED rlo",
];

/// Every character in `text` that may not reach a terminal raw: controls
/// other than a line's own `\n`, and the bidi, separator and invisible
/// characters an escaped line never holds.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
                || matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200d}' | '\u{feff}'
                )
        })
        .collect()
}

/// Run one `vak` command and check what it printed; a failure is kept in
/// `failures`, so one run names every leak.
fn check(failures: &mut Vec<String>, what: &str, command: &mut std::process::Command) {
    let out = output_within(command, HANG);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let raw = raw_controls(&text);
    if !raw.is_empty() {
        failures.push(format!("{what}: raw {raw:?} reached the terminal:\n{text}"));
    } else if text.lines().any(|l| l.starts_with("FORGED")) {
        failures.push(format!("{what}: a forged line:\n{text}"));
    }
}

#[test]
fn no_argument_or_environment_variable_reaches_the_terminal_raw() {
    let env = Env::fixture("myproj");
    let mut failures = Vec::new();
    env.write_home("f.md", "- a rule\n");
    let file = env.home().join("f.md");
    let file = file.to_str().unwrap();
    // `{}` is the hostile input.
    let commands: Vec<Vec<&str>> = vec![
        vec!["{}"],
        vec!["prompts", "{}"],
        vec!["prompts", "show", "--{}"],
        vec!["prompts", "show", "--agent", "{}"],
        vec!["prompts", "show", "--surface", "{}"],
        vec!["prompts", "show", "--bot", "{}", "--chat", "c"],
        vec!["prompts", "show", "--bot", "b", "--chat", "{}"],
        vec!["prompts", "show", "--home", "{}"],
        vec!["prompts", "show", "--project", "{}"],
        vec!["prompts", "show", "--format", "{}"],
        vec!["prompts", "explain", "--agent", "{}"],
        vec!["prompts", "check", "--agent", "{}"],
        vec!["prompts", "set", "--scope", "shared", "identity", "{}"],
        vec![
            "prompts", "set", "--scope", "shared", "identity", "--file", "{}",
        ],
        vec![
            "prompts", "set", "--scope", "{}", "identity", "--file", file,
        ],
        vec!["prompts", "set", "--scope", "shared", "{}", "--file", file],
        vec![
            "prompts", "set", "--scope", "project", "--agent", "{}", "identity", "--file", file,
        ],
        vec![
            "prompts",
            "set",
            "--scope",
            "shared",
            "guardrails",
            "--file",
            file,
            "--if-digest",
            "{}",
        ],
        vec!["prompts", "edit", "--scope", "shared", "{}"],
        vec!["prompts", "reset", "--scope", "shared", "{}"],
        vec!["prompts", "log", "--scope", "shared", "{}"],
        vec![
            "prompts", "diff", "--scope", "shared", "identity", "--from", "{}",
        ],
        vec!["prompts", "revert", "--scope", "shared", "identity", "{}"],
        vec!["trust", "{}"],
        vec!["untrust", "{}"],
        vec!["session", "new", "--agent", "{}"],
        vec!["session", "show", "{}"],
        vec!["session", "list", "--limit", "{}"],
        vec!["session", "list", "--store", "{}"],
        vec!["session", "diff", "{}"],
        vec!["exec", "--session", "{}"],
        vec![
            "gateway", "deliver", "--bot", "{}", "--chat", "c", "--text", "t",
        ],
        vec!["gateway", "secret", "{}"],
        vec!["audit", "list", "--format", "{}"],
        vec!["store", "migrate", "--store", "{}"],
        vec!["admin", "serve", "--listen", "{}"],
        vec!["admin", "serve", "--project", "{}"],
        vec!["completions", "{}"],
    ];
    for payload in PAYLOADS {
        for template in &commands {
            let args: Vec<String> = template.iter().map(|a| a.replace("{}", payload)).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            check(&mut failures, &format!("{args:?}"), &mut env.command(&args));
        }
        // With logging on, the same inputs through tracing's lines.
        for template in [
            vec!["prompts", "show", "--agent", "{}"],
            vec!["prompts", "show", "--project", "{}"],
            vec!["session", "list", "--store", "{}"],
        ] {
            let args: Vec<String> = template.iter().map(|a| a.replace("{}", payload)).collect();
            let mut command = env.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
            command.env("VAK_LOG", "trace");
            check(
                &mut failures,
                &format!("VAK_LOG=trace {args:?}"),
                &mut command,
            );
        }
        // The environment: the editor, the temporary directory, the home
        // and the store.
        for key in ["EDITOR", "VISUAL"] {
            // Quoted, so the shell runs `false` and says nothing itself.
            let editor = format!("false '{payload}'");
            let mut command = env.command(&["prompts", "edit", "--scope", "shared", "identity"]);
            command.env_remove("VISUAL").env(key, &editor);
            check(&mut failures, &format!("{key}={editor:?}"), &mut command);
        }
        let tmp = env.home().join(payload);
        std::fs::create_dir_all(&tmp).unwrap();
        let mut command = env.command(&["prompts", "edit", "--scope", "shared", "identity"]);
        command.env("TMPDIR", &tmp).env("EDITOR", "false");
        check(&mut failures, &format!("TMPDIR={tmp:?}"), &mut command);
        let mut command = env.command(&["prompts", "edit", "--scope", "shared", "identity"]);
        command.env("TMPDIR", env.home().join(payload).join("gone"));
        command.env("EDITOR", "true");
        check(&mut failures, "TMPDIR that does not exist", &mut command);
        // A home whose name is hostile, with a shared config that names
        // the store.
        let home = env.home().join(format!("h{payload}"));
        std::fs::create_dir_all(home.join(".vak")).unwrap();
        std::fs::write(home.join(".vak/config.toml"), "[store]\nurl = \"file\"\n").unwrap();
        for args in [
            vec!["store", "import", "--from", "file"],
            vec!["prompts", "show"],
            vec!["session", "list"],
        ] {
            let mut command = env.command(&args);
            command.env("VAK_HOME", &home);
            check(
                &mut failures,
                &format!("hostile home {args:?}"),
                &mut command,
            );
        }
        for args in [vec!["prompts", "show"], vec!["session", "list"]] {
            let mut command = env.command(&args);
            command.env("VAK_HOME", payload);
            check(
                &mut failures,
                &format!("VAK_HOME={payload:?} {args:?}"),
                &mut command,
            );
            let mut command = env.command(&args);
            command.env("VAK_STORE", payload);
            check(
                &mut failures,
                &format!("VAK_STORE={payload:?} {args:?}"),
                &mut command,
            );
            let mut command = env.command(&args);
            command.env("VAK_STORE", format!("postgres://u:pw@h/{payload}"));
            check(
                &mut failures,
                &format!("VAK_STORE=postgres…{payload:?}"),
                &mut command,
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}
