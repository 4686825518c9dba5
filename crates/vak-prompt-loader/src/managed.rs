//! The managed layer: `/etc/vak/prompts/`, the machine administrator's
//! floor, and the one owner of its formats — its `config.toml`
//! (`[prompts] locked`, `managed_keys`, `max_tokens`), the detached
//! signatures beside its files (`<file>.sig`), the signing-key file of
//! `vak managed sign`, and the home's pin of the keys it was first seen with
//! (`$VAK_HOME/.vak/managed-keys.toml`).
//!
//! Unlike every other layer, a managed input that is refused stops the
//! resolution ([`ManagedError`]): a prompt missing the floor its
//! administrator set must never reach a session. vak never writes under the
//! managed directory.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use camino::{Utf8Path, Utf8PathBuf};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use thiserror::Error;
use vak_prompt_blocks::{Block, Escaped, Provenance, SurfaceKind};

use crate::confine::{ConfinedDir, OpenedDirs, read_bounded, read_plain};
use crate::safe_read::{MAX_FILE_BYTES, ReadRefusal, utf8};
use crate::write::{SaveError, remove_checked, save_atomic};

/// Where the managed layer lives on every machine.
pub const SYSTEM_MANAGED_DIR: &str = "/etc/vak/prompts";

/// The environment variable that moves the managed layer, honoured only
/// when [`SYSTEM_MANAGED_DIR`] does not exist (so a user cannot point vak
/// away from the floor root set).
pub const MANAGED_DIR_ENV: &str = "VAK_MANAGED_DIR";

/// The largest `.sig` file read: a signature is 88 characters of base64.
pub const MAX_SIGNATURE_BYTES: u64 = 1024;

/// The home file that pins the managed keys first seen, as ssh pins host
/// keys: `$VAK_HOME/.vak/managed-keys.toml`.
pub const PIN_FILE: &str = "managed-keys.toml";

/// The prefix of a managed key's text form.
const KEY_PREFIX: &str = "ed25519:";

/// The blocks a managed config may lock: the ones a narrower layer could
/// otherwise replace. Guardrails and surface notes only accumulate, so the
/// managed text of those is already kept by every chain.
pub const LOCKABLE: [Block; 2] = [Block::Identity, Block::OperatingRules];

/// The keys the managed config's `[prompts]` table may hold; any other key
/// (a typo of one of these, most likely) refuses the config.
const MANAGED_KEYS: [&str; 3] = ["locked", "managed_keys", "max_tokens"];

/// Why the managed layer cannot be used. Each is a sentence naming the file
/// or key at fault and what to do; any of them stops the resolution.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ManagedError {
    /// The directory or a file in it may be written by someone other than
    /// its owner.
    #[error(
        "managed layer `{}` is refused: its mode {mode} lets {who} write it; the floor must be writable by its owner alone (`chmod go-w {}`)",
        Escaped(.path.as_str()), Escaped(.path.as_str())
    )]
    WritableByOthers {
        /// The directory or file.
        path: Utf8PathBuf,
        /// Its permission bits, as `0777`.
        mode: String,
        /// "group", "others" or "group and others".
        who: &'static str,
    },
    /// The directory or a file in it is owned by someone who may not set
    /// the floor.
    #[error(
        "managed layer `{}` is refused: it is owned by uid {uid}, not by root{}",
        Escaped(.path.as_str()),
        if *.from_env { " or by you (the owner `VAK_MANAGED_DIR` may have)" } else { "" }
    )]
    Owner {
        /// The directory or file.
        path: Utf8PathBuf,
        /// Its owner.
        uid: u32,
        /// Whether the layer was found through `VAK_MANAGED_DIR`.
        from_env: bool,
    },
    /// A file or directory of the managed layer could not be read safely.
    #[error("managed layer file `{}` is refused: it {reason}", Escaped(.path.as_str()))]
    Unreadable {
        /// The file or directory.
        path: Utf8PathBuf,
        /// Why, as a sentence fragment.
        reason: String,
    },
    /// The managed `config.toml` is not what it must be.
    #[error("managed config `{}` is refused: {reason}", Escaped(.path.as_str()))]
    Config {
        /// The config file.
        path: Utf8PathBuf,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// A managed file has no `.sig` beside it though keys are set.
    #[error(
        "managed layer file `{}` is refused: it is not signed, and `managed_keys` requires a signature in `{}.sig` (made with `vak managed sign --key FILE {}`)",
        Escaped(.path.as_str()), Escaped(.path.as_str()), Escaped(.path.as_str())
    )]
    Unsigned {
        /// The unsigned file.
        path: Utf8PathBuf,
    },
    /// A managed file's signature is unreadable or verifies with no listed
    /// key.
    #[error("managed layer file `{}` is refused: {reason}", Escaped(.path.as_str()))]
    BadSignature {
        /// The signed file.
        path: Utf8PathBuf,
        /// What is wrong with its signature.
        reason: String,
    },
    /// The managed keys differ from the ones this home pinned.
    #[error(
        "managed layer `{}` is refused: its `managed_keys` ({}) differ from the keys this home pinned when it first saw them ({}) in `{}`; if the administrator changed them on purpose, run `vak managed unpin`",
        Escaped(.dir.as_str()), list(.now), list(.pinned), Escaped(.pin_file.as_str())
    )]
    KeysChanged {
        /// The managed directory.
        dir: Utf8PathBuf,
        /// The keys pinned.
        pinned: Vec<String>,
        /// The keys the managed config lists now (empty: dropped).
        now: Vec<String>,
        /// The pin file.
        pin_file: Utf8PathBuf,
    },
    /// The pin file cannot be read or written.
    #[error("managed key pin `{}` cannot be used: {reason}", Escaped(.path.as_str()))]
    Pin {
        /// The pin file.
        path: Utf8PathBuf,
        /// Why.
        reason: String,
    },
    /// A signing-key file for `vak managed sign` is not a key.
    #[error(
        "signing key `{}` is refused: {reason}; a key file holds one line, the base64 of a 32-byte ed25519 seed (as `vak managed keygen` writes it)",
        Escaped(.path.as_str())
    )]
    SigningKey {
        /// The key file.
        path: Utf8PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `vak managed` was asked about a managed layer that is not there.
    #[error(
        "there is no managed layer: neither `{SYSTEM_MANAGED_DIR}` nor `$VAK_MANAGED_DIR` is a directory"
    )]
    Absent,
}

