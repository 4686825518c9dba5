//! The file store's session ledgers: one append-only JSON-lines file per
//! session under `$VAK_HOME/.vak/sessions/<id>.jsonl`, holding the records
//! `vak_session::Record` defines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};

use camino::{Utf8Path, Utf8PathBuf};
use vak_session::{
    BoundSession, FrozenContract, Header, Ledger, Record, SessionError, SessionId, SessionMeta,
};

use crate::jsonl;

impl jsonl::JsonLine for Record {
    fn from_line(line: &[u8]) -> serde_json::Result<Self> {
        Record::from_json(line)
    }
}

/// The directory of session ledgers. Every operation names one session by a
/// validated [`SessionId`] and touches only that session's file, so the
/// cost of a resume does not grow with the number of sessions stored.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: Utf8PathBuf,
    /// The home the directory belongs to, when made by [`SessionStore::new`]:
    /// then the directory must not lead out of it.
    home: Option<Utf8PathBuf>,
}

/// How many fresh ids `create` tries before giving up on collisions.
const CREATE_ATTEMPTS: usize = 8;

/// How long a pending ledger may wait for its delivery to finish: far past
/// any delivery in flight and any sender's retry window, so only what a
/// kill left and nobody came back for is swept.
pub const PENDING_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

impl SessionStore {
    /// The store of `$VAK_HOME` (`home`): `home/.vak/sessions/`.
    pub fn new(home: &Utf8Path) -> Self {
        SessionStore {
            dir: home.join(".vak").join("sessions"),
            home: Some(home.to_owned()),
        }
    }

    /// The directory, once it is known not to lead out of its home.
    fn checked(&self) -> Result<&Utf8Path, SessionError> {
        crate::file::in_home(self.home.as_deref(), &self.dir)?;
        Ok(&self.dir)
    }

    /// A store in an explicit directory.
    pub fn at(dir: impl Into<Utf8PathBuf>) -> Self {
        SessionStore {
            dir: dir.into(),
            home: None,
        }
    }

    /// The sessions directory.
    pub fn dir(&self) -> &Utf8Path {
        &self.dir
    }

