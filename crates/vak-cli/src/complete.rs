//! Shell completion: `vak completions SHELL` prints a script that asks
//! `vak` itself what fits where the cursor is (clap_complete's
//! `COMPLETE=SHELL` protocol, under the name `VAK_COMPLETE`, so that a
//! `COMPLETE` another tool exported cannot break `vak`), so a completion
//! knows the names this home and project hold (roles, bots, chats) as well
//! as the fixed ones (scopes, surface kinds, block names).
//!
//! Every name offered is a valid name (`Name::new`), so nothing a hostile
//! `bots.json` holds reaches the shell as a candidate.

use clap::CommandFactory as _;
use clap_complete::engine::CompletionCandidate;
use vak_core::prompts::{Block, Name, SurfaceKind};
use vak_core::{KnownNames, Selectors, default_home, known_names};

use crate::CliError;
use crate::out;

/// The environment variable the script sets when it asks `vak` for
/// candidates (clap_complete's default, `COMPLETE`, is too common a name).
const VAR: &str = "VAK_COMPLETE";

/// Answer a completion request when the shell's script made one (the
/// variable set), and exit; otherwise return and let `vak` run.
pub(crate) fn answer_if_asked() {
    clap_complete::CompleteEnv::with_factory(crate::Cli::command)
        .var(VAR)
        .complete();
}

/// `vak completions SHELL`: the script to source, or to put where the
/// shell loads completions from.
pub(crate) fn script(shell: clap_complete::Shell) -> Result<(), CliError> {
    let name = shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| CliError::Usage(format!("no completion script for the shell `{name}`")))?;
    let mut script = Vec::new();
    completer
        .write_registration(VAR, "vak", "vak", "vak", &mut script)
        .map_err(|source| CliError::Io {
            context: "cannot write the completion script".to_owned(),
            source,
        })?;
    out::print(&String::from_utf8_lossy(&script))
}

fn candidates(names: impl IntoIterator<Item = String>) -> Vec<CompletionCandidate> {
    names.into_iter().map(CompletionCandidate::new).collect()
}

/// The surface kinds.
pub(crate) fn surfaces() -> Vec<CompletionCandidate> {
    candidates(SurfaceKind::ALL.iter().map(ToString::to_string))
}

/// The blocks a layer file can hold.
pub(crate) fn blocks() -> Vec<CompletionCandidate> {
    candidates(Block::EDITABLE.iter().map(|b| b.wire_name().to_owned()))
}

/// The names of the home (`$VAK_HOME`, else the default) and of the project
/// found from the current directory; none when either cannot be found.
fn known() -> KnownNames {
    let Ok(home) = default_home() else {
        return KnownNames::default();
    };
    let Ok(cwd) = crate::selectors::current_dir() else {
        return KnownNames::default();
    };
    let selectors = Selectors::discover(home.clone(), &cwd)
        .unwrap_or_else(|_| Selectors::new(home.clone(), home));
    known_names(&selectors)
}

fn named(names: Vec<Name>) -> Vec<CompletionCandidate> {
    candidates(names.into_iter().map(|n| n.as_str().to_owned()))
}

/// The roles with a directory.
pub(crate) fn roles() -> Vec<CompletionCandidate> {
    named(known().roles)
}

/// The gateway's bots.
pub(crate) fn bots() -> Vec<CompletionCandidate> {
    named(known().bots)
}

/// The gateway's chats, under any bot.
pub(crate) fn chats() -> Vec<CompletionCandidate> {
    named(known().chats)
}
