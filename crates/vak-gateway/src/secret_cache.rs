//! The service's copy of each bot's signing secret, so that verifying a
//! request (and refusing an unsigned or wrongly signed one, 401) never
//! waits for the store: with PostgreSQL a read would queue for a pooled
//! connection behind every delivery in flight.
//!
//! How a change of a secret is seen, without any notification from the
//! store:
//!
//! - a request whose signature does not match (or a bot with no secret)
//!   reads the secret again, at most once per [`RECHECK`] per bot, and is
//!   verified again with what it read: a secret created or replaced is
//!   accepted by the first request signed with it (or one at most
//!   [`RECHECK`] later, when another wrong one just read it), and a flood
//!   of wrong signatures reads it at most once per [`RECHECK`];
//! - a secret held longer than [`MAX_AGE`] is read again before it is
//!   used, so a secret replaced because it leaked stops being accepted
//!   within [`MAX_AGE`], even if nobody signs with the new one.
//!
//! A read that fails is never kept. At most [`MAX_BOTS`] bots are held;
//! past that the copy starts over (names come from request paths, which
//! anyone can send).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The least time between two reads of one bot's secret prompted by
/// signatures that did not match.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

/// The longest a secret read from the store is used before it is read
/// again.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(60);

/// At most this many bots' secrets are held.
pub(crate) const MAX_BOTS: usize = 4096;

#[derive(Debug, Clone)]
struct Entry {
    /// `None`: the bot has no secret (as read at `read_at`).
    secret: Option<String>,
    read_at: Instant,
}

/// Each bot's secret as last read (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct SecretCache {
    entries: Mutex<HashMap<String, Entry>>,
}

