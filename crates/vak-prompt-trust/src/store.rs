use std::collections::BTreeSet;
use std::fs;
use std::io::Write;

use camino::{Utf8Component, Utf8Path, Utf8PathBuf};
use serde::{Deserialize, Serialize};
use vak_prompt_loader::confine::{Refusal, read_plain};

use crate::TrustError;
use crate::policy::Trust;

/// The largest trust store read: it is a list of directories.
pub const MAX_STORE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    #[serde(default)]
    trusted: BTreeSet<String>,
}

/// The user's list of trusted project directories,
/// `$VAK_HOME/.vak/trust.toml`, keyed by canonical path. A project not
/// listed is untrusted.
///
/// The file is read only if it is a regular file (never a symlink, FIFO or
/// device: opened non-blocking and checked on the handle) of at most
/// [`MAX_STORE_BYTES`]. Every change re-reads it under an exclusive lock on
/// `trust.toml.lock`, then writes a temporary file, fsyncs it, renames it
/// into place and fsyncs the directory, so concurrent `vak trust` and
/// `vak untrust` never lose an entry.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: Utf8PathBuf,
    trusted: BTreeSet<String>,
}

/// What [`TrustStore::untrust`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// The path the store was asked about, as it keys it when it can
    /// (canonical, or normalised when the directory no longer exists).
    pub key: String,
    /// The entries removed; empty when none matched.
    pub removed: Vec<String>,
}

/// The canonical, UTF-8 form of `dir`, as the store keys it.
fn canonical(dir: &Utf8Path) -> Result<String, TrustError> {
    let real = fs::canonicalize(dir).map_err(|_| TrustError::BadDirectory(dir.to_string()))?;
    if !real.is_dir() {
        return Err(TrustError::BadDirectory(dir.to_string()));
    }
    real.into_os_string()
        .into_string()
        .map_err(|_| TrustError::BadDirectory(dir.to_string()))
}

/// `path` made absolute and normalised lexically: `.` dropped, `..` pops,
/// trailing slashes gone. For a directory that no longer exists.
fn lexical(path: &Utf8Path) -> Utf8PathBuf {
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| Utf8PathBuf::from_path_buf(cwd).ok())
            .map_or_else(|| path.to_owned(), |cwd| cwd.join(path))
    };
    let mut out = Utf8PathBuf::new();
    for component in absolute.components() {
        match component {
            Utf8Component::CurDir => {}
            Utf8Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_str()),
        }
    }
    out
}

/// Every key a (possibly deleted) directory could have been stored under:
/// its canonical path when it exists; otherwise its nearest existing
/// ancestor resolved (through any symlinked parent) with the rest
/// appended, and its plain lexical normalisation.
fn candidate_keys(dir: &Utf8Path) -> Vec<String> {
    if let Ok(key) = canonical(dir) {
        return vec![key];
    }
    let normal = lexical(dir);
    let mut keys = Vec::new();
    // Walk up the path as given (so `..` after a symlink is resolved the
    // way the kernel would), to the nearest ancestor that exists.
    let given = if dir.is_absolute() {
        dir.to_owned()
    } else {
        lexical(Utf8Path::new(".")).join(dir)
    };
    let mut rest = Vec::new();
    let mut ancestor = given.as_path();
    while let Some(parent) = ancestor.parent() {
        if let Some(name) = ancestor.file_name() {
            rest.push(name.to_owned());
        }
        ancestor = parent;
        if let Ok(real) = fs::canonicalize(ancestor)
            && let Ok(real) = Utf8PathBuf::from_path_buf(real)
        {
            let mut key = real;
            for part in rest.iter().rev() {
                key.push(part);
            }
            keys.push(lexical(&key).into_string());
            break;
        }
    }
    keys.push(normal.into_string());
    keys.dedup();
    keys
}

impl TrustStore {
    /// The store's path under `home`.
    pub fn path_in(home: &Utf8Path) -> Utf8PathBuf {
        home.join(".vak").join("trust.toml")
    }

    /// Load the store under `home`; a missing file is an empty store.
    ///
    /// # Errors
    ///
    /// [`TrustError::NotRegularFile`] for a symlink, FIFO or device (never
    /// opened in a way that could block), [`TrustError::TooLarge`] over
    /// [`MAX_STORE_BYTES`], [`TrustError::Malformed`] for bad TOML.
    pub fn load(home: &Utf8Path) -> Result<Self, TrustError> {
        let path = Self::path_in(home);
        vak_prompt_loader::confine::home_path(home, &path).map_err(|refusal| TrustError::Read {
            path: path.clone(),
            source: refusal.into(),
        })?;
        let trusted = read_store(&path)?;
        Ok(TrustStore { path, trusted })
    }

