//! The README's synopsis is the command line's: every command and every
//! long option clap defines appears on that command's lines of the
//! `## Using it` block (a line `vak <command> …`, its indented
//! continuation lines, and the lines of the command it says it shares
//! options with: "(the same options as prompts show)").

use clap::CommandFactory as _;

use crate::Cli;

/// The README's `## Using it` synopsis block.
fn synopsis() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .unwrap_or_default();
    let after = readme.split("## Using it").nth(1).unwrap_or_default();
    let block = after.split("```text\n").nth(1).unwrap_or_default();
    block.split("```").next().unwrap_or_default().to_owned()
}

/// The lines of `vak <path…>`: each line naming it, with its continuations.
fn lines_of(synopsis: &str, path: &[String]) -> String {
    let mut out = String::new();
    let mut taking = false;
    for line in synopsis.lines() {
        if line.starts_with(char::is_whitespace) {
            if taking {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        taking = words.first() == Some(&"vak")
            && words.len() > path.len()
            && words[1..=path.len()].iter().zip(path).all(|(w, p)| w == p);
        if taking {
            out.push_str(line);
            out.push('\n');
        }
    }
    // "(the same options as prompts show)": that command's options too.
    if let Some((_, rest)) = out.clone().split_once("(the same options as ")
        && let Some((other, _)) = rest.split_once(')')
    {
        let other: Vec<String> = other.split_whitespace().map(str::to_owned).collect();
        if other != path {
            out.push_str(&lines_of(synopsis, &other));
        }
    }
    out
}

/// Every leaf command, as its path of names.
fn leaves(
    command: &clap::Command,
    path: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, clap::Command)>,
) {
    let subs: Vec<&clap::Command> = command
        .get_subcommands()
        .filter(|c| c.get_name() != "help")
        .collect();
    if subs.is_empty() {
        out.push((path.clone(), command.clone()));
    }
    for sub in subs {
        path.push(sub.get_name().to_owned());
        leaves(sub, path, out);
        path.pop();
    }
}

#[test]
fn every_command_and_option_is_in_the_readme_synopsis() {
    let synopsis = synopsis();
    assert!(
        synopsis.contains("vak prompts show"),
        "no synopsis in README.md"
    );
    let mut all = Vec::new();
    leaves(&Cli::command(), &mut Vec::new(), &mut all);
    let mut missing = Vec::new();
    for (path, command) in &all {
        let lines = lines_of(&synopsis, path);
        if lines.is_empty() {
            missing.push(format!("vak {}", path.join(" ")));
            continue;
        }
        for arg in command.get_arguments() {
            if let Some(long) = arg.get_long()
                && long != "help"
                && long != "version"
                && !lines.contains(&format!("--{long}"))
            {
                missing.push(format!("vak {} --{long}", path.join(" ")));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README.md's synopsis (## Using it) lacks: {missing:#?}"
    );
}
