//! Resolved prompts answered from memory while nothing they were read from
//! has changed: the one owner of "a resolution reused while its inputs are
//! unchanged".
//!
//! [`PromptCache`] keeps one [`ResolvedPrompt`] per set of selectors (one
//! per bot and chat in the gateway service, at most [`MAX_CACHED`]; past it
//! the least recently used entry is dropped for each new one), and what
//! each home, project and working directory's last misses read (a
//! [`SnapshotReads`]: a miss for another chat of the same project loads
//! from it and reads only what it does not hold), beside ONE
//! [`InputWatch`] (one inotify instance) covering
//! the union of every cached chain's inputs (the loader's `watch` module says
//! what is watched and why notifications were chosen over per-file identity
//! checks). A warm call is one non-blocking read of the notification queue,
//! a map lookup and an `Arc` clone; any change (an edit, a rename, a symlink
//! swapped, a touch that keeps the mtime, a layer file appearing, the trust
//! store rewritten) drops EVERY entry and every kept read, and each chain is
//! read and composed again on its next call. Where notifications are
//! unavailable every call reloads: slower, never stale.
//!
//! [`CachedResolver`] is the same cache for one set of selectors, owning its
//! [`Core`]. Both only read, like [`crate::InboundPrompts`]: they never hand
//! a `Core` (or selectors) back, only resolutions.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use camino::Utf8PathBuf;
use vak_prompt_compose::{ResolvedPrompt, TailContext};
use vak_prompt_loader::{GatewayTables, InputWatch, LoadRequest, Snapshot, SnapshotReads};
use vak_prompt_trust::Trust;

use crate::{Core, CoreError, InboundPrompts, Selectors};

/// How many times the chain may be read again because a directory had to be
/// added to the watch after a read, before answering without caching.
const MAX_REARMS: usize = 3;

/// At most this many resolutions are held by default; past it each new one
/// replaces the least recently used, so memory stays flat however many
/// chats there are (dropping one entry at a time, rather than starting
/// over, frees memory the next entry reuses and keeps busy chats warm). An
/// entry of a realistic chain costs ~30 KiB (BENCHMARKS.md, `cache_memory`),
/// so the bound holds the cache near 32 MiB; a chat past it costs one load
/// and compose on its next delivery, small beside the delivery's write.
pub const MAX_CACHED: usize = 1024;

/// At most this many sets of roots keep what a miss read
/// ([`SnapshotReads`]), and this many projects their trust; past it they
/// are all dropped and kept again as misses come. A gateway serves a few
/// projects; each set holds the layer texts of one home and project (its
/// gateway tables are the cache's own, shared).
const MAX_KEPT_READS: usize = 16;

/// What a resolution is keyed by: the selectors and a forced trust level,
/// with their hash computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    hash: u64,
    selectors: Selectors,
    forced: Option<Trust>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Key {
    /// The key of `core`, hashed with the cache's own random keys (so the
    /// map below may use that hash as is).
    fn of(core: &Core, keys: &RandomState) -> Key {
        let selectors = core.selectors();
        let forced = core.forced_trust();
        Key {
            hash: keys.hash_one((selectors, forced)),
            selectors: selectors.clone(),
            forced,
        }
    }
}

/// Passes a [`Key`]'s precomputed hash through: the warm path hashes
/// nothing.
#[derive(Debug, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A held resolution and when it was last answered (the cache's own tick).
#[derive(Debug)]
struct Entry {
    prompt: Arc<ResolvedPrompt>,
    used: u64,
}

type Entries = HashMap<Key, Entry, BuildHasherDefault<KeyHasher>>;

/// The directories a request's watch is armed on: the home, the project
/// and the working directory.
type Roots = (Utf8PathBuf, Utf8PathBuf, Option<Utf8PathBuf>);

fn roots(request: &LoadRequest) -> Roots {
    (
        request.home.clone(),
        request.project.clone(),
        request.workdir.clone(),
    )
}

#[derive(Debug)]
struct State {
    /// One watch for every cached chain's inputs.
    watch: InputWatch,
    /// Moves whenever entries were dropped or the watch grew: a resolution
    /// read under an older generation is answered but not cached.
    generation: u64,
    /// The roots the watch was armed on since it was last re-armed.
    walked: HashSet<Roots>,
    entries: Entries,
    /// What the last misses of each set of roots read, and the generation
    /// they were read under: a miss of other selectors with the same roots
    /// loads from it while that generation stands, reading only what it
    /// did not. Dropped with the entries.
    reads: HashMap<Roots, (u64, Arc<SnapshotReads>)>,
    /// The trust store's answer for each (home, project), and the
    /// generation it was read under: the store is watched, so while that
    /// generation stands a miss need not read it (and resolve the project's
    /// path) again. Dropped with the entries.
    trusts: HashMap<(Utf8PathBuf, Utf8PathBuf), (u64, Trust)>,
    /// Moves on every answer from memory and every insert: the recency
    /// the least recently used entry is found by.
    tick: u64,
}

