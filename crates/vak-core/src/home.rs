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

use camino::{Utf8Path, Utf8PathBuf};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use vak_prompt_blocks::{Escaped, sha256_hex};
use vak_prompt_loader::{
    GatewayError, GatewayFile, SaveError, SaveOutcome, current_digest, read_safely, remove_checked,
    save_atomic,
};
use vak_session::{
    Expect, GATEWAY_FILES, HomeSnapshot, HomeStore, LAYER_FILES, SHARED_CONFIG, SKILL_FILE,
    SessionError, Store, Swapped, home_side_path,
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
    /// A lock file is not a regular file, or could not be opened or held.
    #[error(transparent)]
    File(#[from] vak_fs::FsError),
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
    /// The sha256 of the whole shared config file as the last complete
    /// sync left it (the store's text and this node's `[store]` table), or
    /// none when there was none: the cheap check compares the file with it
    /// instead of parsing the config on every delivery. `files` records the
    /// text without the table, which is what the store holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config_file: Option<String>,
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
fn lock_replica(home: &Utf8Path) -> Result<vak_fs::Lock, HomeError> {
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
pub fn lock_saves(home: &Utf8Path) -> Result<vak_fs::Lock, HomeError> {
    lock_file(home, SAVE_LOCK)
}

fn lock_file(home: &Utf8Path, rel: &str) -> Result<vak_fs::Lock, HomeError> {
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
    Ok(vak_fs::lock_exclusive(&path)?)
}

/// [`local_files`] but the shared config, without reading it.
fn local_files_except_config(home: &Utf8Path) -> Vec<String> {
    let mut out = local_files_unread(home);
    out.retain(|p| p != SHARED_CONFIG);
    out
}

/// Every home-side file present under `home`, relative to it.
pub fn local_files(home: &Utf8Path) -> Vec<String> {
    let mut out = local_files_unread(home);
    // A shared config that holds nothing but the node's own `[store]`
    // table carries nothing: it is not a home-side file of this home.
    out.retain(|p| p != SHARED_CONFIG || !config_is_node_local(home));
    out
}

/// The home-side files present under `home`, the shared config whatever
/// it holds.
fn local_files_unread(home: &Utf8Path) -> Vec<String> {
    let mut out = Vec::new();
    for file in GATEWAY_FILES {
        out.push(format!(".vak/gateway/{file}"));
    }
    for file in LAYER_FILES {
        out.push(format!(".vak/prompts/{file}"));
    }
    for sub in ["surface", "agents"] {
        let dir = home.join(".vak/prompts").join(sub);
        let Ok(entries) = vak_fs::entries(&dir, usize::MAX) else {
            continue;
        };
        for name in entries.into_iter().filter_map(|e| e.name) {
            for file in LAYER_FILES {
                out.push(format!(".vak/prompts/{sub}/{name}/{file}"));
            }
        }
    }
    // The home's scoped rules, as many as the loader reads at most and then
    // some, so one past its cut is still carried.
    if let Ok(entries) = vak_fs::entries(home.join(".vak/prompts/rules"), MAX_SKILL_DIRS) {
        for name in entries.into_iter().filter_map(|e| e.name) {
            out.push(format!(".vak/prompts/rules/{name}"));
        }
    }
    imported_files(home, &mut out);
    out.push(SHARED_CONFIG.to_owned());
    // As many skill directories as the loader reads at most, and then some:
    // one past its cut is still carried, never silently left behind.
    if let Ok(entries) = vak_fs::entries(home.join(".vak/skills"), MAX_SKILL_DIRS) {
        for name in entries.into_iter().filter_map(|e| e.name) {
            out.push(format!(".vak/skills/{name}/{SKILL_FILE}"));
        }
    }
    out.retain(|p| home_side_path(p) && vak_fs::is_present(home.join(p)));
    out
}

/// At most this many entries below `.vak/prompts/` are looked at for files
/// a block file may import: a home holding more carries the first ones.
const MAX_PROMPT_ENTRIES: usize = 4096;

/// Every other `.md` file below the home's `.vak/prompts/` (files block
/// files may import), relative to the home: regular files only, never
/// through a symlink and never in a hidden directory, so what is carried
/// is what lies in the prompts directory itself. The layer files listed
/// already are left out.
fn imported_files(home: &Utf8Path, out: &mut Vec<String>) {
    let mut pending = vec![(home.join(".vak/prompts"), ".vak/prompts".to_owned())];
    let mut seen = 0usize;
    while let Some((dir, rel)) = pending.pop() {
        // One past what is left of the bound, so crossing it is seen.
        let left = MAX_PROMPT_ENTRIES.saturating_sub(seen) + 1;
        let Ok(entries) = vak_fs::entries(&dir, left) else {
            continue;
        };
        for entry in entries {
            // A name that is not UTF-8 is no file vak carries.
            let Some(name) = entry.name else {
                continue;
            };
            seen += 1;
            if seen > MAX_PROMPT_ENTRIES {
                return;
            }
            if name.starts_with('.') {
                continue;
            }
            let rel = format!("{rel}/{name}");
            if entry.is_dir {
                pending.push((dir.join(&name), rel));
            } else if entry.is_file && name.ends_with(".md") && !out.contains(&rel) {
                out.push(rel);
            }
        }
    }
}

/// At most this many skill directories of the home are carried.
const MAX_SKILL_DIRS: usize = 4096;

/// Whether the home's shared config holds nothing the home side carries
/// (only a `[store]` table, or nothing at all). One that cannot be read or
/// split is not: carrying it reports why.
fn config_is_node_local(home: &Utf8Path) -> bool {
    match read_safely(&home.join(SHARED_CONFIG), home) {
        Ok(None) => true,
        Ok(Some(text)) => {
            split_store_table(&text).is_ok_and(|split| split.shared.trim().is_empty())
        }
        Err(_) => false,
    }
}

/// A shared config cut in two: what the store's home side carries, and the
/// node's own `[store]` table, which never leaves the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitConfig {
    /// Every line but the `[store]` table's (and its sub-tables').
    pub shared: String,
    /// The `[store]` table's lines, as written.
    pub node: String,
}

/// Cut `text` (a shared `config.toml`) into what every node shares and the
/// node-local `[store]` table, keeping each line as written. The cut is
/// checked on the parsed tables: the shared part must be the whole config
/// without its `store` key, and the node's part that key alone, so a
/// `store` set any other way (a dotted key, an inline table) is refused
/// rather than carried to every node.
///
/// # Errors
///
/// A sentence saying why, for the caller to name the file with.
pub fn split_store_table(text: &str) -> Result<SplitConfig, String> {
    let (mut shared, mut node) = (String::new(), String::new());
    let mut in_store = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            let header = trimmed.trim_start_matches('[');
            let name = header.split(']').next().unwrap_or_default().trim();
            in_store = name == "store" || name.starts_with("store.");
        }
        if in_store {
            node.push_str(line);
        } else {
            shared.push_str(line);
        }
    }
    let parse = |text: &str| {
        text.parse::<toml::Table>()
            .map_err(|e| format!("is not valid TOML: {}", e.message()))
    };
    let mut whole = parse(text)?;
    let store = whole.remove("store");
    let clean = parse(&shared).is_ok_and(|rest| rest == whole)
        && parse(&node).is_ok_and(|cut| {
            cut.len() == usize::from(store.is_some()) && cut.get("store") == store.as_ref()
        });
    if !clean {
        return Err(
            "sets `store` other than as a `[store]` table of its own (a dotted key or an inline table), so the node's store cannot be kept apart from what every node shares; write it as a `[store]` table".to_owned(),
        );
    }
    Ok(SplitConfig { shared, node })
}

