//! The home side of the prompt served from a store: with
//! the PostgreSQL store every node keeps the store's home side (the shared
//! layer, its `surface/<kind>/` and `agents/<role>/` sub-layers, the
//! gateway tiers) as ordinary files under its `$VAK_HOME` — a *replica*,
//! written through the loader's confined atomic writes — so the loader,
//! the admin cards and the inotify prompt cache read it unchanged.
//!
//! [`sync_home`] is the one owner of the replica. It records what it wrote
//! in `.vak/home-replica.json` (generation, and the sha256 of every file it
//! wrote), and never silently destroys an operator's file: a home-side file
//! present here that the store lacks, or one changed by hand since vak
//! wrote it, is an error naming it, and nothing is written.
//!
//! Writes of home-side files ([`write_shared`]) go to the store first, as a
//! compare-and-swap on the digest the caller started from and on the home
//! generation its budget check was made at, then the replica is synced; a
//! racing save of the same file on another node gets the same
//! [`SaveError::Stale`] a file save gets, and a save of any other
//! home-side file in between makes the caller check the budget again
//! (at most [`SAVE_ATTEMPTS`] times), since the save lock is only this
//! node's.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt as _;

use camino::{Utf8Path, Utf8PathBuf};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use vak_prompt_blocks::{Escaped, sha256_hex};
use vak_prompt_loader::{
    GatewayError, GatewayFile, SaveError, SaveOutcome, current_digest, read_safely, remove_checked,
    save_atomic,
};
use vak_session::{
    Expect, GATEWAY_FILES, HomeSnapshot, HomeStore, LAYER_FILES, SessionError, Store, Swapped,
    home_side_path,
};

/// Where the replica records what it wrote, relative to the home.
pub const REPLICA_MANIFEST: &str = ".vak/home-replica.json";
const REPLICA_LOCK: &str = ".vak/home-replica.lock";
const SAVE_LOCK: &str = ".vak/save.lock";

/// Why the replica could not be brought up to the store's home side.
#[derive(Debug, Error)]
pub enum HomeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] SessionError),
    /// Home-side files here that the store does not have.
    #[error(
        "{} holds the home side, but this home has {} it does not: {}; nothing was written. Copy {} into the store with `vak store import --from file --store URL` (run against this home), or move {} away",
        .store, if .paths.len() == 1 { "a file" } else { "files" }, list(.paths),
        them(.paths), them(.paths)
    )]
    NotInStore {
        /// The store.
        store: String,
        /// The files, absolute.
        paths: Vec<Utf8PathBuf>,
    },
    /// Replica files changed by hand since vak wrote them from the store.
    #[error(
        "{} changed here by hand since vak wrote {} from {}: {}; nothing was overwritten. Save the change through vak (`vak prompts set`, the admin page) or move the file away so the store's version is written",
        if .paths.len() == 1 { "a home-side file was" } else { "home-side files were" },
        if .paths.len() == 1 { "it" } else { "them" }, .store, list(.paths)
    )]
    EditedByHand {
        /// The store.
        store: String,
        /// The files, absolute.
        paths: Vec<Utf8PathBuf>,
    },
    /// A replica file could not be read, written or removed.
    #[error(transparent)]
    Write(#[from] SaveError),
    /// Another node changed the home side between this change's budget
    /// check and its write, every time it was checked again. Nothing was
    /// written. (One move is not an error: the change syncs, checks the
    /// budget again and retries, [`SAVE_ATTEMPTS`] times in all.)
    #[error(
        "the home side in {store} kept changing on other nodes between this change's budget check and its write ({attempts} {}); nothing was written. Try the change again once the other saves are done",
        if *.attempts == 1 { "attempt" } else { "attempts" }
    )]
    KeptMoving {
        /// The store.
        store: String,
        /// How many times the change was checked and tried.
        attempts: usize,
    },
    /// The replica's lock or manifest, or the save lock, could not be used.
    #[error("cannot {action} `{}`: {reason}; fix or remove it", Escaped(.path.as_str()))]
    Replica {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: Utf8PathBuf,
        /// Why.
        reason: String,
    },
}

fn them(paths: &[Utf8PathBuf]) -> &'static str {
    if paths.len() == 1 { "it" } else { "them" }
}

