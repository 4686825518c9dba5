//! Which store a command uses, opening it, migrating it and
//! moving a file store into PostgreSQL.
//!
//! The store is chosen by `--store URL`, else `VAK_STORE`, else `[store]
//! url` in the *shared* config (`$VAK_HOME/.vak/config.toml`; a project
//! config may never choose it), else the file store of the home.

use std::fmt;
use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use sha2::{Digest, Sha256};
use vak_core::Core;
use vak_core::history::{History, VersionRecord};
use vak_core::prompts::{Escaped, FileStore, Ledger, Record, SessionError, Store, read_safely};
use vak_store_pg::{EventsImported, PgStore};

use crate::LifecycleError;

/// Where the store URL came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSource {
    /// `--store`.
    Flag,
    /// `VAK_STORE`.
    Env,
    /// `[store] url` in the shared config at this path.
    SharedConfig(Utf8PathBuf),
    /// Nothing chose one: the home's files.
    Default,
}

impl fmt::Display for StoreSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSource::Flag => f.write_str("--store"),
            StoreSource::Env => f.write_str("VAK_STORE"),
            StoreSource::SharedConfig(path) => {
                write!(f, "`[store] url` in `{}`", Escaped(path.as_str()))
            }
            StoreSource::Default => f.write_str("the default"),
        }
    }
}

/// A store URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// The files of the home (`file`).
    File,
    /// A PostgreSQL database (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

impl StoreUrl {
    /// Parse `raw`, naming `source` in the refusal.
    pub fn parse(raw: &str, source: &StoreSource) -> Result<Self, LifecycleError> {
        let raw = raw.trim();
        if raw == "file" || raw == "file:" {
            Ok(StoreUrl::File)
        } else if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            Ok(StoreUrl::Postgres(raw.to_owned()))
        } else {
            Err(LifecycleError::BadStoreUrl {
                from: source.to_string(),
            })
        }
    }
}

/// The shared config (`$VAK_HOME/.vak/config.toml`), parsed, with its
/// path; `None` when there is none. Read like a prompt file (confined to
/// the home, bounded). A project's config is never read here: what it
/// holds cannot choose a store nor loosen the gateway.
pub(crate) fn shared_config(
    home: &Utf8Path,
) -> Result<Option<(Utf8PathBuf, toml::Table)>, LifecycleError> {
    let path = home.join(".vak").join("config.toml");
    let text = read_safely(&path, home).map_err(|refusal| LifecycleError::SharedConfig {
        path: path.clone(),
        reason: refusal.to_string(),
    })?;
    let Some(text) = text else {
        return Ok(None);
    };
    let table = text
        .parse::<toml::Table>()
        .map_err(|e| LifecycleError::SharedConfig {
            path: path.clone(),
            reason: format!("not valid TOML: {}", e.message()),
        })?;
    Ok(Some((path, table)))
}

/// The store URL for `home`, and where it came from.
pub fn choose_store(
    home: &Utf8Path,
    flag: Option<&str>,
) -> Result<(StoreUrl, StoreSource), LifecycleError> {
    if let Some(raw) = flag {
        return Ok((StoreUrl::parse(raw, &StoreSource::Flag)?, StoreSource::Flag));
    }
    if let Some(raw) = std::env::var("VAK_STORE").ok().filter(|v| !v.is_empty()) {
        return Ok((StoreUrl::parse(&raw, &StoreSource::Env)?, StoreSource::Env));
    }
    if let Some((path, table)) = shared_config(home)?
        && let Some(store) = table.get("store")
    {
        let url = store
            .get("url")
            .and_then(toml::Value::as_str)
            .ok_or_else(|| LifecycleError::SharedConfig {
                path: path.clone(),
                reason: "`[store]` needs `url = \"file\"` or `url = \"postgres://…\"`".to_owned(),
            })?;
        let source = StoreSource::SharedConfig(path);
        return Ok((StoreUrl::parse(url, &source)?, source));
    }
    Ok((StoreUrl::File, StoreSource::Default))
}

/// Open the store for `home` as [`choose_store`] picks it. A PostgreSQL
/// store must carry this build's schema.
pub fn open_store(home: &Utf8Path, flag: Option<&str>) -> Result<Arc<dyn Store>, LifecycleError> {
    open_store_sized(home, flag).map(|(store, _)| store)
}

