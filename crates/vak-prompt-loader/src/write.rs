//! Saving and removing a layer file: atomically, never through a symlink,
//! and only if the file is still what the editor started from.
//!
//! A save writes a temporary file in the target's own directory, fsyncs it,
//! renames it over the target and fsyncs the directory. A crash at any point
//! leaves the old file or the new one, never a mix (a stray temporary file at
//! worst, which the loader never reads: it only reads the known block names).
//!
//! Optimistic concurrency: a caller may pass the digest the file had when it
//! started (`--if-digest`, the admin API's `If-Match`). The save is refused
//! when the file's current sha256 differs. [`ABSENT_DIGEST`] (the empty
//! string) means "the file did not exist". The check and the rename happen
//! under an exclusive lock on the directory, so two savers through this
//! module cannot both win.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};

use camino::{Utf8Path, Utf8PathBuf};
use rustix::fs::FileType;
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use vak_prompt_blocks::{Escaped, Sha256Hex, sha256_hex};

use crate::confine::{ConfinedDir, ConfinedRoot, Refusal, read_bounded};
use crate::safe_read::MAX_FILE_BYTES;

/// The digest that stands for "no file": pass it to refuse a save when
/// someone else has created the file in the meantime.
pub const ABSENT_DIGEST: &str = "";

/// Why a save or removal was refused. Each message names the file.
#[derive(Debug, Error)]
pub enum SaveError {
    /// The target is a symlink; writing through it could land anywhere.
    #[error(
        "refusing to touch `{}`: it is a symlink, and vak never writes, reads for a save, or removes through one; nothing was changed (delete the link itself by hand, then save to create a regular file)", Escaped(.0.as_str())
    )]
    Symlink(Utf8PathBuf),
    /// The target exists but is not a regular file.
    #[error(
        "refusing to touch `{}`: it is not a regular file (directory, FIFO, socket or device)", Escaped(.0.as_str())
    )]
    NotRegularFile(Utf8PathBuf),
    /// Something that is not a directory stands where a directory on the
    /// way to the target must be made.
    #[error(
        "refusing to write `{}`: `{}` is in the way, {what}, where a directory must be; nothing was changed (move it aside, then save again)",
        Escaped(.path.as_str()),
        Escaped(.blocker.as_str())
    )]
    InTheWay {
        /// The target.
        path: Utf8PathBuf,
        /// What stands in the way.
        blocker: Utf8PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// The target, or a directory on the way to it, resolves outside the
    /// layer's root.
    #[error(
        "refusing to {action} `{}`: it leads outside `{}`{} through a symlinked directory; nothing was changed (remove the symlink, or work in the directory it points to)",
        Escaped(.path.as_str()),
        Escaped(.root.as_str()),
        leads_to_note(.leads_to.as_deref())
    )]
    OutsideRoot {
        /// `write` or `remove`.
        action: &'static str,
        /// The target.
        path: Utf8PathBuf,
        /// The root it must stay in.
        root: Utf8PathBuf,
        /// Where it really leads, when known.
        leads_to: Option<Utf8PathBuf>,
    },
    /// The target, or a directory on the way to it, is a link into a
    /// nested repository below the project: a project of its own.
    #[error(
        "refusing to {action} `{}`: it leads, through a symlink, into `{}`, a repository of its own (its own project, with its own trust); nothing was changed (remove the symlink, or work in that repository)",
        Escaped(.path.as_str()),
        Escaped(.repository.as_str())
    )]
    InNestedRepository {
        /// `write` or `remove`.
        action: &'static str,
        /// The target.
        path: Utf8PathBuf,
        /// The nested repository's directory.
        repository: Utf8PathBuf,
    },
    /// The new text, or the file already there, is larger than the loader
    /// would ever read.
    #[error(
        "`{}`: {bytes} bytes is over the {MAX_FILE_BYTES}-byte limit for prompt files; nothing was read or written", Escaped(.path.as_str())
    )]
    TooLarge {
        /// The target.
        path: Utf8PathBuf,
        /// The size of the new text, or at least the size of the file.
        bytes: usize,
    },
    /// `--if-digest` is not a digest.
    #[error(
        "the digest to save against (`--if-digest`, the API's `if_digest`), `{}`, is not a sha256: give 64 lowercase hex digits, or an empty string for \"the file does not exist\"", Escaped(.0)
    )]
    BadDigest(String),
    /// The file changed since the digest the caller started from.
    #[error("`{}` changed since you read it: its sha256 is now {}, not {}; read it again and redo your change", Escaped(.path.as_str()), show_digest(.actual.as_deref()), show_digest(Some(.expected)))]
    Stale {
        /// The target.
        path: Utf8PathBuf,
        /// The digest the caller started from.
        expected: String,
        /// The digest now, `None` when the file is absent.
        actual: Option<Sha256Hex>,
    },
    /// An I/O error, with what was being done.
    #[error("cannot {action} `{}`: {source}", Escaped(.path.as_str()))]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: Utf8PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

