//! One confinement rule for every read, save and removal of a layer file.
//!
//! A layer file is touched only if it stays inside its layer root (the home
//! or the project) after every symlink is resolved, and that is checked on
//! the open handle, never on a path that can change in between:
//!
//! - a directory is opened (`O_DIRECTORY`), and the path the kernel reports
//!   for the handle (`/proc/self/fd/N`) must lie inside the canonical root
//!   (a load's root is itself opened first and resolved from its handle,
//!   the first time something must be judged against it);
//! - a file is then opened *relative to that handle* with `O_NOFOLLOW`, so
//!   it cannot leave the checked directory; a file that is itself a symlink
//!   is opened by path and its handle judged the same way;
//! - a directory or file below a checked directory may instead be opened in
//!   one call with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: the
//!   kernel then refuses any symlink or `..` on the whole way, so what opens
//!   is a real entry below the checked one; on any answer but success or
//!   "not there" the steps above are taken instead, so their refusals and
//!   wording hold;
//! - every open is `O_NONBLOCK`, and the handle's `fstat` must say "regular
//!   file" before a byte is read, so a FIFO or device never blocks;
//! - reads are bounded by `limit + 1` bytes, never a whole-file read.
//!
//! Saves and removals go through the same [`ConfinedDir`]: the rename and the
//! unlink happen relative to the checked directory handle.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use camino::{Utf8Path, Utf8PathBuf};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// A layer root, resolved once: the home or the project directory.
#[derive(Debug, Clone)]
pub struct ConfinedRoot {
    path: Utf8PathBuf,
    real: PathBuf,
    /// Whether this root is a project, whose nested repositories (a
    /// directory below it with its own `.git`) are projects of their own:
    /// a link that leads into one is refused, as one leading outside is.
    project: bool,
}

impl ConfinedRoot {
    /// Resolve `root`. `Ok(None)` when it does not exist.
    ///
    /// # Errors
    ///
    /// Any I/O error other than "not found".
    pub fn new(root: &Utf8Path) -> io::Result<Option<Self>> {
        match std::fs::canonicalize(root) {
            Ok(real) => Ok(Some(ConfinedRoot {
                path: root.to_owned(),
                real,
                project: false,
            })),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The root as given.
    pub fn path(&self) -> &Utf8Path {
        &self.path
    }

    /// The root with every symlink resolved.
    pub fn real(&self) -> &Path {
        &self.real
    }

    /// This root as a project's: a link below it that leads into a nested
    /// repository (a directory below the root with its own `.git`, a
    /// project of its own with its own trust) is refused with
    /// [`Refusal::InNestedRepository`]. A real entry below the root is
    /// never judged so: the walks that find layers stop at a nested
    /// repository already; only a link can cross into one.
    #[must_use]
    pub fn project(mut self) -> Self {
        self.project = true;
        self
    }

    /// A root whose real path could not be found (see
    /// [`OpenedDirs::root`]) is not absolute, and contains nothing: every
    /// symlink under it is refused.
    fn contains(&self, real: &Path) -> bool {
        self.real.is_absolute() && real.starts_with(&self.real)
    }

    /// Whether what a link led to, `real`, may be touched as part of this
    /// root: inside it and, for a project, in no nested repository.
    fn judge(&self, real: PathBuf) -> Result<(), Refusal> {
        if !self.contains(&real) {
            return Err(Refusal::Outside {
                leads_to: lossy(real),
            });
        }
        if let Some(repository) = self.nested_repository_of(&real) {
            return Err(Refusal::InNestedRepository {
                leads_to: lossy(real),
                repository: lossy(repository),
            });
        }
        Ok(())
    }

    /// The outermost directory strictly below a project root, on the way to
    /// `real` (itself included), that has a `.git` of its own (a directory,
    /// or a file in submodules and worktrees).
    fn nested_repository_of(&self, real: &Path) -> Option<PathBuf> {
        if !self.project {
            return None;
        }
        let rest = real.strip_prefix(&self.real).ok()?;
        let mut dir = self.real.clone();
        for part in rest.components() {
            dir.push(part);
            if rustix::fs::lstat(dir.join(".git")).is_ok() {
                return Some(dir);
            }
        }
        None
    }
}

/// A file or directory of the vak home (`$VAK_HOME/.vak/…`) that resolves
/// outside the home: refused for every read and write, the home's own
/// files as much as its prompts.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{}` is part of the vak home `{}` but {}; vak neither reads nor writes the home's files outside the home (point `VAK_HOME` at the real directory, or replace the symlink with a real directory)",
    vak_prompt_blocks::Escaped(.path.as_str()),
    vak_prompt_blocks::Escaped(.home.as_str()),
    .why
)]
pub struct OutsideHome {
    /// The home's entry that leads out (the first on the way to the file).
    pub path: Utf8PathBuf,
    /// The home.
    pub home: Utf8PathBuf,
    /// Where it leads, in words.
    pub why: String,
}

impl From<OutsideHome> for io::Error {
    fn from(error: OutsideHome) -> Self {
        io::Error::new(io::ErrorKind::PermissionDenied, error.to_string())
    }
}

/// Check that `path`, a file or directory below `home`, stays inside the
/// home once every symlink is resolved: each directory on the way from the
/// home down that exists (and `path` itself, when it is one) is opened and
/// judged on its handle, as a layer directory is, and a dangling link on
/// the way (which a later `create_dir_all` would follow out) is refused
/// too. A file at the end is left to its store, which opens it without
/// following a link. Returns `path`. A home that does not exist yet holds
/// nothing to judge.
///
/// # Errors
///
/// [`OutsideHome`], naming the first entry that leads out.
pub fn home_path(home: &Utf8Path, path: &Utf8Path) -> Result<Utf8PathBuf, OutsideHome> {
    let refuse = |at: &Utf8Path, why: String| OutsideHome {
        path: at.to_owned(),
        home: home.to_owned(),
        why,
    };
    let Ok(rest) = path.strip_prefix(home) else {
        return Err(refuse(path, "is not below it".to_owned()));
    };
    let root = match ConfinedRoot::new(home) {
        Ok(Some(root)) => root,
        Ok(None) => return Ok(path.to_owned()),
        Err(error) => return Err(refuse(home, format!("cannot be resolved: {error}"))),
    };
    let mut dir = home.to_owned();
    let mut parts = rest.iter().peekable();
    // Every directory on the way, and `path` itself when it is one; a
    // file (or a link to one) at the end is its store's to open.
    while let Some(part) = parts.next() {
        let last = parts.peek().is_none();
        dir.push(part);
        match ConfinedDir::open(&dir, &root) {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(path.to_owned()),
            Err(Refusal::Dangling | Refusal::NotADirectory) if last => {}
            Err(Refusal::Outside { leads_to }) => {
                return Err(refuse(
                    &dir,
                    format!(
                        "leads outside it, to `{}`",
                        vak_prompt_blocks::Escaped(leads_to.as_str())
                    ),
                ));
            }
            Err(Refusal::Dangling) => {
                return Err(refuse(&dir, "is a symlink that leads nowhere".to_owned()));
            }
            Err(Refusal::NotADirectory) => {
                return Err(refuse(
                    &dir,
                    "is not a directory (a file, FIFO, socket or device)".to_owned(),
                ));
            }
            Err(other) => {
                let why = crate::safe_read::ReadRefusal::from(other);
                return Err(refuse(&dir, format!("cannot be opened: it {why}")));
            }
        }
    }
    Ok(path.to_owned())
}

/// What a path that is not a regular file is instead, for a message that
/// names it ("not a regular file (a socket)").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A symbolic link (not followed where a file must be plain).
    Symlink,
    /// A FIFO (named pipe): reading one could block for good.
    Fifo,
    /// A Unix domain socket: it cannot be opened at all.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A directory.
    Directory,
    /// Anything else.
    Other,
}

impl FileKind {
    /// The kind `mode` (an `st_mode`) says.
    pub fn of_mode(mode: u32) -> Self {
        match FileType::from_raw_mode(mode) {
            FileType::Symlink => FileKind::Symlink,
            FileType::Fifo => FileKind::Fifo,
            FileType::Socket => FileKind::Socket,
            FileType::CharacterDevice => FileKind::CharDevice,
            FileType::BlockDevice => FileKind::BlockDevice,
            FileType::Directory => FileKind::Directory,
            _ => FileKind::Other,
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Symlink => "a symlink",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Directory => "a directory",
            FileKind::Other => "not a file",
        })
    }
}

