use std::collections::BTreeSet;
use std::fs;
use std::io::Write;

use camino::{Utf8Path, Utf8PathBuf};
use serde::{Deserialize, Serialize};

use crate::TrustError;
use crate::policy::Trust;

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    #[serde(default)]
    trusted: BTreeSet<String>,
}

/// The user's list of trusted project directories,
/// `$VAK_HOME/.vak/trust.toml`, keyed by canonical path. A project not
/// listed is untrusted.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: Utf8PathBuf,
    trusted: BTreeSet<String>,
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

impl TrustStore {
    /// The store's path under `home`.
    pub fn path_in(home: &Utf8Path) -> Utf8PathBuf {
        home.join(".vak").join("trust.toml")
    }

    /// Load the store under `home`; a missing file is an empty store.
    pub fn load(home: &Utf8Path) -> Result<Self, TrustError> {
        let path = Self::path_in(home);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(TrustError::Read { path, source }),
        };
        let file: StoreFile = toml::from_str(&text).map_err(|error| TrustError::Malformed {
            path: path.clone(),
            message: error.message().to_owned(),
        })?;
        Ok(TrustStore {
            path,
            trusted: file.trusted,
        })
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
    pub fn trust(&mut self, project: &Utf8Path) -> Result<String, TrustError> {
        let key = canonical(project)?;
        self.trusted.insert(key.clone());
        self.save()?;
        Ok(key)
    }

    /// Stop trusting `project`; returns its canonical path and whether it
    /// was listed.
    pub fn untrust(&mut self, project: &Utf8Path) -> Result<(String, bool), TrustError> {
        let key = canonical(project).unwrap_or_else(|_| project.to_string());
        let was = self.trusted.remove(&key);
        self.save()?;
        Ok((key, was))
    }

    /// Every trusted directory, sorted.
    pub fn list(&self) -> impl Iterator<Item = &str> {
        self.trusted.iter().map(String::as_str)
    }

    /// Write the store atomically: a temporary file beside it, fsynced,
    /// renamed over the old one.
    fn save(&self) -> Result<(), TrustError> {
        let write_err = |source| TrustError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Utf8Path::new("."));
        fs::create_dir_all(dir).map_err(write_err)?;
        let body = toml::to_string(&StoreFile {
            trusted: self.trusted.clone(),
        })
        .map_err(|error| write_err(std::io::Error::other(error.to_string())))?;
        let tmp = dir.join(format!(".trust.toml.{}.tmp", std::process::id()));
        let mut file = fs::File::create(&tmp).map_err(write_err)?;
        file.write_all(b"# Project directories whose .vak/ prompt layers and config apply in full.\n# Edit with `vak trust DIR` and `vak untrust DIR`.\n")
            .and_then(|()| file.write_all(body.as_bytes()))
            .and_then(|()| file.sync_all())
            .map_err(write_err)?;
        fs::rename(&tmp, &self.path).map_err(write_err)?;
        Ok(())
    }
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
        assert!(store.untrust(project_path).unwrap().1);
        assert_eq!(
            TrustStore::load(home).unwrap().trust_of(project_path),
            Trust::Untrusted
        );
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