fn leads_to_note(leads_to: Option<&Utf8Path>) -> String {
    match leads_to {
        Some(target) => format!(" (to `{}`)", Escaped(target.as_str())),
        None => String::new(),
    }
}

fn show_digest(digest: Option<&str>) -> String {
    match digest {
        None | Some("") => "absent (no file)".to_owned(),
        Some(d) => d.to_owned(),
    }
}

fn io_err(action: &'static str, path: &Utf8Path) -> impl FnOnce(io::Error) -> SaveError + use<> {
    let path = path.to_owned();
    move |source| SaveError::Io {
        action,
        path,
        source,
    }
}

/// What a save did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveOutcome {
    /// The file written.
    pub path: Utf8PathBuf,
    /// Its new sha256.
    pub digest: Sha256Hex,
    /// Its sha256 before, `None` when it did not exist.
    pub previous: Option<Sha256Hex>,
}

impl SaveOutcome {
    /// The outcome of saving `text` over a file whose sha256 is `current`
    /// when that is already `text`'s: nothing to write, the digest stays.
    /// `None` when the text differs (or there is no file).
    pub fn unchanged(path: Utf8PathBuf, current: Option<&str>, text: &str) -> Option<SaveOutcome> {
        let digest = current.filter(|current| *current == sha256_hex(text).as_str())?;
        Some(SaveOutcome {
            path,
            digest: digest.to_owned(),
            previous: Some(digest.to_owned()),
        })
    }
}

/// The sha256 of the file at `path`, `None` when there is none. The file
/// must stay inside `root` (see [`crate::confine`]) and is read only up to
/// [`MAX_FILE_BYTES`].
///
/// # Errors
///
/// A symlink, a non-regular file, a path that leads outside `root` or a
/// file over the limit is refused, as a save to it would be.
pub fn current_digest(path: &Utf8Path, root: &Utf8Path) -> Result<Option<Sha256Hex>, SaveError> {
    Ok(current_version(path, root)?.map(|(digest, _)| digest))
}

/// The file at `path` as it is now: its sha256 and its bytes, `None` when
/// there is none. Read as [`current_digest`] reads it, so the digest is the
/// one a save would compare against.
///
/// # Errors
///
/// As [`current_digest`].
pub fn current_version(
    path: &Utf8Path,
    root: &Utf8Path,
) -> Result<Option<(Sha256Hex, Vec<u8>)>, SaveError> {
    let Some(root) = ConfinedRoot::new(root).map_err(io_err("open the layer root", root))? else {
        return Ok(None);
    };
    let Some((dir, name)) = open_parent(path, &root, "read")? else {
        return Ok(None);
    };
    let Some(file) = open_checked(&dir, name, path)? else {
        return Ok(None);
    };
    let bytes = read_bounded(file, MAX_FILE_BYTES).map_err(|r| refusal_error(r, "read", path))?;
    Ok(Some((sha256_hex(&bytes), bytes)))
}

/// `name` in `dir` opened for reading: `None` when absent; a symlink or
/// anything but a regular file is refused, as a save to it would be.
fn open_checked(dir: &ConfinedDir, name: &str, path: &Utf8Path) -> Result<Option<File>, SaveError> {
    match dir.kind_of(name).map_err(io_err("inspect", path))? {
        None => return Ok(None),
        Some(FileType::Symlink) => return Err(SaveError::Symlink(path.to_owned())),
        Some(FileType::RegularFile) => {}
        Some(_) => return Err(SaveError::NotRegularFile(path.to_owned())),
    }
    dir.open_regular_nofollow(name)
        .map_err(|refusal| refusal_error(refusal, "read", path))
}