impl State {
    /// Take in what the watch reported: on any change drop every entry and
    /// re-arm the same instance for `core`'s request (cheaper than a new
    /// one). Nothing is built when nothing changed (the warm path).
    fn refresh(&mut self, core: &Core) {
        if !self.watch.changed() {
            return;
        }
        let request = &core.selectors().load_request();
        self.entries.clear();
        self.reads.clear();
        self.trusts.clear();
        self.generation += 1;
        let watch = std::mem::replace(&mut self.watch, InputWatch::unavailable());
        self.watch = watch.rearm(request);
        self.walked.clear();
        self.walked.insert(roots(request));
    }

    /// Make sure the watch covers the directories `request` reads from,
    /// before they are read.
    fn extend(&mut self, request: &LoadRequest) {
        if self.walked.insert(roots(request)) {
            self.watch.extend(request);
            self.generation += 1;
        }
    }

    /// Keep `prompt` for `key`, dropping the least recently used entry
    /// first when `capacity` are held. Finding it is a scan of the
    /// entries, made only on a miss that already read and composed a
    /// chain, which costs far more.
    fn insert(&mut self, key: &Key, prompt: &Arc<ResolvedPrompt>, capacity: usize) {
        if self.entries.len() >= capacity
            && !self.entries.contains_key(key)
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
        {
            self.entries.remove(&oldest);
        }
        self.tick += 1;
        self.entries.insert(
            key.clone(),
            Entry {
                prompt: Arc::clone(prompt),
                used: self.tick,
            },
        );
    }

    /// What misses of `roots` read under the current generation, if kept.
    fn shared_reads(&self, roots: &Roots) -> Option<Arc<SnapshotReads>> {
        self.reads
            .get(roots)
            .filter(|(generation, _)| *generation == self.generation)
            .map(|(_, reads)| Arc::clone(reads))
    }

    /// Keep what a miss of `roots` read under `generation`.
    fn keep_reads(&mut self, roots: Roots, generation: u64, reads: Arc<SnapshotReads>) {
        if self.reads.len() >= MAX_KEPT_READS && !self.reads.contains_key(&roots) {
            self.reads.clear();
        }
        self.reads.insert(roots, (generation, reads));
    }

    /// The trust the store gave `core`'s project under the current
    /// generation, if it was read (never for a forced trust).
    fn kept_trust(&self, core: &Core) -> Option<Trust> {
        let selectors = core.selectors();
        self.trusts
            .get(&(selectors.home.clone(), selectors.project.clone()))
            .filter(|(generation, _)| *generation == self.generation)
            .map(|(_, trust)| *trust)
    }

    /// The entry for `key`, marked used now.
    fn hit(&mut self, key: &Key) -> Option<Arc<ResolvedPrompt>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|entry| {
            entry.used = tick;
            Arc::clone(&entry.prompt)
        })
    }
}

/// Resolved prompts for many selectors (one per bot and chat), from memory
/// while nothing any of them read has changed.
///
/// It holds no [`Core`] and no writer: it is handed the read-only
/// [`InboundPrompts`] for each call and hands back resolutions, so a service
/// shares one between its deliveries (it is `Send + Sync`) without giving
/// the delivery code anything but resolutions.
///
/// ```
/// use vak_core::{InboundPrompts, PromptCache, Selectors};
///
/// let home = tempfile::tempdir().unwrap();
/// let project = tempfile::tempdir().unwrap();
/// let selectors = Selectors::new(
///     home.path().to_str().unwrap(),
///     project.path().to_str().unwrap(),
/// );
/// let cache = PromptCache::new();
/// let prompts = InboundPrompts::open(selectors).unwrap();
/// let first = cache.resolve(&prompts).unwrap();
/// let again = cache.resolve(&prompts).unwrap(); // nothing changed: the same value
/// assert!(std::sync::Arc::ptr_eq(&first, &again) || !cache.is_watching());
/// ```
///
/// ```compile_fail
/// fn on_message(cache: &vak_core::PromptCache) {
///     let core: &vak_core::Core = &*cache; // no Deref to Core, no Core inside
/// }
/// ```
///
/// The whole cache holds one inotify instance, whatever the number of
/// selectors (the kernel's per-user limit, `fs.inotify.max_user_instances`,
/// is 128 by default).
#[derive(Debug)]
pub struct PromptCache {
    state: Mutex<State>,
    keys: RandomState,
    within_window: bool,
    /// At most this many entries ([`MAX_CACHED`] unless
    /// [`PromptCache::with_capacity`]).
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Misses loaded from what an earlier miss of the same roots read.
    shared_loads: AtomicU64,
    /// Whether misses keep what they read for other selectors of the same
    /// roots: not for [`CachedResolver`], whose one key misses only when
    /// something changed.
    share_reads: bool,
    /// The parsed gateway files its deliveries read: an admission and a
    /// chain read after a miss look a chat up in them instead of parsing
    /// the file again.
    gateway: GatewayTables,
}

