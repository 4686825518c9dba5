//! Everything `vak` prints goes through here: stdout for results, stderr
//! for what the user should notice, both escaped, and a
//! closed stdout ends the command quietly instead of panicking.

use std::fmt::Write as _;
use std::io::Write as _;

use vak_core::prompts::{escape_line, is_unsafe_for_terminal};

use crate::CliError;

/// Write `text` to stdout as it is. The caller has escaped every piece of
/// it that came from input. A reader that went away (`vak … | head`) is
/// [`CliError::BrokenPipe`], which exits quietly.
pub(crate) fn print(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::BrokenPipe {
                CliError::BrokenPipe
            } else {
                CliError::Io {
                    context: "cannot write to standard output".to_owned(),
                    source,
                }
            }
        })
}

/// `--no-pager`, on the commands whose output can be long.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub(crate) struct PagerArg {
    /// Print straight to the terminal instead of through the pager
    /// ($VAK_PAGER, else $PAGER, else `less -FRX`; never when piped).
    #[arg(long)]
    pub(crate) no_pager: bool,
}

/// The pager command, as git and jj pick theirs: `$VAK_PAGER`, else
/// `$PAGER`, else `less -FRX` (which quits at once when the text fits the
/// screen, and keeps it on the screen after). Empty or `cat`: none.
fn pager_command() -> Option<String> {
    let chosen = ["VAK_PAGER", "PAGER"]
        .into_iter()
        .find_map(|key| std::env::var(key).ok())
        .unwrap_or_else(|| "less -FRX".to_owned());
    let chosen = chosen.trim();
    (!chosen.is_empty() && chosen != "cat").then(|| chosen.to_owned())
}

/// [`print`], through the pager when stdout is a terminal and `--no-pager`
/// was not given, as git and jj do; piped, the text goes straight out. A
/// pager that cannot start leaves the text printed as it is; one the user
/// quits early ends the command quietly.
pub(crate) fn page(text: &str, pager: PagerArg) -> Result<(), CliError> {
    let command = match pager_command() {
        Some(command) if !pager.no_pager && stdout_is_terminal() => command,
        _ => return print(text),
    };
    // Through the shell, so `PAGER="less -R"` works as it does for git.
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env(
            "LESS",
            std::env::var("LESS").unwrap_or_else(|_| "FRX".to_owned()),
        )
        .stdin(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return print(text);
    };
    if let Some(mut stdin) = child.stdin.take() {
        // The pager quitting before reading everything is the user's
        // choice, not an error.
        let _ = stdin.write_all(text.as_bytes());
    }
    let _ = child.wait();
    Ok(())
}

/// [`print`] and a newline.
pub(crate) fn println(text: &str) -> Result<(), CliError> {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    print(&line)
}

/// One line on stderr, `label: message`, the message escaped as one line so
/// nothing in it can start a line of its own or move the cursor. A closed
/// stderr is ignored: there is nobody left to tell.
pub(crate) fn notice(label: &str, message: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "{label}: {}",
        escape_line(message)
    );
}

/// One line on stderr without a label, escaped as [`notice`] escapes: an
/// empty answer said to the person (`no sessions`), so stdout stays empty
/// for a script, as gh does.
pub(crate) fn say(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", escape_line(message));
}

/// Whether stdout is a terminal: a header row, a pager, only then.
pub(crate) fn stdout_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}

/// Text for stderr that is several lines by design (an error with a note);
/// each line is escaped on its own.
pub(crate) fn notice_lines(label: &str, message: &str) {
    let mut out = String::new();
    for (index, line) in message.split('\n').enumerate() {
        if index == 0 {
            let _ = writeln!(out, "{label}: {}", escape_line(line));
        } else {
            let _ = writeln!(out, "{}", escape_line(line));
        }
    }
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

/// Stderr for `tracing`: each event arrives as one formatted line, and is
/// written escaped as one line, so a field quoting a hostile path cannot
/// start a line of its own or send escape sequences.
pub(crate) struct EscapingStderr;

impl std::io::Write for EscapingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (body, newline) = match text.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (text.as_ref(), ""),
        };
        let line = format!("{}{newline}", escape_line(body));
        std::io::stderr().lock().write_all(line.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().lock().flush()
    }
}

/// JSON for a terminal: serde already escapes ASCII controls; this also
/// writes every other character that could reorder or hide output (bidi
/// controls, separators, tags) as a `\u` escape, which is the same JSON.
pub(crate) fn terminal_json(json: &str) -> String {
    if !json.chars().any(is_unsafe_for_terminal) {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe_for_terminal(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Print one of [`vak_core::output`]'s documents as pretty JSON, escaped for
/// a terminal: encoded as the admin API encodes it, so both say it in the
/// same bytes.
pub(crate) fn print_document(document: &impl serde::Serialize) -> Result<(), CliError> {
    let value = vak_core::output::to_value(document)
        .map_err(|e| CliError::Failed(format!("cannot encode JSON: {e}")))?;
    print_json(&value)
}

/// Print `value` as pretty JSON, escaped for a terminal.
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Failed(format!("cannot encode JSON: {e}")))?;
    println(&terminal_json(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_stays_json_without_invisible_characters() {
        let raw = serde_json::to_string(&"a\u{202e}b\u{e0041}\u{1b}").unwrap();
        let safe = terminal_json(&raw);
        assert!(!safe.chars().any(is_unsafe_for_terminal), "{safe}");
        let back: String = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, "a\u{202e}b\u{e0041}\u{1b}");
    }
}