/// `path`'s directory opened inside `root`, and its file name. `None` when
/// the directory does not exist.
fn open_parent<'p>(
    path: &'p Utf8Path,
    root: &ConfinedRoot,
    action: &'static str,
) -> Result<Option<(ConfinedDir, &'p str)>, SaveError> {
    let outside = |leads_to| SaveError::OutsideRoot {
        action,
        path: path.to_owned(),
        root: root.path().to_owned(),
        leads_to,
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(outside(None));
    };
    match ConfinedDir::open(dir, root) {
        Ok(Some(opened)) => Ok(Some((opened, name))),
        Ok(None) => Ok(None),
        Err(Refusal::Outside { leads_to }) => Err(outside(Some(leads_to))),
        // The directory is what is wrong, not the file: name it.
        Err(Refusal::Dangling) => Err(SaveError::InTheWay {
            path: path.to_owned(),
            blocker: dir.to_owned(),
            what: "a symlink that leads nowhere",
        }),
        Err(refusal) => Err(refusal_error(refusal, action, path)),
    }
}

/// Refuse a save or removal of `path` in the project `project` when the
/// nearest directory on its way that exists leads, through a symlink, into
/// a nested repository below the project (a project of its own, with its
/// own trust), as the loader refuses to read it. Judged on the opened
/// directory's handle; any other refusal is left to the save itself.
///
/// # Errors
///
/// [`SaveError::InNestedRepository`].
pub fn refuse_nested_link(
    path: &Utf8Path,
    project: &Utf8Path,
    action: &'static str,
) -> Result<(), SaveError> {
    let Ok(Some(root)) = ConfinedRoot::new(project) else {
        return Ok(());
    };
    let root = root.project();
    let mut dir = path.parent();
    while let Some(at) = dir {
        if !at.starts_with(project) {
            break;
        }
        if std::fs::symlink_metadata(at).is_ok() {
            return match ConfinedDir::open(at, &root) {
                Err(Refusal::InNestedRepository { repository, .. }) => {
                    Err(SaveError::InNestedRepository {
                        action,
                        path: path.to_owned(),
                        repository,
                    })
                }
                _ => Ok(()),
            };
        }
        dir = at.parent();
    }
    Ok(())
}

/// What [`SaveError::InTheWay`] says of a file, FIFO, socket or device.
const NOT_A_DIRECTORY: &str = "not a directory: a file, FIFO, socket or device";

fn refusal_error(refusal: Refusal, action: &'static str, path: &Utf8Path) -> SaveError {
    match refusal {
        Refusal::Outside { leads_to } => SaveError::OutsideRoot {
            action,
            path: path.to_owned(),
            root: path.to_owned(),
            leads_to: Some(leads_to),
        },
        Refusal::InNestedRepository { repository, .. } => SaveError::InNestedRepository {
            action,
            path: path.to_owned(),
            repository,
        },
        Refusal::Dangling => SaveError::Symlink(path.to_owned()),
        Refusal::NotRegularFile(_) => SaveError::NotRegularFile(path.to_owned()),
        Refusal::NotADirectory => SaveError::InTheWay {
            path: path.to_owned(),
            blocker: path.parent().unwrap_or(path).to_owned(),
            what: NOT_A_DIRECTORY,
        },
        Refusal::TooLarge { bytes, .. } => SaveError::TooLarge {
            path: path.to_owned(),
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
        },
        Refusal::Io(source) => SaveError::Io {
            action,
            path: path.to_owned(),
            source,
        },
    }
}