impl Default for PromptCache {
    fn default() -> Self {
        Self::new()
    }
}

impl PromptCache {
    /// An empty cache; nothing is watched until the first resolution.
    pub fn new() -> Self {
        Self::with_capacity(MAX_CACHED)
    }

    /// An empty cache holding at most `capacity` resolutions (at least
    /// one); past it the least recently used is dropped for each new one.
    pub fn with_capacity(capacity: usize) -> Self {
        PromptCache {
            state: Mutex::new(State {
                watch: InputWatch::unavailable(),
                generation: 0,
                walked: HashSet::new(),
                entries: Entries::default(),
                reads: HashMap::new(),
                trusts: HashMap::new(),
                tick: 0,
            }),
            keys: RandomState::new(),
            within_window: false,
            capacity: capacity.max(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            shared_loads: AtomicU64::new(0),
            share_reads: true,
            gateway: GatewayTables::default(),
        }
    }

    /// An empty cache that checks every resolution it composes against its
    /// model's context window ([`crate::check_window`]): one over it is an
    /// error, never cached, so it is refused again on every call; one that
    /// fits is checked once, not on every answer from memory.
    pub fn within_window() -> Self {
        PromptCache {
            within_window: true,
            ..Self::new()
        }
    }

    /// The current resolution for `prompts`: from memory when none of the
    /// inputs of any cached chain changed since it was composed, else
    /// composed afresh. Its tail is rendered for the instant it was
    /// composed.
    pub fn resolve(&self, prompts: &InboundPrompts) -> Result<Arc<ResolvedPrompt>, CoreError> {
        let core = prompts.core();
        self.resolve_keyed(core, &Key::of(core, &self.keys))
    }

    /// Drop every entry: the caller knows an input changed (the home-side
    /// replica was just synced from the store), without waiting for the
    /// change notification to be read.
    pub fn clear(&self) {
        let mut state = self.lock();
        state.entries.clear();
        state.reads.clear();
        state.trusts.clear();
        state.generation += 1;
    }

    /// A number that stays the same while nothing this cache watches for
    /// `prompts` may have changed — the home and the project, and every
    /// file under their `.vak` but the stores, the home-side replica
    /// included — and moves when anything may have (or the watch grew).
    /// `None` when change notifications are unavailable: then nothing can
    /// be known unchanged. The watch is armed for `prompts` first, so a
    /// change made after this call moves the next answer.
    pub fn change_epoch(&self, prompts: &InboundPrompts) -> Option<u64> {
        let core = prompts.core();
        let mut state = self.lock();
        state.refresh(core);
        state.extend(&core.selectors().load_request());
        state.watch.is_live().then_some(state.generation)
    }

    /// Whether this cache checks what it composes against the model's
    /// window ([`PromptCache::within_window`]).
    pub fn checks_window(&self) -> bool {
        self.within_window
    }

    /// The parsed gateway files this cache's owner shares with
    /// [`InboundPrompts::admission`].
    pub fn gateway_tables(&self) -> &GatewayTables {
        &self.gateway
    }

    /// How many resolutions were answered from memory, and how many
    /// composed.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// How many misses were loaded from what an earlier miss of the same
    /// home, project and working directory read (a chat after another of
    /// the same project reads only its own inputs), rather than from disk.
    pub fn shared_loads(&self) -> u64 {
        self.shared_loads.load(Ordering::Relaxed)
    }

    /// How many resolutions are held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether change notifications are in use (otherwise every call reads
    /// the chain).
    pub fn is_watching(&self) -> bool {
        self.lock().watch.is_live()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Load and compose outside the lock, so deliveries for different chats
    /// run side by side; cache the result only when the watch covered every
    /// input before it was read and nothing was reported since.
    fn resolve_keyed(&self, core: &Core, key: &Key) -> Result<Arc<ResolvedPrompt>, CoreError> {
        let mut counted = false;
        for _ in 0..MAX_REARMS {
            let request = core.selectors().load_request();
            let (generation, shared, kept_trust) = {
                let mut state = self.lock();
                state.refresh(core);
                if let Some(hit) = state.hit(key) {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(hit);
                }
                state.extend(&request);
                let shared = self
                    .share_reads
                    .then(|| state.shared_reads(&roots(&request)))
                    .flatten();
                let kept_trust = match core.forced_trust() {
                    Some(_) => None,
                    None => state.kept_trust(core),
                };
                (state.generation, shared, kept_trust)
            };
            if !counted {
                self.misses.fetch_add(1, Ordering::Relaxed);
                counted = true;
            }
            if shared.is_some() {
                self.shared_loads.fetch_add(1, Ordering::Relaxed);
            }
            let mut snapshot = if self.share_reads {
                Snapshot::sharing(&self.gateway, shared)
            } else {
                Snapshot::once_sharing(&self.gateway)
            };
            let chain = core.load_from(&mut snapshot)?;
            let trust = match kept_trust {
                Some(trust) => trust,
                None => core.trust()?,
            };
            let prompt = Arc::new(self.checked(core.compose(&chain, trust, TailContext::now()))?);
            let mut state = self.lock();
            state.refresh(core);
            if state.watch.cover(&chain) {
                // A directory was added after the read: read again under it.
                state.generation += 1;
                continue;
            }
            if state.generation == generation && state.watch.is_live() {
                state.insert(key, &prompt, self.capacity);
                // Read under a watch that covered it and reported nothing
                // since: as current as the resolution just kept.
                if let Some(reads) = snapshot.into_reads() {
                    state.keep_reads(roots(&request), generation, reads);
                }
                if core.forced_trust().is_none() && kept_trust.is_none() {
                    let selectors = core.selectors();
                    if state.trusts.len() >= MAX_KEPT_READS {
                        state.trusts.clear();
                    }
                    let roots = (selectors.home.clone(), selectors.project.clone());
                    state.trusts.insert(roots, (generation, trust));
                }
            }
            // Otherwise something changed while it was read: the answer is
            // as fresh as the call, but not kept.
            return Ok(prompt);
        }
        if !counted {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        let chain = core.load()?;
        let trust = core.trust()?;
        Ok(Arc::new(self.checked(core.compose(
            &chain,
            trust,
            TailContext::now(),
        ))?))
    }

    fn checked(&self, prompt: ResolvedPrompt) -> Result<ResolvedPrompt, CoreError> {
        let prompt = crate::core::refuse_imports(prompt)?;
        if self.within_window {
            crate::check_window(&prompt)?;
        }
        Ok(prompt)
    }
}

/// Resolves the prompt for one set of selectors, from memory while nothing
/// it read has changed: a [`PromptCache`] with one entry, owning its
/// [`Core`].
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
/// Each resolver holds one inotify instance; the kernel's per-user limit
/// (`fs.inotify.max_user_instances`, 128 by default) bounds how many can
/// watch at once, and one past it reloads every time. Many selectors share
/// one instance through one [`PromptCache`].
#[derive(Debug)]
pub struct CachedResolver {
    core: Core,
    key: Key,
    cache: PromptCache,
}

impl CachedResolver {
    /// A resolver for `selectors` (trust as the trust store says).
    pub fn open(selectors: Selectors) -> Result<Self, CoreError> {
        Ok(Self::from_core(Core::open(selectors)?))
    }

    /// Wrap `core`, giving it up.
    pub fn from_core(core: Core) -> Self {
        let cache = PromptCache {
            share_reads: false,
            ..PromptCache::new()
        };
        CachedResolver {
            key: Key::of(&core, &cache.keys),
            core,
            cache,
        }
    }

    /// The resolved prompt, composed again only when something it was read
    /// from changed. Its tail is rendered for the instant it was composed;
    /// render a current one with `render_tail`.
    pub fn resolve(&self) -> Result<Arc<ResolvedPrompt>, CoreError> {
        self.cache.resolve_keyed(&self.core, &self.key)
    }

    /// Whether change notifications are in use (otherwise every call reads
    /// the chain).
    pub fn is_watching(&self) -> bool {
        self.cache.is_watching()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CachedResolver>();
        shared::<PromptCache>();
    }
}
