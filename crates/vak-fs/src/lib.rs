//! The file-system floor: the one hostile open, the one atomic replace and
//! the one lock that vak's stores share (the session ledgers, bindings and
//! replay markers, the trust store, the home-side replica's lock).
//!
//! - [`open_regular`]: never through a symbolic link (`O_NOFOLLOW`), never
//!   blocking on a FIFO (`O_NONBLOCK`), and checked on the open handle
//!   (`fstat`) to be a regular file before a byte is read or written.
//! - [`replace`]: a whole file replaced so a kill at any instant leaves the
//!   old text or the new, never a torn or empty one: a temporary file beside
//!   it written in full and fsynced, renamed over it, the directory fsynced.
//! - [`lock_exclusive`]: a lock file opened as [`open_regular`] opens, held
//!   with `flock` until the handle drops.
//!
//! Above those, the plain doors every crate above the loader uses instead of
//! `std::fs` ([`open_read`], [`open_input`], [`create_new`], [`canonical`],
//! [`entries`], …), so each touch of the disk outside the loader and the
//! stores is here (xtask tidy `no_std_fs_outside_the_floor_and_the_stores`).
//!
//! Reading *inside a layer* — every directory on the way opened relative to
//! the one before, so a link swapped in mid-read cannot lead out — is the
//! loader's `confine` module, built on `openat`; this crate is for files a
//! store names by path in a directory it owns.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};

use camino::{Utf8Path, Utf8PathBuf};
use thiserror::Error;
use vak_prompt_blocks::Escaped;

/// Why a file of a store could not be opened, replaced or locked. Each
/// caller keeps its own error type and converts from this one.
#[derive(Debug, Error)]
pub enum FsError {
    /// The path is a symbolic link, which could lead out of the store.
    #[error(
        "`{}` is a symbolic link; vak never reads or writes a store through one, so replace it with the file itself",
        Escaped(.path.as_str())
    )]
    Symlink {
        /// The link.
        path: Utf8PathBuf,
    },
    /// The path is a FIFO, device, socket or directory.
    #[error(
        "`{}` is not a regular file ({kind}); remove it",
        Escaped(.path.as_str())
    )]
    NotRegular {
        /// The path.
        path: Utf8PathBuf,
        /// What it is instead, e.g. `a FIFO`.
        kind: &'static str,
    },
    /// The operating system refused a step.
    #[error("could not {action} `{}`: {source}", Escaped(.path.as_str()))]
    Io {
        /// The step, as a verb: `open`, `write`, `fsync`, `replace`, ….
        action: &'static str,
        /// The file or directory.
        path: Utf8PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

impl FsError {
    fn io(action: &'static str, path: &Utf8Path, source: std::io::Error) -> Self {
        FsError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}

/// What a file type is, for a refusal: `a FIFO`, `a directory`, ….
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// The refusal for `path`, from what is at the path now (`lstat`), for an
/// open that failed in a way only a non-regular file causes.
fn refusal(path: &Utf8Path, fallback: &'static str) -> FsError {
    let kind = std::fs::symlink_metadata(path)
        .map(|m| kind_of(m.file_type()))
        .unwrap_or(fallback);
    if kind == "a symbolic link" {
        FsError::Symlink {
            path: path.to_owned(),
        }
    } else {
        FsError::NotRegular {
            path: path.to_owned(),
            kind,
        }
    }
}

/// Open `path` with `options`, adding `O_NOFOLLOW | O_NONBLOCK`, and check
/// the handle is a regular file. `Ok(None)` when nothing is at the path
/// (and `options` does not create it).
///
/// # Errors
///
/// [`FsError::Symlink`] and [`FsError::NotRegular`] for what is not a
/// regular file; [`FsError::Io`] for the rest.
pub fn open_regular(path: &Utf8Path, options: &mut OpenOptions) -> Result<Option<File>, FsError> {
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(match e.raw_os_error() {
                // O_NOFOLLOW on a symlink.
                Some(libc::ELOOP) => FsError::Symlink {
                    path: path.to_owned(),
                },
                // A FIFO opened for writing with no reader; a directory
                // opened for writing.
                Some(libc::ENXIO) => refusal(path, "a FIFO"),
                Some(libc::EISDIR) => refusal(path, "a directory"),
                _ => FsError::io("open", path, e),
            });
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| FsError::io("inspect", path, e))?;
    if !meta.file_type().is_file() {
        return Err(FsError::NotRegular {
            path: path.to_owned(),
            kind: kind_of(meta.file_type()),
        });
    }
    Ok(Some(file))
}

/// Open a directory to fsync it, without blocking.
///
/// # Errors
///
/// [`FsError::Io`] naming the directory.
fn open_dir(dir: &Utf8Path) -> Result<File, FsError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK)
        .open(dir)
        .map_err(|e| FsError::io("open directory", dir, e))
}