/// The digest of `name` in `dir`, refusing symlinks and non-regular files.
/// With a `limit`, a larger file is refused; without one it is hashed in
/// chunks, never held in memory whole.
fn digest_in(
    dir: &ConfinedDir,
    name: &str,
    path: &Utf8Path,
    limit: Option<u64>,
) -> Result<Option<Sha256Hex>, SaveError> {
    let Some(file) = open_checked(dir, name, path)? else {
        return Ok(None);
    };
    match limit {
        Some(limit) => {
            let bytes = read_bounded(file, limit).map_err(|r| refusal_error(r, "read", path))?;
            Ok(Some(sha256_hex(bytes)))
        }
        None => {
            let mut hasher = Sha256::new();
            io::copy(&mut io::BufReader::new(file), &mut hasher).map_err(io_err("read", path))?;
            let digest = hasher.finalize();
            let mut hex = String::with_capacity(64);
            for byte in digest {
                hex.push_str(&format!("{byte:02x}"));
            }
            Ok(Some(hex))
        }
    }
}

fn validate_digest(if_digest: Option<&str>) -> Result<(), SaveError> {
    match if_digest {
        None | Some(ABSENT_DIGEST) => Ok(()),
        Some(d)
            if d.len() == 64
                && d.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(())
        }
        Some(d) => Err(SaveError::BadDigest(d.to_owned())),
    }
}

fn check_digest(
    path: &Utf8Path,
    if_digest: Option<&str>,
    actual: Option<&str>,
) -> Result<(), SaveError> {
    let Some(expected) = if_digest else {
        return Ok(());
    };
    let matches = match actual {
        None => expected == ABSENT_DIGEST,
        Some(actual) => expected == actual,
    };
    if matches {
        Ok(())
    } else {
        Err(SaveError::Stale {
            path: path.to_owned(),
            expected: expected.to_owned(),
            actual: actual.map(str::to_owned),
        })
    }
}

/// The mode every directory vak creates asks for, before the umask: never
/// writable by group or others, whatever the umask, so a home or a project's
/// `.vak` made under `umask 000` is not one any local user can add a layer,
/// a session or a token to.
pub const DIR_MODE: u32 = 0o755;

/// Create `dir` and any missing parents with [`DIR_MODE`]; the one way vak
/// makes a directory. Existing directories are left as they are.
pub fn create_dirs(dir: impl AsRef<std::path::Path>) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Make sure the directory of `path` exists and resolves inside `root`,
/// checking before creating anything so a symlinked `.vak` (or any
/// directory on the way) that leads elsewhere cannot make us create
/// directories there; then open it, confined, for the file to be created
/// relative to the handle. The one way vak makes the directory of a file it
/// writes under a root (layer files, the gateway's signing secrets).
///
/// # Errors
///
/// [`SaveError::OutsideRoot`] naming `path` (nothing created) when the
/// directory leads outside `root`; [`SaveError::Io`] when it cannot be
/// created or opened.
pub fn create_parent_confined(path: &Utf8Path, root: &Utf8Path) -> Result<ConfinedDir, SaveError> {
    let dir = path.parent().ok_or_else(|| SaveError::OutsideRoot {
        action: "write",
        path: path.to_owned(),
        root: root.to_owned(),
        leads_to: None,
    })?;
    // A first save on a fresh machine creates `$VAK_HOME` itself.
    create_dirs(root).map_err(io_err("create the layer root", root))?;
    let confined = ConfinedRoot::new(root)
        .map_err(io_err("open the layer root", root))?
        .ok_or_else(|| SaveError::Io {
            action: "open the layer root",
            path: root.to_owned(),
            source: io::ErrorKind::NotFound.into(),
        })?;
    let outside = |leads_to: Option<std::path::PathBuf>| SaveError::OutsideRoot {
        action: "write",
        path: path.to_owned(),
        root: root.to_owned(),
        leads_to: leads_to.map(|p| Utf8PathBuf::from(p.to_string_lossy().into_owned())),
    };
    let mut existing = dir;
    while !existing.exists() {
        existing = existing.parent().ok_or_else(|| outside(None))?;
    }
    let real = fs::canonicalize(existing).map_err(io_err("open", existing))?;
    if !real.starts_with(confined.real()) {
        return Err(outside(Some(real)));
    }
    create_dirs(dir).map_err(|e| match in_the_way(existing, dir) {
        Some((blocker, what)) => SaveError::InTheWay {
            path: path.to_owned(),
            blocker,
            what,
        },
        None => io_err("create the directory", dir)(e),
    })?;
    match open_parent(path, &confined, "write")? {
        Some((opened, _)) => Ok(opened),
        None => Err(SaveError::Io {
            action: "open the directory of",
            path: path.to_owned(),
            source: io::ErrorKind::NotFound.into(),
        }),
    }
}

