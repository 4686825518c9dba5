use camino::{Utf8Path, Utf8PathBuf};

use vak_prompt_blocks::{Escaped, SharedText};

use crate::confine::{ConfinedRoot, FileKind, Refusal, read_confined};

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
    /// A link, inside the project, leading into a nested repository below
    /// it: a project of its own, whose trust is not this project's.
    InNestedRepository {
        /// Where the link resolves to.
        target: Utf8PathBuf,
        /// The nested repository's directory.
        repository: Utf8PathBuf,
    },
    /// Not a regular file: what it is instead (a FIFO, socket, device or
    /// directory).
    NotRegularFile(FileKind),
    /// Larger than its limit ([`MAX_FILE_BYTES`] for prompt files).
    TooLarge {
        /// The size seen (at least the limit plus one).
        bytes: u64,
        /// The limit for this kind of file.
        limit: u64,
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
                    "is, or is under, a symlink leading outside its home or project (to `{}`); it is not read, saved or removed",
                    Escaped(target.as_str())
                )
            }
            ReadRefusal::InNestedRepository { target, repository } => {
                write!(
                    f,
                    "is, or is under, a symlink leading into `{}`, a repository of its own (its own project, with its own trust), to `{}`; it is not read, saved or removed as part of this project: copy the file into this project, or work in that repository",
                    Escaped(repository.as_str()),
                    Escaped(target.as_str())
                )
            }
            ReadRefusal::NotRegularFile(kind) => write!(f, "is not a regular file ({kind})"),
            ReadRefusal::TooLarge { bytes, limit } => {
                write!(
                    f,
                    "is {bytes} bytes or more, larger than the {limit}-byte limit; it was not read"
                )
            }
            ReadRefusal::NotUtf8 { at_byte } => write!(f, "is not valid UTF-8 at byte {at_byte}"),
            ReadRefusal::Io(message) => write!(f, "could not be read: {message}"),
        }
    }
}

impl From<Refusal> for ReadRefusal {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Outside { leads_to } => ReadRefusal::SymlinkOutside { target: leads_to },
            Refusal::InNestedRepository {
                leads_to,
                repository,
            } => ReadRefusal::InNestedRepository {
                target: leads_to,
                repository,
            },
            Refusal::Dangling => ReadRefusal::Io("it is a dangling symlink".to_owned()),
            Refusal::NotRegularFile(kind) => ReadRefusal::NotRegularFile(kind),
            Refusal::NotADirectory => {
                ReadRefusal::Io("it is not a directory (a file, FIFO, socket or device)".to_owned())
            }
            Refusal::TooLarge { bytes, limit } => ReadRefusal::TooLarge { bytes, limit },
            Refusal::Io(error) => ReadRefusal::Io(error.to_string()),
        }
    }
}

/// Read `path` as a prompt file, treating it as hostile.
///
/// Returns `Ok(None)` when nothing is there (the layer inherits). The file,
/// and every directory on the way to it, after following any symlinks, must
/// stay inside `root` (the home or the project the layer belongs to),
/// checked on the open handle ([`crate::confine`]); it must be a regular
/// file of at most [`MAX_FILE_BYTES`], and be UTF-8.
pub fn read_safely(path: &Utf8Path, root: &Utf8Path) -> Result<Option<String>, ReadRefusal> {
    match ConfinedRoot::new(root) {
        Ok(Some(root)) => read_in_root(path, &root),
        // No root: nothing under it exists.
        Ok(None) => Ok(None),
        Err(error) => Err(ReadRefusal::Io(error.to_string())),
    }
}

/// [`read_safely`] against an already resolved root.
fn read_in_root(path: &Utf8Path, root: &ConfinedRoot) -> Result<Option<String>, ReadRefusal> {
    match read_confined(path, root, MAX_FILE_BYTES)? {
        Some(bytes) => utf8(bytes).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn utf8(bytes: Vec<u8>) -> Result<String, ReadRefusal> {
    String::from_utf8(bytes).map_err(|error| not_utf8(error.utf8_error()))
}

/// [`utf8`] for bytes still in the read's buffer: the text is made from
/// them with one copy, shared from then on.
pub(crate) fn utf8_shared(bytes: &[u8]) -> Result<SharedText, ReadRefusal> {
    std::str::from_utf8(bytes)
        .map(SharedText::from)
        .map_err(not_utf8)
}

fn not_utf8(error: std::str::Utf8Error) -> ReadRefusal {
    ReadRefusal::NotUtf8 {
        at_byte: error.valid_up_to(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
            Err(ReadRefusal::NotRegularFile(FileKind::Directory))
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
        assert_eq!(
            read_safely(&fifo, &root),
            Err(ReadRefusal::NotRegularFile(FileKind::Fifo))
        );
    }
}