fn list(paths: &[Utf8PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("`{}`", Escaped(p.as_str())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What [`sync_home`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// The generation the replica is at now.
    pub generation: i64,
    /// Whether any replica file was written or removed.
    pub changed: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    generation: i64,
    /// Path relative to the home → the sha256 vak wrote there.
    files: BTreeMap<String, String>,
    /// While a sync is applying: what vak wrote before it (path → sha256),
    /// so a sync killed half-way leaves files that are still vak's own
    /// (the old digest or the new one) and the next sync finishes the job
    /// instead of calling them hand edits. Empty once a sync completes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    previous: BTreeMap<String, String>,
}

impl Manifest {
    /// Whether `digest` at `rel` is a text vak wrote there (now, or before
    /// a sync that did not finish).
    fn wrote(&self, rel: &str, digest: &str) -> bool {
        self.files.get(rel).is_some_and(|d| d == digest)
            || self.previous.get(rel).is_some_and(|d| d == digest)
    }
}

fn read_manifest(home: &Utf8Path) -> Result<Manifest, HomeError> {
    let path = home.join(REPLICA_MANIFEST);
    let text = read_safely(&path, home).map_err(|e| HomeError::Replica {
        action: "read",
        path: path.clone(),
        reason: e.to_string(),
    })?;
    match text {
        None => Ok(Manifest::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| HomeError::Replica {
            action: "parse",
            path,
            reason: e.to_string(),
        }),
    }
}

fn write_manifest(home: &Utf8Path, manifest: &Manifest) -> Result<(), HomeError> {
    let text = serde_json::to_string_pretty(manifest).map_err(|e| HomeError::Replica {
        action: "encode",
        path: home.join(REPLICA_MANIFEST),
        reason: e.to_string(),
    })?;
    save_atomic(&home.join(REPLICA_MANIFEST), home, &text, None)?;
    Ok(())
}

/// The exclusive lock of the replica (`.vak/home-replica.lock`, a file lock,
/// so across the processes and threads sharing this home).
fn lock_replica(home: &Utf8Path) -> Result<std::fs::File, HomeError> {
    lock_file(home, REPLICA_LOCK)
}

/// The exclusive lock every change of a prompt through this home holds
/// from its budget check to its write (`.vak/save.lock`): two saves that
/// each fit the cap alone, made at once, could otherwise both pass the check
/// and together go over it. One lock for the whole home,
/// since a save at any layer changes chains that every other layer is in.
/// Held until the returned file is dropped.
///
/// # Errors
///
/// [`HomeError::Replica`] when the lock file cannot be created or locked.
pub fn lock_saves(home: &Utf8Path) -> Result<std::fs::File, HomeError> {
    lock_file(home, SAVE_LOCK)
}

fn lock_file(home: &Utf8Path, rel: &str) -> Result<std::fs::File, HomeError> {
    let path = home.join(rel);
    let fail = |action: &'static str, e: std::io::Error| HomeError::Replica {
        action,
        path: path.clone(),
        reason: e.to_string(),
    };
    // A file of the home: never created or locked outside it.
    vak_prompt_loader::confine::home_path(home, &path).map_err(|e| fail("open", e.into()))?;
    if let Some(dir) = path.parent() {
        vak_prompt_loader::create_dirs(dir).map_err(|e| fail("create the directory of", e))?;
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| fail("open", e))?;
    file.lock().map_err(|e| fail("lock", e))?;
    Ok(file)
}

/// Every home-side file present under `home`, relative to it.
pub fn local_files(home: &Utf8Path) -> Vec<String> {
    let mut out = Vec::new();
    for file in GATEWAY_FILES {
        out.push(format!(".vak/gateway/{file}"));
    }
    for file in LAYER_FILES {
        out.push(format!(".vak/prompts/{file}"));
    }
    for sub in ["surface", "agents"] {
        let dir = home.join(".vak/prompts").join(sub);
        let Ok(entries) = dir.read_dir_utf8() else {
            continue;
        };
        for entry in entries.flatten() {
            for file in LAYER_FILES {
                out.push(format!(".vak/prompts/{sub}/{}/{file}", entry.file_name()));
            }
        }
    }
    out.retain(|p| home_side_path(p) && home.join(p).symlink_metadata().is_ok());
    out
}

/// The generation of a store whose home side was never written (migration
/// 4 starts there; every change moves it on).
pub const UNSEEDED: i64 = 1;

/// Whether `home` keeps serving its own home-side files: the store's home
/// side was never written (nothing imported, nothing saved) and this home
/// has home-side files. That is how nodes ran before the store held the
/// home side, and they keep running so until it is seeded (`vak store
/// import`); from then on the store is the truth and a file it lacks is
/// refused. A node with no home-side files of its own takes the store's.
fn keeps_own_files(home: &Utf8Path) -> bool {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let keeps = !local_files(home).is_empty();
    if keeps {
        WARNED.call_once(|| {
            tracing::warn!(
                home = %Escaped(home.as_str()),
                "the store holds no home side yet, so this node serves its own prompt files; copy them into the store with `vak store import --from file --store URL` so every node serves the same"
            );
        });
    }
    keeps
}

/// Bring the replica under `home` up to the home side `store` holds, and
/// answer the generation it is at. Cheap when nothing moved: one query,
/// the small manifest and a hash of the few home-side files (which must be
/// the ones vak wrote), unless `full`, which takes the store's snapshot and
/// compares every file (a node's start). A file the store lacks or a file
/// changed by hand is an error and nothing is written.
///
/// # Errors
///
/// See [`HomeError`].
pub fn sync_home(
    home: &Utf8Path,
    store: &dyn HomeStore,
    describe: &str,
    full: bool,
) -> Result<Synced, HomeError> {
    if !full {
        let generation = store.home_generation()?;
        if generation == UNSEEDED && keeps_own_files(home) {
            return Ok(Synced {
                generation,
                changed: false,
            });
        }
        let manifest = read_manifest(home)?;
        if manifest.generation == generation && intact(home, &manifest) {
            return Ok(Synced {
                generation,
                changed: false,
            });
        }
    }
    let _lock = lock_replica(home)?;
    let manifest = read_manifest(home)?;
    // Taken under the lock, so a later holder never applies an older one.
    let snapshot = store.home_snapshot()?;
    if snapshot.generation == UNSEEDED && keeps_own_files(home) {
        return Ok(Synced {
            generation: snapshot.generation,
            changed: false,
        });
    }
    if !full && manifest.generation == snapshot.generation && intact(home, &manifest) {
        return Ok(Synced {
            generation: snapshot.generation,
            changed: false,
        });
    }
    apply(home, &manifest, &snapshot, describe)
}

/// Whether the home-side files under `home` are exactly the ones vak
/// wrote (same set, same digests). Checked on every sync, not just when the
/// store moved: a replica edited by hand would make this node resolve a
/// prompt no other node does, and rotate a chat back and forth.
fn intact(home: &Utf8Path, manifest: &Manifest) -> bool {
    let present = local_files(home);
    present.len() == manifest.files.len()
        && present.iter().all(|rel| {
            matches!(
                (current_digest(&home.join(rel), home), manifest.files.get(rel)),
                (Ok(Some(here)), Some(wrote)) if &here == wrote
            )
        })
}

fn apply(
    home: &Utf8Path,
    manifest: &Manifest,
    snapshot: &HomeSnapshot,
    describe: &str,
) -> Result<Synced, HomeError> {
    let wanted: BTreeMap<&str, &str> = snapshot
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.text.as_str()))
        .collect();
    let mut paths: Vec<String> = local_files(home);
    paths.extend(wanted.keys().map(|p| (*p).to_owned()));
    paths.sort();
    paths.dedup();
    let (mut unknown, mut by_hand) = (Vec::new(), Vec::new());
    // (path, the digest there now, the text to write or None to remove)
    let mut plan: Vec<(String, Option<String>, Option<&str>)> = Vec::new();
    for rel in &paths {
        let path = home.join(rel);
        let local = current_digest(&path, home)?;
        match (local, wanted.get(rel.as_str())) {
            (None, Some(text)) => plan.push((rel.clone(), None, Some(text))),
            (Some(here), Some(text)) => {
                if here == sha256_hex(text) {
                    continue;
                }
                if manifest.wrote(rel, &here) {
                    plan.push((rel.clone(), Some(here), Some(text)));
                } else {
                    by_hand.push(path);
                }
            }
            (Some(here), None) => {
                if manifest.wrote(rel, &here) {
                    plan.push((rel.clone(), Some(here), None));
                } else {
                    unknown.push(path);
                }
            }
            (None, None) => {}
        }
    }
    if !unknown.is_empty() {
        return Err(HomeError::NotInStore {
            store: describe.to_owned(),
            paths: unknown,
        });
    }
    if !by_hand.is_empty() {
        return Err(HomeError::EditedByHand {
            store: describe.to_owned(),
            paths: by_hand,
        });
    }
    let changed = !plan.is_empty();
    let target: BTreeMap<String, String> = snapshot
        .files
        .iter()
        .map(|f| (f.path.clone(), f.sha256.clone()))
        .collect();
    if changed {
        // Write ahead: the new digests, and every digest vak had written,
        // before the first file changes (see `Manifest::previous`).
        let mut previous = manifest.previous.clone();
        previous.extend(manifest.files.clone());
        write_manifest(
            home,
            &Manifest {
                generation: manifest.generation,
                files: target.clone(),
                previous,
            },
        )?;
    }
    for (rel, here, text) in plan {
        let path = home.join(&rel);
        // The digest seen above: a hand edit in between is refused, not lost.
        let expected = here.unwrap_or_default();
        match text {
            Some(text) => {
                save_atomic(&path, home, text, Some(&expected))?;
            }
            None => {
                remove_checked(&path, home, Some(&expected))?;
            }
        }
    }
    write_manifest(
        home,
        &Manifest {
            generation: snapshot.generation,
            files: target,
            previous: BTreeMap::new(),
        },
    )?;
    if changed {
        tracing::info!(
            generation = snapshot.generation,
            "home side synced from the store"
        );
    }
    Ok(Synced {
        generation: snapshot.generation,
        changed,
    })
}