/// Make a rename or a new name in `dir` durable.
///
/// # Errors
///
/// [`FsError::Io`] naming the directory.
pub fn sync_dir(dir: &Utf8Path) -> Result<(), FsError> {
    open_dir(dir)?
        .sync_all()
        .map_err(|e| FsError::io("fsync directory", dir, e))
}

/// Replace the whole of `path` with what `write` writes, so a kill at any
/// instant leaves the old file or the new one, never a torn or empty one:
/// `<path>.tmp` (whatever a kill left there removed first, never written
/// through) created afresh without following a link, written, fsynced,
/// `before_rename` called (a crash point in tests), renamed over `path`,
/// and the directory fsynced. The temporary file is removed when a step
/// fails.
///
/// # Errors
///
/// [`FsError`] naming the step and the file.
pub fn replace(
    path: &Utf8Path,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
    before_rename: impl FnOnce(),
) -> Result<(), FsError> {
    let temp = Utf8PathBuf::from(format!("{path}.tmp"));
    match std::fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(FsError::io("remove", &temp, e)),
    }
    let Some(mut file) = open_regular(&temp, OpenOptions::new().write(true).create_new(true))?
    else {
        return Err(FsError::io(
            "create",
            &temp,
            std::io::Error::from(ErrorKind::NotFound),
        ));
    };
    let written = write(&mut file)
        .and_then(|()| file.flush())
        .map_err(|e| FsError::io("write", &temp, e))
        .and_then(|()| file.sync_all().map_err(|e| FsError::io("fsync", &temp, e)));
    drop(file);
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    before_rename();
    if let Err(e) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(FsError::io("replace", path, e));
    }
    match path.parent() {
        Some(dir) if !dir.as_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Utf8Path::new(".")),
    }
}

/// Open (creating it) the lock file `path` as [`open_regular`] does and
/// hold an exclusive `flock` on it until the handle drops; waits for a
/// holder in another process.
///
/// # Errors
///
/// As [`open_regular`]; [`FsError::Io`] when the lock cannot be taken.
pub fn lock_exclusive(path: &Utf8Path) -> Result<File, FsError> {
    let Some(file) = open_regular(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )?
    else {
        return Err(FsError::io(
            "create",
            path,
            std::io::Error::from(ErrorKind::NotFound),
        ));
    };
    file.lock().map_err(|e| FsError::io("lock", path, e))?;
    Ok(file)
}

/// A held lock: the lock file's handle, whose drop releases the `flock`.
pub type Lock = File;

/// Open `path` for reading as [`open_regular`] opens it: no link followed,
/// no FIFO waited on, only a regular file. `Ok(None)` when nothing is there.
///
/// # Errors
///
/// As [`open_regular`].
pub fn open_read(path: &Utf8Path) -> Result<Option<File>, FsError> {
    open_regular(path, OpenOptions::new().read(true))
}

/// Open a file a person named on the command line (`--file F`, an
/// editor's copy) for reading: a symbolic link is followed, as the person
/// meant the file it names, but a FIFO is never waited on (`O_NONBLOCK`)
/// and anything but a regular file (a FIFO, device or directory) is
/// refused on the open handle.
///
/// # Errors
///
/// [`FsError::NotRegular`]; [`FsError::Io`] naming the file, including
/// when nothing is there.
pub fn open_input(path: &Utf8Path) -> Result<File, FsError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| FsError::io("open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| FsError::io("inspect", path, e))?;
    if !meta.file_type().is_file() {
        return Err(FsError::NotRegular {
            path: path.to_owned(),
            kind: kind_of(meta.file_type()),
        });
    }
    Ok(file)
}

