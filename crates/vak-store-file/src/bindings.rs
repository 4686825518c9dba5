//! Gateway chat bindings, `$VAK_HOME/.vak/gateway/bindings.json`:
//! `bot → chat → session`.
//!
//! Changed only through a [`BindingGuard`], which holds an exclusive lock on
//! a sibling lock file from before the lookup until after the write. A
//! `deliver` does its whole lookup–resume–drift-check–create–bind inside one
//! guard, so two deliveries to one chat can never both create a session.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};

use camino::{Utf8Path, Utf8PathBuf};
use serde::{Deserialize, Serialize};
use vak_prompt_blocks::Name;

use vak_session::{Binding, SessionError, SessionId, now_rfc3339};

use crate::jsonl;

/// The file's shape. Unknown top-level keys are kept on rewrite so an older
/// build does not erase what a newer one stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct BindingsFile {
    #[serde(default)]
    bindings: BTreeMap<String, BTreeMap<String, Binding>>,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// The bindings of one `$VAK_HOME`.
#[derive(Debug, Clone)]
pub struct BindingStore {
    path: Utf8PathBuf,
    lock_path: Utf8PathBuf,
    /// The home the store belongs to: no directory on the way to its files
    /// may lead out of it.
    home: Utf8PathBuf,
    /// The file as last read, with the identity of the file it was read
    /// from: shared by this store's clones, never by other stores.
    last_read: std::sync::Arc<std::sync::Mutex<LastRead>>,
}

/// The bindings file as last read, and which file it was.
type LastRead = Option<(Identity, std::sync::Arc<BindingsFile>)>;

/// What tells one version of the bindings file from another without
/// reading it: every write replaces the file by a rename, so a new version
/// is a new inode, and its times and size change with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

impl BindingStore {
    /// The bindings of `home`: `home/.vak/gateway/bindings.json`.
    pub fn new(home: &Utf8Path) -> Self {
        let dir = home.join(".vak").join("gateway");
        BindingStore {
            path: dir.join("bindings.json"),
            lock_path: dir.join("bindings.json.lock"),
            home: home.to_owned(),
            last_read: std::sync::Arc::default(),
        }
    }

    /// The bindings file.
    pub fn path(&self) -> &Utf8Path {
        &self.path
    }

    /// Take the exclusive lock of one chat's deliveries
    /// (`gateway/locks/<bot>/<chat>.lock`, a file lock, so across
    /// processes). Only its holder changes that chat's binding, so it may
    /// read the binding with [`binding`](Self::binding) and move it with
    /// [`lock`](Self::lock) at the end, while other chats' deliveries run.
    pub fn lock_chat(&self, bot: &Name, chat: &Name) -> Result<ChatLock, SessionError> {
        let dir = self
            .path
            .parent()
            .unwrap_or_else(|| Utf8Path::new("."))
            .join("locks")
            .join(bot.as_str());
        let path = dir.join(format!("{}.lock", chat.as_str()));
        crate::file::in_home(Some(&self.home), &path)?;
        jsonl::ensure_dir(&dir)?;
        let file = crate::file::open(
            &path,
            OpenOptions::new().write(true).create(true).truncate(false),
        )?;
        file.lock()
            .map_err(|e| SessionError::io("lock", path.clone(), e))?;
        Ok(ChatLock { _file: file })
    }

    /// The binding of `bot`/`chat` as committed now, read without the
    /// bindings lock (the file is replaced atomically, so it is always
    /// whole). A basis for a change only under that chat's
    /// [`lock_chat`](Self::lock_chat).
    ///
    /// The file is parsed again only when it changed since this store last
    /// read it (a new inode, size or time): a delivery to a bound chat then
    /// costs an open and an `fstat`, however many chats are bound.
    pub fn binding(&self, bot: &Name, chat: &Name) -> Result<Option<Binding>, SessionError> {
        Ok(self
            .current()?
            .bindings
            .get(bot.as_str())
            .and_then(|chats| chats.get(chat.as_str()))
            .cloned())
    }

    /// The bindings file as it is now: the last read when the file is the
    /// same one, else read (and kept) afresh, with every check of [`load`].
    fn current(&self) -> Result<std::sync::Arc<BindingsFile>, SessionError> {
        let Some(file) = crate::file::open_optional(&self.path, OpenOptions::new().read(true))?
        else {
            return Ok(std::sync::Arc::default());
        };
        let meta = file
            .metadata()
            .map_err(|e| SessionError::io("inspect", self.path.clone(), e))?;
        let identity = Identity::of(&meta);
        let remembered = |slot: &mut LastRead| {
            slot.as_ref()
                .filter(|(known, _)| *known == identity)
                .map(|(_, read)| read.clone())
        };
        if let Some(read) = remembered(&mut self.remember()) {
            return Ok(read);
        }
        let read = std::sync::Arc::new(read_from(file, meta.len(), &self.path)?);
        *self.remember() = Some((identity, read.clone()));
        Ok(read)
    }