/// [`open_store`], and how many deliveries the store runs at once: a
/// PostgreSQL store's connections and what its batches hold
/// (`PgStore::deliveries_at_once`), none for the file store (its
/// deliveries wait on no pool).
pub(crate) fn open_store_sized(
    home: &Utf8Path,
    flag: Option<&str>,
) -> Result<(Arc<dyn Store>, Option<usize>), LifecycleError> {
    match choose_store(home, flag)?.0 {
        StoreUrl::File => Ok((Arc::new(FileStore::new(home)), None)),
        StoreUrl::Postgres(url) => {
            let store = PgStore::open(&url)?;
            let width = store.deliveries_at_once();
            Ok((Arc::new(store), Some(width)))
        }
    }
}

/// A reader's view of the home side: when the store chosen
/// for `core`'s home (`flag`, `VAK_STORE`, `[store] url`) holds the home
/// side, bring this home's replica up to it and hand back `core` on that
/// store, so `vak prompts show` on a node reads what every node resolves.
/// The file store is not opened: nothing changes and nothing is read
/// beyond the shared config.
///
/// # Errors
///
/// A store that cannot be opened; a sync the replica's rules refuse.
pub fn on_chosen_store(core: Core, flag: Option<&str>) -> Result<Core, LifecycleError> {
    let home = core.selectors().home.clone();
    if let StoreUrl::File = choose_store(&home, flag)?.0 {
        return Ok(core);
    }
    let store = open_store(&home, flag)?;
    vak_core::home::sync_if_shared(&home, &*store, false)?;
    Ok(core.with_store(store))
}

/// What `vak store migrate` did.
#[derive(Debug, Clone)]
pub enum Migrated {
    /// The file store has no schema.
    FileStore,
    /// The PostgreSQL store: versions applied now (empty: already current).
    Postgres {
        /// The store.
        store: String,
        /// The versions applied by this call.
        applied: Vec<i32>,
    },
}

/// `vak store migrate`.
pub fn migrate(home: &Utf8Path, flag: Option<&str>) -> Result<Migrated, LifecycleError> {
    match choose_store(home, flag)?.0 {
        StoreUrl::File => Ok(Migrated::FileStore),
        StoreUrl::Postgres(url) => {
            let store = PgStore::connect(&url)?;
            let applied = store.migrate()?;
            Ok(Migrated::Postgres {
                store: store.describe(),
                applied,
            })
        }
    }
}

/// What `vak store import` copied and verified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    /// Sessions copied now.
    pub sessions: usize,
    /// Sessions that were already there with the same digest.
    pub already_there: usize,
    /// Records (turns, accepted drifts) across the copied sessions.
    pub records: usize,
    /// Audit events copied.
    pub events: usize,
    /// Bindings copied now (one the database already held is left as it
    /// is).
    pub bindings: usize,
    /// Kept texts copied (or already there), each read back and re-hashed.
    pub objects: usize,
    /// Kept texts not copied because the file store's copy was altered (or
    /// unreadable): the error for each, naming its digest.
    pub objects_refused: Vec<String>,
    /// Version records copied.
    pub versions: usize,
    /// Version records of home-side files an earlier build's import left
    /// in the database under the file store's name for them (the file's
    /// path), where `vak prompts log --store` does not look: counted as
    /// imported, and said.
    pub versions_under_old_keys: usize,
    /// Home-side files copied.
    pub home_files: usize,
    /// Home-side files the store already held with the same digest.
    pub home_already_there: usize,
    /// Signing secrets copied.
    pub secrets: usize,
    /// Replay markers copied now: signatures the file store took that the
    /// database did not hold yet.
    pub replay_markers: usize,
}

