//! A resolver that answers from memory while nothing it read has changed.
//!
//! [`CachedResolver`] keeps the last [`ResolvedPrompt`] beside an
//! [`InputWatch`] armed on every directory the chain was read from (the
//! loader's `watch` module says what is watched and why notifications were
//! chosen over per-file identity checks). A warm call is one non-blocking
//! read of the notification queue and an `Arc` clone; any change (an edit, a
//! rename, a symlink swapped, a touch that keeps the mtime, a layer file
//! appearing, the trust store rewritten) makes the next call read and
//! compose the chain again. Where notifications are unavailable every call
//! reloads: slower, never stale.
//!
//! It only reads, like [`crate::InboundPrompts`]: it owns its [`Core`] and
//! never hands it (or its selectors) back.

use std::sync::{Arc, Mutex, PoisonError};

use vak_prompt_compose::{ResolvedPrompt, TailContext};
use vak_prompt_loader::InputWatch;

use crate::{Core, CoreError, Selectors};

/// How many times the chain may be read again because a directory had to be
/// added to the watch after a read, before giving up on the watch.
const MAX_REARMS: usize = 3;

/// Resolves the prompt for one set of selectors, from memory while nothing
/// it read has changed.
///
/// ```
/// use vak_core::{CachedResolver, Selectors};
///
/// let home = tempfile::tempdir().unwrap();
/// let project = tempfile::tempdir().unwrap();
/// let selectors = Selectors::new(
///     home.path().to_str().unwrap(),
///     project.path().to_str().unwrap(),
/// );
/// let prompts = CachedResolver::open(selectors).unwrap();
/// let first = prompts.resolve().unwrap();
/// let again = prompts.resolve().unwrap(); // nothing changed: the same value
/// assert!(std::sync::Arc::ptr_eq(&first, &again) || !prompts.is_watching());
/// ```
///
/// It is `Send + Sync` (share one behind an `Arc`), and like
/// [`crate::InboundPrompts`] it never gives its `Core` back:
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::CachedResolver) {
///     let core: &vak_core::Core = &*prompts; // no Deref to Core
/// }
/// ```
///
/// ```compile_fail
/// fn on_message(prompts: &vak_core::CachedResolver) {
///     let core = &prompts.core; // the field is private
/// }
/// ```
///
/// Each resolver holds one inotify instance (two while it reloads); the
/// kernel's per-user limit (`fs.inotify.max_user_instances`, 128 by default)
/// bounds how many can watch at once, and one past it reloads every time.
#[derive(Debug)]
pub struct CachedResolver {
    core: Core,
    state: Mutex<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    watch: InputWatch,
    prompt: Arc<ResolvedPrompt>,
}

impl CachedResolver {
    /// A resolver for `selectors` (trust as the trust store says).
    pub fn open(selectors: Selectors) -> Result<Self, CoreError> {
        Ok(Self::from_core(Core::open(selectors)?))
    }

    /// Wrap `core`, giving it up.
    pub fn from_core(core: Core) -> Self {
        CachedResolver {
            core,
            state: Mutex::new(None),
        }
    }

    /// The resolved prompt, composed again only when something it was read
    /// from changed. Its tail is rendered for the instant it was composed;
    /// render a current one with `render_tail`.
    pub fn resolve(&self) -> Result<Arc<ResolvedPrompt>, CoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = state.as_mut()
            && !cached.watch.changed()
        {
            return Ok(Arc::clone(&cached.prompt));
        }
        let previous = state.take().map(|cached| cached.watch);
        let fresh = self.load(previous)?;
        let prompt = Arc::clone(&fresh.prompt);
        *state = Some(fresh);
        Ok(prompt)
    }

    /// Whether change notifications are in use (otherwise every call reads
    /// the chain).
    pub fn is_watching(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.as_ref().is_some_and(|c| c.watch.is_live())
    }

    /// Arm the watch (or re-arm the previous one: cheaper than a new
    /// instance), then read and compose; read again while the read reached a
    /// directory the watch did not cover yet.
    fn load(&self, previous: Option<InputWatch>) -> Result<Cached, CoreError> {
        let request = self.core.selectors().load_request();
        let mut watch = match previous {
            Some(watch) => watch.rearm(&request),
            None => InputWatch::arm(&request),
        };
        for _ in 0..MAX_REARMS {
            let chain = self.core.load()?;
            let trust = self.core.trust()?;
            if !watch.cover(&chain) {
                let prompt = Arc::new(self.core.compose(&chain, trust, TailContext::now()));
                return Ok(Cached { watch, prompt });
            }
        }
        let chain = self.core.load()?;
        let trust = self.core.trust()?;
        let prompt = Arc::new(self.core.compose(&chain, trust, TailContext::now()));
        Ok(Cached {
            watch: InputWatch::unavailable(),
            prompt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CachedResolver>();
    }
}
