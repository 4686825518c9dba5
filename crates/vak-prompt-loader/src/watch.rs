//! Knowing that nothing a chain was loaded from has changed, without
//! re-reading it: change notifications (Linux inotify) on every directory
//! the chain's inputs live in.
//!
//! Chosen over a per-file identity check (device, inode, size, mtime, ctime)
//! by measurement (see `BENCHMARKS.md`): a `statx` costs ~250 ns here, so
//! checking the ~50 files and directories of a full chain costs ~13 µs, over
//! the 10 µs a warm resolution may take; an empty non-blocking read of the
//! notification queue costs ~0.1 µs whatever the chain's size. Notifications
//! are also exact where timestamps are not: the kernel stamps files from a
//! coarse clock (a tick of 1–4 ms), so two same-size writes within one tick
//! leave every identity field equal, and an identity check would have to
//! distrust any file modified within a tick of the check (git's "racily
//! clean" rule). An inotify event is queued by the very system call that
//! changes the directory or the file, before that call returns.
//!
//! What is watched, all of it before the chain is read:
//!
//! - the home and the project directories themselves, every event;
//! - every directory and file under `<home>/.vak` and `<project>/.vak`,
//!   following symlinks (so a symlink's target is watched as well as the
//!   directory holding the link), except the stores that are not prompt
//!   input (`sessions`, `audit`, `objects`, `history`, the bindings, and the gateway's `secrets`,
//!   `claims`, `replay` and `locks`, which every delivery writes); a file's own watch sees an
//!   edit made through another hard link, which its directory's does not;
//! - each file the chain reports, and the directory that really holds it (a
//!   symlink leading outside `.vak` is followed to it), when not watched
//!   already: added after the read, and then the chain is read again, so the
//!   watch is in place before the text it covers is read;
//! - every ancestor of the home and the project, for the one entry on the
//!   way (a renamed or replaced parent directory is seen);
//! - each directory level between the project root and the working
//!   directory, and its `.vak` tree (directory sub-layers and interop files
//!   such as `AGENTS.md` may appear there).
//!
//! After a change the caller re-arms the same instance ([`InputWatch::rearm`]:
//! drain, watch again, read again) rather than open a new one, because
//! closing an inotify instance waits for the kernel to retire its watches
//! (4.7 ms against 0.32 ms per reload in the `resolve/changed_one_file`
//! bench). A watch on a directory that is no longer an input stays until the
//! kernel drops it: at worst a spurious reload.
//!
//! Any event is a change, except, in a `.vak` directory and its `gateway`
//! directory only, events naming files vak writes there as state (the
//! session and audit stores, the bindings, the admin token, lock files,
//! quarantined `*.foreign-*` lines; in `gateway`, also its `secrets`,
//! `claims`, `replay` and `locks` directories). [`InputWatch::extend`] adds a further
//! chain's directories to the same instance, so one instance (one of the
//! kernel's per-user `fs.inotify.max_user_instances`) serves many chains. A lost event (queue overflow) or
//! a removed watch is a change. When notifications are unavailable (not
//! Linux, the per-user limit on instances or watches reached, more than
//! [`MAX_WATCHES`] directories), [`InputWatch::changed`] always says yes:
//! the caller reloads every time, slower and never stale. Not seen: writes
//! through a shared memory mapping (the kernel sends no event for them) and
//! changes made on another machine to a network filesystem.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use camino::Utf8Path;

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use crate::LoadRequest;
use crate::chain::LoadedChain;

/// More directories than this and the watch gives up (reload every time).
pub const MAX_WATCHES: usize = 2048;

/// How deep below a `.vak` directory the walk goes.
const MAX_DEPTH: usize = 8;

/// Directories under a `.vak` that hold state, not prompt input: the
/// session and audit stores, and the prompt history (objects a session or
/// a save keeps, the version log), which a delivery writes.
const NOT_INPUT_DIRS: [&str; 4] = ["sessions", "audit", "objects", "history"];