/// The digest of a ledger's content: header and records, as the store
/// writes them.
pub fn ledger_digest(ledger: &Ledger) -> Result<String, SessionError> {
    let mut hasher = Sha256::new();
    let mut feed = |value: &Record| -> Result<(), SessionError> {
        let line = serde_json::to_vec(value).map_err(|source| SessionError::Encode {
            path: ledger.path.clone(),
            source,
        })?;
        hasher.update(&line);
        hasher.update(b"\n");
        Ok(())
    };
    feed(&Record::Created(Box::new(ledger.header.clone())))?;
    for record in &ledger.records {
        feed(record)?;
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// `vak store import --from file --store URL`: copy the file store of
/// `home` into the PostgreSQL store at `url` (migrated first), then read
/// every copied ledger back and compare digests, and compare counts.
pub fn import_file(home: &Utf8Path, url: &str) -> Result<Imported, LifecycleError> {
    import_file_with(home, url, |_, _| {})
}

/// [`import_file`], calling `progress(done, total)` after each session is
/// copied and checked, for a caller that shows progress.
///
/// # Errors
///
/// As [`import_file`].
pub fn import_file_with(
    home: &Utf8Path,
    url: &str,
    mut progress: impl FnMut(usize, usize),
) -> Result<Imported, LifecycleError> {
    let files = FileStore::new(home);
    let target = PgStore::connect(url)?;
    // One import at a time into a database, from migration to the last
    // check: two at once would each see the other's half-done copy.
    let _only_import = target.lock_import()?;
    target.migrate()?;
    // A chat bound to a session a killed delivery left pending has its
    // ledger promoted first, as the file store's next delivery would, so
    // the binding is copied with the session it names.
    files.finish_pending_bindings()?;
    let mut report = Imported::default();
    let foreign = |present: usize, copied: &str| LifecycleError::ImportMismatch {
        what: format!(
            "the database holds {present} audit events that are not the file store's oldest ones (it has a history of its own, such as a gateway delivering to it); {copied}: import into an empty database, or into the one an earlier import filled before any node used it"
        ),
    };
    // Checked before anything is copied: the database's audit events must
    // be the file log's first ones (none, or those an earlier import
    // copied). Any other is a history of its own, and nothing of this one
    // goes in beside it. Checked again, with the copy, in one transaction
    // below: a node may deliver in between.
    let mut events = files.audit_newest(usize::MAX)?.events;
    events.reverse();
    let present = target.audit_newest(usize::MAX)?.events;
    let oldest = events.get(..present.len());
    if !oldest.is_some_and(|oldest| present.iter().rev().eq(oldest)) {
        return Err(foreign(present.len(), "nothing was copied"));
    }
    let (ids, total) = files.list_newest(usize::MAX)?;
    for (done, id) in ids.iter().rev().enumerate() {
        progress(done, total);
        let ledger = files.read(id)?;
        let digest = ledger_digest(&ledger)?;
        if target.import_session(&ledger)? {
            report.sessions += 1;
            report.records += ledger.records.len();
        } else {
            report.already_there += 1;
        }
        let back = target.read(id)?;
        if ledger_digest(&back)? != digest {
            return Err(LifecycleError::ImportMismatch {
                what: format!("session `{id}` differs between the two stores"),
            });
        }
    }
    progress(total, total);
    if report.sessions + report.already_there != total {
        return Err(LifecycleError::ImportMismatch {
            what: format!(
                "{total} sessions in the file store, {} copied or present",
                report.sessions + report.already_there
            ),
        });
    }
    // The ones the database lacks are the newest, appended after those it
    // holds, checked and read back in one transaction.
    report.events = match target.import_events(&events)? {
        EventsImported::Appended(count) => count,
        EventsImported::Foreign { present } => {
            return Err(foreign(
                present,
                "no audit event was copied (the sessions before them were)",
            ));
        }
        EventsImported::Differs => {
            return Err(LifecycleError::ImportMismatch {
                what: "the audit events differ between the two stores; none was copied".to_owned(),
            });
        }
    };
    let home_side = vak_core::home::import_home(
        home,
        &target,
        &target.describe(),
        &vak_core::history::Who::OsUser.label(),
    )?;
    report.home_files = home_side.copied;
    report.home_already_there = home_side.already_there;
    report.secrets = import_secrets(home, &target)?;
    // The requests the file store delivered stay refused as replays on
    // every node of the database.
    for (digest, at) in files.replay_markers()? {
        if target.import_replay(&digest, at)? {
            report.replay_markers += 1;
        }
    }
    // A chat the file store moved on since an earlier import follows it
    // here: the database binds it to a session the file store holds. One
    // the database bound to a session of its own is left as it is.
    let file_sessions: std::collections::HashSet<&str> = ids
        .iter()
        .map(vak_core::prompts::SessionId::as_str)
        .collect();
    let bound_there: std::collections::HashMap<(String, String), vak_core::prompts::SessionId> =
        target
            .bindings()?
            .into_iter()
            .map(|(bot, chat, binding)| ((bot, chat), binding.session_id))
            .collect();
    for (bot, chat, binding) in files.bindings()? {
        let replaces = bound_there
            .get(&(bot.clone(), chat.clone()))
            .map(vak_core::prompts::SessionId::as_str)
            .filter(|there| *there != binding.session_id.as_str() && file_sessions.contains(there));
        if target.import_binding(&bot, &chat, &binding, replaces)? {
            report.bindings += 1;
        }
    }
    let mut want = files.bindings()?;
    let mut got = target.bindings()?;
    want.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    got.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let same = want.len() == got.len()
        && want
            .iter()
            .zip(&got)
            .all(|(w, g)| w.0 == g.0 && w.1 == g.1 && w.2.session_id == g.2.session_id);
    if !same {
        return Err(LifecycleError::ImportMismatch {
            what: "the chat bindings differ between the two stores: the database binds a chat the file store does not, or to another session (a node on the database moved it on since); the database's bindings were left as they are".to_owned(),
        });
    }
    import_history(
        files.file_history(),
        &target,
        &vak_core::history::SharedHomeKeys::of(home),
        &mut report,
    )?;
    Ok(report)
}

/// Copy the kept texts and the version log: every object is read through
/// the file store's verification (an altered one is reported, not copied),
/// kept in `to`, then read back from `to` and compared; the version records
/// the database does not hold yet are appended after the ones it does, which
/// must be the file log's first ones. Each record goes in under the name
/// the database's own saves give its file (`keys`): a home-side file's is
/// relative to the home, not the file store's path.
fn import_history(
    from: &dyn History,
    to: &dyn History,
    keys: &vak_core::history::SharedHomeKeys,
    report: &mut Imported,
) -> Result<(), LifecycleError> {
    for digest in from.object_digests()? {
        let text = match from.get_object(&digest) {
            Ok(text) => text,
            Err(error) => {
                report.objects_refused.push(error.to_string());
                continue;
            }
        };
        to.put_object(&text)?;
        if to.get_object(&digest)? != text {
            return Err(LifecycleError::ImportMismatch {
                what: format!("the kept text {digest} differs between the two stores"),
            });
        }
        report.objects += 1;
    }
    let raw = from.all_versions()?.records;
    let want: Vec<VersionRecord> = raw.iter().map(|r| keys.record(r)).collect();
    let present = to.all_versions()?.records;
    // The n-th record there is the file log's n-th, under the database's
    // name for its file or, copied by an earlier build, under the file's
    // path (left as it is: the log is append-only).
    let same = |records: &[VersionRecord]| {
        records.len() <= want.len()
            && records
                .iter()
                .enumerate()
                .all(|(i, r)| r == &want[i] || r == &raw[i])
    };
    // What is there must be where the file log starts: nothing (a first
    // import), all of it (a repeat), or part of it (an import killed
    // half-way, which this one finishes).
    if !same(&present) {
        return Err(LifecycleError::ImportMismatch {
            what: format!(
                "the database already holds {} version records that are not the first of the file store's {}; import into an empty database",
                present.len(),
                want.len()
            ),
        });
    }
    report.versions_under_old_keys = present
        .iter()
        .zip(&want)
        .filter(|(there, wanted)| there != wanted)
        .count();
    for record in &want[present.len()..] {
        to.append_version(record)?;
        report.versions += 1;
    }
    let copied = to.all_versions()?.records;
    if copied.len() != want.len() || !same(&copied) {
        return Err(LifecycleError::ImportMismatch {
            what: "the version records differ between the two stores".to_owned(),
        });
    }
    Ok(())
}

/// Copy every signing secret under `home` into `target`; a bot whose secret
/// the store already holds with another value is an error (the store's one
/// is what every node verifies with). Returns how many were copied now.
fn import_secrets(home: &Utf8Path, target: &PgStore) -> Result<usize, LifecycleError> {
    use vak_core::prompts::{HomeStore as _, Name, NameKind};
    let dir = home.join(".vak").join("gateway").join("secrets");
    let Ok(entries) = vak_core::files::entries(&dir, usize::MAX) else {
        return Ok(0);
    };
    let mut copied = 0;
    for name in entries.into_iter().filter_map(|e| e.name) {
        let Ok(bot) = Name::new(NameKind::Bot, &name) else {
            continue;
        };
        let Some(secret) = crate::read_secret(home, &bot)? else {
            continue;
        };
        let had = target.bot_secret(bot.as_str())?;
        let kept = target.bot_secret_create(bot.as_str(), &secret)?;
        if kept != secret {
            return Err(LifecycleError::ImportMismatch {
                what: format!(
                    "bot `{bot}` already has another signing secret in the store; the store's is the one every node verifies with, so remove `{}` or the row",
                    crate::secret_path(home, &bot)
                ),
            });
        }
        if had.is_none() {
            copied += 1;
        }
    }
    Ok(copied)
}