/// Create `path` afresh for writing with permission bits `mode` (before
/// the umask): `O_CREAT | O_EXCL`, so neither a file nor a link already
/// there is ever written through. `Ok(None)` when something is already at
/// the path, for a caller that then reads what another process made.
///
/// # Errors
///
/// As [`open_regular`].
pub fn create_new(path: &Utf8Path, mode: u32) -> Result<Option<File>, FsError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(mode);
    match open_regular(path, &mut options) {
        Ok(Some(file)) => Ok(Some(file)),
        Err(FsError::Io { source, .. }) if source.kind() == ErrorKind::AlreadyExists => Ok(None),
        // A link or other non-file already there is "already there" too:
        // O_EXCL refused it without following it.
        Err(FsError::Symlink { .. } | FsError::NotRegular { .. }) => Ok(None),
        Ok(None) => Err(FsError::io(
            "create",
            path,
            std::io::Error::from(ErrorKind::NotFound),
        )),
        Err(other) => Err(other),
    }
}

/// Remove the file `path` (never a directory; a link is removed, not what
/// it names).
///
/// # Errors
///
/// [`FsError::Io`] naming the file, including when nothing is there.
pub fn remove_file(path: &Utf8Path) -> Result<(), FsError> {
    std::fs::remove_file(path).map_err(|e| FsError::io("remove", path, e))
}

/// The permission bits (`mode & 0o777`) of an open file, read from the
/// handle rather than the path, which may have changed since the open.
///
/// # Errors
///
/// The operating system's, when the handle cannot be inspected.
pub fn permissions(file: &File) -> std::io::Result<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    Ok(file.metadata()?.permissions().mode() & 0o777)
}

/// Set the permission bits of an open file or directory through its handle
/// (`fchmod`), never by path, which would follow a link swapped in.
///
/// # Errors
///
/// The operating system's.
pub fn set_permissions(file: &File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// `path` with every link resolved and every `.`/`..` removed, as the file
/// system names it (`realpath`): how two spellings of one directory (a
/// symlinked project, `/tmp` and `/private/tmp`) are compared.
///
/// # Errors
///
/// The operating system's, when some part of the path does not exist.
pub fn canonical(path: impl AsRef<std::path::Path>) -> std::io::Result<std::path::PathBuf> {
    std::fs::canonicalize(path)
}

/// Whether anything (a file, a directory, a dangling link) is at `path`;
/// the final link is not followed.
pub fn is_present(path: impl AsRef<std::path::Path>) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Whether `path`, following links, is a directory: `None` when nothing
/// resolves there (or it cannot be inspected).
pub fn is_dir(path: impl AsRef<std::path::Path>) -> Option<bool> {
    std::fs::metadata(path).ok().map(|m| m.is_dir())
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name in the directory, `None` when not UTF-8.
    pub name: Option<String>,
    /// The directory joined with its name.
    pub path: std::path::PathBuf,
    /// Whether it is a directory itself, the link not followed (a link to
    /// a directory is `false`).
    pub is_dir: bool,
    /// Whether it is a regular file itself, the link not followed.
    pub is_file: bool,
}

/// The first `max` entries of `dir` in the order the file system gives
/// them; an entry that cannot be inspected is passed over.
///
/// # Errors
///
/// The operating system's, when `dir` cannot be listed.
pub fn entries(dir: impl AsRef<std::path::Path>, max: usize) -> std::io::Result<Vec<Entry>> {
    Ok(std::fs::read_dir(dir)?
        .flatten()
        .take(max)
        .map(|entry| {
            let kind = entry.file_type().ok();
            Entry {
                name: entry.file_name().to_str().map(str::to_owned),
                path: entry.path(),
                is_dir: kind.is_some_and(|t| t.is_dir()),
                is_file: kind.is_some_and(|t| t.is_file()),
            }
        })
        .collect())
}

/// The owner (uid) of `path`, following links (`/proc/self` is owned by
/// the process's user).
///
/// # Errors
///
/// The operating system's.
pub fn owner_of(path: impl AsRef<std::path::Path>) -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt as _;
    Ok(std::fs::metadata(path)?.uid())
}

/// At most `limit` bytes of a file the system owns (`/etc/passwd`), as
/// text; links followed, as the system's own files may be links.
///
/// # Errors
///
/// The operating system's; `InvalidData` when the bytes are not UTF-8.
pub fn read_system_text(path: impl AsRef<std::path::Path>, limit: u64) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    File::open(path)?.take(limit).read_to_string(&mut text)?;
    Ok(text)
}