    fn remember(&self) -> std::sync::MutexGuard<'_, LastRead> {
        self.last_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take the exclusive lock and load the current bindings. Blocks until
    /// any other holder, in any process, commits or drops its guard.
    pub fn lock(&self) -> Result<BindingGuard, SessionError> {
        crate::file::in_home(Some(&self.home), &self.lock_path)?;
        if let Some(dir) = self.path.parent() {
            jsonl::ensure_dir(dir)?;
        }
        let lock = crate::file::open(
            &self.lock_path,
            OpenOptions::new().write(true).create(true).truncate(false),
        )?;
        lock.lock()
            .map_err(|e| SessionError::io("lock", self.lock_path.clone(), e))?;
        let file = BindingsFile::clone(&*self.current()?);
        Ok(BindingGuard {
            _lock: lock,
            path: self.path.clone(),
            file,
            dirty: false,
        })
    }

    /// Every binding as `(bot, chat, binding)`, read without the lock: for
    /// display only, never as the basis of a change.
    pub fn list(&self) -> Result<Vec<(String, String, Binding)>, SessionError> {
        crate::file::in_home(Some(&self.home), &self.path)?;
        Ok(flatten(&load(&self.path)?))
    }
}

/// One chat's delivery lock; released when dropped.
#[derive(Debug)]
pub struct ChatLock {
    _file: File,
}

/// The bindings, held under the lock. Dropping the guard without
/// [`commit`](Self::commit) releases the lock and changes nothing.
#[derive(Debug)]
pub struct BindingGuard {
    _lock: File,
    path: Utf8PathBuf,
    file: BindingsFile,
    dirty: bool,
}

impl BindingGuard {
    /// The binding of `bot`/`chat`, if any.
    pub fn get(&self, bot: &Name, chat: &Name) -> Option<&Binding> {
        self.file.bindings.get(bot.as_str())?.get(chat.as_str())
    }

    /// Bind `bot`/`chat` to `session`, returning the binding it replaces.
    pub fn bind(&mut self, bot: &Name, chat: &Name, session: SessionId) -> Option<Binding> {
        self.dirty = true;
        self.file
            .bindings
            .entry(bot.as_str().to_owned())
            .or_default()
            .insert(
                chat.as_str().to_owned(),
                Binding {
                    session_id: session,
                    bound_at: now_rfc3339(),
                },
            )
    }

    /// Every binding as `(bot, chat, binding)`.
    pub fn list(&self) -> Vec<(String, String, Binding)> {
        flatten(&self.file)
    }

    /// Write the bindings atomically (temporary file, fsync, rename, fsync
    /// of the directory) if anything changed, then release the lock.
    pub fn commit(self) -> Result<(), SessionError> {
        if !self.dirty {
            return Ok(());
        }
        let mut bytes =
            serde_json::to_vec_pretty(&self.file).map_err(|source| SessionError::Encode {
                path: self.path.clone(),
                source,
            })?;
        bytes.push(b'\n');
        // Never written past what `load` reads: the file would refuse every
        // delivery after it.
        if bytes.len() as u64 > MAX_BINDINGS_BYTES {
            return Err(SessionError::BindingsFull {
                path: self.path.clone(),
                size: bytes.len() as u64,
                max: MAX_BINDINGS_BYTES,
            });
        }
        // Replaced whole: a kill leaves the old bindings or the new.
        vak_fs::replace(&self.path, |out| out.write_all(&bytes), || {})
            .map_err(crate::file::fs_error)?;
        Ok(())
    }
}

/// The most a bindings file may hold, read or written: about a hundred
/// thousand chats (≈ 155 bytes each), far past any one home on the file
/// store, and small enough that a hostile file cannot make every delivery
/// read gigabytes.
pub(crate) const MAX_BINDINGS_BYTES: u64 = 16 * 1024 * 1024;

/// Read the bindings: a regular file (never a FIFO or a symlink), bounded
/// by [`MAX_BINDINGS_BYTES`] before a byte is read. A missing file is empty.
fn load(path: &Utf8Path) -> Result<BindingsFile, SessionError> {
    let Some(file) = crate::file::open_optional(path, OpenOptions::new().read(true))? else {
        return Ok(BindingsFile::default());
    };
    let size = file
        .metadata()
        .map_err(|e| SessionError::io("inspect", path, e))?
        .len();
    read_from(file, size, path)
}

