use std::fs;
use std::io::{self, Read};

use camino::{Utf8Path, Utf8PathBuf};

/// The largest layer file the loader reads. Prompt text is spent on every
/// turn; anything near this size is a mistake or an attack.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// Why a file was not read. Each reason is a sentence fragment that follows
/// the file's path in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadRefusal {
    /// A symlink (or a symlinked directory) whose target lies outside the
    /// layer's directory.
    SymlinkOutside {
        /// Where the link resolves to.
        target: Utf8PathBuf,
    },
    /// Not a regular file: a FIFO, socket, device or directory.
    NotRegularFile,
    /// Larger than [`MAX_FILE_BYTES`].
    TooLarge {
        /// The size seen.
        bytes: u64,
    },
    /// Not valid UTF-8.
    NotUtf8 {
        /// Offset of the first invalid byte.
        at_byte: usize,
    },
    /// An I/O error other than "not found".
    Io(String),
}

impl std::fmt::Display for ReadRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadRefusal::SymlinkOutside { target } => {
                write!(
                    f,
                    "is a symlink leading outside its layer directory (to `{target}`)"
                )
            }
            ReadRefusal::NotRegularFile => {
                f.write_str("is not a regular file (FIFO, socket, device or directory)")
            }
            ReadRefusal::TooLarge { bytes } => {
                write!(
                    f,
                    "is {bytes} bytes, larger than the {MAX_FILE_BYTES}-byte limit for prompt files"
                )
            }
            ReadRefusal::NotUtf8 { at_byte } => write!(f, "is not valid UTF-8 at byte {at_byte}"),
            ReadRefusal::Io(message) => write!(f, "could not be read: {message}"),
        }
    }
}

fn io_refusal(error: io::Error) -> ReadRefusal {
    ReadRefusal::Io(error.to_string())
}

/// Read `path` as a prompt file, treating it as hostile.
///
/// Returns `Ok(None)` when nothing is there (the layer inherits). The file,
/// after following any symlinks, must stay inside `root` (the prompt
/// directory of its origin), be a regular file of at most
/// [`MAX_FILE_BYTES`], and be UTF-8.
pub fn read_safely(path: &Utf8Path, root: &Utf8Path) -> Result<Option<String>, ReadRefusal> {
    let Some(real) = resolve_existing(path)? else {
        return Ok(None);
    };
    let real_root = fs::canonicalize(root).map_err(io_refusal)?;
    read_resolved(real, &real_root)
}

/// [`read_safely`] against an already canonical `real_root`. The chain
/// loader calls this with one canonical root per origin rather than
/// resolving it per file.
pub(crate) fn read_existing(
    path: &Utf8Path,
    real_root: &std::path::Path,
) -> Result<Option<String>, ReadRefusal> {
    match resolve_existing(path)? {
        Some(real) => read_resolved(real, real_root),
        None => Ok(None),
    }
}

/// Where `path` really leads, or `None` when nothing is there. Both ends
/// are canonicalized by the callers so a symlinked file, or a symlinked
/// parent directory, is judged by where it really leads.
fn resolve_existing(path: &Utf8Path) -> Result<Option<std::path::PathBuf>, ReadRefusal> {
    let Some(meta) = lstat(path)? else {
        return Ok(None);
    };
    match fs::canonicalize(path) {
        Ok(real) => Ok(Some(real)),
        Err(error) if error.kind() == io::ErrorKind::NotFound && meta.file_type().is_symlink() => {
            Err(ReadRefusal::Io("it is a dangling symlink".to_owned()))
        }
        Err(error) => Err(io_refusal(error)),
    }
}