fn list(keys: &[String]) -> String {
    if keys.is_empty() {
        "none".to_owned()
    } else {
        keys.iter()
            .map(|k| format!("`{}`", Escaped(k)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Why a confined read refused, as a fragment after "it": the loader's
/// words, except that a link leads out of the managed directory (not a
/// home or project).
fn refusal_reason(refusal: crate::confine::Refusal) -> String {
    match ReadRefusal::from(refusal) {
        ReadRefusal::SymlinkOutside { target } => format!(
            "is, or is under, a symlink leading outside the managed directory (to `{}`)",
            Escaped(target.as_str())
        ),
        other => other.to_string(),
    }
}

/// Where the managed layer is looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedLocation {
    /// The directory.
    pub dir: Utf8PathBuf,
    /// Whether it came from `VAK_MANAGED_DIR` (then its owner may be the
    /// current user as well as root).
    pub from_env: bool,
}

impl ManagedLocation {
    /// `/etc/vak/prompts` when it exists (as anything: a file there is
    /// refused, not passed over), else `$VAK_MANAGED_DIR` when set, else
    /// none.
    pub fn find() -> Option<ManagedLocation> {
        if std::fs::symlink_metadata(SYSTEM_MANAGED_DIR).is_ok() {
            return Some(ManagedLocation {
                dir: Utf8PathBuf::from(SYSTEM_MANAGED_DIR),
                from_env: false,
            });
        }
        let dir = std::env::var(MANAGED_DIR_ENV).ok()?;
        (!dir.is_empty()).then(|| ManagedLocation {
            dir: Utf8PathBuf::from(dir),
            from_env: true,
        })
    }
}

/// One block file of the managed layer, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedFile {
    /// The block it supplies.
    pub block: Block,
    /// `None` for the layer's own directory; the surface for
    /// `surface/<kind>/`.
    pub surface: Option<SurfaceKind>,
    /// Its provenance: the managed tier, its path, the key that signed it.
    pub provenance: Arc<Provenance>,
    /// Its text, shared with every chain that takes it.
    pub text: vak_prompt_blocks::SharedText,
}

/// The managed layer as read: its settings and every block file, each
/// checked (mode, owner, confinement, signature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedLayer {
    /// The managed directory.
    pub dir: Utf8PathBuf,
    /// Its `config.toml`, when present.
    pub config: Option<Utf8PathBuf>,
    /// The blocks `[prompts] locked` names.
    pub locked: Vec<Block>,
    /// `[prompts] managed_keys`, as written (`ed25519:<base64>`).
    pub keys: Vec<String>,
    /// `[prompts] max_tokens`: a ceiling no narrower config raises.
    pub max_tokens: Option<i64>,
    /// Every block file present, the directory's own first, then each
    /// surface's in [`SurfaceKind::ALL`] order.
    pub files: Vec<ManagedFile>,
    /// Who signed the config, when keys are set.
    pub config_signed_by: Option<String>,
}

impl ManagedLayer {
    /// Whether `block` is locked to the managed text.
    pub fn locks(&self, block: Block) -> bool {
        self.locked.contains(&block)
    }
}

/// One file `vak managed verify` looked at, and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedFile {
    /// The file.
    pub path: Utf8PathBuf,
    /// The key that signed it (`None` when the layer has no keys), or why
    /// it is refused.
    pub outcome: Result<Option<String>, ManagedError>,
}

/// What `vak managed verify` found: the layer's directory and every file,
/// each with its outcome, and the pin check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// The managed directory.
    pub dir: Utf8PathBuf,
    /// The keys listed (empty: signatures are not required); `None` when
    /// the config that lists them is refused.
    pub keys: Option<Vec<String>>,
    /// Every file, config first.
    pub files: Vec<VerifiedFile>,
    /// A refusal of the layer as a whole (its directory's mode, the pin).
    pub layer: Option<ManagedError>,
}

impl Verification {
    /// Whether anything was refused.
    pub fn refused(&self) -> bool {
        self.layer.is_some() || self.files.iter().any(|f| f.outcome.is_err())
    }
}

/// The managed layer as every chain of a snapshot sees it, read once:
/// `Ok(None)` when there is none. Pins the keys in `home` on first sight.
///
/// # Errors
///
/// Any refusal of the layer ([`ManagedError`]): the resolution stops.
pub fn load_managed(home: &Utf8Path) -> Result<Option<Arc<ManagedLayer>>, ManagedError> {
    match ManagedLocation::find() {
        Some(location) => load_at(location, home),
        None => Ok(None),
    }
}

