//! The service's resolution cache: one resolved prompt per bot and chat,
//! reused while none of its inputs changed.
//!
//! The validation key is a stamp of every entry under the home's and the
//! project's `.vak` directories (each directory's sorted names; each file's
//! path, size, inode, modification and status-change times, following
//! symlinks), minus the stores that change on every delivery (`sessions/`,
//! `audit/`, `gateway/bindings.json*`, `gateway/secrets/`, `gateway/replay/`,
//! `gateway/locks/`, `admin.token`). A file created, removed, renamed or
//! written anywhere a layer, the gateway JSON, a config, a skill or the
//! trust store lives changes the stamp, so the next delivery resolves
//! afresh. As in git's "racy" rule, a stamp that contains an entry changed
//! within the last [`RACY_SECS`] seconds is not cached (file timestamps are
//! coarser than writes); nor is one over [`MAX_ENTRIES`] entries.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use camino::{Utf8Path, Utf8PathBuf};
use vak_core::InboundPrompts;
use vak_core::prompts::ResolvedPrompt;

use crate::LifecycleError;

/// Entries changed this recently make a stamp uncacheable.
pub const RACY_SECS: u64 = 2;
/// A tree with more entries than this is not cached.
pub const MAX_ENTRIES: usize = 4096;
/// At most this many chats' resolutions are held; past it the cache starts
/// over, so memory does not grow with the number of chats.
pub const MAX_CACHED: usize = 4096;
const MAX_DEPTH: usize = 8;

/// Paths under `$VAK_HOME/.vak` that are stores, not inputs; a path equal
/// to one of these, or (for `gateway/bindings.json`) beginning with it, is
/// left out of the stamp, so deliveries writing them do not invalidate.
const HOME_STORES: &[&str] = &[
    "sessions",
    "audit",
    "gateway/secrets",
    "gateway/replay",
    "gateway/locks",
    "gateway/bindings.json",
    "admin.token",
];

/// A resolved prompt that fits its model's window, and the stamp it was
/// resolved under.
#[derive(Debug)]
struct Entry {
    stamp: u64,
    resolved: Arc<ResolvedPrompt>,
}