/// Make every file and directory this process creates from now on
/// unwritable by group and others, whatever umask it inherited (the umask
/// is process-wide: call it before any thread starts).
pub fn restrict_umask() {
    use rustix::fs::Mode;
    let inherited = rustix::process::umask(Mode::empty());
    rustix::process::umask(inherited | Mode::WGRP | Mode::WOTH);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn dir() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).unwrap();
        (dir, path)
    }

    fn mkfifo(path: &Utf8Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path.as_str())
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn a_regular_file_opens_and_a_missing_one_is_none() {
        let (_t, root) = dir();
        let path = root.join("f");
        std::fs::write(&path, "x").unwrap();
        let mut text = String::new();
        open_regular(&path, OpenOptions::new().read(true))
            .unwrap()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "x");
        assert!(
            open_regular(&root.join("missing"), OpenOptions::new().read(true))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn fifo_symlink_and_directory_are_refused_without_blocking() {
        let (_t, root) = dir();
        let fifo = root.join("fifo");
        mkfifo(&fifo);
        for options in [
            OpenOptions::new().read(true),
            OpenOptions::new().append(true),
            OpenOptions::new().read(true).append(true).create(true),
        ] {
            let err = open_regular(&fifo, options).unwrap_err();
            assert!(
                matches!(err, FsError::NotRegular { kind: "a FIFO", .. }),
                "{err}"
            );
        }
        let target = root.join("target");
        std::fs::write(&target, "x").unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = open_regular(&link, OpenOptions::new().append(true)).unwrap_err();
        assert!(matches!(err, FsError::Symlink { .. }), "{err}");
        let err = open_regular(&root, OpenOptions::new().read(true)).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
    }

    #[test]
    fn a_replace_is_whole_and_never_writes_through_a_link_left_at_its_temporary_name() {
        let (_t, root) = dir();
        let path = root.join("state.json");
        std::fs::write(&path, "old").unwrap();
        // A link where the temporary file goes is removed, not followed.
        let outside = root.join("outside");
        std::fs::write(&outside, "untouched").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("state.json.tmp")).unwrap();
        replace(&path, |f| f.write_all(b"new"), || {}).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
        assert!(!root.join("state.json.tmp").exists());
        // A write that fails leaves the old text and no temporary file.
        let failed = replace(
            &path,
            |f| {
                f.write_all(b"half")?;
                Err(std::io::Error::other("disk full"))
            },
            || panic!("never renamed"),
        )
        .unwrap_err();
        assert!(failed.to_string().contains("could not write"), "{failed}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(!root.join("state.json.tmp").exists());
    }

    #[test]
    fn a_lock_file_that_is_a_fifo_or_a_link_is_refused_and_a_held_lock_excludes() {
        let (_t, root) = dir();
        let fifo = root.join("fifo.lock");
        mkfifo(&fifo);
        assert!(matches!(
            lock_exclusive(&fifo).unwrap_err(),
            FsError::NotRegular { .. }
        ));
        let link = root.join("link.lock");
        std::os::unix::fs::symlink(root.join("elsewhere"), &link).unwrap();
        assert!(matches!(
            lock_exclusive(&link).unwrap_err(),
            FsError::Symlink { .. }
        ));
        assert!(!root.join("elsewhere").exists());
        let path = root.join("a.lock");
        let held = lock_exclusive(&path).unwrap();
        let other = File::open(&path).unwrap();
        assert!(matches!(
            other.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(held);
        other.try_lock().unwrap();
    }
    #[test]
    fn an_input_file_follows_a_link_but_never_waits_on_a_fifo_or_reads_a_directory() {
        let (_t, root) = dir();
        let target = root.join("text.md");
        std::fs::write(&target, "new text").unwrap();
        let link = root.join("link.md");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // The person named the link: they meant the file it names.
        let mut text = String::new();
        open_input(&link)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "new text");
        // A FIFO with no writer: refused at once (the test would hang on a
        // blocking open), named.
        let fifo = root.join("fifo");
        mkfifo(&fifo);
        let err = open_input(&fifo).unwrap_err();
        assert!(
            matches!(&err, FsError::NotRegular { kind: "a FIFO", path } if *path == fifo),
            "{err}"
        );
        let err = open_input(&root).unwrap_err();
        assert!(
            matches!(
                err,
                FsError::NotRegular {
                    kind: "a directory",
                    ..
                }
            ),
            "{err}"
        );
        // A link to a FIFO is followed to the FIFO, and refused the same way.
        let to_fifo = root.join("to-fifo");
        std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
        assert!(matches!(
            open_input(&to_fifo),
            Err(FsError::NotRegular { .. })
        ));
        let err = open_input(&root.join("missing")).unwrap_err();
        assert!(err.to_string().contains("missing"), "names the file: {err}");
    }

    #[test]
    fn create_new_makes_a_private_file_and_never_writes_through_what_is_there() {
        let (_t, root) = dir();
        let path = root.join("token");
        let mut file = create_new(&path, 0o600).unwrap().unwrap();
        file.write_all(b"secret").unwrap();
        assert_eq!(permissions(&file).unwrap() & 0o077, 0);
        // A second creator sees something there and makes nothing.
        assert!(create_new(&path, 0o600).unwrap().is_none());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret");
        // A link planted at the name leads nowhere: nothing is written
        // where it points, not even a dangling link's target.
        let outside = root.join("outside");
        let link = root.join("planted");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert!(create_new(&link, 0o600).unwrap().is_none());
        assert!(!outside.exists(), "created through a dangling link");
        let fifo = root.join("fifo");
        mkfifo(&fifo);
        assert!(create_new(&fifo, 0o600).unwrap().is_none());
    }

    #[test]
    fn permissions_come_from_the_handle_and_set_permissions_changes_them() {
        let (_t, root) = dir();
        let path = root.join("f");
        std::fs::write(&path, "x").unwrap();
        let file = open_read(&path).unwrap().unwrap();
        set_permissions(&file, 0o640).unwrap();
        assert_eq!(permissions(&file).unwrap(), 0o640);
        // open_read refuses a link as open_regular does.
        let link = root.join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(open_read(&link), Err(FsError::Symlink { .. })));
        assert!(open_read(&root.join("missing")).unwrap().is_none());
    }

    #[test]
    fn entries_do_not_follow_links_and_stop_at_the_bound() {
        let (_t, root) = dir();
        std::fs::create_dir(root.join("role")).unwrap();
        std::fs::write(root.join("file.md"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("role"), root.join("linked")).unwrap();
        let mut seen: Vec<(String, bool, bool)> = entries(&root, 100)
            .unwrap()
            .into_iter()
            .map(|e| (e.name.unwrap(), e.is_dir, e.is_file))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("file.md".to_owned(), false, true),
                ("linked".to_owned(), false, false),
                ("role".to_owned(), true, false),
            ]
        );
        assert_eq!(entries(&root, 2).unwrap().len(), 2);
        assert_eq!(is_dir(root.join("linked")), Some(true), "is_dir follows");
        assert_eq!(is_dir(root.join("file.md")), Some(false));
        assert_eq!(is_dir(root.join("missing")), None);
        std::os::unix::fs::symlink(root.join("gone"), root.join("dangling")).unwrap();
        assert!(
            is_present(root.join("dangling")),
            "a dangling link is there"
        );
        assert!(!is_present(root.join("missing")));
        assert!(entries(root.join("missing"), 1).is_err());
    }

    #[test]
    fn canonical_names_a_directory_the_file_system_way() {
        let (_t, root) = dir();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
        assert_eq!(
            canonical(root.join("alias/./")).unwrap(),
            canonical(root.join("real")).unwrap()
        );
        assert!(canonical(root.join("missing")).is_err());
    }

    #[test]
    fn a_system_text_is_bounded_and_text() {
        let (_t, root) = dir();
        let path = root.join("passwd");
        std::fs::write(&path, "root:x:0:0::/root:/bin/sh\n").unwrap();
        assert_eq!(read_system_text(&path, 4).unwrap(), "root");
        std::fs::write(&path, b"\xff\xfe").unwrap();
        assert!(read_system_text(&path, 100).is_err(), "not UTF-8");
        assert_eq!(owner_of(&path).unwrap(), owner_of(&root).unwrap());
    }
}
