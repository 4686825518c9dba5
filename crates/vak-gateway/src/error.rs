use thiserror::Error;
use vak_core::CoreError;
use vak_core::prompts::{Escaped, SessionError};

/// Everything a lifecycle operation can fail with. A refusal on drift is
/// not an error: it is the [`Exec::Refused`](crate::Exec::Refused) outcome.
#[derive(Debug, Error)]
pub enum LifecycleError {
    /// Resolving the prompt failed, or it does not fit the model's window.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] SessionError),
    /// The prompt history (kept texts, version records) could not be read
    /// or written.
    #[error(transparent)]
    History(#[from] vak_core::history::HistoryError),
    /// The home side could not be brought over from the store: a local
    /// file the store lacks, a replica file edited by hand.
    #[error(transparent)]
    Home(#[from] vak_core::home::HomeError),
    /// The bot has no entry in `bots.json`: nothing was written.
    #[error(
        "bot `{}` has no entry in `bots.json`, so its messages are refused; add it there (or in the admin API) first. Nothing was written",
        Escaped(.bot)
    )]
    UnknownBot {
        /// The bot.
        bot: String,
    },
    /// The chat has no entry under its bot in `allowlist.json`.
    #[error(
        "chat `{}` has no entry under bot `{}` in `allowlist.json`, so its messages are refused; add it there first. Nothing was written",
        Escaped(.chat), Escaped(.bot)
    )]
    UnknownChat {
        /// The bot.
        bot: String,
        /// The chat.
        chat: String,
    },
    /// A delivery was asked of a handle opened without a bot and chat.
    #[error("a delivery needs a bot and a chat; the prompt handle was opened without them")]
    NotAChat,
    /// `--accept-drift` on a session that froze no prefix: there is no
    /// frozen prompt to proceed on.
    #[error(
        "the prompt changed since session `{id}` was created, and it froze no prompt prefix (a ledger from an older build), so there is no frozen prompt to proceed on; nothing was recorded. Start a new session with `vak session new`"
    )]
    NoFrozenPrompt {
        /// The session.
        id: String,
    },
    /// A named session cannot rotate: only chat bindings do.
    #[error("session `{id}` cannot be rotated: only gateway chat bindings rotate")]
    CannotRotate {
        /// The session.
        id: String,
    },
    /// A chat binding only continues or rotates.
    #[error("`{}`/`{}`: a chat binding either continues or rotates", Escaped(.bot), Escaped(.chat))]
    BindingDecision {
        /// The bot.
        bot: String,
        /// The chat.
        chat: String,
    },
    /// A store URL that names no backend.
    #[error(
        "the store URL from {from} is neither `file` nor `postgres://user@host:port/db`; fix it"
    )]
    BadStoreUrl {
        /// Where it came from.
        from: String,
    },
    /// The shared config could not be read for `[store] url`.
    #[error("`{}`: {}", Escaped(.path.as_str()), Escaped(.reason))]
    SharedConfig {
        /// The shared config file.
        path: camino::Utf8PathBuf,
        /// Why.
        reason: String,
    },
    /// `vak store import` found the copy differs from the original.
    #[error("the import did not verify: {what}; the file store is unchanged")]
    ImportMismatch {
        /// What differs.
        what: String,
    },
    /// A bot's signing secret could not be read or created.
    #[error("the signing secret `{}` {}", Escaped(.path.as_str()), Escaped(.reason))]
    Secret {
        /// The secret file.
        path: camino::Utf8PathBuf,
        /// Why, as a phrase.
        reason: String,
    },
    /// The service could not listen.
    #[error("cannot listen on `{}`: {}", Escaped(.addr), Escaped(.reason))]
    Listen {
        /// The address asked for.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A session's recorded selectors are not valid for this build.
    #[error("session `{id}` {what}: {}", Escaped(.reason))]
    RecordedSelectors {
        /// The session.
        id: String,
        /// What is wrong, as a phrase.
        what: &'static str,
        /// Why.
        reason: String,
    },
}