/// [`sync_home`] when `store` holds the home side; `None` (nothing done)
/// for the file store.
///
/// # Errors
///
/// See [`HomeError`].
pub fn sync_if_shared(
    home: &Utf8Path,
    store: &dyn Store,
    full: bool,
) -> Result<Option<Synced>, HomeError> {
    match store.home() {
        Some(shared) => Ok(Some(sync_home(home, shared, &store.describe(), full)?)),
        None => Ok(None),
    }
}

/// How many times a change of the home side is checked and tried when
/// other nodes keep changing the home side in between: enough to ride out
/// a few saves made at once, few enough that a refusal comes quickly.
pub const SAVE_ATTEMPTS: usize = 5;

/// Run `attempt` (a change's sync, budget check and write) again while it
/// fails with [`HomeError::KeptMoving`] — the home side moved on another
/// node after this attempt's check — up to [`SAVE_ATTEMPTS`] times; the
/// last refusal says how many attempts were made. `home_error` finds the
/// [`HomeError`] inside the caller's error type.
pub(crate) fn retried<T, E>(
    mut attempt: impl FnMut() -> Result<T, E>,
    home_error: impl Fn(&mut E) -> Option<&mut HomeError>,
) -> Result<T, E> {
    let mut tries = 1;
    loop {
        let mut error = match attempt() {
            Ok(done) => return Ok(done),
            Err(error) => error,
        };
        if let Some(HomeError::KeptMoving { attempts, .. }) = home_error(&mut error) {
            if tries < SAVE_ATTEMPTS {
                tracing::info!(
                    attempt = tries,
                    "the home side moved on another node after the budget check; checking again"
                );
                tries += 1;
                continue;
            }
            *attempts = tries;
        }
        return Err(error);
    }
}