/// [`load_managed`] of the layer at `location`.
fn load_at(
    location: ManagedLocation,
    home: &Utf8Path,
) -> Result<Option<Arc<ManagedLayer>>, ManagedError> {
    let mut reader = match ManagedReader::open(&location)? {
        Some(reader) => reader,
        None => return Ok(None),
    };
    let settings = reader.settings()?;
    check_pin(home, &location.dir, &settings.keys, true)?;
    let mut files = Vec::new();
    for entry in reader.block_files(&settings) {
        files.push(entry.outcome?);
    }
    let layer = ManagedLayer {
        dir: location.dir,
        config: settings.config,
        locked: settings.locked,
        keys: settings.keys.iter().map(|(id, _)| id.clone()).collect(),
        max_tokens: settings.max_tokens,
        files,
        config_signed_by: settings.config_signed_by,
    };
    tracing::debug!(dir = %layer.dir, files = layer.files.len(), "managed layer read");
    Ok(Some(Arc::new(layer)))
}

/// Check every file of the managed layer, reporting each (`vak managed
/// verify`). Never writes the pin.
///
/// # Errors
///
/// [`ManagedError::Absent`] when there is no managed layer.
pub fn verify_managed(home: &Utf8Path) -> Result<Verification, ManagedError> {
    let location = ManagedLocation::find().ok_or(ManagedError::Absent)?;
    let mut verification = Verification {
        dir: location.dir.clone(),
        keys: None,
        files: Vec::new(),
        layer: None,
    };
    let mut reader = match ManagedReader::open(&location) {
        Ok(Some(reader)) => reader,
        Ok(None) => return Err(ManagedError::Absent),
        Err(error) => {
            verification.layer = Some(error);
            return Ok(verification);
        }
    };
    let settings = match reader.settings() {
        Ok(settings) => settings,
        Err(error) => {
            let path = location.dir.join("config.toml");
            verification.files.push(VerifiedFile {
                path,
                outcome: Err(error),
            });
            return Ok(verification);
        }
    };
    verification.keys = Some(settings.keys.iter().map(|(id, _)| id.clone()).collect());
    if let Some(config) = &settings.config {
        verification.files.push(VerifiedFile {
            path: config.clone(),
            outcome: Ok(settings.config_signed_by.clone()),
        });
    }
    if let Err(error) = check_pin(home, &location.dir, &settings.keys, false) {
        verification.layer = Some(error);
    }
    for entry in reader.block_files(&settings) {
        verification.files.push(VerifiedFile {
            path: entry.path,
            outcome: entry.outcome.map(|f| f.provenance.signed_by.clone()),
        });
    }
    Ok(verification)
}