    /// How far `project` is trusted. A directory that cannot be
    /// canonicalized is untrusted.
    pub fn trust_of(&self, project: &Utf8Path) -> Trust {
        match canonical(project) {
            Ok(key) if self.trusted.contains(&key) => Trust::Trusted,
            _ => Trust::Untrusted,
        }
    }

    /// Trust `project`; returns its canonical path.
    ///
    /// # Errors
    ///
    /// A directory that does not exist or lies in the home, or a store that
    /// cannot be read or written (see [`TrustError`]).
    pub fn trust(&mut self, project: &Utf8Path) -> Result<String, TrustError> {
        let key = canonical(project)?;
        // The store lives at `<home>/.vak/trust.toml`.
        let home = self.path.parent().and_then(Utf8Path::parent);
        if let Some(home) = home.and_then(|h| canonical(h).ok())
            && Utf8Path::new(&key).starts_with(&home)
        {
            return Err(TrustError::InsideHome(key));
        }
        self.update(|trusted| {
            trusted.insert(key.clone());
        })?;
        Ok(key)
    }

    /// Stop trusting `project`, given by any path that named it, even if it
    /// no longer exists (a deleted checkout, a trailing slash, `..`, a
    /// symlinked parent): every entry it matches, by canonical path or by
    /// normalised path, is removed and returned.
    ///
    /// # Errors
    ///
    /// A store that cannot be read or written (see [`TrustError`]).
    pub fn untrust(&mut self, project: &Utf8Path) -> Result<Untrusted, TrustError> {
        let keys = candidate_keys(project);
        let mut removed = Vec::new();
        self.update(|trusted| {
            removed = trusted
                .iter()
                .filter(|entry| keys.iter().any(|key| key == *entry))
                .cloned()
                .collect();
            for entry in &removed {
                trusted.remove(entry);
            }
        })?;
        Ok(Untrusted {
            key: keys.into_iter().next().unwrap_or_default(),
            removed,
        })
    }

    /// Every trusted directory, sorted.
    pub fn list(&self) -> impl Iterator<Item = &str> {
        self.trusted.iter().map(String::as_str)
    }

    /// Re-read the store under its lock, apply `change`, and write it
    /// back atomically (only when something changed).
    fn update(&mut self, change: impl FnOnce(&mut BTreeSet<String>)) -> Result<(), TrustError> {
        let write_err = |source| TrustError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Utf8Path::new("."));
        // The store and its lock are files of the home: never written
        // outside it.
        if let Some(home) = dir.parent() {
            vak_prompt_loader::confine::home_path(home, &self.path)
                .map_err(|refusal| write_err(refusal.into()))?;
        }
        vak_prompt_loader::create_dirs(dir).map_err(write_err)?;
        let lock_path = dir.join("trust.toml.lock");
        let lock = vak_fs::lock_exclusive(&lock_path)?;
        let mut trusted = read_store(&self.path)?;
        let before = trusted.clone();
        change(&mut trusted);
        if trusted != before {
            self.save(&trusted)?;
        }
        self.trusted = trusted;
        drop(lock);
        Ok(())
    }

    /// Write the store whole ([`vak_fs::replace`]): a kill leaves the old
    /// list or the new one.
    fn save(&self, trusted: &BTreeSet<String>) -> Result<(), TrustError> {
        let body = toml::to_string(&StoreFile {
            trusted: trusted.clone(),
        })
        .map_err(|error| TrustError::Write {
            path: self.path.clone(),
            source: std::io::Error::other(error.to_string()),
        })?;
        vak_fs::replace(
            &self.path,
            |file| {
                file.write_all(b"# Project directories whose .vak/ prompt layers and config apply in full.\n# Edit with `vak trust DIR` and `vak untrust DIR`.\n")?;
                file.write_all(body.as_bytes())
            },
            || {},
        )?;
        Ok(())
    }
}