/// An `openat` that failed with `errno` on `name` in `dir`: a socket (which
/// `open` answers with `ENXIO`, "No such device or address") or a device
/// without its driver is named for what it is; any other error is kept.
fn refused_open(dir: impl AsFd, name: &str, errno: Errno) -> Refusal {
    let kind = (errno == Errno::NXIO || errno == Errno::NODEV)
        .then(|| rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok())
        .flatten()
        .map(|stat| FileKind::of_mode(stat.st_mode));
    match kind {
        Some(kind) if kind != FileKind::Other => Refusal::NotRegularFile(kind),
        _ => errno.into(),
    }
}

/// Why a confined open was refused.
#[derive(Debug)]
pub enum Refusal {
    /// The file, or a directory on the way to it, resolves outside the root.
    Outside {
        /// Where it really leads.
        leads_to: Utf8PathBuf,
    },
    /// A link, inside the project, that leads into a nested repository
    /// below it: a project of its own, with its own trust.
    InNestedRepository {
        /// Where it really leads.
        leads_to: Utf8PathBuf,
        /// The nested repository's directory.
        repository: Utf8PathBuf,
    },
    /// A symlink whose target does not exist.
    Dangling,
    /// Not a regular file: what it is instead.
    NotRegularFile(FileKind),
    /// Where a directory must be, something else (a file, FIFO, socket or
    /// device).
    NotADirectory,
    /// Larger than the bound.
    TooLarge {
        /// The size seen (at least `limit + 1`).
        bytes: u64,
        /// The bound.
        limit: u64,
    },
    /// Any other I/O error.
    Io(io::Error),
}

impl From<io::Error> for Refusal {
    fn from(error: io::Error) -> Self {
        Refusal::Io(error)
    }
}

impl From<Errno> for Refusal {
    fn from(errno: Errno) -> Self {
        Refusal::Io(errno.into())
    }
}

/// Why `dir` could not be opened as a directory though the open said
/// "not found" or "not a directory": nothing there is no directory
/// (`Ok(None)`), but a dangling symlink, a file or a FIFO in its place is
/// said, not passed over as if absent. Only asked on the slow path (a
/// symlink or something odd on the way): a plain missing directory is
/// answered before it.
fn not_a_dir(dir: &Utf8Path) -> Result<Option<ConfinedDir>, Refusal> {
    match rustix::fs::lstat(dir.as_std_path()) {
        Ok(stat) if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_symlink() => {
            Err(Refusal::Dangling)
        }
        Ok(stat) if !rustix::fs::FileType::from_raw_mode(stat.st_mode).is_dir() => {
            Err(Refusal::NotADirectory)
        }
        _ => Ok(None),
    }
}