/// Forget the keys `home` pinned for the managed layer (`vak managed
/// unpin`): the next resolution pins the keys it then finds. Answers the
/// keys forgotten (empty: none were pinned).
///
/// # Errors
///
/// [`ManagedError::Pin`] when the pin file cannot be read or rewritten.
pub fn unpin_managed(home: &Utf8Path) -> Result<Vec<String>, ManagedError> {
    let dir = ManagedLocation::find()
        .map(|l| l.dir)
        .ok_or(ManagedError::Absent)?;
    let path = pin_path(home);
    let mut pins = read_pins(&path)?;
    let Some(forgotten) = pins.remove(dir.as_str()) else {
        return Ok(Vec::new());
    };
    let result = if pins.is_empty() {
        remove_checked(&path, home, None).map(|_| ())
    } else {
        save_atomic(&path, home, &pins.to_string(), None).map(|_| ())
    };
    result.map_err(|e: SaveError| ManagedError::Pin {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(keys_of(&forgotten))
}

/// The home's pin file.
pub fn pin_path(home: &Utf8Path) -> Utf8PathBuf {
    home.join(".vak").join(PIN_FILE)
}

/// The keys `home` pinned for the managed directory `dir`, if any.
fn keys_of(entry: &toml::Value) -> Vec<String> {
    entry
        .get("keys")
        .and_then(toml::Value::as_array)
        .map(|keys| {
            keys.iter()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn read_pins(path: &Utf8Path) -> Result<toml::Table, ManagedError> {
    let pin_error = |reason: String| ManagedError::Pin {
        path: path.to_owned(),
        reason,
    };
    let Some(bytes) = read_plain(path, MAX_FILE_BYTES)
        .map_err(|r| pin_error(ReadRefusal::from(r).to_string()))?
    else {
        return Ok(toml::Table::new());
    };
    let text = utf8(bytes).map_err(|r| pin_error(r.to_string()))?;
    text.parse::<toml::Table>()
        .map_err(|e| pin_error(format!("it is not valid TOML ({})", e.message())))
}

/// Compare `keys` with the ones `home` pinned for `dir`; pin them on first
/// sight when `write` (a layer with no keys pins nothing).
fn check_pin(
    home: &Utf8Path,
    dir: &Utf8Path,
    keys: &[(String, VerifyingKey)],
    write: bool,
) -> Result<(), ManagedError> {
    let path = pin_path(home);
    let mut pins = read_pins(&path)?;
    let now: BTreeSet<String> = keys.iter().map(|(id, _)| id.clone()).collect();
    match pins.get(dir.as_str()) {
        Some(entry) => {
            let pinned: BTreeSet<String> = keys_of(entry).into_iter().collect();
            if pinned != now {
                return Err(ManagedError::KeysChanged {
                    dir: dir.to_owned(),
                    pinned: pinned.into_iter().collect(),
                    now: now.into_iter().collect(),
                    pin_file: path,
                });
            }
            Ok(())
        }
        None if now.is_empty() || !write => Ok(()),
        None => {
            let mut entry = toml::Table::new();
            entry.insert(
                "keys".to_owned(),
                toml::Value::Array(now.iter().cloned().map(toml::Value::String).collect()),
            );
            pins.insert(dir.as_str().to_owned(), toml::Value::Table(entry));
            // Pinning is what makes a later change of keys visible; a home
            // that cannot be written still verifies against the config.
            match save_atomic(&path, home, &pins.to_string(), None) {
                Ok(_) => tracing::info!(%dir, pin = %path, "managed keys pinned"),
                Err(error) => {
                    tracing::warn!(%dir, pin = %path, %error, "managed keys could not be pinned")
                }
            }
            Ok(())
        }
    }
}

/// The settings of the managed config.
struct Settings {
    config: Option<Utf8PathBuf>,
    locked: Vec<Block>,
    keys: Vec<(String, VerifyingKey)>,
    max_tokens: Option<i64>,
    config_signed_by: Option<String>,
}

/// One block file's read.
struct Entry {
    path: Utf8PathBuf,
    outcome: Result<ManagedFile, ManagedError>,
}

/// Reads the managed directory through the loader's confined reader,
/// checking mode and owner of every directory and file it opens.
struct ManagedReader {
    dirs: OpenedDirs,
    location: ManagedLocation,
    /// The current user, who may own a `VAK_MANAGED_DIR`.
    uid: u32,
}

impl ManagedReader {
    fn open(location: &ManagedLocation) -> Result<Option<ManagedReader>, ManagedError> {
        let dir = &location.dir;
        // A relative `VAK_MANAGED_DIR` would be found from the working
        // directory: inside a cloned project, whose files are the user's
        // own and so pass the owner check, the project would set the floor.
        if dir.is_relative() {
            return Err(ManagedError::Unreadable {
                path: dir.clone(),
                reason: format!(
                    "is a relative path, which would name another directory from each working directory; set `{MANAGED_DIR_ENV}` to an absolute path"
                ),
            });
        }
        let dirs = OpenedDirs::open(dir).map_err(|e| ManagedError::Unreadable {
            path: dir.clone(),
            reason: format!("cannot be opened ({e})"),
        })?;
        let Some(dirs) = dirs else { return Ok(None) };
        let uid = rustix::process::getuid().as_raw();
        let mut reader = ManagedReader {
            dirs,
            location: location.clone(),
            uid,
        };
        // The root itself: a directory, owned and writable as the floor
        // must be.
        match reader.dir(dir)? {
            Some(_) => Ok(Some(reader)),
            None => Ok(None),
        }
    }

    /// Judge the mode and owner of what `metadata` describes at `path`.
    fn judge(&self, path: &Utf8Path, metadata: &std::fs::Metadata) -> Result<(), ManagedError> {
        let mode = metadata.mode() & 0o7777;
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => Some("group and others"),
            (true, false) => Some("group"),
            (false, true) => Some("others"),
            (false, false) => None,
        };
        if let Some(who) = who {
            return Err(ManagedError::WritableByOthers {
                path: path.to_owned(),
                mode: format!("{mode:04o}"),
                who,
            });
        }
        let owner = metadata.uid();
        if owner != 0 && !(self.location.from_env && owner == self.uid) {
            return Err(ManagedError::Owner {
                path: path.to_owned(),
                uid: owner,
                from_env: self.location.from_env,
            });
        }
        Ok(())
    }

    /// Open `dir` (the root or below it), judged. `Ok(None)` when absent.
    fn dir(&mut self, dir: &Utf8Path) -> Result<Option<std::rc::Rc<ConfinedDir>>, ManagedError> {
        let opened = self.dirs.dir(dir).map_err(|r| ManagedError::Unreadable {
            path: dir.to_owned(),
            reason: refusal_reason(r),
        })?;
        let Some(opened) = opened else {
            return Ok(None);
        };
        let metadata =
            opened
                .as_file()
                .and_then(|f| f.metadata())
                .map_err(|e| ManagedError::Unreadable {
                    path: dir.to_owned(),
                    reason: format!("cannot be examined ({e})"),
                })?;
        self.judge(dir, &metadata)?;
        Ok(Some(opened))
    }

    /// Read `name` in `dir` as a hostile file bounded by `limit`: confined
    /// (a symlink out of the managed directory is refused), a regular file,
    /// never blocking, its mode and owner judged. `Ok(None)` when absent.
    fn read(
        &mut self,
        dir: &ConfinedDir,
        name: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, ManagedError> {
        let path = dir.path().join(name);
        let unreadable = |reason: String| ManagedError::Unreadable {
            path: path.clone(),
            reason,
        };
        let file = dir
            .open_file(name, self.dirs.root())
            .map_err(|r| unreadable(refusal_reason(r)))?;
        let Some(file) = file else { return Ok(None) };
        let metadata = file
            .metadata()
            .map_err(|e| unreadable(format!("cannot be examined ({e})")))?;
        self.judge(&path, &metadata)?;
        read_bounded(file, limit)
            .map(Some)
            .map_err(|r| unreadable(refusal_reason(r)))
    }

    /// Read and check the config, verifying its own signature against the
    /// keys it lists.
    fn settings(&mut self) -> Result<Settings, ManagedError> {
        let root_path = self.location.dir.clone();
        let Some(root) = self.dir(&root_path)? else {
            return Err(ManagedError::Absent);
        };
        let path = root_path.join("config.toml");
        let Some(bytes) = self.read(&root, "config.toml", MAX_FILE_BYTES)? else {
            return Ok(Settings {
                config: None,
                locked: Vec::new(),
                keys: Vec::new(),
                max_tokens: None,
                config_signed_by: None,
            });
        };
        let config_error = |reason: String| ManagedError::Config {
            path: path.clone(),
            reason,
        };
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| config_error(format!("it is not UTF-8 at byte {}", e.valid_up_to())))?;
        let table = crate::config_toml::parse_table(text)
            .map_err(|e| config_error(format!("it is not valid TOML ({})", e.message())))?;
        let prompts = match table.get("prompts") {
            None => None,
            Some(toml::Value::Table(prompts)) => Some(prompts),
            Some(_) => return Err(config_error("`prompts` is not a table".to_owned())),
        };
        // A misspelt key (`lock`, `[prompt]`) would leave the block the
        // administrator meant to lock open to every narrower layer, with
        // nothing said: the floor fails closed on a key it does not know.
        let unknown = table
            .keys()
            .find(|key| key.as_str() != "prompts")
            .map(|key| Escaped(key).to_string())
            .or_else(|| {
                prompts?
                    .keys()
                    .find(|key| !MANAGED_KEYS.contains(&key.as_str()))
                    .map(|key| format!("prompts.{}", Escaped(key)))
            });
        if let Some(key) = unknown {
            return Err(config_error(format!(
                "`{key}` is not a setting of the managed config, which holds only `[prompts]` with `locked`, `managed_keys` and `max_tokens` (a misspelt key would leave the floor other than its administrator meant)"
            )));
        }
        let strings = |key: &str| -> Result<Vec<String>, ManagedError> {
            match prompts.and_then(|p| p.get(key)) {
                None => Ok(Vec::new()),
                Some(toml::Value::Array(items)) => items
                    .iter()
                    .map(|item| {
                        item.as_str().map(str::to_owned).ok_or_else(|| {
                            config_error(format!("`prompts.{key}` is not a list of strings"))
                        })
                    })
                    .collect(),
                Some(_) => Err(config_error(format!(
                    "`prompts.{key}` is not a list of strings"
                ))),
            }
        };
        let mut locked = Vec::new();
        for name in strings("locked")? {
            match name.parse::<Block>() {
                Ok(block) if LOCKABLE.contains(&block) => {
                    if !locked.contains(&block) {
                        locked.push(block);
                    }
                }
                _ => {
                    return Err(config_error(format!(
                        "`prompts.locked` names `{}`, which cannot be locked; only `identity` and `operating-rules` can (guardrails and surface notes are always kept)",
                        Escaped(&name)
                    )));
                }
            }
        }
        let mut keys = Vec::new();
        for text in strings("managed_keys")? {
            let key = parse_public_key(&text).map_err(|reason| {
                config_error(format!(
                    "`prompts.managed_keys` has `{}`, which {reason}",
                    Escaped(&text)
                ))
            })?;
            if !keys.iter().any(|(id, _)| *id == text) {
                keys.push((text, key));
            }
        }
        let max_tokens = match prompts.and_then(|p| p.get("max_tokens")) {
            None => None,
            Some(toml::Value::Integer(n)) if *n >= 1 => Some(*n),
            Some(_) => {
                return Err(config_error(
                    "`prompts.max_tokens` is not a positive integer".to_owned(),
                ));
            }
        };
        // The keys are in the config they sign: it must verify against them,
        // and the home's pin (checked next) catches a config whose keys were
        // swapped along with its signature.
        let config_signed_by = self.signature(&root, "config.toml", &bytes, &keys)?;
        Ok(Settings {
            config: Some(path),
            locked,
            keys,
            max_tokens,
            config_signed_by,
        })
    }

    /// The key among `keys` whose signature `<name>.sig` is of `bytes`;
    /// `None` when no key is listed.
    fn signature(
        &mut self,
        dir: &ConfinedDir,
        name: &str,
        bytes: &[u8],
        keys: &[(String, VerifyingKey)],
    ) -> Result<Option<String>, ManagedError> {
        if keys.is_empty() {
            return Ok(None);
        }
        let path = dir.path().join(name);
        let sig_name = format!("{name}.sig");
        let sig = self.read(dir, &sig_name, MAX_SIGNATURE_BYTES)?;
        let Some(sig) = sig else {
            return Err(ManagedError::Unsigned { path });
        };
        let bad = |reason: &str| ManagedError::BadSignature {
            path: path.clone(),
            reason: reason.to_owned(),
        };
        let signature = std::str::from_utf8(&sig)
            .ok()
            .and_then(|s| decode_base64(s).ok())
            .and_then(|raw| <[u8; 64]>::try_from(raw.as_slice()).ok())
            .map(|raw| Signature::from_bytes(&raw))
            .ok_or_else(|| {
                bad(&format!(
                    "its signature `{}` is not the base64 of a 64-byte ed25519 signature",
                    Escaped(dir.path().join(&sig_name).as_str())
                ))
            })?;
        keys.iter()
            .find(|(_, key)| key.verify_strict(bytes, &signature).is_ok())
            .map(|(id, _)| Some(id.clone()))
            .ok_or_else(|| {
                bad(&format!(
                    "its signature `{}` does not verify with any key in `managed_keys`: the file was changed after it was signed, or signed by another key",
                    Escaped(dir.path().join(&sig_name).as_str())
                ))
            })
    }

    /// Every block file of the layer: the directory's own, then each
    /// surface's, each read, judged and verified.
    fn block_files(&mut self, settings: &Settings) -> Vec<Entry> {
        let mut out = Vec::new();
        let root = self.location.dir.clone();
        let mut dirs: Vec<(Utf8PathBuf, Option<SurfaceKind>)> = vec![(root.clone(), None)];
        let surface = root.join("surface");
        match self.dir(&surface) {
            Ok(Some(_)) => dirs.extend(
                SurfaceKind::ALL
                    .iter()
                    .map(|kind| (surface.join(kind.to_string()), Some(*kind))),
            ),
            Ok(None) => {}
            Err(error) => out.push(Entry {
                path: surface,
                outcome: Err(error),
            }),
        }
        for (dir, kind) in dirs {
            let opened = match self.dir(&dir) {
                Ok(Some(opened)) => opened,
                Ok(None) => continue,
                Err(error) => {
                    out.push(Entry {
                        path: dir,
                        outcome: Err(error),
                    });
                    continue;
                }
            };
            for block in Block::EDITABLE {
                let Some(name) = block.file_name() else {
                    continue;
                };
                let path = dir.join(name);
                let outcome = self.block_file(&opened, name, block, kind, &settings.keys);
                match outcome {
                    Ok(None) => {}
                    Ok(Some(file)) => out.push(Entry {
                        path,
                        outcome: Ok(file),
                    }),
                    Err(error) => out.push(Entry {
                        path,
                        outcome: Err(error),
                    }),
                }
            }
        }
        out
    }

    fn block_file(
        &mut self,
        dir: &ConfinedDir,
        name: &str,
        block: Block,
        surface: Option<SurfaceKind>,
        keys: &[(String, VerifyingKey)],
    ) -> Result<Option<ManagedFile>, ManagedError> {
        let path = dir.path().join(name);
        let Some(bytes) = self.read(dir, name, MAX_FILE_BYTES)? else {
            return Ok(None);
        };
        let signed_by = self.signature(dir, name, &bytes, keys)?;
        let text = utf8(bytes).map_err(|r| ManagedError::Unreadable {
            path: path.clone(),
            reason: r.to_string(),
        })?;
        Ok(Some(ManagedFile {
            block,
            surface,
            provenance: Arc::new(Provenance::managed(path.into_string(), signed_by)),
            // Shared, so each chain of a snapshot takes it without a copy.
            text: text.as_str().into(),
        }))
    }
}

/// Parse `ed25519:<base64 of 32 bytes>` into a key; the error is a
/// sentence fragment saying what it is instead.
fn parse_public_key(text: &str) -> Result<VerifyingKey, String> {
    let Some(body) = text.strip_prefix(KEY_PREFIX) else {
        return Err(format!(
            "does not begin with `{KEY_PREFIX}` (a key is `ed25519:` and the base64 of its 32 bytes)"
        ));
    };
    let raw = decode_base64(body).map_err(|_| "is not base64 after `ed25519:`".to_owned())?;
    let raw: [u8; 32] = raw
        .as_slice()
        .try_into()
        .map_err(|_| format!("is {} bytes, not 32", raw.len()))?;
    VerifyingKey::from_bytes(&raw).map_err(|_| "is not a valid ed25519 public key".to_owned())
}

/// Decode base64 written by any tool: whitespace anywhere (`base64` wraps
/// its output at 76 columns, editors add a final newline) is not part of it.
fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    BASE64.decode(compact)
}

/// The text form of `key`: `ed25519:<base64>`.
fn key_id(key: &VerifyingKey) -> String {
    format!("{KEY_PREFIX}{}", BASE64.encode(key.as_bytes()))
}

/// A signing key read from a key file (`vak managed sign --key FILE`).
#[derive(Debug)]
pub struct ManagedSigningKey {
    key: SigningKey,
}

impl ManagedSigningKey {
    /// Read the key file at `path`: one line, the base64 of a 32-byte
    /// ed25519 seed. Read as any hostile file: a regular file (not a FIFO),
    /// bounded.
    ///
    /// # Errors
    ///
    /// [`ManagedError::SigningKey`], saying what format is expected.
    pub fn read(path: &Utf8Path) -> Result<ManagedSigningKey, ManagedError> {
        let error = |reason: String| ManagedError::SigningKey {
            path: path.to_owned(),
            reason,
        };
        let bytes = crate::confine::read_plain(path, MAX_SIGNATURE_BYTES)
            .map_err(|r| error(format!("it {}", ReadRefusal::from(r))))?
            .ok_or_else(|| error("it does not exist".to_owned()))?;
        let text = std::str::from_utf8(&bytes).map_err(|_| error("it is not text".to_owned()))?;
        let raw = decode_base64(text).map_err(|_| error("it is not base64".to_owned()))?;
        let seed: [u8; 32] = raw
            .as_slice()
            .try_into()
            .map_err(|_| error(format!("it decodes to {} bytes, not 32", raw.len())))?;
        Ok(ManagedSigningKey {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// A new key from the system's random source.
    ///
    /// # Errors
    ///
    /// An I/O error reading `/dev/urandom`.
    pub fn generate() -> std::io::Result<ManagedSigningKey> {
        let mut seed = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
        Ok(ManagedSigningKey {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The key file's text: the base64 of the seed and a newline.
    pub fn to_file_text(&self) -> String {
        format!("{}\n", BASE64.encode(self.key.to_bytes()))
    }

    /// The public key as `managed_keys` lists it: `ed25519:<base64>`.
    pub fn public(&self) -> String {
        key_id(&self.key.verifying_key())
    }

    /// The detached signature of `bytes`, as a `.sig` file holds it: the
    /// base64 of the 64-byte signature.
    pub fn sign(&self, bytes: &[u8]) -> String {
        BASE64.encode(self.key.sign(bytes).to_bytes())
    }
}

/// The detached signature of the file at `path` by the key in the key file
/// `key` (`vak managed sign --key KEY PATH`): what `<path>.sig` must hold.
/// The file is read as the managed layer reads it: a regular file, not
/// followed through a symlink, at most 256 KiB.
///
/// # Errors
///
/// [`ManagedError::SigningKey`] for a key file that is not a key;
/// [`ManagedError::Unreadable`] for a file that cannot be signed.
pub fn sign_managed_file(key: &Utf8Path, path: &Utf8Path) -> Result<String, ManagedError> {
    let key = ManagedSigningKey::read(key)?;
    let unreadable = |reason: String| ManagedError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let bytes = read_plain(path, MAX_FILE_BYTES)
        .map_err(|r| unreadable(ReadRefusal::from(r).to_string()))?
        .ok_or_else(|| unreadable("does not exist".to_owned()))?;
    Ok(key.sign(&bytes))
}

/// Make a new signing key and write it to `path` (`vak managed keygen`),
/// readable by its owner alone; an existing file is never overwritten.
/// Answers the public key, as `managed_keys` lists it.
///
/// # Errors
///
/// [`ManagedError::SigningKey`] when the file exists or cannot be written.
pub fn generate_managed_key(path: &Utf8Path) -> Result<String, ManagedError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let error = |reason: String| ManagedError::SigningKey {
        path: path.to_owned(),
        reason,
    };
    let key = ManagedSigningKey::generate()
        .map_err(|e| error(format!("no random seed could be read ({e})")))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                error(
                    "it already exists, and a key is never overwritten; choose another file"
                        .to_owned(),
                )
            } else {
                error(format!("it cannot be created ({e})"))
            }
        })?;
    file.write_all(key.to_file_text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| error(format!("it cannot be written ({e})")))?;
    Ok(key.public())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::PermissionsExt;

    /// A managed directory (mode 0755) and a home, in one temporary root.
    struct Layer {
        _root: tempfile::TempDir,
        dir: Utf8PathBuf,
        home: Utf8PathBuf,
    }

    impl Layer {
        fn new() -> Layer {
            let root = tempfile::tempdir().unwrap();
            let base = Utf8PathBuf::from_path_buf(root.path().canonicalize().unwrap()).unwrap();
            let (dir, home) = (base.join("managed"), base.join("home"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&home).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            Layer {
                _root: root,
                dir,
                home,
            }
        }

        fn write(&self, name: &str, bytes: &[u8], mode: u32) {
            let path = self.dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }

        fn load(&self) -> Result<Option<Arc<ManagedLayer>>, ManagedError> {
            let location = ManagedLocation {
                dir: self.dir.clone(),
                from_env: true,
            };
            load_at(location, &self.home)
        }
    }

    #[test]
    fn the_mode_is_judged_on_the_directory_each_subdirectory_and_each_file() {
        let layer = Layer::new();
        layer.write("guardrails.md", b"- floor\n", 0o644);
        layer.write("surface/chat/surface-note.md", b"chat note\n", 0o644);
        let read = layer.load().unwrap().unwrap();
        assert_eq!(read.files.len(), 2);
        assert_eq!(read.files[1].surface, Some(SurfaceKind::Chat));

        for (path, mode, who) in [
            ("", 0o775, "group"),
            ("surface", 0o757, "others"),
            ("surface/chat", 0o777, "group and others"),
            ("guardrails.md", 0o666, "group and others"),
        ] {
            let target = layer.dir.join(path);
            let before = std::fs::metadata(&target).unwrap().permissions();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode)).unwrap();
            match layer.load() {
                Err(ManagedError::WritableByOthers {
                    path: at,
                    mode: shown,
                    who: said,
                }) => {
                    assert_eq!(at, target, "{path}");
                    assert_eq!(shown, format!("{mode:04o}"));
                    assert_eq!(said, who);
                }
                other => panic!("{path}: {other:?}"),
            }
            std::fs::set_permissions(&target, before).unwrap();
        }
        assert!(layer.load().is_ok());
    }

    #[test]
    fn a_lock_on_a_block_that_cannot_be_locked_names_the_key() {
        let layer = Layer::new();
        layer.write(
            "config.toml",
            b"[prompts]\nlocked = [\"surface-note\"]\n",
            0o644,
        );
        let error = layer.load().unwrap_err();
        assert!(error.to_string().contains("prompts.locked"), "{error}");
        layer.write(
            "config.toml",
            b"[prompts]\nlocked = [\"identity\", \"identity\"]\nmax_tokens = 900\n",
            0o644,
        );
        let read = layer.load().unwrap().unwrap();
        assert_eq!(read.locked, [Block::Identity]);
        assert_eq!(read.max_tokens, Some(900));
    }

    #[test]
    fn a_relative_managed_directory_is_refused() {
        let location = ManagedLocation {
            dir: Utf8PathBuf::from("managed"),
            from_env: true,
        };
        let home = Utf8PathBuf::from("/nonexistent-home");
        let error = load_at(location, &home).unwrap_err().to_string();
        assert!(error.contains("`managed`"), "{error}");
        assert!(error.contains("absolute path"), "{error}");
    }

    #[test]
    fn a_key_the_managed_config_does_not_know_is_refused_by_name() {
        let layer = Layer::new();
        for (config, key) in [
            ("[prompts]\nlock = [\"identity\"]\n", "`prompts.lock`"),
            ("[prompt]\nlocked = [\"identity\"]\n", "`prompt`"),
            ("max_tokens = 9\n[prompts]\n", "`max_tokens`"),
            ("[prompts]\n\"lo\\u001bck\" = 1\n", "`prompts.lo\\u{1b}ck`"),
        ] {
            layer.write("config.toml", config.as_bytes(), 0o644);
            let error = layer.load().unwrap_err().to_string();
            assert!(error.contains(key), "{config}: {error}");
            assert!(!error.contains('\u{1b}'), "{error}");
        }
    }

    #[test]
    fn signatures_are_checked_and_the_signer_recorded_and_pinned() {
        let layer = Layer::new();
        let key = ManagedSigningKey::generate().unwrap();
        let config = format!("[prompts]\nmanaged_keys = [\"{}\"]\n", key.public());
        layer.write("config.toml", config.as_bytes(), 0o644);
        layer.write(
            "config.toml.sig",
            key.sign(config.as_bytes()).as_bytes(),
            0o644,
        );
        layer.write("identity.md", b"ACME\n", 0o644);
        assert!(matches!(layer.load(), Err(ManagedError::Unsigned { .. })));
        layer.write("identity.md.sig", key.sign(b"ACME\n").as_bytes(), 0o644);
        let read = layer.load().unwrap().unwrap();
        assert_eq!(
            read.files[0].provenance.signed_by.as_deref(),
            Some(key.public().as_str())
        );
        assert_eq!(
            read.config_signed_by.as_deref(),
            Some(key.public().as_str())
        );
        let pin = std::fs::read_to_string(pin_path(&layer.home)).unwrap();
        assert!(pin.contains(&key.public()), "{pin}");
        layer.write("identity.md", b"ACME!\n", 0o644);
        assert!(matches!(
            layer.load(),
            Err(ManagedError::BadSignature { .. })
        ));
    }

    proptest! {
        // Each case makes a key and signs: a few dozen say what thousands
        // would, in a debug build's time.
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// A signature verifies the exact bytes it was made over: any one
        /// byte changed, added or removed is refused.
        #[test]
        fn a_signature_covers_every_byte(
            text in proptest::collection::vec(any::<u8>(), 0..256),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let key = ManagedSigningKey::generate().unwrap();
            let public = parse_public_key(&key.public()).unwrap();
            let raw = BASE64.decode(key.sign(&text)).unwrap();
            let sig = Signature::from_bytes(&raw.as_slice().try_into().unwrap());
            prop_assert!(public.verify_strict(&text, &sig).is_ok());
            let mut longer = text.clone();
            longer.push(0);
            prop_assert!(public.verify_strict(&longer, &sig).is_err());
            if !text.is_empty() {
                let mut changed = text.clone();
                changed[at.index(text.len())] ^= flip;
                prop_assert!(public.verify_strict(&changed, &sig).is_err());
                prop_assert!(public.verify_strict(&text[1..], &sig).is_err());
            }
        }
    }

    #[test]
    fn a_signature_made_by_a_key_verifies_with_its_public_text_only() {
        let key = ManagedSigningKey::generate().unwrap();
        let other = ManagedSigningKey::generate().unwrap();
        let public = parse_public_key(&key.public()).unwrap();
        let sig = BASE64.decode(key.sign(b"floor")).unwrap();
        let sig = Signature::from_bytes(&sig.as_slice().try_into().unwrap());
        assert!(public.verify_strict(b"floor", &sig).is_ok());
        assert!(public.verify_strict(b"floor!", &sig).is_err());
        let other_public = parse_public_key(&other.public()).unwrap();
        assert!(other_public.verify_strict(b"floor", &sig).is_err());
    }

    #[test]
    fn base64_wrapped_by_a_tool_still_decodes() {
        let key = ManagedSigningKey::generate().unwrap();
        let sig = key.sign(b"floor");
        let wrapped = format!("{}\n{}\n", &sig[..76], &sig[76..]);
        assert_eq!(
            decode_base64(&wrapped).unwrap(),
            BASE64.decode(&sig).unwrap()
        );
        let seed = key.to_file_text();
        assert_eq!(decode_base64(&format!("  {seed}\r\n")).unwrap().len(), 32);
    }

    #[test]
    fn a_public_key_in_another_form_says_what_it_is() {
        assert!(
            parse_public_key("ssh-ed25519 AAAA")
                .unwrap_err()
                .contains("ed25519:")
        );
        assert!(
            parse_public_key("ed25519:!!")
                .unwrap_err()
                .contains("base64")
        );
        assert!(
            parse_public_key("ed25519:AAAA")
                .unwrap_err()
                .contains("not 32")
        );
    }

    #[test]
    fn a_mode_writable_by_others_is_named_in_four_digits() {
        let error = ManagedError::WritableByOthers {
            path: "/etc/vak/prompts".into(),
            mode: format!("{:04o}", 0o777),
            who: "group and others",
        };
        assert!(error.to_string().contains("mode 0777"));
    }
}