/// `path` relative to `home`, when it is a home-side file.
pub fn home_side(home: &Utf8Path, path: &Utf8Path) -> Option<String> {
    let rel = path.strip_prefix(home).ok()?.as_str().to_owned();
    home_side_path(&rel).then_some(rel)
}

/// Write (`Some`) or remove (`None`) the home-side file `path` through the
/// store, when `store` holds the home side and `path` is a home-side file
/// of `home`: a compare-and-swap on the digest of the synced replica (and
/// `if_digest`, the one the caller started from) and on `at`, the home
/// generation the caller's budget check was made at (the one
/// [`sync_if_shared`] answered before it), then a sync. `Ok(None)`: not
/// shared, the caller writes the file as before.
///
/// The generation makes the check and the write one transaction: the
/// check read every home-side file its chains hold, so a change to any of
/// them on another node since — not only to this file — is refused here,
/// and the caller checks again (at most [`SAVE_ATTEMPTS`] times).
///
/// # Errors
///
/// [`SaveError::Stale`] (inside [`HomeError::Write`]) when the file
/// changed since `if_digest`, here or on any node;
/// [`HomeError::KeptMoving`] when the home side is no longer at `at`; see
/// [`HomeError`].
pub fn write_shared(
    store: &dyn Store,
    home: &Utf8Path,
    path: &Utf8Path,
    text: Option<&str>,
    if_digest: Option<&str>,
    at: Option<i64>,
    by: &str,
) -> Result<Option<SaveOutcome>, HomeError> {
    let Some(shared) = store.home() else {
        return Ok(None);
    };
    let Some(rel) = home_side(home, path) else {
        return Ok(None);
    };
    let describe = store.describe();
    let synced = sync_home(home, shared, &describe, false)?;
    if synced.generation == UNSEEDED && keeps_own_files(home) {
        // Not seeded, and this node serves its own files: it writes them
        // as it always did (a first save from a node with no home-side
        // files of its own seeds the store instead).
        return Ok(None);
    }
    let moved = || HomeError::KeptMoving {
        store: describe.clone(),
        attempts: 1,
    };
    // Cheap to see here already; the store compares it again under its lock.
    if at.is_some_and(|at| at != synced.generation) {
        return Err(moved());
    }
    let local = current_digest(path, home)?;
    let stale = |expected: &str, actual: Option<String>| {
        HomeError::Write(SaveError::Stale {
            path: path.to_owned(),
            expected: expected.to_owned(),
            actual,
        })
    };
    if let Some(expected) = if_digest
        && local.as_deref().unwrap_or("") != expected
    {
        return Err(stale(expected, local));
    }
    let expect = Expect::of(local.as_deref());
    // The replica's digest was read at the synced generation: the store
    // must still be there, whether or not the caller named one.
    let checked_at = at.unwrap_or(synced.generation);
    let swapped = match text {
        Some(text) => {
            // The replica is written with `save_atomic`, which holds every
            // file to this bound: the store takes nothing a node could not
            // write.
            if text.len() as u64 > vak_prompt_loader::MAX_FILE_BYTES {
                return Err(HomeError::Write(SaveError::TooLarge {
                    path: path.to_owned(),
                    bytes: text.len(),
                }));
            }
            shared.home_put(&rel, text, &expect, Some(checked_at), by)?
        }
        None => shared.home_remove(&rel, &expect, Some(checked_at), by)?,
    };
    match swapped {
        Swapped::Done(_) => {}
        Swapped::Conflict(now) => return Err(stale(local.as_deref().unwrap_or(""), now)),
        Swapped::Moved(_) => return Err(moved()),
    }
    sync_home(home, shared, &describe, false)?;
    Ok(Some(SaveOutcome {
        path: path.to_owned(),
        digest: text.map(sha256_hex).unwrap_or_default(),
        previous: local,
    }))
}

