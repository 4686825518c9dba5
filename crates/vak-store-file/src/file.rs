//! The one way the file store opens a store file (non-regular files are
//! refused everywhere): never through a symbolic link
//! (`O_NOFOLLOW`), never blocking on a FIFO (`O_NONBLOCK`), and checked on
//! the open handle (`fstat`) to be a regular file before a byte is read or
//! written. A FIFO, device, socket or directory is refused by name.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;

use camino::Utf8Path;

use vak_session::SessionError;

/// The floor's refusal as the store's: a link, a non-regular file or an I/O
/// error, naming the same path.
pub(crate) fn fs_error(error: vak_fs::FsError) -> SessionError {
    match error {
        vak_fs::FsError::Symlink { path } => SessionError::Symlink { path },
        vak_fs::FsError::NotRegular { path, kind } => SessionError::NotRegular { path, kind },
        vak_fs::FsError::Io {
            action,
            path,
            source,
        } => SessionError::Io {
            action,
            path,
            source,
        },
    }
}

/// Open `path` with `options` as [`vak_fs::open_regular`] does (never
/// through a link, never blocking on a FIFO, a regular file or refused).
/// `Ok(None)` when nothing is at the path (and `options` does not create
/// it).
pub(crate) fn open_optional(
    path: &Utf8Path,
    options: &mut OpenOptions,
) -> Result<Option<File>, SessionError> {
    vak_fs::open_regular(path, options).map_err(fs_error)
}

/// One rule for every file of the home (`$VAK_HOME/.vak/…`): each
/// directory on the way to `path` must stay inside `home` once symlinks
/// are resolved ([`vak_prompt_loader::confine::home_path`]). `home` is
/// `None` for a store made in an explicit directory, which is the caller's.
pub(crate) fn in_home(home: Option<&Utf8Path>, path: &Utf8Path) -> Result<(), SessionError> {
    match home {
        Some(home) => vak_prompt_loader::confine::home_path(home, path)
            .map(drop)
            .map_err(|refusal| SessionError::io("use", path, refusal.into())),
        None => Ok(()),
    }
}

/// [`open_optional`] for a file that must exist; a missing one is an I/O
/// error naming it.
pub(crate) fn open(path: &Utf8Path, options: &mut OpenOptions) -> Result<File, SessionError> {
    open_optional(path, options)?
        .ok_or_else(|| SessionError::io("open", path, std::io::Error::from(ErrorKind::NotFound)))
}

/// Whether something (of any type, a dangling symlink included) is at `path`.
pub(crate) fn is_present(path: &Utf8Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Remove the regular files directly in `dir` last modified more than
/// `age` before now by this machine's clock (never a symlink, never a
/// directory), best effort; returns how many went. For state that only a
/// crash or time leaves behind: old replay markers, pending ledgers.
pub(crate) fn remove_files_older_than(dir: &Utf8Path, age: std::time::Duration) -> usize {
    let Some(cutoff) = std::time::SystemTime::now().checked_sub(age) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        // `DirEntry::metadata` does not follow a symlink.
        let old = entry
            .metadata()
            .ok()
            .filter(std::fs::Metadata::is_file)
            .and_then(|m| m.modified().ok())
            .is_some_and(|m| m < cutoff);
        if old && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use camino::Utf8PathBuf;
    use std::io::Read;

    fn dir() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        (dir, path)
    }

    fn mkfifo(path: &Utf8Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path.as_str())
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
    }

    #[test]
    fn a_regular_file_opens_and_a_missing_one_is_none() {
        let (_t, root) = dir();
        let path = root.join("f");
        std::fs::write(&path, "x").expect("write");
        let mut text = String::new();
        open(&path, OpenOptions::new().read(true))
            .expect("opens")
            .read_to_string(&mut text)
            .expect("reads");
        assert_eq!(text, "x");
        assert!(
            open_optional(&root.join("missing"), OpenOptions::new().read(true))
                .expect("no error")
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
            let err = open(&fifo, options).expect_err("fifo refused");
            assert!(
                err.to_string().contains("is not a regular file (a FIFO)"),
                "{err}"
            );
        }
        let target = root.join("target");
        std::fs::write(&target, "x").expect("write");
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let err = open(&link, OpenOptions::new().append(true)).expect_err("symlink refused");
        assert!(matches!(err, SessionError::Symlink { .. }), "{err}");
        assert!(err.to_string().contains("link"), "{err}");
        let err = open(&root, OpenOptions::new().read(true)).expect_err("dir refused");
        assert!(err.to_string().contains("a directory"), "{err}");
    }
}
