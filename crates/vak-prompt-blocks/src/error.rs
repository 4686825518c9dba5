use thiserror::Error;

/// Everything that can go wrong while reading names and wire strings.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BlocksError {
    /// A role, surface, bot, chat or session name contains characters that
    /// could escape a directory or confuse a path.
    #[error(
        "{kind} name `{}` is not allowed: use 1 to 64 letters, digits, `-` or `_`, not starting with `-`{}",
        crate::Escaped(.name),
        if *.kind == "chat" { " unless it is a negative number (a group's id, as Telegram gives it: `-100123`)" } else { "" }
    )]
    InvalidName {
        /// What the name was meant to be (role, surface, …).
        kind: &'static str,
        /// The rejected input, as given.
        name: String,
    },
    /// A surface kind that the runtime does not know.
    #[error("unknown surface `{}`: expected one of cli, desktop, server, chat, background", crate::Escaped(.0))]
    UnknownSurface(String),
    /// A block wire name that the runtime does not know.
    #[error(
        "unknown block `{}`: expected one of identity, operating-rules, guardrails, surface-note (editable) or capability-contract, surface, skills, mcp, agent-instructions",
        crate::Escaped(.0)
    )]
    UnknownBlock(String),
    /// A layer wire name that the runtime does not know.
    #[error(
        "unknown layer `{}`: expected one of seed, shared, project, surface, bot, chat, agent, runtime",
        crate::Escaped(.0)
    )]
    UnknownLayer(String),
}