/// The trusted set on disk; empty when there is no file.
fn read_store(path: &Utf8Path) -> Result<BTreeSet<String>, TrustError> {
    let bytes = match read_plain(path, MAX_STORE_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(BTreeSet::new()),
        Err(
            Refusal::NotRegularFile(_)
            | Refusal::NotADirectory
            | Refusal::Dangling
            | Refusal::Outside { .. }
            | Refusal::InNestedRepository { .. },
        ) => {
            return Err(TrustError::NotRegularFile(path.to_owned()));
        }
        Err(Refusal::TooLarge { bytes, .. }) => {
            return Err(TrustError::TooLarge {
                path: path.to_owned(),
                bytes,
            });
        }
        Err(Refusal::Io(source)) => {
            return Err(TrustError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let text = String::from_utf8(bytes).map_err(|error| TrustError::Malformed {
        path: path.to_owned(),
        message: format!(
            "not valid UTF-8 at byte {}",
            error.utf8_error().valid_up_to()
        ),
    })?;
    let file: StoreFile = toml::from_str(&text).map_err(|error| TrustError::Malformed {
        path: path.to_owned(),
        message: error.message().to_owned(),
    })?;
    Ok(file.trusted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_round_trip_by_canonical_path() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let home = Utf8Path::from_path(home.path()).unwrap();
        let project_path = Utf8Path::from_path(project.path()).unwrap();
        let mut store = TrustStore::load(home).unwrap();
        assert_eq!(store.trust_of(project_path), Trust::Untrusted);
        store.trust(project_path).unwrap();
        let dotted = project_path.join(".");
        let reloaded = TrustStore::load(home).unwrap();
        assert_eq!(reloaded.trust_of(&dotted), Trust::Trusted);
        let mut store = reloaded;
        assert_eq!(
            store.untrust(project_path).unwrap().removed,
            [canonical(project_path).unwrap()]
        );
        assert_eq!(
            TrustStore::load(home).unwrap().trust_of(project_path),
            Trust::Untrusted
        );
    }

    #[test]
    fn untrust_of_a_deleted_project_by_any_path_that_named_it() {
        let base = tempfile::tempdir().unwrap();
        let base = Utf8PathBuf::from_path_buf(base.path().canonicalize().unwrap()).unwrap();
        let home = base.join("home");
        fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let spellings = [
            format!("{base}/real/../real/proj"),
            format!("{base}/real/proj/"),
            format!("{base}/link/proj"),
            format!("{base}/real/./proj//"),
        ];
        for spelling in spellings {
            let proj = base.join("real/proj");
            fs::create_dir_all(&proj).unwrap();
            let mut store = TrustStore::load(&home).unwrap();
            store.trust(&proj).unwrap();
            fs::remove_dir(&proj).unwrap();
            let done = store.untrust(Utf8Path::new(&spelling)).unwrap();
            assert_eq!(done.removed, [proj.to_string()], "{spelling}");
            fs::create_dir_all(&proj).unwrap();
            assert_eq!(
                TrustStore::load(&home).unwrap().trust_of(&proj),
                Trust::Untrusted,
                "{spelling}"
            );
            fs::remove_dir(&proj).unwrap();
        }
    }

    #[test]
    fn a_fifo_or_symlinked_store_is_refused_fast() {
        let home = tempfile::tempdir().unwrap();
        let home = Utf8Path::from_path(home.path()).unwrap();
        fs::create_dir_all(home.join(".vak")).unwrap();
        let store = home.join(".vak/trust.toml");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&store)
                .status()
                .unwrap()
                .success()
        );
        let error = TrustStore::load(home).unwrap_err();
        assert!(matches!(error, TrustError::NotRegularFile(_)), "{error}");
        fs::remove_file(&store).unwrap();
        fs::write(home.join("elsewhere.toml"), "trusted = []").unwrap();
        std::os::unix::fs::symlink(home.join("elsewhere.toml"), &store).unwrap();
        let error = TrustStore::load(home).unwrap_err();
        assert!(error.to_string().contains("trust.toml"), "{error}");
    }

    #[test]
    fn malformed_store_names_the_file() {
        let home = tempfile::tempdir().unwrap();
        let home = Utf8Path::from_path(home.path()).unwrap();
        fs::create_dir_all(home.join(".vak")).unwrap();
        fs::write(home.join(".vak/trust.toml"), "trusted = 3").unwrap();
        let error = TrustStore::load(home).unwrap_err().to_string();
        assert!(error.contains("trust.toml"), "{error}");
    }
}
