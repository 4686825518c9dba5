//! The file backend of [`History`]: the content-addressed object store and
//! the version log of one home, under `$VAK_HOME/.vak/`.
//!
//! | store | path | write discipline |
//! |---|---|---|
//! | [`ObjectStore`] | `objects/<sha256>` | temp file, fsync, rename, fsync dir; idempotent; verified on every read |
//! | [`VersionLog`] | `history/versions.jsonl` | append-only JSON lines; exclusive lock, one full line, fsync |
//!
//! Every file is opened through the loader's confined layer
//! ([`vak_prompt_loader::confine`]): never through a symlink, never a FIFO
//! or device, always bounded.

mod log;
mod objects;

/// A temporary home, and its canonical path, for the history's tests.
#[cfg(test)]
fn temp_home() -> (tempfile::TempDir, camino::Utf8PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    (dir, path)
}

use camino::Utf8Path;
use vak_prompt_blocks::{Escaped, Sha256Hex};
use vak_prompt_history::{History, HistoryError, VersionRecord, Versions};
use vak_prompt_loader::confine::Refusal;

pub use log::VersionLog;
pub use objects::ObjectStore;

/// The file backend of [`History`]: `objects/` and `history/versions.jsonl`
/// under `$VAK_HOME/.vak/`.
#[derive(Debug, Clone)]
pub struct FileHistory {
    objects: ObjectStore,
    log: VersionLog,
}

impl FileHistory {
    /// The history of `home`. Nothing is touched until it is used.
    pub fn new(home: &Utf8Path) -> Self {
        FileHistory {
            objects: ObjectStore::new(home),
            log: VersionLog::new(home),
        }
    }

    /// The object store.
    pub fn objects(&self) -> &ObjectStore {
        &self.objects
    }

    /// The version log.
    pub fn log(&self) -> &VersionLog {
        &self.log
    }
}

impl History for FileHistory {
    fn history_location(&self) -> String {
        format!(
            "the file store in `{}`",
            Escaped(self.objects.dir().parent().map_or("", |p| p.as_str()))
        )
    }

    fn put_object(&self, text: &str) -> Result<Sha256Hex, HistoryError> {
        self.objects.put(text)
    }

    fn get_object(&self, digest: &str) -> Result<String, HistoryError> {
        self.objects.get(digest)
    }

    fn check_appendable(&self) -> Result<(), HistoryError> {
        self.log.check_appendable()
    }

    fn append_version(&self, record: &VersionRecord) -> Result<(), HistoryError> {
        self.log.append(record)
    }

    fn versions_of(&self, target: &str) -> Result<Versions, HistoryError> {
        self.log.for_target(target)
    }

    fn all_versions(&self) -> Result<Versions, HistoryError> {
        self.log.read(|_| true)
    }

    fn object_digests(&self) -> Result<Vec<Sha256Hex>, HistoryError> {
        self.objects.digests()
    }
}

/// What an I/O failure doing `action` to `path` is, as the history says it.
fn io_error(
    action: &'static str,
    path: &Utf8Path,
) -> impl FnOnce(std::io::Error) -> HistoryError + use<> {
    let path = path.to_owned();
    move |source| HistoryError::Io {
        action,
        path,
        source,
    }
}

/// What the confined layer's refusal of `path` is, as the history says it.
fn refusal_error(path: &Utf8Path, refusal: Refusal) -> HistoryError {
    let why = match refusal {
        Refusal::Outside { leads_to } => format!(
            "it leads outside the vak home (to `{}`)",
            Escaped(leads_to.as_str())
        ),
        Refusal::InNestedRepository { repository, .. } => format!(
            "it leads into `{}`, a repository of its own",
            Escaped(repository.as_str())
        ),
        Refusal::Dangling => "it is a dangling symlink".to_owned(),
        Refusal::NotADirectory => {
            "its directory is not a directory (a file, FIFO, socket or device)".to_owned()
        }
        Refusal::NotRegularFile(_) => {
            "it is a symlink or not a regular file (FIFO, socket, device or directory)".to_owned()
        }
        Refusal::TooLarge { bytes, limit } => {
            format!("it is at least {bytes} bytes, over the {limit}-byte bound")
        }
        Refusal::Io(source) => {
            return HistoryError::Io {
                action: "open",
                path: path.to_owned(),
                source,
            };
        }
    };
    HistoryError::Refused {
        path: path.to_owned(),
        why,
    }
}