/// The cache, shared by a service's deliveries.
#[derive(Debug)]
pub struct ResolutionCache {
    home: Utf8PathBuf,
    project: Utf8PathBuf,
    entries: Mutex<HashMap<(String, String), Entry>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl ResolutionCache {
    /// A cache for resolutions under `home` and `project`.
    pub fn new(home: &Utf8Path, project: &Utf8Path) -> Self {
        ResolutionCache {
            home: home.to_owned(),
            project: project.to_owned(),
            entries: Mutex::new(HashMap::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// How many resolutions were served from the cache, and how many made.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// The current resolution for `prompts` (checked against its model's
    /// window): cached when the inputs are unchanged, else fresh.
    pub fn resolve(&self, prompts: &InboundPrompts) -> Result<Arc<ResolvedPrompt>, LifecycleError> {
        let key = (
            prompts.bot().map(ToString::to_string).unwrap_or_default(),
            prompts.chat().map(ToString::to_string).unwrap_or_default(),
        );
        let before = self.stamp();
        if let Some(stamp) = before {
            let entries = self.lock();
            if let Some(entry) = entries.get(&key).filter(|e| e.stamp == stamp) {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Arc::clone(&entry.resolved));
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let resolved = prompts.resolve()?;
        vak_core::check_window(&resolved)?;
        let resolved = Arc::new(resolved);
        // Cache only when nothing changed while resolving.
        if let (Some(before), Some(after)) = (before, self.stamp())
            && before == after
        {
            let mut entries = self.lock();
            if entries.len() >= MAX_CACHED && !entries.contains_key(&key) {
                entries.clear();
            }
            entries.insert(
                key,
                Entry {
                    stamp: after,
                    resolved: Arc::clone(&resolved),
                },
            );
        }
        Ok(resolved)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The stamp of every input, or `None` when it must not be cached.
    fn stamp(&self) -> Option<u64> {
        let now = SystemTime::now();
        let mut walk = Walk {
            hasher: DefaultHasher::new(),
            entries: 0,
            racy_after: now.checked_sub(Duration::from_secs(RACY_SECS))?,
            racy: false,
        };
        let home_vak = self.home.join(".vak");
        let skip: Vec<Utf8PathBuf> = HOME_STORES.iter().map(|p| home_vak.join(p)).collect();
        walk.dir(&home_vak, &skip, 0)?;
        let project_vak = self.project.join(".vak");
        if project_vak != home_vak {
            walk.dir(&project_vak, &skip, 0)?;
        }
        (!walk.racy).then(|| walk.hasher.finish())
    }
}

struct Walk {
    hasher: DefaultHasher,
    entries: usize,
    racy_after: SystemTime,
    racy: bool,
}

impl Walk {
    fn entry(&mut self, path: &Utf8Path, meta: Option<&std::fs::Metadata>) -> Option<()> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return None;
        }
        path.hash(&mut self.hasher);
        match meta {
            None => 0u8.hash(&mut self.hasher),
            Some(meta) => {
                meta.len().hash(&mut self.hasher);
                let nanos = |t: std::io::Result<SystemTime>| {
                    t.ok()
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos())
                };
                let modified = meta.modified();
                if modified.as_ref().is_ok_and(|m| *m > self.racy_after) {
                    self.racy = true;
                }
                nanos(modified).hash(&mut self.hasher);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::MetadataExt as _;
                    (meta.ino(), meta.dev(), meta.ctime(), meta.ctime_nsec())
                        .hash(&mut self.hasher);
                    let changed = UNIX_EPOCH
                        + Duration::new(
                            u64::try_from(meta.ctime()).unwrap_or(0),
                            u32::try_from(meta.ctime_nsec()).unwrap_or(0),
                        );
                    if changed > self.racy_after {
                        self.racy = true;
                    }
                }
            }
        }
        Some(())
    }

    /// A directory: its path and, through its entries, its sorted names
    /// (its own times change with every store write beside an input, so
    /// they are not part of the stamp).
    fn dir(&mut self, dir: &Utf8Path, skip: &[Utf8PathBuf], depth: usize) -> Option<()> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return None;
        }
        dir.hash(&mut self.hasher);
        let is_dir = std::fs::metadata(dir).is_ok_and(|m| m.is_dir());
        is_dir.hash(&mut self.hasher);
        if depth > MAX_DEPTH || !is_dir {
            return Some(());
        }
        let Ok(listing) = std::fs::read_dir(dir) else {
            return Some(());
        };
        let mut names: Vec<Utf8PathBuf> = listing
            .filter_map(Result::ok)
            .filter_map(|e| Utf8PathBuf::from_path_buf(e.path()).ok())
            .filter(|path| {
                !skip.iter().any(|s| {
                    path == s
                        || (s.as_str().ends_with("bindings.json")
                            && path.as_str().starts_with(s.as_str()))
                })
            })
            .collect();
        if names.len() > MAX_ENTRIES {
            return None;
        }
        names.sort();
        for path in names {
            // Follows symlinks: an edit to what a link points at counts.
            let meta = std::fs::metadata(&path).ok();
            if meta.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                self.dir(&path, skip, depth + 1)?;
            } else {
                self.entry(&path, meta.as_ref())?;
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_core::Selectors;
    use vak_core::prompts::{Name, NameKind, SurfaceKind};

    fn backdate(dir: &std::path::Path) {
        let old = SystemTime::now() - Duration::from_secs(3600);
        for entry in std::fs::read_dir(dir).expect("dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                backdate(&path);
            } else {
                let file = std::fs::File::options()
                    .append(true)
                    .open(&path)
                    .expect("open");
                file.set_modified(old).expect("set mtime");
            }
        }
    }

    #[test]
    fn hits_while_unchanged_and_misses_after_any_edit() {
        let home = tempfile::tempdir().expect("home");
        let project = tempfile::tempdir().expect("project");
        let h = Utf8Path::from_path(home.path()).expect("utf8");
        let p = Utf8Path::from_path(project.path()).expect("utf8");
        std::fs::create_dir_all(h.join(".vak/prompts")).expect("mkdir");
        std::fs::write(h.join(".vak/prompts/identity.md"), "You are A.").expect("write");
        backdate(home.path());
        let cache = ResolutionCache::new(h, p);
        let prompts = InboundPrompts::open(Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(Name::new(NameKind::Bot, "b").expect("bot")),
            chat: Some(Name::new(NameKind::Chat, "c").expect("chat")),
            ..Selectors::new(h, p)
        })
        .expect("open");
        // Directories were just created: racy until their times are old,
        // so wait it out rather than backdating directory times.
        std::thread::sleep(Duration::from_millis(RACY_SECS * 1000 + 100));
        let first = cache.resolve(&prompts).expect("resolve");
        let second = cache.resolve(&prompts).expect("resolve");
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(cache.counts(), (1, 1));
        // The same length, a new text: the stamp changes (mtime, ctime).
        std::fs::write(h.join(".vak/prompts/identity.md"), "You are B.").expect("write");
        let third = cache.resolve(&prompts).expect("resolve");
        assert!(third.prefix.contains("You are B."), "{}", third.prefix);
        assert_eq!(cache.counts(), (1, 2));
        // A new file where none was (a project layer appears).
        std::fs::create_dir_all(p.join(".vak/prompts")).expect("mkdir");
        std::fs::write(p.join(".vak/prompts/guardrails.md"), "- new rule\n").expect("write");
        let fourth = cache.resolve(&prompts).expect("resolve");
        assert_ne!(fourth.fingerprint, third.fingerprint);
    }
}