pub(crate) fn is_missing(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn lossy(path: PathBuf) -> Utf8PathBuf {
    Utf8PathBuf::from_path_buf(path)
        .unwrap_or_else(|p| Utf8PathBuf::from(p.to_string_lossy().into_owned()))
}

/// Where the kernel says an open handle lives. Falls back to resolving
/// `path` and checking it names the same inode when `/proc` is unavailable.
fn real_path_of(fd: &OwnedFd, path: &Utf8Path) -> Result<PathBuf, Refusal> {
    let mut proc_path = ProcFdPath::default();
    if let Ok(real) = std::fs::read_link(proc_path.of(fd.as_raw_fd())) {
        return Ok(real);
    }
    let real = std::fs::canonicalize(path)?;
    let by_path = rustix::fs::stat(&real)?;
    let by_handle = rustix::fs::fstat(fd)?;
    if by_path.st_dev == by_handle.st_dev && by_path.st_ino == by_handle.st_ino {
        Ok(real)
    } else {
        Err(Refusal::Io(io::Error::other(
            "it changed while it was being opened",
        )))
    }
}

/// Whether `rel` is one or more plain names joined by `/`: no empty, `.` or
/// `..` component (so no leading, trailing or doubled slash), checked in
/// one pass over the bytes.
fn is_plain(rel: &str) -> bool {
    let mut start = 0;
    for end in rel
        .bytes()
        .enumerate()
        .filter_map(|(at, b)| (b == b'/').then_some(at))
        .chain([rel.len()])
    {
        if matches!(&rel.as_bytes()[start..end], b"" | b"." | b"..") {
            return false;
        }
        start = end + 1;
    }
    true
}

/// `/proc/self/fd/<fd>`, spelled in a buffer on the stack rather than by
/// `format!`.
#[derive(Default)]
struct ProcFdPath([u8; 32]);

impl ProcFdPath {
    fn of(&mut self, fd: i32) -> &Path {
        const PREFIX: &[u8] = b"/proc/self/fd/";
        let mut digits = [0u8; 10];
        let mut n = fd.unsigned_abs();
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = &digits[at..];
        let len = PREFIX.len() + digits.len();
        self.0[..PREFIX.len()].copy_from_slice(PREFIX);
        self.0[PREFIX.len()..len].copy_from_slice(digits);
        Path::new(std::ffi::OsStr::from_bytes(&self.0[..len]))
    }
}

/// `O_NOFOLLOW | O_NONBLOCK`, for callers that open a file with `std`
/// (a lock file) and must neither follow a symlink nor block on a FIFO.
pub const NOFOLLOW_NONBLOCK: i32 = OFlags::NOFOLLOW.union(OFlags::NONBLOCK).bits() as i32;

const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// The kernel's guarantee behind every one-call open below a checked
/// directory: no symlink and no `..` anywhere on the way.
const BENEATH_NO_SYMLINKS: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// The nearest opened directory above a path (with where the rest of the
/// path starts), or an ancestor known not to exist.
enum Ancestor {
    Open(Rc<ConfinedDir>, usize),
    Missing,
}

/// What [`ConfinedDir::open_entry`] opened: the entry's own handle (not yet
/// known to be a regular file), or the file a symlink leads to, already
/// checked as [`ConfinedDir::open_link`] checks it.
enum Entry {
    Handle(OwnedFd),
    Link(File),
}

/// A directory inside a layer root, held open: everything done through it
/// stays in the directory that was checked.
#[derive(Debug)]
pub struct ConfinedDir {
    fd: OwnedFd,
    /// Shared with [`OpenedDirs`]' key for this directory: one copy of the
    /// path per directory.
    path: Arc<str>,
    /// Found when a check opens the directory by path; otherwise only when
    /// asked for ([`ConfinedDir::real`]), which a load never does: a
    /// directory opened below a checked one is inside the root by
    /// construction.
    real: OnceLock<PathBuf>,
    /// Opened `O_PATH`, as the loader's directories are (see
    /// [`OpenedDirs`]): good for every `*at` call, fstat and the `/proc`
    /// look-up, and cheaper to open and close than a readable handle; a
    /// listing, a lock or an fsync reopens the directory itself (`.`).
    path_only: bool,
    /// Whether a listing has read this (readable) handle's offset past its
    /// start, so the next must rewind it: a fresh handle lists without the
    /// `lseek`.
    listed: std::cell::Cell<bool>,
}

impl ConfinedDir {
    /// Open `dir` and check it lies inside `root`. `Ok(None)` when it does
    /// not exist.
    ///
    /// # Errors
    ///
    /// [`Refusal::Outside`] when the directory (through any symlink on the
    /// way) leads outside the root.
    pub fn open(dir: &Utf8Path, root: &ConfinedRoot) -> Result<Option<Self>, Refusal> {
        let fd = match rustix::fs::open(dir.as_std_path(), READABLE_DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if e == Errno::NOENT || e == Errno::NOTDIR => return not_a_dir(dir),
            Err(e) => return Err(e.into()),
        };
        let real = real_path_of(&fd, dir)?;
        root.judge(real.clone())?;
        Ok(Some(ConfinedDir {
            fd,
            path: Arc::from(dir.as_str()),
            real: OnceLock::from(real),
            path_only: false,
            listed: std::cell::Cell::new(false),
        }))
    }

    /// The directory as given.
    pub fn path(&self) -> &Utf8Path {
        Utf8Path::new(&self.path)
    }

    /// Open the subdirectory `name` relative to this (checked) handle
    /// without following a symlink. A real directory entry of a directory
    /// inside the root is inside the root, so no `/proc` look-up is needed;
    /// `Some(Ok(None))` when nothing is there, and `None` when `name` is a
    /// symlink or anything else that must be judged by where it leads.
    fn open_child(
        &self,
        name: &str,
        path: &Utf8Path,
        readable: bool,
    ) -> Option<Result<Option<Self>, Refusal>> {
        let flags = dir_flags(readable) | OFlags::NOFOLLOW;
        let opened = rustix::fs::openat(&self.fd, name, flags, Mode::empty());
        ConfinedDir::opened_below(opened, path, readable)
    }

    /// What an open of a real entry below a checked directory (no symlink
    /// followed) gave: the directory, `Some(Ok(None))` when nothing is
    /// there, `None` when it must be judged another way.
    fn opened_below(
        opened: rustix::io::Result<OwnedFd>,
        path: &Utf8Path,
        readable: bool,
    ) -> Option<Result<Option<Self>, Refusal>> {
        match opened {
            Ok(fd) => Some(Ok(Some(ConfinedDir {
                fd,
                path: Arc::from(path.as_str()),
                real: OnceLock::new(),
                path_only: !readable,
                listed: std::cell::Cell::new(false),
            }))),
            Err(e) if e == Errno::NOENT => Some(Ok(None)),
            Err(_) => None,
        }
    }

    /// Read the file `name` of this directory: [`ConfinedDir::open_file`]
    /// then [`read_bounded`], with the size taken from the `fstat` that
    /// proved it a regular file (one system call fewer per file).
    /// `Ok(None)` when nothing is there.
    ///
    /// # Errors
    ///
    /// See [`Refusal`].
    pub fn read_file(
        &self,
        name: &str,
        root: &ConfinedRoot,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        self.read_file_with(name.into(), || root, limit, |bytes| bytes.into_owned())
    }

    /// [`ConfinedDir::read_file`] with the root asked for only when a
    /// symlink must be judged by where it leads.
    fn read_file_with<'r, T>(
        &self,
        name: EntryName<'_>,
        root: impl FnOnce() -> &'r ConfinedRoot,
        limit: u64,
        keep: impl FnOnce(Cow<'_, [u8]>) -> T,
    ) -> Result<Option<T>, Refusal> {
        match self.open_entry(name, root)? {
            None => Ok(None),
            Some(Entry::Handle(fd)) => read_opened_with(fd, limit, keep).map(Some),
            Some(Entry::Link(file)) => {
                read_bounded(file, limit).map(|bytes| Some(keep(Cow::Owned(bytes))))
            }
        }
    }

    /// Open `name` without following a symlink; a symlink is opened by
    /// [`ConfinedDir::open_link`], judged by where it leads. The one open
    /// behind [`ConfinedDir::open_file`] and [`ConfinedDir::read_file`].
    fn open_entry<'r>(
        &self,
        entry: EntryName<'_>,
        root: impl FnOnce() -> &'r ConfinedRoot,
    ) -> Result<Option<Entry>, Refusal> {
        let name = entry.name;
        match entry.open_at(&self.fd, READ_FLAGS | OFlags::NOFOLLOW) {
            Ok(fd) => Ok(Some(Entry::Handle(fd))),
            Err(e) if e == Errno::NOENT || e == Errno::NOTDIR => Ok(None),
            // A symlink: judge where it leads, on the handle.
            Err(e) if e == Errno::LOOP || e == Errno::MLINK => self
                .open_link(name, root())
                .map(|file| Some(Entry::Link(file))),
            Err(e) => Err(refused_open(&self.fd, name, e)),
        }
    }

    /// The names in this directory (not `.` or `..`), listed through the
    /// checked handle rather than by path, at most `max` of them; a name
    /// that is not UTF-8 is left out, and a listing error ends the list, as
    /// `std::fs::read_dir` does.
    ///
    /// # Errors
    ///
    /// The rewind to the start (the handle is shared, and may have been
    /// listed before in this load).
    pub fn names(&self, max: usize) -> io::Result<Vec<String>> {
        let reopened = self.reopened()?;
        let fd = match &reopened {
            Some(fd) => fd,
            None => {
                if self.listed.replace(true) {
                    rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Start(0))?;
                }
                &self.fd
            }
        };
        let mut buf = [const { std::mem::MaybeUninit::<u8>::uninit() }; 8192];
        let mut dir = rustix::fs::RawDir::new(fd, &mut buf);
        let mut names = Vec::new();
        while names.len() < max {
            let Some(Ok(entry)) = dir.next() else { break };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// The directory's handle, e.g. to lock or fsync it.
    pub fn as_file(&self) -> io::Result<File> {
        match self.reopened()? {
            Some(fd) => Ok(File::from(fd)),
            None => Ok(File::from(self.fd.try_clone()?)),
        }
    }

    /// A readable handle of this very directory when this one was opened
    /// `O_PATH`: `.` opened relative to it, so no path is walked again.
    fn reopened(&self) -> io::Result<Option<OwnedFd>> {
        if !self.path_only {
            return Ok(None);
        }
        Ok(Some(rustix::fs::openat(
            &self.fd,
            ".",
            READABLE_DIR_FLAGS,
            Mode::empty(),
        )?))
    }

    /// Open `name` in this directory for reading: a regular file inside the
    /// root, never blocking. `Ok(None)` when nothing is there.
    ///
    /// # Errors
    ///
    /// See [`Refusal`].
    pub fn open_file(&self, name: &str, root: &ConfinedRoot) -> Result<Option<File>, Refusal> {
        match self.open_entry(name.into(), || root)? {
            None => Ok(None),
            Some(Entry::Handle(fd)) => regular(fd).map(Some),
            Some(Entry::Link(file)) => Ok(Some(file)),
        }
    }

    /// Open the regular file `name` in this directory without following a
    /// symlink. `Ok(None)` when nothing is there.
    ///
    /// # Errors
    ///
    /// [`Refusal::NotRegularFile`] for a symlink or anything not a file.
    pub fn open_regular_nofollow(&self, name: &str) -> Result<Option<File>, Refusal> {
        match rustix::fs::openat(&self.fd, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => regular(fd).map(Some),
            Err(e) if e == Errno::NOENT => Ok(None),
            Err(e) if e == Errno::LOOP || e == Errno::MLINK => {
                Err(Refusal::NotRegularFile(FileKind::Symlink))
            }
            Err(e) => Err(refused_open(&self.fd, name, e)),
        }
    }

    fn open_link(&self, name: &str, root: &ConfinedRoot) -> Result<File, Refusal> {
        let path = self.path().join(name);
        let fd = match rustix::fs::openat(&self.fd, name, READ_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if e == Errno::NOENT => return Err(Refusal::Dangling),
            Err(e) => return Err(e.into()),
        };
        root.judge(real_path_of(&fd, &path)?)?;
        regular(fd)
    }

    /// What `name` is in this directory, without following a symlink.
    /// `Ok(None)` when nothing is there.
    ///
    /// # Errors
    ///
    /// An I/O error other than "not found".
    pub fn kind_of(&self, name: &str) -> io::Result<Option<FileType>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(FileType::from_raw_mode(stat.st_mode))),
            Err(e) if e == Errno::NOENT => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Create `name` exclusively for writing (never through a symlink).
    ///
    /// # Errors
    ///
    /// Any I/O error, including "already exists".
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    }

    /// The permission bits of the regular file `name`, if there is one.
    pub fn mode_of(&self, name: &str) -> Option<u32> {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .filter(|s| FileType::from_raw_mode(s.st_mode) == FileType::RegularFile)
            .map(|s| s.st_mode & 0o7777)
    }

    /// Rename `from` over `to`, both in this directory.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to)?;
        Ok(())
    }

    /// Remove the file `name` from this directory.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    pub fn unlink(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?;
        Ok(())
    }

    /// Open `name` in this directory for appending, creating it (`mode`)
    /// when absent; never through a symlink, and only a regular file (a FIFO
    /// or device is refused without blocking). For the append-only stores
    /// kept under the home (the version log).
    ///
    /// # Errors
    ///
    /// [`Refusal::NotRegularFile`] for a symlink, FIFO, device or directory.
    pub fn open_append(&self, name: &str, mode: u32) -> Result<File, Refusal> {
        let flags = OFlags::RDWR
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => regular(fd),
            Err(e) if e == Errno::LOOP || e == Errno::MLINK => {
                Err(Refusal::NotRegularFile(FileKind::Symlink))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The directory's real path: where the kernel says the handle lives
    /// (empty when that cannot be found).
    pub fn real(&self) -> &Path {
        self.real
            .get_or_init(|| real_path_of(&self.fd, self.path()).unwrap_or_default())
    }
}

/// The handle as a file, if it is a regular file.
fn regular(fd: OwnedFd) -> Result<File, Refusal> {
    regular_sized(fd).map(|(file, _)| file)
}

/// The handle as a file, if it is a regular file, with the size `fstat`
/// reported.
fn regular_sized(fd: OwnedFd) -> Result<(File, u64), Refusal> {
    let stat = rustix::fs::fstat(fd.as_fd())?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(Refusal::NotRegularFile(FileKind::of_mode(stat.st_mode)));
    }
    Ok((File::from(fd), u64::try_from(stat.st_size).unwrap_or(0)))
}