/// Read the bindings from `file` (opened as [`load`] opens it), `size`
/// bytes long by its `fstat`.
fn read_from(file: File, size: u64, path: &Utf8Path) -> Result<BindingsFile, SessionError> {
    if size > MAX_BINDINGS_BYTES {
        return Err(SessionError::TooLarge {
            path: path.to_owned(),
            size,
            max: MAX_BINDINGS_BYTES,
        });
    }
    let mut bytes = Vec::new();
    // Bounded again on the read itself, in case the file grew meanwhile.
    file.take(MAX_BINDINGS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SessionError::io("read", path, e))?;
    if bytes.len() as u64 > MAX_BINDINGS_BYTES {
        return Err(SessionError::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
            max: MAX_BINDINGS_BYTES,
        });
    }
    serde_json::from_slice(&bytes).map_err(|source| SessionError::BadBindings {
        path: path.to_owned(),
        source,
    })
}

fn flatten(file: &BindingsFile) -> Vec<(String, String, Binding)> {
    file.bindings
        .iter()
        .flat_map(|(bot, chats)| {
            chats
                .iter()
                .map(move |(chat, b)| (bot.clone(), chat.clone(), b.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::NameKind;

    fn names() -> (Name, Name) {
        (
            Name::new(NameKind::Bot, "helpdesk").expect("bot"),
            Name::new(NameKind::Chat, "42").expect("chat"),
        )
    }

    /// A store keeps the file it read, and reads again whatever another
    /// store (another node) writes, or what replaces the file by hand —
    /// checked as a first read is.
    #[test]
    fn the_file_is_read_again_whenever_it_is_another() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8Path::from_path(dir.path()).expect("utf8");
        let (bot, chat) = names();
        let here = BindingStore::new(home);
        let there = BindingStore::new(home);
        assert_eq!(here.binding(&bot, &chat).expect("read"), None);
        for _ in 0..3 {
            let id = SessionId::generate();
            let mut guard = there.lock().expect("lock");
            guard.bind(&bot, &chat, id.clone());
            guard.commit().expect("commit");
            let seen = here.binding(&bot, &chat).expect("read").expect("bound");
            assert_eq!(seen.session_id, id, "another node's write is seen");
        }
        std::fs::remove_file(here.path()).expect("remove");
        let made = std::process::Command::new("mkfifo")
            .arg(here.path().as_str())
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let refused = here.binding(&bot, &chat).expect_err("a FIFO");
        assert!(refused.to_string().contains("FIFO"), "{refused}");
    }

    #[test]
    fn locks_and_bindings_linked_out_of_the_home_are_refused_and_nothing_written_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        std::fs::create_dir_all(home.join(".vak/gateway")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), home.join(".vak/gateway/locks"))
            .expect("symlink");
        let store = BindingStore::new(&home);
        let (bot, chat) = names();
        let err = store.lock_chat(&bot, &chat).expect_err("refused");
        let said = err.to_string();
        assert!(
            said.contains("locks") && said.contains("VAK_HOME"),
            "{said}"
        );
        assert!(
            std::fs::read_dir(outside.path())
                .expect("ls")
                .next()
                .is_none()
        );
        // The whole gateway directory linked out: the bindings' lock too.
        std::fs::remove_file(home.join(".vak/gateway/locks")).expect("rm");
        std::fs::remove_dir(home.join(".vak/gateway")).expect("rmdir");
        std::os::unix::fs::symlink(outside.path(), home.join(".vak/gateway")).expect("symlink");
        let err = store.lock().expect_err("refused");
        assert!(err.to_string().contains("VAK_HOME"), "{err}");
        assert!(
            std::fs::read_dir(outside.path())
                .expect("ls")
                .next()
                .is_none()
        );
    }

    #[test]
    fn bind_commit_and_reload_keeping_unknown_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let store = BindingStore::new(&home);
        let (bot, chat) = names();
        let id = SessionId::generate();
        let mut guard = store.lock().expect("lock");
        assert!(guard.get(&bot, &chat).is_none());
        assert!(guard.bind(&bot, &chat, id.clone()).is_none());
        guard.commit().expect("commit");

        let mut raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(store.path()).expect("read")).expect("json");
        raw["future"] = serde_json::json!({"k": 1});
        std::fs::write(store.path(), raw.to_string()).expect("write");

        let mut guard = store.lock().expect("lock");
        assert_eq!(guard.get(&bot, &chat).map(|b| &b.session_id), Some(&id));
        let next = SessionId::generate();
        assert_eq!(
            guard.bind(&bot, &chat, next.clone()).map(|b| b.session_id),
            Some(id)
        );
        guard.commit().expect("commit");
        let listed = store.list().expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].2.session_id, next);
        let text = std::fs::read_to_string(store.path()).expect("read");
        assert!(text.contains("\"future\""), "{text}");
    }

    #[test]
    fn a_bad_file_is_named_and_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let store = BindingStore::new(&home);
        std::fs::create_dir_all(store.path().parent().expect("parent")).expect("mkdir");
        std::fs::write(store.path(), "{not json").expect("write");
        let err = store.lock().expect_err("bad file");
        assert!(err.to_string().contains("bindings.json"), "{err}");
        assert_eq!(
            std::fs::read_to_string(store.path()).expect("read"),
            "{not json"
        );
    }

    #[test]
    fn fifo_symlink_and_oversized_bindings_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let store = BindingStore::new(&home);
        let gateway = store.path().parent().expect("parent").to_owned();
        std::fs::create_dir_all(&gateway).expect("mkdir");
        let status = std::process::Command::new("mkfifo")
            .arg(store.path().as_str())
            .status()
            .expect("mkfifo");
        assert!(status.success());
        let err = store.lock().expect_err("fifo");
        assert!(
            err.to_string().contains("not a regular file (a FIFO)"),
            "{err}"
        );
        assert!(err.to_string().contains("bindings.json"), "{err}");
        std::fs::remove_file(store.path()).expect("rm");

        let outside = home.join("elsewhere.json");
        std::fs::write(&outside, "{}").expect("write");
        std::os::unix::fs::symlink(&outside, store.path()).expect("symlink");
        assert!(matches!(store.list(), Err(SessionError::Symlink { .. })));
        std::fs::remove_file(store.path()).expect("rm");

        // The lock file too: a FIFO there is refused, not blocked on.
        let _ = std::fs::remove_file(&store.lock_path);
        let status = std::process::Command::new("mkfifo")
            .arg(store.lock_path.as_str())
            .status()
            .expect("mkfifo");
        assert!(status.success());
        let err = store.lock().expect_err("fifo lock");
        assert!(err.to_string().contains("bindings.json.lock"), "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        std::fs::remove_file(&store.lock_path).expect("rm");

        let big = vec![b' '; usize::try_from(MAX_BINDINGS_BYTES).expect("fits") + 1];
        std::fs::write(store.path(), big).expect("write");
        let err = store.lock().expect_err("too large");
        assert!(matches!(err, SessionError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn a_binding_that_would_make_the_file_unreadable_is_refused_and_the_file_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let store = BindingStore::new(&home);
        let (bot, _) = names();
        // A file just under the bound, as vak writes it: each binding of
        // `c<n>` (n of six digits) adds the same bytes.
        let mut guard = store.lock().expect("lock");
        let size =
            |guard: &BindingGuard| serde_json::to_vec_pretty(&guard.file).expect("json").len() + 1;
        let chat_n = |n: u32| {
            Name::new(vak_prompt_blocks::NameKind::Chat, &format!("c{n:06}")).expect("chat")
        };
        guard.bind(&bot, &chat_n(0), SessionId::generate());
        let one = size(&guard);
        guard.bind(&bot, &chat_n(1), SessionId::generate());
        let per = size(&guard) - one;
        let max = usize::try_from(MAX_BINDINGS_BYTES).expect("fits");
        let n = u32::try_from((max - size(&guard)) / per).expect("fits") - 3;
        for i in 2..2 + n {
            guard.bind(&bot, &chat_n(i), SessionId::generate());
        }
        guard.commit().expect("fits");
        let before = std::fs::read(store.path()).expect("read");
        let mut refused = None;
        for extra in 0..10u32 {
            let mut guard = store.lock().expect("still readable");
            guard.bind(&bot, &chat_n(900_000 + extra), SessionId::generate());
            if let Err(error) = guard.commit() {
                refused = Some(error);
                break;
            }
        }
        let error = refused.expect("refused before the bound");
        assert!(
            matches!(error, SessionError::BindingsFull { .. }),
            "{error}"
        );
        // Still readable, and every delivery after it still works.
        let listed = store.list().expect("readable");
        assert!(listed.len() as u64 >= u64::from(n));
        assert!(before.len() <= max);
        assert!(std::fs::read(store.path()).expect("read").len() >= before.len());
    }

    #[test]
    fn the_lock_serializes_threads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let (bot, chat) = names();
        let created = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let store = BindingStore::new(&home);
                    let mut guard = store.lock().expect("lock");
                    if guard.get(&bot, &chat).is_none() {
                        let id = SessionId::generate();
                        created.lock().expect("mutex").push(id.clone());
                        guard.bind(&bot, &chat, id);
                    }
                    guard.commit().expect("commit");
                });
            }
        });
        let created = created.into_inner().expect("mutex");
        assert_eq!(
            created.len(),
            1,
            "exactly one delivery may create the binding"
        );
        let listed = BindingStore::new(&home).list().expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].2.session_id, created[0]);
    }
}