/// Directories under a `.vak/gateway` that hold state, not prompt input:
/// the signing secrets, the replay markers (`claims`, and `replay` as older
/// builds kept them) and the per-chat locks a
/// delivery writes (so a delivery does not invalidate what it resolved).
const GATEWAY_STATE_DIRS: [&str; 4] = ["secrets", "replay", "claims", "locks"];

/// Whether an event naming `name`, in a `.vak` directory or its `gateway`
/// directory, may be ignored: files that vak writes there as state, never
/// reads as prompt input. Anywhere else every name counts (a skill may be
/// called `sessions`).
fn not_input(name: &[u8]) -> bool {
    let name = String::from_utf8_lossy(name);
    NOT_INPUT_DIRS.contains(&name.as_ref())
        || name.starts_with("bindings.json")
        || name == "admin.token"
        || name
            .trim_start_matches('.')
            .starts_with("home-replica.json")
        || name.ends_with(".lock")
        || name.contains(".foreign-")
}

/// Whether an event naming `name` in a `.vak/gateway` directory may be
/// ignored: [`not_input`], or one of its state directories.
fn not_gateway_input(name: &[u8]) -> bool {
    not_input(name) || GATEWAY_STATE_DIRS.iter().any(|d| d.as_bytes() == name)
}

/// Which events of one watched directory count.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Filter {
    /// Every event.
    All,
    /// Every event except those naming state files ([`not_input`]): a
    /// `.vak` directory.
    State,
    /// Every event except those naming state files or directories
    /// ([`not_gateway_input`]): a `.vak/gateway` directory.
    GatewayState,
    /// Only events naming these entries (an ancestor of a root), and the
    /// directory's own removal or move.
    Names(HashSet<Vec<u8>>),
}

#[derive(Debug)]
struct Live {
    fd: OwnedFd,
    filters: HashMap<i32, Filter>,
    buf: Vec<u8>,
    /// The input paths [`InputWatch::cover`] has covered since the watch
    /// was last armed: nothing was reported since, so each still leads
    /// where it led and is still watched there, and is not resolved again
    /// (a `realpath` and two `stat`s a path, most of a cache miss's work).
    /// Kept as strings: a path hashes and compares component by component.
    covered: HashSet<String>,
}

/// Change notifications for the inputs of one loaded chain.
#[derive(Debug)]
pub struct InputWatch {
    live: Option<Live>,
}

const DIR_EVENTS: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

const FILE_EVENTS: WatchFlags = DIR_EVENTS.difference(WatchFlags::ONLYDIR);

/// `IN_IGNORED`: the kernel removed a watch (its directory or file is gone).
const IGNORED: u32 = 0x8000;
/// `IN_Q_OVERFLOW` and `IN_IGNORED`: events were lost, or a watch is gone.
const LOST: u32 = 0x4000 | IGNORED;

/// The watch descriptor, mask and name length of the event `buf` starts
/// with (`struct inotify_event`, native byte order).
fn header(buf: &[u8]) -> (i32, u32, usize) {
    let word = |i: usize| match buf.get(i..i + 4) {
        Some(&[a, b, c, d]) => [a, b, c, d],
        _ => [0; 4],
    };
    (
        i32::from_ne_bytes(word(0)),
        u32::from_ne_bytes(word(4)),
        u32::from_ne_bytes(word(12)) as usize,
    )
}
/// `IN_DELETE_SELF` and `IN_MOVE_SELF`.
const SELF_GONE: u32 = 0x400 | 0x800;

impl InputWatch {
    /// A watch that reports a change on every check: reload every time.
    pub fn unavailable() -> Self {
        InputWatch { live: None }
    }