/// The shared config here: the file's digest (what a write compares
/// with), and its split. `None` when absent.
fn local_config(home: &Utf8Path) -> Result<Option<(String, SplitConfig)>, HomeError> {
    let path = home.join(SHARED_CONFIG);
    let fail = |reason: String| HomeError::Replica {
        action: "read",
        path: path.clone(),
        reason,
    };
    let Some(text) = read_safely(&path, home).map_err(|e| fail(e.to_string()))? else {
        return Ok(None);
    };
    let split = split_store_table(&text).map_err(fail)?;
    Ok(Some((sha256_hex(&text), split)))
}

/// The shared config a node writes: the store's text, then this node's
/// own `[store]` table when it has one.
fn with_node_table(shared: &str, node: &str) -> String {
    if node.is_empty() {
        return shared.to_owned();
    }
    let mut text = shared.to_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(node);
    text
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
///
/// The shared config does not count: a node whose config is all it has
/// (its `[store]` table, a model) took the store's prompt files before the
/// store carried the config too; it still does, and a config with more
/// than its `[store]` table that the store lacks is then refused
/// (`NotInStore`, naming the import) rather than served beside another
/// node's prompts.
fn keeps_own_files(home: &Utf8Path) -> bool {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let keeps = local_files(home).iter().any(|rel| rel != SHARED_CONFIG);
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
///
/// The shared config is compared whole with the digest the last sync left
/// (`Manifest::config_file`), so this check parses nothing; a config that
/// differs (its `[store]` table edited, say) sends the sync down the full
/// path, which compares it without that table.
fn intact(home: &Utf8Path, manifest: &Manifest) -> bool {
    let config_as_left = match current_digest(&home.join(SHARED_CONFIG), home) {
        Ok(here) => here == manifest.config_file,
        Err(_) => false,
    };
    if !config_as_left {
        return false;
    }
    let present = local_files_except_config(home);
    let recorded = manifest
        .files
        .keys()
        .filter(|rel| *rel != SHARED_CONFIG)
        .count();
    present.len() == recorded
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
    let mut plan: Vec<(String, Option<String>, Option<String>)> = Vec::new();
    if let Some(step) = config_step(home, manifest, wanted.get(SHARED_CONFIG).copied())? {
        match step {
            Ok(write) => plan.push(write),
            Err(Ok(by_hand_path)) => by_hand.push(by_hand_path),
            Err(Err(unknown_path)) => unknown.push(unknown_path),
        }
    }
    for rel in &paths {
        if rel == SHARED_CONFIG {
            continue;
        }
        let path = home.join(rel);
        let local = current_digest(&path, home)?;
        match (local, wanted.get(rel.as_str())) {
            (None, Some(text)) => plan.push((rel.clone(), None, Some((*text).to_owned()))),
            (Some(here), Some(text)) => {
                if here == sha256_hex(text) {
                    continue;
                }
                if manifest.wrote(rel, &here) {
                    plan.push((rel.clone(), Some(here), Some((*text).to_owned())));
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
                config_file: None,
            },
        )?;
    }
    for (rel, here, text) in plan {
        let path = home.join(&rel);
        // The digest seen above: a hand edit in between is refused, not lost.
        let expected = here.unwrap_or_default();
        match text {
            Some(text) => {
                save_atomic(&path, home, &text, Some(&expected))?;
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
            config_file: current_digest(&home.join(SHARED_CONFIG), home)?,
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

/// A replica step, or the path refused: `Err(Ok(path))` changed by hand,
/// `Err(Err(path))` not in the store.
type Step = Result<(String, Option<String>, Option<String>), Result<Utf8PathBuf, Utf8PathBuf>>;

/// What the sync does with the shared config: compared without its
/// `[store]` table, which stays this node's (kept below the store's text
/// whenever vak writes the file). A config that holds nothing but that
/// table is replaced by the store's text and the table; one vak wrote is
/// brought up to the store's; any other that differs is a hand edit; and
/// while the store carries none, the node's own is left as it is.
fn config_step(
    home: &Utf8Path,
    manifest: &Manifest,
    wanted: Option<&str>,
) -> Result<Option<Step>, HomeError> {
    let path = home.join(SHARED_CONFIG);
    // Which store a node uses is its own: a copy in the store that names
    // one (an altered row) is refused, never written to the node.
    if let Some(text) = wanted
        && !split_store_table(text).is_ok_and(|split| split.node.is_empty())
    {
        return Err(HomeError::Replica {
            action: "sync",
            path,
            reason: "the store's copy sets `store` or is not valid TOML; a node's store is its own and is never taken from the store, so import the home's config again (`vak store import --from file --store URL`)".to_owned(),
        });
    }
    let Some((file_digest, split)) = local_config(home)? else {
        return Ok(wanted.map(|text| Ok((SHARED_CONFIG.to_owned(), None, Some(text.to_owned())))));
    };
    let here = sha256_hex(&split.shared);
    let ours = manifest.wrote(SHARED_CONFIG, &here) || split.shared.trim().is_empty();
    let write = |text: &str| {
        let merged = with_node_table(text, &split.node);
        // Nothing to write when the merged text is the file already.
        (sha256_hex(&merged) != file_digest).then(|| {
            let step: Step = Ok((
                SHARED_CONFIG.to_owned(),
                Some(file_digest.clone()),
                Some(merged),
            ));
            step
        })
    };
    Ok(match wanted {
        Some(text) if sha256_hex(text) == here => None,
        Some(text) if ours => write(text),
        Some(_) => Some(Err(Ok(path))),
        None if split.shared.trim().is_empty() => None,
        None if ours => write(""),
        // The store carries no shared config (seeded before configs
        // travelled, or from a home that had none): this node's own stays
        // in effect, as it always was, until `vak store import` carries
        // one. Refusing would stop a node that worked yesterday.
        None => None,
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

/// A node's memory of its last check of the replica, so that a delivery
/// does not read the manifest and hash the replica's files while nothing
/// under the home can have changed.
///
/// [`ReplicaCheck::sync`] runs [`sync_home`] (the store's generation, the
/// manifest, a hash of every home-side file) only when the change epoch it
/// is handed ([`crate::PromptCache::change_epoch`], moved by inotify on any
/// change under the home's `.vak`) differs from the one of its last check,
/// and otherwise answers the generation that check saw, touching neither
/// the files nor the store. That generation may be stale when another
/// node saved since: the caller must hand it to a store that compares it
/// under the chat's lock ([`Store::deliver_at`] refuses with
/// [`SessionError::HomeMoved`], nothing written), then call
/// [`ReplicaCheck::forget`] and sync again. A hand edit of the replica
/// moves the epoch, so it is still found and refused by the next check.
#[derive(Debug, Default)]
pub struct ReplicaCheck {
    /// (epoch, generation) of the last check that found the replica intact.
    last: std::sync::Mutex<Option<(u64, i64)>>,
    checks: std::sync::atomic::AtomicU64,
}

impl ReplicaCheck {
    /// Nothing checked yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The generation to resolve and deliver at: from memory when `epoch`
    /// is the last check's, else from [`sync_if_shared`] (not `full`).
    /// `None` for a store without the home side.
    ///
    /// # Errors
    ///
    /// See [`HomeError`].
    pub fn sync(
        &self,
        home: &Utf8Path,
        store: &dyn Store,
        epoch: Option<u64>,
    ) -> Result<Option<Synced>, HomeError> {
        if store.home().is_none() {
            return Ok(None);
        }
        if let Some(epoch) = epoch
            && let Some((seen, generation)) = *self.remembered()
            && seen == epoch
        {
            return Ok(Some(Synced {
                generation,
                changed: false,
            }));
        }
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let synced = sync_if_shared(home, store, false)?;
        // The epoch was taken before the files were read: a change made
        // while they were hashed moves the next epoch, never hides.
        if let (Some(epoch), Some(synced)) = (epoch, synced) {
            *self.remembered() = Some((epoch, synced.generation));
        }
        Ok(synced)
    }

    /// Drop what was remembered: the store said the home side moved, so
    /// the next [`ReplicaCheck::sync`] asks it.
    pub fn forget(&self) {
        *self.remembered() = None;
    }

    /// How many times the replica was checked against the store (its
    /// manifest read and its files hashed) rather than answered from
    /// memory.
    pub fn checks(&self) -> u64 {
        self.checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, Option<(u64, i64)>> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                .map(|doc| match reread(&path) {
                    Ok(text) if sha256_hex(&text) == doc.digest => Ok(text),
                    Ok(_) => Err("it changed while it was being imported".to_owned()),
                    Err(e) => Err(e),
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
        let Some(mut text) = text else { continue };
        if rel == SHARED_CONFIG {
            // Every node shares it but the `[store]` table: that names this
            // node's store and stays here.
            text = split_store_table(&text)
                .map_err(|reason| HomeError::Replica {
                    action: "import",
                    path: path.clone(),
                    reason,
                })?
                .shared;
        }
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

/// The text of a gateway file the confined reader has just checked, read
/// again for its exact bytes: as the floor opens a store's file (no link, no
/// FIFO), and bounded as the confined read was, since more bytes than that
/// mean it changed in between.
fn reread(path: &Utf8Path) -> Result<String, String> {
    use std::io::Read as _;
    let file = vak_fs::open_read(path)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "it vanished while it was being imported".to_owned())?;
    let mut bytes = Vec::new();
    file.take(vak_prompt_loader::MAX_GATEWAY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "it changed while it was being imported".to_owned())
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

    /// Files a block file imports travel like block files: a store's
    /// `.vak/prompts/parts/tone.md` is written to the replica (its
    /// directory made), and a home lists its own for the store, but never a
    /// hidden file, a symlink or a file that is not `.md`.
    #[test]
    fn imported_files_travel_and_only_plain_md_files_are_listed() {
        const TONE: &str = ".vak/prompts/parts/tone.md";
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(TONE, Some("Be brief.\n"));
        sync_home(&home, &store, "memory", false).expect("sync");
        assert_eq!(read(&home, TONE).as_deref(), Some("Be brief.\n"));

        let prompts = home.join(".vak/prompts");
        std::fs::create_dir_all(prompts.join(".drafts")).expect("dir");
        std::fs::write(prompts.join(".drafts/x.md"), "draft").expect("write");
        std::fs::write(prompts.join("parts/.swap.md"), "swap").expect("write");
        std::fs::write(prompts.join("notes.txt"), "notes").expect("write");
        std::fs::write(home.join(".vak/token"), "secret").expect("write");
        std::os::unix::fs::symlink(home.join(".vak/token"), prompts.join("token.md"))
            .expect("symlink");
        let listed: Vec<String> = local_files(&home)
            .into_iter()
            .filter(|p| p.starts_with(".vak/prompts/"))
            .collect();
        assert_eq!(listed, [TONE]);
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

    /// The shared config travels without the node's `[store]` table: a
    /// node whose config is only that table takes the store's text and
    /// keeps its table below it, later changes follow, and editing the
    /// node's own table is never a hand edit of the home side.
    /// A store that carries no shared config leaves the node's own in
    /// effect, cap and all, as before configs travelled: the node keeps
    /// serving, and nothing is written over its config.
    #[test]
    fn a_store_without_a_shared_config_leaves_the_nodes_own() {
        let (_dir, home) = home();
        let own = "[prompts]\nmax_tokens = 1500\n\n[store]\nurl = \"postgres://node-a/vak\"\n";
        std::fs::create_dir_all(home.join(".vak")).expect("dir");
        std::fs::write(home.join(SHARED_CONFIG), own).expect("write");
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        sync_home(&home, &store, "memory", false).expect("the node serves");
        assert_eq!(read(&home, SHARED_CONFIG).as_deref(), Some(own));
        sync_home(&home, &store, "memory", false).expect("and again, on the cheap path");
        assert_eq!(read(&home, SHARED_CONFIG).as_deref(), Some(own));
    }

    #[test]
    fn the_shared_config_is_synced_around_the_nodes_own_store_table() {
        let (_dir, home) = home();
        let own = "[store]\nurl = \"postgres://node-a/vak\"\n";
        std::fs::create_dir_all(home.join(".vak")).expect("dir");
        std::fs::write(home.join(SHARED_CONFIG), own).expect("write");
        let store = Memory::default();
        store.set(RULES, Some("- rules\n"));
        store.set(SHARED_CONFIG, Some("model = \"gpt-4o\"\n"));
        assert!(
            sync_home(&home, &store, "memory", false)
                .expect("sync")
                .changed
        );
        let merged = read(&home, SHARED_CONFIG).expect("config");
        assert_eq!(merged, format!("model = \"gpt-4o\"\n{own}"));
        // The cheap path next: no snapshot, the config compared whole.
        let snapshots = *store.snapshots.lock().expect("lock");
        assert!(
            !sync_home(&home, &store, "memory", false)
                .expect("sync")
                .changed
        );
        assert_eq!(*store.snapshots.lock().expect("lock"), snapshots);
        // The node's own table is its own to edit.
        std::fs::write(home.join(SHARED_CONFIG), merged.replace("node-a", "node-b")).expect("w");
        assert!(
            !sync_home(&home, &store, "memory", false)
                .expect("sync")
                .changed
        );
        store.set(SHARED_CONFIG, Some("model = \"o3\"\n"));
        assert!(
            sync_home(&home, &store, "memory", false)
                .expect("sync")
                .changed
        );
        assert_eq!(
            read(&home, SHARED_CONFIG).as_deref(),
            Some("model = \"o3\"\n[store]\nurl = \"postgres://node-b/vak\"\n")
        );
        // A hand edit of the shared part is refused, as for any file.
        std::fs::write(home.join(SHARED_CONFIG), "model = \"mine\"\n").expect("w");
        store.set(SHARED_CONFIG, Some("model = \"o4\"\n"));
        let refused = sync_home(&home, &store, "memory", false).expect_err("by hand");
        assert!(
            matches!(refused, HomeError::EditedByHand { .. }),
            "{refused}"
        );
    }

    #[test]
    fn a_store_copy_that_names_a_store_is_never_written() {
        let (_dir, home) = home();
        let store = Memory::default();
        store.set(
            SHARED_CONFIG,
            Some("[store]\nurl = \"postgres://elsewhere/x\"\n"),
        );
        let refused = sync_home(&home, &store, "memory", false).expect_err("refused");
        assert!(
            refused.to_string().contains("never taken from the store"),
            "{refused}"
        );
        assert_eq!(read(&home, SHARED_CONFIG), None);
    }

    #[test]
    fn a_store_table_is_cut_as_written_and_any_other_spelling_refused() {
        let split = split_store_table(
            "model = \"x\"\n[store]\nurl = \"u\"\n[store.pool]\nmax = 2\n[prompts]\nmax_tokens = 9\n",
        )
        .expect("split");
        assert_eq!(split.shared, "model = \"x\"\n[prompts]\nmax_tokens = 9\n");
        assert_eq!(split.node, "[store]\nurl = \"u\"\n[store.pool]\nmax = 2\n");
        for bad in [
            "store.url = \"u\"\n",
            "store = { url = \"u\" }\n",
            "s = \"\"\"\n[store]\n\"\"\"\n",
            "not toml [",
        ] {
            assert!(split_store_table(bad).is_err(), "{bad}");
        }
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