/// [`read_safely`] for `path` in a directory whose canonical form
/// `real_dir` is already known to lie inside `real_root`. A regular file
/// there needs no path resolution of its own (the directory layer resolves
/// its directory once for all four block files); a symlink is resolved and
/// judged like any other.
pub(crate) fn read_in_dir(
    path: &Utf8Path,
    real_dir: &std::path::Path,
    real_root: &std::path::Path,
) -> Result<Option<String>, ReadRefusal> {
    let Some(meta) = lstat(path)? else {
        return Ok(None);
    };
    let real = match (meta.file_type().is_symlink(), path.file_name()) {
        (false, Some(name)) => real_dir.join(name),
        _ => match resolve_existing(path)? {
            Some(real) => real,
            None => return Ok(None),
        },
    };
    read_resolved(real, real_root)
}

/// The file's own metadata (not following a final symlink), or `None` when
/// nothing is there.
fn lstat(path: &Utf8Path) -> Result<Option<fs::Metadata>, ReadRefusal> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(io_refusal(error)),
    }
}

fn read_resolved(
    real: std::path::PathBuf,
    real_root: &std::path::Path,
) -> Result<Option<String>, ReadRefusal> {
    if !real.starts_with(real_root) {
        return Err(ReadRefusal::SymlinkOutside {
            target: Utf8PathBuf::from_path_buf(real)
                .unwrap_or_else(|p| Utf8PathBuf::from(p.to_string_lossy().into_owned())),
        });
    }
    // Checked before opening: opening a FIFO would block.
    let target_meta = fs::metadata(&real).map_err(io_refusal)?;
    if !target_meta.is_file() {
        return Err(ReadRefusal::NotRegularFile);
    }
    if target_meta.len() > MAX_FILE_BYTES {
        return Err(ReadRefusal::TooLarge {
            bytes: target_meta.len(),
        });
    }
    let file = fs::File::open(&real).map_err(io_refusal)?;
    // The file may have been swapped since the check: judge the open handle
    // too, and never read more than the limit.
    if !file.metadata().map_err(io_refusal)?.is_file() {
        return Err(ReadRefusal::NotRegularFile);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(target_meta.len()).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_refusal)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadRefusal::TooLarge {
            bytes: bytes.len() as u64,
        });
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|error| ReadRefusal::NotUtf8 {
            at_byte: error.utf8_error().valid_up_to(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).unwrap();
        (dir, path)
    }

    #[test]
    fn missing_is_none_and_present_is_text() {
        let (_keep, root) = temp();
        assert_eq!(read_safely(&root.join("identity.md"), &root), Ok(None));
        fs::write(root.join("identity.md"), "hi").unwrap();
        assert_eq!(
            read_safely(&root.join("identity.md"), &root),
            Ok(Some("hi".into()))
        );
    }

    #[test]
    fn hostile_inputs_are_refused() {
        let (_keep, base) = temp();
        let root = base.join("prompts");
        fs::create_dir(&root).unwrap();
        fs::write(base.join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root.join("link.md")).unwrap();
        assert!(matches!(
            read_safely(&root.join("link.md"), &root),
            Err(ReadRefusal::SymlinkOutside { .. })
        ));
        fs::write(root.join("inside.md"), "ok").unwrap();
        std::os::unix::fs::symlink(root.join("inside.md"), root.join("ok-link.md")).unwrap();
        assert_eq!(
            read_safely(&root.join("ok-link.md"), &root),
            Ok(Some("ok".into()))
        );

        fs::write(
            root.join("big.md"),
            vec![b'a'; (MAX_FILE_BYTES + 1) as usize],
        )
        .unwrap();
        assert!(matches!(
            read_safely(&root.join("big.md"), &root),
            Err(ReadRefusal::TooLarge { .. })
        ));

        fs::write(root.join("bad.md"), b"ok\xffno").unwrap();
        assert_eq!(
            read_safely(&root.join("bad.md"), &root),
            Err(ReadRefusal::NotUtf8 { at_byte: 2 })
        );

        fs::create_dir(root.join("dir.md")).unwrap();
        assert_eq!(
            read_safely(&root.join("dir.md"), &root),
            Err(ReadRefusal::NotRegularFile)
        );
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let (_keep, root) = temp();
        let fifo = root.join("guardrails.md");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(read_safely(&fifo, &root), Err(ReadRefusal::NotRegularFile));
    }
}
