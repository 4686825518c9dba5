//! The read-only prompt handle the gateway inbound path is given.
//!
//! Doc 45: "An inbound message may never write a prompt layer. Nothing in the
//! gateway inbound path gets a write handle to prompt state." This module
//! makes that a property of the types rather than a rule people remember.
//!
//! How the construction works, and the doctests that show it, are on
//! [`InboundPrompts`].

use vak_prompt_blocks::{Name, SurfaceKind};
use vak_prompt_compose::{ResolvedPrompt, TailContext};
use vak_prompt_loader::{GatewayFile, gateway_entry_listed};
use vak_prompt_trust::Trust;

use crate::{Core, CoreError, Selectors};

/// A handle that resolves prompts and can never write them: the one the
/// gateway inbound path is given.
///
/// # How the construction works
///
/// - [`InboundPrompts`] owns a private [`Core`]. It has no method, trait
///   implementation (`Deref`, `AsRef`, `Borrow`, `From`/`Into`) or public
///   field that hands the `Core`, a `&Core`, or the [`Selectors`] it was built
///   from back out, and it is not `Clone`.
/// - Every method takes `&self` and returns owned, plain data —
///   [`ResolvedPrompt`], a `String`, a [`Trust`] — none of
///   which has a method that writes a file. Resolution itself only reads
///   (the loader's `read_safely`).
/// - Every prompt-layer writer in the workspace (the CLI's `vak prompts
///   set|reset`, the admin API's saves and resets: [`Core::save_block`] and
///   [`Core::reset_block`]; the admin API's gateway-tier edits) needs a
///   `Core` (they are `&self` methods of it) or an explicit home path.
///   Inbound code written against `&InboundPrompts` holds neither: the
///   handle is the only prompt state it receives, so what it can do to
///   prompt state is the set of methods below, and all of them read.
///
/// The gateway's entry point (`vak gateway deliver`) therefore builds the
/// handle once, at the edge, and passes only the handle inward. What types
/// alone do not rule out is code in the same binary calling [`Core::open`]
/// with paths of its own; keeping inbound functions free of home and
/// project paths, and taking this handle instead, is what closes that.
///
/// ```
/// use vak_core::{InboundPrompts, Selectors};
///
/// fn on_message(prompts: &InboundPrompts) -> String {
///     // Resolving is all an inbound handler can do with prompt state.
///     prompts.system_prompt()
/// }
///
/// let home = tempfile::tempdir().unwrap();
/// let project = tempfile::tempdir().unwrap();
/// let selectors = Selectors::new(
///     home.path().to_str().unwrap(),
///     project.path().to_str().unwrap(),
/// );
/// let prompts = InboundPrompts::open(selectors).unwrap();
/// assert!(on_message(&prompts).contains("Surface:"));
/// ```
///
/// Inbound code cannot get the `Core` back, by dereferencing, converting or
/// borrowing:
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::InboundPrompts) {
///     let core: &vak_core::Core = &*prompts; // no Deref to Core
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: vak_core::InboundPrompts) {
///     let core: vak_core::Core = prompts.into(); // no From/Into
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::InboundPrompts) {
///     let core: &vak_core::Core = prompts.as_ref(); // no AsRef
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::InboundPrompts) {
///     let core = &prompts.core; // the field is private
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::InboundPrompts, target: &vak_core::EditTarget) {
///     // The writer is a method of `Core`; the handle has no such method.
///     let _ = prompts.save_block(target, "You are root.", None);
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::InboundPrompts, target: &vak_core::EditTarget) {
///     // Nor can the handle stand in for the `Core` the writer takes.
///     let _ = vak_core::Core::reset_block(prompts, target, None);
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::InboundPrompts) {
///     // The selectors are not handed out, so no Core can be rebuilt from them.
///     let core = vak_core::Core::open(prompts.selectors().clone());
/// }
/// ```
#[derive(Debug)]
pub struct InboundPrompts {
    core: Core,
}

impl InboundPrompts {
    /// A read-only handle for `selectors` (trust as the trust store says).
    pub fn open(selectors: Selectors) -> Result<Self, CoreError> {
        Ok(InboundPrompts {
            core: Core::open(selectors)?,
        })
    }

    /// Wrap `core`, giving it up: the handle is the only way to it afterwards.
    pub fn from_core(core: Core) -> Self {
        InboundPrompts { core }
    }

    /// The core, for [`crate::PromptCache`] only (crate-private: inbound
    /// code never gets it).
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// Resolve the prompt, with the tail rendered for `tail`.
    pub fn resolve_at(&self, tail: TailContext) -> Result<ResolvedPrompt, CoreError> {
        self.core.resolve_at(tail)
    }

    /// Resolve the prompt, with the tail rendered for now.
    pub fn resolve(&self) -> Result<ResolvedPrompt, CoreError> {
        self.core.resolve()
    }

    /// The assembled prefix, or the built-in prompt if the chain is unreadable.
    pub fn system_prompt(&self) -> String {
        self.core.system_prompt()
    }

    /// How far the project is trusted right now.
    pub fn trust(&self) -> Result<Trust, CoreError> {
        self.core.trust()
    }

    /// The scoped rules `paths` (relative to the project root) select for
    /// a turn, under the project's trust now, and every rule read.
    pub fn scoped_tail(
        &self,
        paths: &[camino::Utf8PathBuf],
    ) -> Result<(vak_prompt_compose::ScopedTail, vak_prompt_loader::RuleSet), CoreError> {
        let trust = self.core.trust()?;
        Ok(self.core.scoped_tail(paths, trust))
    }

    /// The surface this handle resolves for.
    pub fn surface(&self) -> SurfaceKind {
        self.core.selectors().surface
    }

    /// The gateway bot this handle resolves for, if any.
    pub fn bot(&self) -> Option<&Name> {
        self.core.selectors().bot.as_ref()
    }

    /// Keep every text `resolved` contributed in `history` (the delivery's
    /// store: the home's objects, or the PostgreSQL object table), so
    /// a session frozen on it can be diffed later. Objects
    /// are immutable and content-addressed: this can add a text, never
    /// change or remove a prompt layer, so the handle stays read-only for
    /// prompts.
    ///
    /// # Errors
    ///
    /// The object store is unusable (see [`crate::history::HistoryError`]).
    pub fn keep_contributions(
        &self,
        history: &dyn crate::history::History,
        resolved: &vak_prompt_compose::ResolvedPrompt,
    ) -> Result<usize, crate::history::HistoryError> {
        crate::history::keep_contributions(history, resolved)
    }

    /// Bring this home's replica of `store`'s home side up to date
    /// ([`crate::home::sync_home`]); `None` for a store that does not hold
    /// the home side. It writes only what the store holds, through the
    /// loader's confined writes, so the handle stays read-only for prompts.
    ///
    /// # Errors
    ///
    /// See [`crate::home::HomeError`].
    pub fn sync_home(
        &self,
        store: &dyn vak_session::Store,
        full: bool,
    ) -> Result<Option<crate::home::Synced>, crate::home::HomeError> {
        crate::home::sync_if_shared(&self.core.selectors().home, store, full)
    }

    /// [`InboundPrompts::sync_home`] for a long-running service: through
    /// `replica`, which answers from memory while `cache`'s change
    /// notifications say nothing under the home changed (see
    /// [`crate::home::ReplicaCheck`] for what the caller must then do).
    ///
    /// # Errors
    ///
    /// See [`crate::home::HomeError`].
    pub fn sync_home_watched(
        &self,
        store: &dyn vak_session::Store,
        cache: &crate::PromptCache,
        replica: &crate::home::ReplicaCheck,
    ) -> Result<Option<crate::home::Synced>, crate::home::HomeError> {
        replica.sync(&self.core.selectors().home, store, cache.change_epoch(self))
    }

    /// The gateway chat this handle resolves for, if any.
    pub fn chat(&self) -> Option<&Name> {
        self.core.selectors().chat.as_ref()
    }

    /// Whether the gateway allowlist admits this handle's bot and chat:
    /// the bot needs an entry in `bots.json` and the chat
    /// an entry under that bot in `allowlist.json`. Read fresh every call;
    /// a text `cache` parsed before is looked up in its table
    /// ([`crate::PromptCache::gateway_tables`]) rather than parsed again.
    pub fn admission(&self, cache: Option<&crate::PromptCache>) -> Result<Admission, CoreError> {
        let tables = cache.map(crate::PromptCache::gateway_tables);
        let selectors = self.core.selectors();
        let (Some(bot), Some(chat)) = (&selectors.bot, &selectors.chat) else {
            return Ok(Admission::NotAChat);
        };
        let home = &selectors.home;
        if !gateway_entry_listed(home, GatewayFile::Bots, bot.as_str(), None, tables)? {
            return Ok(Admission::UnknownBot);
        }
        let chat_known = gateway_entry_listed(
            home,
            GatewayFile::Allowlist,
            bot.as_str(),
            Some(chat.as_str()),
            tables,
        )?;
        Ok(if chat_known {
            Admission::Admitted
        } else {
            Admission::UnknownChat
        })
    }
}

/// What the gateway allowlist says about a bot and chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The bot has a `bots.json` entry and the chat one under it in
    /// `allowlist.json`.
    Admitted,
    /// The bot has no `bots.json` entry.
    UnknownBot,
    /// The chat has no entry under its bot in `allowlist.json`.
    UnknownChat,
    /// The handle was not opened for a bot and chat.
    NotAChat,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_the_core_it_wraps() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let selectors = Selectors::new(
            home.path().to_str().expect("utf8"),
            project.path().to_str().expect("utf8"),
        );
        let core = Core::open(selectors.clone()).expect("core");
        let inbound = InboundPrompts::open(selectors).expect("inbound");
        let at = TailContext::now();
        assert_eq!(
            inbound.resolve_at(at.clone()).expect("resolve").prefix,
            core.resolve_at(at).expect("resolve").prefix
        );
        assert_eq!(inbound.system_prompt(), core.system_prompt());
        assert_eq!(inbound.surface(), SurfaceKind::Cli);
        assert!(inbound.bot().is_none());
    }

    /// A service's admissions of one long allowlist are answered from the
    /// index its prompt cache keeps, not a walk of the file each time; a
    /// handle without a cache walks it every time and keeps nothing; an
    /// edit of the file is answered from the new text.
    #[test]
    fn admissions_share_the_prompt_caches_index() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let gateway = home.path().join(".vak/gateway");
        std::fs::create_dir_all(&gateway).expect("gateway dir");
        std::fs::write(gateway.join("bots.json"), r#"{"helpdesk": {}}"#).expect("bots");
        let allowlist = |last: &str| {
            let chats: Vec<String> = (0..2_000).map(|i| format!(r#""c{i}": {{}}"#)).collect();
            format!(
                r#"{{"helpdesk": {{{}, "{last}": {{}}}}}}"#,
                chats.join(", ")
            )
        };
        std::fs::write(gateway.join("allowlist.json"), allowlist("ops")).expect("allowlist");
        let mut selectors = Selectors::new(
            home.path().to_str().expect("utf8"),
            project.path().to_str().expect("utf8"),
        );
        selectors.surface = SurfaceKind::Chat;
        selectors.bot = Some(Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").expect("bot"));
        selectors.chat = Some(Name::new(vak_prompt_blocks::NameKind::Chat, "ops").expect("chat"));
        let inbound = InboundPrompts::open(selectors).expect("inbound");
        let cache = crate::PromptCache::new();
        for _ in 0..4 {
            assert_eq!(
                inbound.admission(None).expect("admission"),
                Admission::Admitted
            );
        }
        assert_eq!(cache.gateway_tables().parses(), 0);
        for _ in 0..4 {
            assert_eq!(
                inbound.admission(Some(&cache)).expect("admission"),
                Admission::Admitted
            );
        }
        // `bots.json` and `allowlist.json`, each parsed once.
        assert_eq!(cache.gateway_tables().parses(), 2);
        std::fs::write(gateway.join("allowlist.json"), allowlist("dev")).expect("edit");
        assert_eq!(
            inbound.admission(Some(&cache)).expect("admission"),
            Admission::UnknownChat
        );
    }
}
