//! The content-addressed object store: `$VAK_HOME/.vak/objects/<sha256>`.
//!
//! An object's name is the sha256 of its bytes, so it is immutable by
//! construction: a write of a text already there is a no-op, and a read
//! re-hashes the bytes and refuses ([`HistoryError::Corrupt`]) an object
//! that was altered, rather than serve a text under a digest it does not
//! have. A write is a temporary file in the object directory, fsynced,
//! renamed into place, then the directory fsynced: a crash leaves the old
//! state or the new object, never a partial one under the final name.

use std::fs;
use std::io::Write as _;

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::Sha256Hex;
use vak_prompt_loader::confine::{ConfinedDir, ConfinedRoot, Refusal, read_bounded};

use vak_prompt_history::{
    HistoryError, MAX_OBJECT_BYTES, is_digest, object_digest, verified_object,
};

use super::{io_error, refusal_error};

/// The object store of one home.
#[derive(Debug, Clone)]
pub struct ObjectStore {
    home: Utf8PathBuf,
    dir: Utf8PathBuf,
}

/// Open (creating when `create`) a store directory under `home`, confined to
/// it: a `.vak` or store directory that is a symlink leading out of the
/// home is refused before anything is created there.
pub(crate) fn store_dir(
    home: &Utf8Path,
    dir: &Utf8Path,
    create: bool,
) -> Result<Option<ConfinedDir>, HistoryError> {
    // One rule for every file of the home: no directory on the way to the
    // store leads out of it.
    vak_prompt_loader::confine::home_path(home, dir).map_err(|refusal| HistoryError::Refused {
        path: refusal.path.clone(),
        why: refusal.to_string(),
    })?;
    if create {
        vak_prompt_loader::create_dirs(home).map_err(io_error("create the vak home", home))?;
    }
    let Some(root) = ConfinedRoot::new(home).map_err(io_error("open the vak home", home))? else {
        return Ok(None);
    };
    if create {
        let mut existing = dir;
        while fs::symlink_metadata(existing).is_err() {
            match existing.parent() {
                Some(parent) => existing = parent,
                None => break,
            }
        }
        let real = fs::canonicalize(existing).map_err(io_error("open", existing))?;
        if !real.starts_with(root.real()) {
            return Err(HistoryError::Refused {
                path: dir.to_owned(),
                why: format!(
                    "it leads outside the vak home (to `{}`)",
                    vak_prompt_blocks::Escaped(&real.to_string_lossy())
                ),
            });
        }
        vak_prompt_loader::create_dirs(dir).map_err(io_error("create the directory", dir))?;
    }
    ConfinedDir::open(dir, &root).map_err(|refusal| refusal_error(dir, refusal))
}

impl ObjectStore {
    /// The store of `home` (`home/.vak/objects`). Nothing is touched until
    /// a text is put or read.
    pub fn new(home: &Utf8Path) -> Self {
        ObjectStore {
            home: home.to_owned(),
            dir: home.join(".vak").join("objects"),
        }
    }

    /// The object directory.
    pub fn dir(&self) -> &Utf8Path {
        &self.dir
    }