    /// Watch the directories `request` may read from, before reading them.
    /// Then load the chain and call [`cover`](Self::cover) with it.
    pub fn arm(request: &LoadRequest) -> Self {
        let Ok(fd) = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC) else {
            tracing::debug!("inotify unavailable; prompt resolution will reload every time");
            return Self::unavailable();
        };
        let live = Live {
            fd,
            filters: HashMap::new(),
            buf: vec![0; 4096],
            covered: HashSet::new(),
        };
        Self::watching(live, request)
    }

    /// Forget what was reported so far and watch what `request` may read
    /// from again, before reading it again: directories that appeared are
    /// added; the instance and its watches are kept (closing an inotify
    /// instance waits for the kernel to retire its watches, milliseconds).
    pub fn rearm(self, request: &LoadRequest) -> Self {
        let Some(mut live) = self.live else {
            return Self::arm(request);
        };
        if !live.drain() {
            return Self::unavailable();
        }
        // Something was reported: any covered path may lead elsewhere now.
        live.covered.clear();
        Self::watching(live, request)
    }

    /// Watch what `request` may read from as well, on the same instance,
    /// keeping what was reported so far: one watch for the union of several
    /// chains' inputs. Call it before reading the chain, then
    /// [`cover`](Self::cover) it.
    pub fn extend(&mut self, request: &LoadRequest) {
        if let Some(live) = &mut self.live
            && !live.watch_request(request)
        {
            tracing::debug!("could not watch every prompt input directory; reloading every time");
            self.live = None;
        }
    }

    fn watching(mut live: Live, request: &LoadRequest) -> Self {
        if !live.watch_request(request) {
            tracing::debug!("could not watch every prompt input directory; reloading every time");
            return Self::unavailable();
        }
        InputWatch { live: Some(live) }
    }
}

impl Live {
    /// Watch every directory `request` may read from; `false` when one
    /// could not be watched.
    fn watch_request(&mut self, request: &LoadRequest) -> bool {
        let live = self;
        let mut ok = true;
        for root in [request.home.as_std_path(), request.project.as_std_path()] {
            ok &= live.ancestors(root);
            ok &= live.add(root, Filter::All);
            let mut seen = HashSet::new();
            ok &= live.walk(&root.join(".vak"), 0, &mut seen);
        }
        // The managed layer: its directory and its `surface/` tree, where a
        // file may appear, change or be re-signed at any time.
        if let Some(managed) = crate::ManagedLocation::find()
            && managed.dir.is_dir()
        {
            let dir = managed.dir.as_std_path();
            ok &= live.ancestors(dir);
            ok &= live.add(dir, Filter::All);
            let mut seen = HashSet::new();
            ok &= live.walk(&dir.join("surface"), 1, &mut seen);
        }
        // Directory sub-layers: each level between the root
        // and the working directory, where a `.vak/prompts/` or an interop
        // file such as `AGENTS.md` may appear at any time.
        if let Some(workdir) = &request.workdir {
            let mut seen = HashSet::new();
            for level in crate::discover::levels_between(&request.project, workdir, &request.home) {
                ok &= live.add(level.as_std_path(), Filter::All);
                ok &= live.walk(&level.as_std_path().join(".vak"), 0, &mut seen);
            }
        }
        ok
    }
}