/// How the loader opens a directory it reads through ([`OpenedDirs`]):
/// `O_PATH`, as a place to open names relative to, not to read. A
/// symlink met last with `O_NOFOLLOW` fails `O_DIRECTORY` (`ENOTDIR`)
/// rather than `ELOOP`; either way the opener judges the path as one
/// that must be looked at another way.
const PATH_DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// How a directory is opened to be listed, locked or fsynced.
const READABLE_DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// [`PATH_DIR_FLAGS`], or [`READABLE_DIR_FLAGS`] for a directory opened to
/// be listed.
fn dir_flags(readable: bool) -> OFlags {
    if readable {
        READABLE_DIR_FLAGS
    } else {
        PATH_DIR_FLAGS
    }
}

/// Open the plain relative path `rest` (no empty, `.` or `..` name) below
/// `base` with `flags` (which hold `O_NOFOLLOW`), following no symlink on
/// the way: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or, when
/// `rest` is one name, `openat`, which with `O_NOFOLLOW` follows none
/// either and costs the kernel about 50 ns less.
fn open_below(base: &OwnedFd, rest: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    if rest.contains('/') {
        rustix::fs::openat2(base, rest, flags, Mode::empty(), BENEATH_NO_SYMLINKS)
    } else {
        rustix::fs::openat(base, rest, flags, Mode::empty())
    }
}

/// A name in a directory, as [`ConfinedDir`] opens it: its text, and its C
/// spelling when that is known at compile time (a block file's), so the
/// open skips the copy and the scan for a NUL that a `&str` costs on every
/// call.
#[derive(Debug, Clone, Copy)]
pub struct EntryName<'a> {
    name: &'a str,
    c_name: Option<&'static CStr>,
}

impl EntryName<'static> {
    /// `name`, whose C spelling is `c_name` (the same bytes, NUL ended).
    /// A `c_name` spelling anything else is not used: the name opened is
    /// always the name a refusal or a symlink's judgement speaks of.
    pub fn compiled(name: &'static str, c_name: &'static CStr) -> Self {
        EntryName {
            name,
            c_name: (c_name.to_bytes() == name.as_bytes()).then_some(c_name),
        }
    }
}

impl<'a> From<&'a str> for EntryName<'a> {
    fn from(name: &'a str) -> Self {
        EntryName { name, c_name: None }
    }
}

impl EntryName<'_> {
    /// `openat` of this name under `dir`.
    fn open_at(self, dir: &OwnedFd, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        match self.c_name {
            Some(c_name) => rustix::fs::openat(dir, c_name, flags, Mode::empty()),
            None => rustix::fs::openat(dir, self.name, flags, Mode::empty()),
        }
    }
}

/// How much of a file [`read_opened`] reads before it asks what the file
/// is: a prompt file is usually a few hundred bytes, a long `AGENTS.md`
/// some tens of kilobytes.
const FIRST_READ: usize = 16 * 1024;

/// Read the file just opened as `fd`, not yet known to be a regular file,
/// bounded by `limit`, as [`regular_sized`] then [`read_sized`] would.
///
/// One `pread` at offset 0 into a buffer on the stack comes first. What it
/// reads, short of filling the buffer, is the whole file: `pread` refuses a
/// FIFO or a socket (`ESPIPE`) and a directory (`EISDIR`), and a regular
/// file reads short only at its end, the rule [`read_sized`] keeps too.
/// Anything else (nothing read, the buffer filled, more than `limit`, an
/// error) is decided by `fstat` and a sized read, as before: an empty
/// file, a device that never ends and every refusal are told apart there.
/// That `fstat` was about a fifth of the kernel's work for a file.
fn read_opened(fd: OwnedFd, limit: u64) -> Result<Vec<u8>, Refusal> {
    read_opened_with(fd, limit, |bytes| bytes.into_owned())
}