    /// Keep `text`; returns its digest. Idempotent: a text already kept is
    /// not written again (an object found altered is replaced by the right
    /// bytes, which its name says exactly).
    ///
    /// # Errors
    ///
    /// [`HistoryError::TooLarge`] over [`MAX_OBJECT_BYTES`];
    /// [`HistoryError::Refused`] when the object's name is taken by a
    /// symlink, FIFO or device, or the directory leads out of the home;
    /// [`HistoryError::Io`].
    pub fn put(&self, text: &str) -> Result<Sha256Hex, HistoryError> {
        let digest = object_digest(text)?;
        let dir = store_dir(&self.home, &self.dir, true)?.ok_or_else(|| HistoryError::Io {
            action: "open the object directory",
            path: self.dir.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        let path = self.dir.join(&digest);
        match dir.open_regular_nofollow(&digest) {
            Ok(Some(file)) => {
                if let Ok(existing) = read_bounded(file, MAX_OBJECT_BYTES)
                    && existing == text.as_bytes()
                {
                    return Ok(digest);
                }
            }
            Ok(None) => {}
            Err(refusal) => return Err(refusal_error(&path, refusal)),
        }
        let (temp, mut file) = vak_prompt_loader::create_temp(&format!("{digest}.tmp"), |temp| {
            dir.create_new(temp, 0o444)
        })
        .map_err(io_error("create a temporary file for", &path))?;
        let written = (|| {
            file.write_all(text.as_bytes())
                .map_err(io_error("write a temporary file for", &path))?;
            file.sync_all()
                .map_err(io_error("sync a temporary file for", &path))?;
            dir.rename(&temp, &digest)
                .map_err(io_error("rename into place", &path))
        })();
        if let Err(error) = written {
            let _ = dir.unlink(&temp);
            return Err(error);
        }
        dir.as_file()
            .and_then(|handle| handle.sync_all())
            .map_err(io_error("sync the directory", &self.dir))?;
        Ok(digest)
    }

    /// The text kept under `digest`, verified against it.
    ///
    /// # Errors
    ///
    /// [`HistoryError::NotKept`] when there is no such object;
    /// [`HistoryError::Corrupt`] when its bytes do not hash to `digest`
    /// (never served); [`HistoryError::BadDigest`]; [`HistoryError::Refused`]
    /// for a symlink, FIFO or oversized object.
    pub fn get(&self, digest: &str) -> Result<String, HistoryError> {
        if !is_digest(digest) {
            return Err(HistoryError::BadDigest(digest.to_owned()));
        }
        let not_kept = || HistoryError::NotKept {
            digest: digest.to_owned(),
            dir: self.dir.clone(),
        };
        let Some(dir) = store_dir(&self.home, &self.dir, false)? else {
            return Err(not_kept());
        };
        let path = self.dir.join(digest);
        let file = match dir.open_regular_nofollow(digest) {
            Ok(Some(file)) => file,
            Ok(None) => return Err(not_kept()),
            Err(refusal) => return Err(refusal_error(&path, refusal)),
        };
        let bytes = read_bounded(file, MAX_OBJECT_BYTES).map_err(|refusal| match refusal {
            Refusal::TooLarge { .. } => HistoryError::Corrupt {
                digest: digest.to_owned(),
                path: path.clone(),
                actual: "more bytes than any kept text".to_owned(),
            },
            other => refusal_error(&path, other),
        })?;
        verified_object(digest, bytes, |actual| HistoryError::Corrupt {
            digest: digest.to_owned(),
            path: path.clone(),
            actual,
        })
    }

    /// The digest of every object in the directory, sorted (temporary files
    /// and other names are not objects). No directory is no objects.
    ///
    /// # Errors
    ///
    /// [`HistoryError::Refused`] when the directory leads out of the home;
    /// [`HistoryError::Io`].
    pub fn digests(&self) -> Result<Vec<Sha256Hex>, HistoryError> {
        if store_dir(&self.home, &self.dir, false)?.is_none() {
            return Ok(Vec::new());
        }
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(io_error("list", &self.dir)(error)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_error("list", &self.dir))?;
            if let Some(name) = entry.file_name().to_str()
                && is_digest(name)
            {
                out.push(name.to_owned());
            }
        }
        out.sort();
        Ok(out)
    }

    /// The text under `digest`, `None` when it is not kept; other errors
    /// (an altered object) stay errors.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get), except [`HistoryError::NotKept`].
    pub fn find(&self, digest: &str) -> Result<Option<String>, HistoryError> {
        match self.get(digest) {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.is_not_kept() => Ok(None),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::temp_home as home;
    use proptest::prelude::*;
    use vak_prompt_blocks::sha256_hex;

    #[test]
    fn put_then_get_and_put_again_is_a_no_op() {
        let (_keep, home) = home();
        let store = ObjectStore::new(&home);
        let digest = store.put("- be kind\n").unwrap();
        assert_eq!(digest, sha256_hex("- be kind\n"));
        assert_eq!(store.put("- be kind\n").unwrap(), digest);
        assert_eq!(store.get(&digest).unwrap(), "- be kind\n");
        let names: Vec<_> = fs::read_dir(store.dir()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn an_altered_object_is_never_served() {
        let (_keep, home) = home();
        let store = ObjectStore::new(&home);
        let digest = store.put("original").unwrap();
        let path = store.dir().join(&digest);
        fs::remove_file(&path).unwrap();
        fs::write(&path, "tampered").unwrap();
        let error = store.get(&digest).unwrap_err();
        assert!(matches!(error, HistoryError::Corrupt { .. }), "{error}");
        assert!(error.to_string().contains(&digest), "{error}");
        // A put of the right text repairs it.
        store.put("original").unwrap();
        assert_eq!(store.get(&digest).unwrap(), "original");
    }

    #[test]
    fn missing_is_not_kept_and_a_bad_digest_is_refused() {
        let (_keep, home) = home();
        let store = ObjectStore::new(&home);
        let digest = sha256_hex("never saved");
        let error = store.get(&digest).unwrap_err();
        assert!(error.is_not_kept(), "{error}");
        assert!(error.to_string().starts_with("text not kept"), "{error}");
        assert!(store.find(&digest).unwrap().is_none());
        assert!(matches!(
            store.get("../etc/passwd"),
            Err(HistoryError::BadDigest(_))
        ));
    }

    #[test]
    fn a_symlink_or_fifo_object_is_refused() {
        let (_keep, home) = home();
        let store = ObjectStore::new(&home);
        store.put("x").unwrap();
        let secret = home.join("secret");
        fs::write(&secret, "secret").unwrap();
        let digest = sha256_hex("secret");
        std::os::unix::fs::symlink(&secret, store.dir().join(&digest)).unwrap();
        assert!(matches!(
            store.get(&digest),
            Err(HistoryError::Refused { .. })
        ));
        let fifo_digest = sha256_hex("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(store.dir().join(&fifo_digest))
            .status()
            .unwrap();
        assert!(status.success());
        assert!(matches!(
            store.get(&fifo_digest),
            Err(HistoryError::Refused { .. })
        ));
        assert!(matches!(
            store.put("fifo"),
            Err(HistoryError::Refused { .. })
        ));
    }

    #[test]
    fn a_store_leading_out_of_the_home_is_refused() {
        let (_keep, base) = home();
        let home = base.join("home");
        let elsewhere = base.join("elsewhere");
        fs::create_dir_all(&home).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, home.join(".vak")).unwrap();
        let store = ObjectStore::new(&home);
        assert!(matches!(store.put("x"), Err(HistoryError::Refused { .. })));
        assert!(fs::read_dir(&elsewhere).unwrap().next().is_none());
    }

    #[test]
    fn oversize_is_refused() {
        let (_keep, home) = home();
        let text = "a".repeat(usize::try_from(MAX_OBJECT_BYTES).unwrap() + 1);
        assert!(matches!(
            ObjectStore::new(&home).put(&text),
            Err(HistoryError::TooLarge { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn every_text_round_trips_under_its_digest(text in "\\PC{0,200}") {
            let (_keep, home) = home();
            let store = ObjectStore::new(&home);
            let digest = store.put(&text).unwrap();
            prop_assert_eq!(&digest, &sha256_hex(&text));
            prop_assert_eq!(store.get(&digest).unwrap(), text);
        }
    }
}