    /// The ledger file of `id`. The id is validated, so this stays inside
    /// [`dir`](Self::dir).
    pub fn path_of(&self, id: &SessionId) -> Utf8PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    /// Start a session: generate an id and write its `created` record.
    ///
    /// The ledger is written in full to a temporary file and then linked to
    /// its name, which fails rather than replaces if the name exists: a
    /// reader never sees a ledger without its contract, and one id names
    /// exactly one file.
    pub fn create(
        &self,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError> {
        self.create_in(self.checked()?.to_owned(), meta, contract)
    }

    /// Start a session whose ledger waits in `sessions/pending/` until
    /// [`promote`](Self::promote) moves it to its name: what a chat's
    /// delivery creates before it binds the chat, so a delivery killed or
    /// refused before its binding leaves no session that `session list`
    /// shows. Pending ledgers older than [`PENDING_MAX_AGE`] (left by a
    /// kill, and not finished by the chat's next delivery) are removed
    /// here.
    pub fn create_pending(
        &self,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError> {
        self.checked()?;
        let dir = self.pending_dir()?;
        self.sweep_pending(&dir);
        self.create_in(dir, meta, contract)
    }

    /// Write a fresh ledger into `dir` (see [`create`](Self::create)).
    fn create_in(
        &self,
        dir: Utf8PathBuf,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError> {
        jsonl::ensure_dir(&dir)?;
        let record = Record::Created(Box::new(Header { meta, contract }));
        let mut line = serde_json::to_vec(&record).map_err(|source| SessionError::Encode {
            path: dir.clone(),
            source,
        })?;
        line.push(b'\n');
        let mut last_err = None;
        for _ in 0..CREATE_ATTEMPTS {
            let id = SessionId::generate();
            // Unique among the live and the pending ledgers both.
            if self.exists(&id) || self.pending_exists(&id) {
                continue;
            }
            let path = dir.join(format!("{id}.jsonl"));
            let temp = dir.join(format!(".{id}.creating"));
            write_new(&temp, &line)?;
            let linked = std::fs::hard_link(&temp, &path);
            let _ = std::fs::remove_file(&temp);
            match linked {
                Ok(()) => {
                    jsonl::sync_dir(&dir)?;
                    tracing::debug!(%id, %path, "created session ledger");
                    return Ok(id);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => return Err(SessionError::io("create", path, e)),
            }
        }
        let e = last_err.unwrap_or_else(|| std::io::Error::from(ErrorKind::AlreadyExists));
        Err(SessionError::io("create a session in", dir, e))
    }

    /// `sessions/pending/`, once it is known not to lead out of the home.
    fn pending_dir(&self) -> Result<Utf8PathBuf, SessionError> {
        let dir = self.dir.join("pending");
        crate::file::in_home(self.home.as_deref(), &dir)?;
        Ok(dir)
    }

    fn pending_path(&self, id: &SessionId) -> Utf8PathBuf {
        self.dir.join("pending").join(format!("{id}.jsonl"))
    }

    /// Whether `id`'s ledger is still pending (created, not yet promoted).
    pub fn pending_exists(&self, id: &SessionId) -> bool {
        crate::file::is_present(&self.pending_path(id))
    }

    /// The `created` record of `id`'s pending ledger.
    pub fn read_pending_header(&self, id: &SessionId) -> Result<Header, SessionError> {
        let path = self.pending_dir()?.join(format!("{id}.jsonl"));
        match jsonl::read_first::<Record>(&path)? {
            Some(Record::Created(header)) => Ok(*header),
            None => Err(SessionError::NotFound {
                id: id.to_string(),
                path,
            }),
            _ => Err(SessionError::MissingHeader { path }),
        }
    }

    /// Move `id`'s pending ledger to its name, durably. `Ok(false)` when
    /// nothing is pending for `id` (never created pending, or promoted
    /// already: the rename is the whole step, so there is no state between).
    pub fn promote(&self, id: &SessionId) -> Result<bool, SessionError> {
        let dir = self.checked()?.to_owned();
        let pending = self.pending_dir()?.join(format!("{id}.jsonl"));
        let path = self.path_of(id);
        match std::fs::symlink_metadata(&pending) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => {
                return Err(SessionError::NotRegular {
                    path: pending,
                    kind: "not a regular file",
                });
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(SessionError::io("inspect", pending, e)),
        }
        std::fs::rename(&pending, &path).map_err(|e| SessionError::io("promote", path, e))?;
        jsonl::sync_dir(&dir)?;
        Ok(true)
    }

    /// Remove `id`'s pending ledger (a delivery that created it was refused
    /// before anything named it). Best effort: what is left is swept.
    pub fn remove_pending(&self, id: &SessionId) {
        let _ = std::fs::remove_file(self.pending_path(id));
    }

    /// Remove the pending ledgers (and half-written temporary files) last
    /// modified more than [`PENDING_MAX_AGE`] ago. The directory only ever
    /// holds deliveries in flight and what kills left, so this stays cheap.
    fn sweep_pending(&self, dir: &Utf8Path) {
        let removed = crate::file::remove_files_older_than(dir, PENDING_MAX_AGE);
        if removed > 0 {
            tracing::info!(removed, dir = %dir, "removed sessions killed deliveries left pending");
        }
    }

    /// Append one record to `id`'s ledger: exclusive lock, one full line,
    /// fsync. Returns once the record is durable.
    pub fn append(&self, id: &SessionId, record: &Record) -> Result<(), SessionError> {
        if matches!(record, Record::Created(_) | Record::Unknown) {
            return Err(SessionError::NotAppendable {
                kind: record.kind(),
                id: id.to_string(),
            });
        }
        let path = self.existing(id)?;
        let line = serde_json::to_vec(record).map_err(|source| SessionError::Encode {
            path: path.clone(),
            source,
        })?;
        jsonl::append::<Record>(&path, line, false)
    }

    /// Read `id`'s ledger. A torn last line is skipped and reported in
    /// [`Ledger::warnings`]; a bad earlier line is an error.
    pub fn read(&self, id: &SessionId) -> Result<Ledger, SessionError> {
        let path = self.existing(id)?;
        let parsed = jsonl::read::<Record>(&path)?;
        let mut records = parsed.records.into_iter();
        let header = match records.next() {
            Some((1, Record::Created(header))) => *header,
            _ => return Err(SessionError::MissingHeader { path }),
        };
        let mut known = Vec::new();
        let mut skipped_unknown = 0;
        for (line, record) in records {
            match record {
                Record::Created(_) => return Err(SessionError::DuplicateHeader { path, line }),
                Record::Unknown => skipped_unknown += 1,
                other => known.push(other),
            }
        }
        if let Some(torn) = &parsed.torn {
            tracing::warn!("{torn}");
        }
        Ok(Ledger {
            id: id.clone(),
            path,
            header,
            records: known,
            skipped_unknown,
            warnings: parsed.torn.into_iter().collect(),
        })
    }

    /// What a chat's delivery needs of `id`'s ledger — its `created`
    /// record, first and last turns and how many turns there are — read
    /// from its first lines and its last line only, so a delivery costs the
    /// same however long the chat is. A ledger whose last turn does not say
    /// its number (written before turns were numbered, or by `exec`), or
    /// whose ends are not as a delivery writes them, is read whole.
    pub fn read_ends(&self, id: &SessionId) -> Result<BoundSession, SessionError> {
        let path = self.existing(id)?;
        if let Some(ends) = self.ends_of(id, &path)? {
            return Ok(ends);
        }
        Ok(BoundSession::of(self.read(id)?))
    }

    /// [`read_ends`](Self::read_ends) from the two ends; `None` when the
    /// ledger must be read whole.
    fn ends_of(
        &self,
        id: &SessionId,
        path: &Utf8Path,
    ) -> Result<Option<BoundSession>, SessionError> {
        let Some(head) = jsonl::read_head::<Record>(path, 2)? else {
            return Ok(None);
        };
        let mut head = head.into_iter();
        let Some(Record::Created(header)) = head.next() else {
            return Ok(None);
        };
        let first_turn = match head.next() {
            None => None,
            Some(Record::Turn(turn)) => Some(turn),
            Some(_) => return Ok(None),
        };
        let (last_turn, turns) = match (jsonl::read_last::<Record>(path)?, &first_turn) {
            (Some(Record::Created(_)), None) => (None, 0),
            (Some(Record::Turn(last)), Some(_)) => {
                match last.seq.and_then(|n| usize::try_from(n).ok()) {
                    Some(count) if count >= 1 => (Some(last), count),
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(BoundSession {
            id: id.clone(),
            header: *header,
            first_turn,
            last_turn,
            turns,
        }))
    }

    /// Read only `id`'s `created` record: cheap, for listings.
    pub fn read_header(&self, id: &SessionId) -> Result<Header, SessionError> {
        let path = self.existing(id)?;
        match jsonl::read_first::<Record>(&path)? {
            Some(Record::Created(header)) => Ok(*header),
            _ => Err(SessionError::MissingHeader { path }),
        }
    }

    /// Every session id in the store, oldest first (generated ids sort by
    /// creation time). Files whose names are not valid ids are ignored.
    pub fn list(&self) -> Result<Vec<SessionId>, SessionError> {
        let entries = match std::fs::read_dir(self.checked()?) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SessionError::io("list", self.dir.clone(), e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| SessionError::io("list", self.dir.clone(), e))?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                continue;
            };
            match SessionId::parse(stem) {
                Ok(id) => ids.push(id),
                Err(_) => {
                    tracing::debug!(file = stem, "ignoring a file that is not a session ledger")
                }
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// The newest `limit` session ids, newest first, and how many sessions
    /// the store holds. The directory is streamed and only `limit` ids are
    /// kept (a bounded heap), so memory does not grow with the store; no
    /// ledger is opened.
    pub fn list_newest(&self, limit: usize) -> Result<(Vec<SessionId>, usize), SessionError> {
        let entries = match std::fs::read_dir(self.checked()?) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok((Vec::new(), 0)),
            Err(e) => return Err(SessionError::io("list", self.dir.clone(), e)),
        };
        let mut newest = BinaryHeap::with_capacity(limit.saturating_add(1).min(4096));
        let mut total = 0;
        for entry in entries {
            let entry = entry.map_err(|e| SessionError::io("list", self.dir.clone(), e))?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(|stem| SessionId::parse(stem).ok())
            else {
                continue;
            };
            total += 1;
            newest.push(Reverse(id));
            if newest.len() > limit {
                newest.pop();
            }
        }
        // Ascending `Reverse` is descending ids: newest first.
        let ids = newest.into_sorted_vec().into_iter().map(|r| r.0).collect();
        Ok((ids, total))
    }

    /// Whether `id` has a ledger (something is at its path: a FIFO or a
    /// symlink there is refused when it is read, not taken for absence).
    pub fn exists(&self, id: &SessionId) -> bool {
        crate::file::is_present(&self.path_of(id))
    }

    /// The path of `id`'s ledger if anything is there. What is there is
    /// checked when it is opened, so a FIFO is "not a regular file", never
    /// "does not exist".
    fn existing(&self, id: &SessionId) -> Result<Utf8PathBuf, SessionError> {
        self.checked()?;
        let path = self.path_of(id);
        if crate::file::is_present(&path) {
            Ok(path)
        } else {
            Err(SessionError::NotFound {
                id: id.to_string(),
                path,
            })
        }
    }
}

fn write_new(path: &Utf8Path, bytes: &[u8]) -> Result<(), SessionError> {
    let mut file = crate::file::open(path, OpenOptions::new().write(true).create_new(true))?;
    let written = file
        .write_all(bytes)
        .map_err(|e| SessionError::io("write", path, e))
        .and_then(|()| {
            file.sync_all()
                .map_err(|e| SessionError::io("fsync", path, e))
        });
    if written.is_err() {
        // This call created it (`create_new`): a full disk leaves nothing.
        let _ = std::fs::remove_file(path);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::{Block, Provenance};
    use vak_session::PromptLayerDescriptor;
    use vak_session::{DriftAccepted, Turn, now_rfc3339};

    fn store() -> (tempfile::TempDir, SessionStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let store = SessionStore::new(&home);
        (dir, store)
    }

    fn contract() -> FrozenContract {
        let layers = vec![PromptLayerDescriptor::of(
            Block::Identity,
            &Provenance::seed("identity"),
            "You are Vak.",
        )];
        FrozenContract {
            fingerprint: vak_session::fingerprint(&layers),
            prompt_layers: layers,
            prefix: "You are Vak.".into(),
            ..FrozenContract::default()
        }
    }

    #[test]
    fn create_append_read_round_trip() {
        let (_dir, store) = store();
        let meta = SessionMeta {
            project: Some("/p".into()),
            surface: Some("cli".into()),
            ..SessionMeta::now()
        };
        let id = store.create(meta.clone(), contract()).expect("create");
        store
            .append(&id, &Record::Turn(Turn::now("hi", "tail")))
            .expect("append");
        let ledger = store.read(&id).expect("read");
        assert_eq!(ledger.header.meta, meta);
        assert_eq!(ledger.contract(), &contract());
        assert_eq!(
            ledger
                .turns()
                .map(|t| t.message.as_str())
                .collect::<Vec<_>>(),
            ["hi"]
        );
        assert!(ledger.warnings.is_empty());
        assert_eq!(store.list().expect("list"), vec![id.clone()]);
        assert_eq!(store.read_header(&id).expect("header").meta, meta);
        let first_line = std::fs::read_to_string(store.path_of(&id)).expect("read");
        assert!(
            first_line.starts_with("{\"type\":\"created\""),
            "{first_line}"
        );
    }

    /// The file store writes each record as the contract's JSON line
    /// (`vak-session`'s serialisation, the text PostgreSQL keeps), one per
    /// line, and nothing else: a store-side encoding would make `vak store
    /// import`'s digests disagree.
    #[test]
    fn each_line_is_the_contracts_json_line() {
        let (_dir, store) = store();
        let id = store
            .create(SessionMeta::default(), contract())
            .expect("create");
        let turn = Record::Turn(Turn::now("hi \u{1b}[2J \"type\"", "tail"));
        let drift = Record::DriftAccepted(DriftAccepted {
            at: now_rfc3339(),
            changes: Vec::new(),
            current_fingerprint: Some("sha256:00".into()),
        });
        store.append(&id, &turn).expect("turn");
        store.append(&id, &drift).expect("drift");
        let header = Record::Created(Box::new(store.read_header(&id).expect("header")));
        let expected: String = [header, turn, drift]
            .iter()
            .map(|r| serde_json::to_string(r).expect("serialize") + "\n")
            .collect();
        let written = std::fs::read_to_string(store.path_of(&id)).expect("read");
        assert_eq!(written, expected);
        for line in written.lines() {
            assert_eq!(
                serde_json::to_string(&Record::from_json(line.as_bytes()).expect("parse"))
                    .expect("serialize"),
                line
            );
        }
    }

    #[test]
    fn created_cannot_be_appended_and_missing_sessions_are_named() {
        let (_dir, store) = store();
        let id = store
            .create(SessionMeta::now(), contract())
            .expect("create");
        let header = store.read(&id).expect("read").header;
        assert!(matches!(
            store.append(&id, &Record::Created(Box::new(header))),
            Err(SessionError::NotAppendable { .. })
        ));
        let other = SessionId::parse("01NOPE").expect("valid");
        let err = store.read(&other).expect_err("missing");
        assert!(err.to_string().contains("01NOPE.jsonl"), "{err}");
    }

    #[test]
    fn unknown_types_and_fields_are_skipped() {
        let (_dir, store) = store();
        let id = store
            .create(SessionMeta::now(), contract())
            .expect("create");
        let path = store.path_of(&id);
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str("{\"type\":\"hologram\",\"x\":1}\n");
        text.push_str(
            "{\"type\":\"turn\",\"at\":\"t\",\"message\":\"m\",\"mood\":\"new field\"}\n",
        );
        std::fs::write(&path, text).expect("write");
        let ledger = store.read(&id).expect("read");
        assert_eq!(ledger.skipped_unknown, 1);
        assert_eq!(ledger.turns().count(), 1);
    }

    #[test]
    fn ledger_without_header_or_with_two_is_rejected() {
        let (_dir, store) = store();
        let id = store
            .create(SessionMeta::now(), contract())
            .expect("create");
        let path = store.path_of(&id);
        let header = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, format!("{header}{header}")).expect("write");
        assert!(matches!(
            store.read(&id),
            Err(SessionError::DuplicateHeader { line: 2, .. })
        ));
        std::fs::write(
            &path,
            "{\"type\":\"turn\",\"at\":\"t\",\"message\":\"m\"}\n",
        )
        .expect("write");
        assert!(matches!(
            store.read(&id),
            Err(SessionError::MissingHeader { .. })
        ));
    }

    #[test]
    fn a_fifo_or_symlinked_ledger_is_refused_not_missing_nor_followed() {
        let (dir, store) = store();
        let id = store
            .create(SessionMeta::now(), contract())
            .expect("create");
        let path = store.path_of(&id);
        let outside = Utf8PathBuf::from_path_buf(dir.path().join("outside.jsonl")).expect("utf-8");
        std::fs::rename(&path, &outside).expect("move");
        std::os::unix::fs::symlink(&outside, &path).expect("symlink");
        let before = std::fs::read(&outside).expect("read");
        let err = store
            .append(&id, &Record::Turn(Turn::now("hi", "")))
            .expect_err("symlink refused");
        assert!(matches!(err, SessionError::Symlink { .. }), "{err}");
        assert!(store.read(&id).is_err());
        assert_eq!(std::fs::read(&outside).expect("read"), before);

        std::fs::remove_file(&path).expect("rm");
        let status = std::process::Command::new("mkfifo")
            .arg(path.as_str())
            .status()
            .expect("mkfifo");
        assert!(status.success());
        for err in [
            store.read(&id).expect_err("fifo"),
            store.read_header(&id).expect_err("fifo"),
            store
                .append(&id, &Record::Turn(Turn::now("hi", "")))
                .expect_err("fifo"),
        ] {
            assert!(
                err.to_string().contains("is not a regular file (a FIFO)"),
                "{err}"
            );
        }
    }

    #[test]
    fn list_ignores_strangers_and_is_sorted() {
        let (_dir, store) = store();
        assert!(store.list().expect("empty store lists").is_empty());
        let a = store.create(SessionMeta::now(), contract()).expect("a");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = store.create(SessionMeta::now(), contract()).expect("b");
        std::fs::write(store.dir().join("notes.txt"), "x").expect("write");
        std::fs::write(store.dir().join("bad name.jsonl"), "x").expect("write");
        assert_eq!(store.list().expect("list"), vec![a.clone(), b.clone()]);
        assert_eq!(store.list_newest(1).expect("newest"), (vec![b.clone()], 2));
        assert_eq!(store.list_newest(5).expect("newest"), (vec![b, a], 2));
        assert_eq!(store.list_newest(0).expect("none").1, 2);
    }

    proptest::proptest! {
        /// A delivery's two-ends read answers what a whole read answers,
        /// whatever the chat holds: numbered turns, unnumbered ones (an
        /// older build, `exec`), a drift record, a torn last line.
        #[test]
        fn the_two_ends_agree_with_a_whole_read(
            turns in proptest::collection::vec((proptest::bool::ANY, "[a-z ]{0,12}"), 0..12),
            drift_after in proptest::option::of(0usize..12),
            torn in proptest::bool::ANY,
        ) {
            let (_dir, store) = store();
            let id = store.create(SessionMeta::default(), contract()).unwrap();
            for (n, (numbered, message)) in turns.iter().enumerate() {
                let mut turn = Turn::now(message.clone(), "");
                if *numbered {
                    turn.seq = Some(n as u64 + 1);
                }
                store.append(&id, &Record::Turn(turn)).unwrap();
                if drift_after == Some(n) {
                    let drift = DriftAccepted {
                        at: now_rfc3339(),
                        changes: Vec::new(),
                        current_fingerprint: None,
                    };
                    store.append(&id, &Record::DriftAccepted(drift)).unwrap();
                }
            }
            if torn {
                use std::io::Write as _;
                let mut file = std::fs::OpenOptions::new().append(true).open(store.path_of(&id)).unwrap();
                file.write_all(br#"{"type":"turn","at":"x","mess"#).unwrap();
            }
            let whole = BoundSession::of(store.read(&id).unwrap());
            proptest::prop_assert_eq!(store.read_ends(&id).unwrap(), whole);
        }
    }
}