/// [`read_opened`], the bytes handed to `keep` to be made into what the
/// caller holds: a text is then made straight from the buffer on the stack
/// (one allocation, one copy) rather than from a vector copied out of it.
fn read_opened_with<T>(
    fd: OwnedFd,
    limit: u64,
    keep: impl FnOnce(Cow<'_, [u8]>) -> T,
) -> Result<T, Refusal> {
    let mut buf = [const { std::mem::MaybeUninit::<u8>::uninit() }; FIRST_READ];
    if let Ok((read, _)) = rustix::io::pread(&fd, &mut buf, 0)
        && !read.is_empty()
        && read.len() < FIRST_READ
        && u64::try_from(read.len()).is_ok_and(|n| n <= limit)
    {
        return Ok(keep(Cow::Borrowed(read)));
    }
    // `pread` left the offset at the start: the sized read begins there.
    let (file, size) = regular_sized(fd)?;
    read_sized(file, size, limit).map(|bytes| keep(Cow::Owned(bytes)))
}

/// Read at most `limit` bytes from `file`; more is [`Refusal::TooLarge`].
///
/// # Errors
///
/// See [`Refusal`].
pub fn read_bounded(file: File, limit: u64) -> Result<Vec<u8>, Refusal> {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    read_sized(file, size, limit)
}

/// [`read_bounded`] when the size is already known: the size only sizes
/// the buffer and refuses early; the `limit + 1` bound is what holds when
/// the file grows meanwhile.
///
/// The buffer holds one byte more than `fstat` said, so growth shows in the
/// first read. A read that stops short exactly at that size has met the end
/// of the file as it was when read (a regular file reads short only there),
/// so no probe read is spent confirming it; any other short read reads on
/// until a read returns nothing.
fn read_sized(mut file: File, size: u64, limit: u64) -> Result<Vec<u8>, Refusal> {
    if size > limit {
        return Err(Refusal::TooLarge { bytes: size, limit });
    }
    let Ok(size) = usize::try_from(size) else {
        return read_rest(file, Vec::new(), limit);
    };
    // `malloc` and a fill rather than `vec![0; n]`'s `calloc`, which glibc
    // serves without its per-thread cache (and which LLVM also makes of
    // `repeat_n(0, n).collect()`; this spelling it leaves alone).
    #[allow(clippy::slow_vector_initialization)]
    let mut bytes = {
        let mut bytes = Vec::with_capacity(size + 1);
        bytes.resize(size + 1, 0u8);
        bytes
    };
    let mut filled = 0;
    while filled < bytes.len() {
        let want = bytes.len() - filled;
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if n < want && filled == size {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    bytes.truncate(filled);
    if filled > size {
        // It grew since `fstat`: read on, still bounded.
        return read_rest(file, bytes, limit);
    }
    Ok(bytes)
}

/// Read what is left of `file` after `bytes`, at most `limit + 1` bytes in
/// all; more than `limit` is [`Refusal::TooLarge`].
fn read_rest(file: File, mut bytes: Vec<u8>, limit: u64) -> Result<Vec<u8>, Refusal> {
    let left = (limit + 1).saturating_sub(bytes.len() as u64);
    file.take(left).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Refusal::TooLarge {
            bytes: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The directories of one layer root opened during one load, each opened
/// and checked once and shared by every file read in it.
///
/// The root is opened by path and judged on its handle like any
/// [`ConfinedDir`]; a directory below it is opened relative to its parent's
/// handle with `O_NOFOLLOW`, one path component at a time, so it cannot
/// leave a checked directory and needs no `/proc` look-up. A component that
/// is a symlink (or any path that is not a plain descendant of the root) is
/// opened by path and judged on its own handle, exactly as
/// [`ConfinedDir::open`] does, so a refusal names where it really leads.
/// Refusals are not remembered: they are rare, and reported per input.
#[derive(Debug)]
pub struct OpenedDirs {
    /// The root as given.
    root_path: Arc<str>,
    /// The root resolved: given to [`OpenedDirs::new`], or found from the
    /// root's handle the first time a symlink must be judged (most loads
    /// have none, and skip the `/proc` look-up).
    root: OnceCell<ConfinedRoot>,
    /// Each directory looked up, by its path (the opened directory's own
    /// copy when there is one), and what was found there.
    dirs: Vec<(Arc<str>, Option<Rc<ConfinedDir>>)>,
    /// Whether the root is a project's (see [`ConfinedRoot::project`]).
    project: bool,
}

impl OpenedDirs {
    /// No directory opened yet under `root`.
    pub fn new(root: ConfinedRoot) -> Self {
        OpenedDirs {
            root_path: Arc::from(root.path.as_str()),
            project: root.project,
            root: OnceCell::from(root),
            dirs: Vec::new(),
        }
    }

    /// These directories as a project's (see [`ConfinedRoot::project`]).
    #[must_use]
    pub fn project(mut self) -> Self {
        self.project = true;
        if let Some(root) = self.root.take() {
            self.root = OnceCell::from(root.project());
        }
        self
    }

    /// Resolve the root `path` and open it, in one step: the root's handle
    /// is opened first and its real path is the one the kernel reports for
    /// that handle, so the root is resolved once (not by `canonicalize` and
    /// then again on the handle) and the path checked is the directory
    /// held. `Ok(None)` when it does not exist. When that cannot answer (the
    /// open fails, `/proc` is unavailable), the root is resolved exactly as
    /// [`ConfinedRoot::new`] resolves it.
    ///
    /// # Errors
    ///
    /// As [`ConfinedRoot::new`].
    pub fn open(path: &Utf8Path) -> io::Result<Option<Self>> {
        if let Ok(fd) = rustix::fs::open(path.as_std_path(), PATH_DIR_FLAGS, Mode::empty()) {
            let path: Arc<str> = Arc::from(path.as_str());
            let dir = ConfinedDir {
                fd,
                path: Arc::clone(&path),
                real: OnceLock::new(),
                path_only: true,
                listed: std::cell::Cell::new(false),
            };
            // Room for the layer directories a load opens under one root.
            let mut dirs = Vec::with_capacity(8);
            dirs.push((Arc::clone(&path), Some(Rc::new(dir))));
            return Ok(Some(OpenedDirs {
                root_path: path,
                root: OnceCell::new(),
                dirs,
                project: false,
            }));
        }
        Ok(ConfinedRoot::new(path)?.map(OpenedDirs::new))
    }

    /// The root as given.
    fn root_path(&self) -> &Utf8Path {
        Utf8Path::new(&self.root_path)
    }

    /// The root, resolved. When [`OpenedDirs::open`] held it open, its real
    /// path is the one the kernel reports for that handle, found the first
    /// time it is asked for; when `/proc` cannot say (or says something
    /// that is not absolute), the root is resolved as
    /// [`ConfinedRoot::new`] resolves it; and when that fails too (the root
    /// went away meanwhile), it contains nothing, so every symlink under it
    /// is refused.
    pub fn root(&self) -> &ConfinedRoot {
        self.root.get_or_init(|| {
            let held = self
                .dirs
                .first()
                .and_then(|(_, dir)| dir.as_ref())
                .filter(|dir| dir.path == self.root_path);
            let real = held
                .and_then(|dir| {
                    let mut proc_path = ProcFdPath::default();
                    std::fs::read_link(proc_path.of(dir.fd.as_raw_fd())).ok()
                })
                .filter(|real| real.is_absolute())
                .or_else(|| std::fs::canonicalize(self.root_path().as_std_path()).ok())
                .unwrap_or_default();
            ConfinedRoot {
                path: self.root_path().to_owned(),
                real,
                project: self.project,
            }
        })
    }

    /// Whether the root itself is held open (as a directory): what
    /// [`OpenedDirs::open`] does when it resolves the root from its handle.
    pub fn holds_root(&self) -> bool {
        self.dirs
            .first()
            .is_some_and(|(path, dir)| dir.is_some() && *path == self.root_path)
    }

    /// The directory `dir`, opened and checked at most once. `Ok(None)` when
    /// it does not exist.
    ///
    /// # Errors
    ///
    /// [`Refusal::Outside`] when it leads outside the root, as
    /// [`ConfinedDir::open`].
    pub fn dir(&mut self, dir: &Utf8Path) -> Result<Option<Rc<ConfinedDir>>, Refusal> {
        self.dir_opened(dir, false)
    }

    /// [`OpenedDirs::dir`] for a directory about to be listed: opened
    /// readable rather than `O_PATH` when it is not open yet, so the
    /// listing need not reopen it.
    ///
    /// # Errors
    ///
    /// As [`OpenedDirs::dir`].
    pub fn listed_dir(&mut self, dir: &Utf8Path) -> Result<Option<Rc<ConfinedDir>>, Refusal> {
        self.dir_opened(dir, true)
    }

    fn dir_opened(
        &mut self,
        dir: &Utf8Path,
        readable: bool,
    ) -> Result<Option<Rc<ConfinedDir>>, Refusal> {
        // Paths are compared as strings, not component by component: the
        // loader spells each directory one way, and a miss only costs an
        // open.
        if let Some((_, opened)) = self.dirs.iter().find(|(path, _)| **path == *dir.as_str()) {
            return Ok(opened.clone());
        }
        let opened = self.open_uncached(dir, readable)?.map(Rc::new);
        let key = match &opened {
            Some(opened) => Arc::clone(&opened.path),
            None => Arc::from(dir.as_str()),
        };
        self.dirs.push((key, opened.clone()));
        Ok(opened)
    }

    fn open_uncached(
        &mut self,
        dir: &Utf8Path,
        readable: bool,
    ) -> Result<Option<ConfinedDir>, Refusal> {
        // `dir` is the root joined with plain names (no `.`, `..` or empty
        // component): its last name is opened under its parent's handle.
        let plain_child = dir
            .as_str()
            .strip_prefix(&*self.root_path)
            .and_then(|rel| rel.strip_prefix('/'))
            .filter(|rel| is_plain(rel))
            .map(|rel| rel.rfind('/').map_or(rel, |at| &rel[at + 1..]));
        if plain_child.is_some()
            && let Some(opened) = self.open_beneath(dir, readable)
        {
            return opened;
        }
        if let Some(name) = plain_child
            && let Some(parent) = dir.parent()
        {
            match self.dir(parent) {
                Ok(Some(parent)) => {
                    if let Some(opened) = parent.open_child(name, dir, readable) {
                        return opened;
                    }
                }
                Ok(None) => return Ok(None),
                // A parent that leads outside: this directory is judged on
                // its own handle below, so the refusal names where *it*
                // leads, as it always has.
                Err(_) => {}
            }
        }
        ConfinedDir::open(dir, self.root())
    }

    /// Open the plain descendant `dir` of the root in one call, relative to
    /// its nearest directory already open (the root at worst), with
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: the kernel refuses
    /// any symlink or `..` on the way, so the directory is a real entry
    /// below a checked one and the layers' intermediate directories
    /// (`surface/`, `agents/`, `skills/`) need no handle of their own.
    /// `None` when that cannot answer (a symlink on the way, no `openat2`):
    /// the caller then walks one name at a time.
    fn open_beneath(
        &mut self,
        dir: &Utf8Path,
        readable: bool,
    ) -> Option<Result<Option<ConfinedDir>, Refusal>> {
        let (base_dir, rest) = match self.nearest_open(dir.as_str())? {
            Ancestor::Open(base_dir, rest) => (base_dir, rest),
            Ancestor::Missing => return Some(Ok(None)),
        };
        let rest = &dir.as_str()[rest..];
        let opened = open_below(&base_dir.fd, rest, dir_flags(readable) | OFlags::NOFOLLOW);
        ConfinedDir::opened_below(opened, dir, readable)
    }

    /// The nearest directory above `path` already opened (opening the root
    /// when none is), and where the rest of `path` below it starts. `None`
    /// when `path` is not a plain descendant of the root (an empty, `.` or
    /// `..` component) or the root cannot be opened: the caller then takes
    /// the path it always took.
    fn nearest_open(&mut self, path: &str) -> Option<Ancestor> {
        let root_len = self.root_path.len();
        let rel = path.strip_prefix(&*self.root_path)?.strip_prefix('/')?;
        if !is_plain(rel) {
            return None;
        }
        // The deepest directory looked up so far that `path` lies below:
        // the longest key that is `path` cut at one of its slashes (the
        // root at least). One pass over the few keys, rather than a search
        // of them for each directory on the way up.
        let nearest = self
            .dirs
            .iter()
            .filter(|(key, _)| {
                let key: &str = key;
                key.len() >= root_len
                    && path.as_bytes().get(key.len()) == Some(&b'/')
                    && path.starts_with(key)
            })
            .max_by_key(|(key, _)| key.len());
        if let Some((key, opened)) = nearest {
            return Some(match opened {
                Some(opened) => Ancestor::Open(Rc::clone(opened), key.len() + 1),
                // An ancestor that is not there: neither is `path`.
                None => Ancestor::Missing,
            });
        }
        let root = Arc::clone(&self.root_path);
        match self.dir(Utf8Path::new(&*root)) {
            Ok(Some(opened)) => Some(Ancestor::Open(opened, root_len + 1)),
            Ok(None) => Some(Ancestor::Missing),
            Err(_) => None,
        }
    }

    /// [`OpenedDirs::read`] for a file read alone in its directory: no
    /// handle is opened (or kept) for the directory when one call below an
    /// opened ancestor can answer; see [`OpenedDirs::read_beneath`].
    ///
    /// # Errors
    ///
    /// See [`Refusal`].
    pub fn read_one(&mut self, path: &Utf8Path, limit: u64) -> Result<Option<Vec<u8>>, Refusal> {
        match self.read_beneath(path, limit) {
            Some(read) => read,
            None => self.read(path, limit),
        }
    }

    /// Read the plain descendant `path` of the root with one
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` below its nearest
    /// directory already open, so a file alone in its directory (a skill's
    /// `SKILL.md`, a gateway file) costs no directory handle. The kernel
    /// refuses any symlink or `..` on the whole way, so what opens is a real
    /// entry below a checked directory: inside the root, as
    /// [`ConfinedDir::read_file`] would find. `None` on anything but success
    /// or "not there" (a symlink anywhere, not a directory on the way, no
    /// `openat2`): the caller then reads it the usual way, so every refusal
    /// and its wording stay that way's.
    fn read_beneath(
        &mut self,
        path: &Utf8Path,
        limit: u64,
    ) -> Option<Result<Option<Vec<u8>>, Refusal>> {
        let (base_dir, rest) = match self.nearest_open(path.as_str())? {
            Ancestor::Open(base_dir, rest) => (base_dir, rest),
            Ancestor::Missing => return Some(Ok(None)),
        };
        let rest = &path.as_str()[rest..];
        match open_below(&base_dir.fd, rest, READ_FLAGS | OFlags::NOFOLLOW) {
            Ok(fd) => Some(read_opened(fd, limit).map(Some)),
            Err(e) if e == Errno::NOENT => Some(Ok(None)),
            Err(_) => None,
        }
    }

    /// [`ConfinedDir::read_file`] of `name` in `dir`, one of these
    /// directories, with the root resolved only if a symlink must be judged.
    ///
    /// # Errors
    ///
    /// See [`Refusal`].
    pub fn read_in<'n>(
        &self,
        dir: &ConfinedDir,
        name: impl Into<EntryName<'n>>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        self.read_in_with(dir, name, limit, |bytes| bytes.into_owned())
    }

    /// [`OpenedDirs::read_in`], the bytes read handed to `keep` (see
    /// [`read_opened_with`]).
    ///
    /// # Errors
    ///
    /// See [`Refusal`].
    pub fn read_in_with<'n, T>(
        &self,
        dir: &ConfinedDir,
        name: impl Into<EntryName<'n>>,
        limit: u64,
        keep: impl FnOnce(Cow<'_, [u8]>) -> T,
    ) -> Result<Option<T>, Refusal> {
        dir.read_file_with(name.into(), || self.root(), limit, keep)
    }

    /// Read `path` confined to the root and bounded by `limit`, through its
    /// directory's shared handle. `Ok(None)` when nothing is there.
    ///
    /// # Errors
    ///
    /// See [`Refusal`].
    pub fn read(&mut self, path: &Utf8Path, limit: u64) -> Result<Option<Vec<u8>>, Refusal> {
        let Some((dir, name)) = crate::paths::parent_and_name(path) else {
            return Err(Refusal::NotRegularFile(FileKind::Directory));
        };
        match self.dir(dir)? {
            Some(dir) => self.read_in(&dir, name, limit),
            None => Ok(None),
        }
    }
}

/// Open `path` for reading, confined to `root`: its directory through
/// [`ConfinedDir::open`], the file through [`ConfinedDir::open_file`].
///
/// # Errors
///
/// See [`Refusal`].
pub fn open_confined(path: &Utf8Path, root: &ConfinedRoot) -> Result<Option<File>, Refusal> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Refusal::NotRegularFile(FileKind::Directory));
    };
    match ConfinedDir::open(dir, root)? {
        Some(dir) => dir.open_file(name, root),
        None => Ok(None),
    }
}

/// Read `path`, confined to `root` and bounded by `limit`. `Ok(None)` when
/// nothing is there.
///
/// # Errors
///
/// See [`Refusal`].
pub fn read_confined(
    path: &Utf8Path,
    root: &ConfinedRoot,
    limit: u64,
) -> Result<Option<Vec<u8>>, Refusal> {
    match open_confined(path, root)? {
        Some(file) => read_bounded(file, limit).map(Some),
        None => Ok(None),
    }
}

/// Read one standalone file that must be a regular file (not a symlink, FIFO
/// or device) of at most `limit` bytes — the trust store, a gateway JSON file.
/// `Ok(None)` when nothing is there.
///
/// # Errors
///
/// [`Refusal::NotRegularFile`] for a symlink too (it is not followed).
pub fn read_plain(path: &Utf8Path, limit: u64) -> Result<Option<Vec<u8>>, Refusal> {
    let fd = match rustix::fs::open(
        path.as_std_path(),
        READ_FLAGS | OFlags::NOFOLLOW,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) if e == Errno::NOENT || e == Errno::NOTDIR => return Ok(None),
        Err(e) if e == Errno::LOOP || e == Errno::MLINK => {
            return Err(Refusal::NotRegularFile(FileKind::Symlink));
        }
        Err(e) => return Err(refused_open(rustix::fs::CWD, path.as_str(), e)),
    };
    read_bounded(regular(fd)?, limit).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// A FIFO at `path`, as `mkfifo` makes it.
    fn mkfifo(path: impl AsRef<std::ffi::OsStr>) {
        let made = std::process::Command::new("mkfifo").arg(path).status();
        assert!(made.unwrap().success());
    }

    fn temp() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        (dir, path)
    }

    #[test]
    fn a_link_into_a_nested_repository_is_refused_only_below_a_project_root() {
        let (_keep, base) = temp();
        let proj = base.join("proj");
        fs::create_dir_all(proj.join("vendor/n/.git")).unwrap();
        fs::create_dir_all(proj.join("docs")).unwrap();
        fs::write(proj.join("vendor/n/AGENTS.md"), "nested").unwrap();
        fs::write(proj.join("docs/AGENTS.md"), "inside").unwrap();
        symlink("../vendor/n/AGENTS.md", proj.join("docs/n.md")).unwrap();
        symlink("AGENTS.md", proj.join("docs/same.md")).unwrap();
        let plain = ConfinedRoot::new(&proj).unwrap().unwrap();
        assert!(read_confined(&proj.join("docs/n.md"), &plain, 100).is_ok());
        let project = plain.project();
        assert!(matches!(
            read_confined(&proj.join("docs/n.md"), &project, 100),
            Err(Refusal::InNestedRepository { repository, .. }) if repository == proj.join("vendor/n")
        ));
        // A link that stays out of any nested repository is read.
        assert_eq!(
            read_confined(&proj.join("docs/same.md"), &project, 100)
                .unwrap()
                .unwrap(),
            b"inside"
        );
    }

    #[test]
    fn a_home_path_is_judged_on_every_directory_on_the_way() {
        let (_keep, base) = temp();
        let home = base.join("home");
        let out = base.join("out");
        fs::create_dir_all(home.join(".vak")).unwrap();
        fs::create_dir_all(&out).unwrap();
        // Nothing there yet: nothing to judge.
        assert!(home_path(&home, &home.join(".vak/sessions/x.jsonl")).is_ok());
        assert!(home_path(&base.join("none"), &base.join("none/.vak/trust.toml")).is_ok());
        // A directory that leads out, a dangling link on the way.
        symlink(&out, home.join(".vak/sessions")).unwrap();
        let err = home_path(&home, &home.join(".vak/sessions/x.jsonl")).unwrap_err();
        assert_eq!(err.path, home.join(".vak/sessions"));
        assert!(err.to_string().contains("VAK_HOME"), "{err}");
        assert!(home_path(&home, &home.join(".vak/sessions")).is_err());
        symlink(base.join("gone"), home.join(".vak/audit")).unwrap();
        assert!(home_path(&home, &home.join(".vak/audit/security.jsonl")).is_err());
        // A file at the end is its store's to open without following.
        symlink(out.join("t"), home.join(".vak/trust.toml")).unwrap();
        assert!(home_path(&home, &home.join(".vak/trust.toml")).is_ok());
    }

    #[test]
    fn inside_is_read_and_a_link_inside_is_allowed() {
        let (_keep, base) = temp();
        let proj = base.join("proj");
        fs::create_dir_all(proj.join(".vak/prompts")).unwrap();
        fs::create_dir_all(proj.join("docs")).unwrap();
        fs::write(proj.join("docs/g.md"), "inside").unwrap();
        symlink("../../docs/g.md", proj.join(".vak/prompts/guardrails.md")).unwrap();
        let root = ConfinedRoot::new(&proj).unwrap().unwrap();
        let bytes = read_confined(&proj.join(".vak/prompts/guardrails.md"), &root, 100)
            .unwrap()
            .unwrap();
        assert_eq!(bytes, b"inside");
        assert!(
            read_confined(&proj.join(".vak/prompts/identity.md"), &root, 100)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_symlinked_directory_out_of_the_root_is_refused() {
        let (_keep, base) = temp();
        let home = base.join("home/.vak/prompts");
        fs::create_dir_all(&home).unwrap();
        fs::write(home.join("guardrails.md"), "shared").unwrap();
        let proj = base.join("proj");
        fs::create_dir_all(proj.join(".vak")).unwrap();
        symlink(&home, proj.join(".vak/prompts")).unwrap();
        let root = ConfinedRoot::new(&proj).unwrap().unwrap();
        let err = read_confined(&proj.join(".vak/prompts/guardrails.md"), &root, 100).unwrap_err();
        assert!(
            matches!(&err, Refusal::Outside { leads_to } if leads_to.as_str() == home.as_str()),
            "{err:?}"
        );
    }

    #[test]
    fn opened_dirs_open_each_directory_once_and_judge_symlinks_by_where_they_lead() {
        let (_keep, base) = temp();
        let proj = base.join("proj");
        let outside = base.join("outside");
        fs::create_dir_all(proj.join(".vak/prompts/surface/cli")).unwrap();
        fs::create_dir_all(proj.join("docs/agent")).unwrap();
        fs::create_dir_all(outside.join("deep")).unwrap();
        fs::write(proj.join(".vak/prompts/identity.md"), "id").unwrap();
        fs::write(proj.join(".vak/prompts/surface/cli/note.md"), "note").unwrap();
        fs::write(proj.join("docs/agent/identity.md"), "linked inside").unwrap();
        fs::write(outside.join("deep/identity.md"), "secret").unwrap();
        fs::create_dir_all(proj.join(".vak/prompts/agents")).unwrap();
        // A symlinked directory that stays inside, one that leads out, and a
        // directory below the one that leads out.
        symlink(
            proj.join("docs/agent"),
            proj.join(".vak/prompts/agents/inside"),
        )
        .unwrap();
        symlink(&outside, proj.join(".vak/prompts/agents/out")).unwrap();
        let root = ConfinedRoot::new(&proj).unwrap().unwrap();
        let mut dirs = OpenedDirs::new(root.clone());

        let prompts = proj.join(".vak/prompts");
        let first = dirs.dir(&prompts).unwrap().unwrap();
        let again = dirs.dir(&prompts).unwrap().unwrap();
        assert!(Rc::ptr_eq(&first, &again), "opened once per load");
        assert_eq!(first.real(), root.real().join(".vak/prompts"));
        assert_eq!(
            dirs.read(&prompts.join("identity.md"), 100)
                .unwrap()
                .unwrap(),
            b"id"
        );
        assert_eq!(
            dirs.read(&prompts.join("surface/cli/note.md"), 100)
                .unwrap()
                .unwrap(),
            b"note"
        );
        // `surface/cli` was opened in one call beneath `prompts`: the
        // intermediate `surface` needed no handle of its own.
        let opened: Vec<&str> = dirs.dirs.iter().map(|(p, _)| &**p).collect();
        assert!(
            opened.contains(&prompts.join("surface/cli").as_str()),
            "{opened:?}"
        );
        assert!(
            !opened.contains(&prompts.join("surface").as_str()),
            "{opened:?}"
        );
        assert_eq!(
            dirs.read(&prompts.join("agents/inside/identity.md"), 100)
                .unwrap()
                .unwrap(),
            b"linked inside"
        );
        assert!(
            dirs.read(&prompts.join("missing/x.md"), 100)
                .unwrap()
                .is_none()
        );
        for (dir, leads_to) in [
            (prompts.join("agents/out"), outside.clone()),
            (prompts.join("agents/out/deep"), outside.join("deep")),
        ] {
            let err = dirs.read(&dir.join("identity.md"), 100).unwrap_err();
            assert!(
                matches!(&err, Refusal::Outside { leads_to: l } if *l == leads_to),
                "{dir}: {err:?}"
            );
            // The same answer as a one-off confined read gives.
            let alone = read_confined(&dir.join("identity.md"), &root, 100).unwrap_err();
            assert!(
                matches!(&alone, Refusal::Outside { leads_to: l } if *l == leads_to),
                "{alone:?}"
            );
        }
        // A path that is not a plain descendant of the root is judged by
        // path, as before.
        assert!(matches!(
            dirs.read(&proj.join("../outside/deep/identity.md"), 100),
            Err(Refusal::Outside { .. })
        ));
    }

    #[test]
    fn a_compiled_name_spelling_something_else_opens_by_its_text() {
        let same = EntryName::compiled("identity.md", c"identity.md");
        assert_eq!(same.c_name, Some(c"identity.md"));
        let other = EntryName::compiled("identity.md", c"guardrails.md");
        assert_eq!((other.name, other.c_name), ("identity.md", None));
    }

    /// The one-`pread` read answers as `fstat` and a sized read do, for
    /// every size around its buffer and the limit, an empty file, a
    /// directory, and a FIFO whose writer has written (so a read would
    /// find bytes): it is refused, never read.
    #[test]
    fn a_first_read_answers_as_fstat_and_a_sized_read_do() {
        let (_keep, base) = temp();
        let open = |path: &Utf8Path| {
            rustix::fs::open(
                path.as_std_path(),
                READ_FLAGS | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .unwrap()
        };
        let sized = |path: &Utf8Path, limit: u64| {
            regular_sized(open(path)).and_then(|(file, size)| read_sized(file, size, limit))
        };
        for size in [
            0,
            1,
            200,
            FIRST_READ - 1,
            FIRST_READ,
            FIRST_READ + 1,
            100_000,
        ] {
            let path = base.join(format!("f{size}"));
            let text: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
            fs::write(&path, &text).unwrap();
            for limit in [0, 199, 200, 201, FIRST_READ as u64, 1 << 20] {
                let fast = read_opened(open(&path), limit);
                assert_eq!(
                    format!("{fast:?}"),
                    format!("{:?}", sized(&path, limit)),
                    "size {size}, limit {limit}"
                );
                if size as u64 <= limit {
                    assert_eq!(fast.unwrap(), text);
                }
            }
        }
        let dir = base.join("dir");
        fs::create_dir(&dir).unwrap();
        let refused = read_opened(open(&dir), 100);
        assert!(
            matches!(refused, Err(Refusal::NotRegularFile(FileKind::Directory))),
            "{refused:?}"
        );
        let fifo = base.join("fifo");
        mkfifo(&fifo);
        let reader = open(&fifo);
        let mut writer = fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        std::io::Write::write_all(&mut writer, b"- from a pipe\n").unwrap();
        let refused = read_opened(reader, 100);
        assert!(
            matches!(refused, Err(Refusal::NotRegularFile(FileKind::Fifo))),
            "{refused:?}"
        );
    }

    #[test]
    fn read_one_answers_as_read_does_for_links_fifos_and_missing_paths() {
        let (_keep, base) = temp();
        let proj = base.join("proj");
        let outside = base.join("outside");
        fs::create_dir_all(proj.join(".vak/skills/plain")).unwrap();
        fs::create_dir_all(proj.join("docs/skill")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(proj.join(".vak/skills/plain/SKILL.md"), "plain").unwrap();
        fs::write(proj.join("docs/skill/SKILL.md"), "linked inside").unwrap();
        fs::write(outside.join("SKILL.md"), "secret").unwrap();
        symlink(proj.join("docs/skill"), proj.join(".vak/skills/inside")).unwrap();
        symlink(&outside, proj.join(".vak/skills/out")).unwrap();
        fs::create_dir_all(proj.join(".vak/skills/file-link")).unwrap();
        symlink(
            outside.join("SKILL.md"),
            proj.join(".vak/skills/file-link/SKILL.md"),
        )
        .unwrap();
        fs::create_dir_all(proj.join(".vak/skills/fifo")).unwrap();
        mkfifo(proj.join(".vak/skills/fifo/SKILL.md"));
        fs::create_dir_all(proj.join(".vak/skills/dir/SKILL.md")).unwrap();
        let skills = proj.join(".vak/skills");
        for name in [
            "plain",
            "inside",
            "out",
            "file-link",
            "fifo",
            "dir",
            "missing",
        ] {
            let path = skills.join(name).join("SKILL.md");
            let mut one = OpenedDirs::open(&proj).unwrap().unwrap();
            let mut usual = OpenedDirs::new(ConfinedRoot::new(&proj).unwrap().unwrap());
            let got = format!("{:?}", one.read_one(&path, 100));
            let want = format!("{:?}", usual.read(&path, 100));
            assert_eq!(got, want, "{name}");
            // And again once the directories on the way are open.
            assert_eq!(format!("{:?}", one.read_one(&path, 100)), want, "{name}");
        }
        let mut one = OpenedDirs::open(&proj).unwrap().unwrap();
        assert_eq!(
            one.read_one(&skills.join("plain/SKILL.md"), 100)
                .unwrap()
                .unwrap(),
            b"plain"
        );
        assert!(matches!(
            one.read_one(&skills.join("out/SKILL.md"), 100),
            Err(Refusal::Outside { leads_to }) if leads_to == outside
        ));
        assert!(matches!(
            one.read_one(&skills.join("plain/SKILL.md"), 3),
            Err(Refusal::TooLarge { bytes: 5, limit: 3 })
        ));
        assert!(
            OpenedDirs::open(&base.join("no-such-root"))
                .unwrap()
                .is_none()
        );
        assert_eq!(one.root().real(), proj.as_std_path());
    }

    #[test]
    fn is_plain_agrees_with_splitting_on_slashes() {
        let parts = ["", ".", "..", "a", "b.md", "...", ".vak", "x..", "é"];
        let mut rels = vec![String::new()];
        for a in parts {
            rels.push(a.to_owned());
            for b in parts {
                rels.push(format!("{a}/{b}"));
                for c in parts {
                    rels.push(format!("{a}/{b}/{c}"));
                }
            }
        }
        for rel in &rels {
            let want = rel.split('/').all(|c| !matches!(c, "" | "." | ".."));
            assert_eq!(is_plain(rel), want, "{rel:?}");
        }
    }

    #[test]
    fn proc_fd_path_spells_as_format_does() {
        for fd in [0, 7, 10, 99, 123, 4096, i32::MAX] {
            let mut buf = ProcFdPath::default();
            assert_eq!(
                buf.of(fd),
                Path::new(&format!("/proc/self/fd/{fd}")),
                "{fd}"
            );
        }
    }

    #[test]
    fn a_load_without_symlinks_never_resolves_its_root_and_one_with_them_does() {
        let (_keep, base) = temp();
        let proj = base.join("proj");
        fs::create_dir_all(proj.join(".vak/prompts/surface/cli")).unwrap();
        fs::create_dir_all(proj.join("docs")).unwrap();
        fs::write(proj.join(".vak/prompts/identity.md"), "id").unwrap();
        fs::write(proj.join(".vak/prompts/surface/cli/note.md"), "note").unwrap();
        fs::write(proj.join("docs/g.md"), "inside").unwrap();
        fs::write(base.join("secret.md"), "outside").unwrap();
        symlink("../../docs/g.md", proj.join(".vak/prompts/inside.md")).unwrap();
        symlink(base.join("secret.md"), proj.join(".vak/prompts/out.md")).unwrap();
        let mut dirs = OpenedDirs::open(&proj).unwrap().unwrap();
        let prompts = proj.join(".vak/prompts");
        for (name, want) in [
            ("identity.md", &b"id"[..]),
            ("surface/cli/note.md", b"note"),
        ] {
            assert_eq!(
                dirs.read_one(&prompts.join(name), 100).unwrap().unwrap(),
                want
            );
            assert_eq!(dirs.read(&prompts.join(name), 100).unwrap().unwrap(), want);
        }
        assert!(dirs.root.get().is_none(), "no symlink, no look-up");
        assert_eq!(
            dirs.read(&prompts.join("inside.md"), 100).unwrap().unwrap(),
            b"inside"
        );
        assert_eq!(dirs.root().real(), proj.as_std_path());
        assert!(matches!(
            dirs.read(&prompts.join("out.md"), 100),
            Err(Refusal::Outside { leads_to }) if leads_to == base.join("secret.md")
        ));
        let opened = dirs.dir(&prompts).unwrap().unwrap();
        assert_eq!(opened.real(), proj.join(".vak/prompts").as_std_path());
        // A root that cannot be resolved contains nothing.
        let lost = ConfinedRoot {
            path: proj.clone(),
            real: PathBuf::new(),
            project: false,
        };
        assert!(!lost.contains(proj.as_std_path()));
    }

    #[test]
    fn names_list_the_same_through_a_shared_handle_every_time() {
        let (_keep, root_path) = temp();
        for name in ["b", "a", "c"] {
            fs::create_dir(root_path.join(name)).unwrap();
        }
        fs::write(root_path.join("f"), "").unwrap();
        let root = ConfinedRoot::new(&root_path).unwrap().unwrap();
        let dir = ConfinedDir::open(&root_path, &root).unwrap().unwrap();
        let mut first = dir.names(100).unwrap();
        first.sort();
        assert_eq!(first, ["a", "b", "c", "f"]);
        let mut again = dir.names(100).unwrap();
        again.sort();
        assert_eq!(again, first, "listed again from the start");
        assert_eq!(dir.names(2).unwrap().len(), 2);
        // The loader's handles are `O_PATH`: they list, and lend a handle
        // that fsyncs, by reopening the directory itself.
        let mut opened = OpenedDirs::open(&root_path).unwrap().unwrap();
        let sub = opened.dir(&root_path.join("a")).unwrap().unwrap();
        assert!(sub.path_only);
        assert_eq!(sub.names(100).unwrap(), Vec::<String>::new());
        fs::write(root_path.join("a/x"), "").unwrap();
        assert_eq!(sub.names(100).unwrap(), ["x"]);
        sub.as_file().unwrap().sync_all().unwrap();
        let top = opened.dir(&root_path).unwrap().unwrap();
        let mut listed = top.names(100).unwrap();
        listed.sort();
        assert_eq!(listed, first);
    }

    #[test]
    fn fifo_and_oversize_are_refused_without_blocking() {
        let (_keep, root_path) = temp();
        let fifo = root_path.join("trust.toml");
        mkfifo(&fifo);
        let root = ConfinedRoot::new(&root_path).unwrap().unwrap();
        assert!(matches!(
            read_confined(&fifo, &root, 10),
            Err(Refusal::NotRegularFile(_))
        ));
        assert!(matches!(
            read_plain(&fifo, 10),
            Err(Refusal::NotRegularFile(_))
        ));
        fs::write(root_path.join("big"), [b'a'; 11]).unwrap();
        assert!(matches!(
            read_plain(&root_path.join("big"), 10),
            Err(Refusal::TooLarge { .. })
        ));
        symlink(root_path.join("big"), root_path.join("link")).unwrap();
        assert!(matches!(
            read_plain(&root_path.join("link"), 100),
            Err(Refusal::NotRegularFile(_))
        ));
    }

    #[test]
    fn open_append_creates_appends_and_refuses_links_and_fifos() {
        use std::io::Write as _;
        let (_keep, root_path) = temp();
        let root = ConfinedRoot::new(&root_path).unwrap().unwrap();
        let dir = ConfinedDir::open(&root_path, &root).unwrap().unwrap();
        dir.open_append("log", 0o644)
            .unwrap()
            .write_all(b"a\n")
            .unwrap();
        dir.open_append("log", 0o644)
            .unwrap()
            .write_all(b"b\n")
            .unwrap();
        assert_eq!(fs::read(root_path.join("log")).unwrap(), b"a\nb\n");
        fs::write(root_path.join("target"), "").unwrap();
        symlink(root_path.join("target"), root_path.join("link")).unwrap();
        assert!(matches!(
            dir.open_append("link", 0o644),
            Err(Refusal::NotRegularFile(_))
        ));
        mkfifo(root_path.join("fifo"));
        assert!(matches!(
            dir.open_append("fifo", 0o644),
            Err(Refusal::NotRegularFile(_))
        ));
        assert_eq!(fs::read(root_path.join("target")).unwrap(), b"");
    }
}