/// The admin's gateway edit ([`vak_prompt_loader::write_gateway_prompt`]),
/// through the store when it holds the home side.
///
/// # Errors
///
/// As `write_gateway_prompt`; a store failure is [`GatewayError::Save`]
/// or the [`HomeError`] beside it.
#[allow(clippy::too_many_arguments)]
pub fn write_gateway_prompt(
    store: &dyn Store,
    home: &Utf8Path,
    file: GatewayFile,
    entry_path: &[&str],
    block: vak_prompt_blocks::Block,
    text: Option<&str>,
    expected: &str,
    at: Option<i64>,
    by: &str,
) -> Result<SaveOutcome, GatewayWriteError> {
    let local =
        || vak_prompt_loader::write_gateway_prompt(home, file, entry_path, block, text, expected);
    if store.home().is_none() {
        return Ok(local()?);
    }
    sync_if_shared(home, store, false)?;
    let (path, out) = vak_prompt_loader::gateway_prompt_text(home, file, entry_path, block, text)?;
    match write_shared(store, home, &path, Some(&out), Some(expected), at, by)? {
        Some(outcome) => Ok(outcome),
        // The store is not seeded and this node keeps its own files.
        None => Ok(local()?),
    }
}

/// Why a gateway edit through the store failed.
#[derive(Debug, Error)]
pub enum GatewayWriteError {
    /// The gateway file refused the edit (or a stale digest).
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The store or the replica refused it.
    #[error(transparent)]
    Home(#[from] HomeError),
}

/// What [`import_home`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HomeImported {
    /// Files copied into the store now.
    pub copied: usize,
    /// Files the store already held with the same sha256.
    pub already_there: usize,
}