impl InputWatch {
    /// Watch the directories that really hold the files `chain` was read
    /// from. Returns `true` when a directory had not been watched yet: the
    /// caller must then read the chain again (its text may have changed
    /// before the watch was in place) and cover that.
    pub fn cover(&mut self, chain: &LoadedChain) -> bool {
        let Some(live) = &mut self.live else {
            return false;
        };
        let mut paths: Vec<&Utf8Path> = Vec::new();
        paths.extend(
            chain
                .contributions
                .iter()
                .filter_map(|c| c.provenance.source.path()),
        );
        paths.extend(
            chain
                .skipped
                .iter()
                .filter_map(|s| s.provenance.source.path()),
        );
        // Imported files: inside a watched `.vak`, but a symlink among them
        // leads to a file whose own directory must be watched too.
        paths.extend(
            chain
                .contributions
                .iter()
                .flat_map(|c| &c.imports.files)
                .filter_map(|f| f.provenance.source.path()),
        );
        paths.extend(chain.configs.iter().map(|c| &*c.path));
        paths.extend(chain.skills.iter().map(|s| s.path()));
        paths.extend(chain.legacy_system.iter().map(|l| l.path()));
        paths.extend(chain.role_dirs.iter().map(|d| d.as_path()));
        let mut added = false;
        for path in paths {
            if live.covered.contains(path.as_str()) {
                continue;
            }
            // Gateway sources are keys, not paths (`path()` is `None`);
            // their files sit in a watched `.vak` directory.
            let Ok(real) = std::fs::canonicalize(path) else {
                continue;
            };
            // The file itself too (an edit through another hard link reports
            // to the file's watch, not to this directory's).
            if !real.is_dir() {
                let before = live.filters.len();
                if !live.add_file(&real) {
                    self.live = None;
                    return false;
                }
                added |= live.filters.len() > before;
            }
            let dir = if real.is_dir() {
                Some(real.as_path())
            } else {
                real.parent()
            };
            if let Some(dir) = dir {
                let before = live.filters.len();
                if !live.add(dir, Filter::All) {
                    self.live = None;
                    return false;
                }
                added |= live.filters.len() > before;
            }
            live.covered.insert(path.as_str().to_owned());
        }
        added
    }

    /// Whether anything the chain was read from may have changed since the
    /// watch was armed. Cheap when nothing did: one non-blocking read.
    pub fn changed(&mut self) -> bool {
        let Some(live) = &mut self.live else {
            return true;
        };
        loop {
            let n = match rustix::io::read(&live.fd, &mut live.buf[..]) {
                Ok(n) => n,
                Err(rustix::io::Errno::AGAIN) => return false,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return true,
            };
            if n == 0 || live.any_change(n) {
                return true;
            }
        }
    }

    /// Whether notifications are in use (else every check is a change).
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }
}

impl Live {
    /// Read every queued event, forgetting the watches the kernel removed.
    /// `false` when the queue cannot be read.
    fn drain(&mut self) -> bool {
        loop {
            let n = match rustix::io::read(&self.fd, &mut self.buf[..]) {
                Ok(n) => n,
                Err(rustix::io::Errno::AGAIN) => return true,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            };
            if n == 0 {
                return false;
            }
            let mut at = 0;
            while at + 16 <= n {
                let (wd, mask, len) = header(&self.buf[at..n]);
                if mask & IGNORED != 0 {
                    self.filters.remove(&wd);
                }
                at += 16 + len;
            }
        }
    }

    /// Watch the file at `path` (its inode, whatever path changes it).
    fn add_file(&mut self, path: &Path) -> bool {
        self.add_with(path, Filter::All, FILE_EVENTS)
    }

    /// Watch `dir`; `false` when it exists and cannot be watched.
    fn add(&mut self, dir: &Path, filter: Filter) -> bool {
        self.add_with(dir, filter, DIR_EVENTS)
    }

    fn add_with(&mut self, dir: &Path, filter: Filter, events: WatchFlags) -> bool {
        match inotify::add_watch(&self.fd, dir, events) {
            Ok(wd) => {
                if self.filters.len() >= MAX_WATCHES && !self.filters.contains_key(&wd) {
                    return false;
                }
                // A `.vak` (or its `gateway`) directory keeps its state
                // filter when a file read from it asks for every event: the
                // names it ignores are never read as input, and the first
                // delivery creating `sessions/` must not count as an edit.
                let merged = match (self.filters.remove(&wd), filter) {
                    (Some(Filter::State), _) | (_, Filter::State) => Filter::State,
                    (Some(Filter::GatewayState), _) | (_, Filter::GatewayState) => {
                        Filter::GatewayState
                    }
                    (Some(Filter::All), _) | (_, Filter::All) => Filter::All,
                    (Some(Filter::Names(mut a)), Filter::Names(b)) => {
                        a.extend(b);
                        Filter::Names(a)
                    }
                    (None, names) => names,
                };
                self.filters.insert(wd, merged);
                true
            }
            // Missing (or not a directory): its parent is watched and will
            // report it appearing.
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => true,
            Err(_) => false,
        }
    }