impl SecretCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The secret to verify `bot`'s request with: the one held, unless it
    /// is older than [`MAX_AGE`] or none is held, then `read` (outside the
    /// lock: it may wait for the store).
    pub(crate) fn get<E>(
        &self,
        bot: &str,
        now: Instant,
        read: impl FnOnce() -> Result<Option<String>, E>,
    ) -> Result<Option<String>, E> {
        if let Some(entry) = self.lock().get(bot)
            && now.saturating_duration_since(entry.read_at) < MAX_AGE
        {
            return Ok(entry.secret.clone());
        }
        self.read(bot, now, read)
    }

    /// The secret held for `bot` while it is fresh (as [`get`] would give
    /// it without reading), `None` when [`get`] would read the store.
    ///
    /// [`get`]: SecretCache::get
    pub(crate) fn held(&self, bot: &str, now: Instant) -> Option<Option<String>> {
        self.lock()
            .get(bot)
            .filter(|entry| now.saturating_duration_since(entry.read_at) < MAX_AGE)
            .map(|entry| entry.secret.clone())
    }

    /// Whether [`reread`] would read the store now (the secret was read at
    /// least [`RECHECK`] ago, or is not held).
    ///
    /// [`reread`]: SecretCache::reread
    pub(crate) fn reread_due(&self, bot: &str, now: Instant) -> bool {
        self.lock()
            .get(bot)
            .is_none_or(|entry| now.saturating_duration_since(entry.read_at) >= RECHECK)
    }

    /// After a signature that did not match `held` (what [`get`] gave):
    /// the secret read again, when it was last read at least [`RECHECK`]
    /// ago (or is no longer held), and `None` when it is too soon to read
    /// it again.
    ///
    /// [`get`]: SecretCache::get
    pub(crate) fn reread<E>(
        &self,
        bot: &str,
        now: Instant,
        read: impl FnOnce() -> Result<Option<String>, E>,
    ) -> Result<Option<Option<String>>, E> {
        if let Some(entry) = self.lock().get(bot)
            && now.saturating_duration_since(entry.read_at) < RECHECK
        {
            return Ok(None);
        }
        self.read(bot, now, read).map(Some)
    }

    fn read<E>(
        &self,
        bot: &str,
        now: Instant,
        read: impl FnOnce() -> Result<Option<String>, E>,
    ) -> Result<Option<String>, E> {
        let secret = read()?;
        let mut entries = self.lock();
        if entries.len() >= MAX_BOTS && !entries.contains_key(bot) {
            entries.clear();
        }
        entries.insert(
            bot.to_owned(),
            Entry {
                secret: secret.clone(),
                read_at: now,
            },
        );
        Ok(secret)
    }

    /// How many bots are held (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    type Never = std::convert::Infallible;

    /// A reader that counts its reads and answers the current secret.
    struct Store {
        reads: Cell<usize>,
        secret: std::cell::RefCell<Option<String>>,
    }

    impl Store {
        fn new(secret: Option<&str>) -> Self {
            Store {
                reads: Cell::new(0),
                secret: std::cell::RefCell::new(secret.map(ToOwned::to_owned)),
            }
        }
        fn read(&self) -> Result<Option<String>, Never> {
            self.reads.set(self.reads.get() + 1);
            Ok(self.secret.borrow().clone())
        }
    }

    /// What the service answers without a thread agrees with `get` and
    /// `reread`: the held secret only while `get` would not read, and a
    /// reread due exactly when `reread` would read.
    #[test]
    fn the_held_secret_and_a_due_reread_agree_with_get_and_reread() {
        let (cache, store, t0) = (
            SecretCache::default(),
            Store::new(Some("s1")),
            Instant::now(),
        );
        assert_eq!(cache.held("bot", t0), None);
        assert!(cache.reread_due("bot", t0));
        assert_eq!(cache.get("bot", t0, || store.read()), Ok(Some("s1".into())));
        assert_eq!(cache.held("bot", t0), Some(Some("s1".into())));
        let soon = t0 + RECHECK / 2;
        assert!(!cache.reread_due("bot", soon));
        assert_eq!(cache.reread("bot", soon, || store.read()), Ok(None));
        let later = t0 + RECHECK;
        assert!(cache.reread_due("bot", later));
        assert_eq!(store.reads.get(), 1);
        // Past its age nothing is held: the service leaves it to `get`.
        assert_eq!(cache.held("bot", t0 + MAX_AGE), None);
        // A bot with no secret is held as such.
        let none = Store::new(None);
        assert_eq!(cache.get("other", t0, || none.read()), Ok(None));
        assert_eq!(cache.held("other", t0), Some(None));
    }

    #[test]
    fn many_requests_read_the_secret_once() {
        let (cache, store, t0) = (
            SecretCache::default(),
            Store::new(Some("s1")),
            Instant::now(),
        );
        for i in 0..1000 {
            let now = t0 + Duration::from_millis(i * 50);
            assert_eq!(
                cache.get("alpha", now, || store.read()),
                Ok(Some("s1".to_owned()))
            );
        }
        assert_eq!(store.reads.get(), 1, "50 s of requests, one read");
    }

    #[test]
    fn wrong_signatures_read_again_at_most_once_per_recheck() {
        let (cache, store, t0) = (
            SecretCache::default(),
            Store::new(Some("s1")),
            Instant::now(),
        );
        let _ = cache.get("alpha", t0, || store.read());
        // A flood of wrong signatures in the first RECHECK: no read.
        for i in 0..100 {
            let now = t0 + RECHECK * i / 101;
            assert_eq!(cache.reread("alpha", now, || store.read()), Ok(None));
        }
        assert_eq!(store.reads.get(), 1);
        // The secret is replaced; the first wrong signature after RECHECK
        // reads it, and every request from then on is verified with it.
        *store.secret.borrow_mut() = Some("s2".to_owned());
        let later = t0 + RECHECK;
        assert_eq!(
            cache.reread("alpha", later, || store.read()),
            Ok(Some(Some("s2".to_owned())))
        );
        assert_eq!(
            cache.get("alpha", later, || store.read()),
            Ok(Some("s2".to_owned()))
        );
        assert_eq!(store.reads.get(), 2);
        assert_eq!(cache.reread("alpha", later, || store.read()), Ok(None));
    }

    #[test]
    fn a_secret_created_later_is_seen_and_an_old_one_expires() {
        let (cache, store, t0) = (SecretCache::default(), Store::new(None), Instant::now());
        assert_eq!(cache.get("alpha", t0, || store.read()), Ok(None));
        *store.secret.borrow_mut() = Some("s1".to_owned());
        let now = t0 + RECHECK;
        assert_eq!(
            cache.reread("alpha", now, || store.read()),
            Ok(Some(Some("s1".to_owned())))
        );
        // Replaced, and nobody signs with the new one: the old one is not
        // used past MAX_AGE.
        *store.secret.borrow_mut() = Some("s2".to_owned());
        assert_eq!(
            cache.get("alpha", now + MAX_AGE - Duration::from_millis(1), || store
                .read()),
            Ok(Some("s1".to_owned()))
        );
        assert_eq!(
            cache.get("alpha", now + MAX_AGE, || store.read()),
            Ok(Some("s2".to_owned()))
        );
    }

    #[test]
    fn a_failed_read_is_not_kept_and_the_copy_is_bounded() {
        let (cache, t0) = (SecretCache::default(), Instant::now());
        assert_eq!(
            cache.get("alpha", t0, || Err::<Option<String>, _>("down")),
            Err("down")
        );
        assert_eq!(cache.len(), 0);
        for i in 0..MAX_BOTS + 10 {
            let _ = cache.get(&format!("bot{i}"), t0, || Ok::<_, Never>(None));
            assert!(cache.len() <= MAX_BOTS);
        }
    }
}