/// `vak store import`: copy every home-side file of `home` into `store`
/// (absent there: compare-and-swap on "absent"), then read the store's home
/// side back and compare every digest. Idempotent: a file the store holds
/// with the same digest is left alone; one it holds with another text is
/// an error naming it (nothing of that file is overwritten), as is a file
/// here the confined reader refuses.
///
/// # Errors
///
/// [`HomeError::EditedByHand`] lists files whose text differs from the
/// store's; see [`HomeError`].
pub fn import_home(
    home: &Utf8Path,
    store: &dyn HomeStore,
    describe: &str,
    by: &str,
) -> Result<HomeImported, HomeError> {
    let mut report = HomeImported::default();
    let mut differ = Vec::new();
    let mut wanted = BTreeMap::new();
    for rel in local_files(home) {
        let path = home.join(&rel);
        let text = if rel.starts_with(".vak/gateway/") {
            vak_prompt_loader::read_gateway(home, gateway_file(&rel))
                .map_err(|e| HomeError::Replica {
                    action: "read",
                    path: path.clone(),
                    reason: e.to_string(),
                })?
                // The confined reader checked it; the bytes read now must
                // be the ones it checked.
                .map(|doc| match std::fs::read_to_string(&path) {
                    Ok(text) if sha256_hex(&text) == doc.digest => Ok(text),
                    Ok(_) => Err("it changed while it was being imported".to_owned()),
                    Err(e) => Err(e.to_string()),
                })
                .transpose()
                .map_err(|reason| HomeError::Replica {
                    action: "read",
                    path: path.clone(),
                    reason,
                })?
        } else {
            read_safely(&path, home).map_err(|e| HomeError::Replica {
                action: "read",
                path: path.clone(),
                reason: e.to_string(),
            })?
        };
        let Some(text) = text else { continue };
        // Any generation: an import copies files the store lacks, checking
        // no budget that a change elsewhere could make stale.
        match store.home_put(&rel, &text, &Expect::Absent, None, by)? {
            Swapped::Done(_) => report.copied += 1,
            // Answered only to a write that names a generation; this one
            // names none, so a store answering it is broken.
            Swapped::Moved(_) => {
                return Err(HomeError::Replica {
                    action: "import",
                    path,
                    reason: format!(
                        "{describe} refused the copy for a generation it was not given; nothing more was imported"
                    ),
                });
            }
            Swapped::Conflict(Some(there)) if there == sha256_hex(&text) => {
                report.already_there += 1;
            }
            Swapped::Conflict(_) => {
                differ.push(path);
                continue;
            }
        }
        wanted.insert(rel, sha256_hex(&text));
    }
    if !differ.is_empty() {
        return Err(HomeError::EditedByHand {
            store: describe.to_owned(),
            paths: differ,
        });
    }
    let snapshot = store.home_snapshot()?;
    for (rel, digest) in &wanted {
        if !snapshot
            .files
            .iter()
            .any(|f| &f.path == rel && &f.sha256 == digest)
        {
            return Err(HomeError::Replica {
                action: "verify the copy of",
                path: home.join(rel),
                reason: format!("{describe} does not hold the same text after the import"),
            });
        }
    }
    Ok(report)
}