    /// Watch every ancestor of `root` for the one entry leading to it.
    fn ancestors(&mut self, root: &Path) -> bool {
        let mut ok = true;
        let mut child = root;
        while let Some(parent) = child.parent() {
            if let Some(name) = child.file_name() {
                let name = name.as_encoded_bytes().to_vec();
                ok &= self.add(parent, Filter::Names(HashSet::from([name])));
            }
            child = parent;
        }
        ok
    }

    /// Watch `dir` and every directory below it (symlinks followed, each
    /// directory once).
    fn walk(&mut self, dir: &Path, depth: usize, seen: &mut HashSet<(u64, u64)>) -> bool {
        let Ok(meta) = std::fs::metadata(dir) else {
            return true; // missing: its parent reports it appearing
        };
        if !meta.is_dir() || !seen.insert((meta.dev(), meta.ino())) {
            return true;
        }
        let gateway = depth == 1 && dir.ends_with("gateway");
        let holds_state = depth == 0 || gateway;
        let filter = if gateway {
            Filter::GatewayState
        } else if holds_state {
            Filter::State
        } else {
            Filter::All
        };
        if !self.add(dir, filter) {
            return false;
        }
        if depth >= MAX_DEPTH {
            return true;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return true;
        };
        let mut subdirs: Vec<PathBuf> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if depth == 0 && NOT_INPUT_DIRS.iter().any(|d| name == *d) {
                continue;
            }
            if gateway && GATEWAY_STATE_DIRS.iter().any(|d| name == *d) {
                continue;
            }
            let path = entry.path();
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => subdirs.push(path),
                Ok(meta) if meta.is_file() => {
                    let state = holds_state && not_input(name.as_encoded_bytes());
                    if !state && !self.add_file(&path) {
                        return false;
                    }
                }
                _ => {}
            }
        }
        subdirs.iter().all(|sub| self.walk(sub, depth + 1, seen))
    }

    /// Whether the `n` bytes of events in the buffer hold a change.
    fn any_change(&self, n: usize) -> bool {
        let buf = &self.buf[..n];
        let mut at = 0;
        while at + 16 <= n {
            let (wd, mask, len) = header(&buf[at..]);
            let end = (at + 16 + len).min(n);
            let raw = &buf[at + 16..end];
            let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
            at = end;
            if mask & (LOST | SELF_GONE) != 0 {
                return true;
            }
            match self.filters.get(&wd) {
                Some(Filter::All) => return true,
                Some(Filter::State) if name.is_empty() || !not_input(name) => return true,
                Some(Filter::GatewayState) if name.is_empty() || !not_gateway_input(name) => {
                    return true;
                }
                Some(Filter::Names(names)) if names.contains(name) => return true,
                Some(_) => {}
                None => return true,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_are_not_input() {
        for name in [
            "bindings.json",
            "bindings.json.tmp",
            "admin.token",
            "trust.toml.lock",
            "sessions",
            "objects",
            "history",
            "ledger.jsonl.foreign-17",
        ] {
            assert!(not_input(name.as_bytes()), "{name}");
        }
        for name in ["secrets", "replay", "claims", "locks", "bindings.json"] {
            assert!(not_gateway_input(name.as_bytes()), "{name}");
        }
        assert!(!not_gateway_input(b"bots.json"));
        assert!(!not_input(b"locks"), "only in the gateway directory");
        for name in [
            "bots.json",
            "trust.toml",
            "identity.md",
            "config.toml",
            "SKILL.md",
        ] {
            assert!(!not_input(name.as_bytes()), "{name}");
        }
    }
}