/// The first path from `existing` down to `dir` that is there but is not a
/// directory (a dangling symlink, a file, a FIFO), with what it is: why a
/// directory could not be created, said instead of "File exists".
fn in_the_way(existing: &Utf8Path, dir: &Utf8Path) -> Option<(Utf8PathBuf, &'static str)> {
    let rest = dir.strip_prefix(existing).ok()?;
    let mut at = existing.to_owned();
    let parts = std::iter::once(None).chain(rest.components().map(Some));
    for part in parts {
        if let Some(part) = part {
            at.push(part);
        }
        let Ok(meta) = fs::metadata(&at).or_else(|_| fs::symlink_metadata(&at)) else {
            return None;
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Some((at, "a symlink that leads nowhere"));
        }
        if !kind.is_dir() {
            return Some((at, NOT_A_DIRECTORY));
        }
    }
    None
}

/// Hold an exclusive lock on `dir` for the check-then-rename window.
fn lock_dir(dir: &ConfinedDir) -> Result<File, SaveError> {
    let handle = dir
        .as_file()
        .map_err(io_err("open the directory", dir.path()))?;
    handle
        .lock()
        .map_err(io_err("lock the directory", dir.path()))?;
    Ok(handle)
}

/// Create a temporary file through `create`, under a name `.{stem}.{pid}.{n}`
/// that is new: a name already taken (left by a process killed mid-save
/// whose pid this one now has, as PID 1 in every container has) is passed
/// over for the next, so a stale file never fails a save. The one owner of
/// temporary names for the layer files, the object store and the trust
/// store.
///
/// # Errors
///
/// `create`'s error other than "already exists", or "already exists" when
/// 64 names in a row are taken.
pub fn create_temp<T>(
    stem: &str,
    mut create: impl FnMut(&str) -> io::Result<T>,
) -> io::Result<(String, T)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut attempt = 0;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(".{stem}.{}.{n}", std::process::id());
        match create(&name) {
            Ok(made) => return Ok((name, made)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 64 => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Write `text` to `path` atomically, creating parent directories, unless
/// the file changed since `if_digest`.
///
/// `root` is the directory the layer belongs to (the home or the project):
/// the file's directory must resolve inside it.
///
/// # Errors
///
/// See [`SaveError`]; on any error the file on disk is unchanged.
pub fn save_atomic(
    path: &Utf8Path,
    root: &Utf8Path,
    text: &str,
    if_digest: Option<&str>,
) -> Result<SaveOutcome, SaveError> {
    validate_digest(if_digest)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(SaveError::TooLarge {
            path: path.to_owned(),
            bytes: text.len(),
        });
    }
    let name = path.file_name().unwrap_or_default();
    let opened = create_parent_confined(path, root)?;
    let lock = lock_dir(&opened)?;
    let previous = digest_in(&opened, name, path, Some(MAX_FILE_BYTES))?;
    check_digest(path, if_digest, previous.as_deref())?;

    // Keep the permissions a user gave the file they are replacing.
    let mode = opened.mode_of(name).unwrap_or(0o644);
    let (temp, file) = create_temp(&format!("{name}.vak-tmp"), |temp| {
        opened.create_new(temp, mode)
    })
    .map_err(io_err("create a temporary file for", path))?;
    let written = write_temp(file, path, text).and_then(|()| {
        opened
            .rename(&temp, name)
            .map_err(io_err("rename into place", path))
    });
    if let Err(error) = written {
        let _ = opened.unlink(&temp);
        return Err(error);
    }
    // The rename is only durable once the directory entry is.
    lock.sync_all()
        .map_err(io_err("sync the directory", opened.path()))?;
    drop(lock);
    let digest = sha256_hex(text);
    // Debug, not info: a node's start writes every replica file through
    // here, and one line per file says nothing an operator acts on; the
    // command or request that saved a file reports it.
    tracing::debug!(path = %Escaped(path.as_str()), %digest, "prompt layer file saved");
    Ok(SaveOutcome {
        path: path.to_owned(),
        digest,
        previous,
    })
}

fn write_temp(mut file: File, target: &Utf8Path, text: &str) -> Result<(), SaveError> {
    file.write_all(text.as_bytes())
        .map_err(io_err("write a temporary file for", target))?;
    file.sync_all()
        .map_err(io_err("sync a temporary file for", target))?;
    Ok(())
}

/// Delete the layer file at `path` so the block inherits again, unless it
/// changed since `if_digest`. Returns the removed file's digest, `None` when
/// there was nothing to remove.
///
/// `root` is the home or the project the layer belongs to: the file and
/// every directory on the way to it must resolve inside it (checked on the
/// open directory handle; the unlink happens relative to that handle).
///
/// # Errors
///
/// See [`SaveError`]; a symlink, a non-regular file, or a path that leads
/// outside `root` is refused and nothing is deleted.
pub fn remove_checked(
    path: &Utf8Path,
    root: &Utf8Path,
    if_digest: Option<&str>,
) -> Result<Option<Sha256Hex>, SaveError> {
    validate_digest(if_digest)?;
    let confined = ConfinedRoot::new(root).map_err(io_err("open the layer root", root))?;
    let opened = match confined {
        Some(confined) => open_parent(path, &confined, "remove")?,
        None => None,
    };
    let Some((dir, name)) = opened else {
        check_digest(path, if_digest, None)?;
        return Ok(None);
    };
    let lock = lock_dir(&dir)?;
    // Hashed in chunks: an oversized file can still be reset.
    let previous = digest_in(&dir, name, path, None)?;
    check_digest(path, if_digest, previous.as_deref())?;
    if previous.is_some() {
        dir.unlink(name).map_err(io_err("remove", path))?;
        lock.sync_all()
            .map_err(io_err("sync the directory", dir.path()))?;
        tracing::info!(path = %Escaped(path.as_str()), "prompt layer file removed");
    }
    Ok(previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_save_is_only_the_same_text_over_an_existing_file() {
        let path = Utf8PathBuf::from("/h/.vak/prompts/rules/a.md");
        let same = sha256_hex("- a\n");
        let outcome = SaveOutcome::unchanged(path.clone(), Some(&same), "- a\n");
        assert_eq!(
            outcome,
            Some(SaveOutcome {
                path: path.clone(),
                digest: same.clone(),
                previous: Some(same.clone()),
            })
        );
        assert_eq!(
            SaveOutcome::unchanged(path.clone(), Some(&same), "- b\n"),
            None
        );
        assert_eq!(SaveOutcome::unchanged(path, None, ""), None);
    }
    use std::os::unix::fs::symlink;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn temp() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        (dir, path)
    }

    #[test]
    fn a_temporary_name_left_by_a_killed_process_is_passed_over() {
        // Stale files under the very names the next saves would take, as a
        // save killed in a container leaves them for the next PID 1.
        let (_keep, root) = temp();
        let path = root.join("identity.md");
        save_atomic(&path, &root, "one", None).unwrap();
        let (taken, ()) = create_temp("identity.md.vak-tmp", |_| Ok(())).unwrap();
        let stem = taken.rsplit_once('.').unwrap().0;
        let next: u64 = taken.rsplit_once('.').unwrap().1.parse().unwrap();
        for n in next + 1..next + 8 {
            fs::write(root.join(format!("{stem}.{n}")), "stale").unwrap();
        }
        save_atomic(&path, &root, "two", None).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");

        // Only "already exists" is passed over, and not forever.
        let mut calls = 0;
        let err = create_temp("x", |_| -> io::Result<()> {
            calls += 1;
            Err(io::ErrorKind::AlreadyExists.into())
        })
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(calls, 65);
        let mut calls = 0;
        let err = create_temp("x", |_| -> io::Result<()> {
            calls += 1;
            Err(io::ErrorKind::PermissionDenied.into())
        })
        .unwrap_err();
        assert_eq!((err.kind(), calls), (io::ErrorKind::PermissionDenied, 1));
    }

    #[test]
    fn save_creates_dirs_and_replaces() {
        let (_keep, root) = temp();
        let path = root.join(".vak/prompts/agents/reviewer/identity.md");
        let first = save_atomic(&path, &root, "one", None).unwrap();
        assert_eq!(first.previous, None);
        assert_eq!(first.digest, sha256_hex("one"));
        assert_eq!(fs::read_to_string(&path).unwrap(), "one");
        let second = save_atomic(&path, &root, "two", Some(&first.digest)).unwrap();
        assert_eq!(second.previous.as_deref(), Some(first.digest.as_str()));
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["identity.md"]);
    }

    #[test]
    fn first_save_creates_a_missing_root() {
        let (_keep, base) = temp();
        let root = base.join("vak-home");
        let path = root.join(".vak/prompts/identity.md");
        save_atomic(&path, &root, "hi", None).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "hi");
    }

    #[test]
    fn if_digest_refuses_stale_and_absent_means_absent() {
        let (_keep, root) = temp();
        let path = root.join("identity.md");
        // Empty digest: "I believe there is no file".
        save_atomic(&path, &root, "mine", Some(ABSENT_DIGEST)).unwrap();
        let err = save_atomic(&path, &root, "theirs", Some(ABSENT_DIGEST)).unwrap_err();
        assert!(matches!(err, SaveError::Stale { .. }), "{err}");
        assert!(err.to_string().contains(path.as_str()), "{err}");
        let stale = sha256_hex("something else");
        let err = save_atomic(&path, &root, "theirs", Some(&stale)).unwrap_err();
        assert!(err.to_string().contains(&sha256_hex("mine")), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "mine");
        assert!(matches!(
            save_atomic(&path, &root, "x", Some("ABC")),
            Err(SaveError::BadDigest(_))
        ));
        let err = remove_checked(&path, &root, Some(&stale)).unwrap_err();
        assert!(matches!(err, SaveError::Stale { .. }));
        assert_eq!(
            remove_checked(&path, &root, Some(&sha256_hex("mine"))).unwrap(),
            Some(sha256_hex("mine"))
        );
        assert!(!path.exists());
        assert_eq!(
            remove_checked(&path, &root, Some(ABSENT_DIGEST)).unwrap(),
            None
        );
        assert!(matches!(
            remove_checked(&path, &root, Some(&stale)),
            Err(SaveError::Stale { .. })
        ));
    }

    #[test]
    fn refuses_symlinks_non_regular_and_escapes() {
        let (_keep, root) = temp();
        let (_keep2, elsewhere) = temp();
        fs::create_dir_all(root.join("p")).unwrap();
        fs::write(elsewhere.join("target.md"), "outside").unwrap();
        symlink(elsewhere.join("target.md"), root.join("p/identity.md")).unwrap();
        let err = save_atomic(&root.join("p/identity.md"), &root, "x", None).unwrap_err();
        assert!(matches!(err, SaveError::Symlink(_)), "{err}");
        assert!(matches!(
            remove_checked(&root.join("p/identity.md"), &root, None),
            Err(SaveError::Symlink(_))
        ));
        assert_eq!(
            fs::read_to_string(elsewhere.join("target.md")).unwrap(),
            "outside"
        );

        fs::create_dir(root.join("p/guardrails.md")).unwrap();
        let err = save_atomic(&root.join("p/guardrails.md"), &root, "x", None).unwrap_err();
        assert!(matches!(err, SaveError::NotRegularFile(_)), "{err}");

        symlink(&elsewhere, root.join(".vak")).unwrap();
        let err =
            save_atomic(&root.join(".vak/prompts/identity.md"), &root, "x", None).unwrap_err();
        assert!(matches!(err, SaveError::OutsideRoot { .. }), "{err}");
        assert!(
            !elsewhere.join("prompts").exists(),
            "created a directory outside the root"
        );

        // A reset through a symlinked directory into another root deletes
        // nothing there.
        let (_keep3, home) = temp();
        fs::create_dir_all(home.join(".vak/prompts")).unwrap();
        fs::write(home.join(".vak/prompts/guardrails.md"), "- shared\n").unwrap();
        let proj = root.join("proj");
        fs::create_dir_all(proj.join(".vak")).unwrap();
        symlink(home.join(".vak/prompts"), proj.join(".vak/prompts")).unwrap();
        let target = proj.join(".vak/prompts/guardrails.md");
        let err = remove_checked(&target, &proj, None).unwrap_err();
        assert!(
            matches!(
                &err,
                SaveError::OutsideRoot {
                    action: "remove",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(home.as_str()), "{err}");
        assert!(home.join(".vak/prompts/guardrails.md").exists());
        assert!(matches!(
            save_atomic(&target, &proj, "x", None),
            Err(SaveError::OutsideRoot { .. })
        ));
        assert!(matches!(
            current_digest(&target, &proj),
            Err(SaveError::OutsideRoot { .. })
        ));
        assert_eq!(
            fs::read_to_string(home.join(".vak/prompts/guardrails.md")).unwrap(),
            "- shared\n"
        );

        let big = "a".repeat(MAX_FILE_BYTES as usize + 1);
        assert!(matches!(
            save_atomic(&root.join("big.md"), &root, &big, None),
            Err(SaveError::TooLarge { .. })
        ));
        // An oversized file already there: its digest is not read whole,
        // yet a reset still removes it.
        fs::write(root.join("big.md"), &big).unwrap();
        assert!(matches!(
            current_digest(&root.join("big.md"), &root),
            Err(SaveError::TooLarge { .. })
        ));
        assert_eq!(
            remove_checked(&root.join("big.md"), &root, None).unwrap(),
            Some(sha256_hex(&big))
        );
    }

    const CHILD_ENV: &str = "VAK_CRASH_WRITER_TARGET";

    fn versions() -> [String; 2] {
        // Large enough that a write takes many syscalls, so kills land mid-write.
        [
            "old line\n".repeat(20_000),
            "new text, longer line\n".repeat(9_000),
        ]
    }

    /// The writer the crash test kills: saves the two versions in turn,
    /// forever. Runs only when the crash test starts it.
    #[test]
    #[ignore = "helper process for saves_survive_sigkill"]
    fn crash_writer_child() {
        let Some(target) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let path = Utf8PathBuf::from(target.to_string_lossy().into_owned());
        let root = path.parent().unwrap().to_owned();
        let [a, b] = versions();
        println!("ready");
        loop {
            save_atomic(&path, &root, &a, None).unwrap();
            save_atomic(&path, &root, &b, None).unwrap();
        }
    }

    #[test]
    fn saves_survive_sigkill() {
        let (_keep, root) = temp();
        let path = root.join("guardrails.md");
        let [a, b] = versions();
        fs::write(&path, &a).unwrap();
        let exe = std::env::current_exe().unwrap();
        let started = Instant::now();
        // xorshift, seeded from the clock: random kill moments, no dependency.
        let mut seed = started.elapsed().as_nanos() as u64
            ^ 0x9e37_79b9_7f4a_7c15
            ^ u64::from(std::process::id());
        let (mut torn, mut saw_new, mut mid_write) = (0, 0, 0);
        for _ in 0..50 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut child = Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "write::tests::crash_writer_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, path.as_str())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_micros(3_000 + seed % 60_000));
            child.kill().unwrap(); // SIGKILL on unix
            child.wait().unwrap();
            let now = fs::read_to_string(&path).unwrap();
            if now != a && now != b {
                torn += 1;
            }
            saw_new += usize::from(now == b);
            // A leftover temporary file means the kill landed inside a save.
            for entry in fs::read_dir(&root).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "guardrails.md" {
                    mid_write += 1;
                    fs::remove_file(entry.path()).unwrap();
                }
            }
        }
        eprintln!(
            "crash test: 50 kills, {saw_new} left the new version, {mid_write} landed mid-save"
        );
        assert_eq!(torn, 0, "a killed writer left a torn file");
        // The writer must have been running when killed, or the test proves nothing.
        assert!(
            saw_new > 0 || mid_write > 0,
            "no kill landed after the writer started"
        );
    }
}