fn gateway_file(rel: &str) -> GatewayFile {
    if rel.ends_with("allowlist.json") {
        GatewayFile::Allowlist
    } else {
        GatewayFile::Bots
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use vak_session::HomeFile;

    use super::*;

    /// The home side in memory, with a count of snapshots taken.
    struct Memory {
        snapshot: Mutex<HomeSnapshot>,
        snapshots: Mutex<usize>,
    }

    impl Default for Memory {
        fn default() -> Self {
            Memory {
                snapshot: Mutex::new(HomeSnapshot {
                    generation: UNSEEDED,
                    files: Vec::new(),
                }),
                snapshots: Mutex::new(0),
            }
        }
    }

    impl Memory {
        fn set(&self, path: &str, text: Option<&str>) {
            let mut s = self.snapshot.lock().expect("lock");
            s.files.retain(|f| f.path != path);
            if let Some(text) = text {
                s.files.push(HomeFile {
                    path: path.to_owned(),
                    text: text.to_owned(),
                    sha256: sha256_hex(text),
                    by: "test".to_owned(),
                    at: String::new(),
                });
            }
            s.generation += 1;
        }
    }

    impl HomeStore for Memory {
        fn home_generation(&self) -> Result<i64, SessionError> {
            Ok(self.snapshot.lock().expect("lock").generation)
        }
        fn home_snapshot(&self) -> Result<HomeSnapshot, SessionError> {
            *self.snapshots.lock().expect("lock") += 1;
            Ok(self.snapshot.lock().expect("lock").clone())
        }
        fn home_put(
            &self,
            _: &str,
            _: &str,
            _: &Expect,
            _: Option<i64>,
            _: &str,
        ) -> Result<Swapped, SessionError> {
            unreachable!("sync never writes to the store")
        }
        fn home_remove(
            &self,
            _: &str,
            _: &Expect,
            _: Option<i64>,
            _: &str,
        ) -> Result<Swapped, SessionError> {
            unreachable!("sync never writes to the store")
        }
        fn bot_secret(&self, _: &str) -> Result<Option<String>, SessionError> {
            Ok(None)
        }
        fn bot_secret_create(&self, _: &str, s: &str) -> Result<String, SessionError> {
            Ok(s.to_owned())
        }
    }

    const RULES: &str = ".vak/prompts/operating-rules.md";
    const ROLE: &str = ".vak/prompts/agents/reviewer/identity.md";

    fn home() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Utf8Path::from_path(dir.path()).expect("utf8").to_owned();
        (dir, path)
    }

    fn read(home: &Utf8Path, rel: &str) -> Option<String> {
        std::fs::read_to_string(home.join(rel)).ok()
    }

    #[test]
    fn an_empty_home_gets_the_store_files_and_a_second_sync_takes_no_snapshot() {
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        store.set(ROLE, Some("I review.\n"));
        let synced = sync_home(&home, &store, "memory", false).expect("sync");
        assert!(synced.changed);
        assert_eq!(read(&home, RULES).as_deref(), Some("- rules\n"));
        assert_eq!(read(&home, ROLE).as_deref(), Some("I review.\n"));
        let snapshots = *store.snapshots.lock().expect("lock");
        let again = sync_home(&home, &store, "memory", false).expect("sync");
        assert!(!again.changed);
        assert_eq!(again.generation, synced.generation);
        assert_eq!(*store.snapshots.lock().expect("lock"), snapshots);
    }

    #[test]
    fn a_change_or_removal_in_the_store_follows_to_files_vak_wrote() {
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        store.set(ROLE, Some("I review.\n"));
        sync_home(&home, &store, "memory", false).expect("sync");
        store.set(RULES, Some("- new rules\n"));
        store.set(ROLE, None);
        let synced = sync_home(&home, &store, "memory", false).expect("sync");
        assert!(synced.changed);
        assert_eq!(read(&home, RULES).as_deref(), Some("- new rules\n"));
        assert_eq!(read(&home, ROLE), None);
    }

    #[test]
    fn a_sync_killed_half_way_is_finished_by_the_next_even_after_the_store_moved_on() {
        const SURFACE: &str = ".vak/prompts/surface/telegram/identity.md";
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(RULES, Some("- rules 1\n"));
        sync_home(&home, &store, "memory", false).expect("sync");
        // The next sync dies after writing the rules (sorted first) and
        // before the surface file: `surface` is a file, so its directory
        // cannot be made. That is what a kill in between leaves behind.
        store.set(RULES, Some("- rules 2\n"));
        store.set(SURFACE, Some("on telegram\n"));
        std::fs::write(home.join(".vak/prompts/surface"), "in the way").expect("write");
        sync_home(&home, &store, "memory", false).expect_err("dies half-way");
        assert_eq!(read(&home, RULES).as_deref(), Some("- rules 2\n"));
        std::fs::remove_file(home.join(".vak/prompts/surface")).expect("rm");
        // The store moves on before the node syncs again: the rules file
        // holds a text vak wrote, not a hand edit.
        store.set(RULES, Some("- rules 3\n"));
        let synced = sync_home(&home, &store, "memory", false).expect("finished");
        assert!(synced.changed);
        assert_eq!(read(&home, RULES).as_deref(), Some("- rules 3\n"));
        assert_eq!(read(&home, SURFACE).as_deref(), Some("on telegram\n"));
        // Complete again: the write-ahead digests are gone, so a hand edit
        // back to an older text is still a hand edit.
        std::fs::write(home.join(RULES), "- rules 2\n").expect("write");
        let error = sync_home(&home, &store, "memory", false).expect_err("refused");
        assert!(matches!(error, HomeError::EditedByHand { .. }), "{error}");
    }

    #[test]
    fn a_replica_file_deleted_by_hand_is_written_back_and_a_new_one_refused() {
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        sync_home(&home, &store, "memory", false).expect("sync");
        std::fs::remove_file(home.join(RULES)).expect("rm");
        let synced = sync_home(&home, &store, "memory", false).expect("sync");
        assert!(synced.changed);
        assert_eq!(read(&home, RULES).as_deref(), Some("- rules\n"));
        std::fs::create_dir_all(home.join(".vak/prompts/agents/reviewer")).expect("mkdir");
        std::fs::write(home.join(ROLE), "new here\n").expect("write");
        let error = sync_home(&home, &store, "memory", false).expect_err("refused");
        assert!(matches!(error, HomeError::NotInStore { .. }), "{error}");
    }

    #[test]
    fn an_operator_file_the_store_lacks_is_refused_and_nothing_is_written() {
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        std::fs::create_dir_all(home.join(".vak/prompts/agents/reviewer")).expect("mkdir");
        std::fs::write(home.join(ROLE), "mine\n").expect("write");
        let error = sync_home(&home, &store, "memory", false).expect_err("refused");
        assert!(matches!(error, HomeError::NotInStore { .. }), "{error}");
        assert!(
            error
                .to_string()
                .contains("vak store import --from file --store URL")
        );
        assert_eq!(read(&home, ROLE).as_deref(), Some("mine\n"));
        assert_eq!(read(&home, RULES), None, "nothing written");
    }

    #[test]
    fn a_replica_file_edited_by_hand_is_reported_not_overwritten() {
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        sync_home(&home, &store, "memory", false).expect("sync");
        std::fs::write(home.join(RULES), "- by hand\n").expect("write");
        // Noticed at once, though the store did not move.
        let error = sync_home(&home, &store, "memory", false).expect_err("refused");
        assert!(matches!(error, HomeError::EditedByHand { .. }), "{error}");
        store.set(RULES, Some("- newer\n"));
        let error = sync_home(&home, &store, "memory", false).expect_err("refused");
        assert!(matches!(error, HomeError::EditedByHand { .. }), "{error}");
        assert_eq!(read(&home, RULES).as_deref(), Some("- by hand\n"));
        // Moved away: the store's version is written.
        std::fs::remove_file(home.join(RULES)).expect("rm");
        sync_home(&home, &store, "memory", false).expect("sync");
        assert_eq!(read(&home, RULES).as_deref(), Some("- newer\n"));
    }

    #[test]
    fn until_the_store_is_seeded_a_node_with_its_own_files_keeps_them() {
        let (_dir, home) = home();
        let store = Memory::default();
        std::fs::create_dir_all(home.join(".vak/prompts")).expect("mkdir");
        std::fs::write(home.join(RULES), "mine\n").expect("write");
        let synced = sync_home(&home, &store, "memory", true).expect("legacy");
        assert_eq!(synced.generation, UNSEEDED);
        assert!(!synced.changed);
        assert_eq!(read(&home, RULES).as_deref(), Some("mine\n"));
        assert_eq!(read(&home, REPLICA_MANIFEST), None);
        // Seeded (imported elsewhere): the store is the truth, and a file
        // of the same text is taken as the store's.
        store.set(RULES, Some("mine\n"));
        store.set(ROLE, Some("I review.\n"));
        let synced = sync_home(&home, &store, "memory", false).expect("sync");
        assert!(synced.changed);
        assert_eq!(read(&home, ROLE).as_deref(), Some("I review.\n"));
    }

    #[test]
    fn a_symlinked_prompts_directory_is_never_written_through() {
        let (_dir, home) = home();
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(home.join(".vak")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), home.join(".vak/prompts")).expect("symlink");
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        assert!(sync_home(&home, &store, "memory", false).is_err());
        assert!(!outside.path().join("operating-rules.md").exists());
    }
}
