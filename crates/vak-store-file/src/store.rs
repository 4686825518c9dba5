//! The file backend of `vak_session::Store`: today's files under
//! `$VAK_HOME/.vak/`.
//!
//! A delivery to a chat is one call, `Store::deliver`: the store takes
//! the chat's lock, looks the binding up, hands the bound ledger to the
//! caller's pure `plan`, and writes what the plan says (create, audit
//! event, bind, turn) before it lets the next delivery for that chat in.

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::Name;
use vak_prompt_history::History;

use crate::FileHistory;
use vak_session::{
    AuditEntries, Binding, Bound, BoundSession, ChatPlan, Claim, Committed, FreshSession,
    FrozenContract, Header, Ledger, Record, SecurityEvent, SessionError, SessionId, SessionMeta,
    Store,
};

use crate::{AuditLog, BindingStore, SessionStore};

/// The file backend: `sessions/<id>.jsonl`, `audit/security.jsonl`,
/// `gateway/bindings.json`, and the history's `objects/` and
/// `history/versions.jsonl` under `$VAK_HOME/.vak/`.
///
/// A delivery holds its chat's lock file (`gateway/locks/<bot>/<chat>.lock`,
/// `flock`, so across processes) from lookup to commit, and the bindings
/// lock only while the binding moves; deliveries to different chats run
/// side by side. The writes are ordered so a crash part-way
/// leaves no acknowledged turn lost and never a silent rotation: the new
/// ledger, then the `config-change` event, then the turn, then the binding.
#[derive(Debug, Clone)]
pub struct FileStore {
    home: Utf8PathBuf,
    sessions: SessionStore,
    audit: AuditLog,
    bindings: BindingStore,
    history: FileHistory,
}

impl FileStore {
    /// The file store of `home`.
    pub fn new(home: &Utf8Path) -> Self {
        FileStore {
            home: home.to_owned(),
            sessions: SessionStore::new(home),
            audit: AuditLog::new(home),
            bindings: BindingStore::new(home),
            history: FileHistory::new(home),
        }
    }

    /// The history's files (objects and version log).
    pub fn file_history(&self) -> &FileHistory {
        &self.history
    }

    /// The ledger directory.
    pub fn sessions_dir(&self) -> &Utf8Path {
        self.sessions.dir()
    }

    /// The audit log file.
    pub fn audit_path(&self) -> &Utf8Path {
        self.audit.path()
    }
}

/// Claims made by this process, to prune markers now and then.
static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Remove replay markers (and their lock files) last modified more than
/// twice `window_secs` before now. The cut-off comes from this machine's
/// clock, never from a request: a request's timestamp is the sender's
/// claim, and one dated far ahead (by a skewed clock or a sender with the
/// secret) would otherwise make every marker look old and be pruned while
/// its request can still be replayed.
fn prune(dir: &Utf8Path, window_secs: i64) {
    let margin = std::time::Duration::from_secs(window_secs.unsigned_abs().saturating_mul(2));
    crate::file::remove_files_older_than(dir, margin);
}

/// The time a marker of a request claiming `at` is stamped with (its
/// mtime): the request's time, so the marker ages with the request it
/// refuses (and `vak store import` carries that time over), brought into
/// `[now − window, now]`: a request dated ahead cannot keep its marker past
/// the time its own window closes, and one dated far back (the sender's
/// claim, up to `i64::MIN`) cannot make its marker look old enough to be
/// pruned while it is in the window. No arithmetic here can overflow.
fn marker_time(at: i64, window_secs: i64) -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    let window = std::time::Duration::from_secs(window_secs.unsigned_abs());
    let earliest = now.checked_sub(window).unwrap_or(std::time::UNIX_EPOCH);
    u64::try_from(at)
        .ok()
        .and_then(|secs| std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs)))
        .unwrap_or(std::time::UNIX_EPOCH)
        .clamp(earliest, now)
}

/// How many seconds of claims one directory of `gateway/claims/` holds
/// (the signing window): claims are filed by time so that forgetting old
/// ones removes whole directories, never scans them.
const CLAIM_BUCKET_SECS: u64 = 300;

/// Unix seconds of `time` (0 before the epoch).
fn unix_secs(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The bucket (directory name under `gateway/claims/`) of `time`.
fn bucket_of(time: std::time::SystemTime) -> u64 {
    unix_secs(time) / CLAIM_BUCKET_SECS
}

/// The buckets a claim still kept can be in: every one from the bucket of
/// `now − 2 × window − one bucket` (a marker is stamped at most a window
/// before its delivery, and kept twice the window) to one past now's (a
/// lock filed by a request dated ahead).
fn live_buckets(window_secs: i64) -> std::ops::RangeInclusive<u64> {
    let now = unix_secs(std::time::SystemTime::now());
    let back = window_secs
        .unsigned_abs()
        .saturating_mul(2)
        .saturating_add(CLAIM_BUCKET_SECS);
    (now.saturating_sub(back) / CLAIM_BUCKET_SECS)..=(now / CLAIM_BUCKET_SECS + 1)
}

/// Forget the claims of `claims` (`gateway/claims/`) whose bucket ended
/// more than twice `window_secs` ago: each such directory is renamed aside
/// at once (`.expired-<bucket>`) and removed by a thread of its own, so no
/// delivery waits on it; one a process did not get to remove is removed by
/// the next prune. Only this machine's clock decides.
fn prune_buckets(claims: &Utf8Path, window_secs: i64) {
    let Ok(entries) = std::fs::read_dir(claims) else {
        return;
    };
    let oldest_live = *live_buckets(window_secs).start();
    let mut expired = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // `symlink_metadata`: a link is never followed, nor removed through.
        let is_dir = entry.path().symlink_metadata().is_ok_and(|m| m.is_dir());
        if !is_dir {
            continue;
        }
        if name.starts_with(".expired-") {
            expired.push(claims.join(&name));
        } else if let Ok(bucket) = name.parse::<u64>()
            && bucket < oldest_live
        {
            let aside = claims.join(format!(".expired-{bucket}"));
            if std::fs::rename(claims.join(&name), &aside).is_ok() {
                expired.push(aside);
            }
        }
    }
    if !expired.is_empty() {
        let removal = std::thread::Builder::new()
            .name("vak-claims-prune".to_owned())
            .spawn(move || {
                for dir in expired {
                    let _ = std::fs::remove_dir_all(dir);
                }
            });
        if let Err(error) = removal {
            tracing::warn!(%error, "old replay claims could not be removed now; the next prune will");
        }
    }
}

impl FileStore {
    /// The session an earlier try of this chat's fresh-session delivery
    /// created and announced in the audit log (a rotation's `config-change`
    /// event, or a rebind's `rebound` event) before a crash or a refusal
    /// kept it from being bound, with the same frozen fingerprint as
    /// `contract`: finished, not repeated, so one change writes one event.
    /// `from` is the session the chat was bound to (rotated from, or gone).
    fn interrupted_fresh(
        &self,
        bot: &Name,
        chat: &Name,
        from: &SessionId,
        rotation: bool,
        contract: &FrozenContract,
    ) -> Result<Option<SessionId>, SessionError> {
        let (bot, chat) = (bot.as_str(), chat.as_str());
        let events = self.audit.list()?;
        let found = events.events.iter().rev().find_map(|event| match event {
            SecurityEvent::ConfigChange(done)
                if rotation
                    && done.bot == bot
                    && done.chat == chat
                    && &done.old_session == from
                    && done.new_fingerprint.as_deref() == Some(contract.fingerprint.as_str()) =>
            {
                Some(done.new_session.clone())
            }
            SecurityEvent::Rebound(done)
                if !rotation
                    && done.bot == bot
                    && done.chat == chat
                    && &done.gone_session == from =>
            {
                Some(done.new_session.clone())
            }
            _ => None,
        });
        let Some(id) = found else { return Ok(None) };
        if self.sessions.exists(&id) {
            // Promoted already: a rotation is finished whatever its text (its
            // event said which fingerprint); a rebind's session is reused
            // only when it froze this very contract.
            if rotation
                || self.sessions.read_header(&id)?.contract.fingerprint == contract.fingerprint
            {
                return Ok(Some(id));
            }
            return Ok(None);
        }
        if self.sessions.pending_exists(&id)
            && self.sessions.read_pending_header(&id)?.contract.fingerprint == contract.fingerprint
        {
            return Ok(Some(id));
        }
        Ok(None)
    }
}

impl Store for FileStore {
    fn prune_claims(&self, window_secs: i64) -> Result<(), SessionError> {
        self.prune_all_claims(window_secs);
        Ok(())
    }

    fn describe(&self) -> String {
        format!("the file store in `{}`", self.home.join(".vak"))
    }

    fn kind(&self) -> &'static str {
        "file"
    }

    fn history(&self) -> &dyn History {
        &self.history
    }

    fn create(
        &self,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError> {
        self.sessions.create(meta, contract)
    }

    fn append(&self, id: &SessionId, record: &Record) -> Result<(), SessionError> {
        self.sessions.append(id, record)
    }

    fn read(&self, id: &SessionId) -> Result<Ledger, SessionError> {
        self.sessions.read(id)
    }

    fn read_header(&self, id: &SessionId) -> Result<Header, SessionError> {
        self.sessions.read_header(id)
    }

    fn list_newest(&self, limit: usize) -> Result<(Vec<SessionId>, usize), SessionError> {
        self.sessions.list_newest(limit)
    }

    fn audit_newest(&self, limit: usize) -> Result<AuditEntries, SessionError> {
        self.audit.list_newest(limit)
    }

    fn bindings(&self) -> Result<Vec<(String, String, Binding)>, SessionError> {
        self.bindings.list()
    }

    /// The file store holds no home side, so `home_generation` is not
    /// compared. A `claim` is checked under the chat's lock and the
    /// signature's own lock (see `ReplayHold`) and its marker written
    /// only once the delivery has committed.
    ///
    /// Every state a kill can leave between two steps recovers: see
    /// [`vak_session::crash::STEPS`] for the steps, and the comments below for
    /// what the next delivery to the chat finds at each.
    fn deliver_at(
        &self,
        bot: &Name,
        chat: &Name,
        home_generation: Option<i64>,
        claim: Option<&Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Committed>, SessionError> {
        let _ = home_generation;
        // This chat's lock for the whole delivery; the bindings lock only
        // for the moment the binding moves, so other chats run meanwhile.
        let _chat = self.bindings.lock_chat(bot, chat)?;
        // The signature does not cover the URL, so the same signed request
        // may race to another chat: the signature's own lock orders those,
        // and its marker names the chat it was delivered to.
        let mut replay = claim
            .map(|claim| self.hold_claim(claim, bot, chat))
            .transpose()?;
        // Every turn records the delivery it came with, so one that
        // committed before a crash kept its marker from being written is
        // still found, in the session it was bound to, and refused.
        let delivery = claim.map(Claim::digest);
        let committed_before = |ledger: &Ledger| {
            delivery
                .as_deref()
                .is_some_and(|delivery| ledger.has_delivery(delivery))
        };
        let bound_id = self.bindings.binding(bot, chat)?.map(|b| b.session_id);
        // An earlier try of this delivery that was killed after its turn was
        // appended (before its marker said so) named, in the marker, the
        // session the turn went to; the chat may have rotated since, so
        // that session's ledger is read, not only the one bound now.
        if let Some(replay) = &mut replay {
            for id in replay
                .tried
                .clone()
                .iter()
                .filter(|id| Some(*id) != bound_id.as_ref())
            {
                let found = match self.sessions.read(id) {
                    Ok(ledger) => committed_before(&ledger),
                    Err(SessionError::NotFound { .. }) => false,
                    Err(error) => return Err(error),
                };
                if found {
                    replay.committed();
                    return Err(SessionError::Replayed);
                }
            }
        }
        // The ledgers are read for this request's turn only when a marker
        // says an earlier try may have got as far as it: the marker is
        // durable before any turn of its request, so with none there is no
        // such turn, and the delivery reads the ledger's two ends only.
        let looked_for = replay.as_ref().is_some_and(|replay| replay.marked);
        let bound = match bound_id {
            None => Bound::Unbound,
            Some(id) if !looked_for => {
                self.sessions.promote(&id)?;
                match self.sessions.read_ends(&id) {
                    // A marker lost after its turn (by hand, or by a build
                    // that wrote it after the turn) is made up for by the
                    // last turn, which the two ends include.
                    Ok(ends)
                        if delivery.is_some()
                            && ends.last_turn.as_ref().and_then(|t| t.delivery.as_deref())
                                == delivery.as_deref() =>
                    {
                        if let (Some(mut replay), Some(claim)) = (replay, claim) {
                            replay.mark(&id)?;
                            replay.committed();
                            replay.finish(claim, self);
                        }
                        return Err(SessionError::Replayed);
                    }
                    Ok(ends) => Bound::Live(Box::new(ends)),
                    Err(SessionError::NotFound { .. }) => Bound::Gone(id),
                    Err(error) => return Err(error),
                }
            }
            Some(id) => {
                // A delivery killed after binding the chat and before moving
                // the new ledger out of `pending/` is finished here: the
                // binding already names it.
                self.sessions.promote(&id)?;
                match self.sessions.read(&id) {
                    Ok(ledger) if committed_before(&ledger) => {
                        if let (Some(mut replay), Some(claim)) = (replay, claim) {
                            replay.mark(&id)?;
                            replay.committed();
                            replay.finish(claim, self);
                        }
                        return Err(SessionError::Replayed);
                    }
                    Ok(ledger) => Bound::Live(Box::new(BoundSession::of(ledger))),
                    Err(SessionError::NotFound { .. }) => Bound::Gone(id),
                    Err(error) => return Err(error),
                }
            }
        };
        let Some(planned) = plan(&bound) else {
            return Ok(None);
        };
        // The marker is durable before the turn is appended, naming this
        // chat and the session the turn goes to: a crash after the turn then
        // always leaves a marker that refuses the request for another chat,
        // and that says which ledger to look in for this one, however the
        // chat rotates meanwhile.
        let session = match planned {
            ChatPlan::Continue { mut turn } => {
                let Bound::Live(ledger) = &bound else {
                    return Err(SessionError::PlanMismatch {
                        bot: bot.to_string(),
                        chat: chat.to_string(),
                    });
                };
                if let Some(replay) = &mut replay {
                    replay.mark(&ledger.id)?;
                }
                vak_session::crash::point("marked");
                turn.delivery = delivery;
                turn.seq = Some(ledger.turns as u64 + 1);
                self.sessions.append(&ledger.id, &Record::Turn(turn))?;
                ledger.id.clone()
            }
            ChatPlan::Fresh(fresh) => {
                let FreshSession {
                    meta,
                    contract,
                    change,
                    mut turn,
                } = *fresh;
                // A rotation (or a rebind) an earlier try announced in the
                // audit log and did not get to bind is finished, not
                // repeated: one change, one event.
                let from = match (&change, &bound) {
                    (Some(change), _) => Some((&change.old_session, true)),
                    (None, Bound::Gone(gone)) => Some((gone, false)),
                    _ => None,
                };
                let resumed = match from {
                    Some((from, rotation)) => {
                        self.interrupted_fresh(bot, chat, from, rotation, &contract)?
                    }
                    None => None,
                };
                // A try that got as far as its turn (a build that appended
                // the turn before binding) is a replay: the turn is not
                // appended again, the binding is finished.
                let mut replayed = false;
                let (id, created) = match resumed {
                    Some(id) => {
                        // Only a signed delivery can be looked for: an
                        // unsigned one reads no ledger here.
                        replayed = delivery.is_some()
                            && self.sessions.exists(&id)
                            && committed_before(&self.sessions.read(&id)?);
                        (id, false)
                    }
                    None => {
                        // Pending until the chat is bound to it: a kill or a
                        // refusal before that leaves no session anyone lists.
                        let id = self.sessions.create_pending(meta, contract)?;
                        vak_session::crash::point("fresh-created");
                        // Durable before the binding moves, so no rotation
                        // is ever silent: a crash in between is finished by
                        // the next delivery (`interrupted_fresh`).
                        let announced = match (change, &bound) {
                            (Some(mut change), _) => {
                                change.new_session = id.clone();
                                Some(SecurityEvent::ConfigChange(change))
                            }
                            (None, Bound::Gone(gone)) => {
                                Some(SecurityEvent::Rebound(vak_session::Rebound {
                                    at: vak_session::now_rfc3339(),
                                    bot: bot.to_string(),
                                    chat: chat.to_string(),
                                    gone_session: gone.clone(),
                                    new_session: id.clone(),
                                }))
                            }
                            _ => None,
                        };
                        if let Some(event) = &announced {
                            if let Err(error) = self.audit.append(event) {
                                self.sessions.remove_pending(&id);
                                return Err(error);
                            }
                            vak_session::crash::point("fresh-event");
                        }
                        (id, announced.is_none())
                    }
                };
                // Bound before its turn is appended: a crash in between
                // leaves the chat on its new session without the turn, which
                // the sender's retry then appends (continuing it); the other
                // way round, a chat's first delivery killed there would leave
                // its turn in a session nothing is bound to, and the retry
                // would record it again in another.
                let bound_now = self.bindings.lock().and_then(|mut guard| {
                    guard.bind(bot, chat, id.clone());
                    guard.commit()
                });
                if let Err(error) = bound_now {
                    // Nothing names a first delivery's session: it goes. One
                    // an event announced stays pending for the retry.
                    if created {
                        self.sessions.remove_pending(&id);
                    }
                    return Err(error);
                }
                vak_session::crash::point("fresh-bound");
                self.sessions.promote(&id)?;
                vak_session::crash::point("fresh-promoted");
                if let Some(replay) = &mut replay {
                    replay.mark(&id)?;
                }
                if replayed {
                    if let (Some(mut replay), Some(claim)) = (replay, claim) {
                        replay.committed();
                        replay.finish(claim, self);
                    }
                    return Err(SessionError::Replayed);
                }
                vak_session::crash::point("marked");
                turn.delivery = delivery;
                turn.seq = Some(1);
                self.sessions.append(&id, &Record::Turn(turn))?;
                id
            }
        };
        vak_session::crash::point("turn-appended");
        // The marker was written before the turn, naming this chat and the
        // session; it does not refuse the sender's retry of a delivery that
        // then failed or was killed: that retry, to the same chat, is
        // decided by the ledgers of the sessions the marker names (above),
        // where a committed turn carries its delivery's digest. Once
        // committed, the marker says so, and then refuses every retry
        // itself.
        if let (Some(mut replay), Some(claim)) = (replay, claim) {
            replay.committed();
            vak_session::crash::point("marker-committed");
            replay.finish(claim, self);
        }
        Ok(Some(Committed { session }))
    }
}

impl FileStore {
    /// Promote every pending ledger a binding names (a delivery killed
    /// between binding its chat and promoting the new session): what the
    /// chat's next delivery would do, for a reader of every session at
    /// once (`vak store import`).
    ///
    /// # Errors
    ///
    /// The bindings cannot be read, or a ledger cannot be moved.
    pub fn finish_pending_bindings(&self) -> Result<(), SessionError> {
        for (_, _, binding) in self.bindings.list()? {
            self.sessions.promote(&binding.session_id)?;
        }
        Ok(())
    }

    /// `gateway/claims/`: the replay markers and signature locks, filed in
    /// one directory per [`CLAIM_BUCKET_SECS`] of time.
    fn claims_dir(&self) -> Utf8PathBuf {
        self.home.join(".vak").join("gateway").join("claims")
    }

    /// `gateway/replay/`: the markers of builds that kept them all in one
    /// directory, read (never written) until they are old enough to go.
    fn legacy_replay_dir(&self) -> Utf8PathBuf {
        self.home.join(".vak").join("gateway").join("replay")
    }

    /// Forget old claims in both layouts. The old one is scanned (it has no
    /// buckets) and removed once empty, so a home upgraded under load pays
    /// for its scans only until its old markers have expired.
    fn prune_all_claims(&self, window_secs: i64) {
        prune_buckets(&self.claims_dir(), window_secs);
        let legacy = self.legacy_replay_dir();
        if crate::file::in_home(Some(&self.home), &legacy).is_ok()
            && legacy.symlink_metadata().is_ok_and(|m| m.is_dir())
        {
            prune(&legacy, window_secs);
            // Fails (and is meant to) while anything is left in it.
            let _ = std::fs::remove_dir(&legacy);
        }
    }
}

impl FileStore {
    /// Every replay marker of a delivery that committed, as the digest of
    /// the signature it takes and the time of the request it refuses (Unix
    /// seconds, at most now): what `vak store import` carries into
    /// PostgreSQL, so a request this store delivered is refused there too
    /// within its window. Only regular files named by a digest count. A
    /// marker a killed delivery left before it said `committed` counts
    /// only when a ledger it names holds the turn: otherwise the sender's
    /// retry is a new delivery, and refusing it would lose the message.
    ///
    /// # Errors
    ///
    /// The replay directory exists but cannot be listed, or a ledger a
    /// marker names cannot be read.
    pub fn replay_markers(&self) -> Result<Vec<(String, i64)>, SessionError> {
        let mut dirs = vec![self.legacy_replay_dir()];
        let claims = self.claims_dir();
        crate::file::in_home(Some(&self.home), &claims)?;
        match std::fs::read_dir(&claims) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    let is_bucket = name
                        .to_str()
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                    if is_bucket
                        && entry.path().symlink_metadata().is_ok_and(|m| m.is_dir())
                        && let Some(name) = name.to_str()
                    {
                        dirs.push(claims.join(name));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SessionError::io("list", claims, e)),
        }
        let mut markers = Vec::new();
        let mut looked_up = MarkerLookups::default();
        for dir in dirs {
            self.markers_in(&dir, &mut looked_up, &mut markers)?;
        }
        markers.sort();
        markers.dedup_by(|a, b| a.0 == b.0);
        Ok(markers)
    }

    /// The markers of one directory (see [`replay_markers`](Self::replay_markers)).
    fn markers_in(
        &self,
        dir: &Utf8Path,
        looked_up: &mut MarkerLookups,
        markers: &mut Vec<(String, i64)>,
    ) -> Result<(), SessionError> {
        crate::file::in_home(Some(&self.home), dir)?;
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(SessionError::io("list", dir.to_owned(), e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let is_digest =
                name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            // `symlink_metadata`: a link is no marker this store wrote.
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if !is_digest || !meta.is_file() {
                continue;
            }
            if !self.marker_refuses(&dir.join(name), name, looked_up)? {
                continue;
            }
            // A marker's mtime is its request's time (see `marker_time`);
            // one dated ahead (set by hand, or a clock stepped back since)
            // is taken as now, so it is not kept in the database for ever.
            let at = meta
                .modified()
                .ok()
                .map(|m| m.min(std::time::SystemTime::now()))
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_secs()).ok())
                .unwrap_or(0);
            markers.push((name.to_owned(), at));
        }
        Ok(())
    }
}

impl FileStore {
    /// Whether the marker at `path` (of the delivery whose digest is
    /// `delivery`) refuses its request everywhere: it says committed, it is
    /// not a marker this store wrote, or a ledger it names (or, for a
    /// marker from before markers named sessions, the chat's bound one)
    /// holds the turn.
    fn marker_refuses(
        &self,
        path: &Utf8Path,
        delivery: &str,
        looked_up: &mut MarkerLookups,
    ) -> Result<bool, SessionError> {
        let marker = match Marker::read(path) {
            Ok(Some(marker)) if !marker.committed => marker,
            Ok(None) => return Ok(false),
            Ok(Some(_)) | Err(()) => return Ok(true),
        };
        if marker.is_empty() {
            // No chat named: any ledger holding the turn proves it.
            if looked_up.everywhere.is_none() {
                let mut all = std::collections::HashSet::new();
                for id in self.sessions.list()? {
                    match self.sessions.read(&id) {
                        Ok(ledger) => all.extend(ledger.turns().filter_map(|t| t.delivery.clone())),
                        Err(SessionError::NotFound { .. }) => {}
                        Err(error) => return Err(error),
                    }
                }
                looked_up.everywhere = Some(all);
            }
            return Ok(looked_up
                .everywhere
                .as_ref()
                .is_some_and(|all| all.contains(delivery)));
        }
        let mut sessions = marker.sessions;
        if sessions.is_empty() {
            if looked_up.bound.is_none() {
                looked_up.bound = Some(
                    self.bindings
                        .list()?
                        .into_iter()
                        .map(|(bot, chat, binding)| (format!("{bot}/{chat}"), binding.session_id))
                        .collect(),
                );
            }
            let bound = looked_up
                .bound
                .as_ref()
                .and_then(|b| b.get(&marker.chat_key));
            sessions.extend(bound.cloned());
        }
        for id in sessions {
            let deliveries = match looked_up.deliveries.entry(id) {
                std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
                std::collections::hash_map::Entry::Vacant(new) => {
                    let found = match self.sessions.read(new.key()) {
                        Ok(ledger) => ledger.turns().filter_map(|t| t.delivery.clone()).collect(),
                        Err(SessionError::NotFound { .. }) => std::collections::HashSet::new(),
                        Err(error) => return Err(error),
                    };
                    new.insert(found)
                }
            };
            if deliveries.contains(delivery) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// What [`FileStore::replay_markers`] read to judge markers a killed
/// delivery left, read once for all of them: the bindings (by
/// `<bot>/<chat>`, for markers from before markers named sessions), each
/// named session's deliveries, and (for an empty marker) every ledger's.
#[derive(Default)]
struct MarkerLookups {
    bound: Option<std::collections::HashMap<String, SessionId>>,
    /// Every delivery in every ledger, read only for an empty marker.
    everywhere: Option<std::collections::HashSet<String>>,
    deliveries: std::collections::HashMap<SessionId, std::collections::HashSet<String>>,
}

/// A request signature's lock (`gateway/claims/<bucket>/<sha256>.lock`,
/// `flock`, so across processes), held for the whole delivery, and its
/// marker (`gateway/claims/<bucket>/<sha256>`, or `gateway/replay/<sha256>`
/// as an older build left it), read by [`Marker::parse`]. The marker is
/// written before the turn is appended, naming the bot and chat and the
/// session the turn goes to, and refuses the signature for every other
/// chat from then on. For its own chat it refuses nothing by itself until
/// it says `committed`: the ledgers of the sessions it names say whether
/// an earlier try got as far as its turn.
///
/// Every change to a marker replaces it whole (temporary file, fsync,
/// rename, fsync of the directory), so a kill leaves the marker as it was
/// or as it was meant to be, never empty or half a line.
struct ReplayHold {
    _lock: std::fs::File,
    /// The marker's directory.
    dir: Utf8PathBuf,
    marker: Utf8PathBuf,
    /// What the marker's first line says: `<bot>/<chat>`.
    chat_key: String,
    /// Whether something is at the marker's path already that this
    /// delivery may replace (its own chat's marker, or an empty one).
    marked: bool,
    /// The sessions tries of this delivery went to (the marker's
    /// `session <id>` lines).
    tried: Vec<SessionId>,
    /// What the marker's mtime is set to ([`marker_time`]).
    stamp: std::time::SystemTime,
}

/// The most a marker holds: `<bot>/<chat>`, a `session <id>` line per try
/// a crash interrupted after the chat rotated, and `committed`. One longer
/// than this was not written by this store and proves nothing.
const MAX_MARKER_BYTES: u64 = 4096;

/// What a replay marker says, one line each:
///
/// ```text
/// <bot>/<chat>
/// session <id>     (before each try's turn is appended, one per session)
/// committed        (once the delivery committed)
/// ```
///
/// An empty marker names no chat and proves nothing by itself: this store
/// never leaves one (it replaces markers whole), and an older build's (one
/// that created the file first and wrote it after) may be one a kill cut
/// short. Its request is judged by the ledgers, like a try that did not
/// say `committed`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Marker {
    chat_key: String,
    sessions: Vec<SessionId>,
    committed: bool,
}

impl Marker {
    /// Read a marker's text; `None` for one this store did not write
    /// (which proves nothing about its request).
    fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let Some(chat_key) = lines.next() else {
            return Some(Self::default());
        };
        let mut marker = Self {
            chat_key: chat_key.to_owned(),
            ..Self::default()
        };
        for line in lines {
            if line == "committed" {
                marker.committed = true;
            } else if let Some(id) = line.strip_prefix("session ") {
                marker.sessions.push(SessionId::parse(id).ok()?);
            } else {
                return None;
            }
        }
        Some(marker)
    }

    /// The marker's text, as [`parse`](Self::parse) reads it.
    fn render(&self) -> String {
        let mut text = format!("{}\n", self.chat_key);
        for id in &self.sessions {
            text.push_str(&format!("session {id}\n"));
        }
        if self.committed {
            text.push_str("committed\n");
        }
        text
    }

    /// Whether it is empty: no chat, no session, not committed.
    fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Read the marker at `path`: `Ok(None)` when there is none, `Err` when
    /// what is there is not a marker this store wrote (a FIFO, a symlink,
    /// too long, not UTF-8, lines it never writes).
    fn read(path: &Utf8Path) -> Result<Option<Self>, ()> {
        use std::io::Read as _;
        match crate::file::open_optional(path, std::fs::OpenOptions::new().read(true)) {
            Ok(None) => Ok(None),
            Ok(Some(file)) => {
                let mut text = String::new();
                file.take(MAX_MARKER_BYTES + 1)
                    .read_to_string(&mut text)
                    .map_err(drop)?;
                if text.len() as u64 > MAX_MARKER_BYTES {
                    return Err(());
                }
                Self::parse(&text).map(Some).ok_or(())
            }
            Err(_) => Err(()),
        }
    }
}

impl FileStore {
    /// Take `claim`'s lock and refuse it as [`SessionError::Replayed`] when
    /// its marker names another chat or says its delivery committed.
    fn hold_claim(
        &self,
        claim: &Claim<'_>,
        bot: &Name,
        chat: &Name,
    ) -> Result<ReplayHold, SessionError> {
        let claims = self.claims_dir();
        let name = claim.digest();
        let stamp = marker_time(claim.at, claim.window_secs);
        // The lock is filed by the request's own time (brought into the
        // window, which a request the service accepts already is), so two
        // deliveries of one request at once take the same lock.
        let lock_dir = claims.join(bucket_of(lock_time(claim.at, claim.window_secs)).to_string());
        crate::file::in_home(Some(&self.home), &lock_dir)?;
        crate::jsonl::ensure_dir(&lock_dir)?;
        let lock_path = lock_dir.join(format!("{name}.lock"));
        let lock = crate::file::open(
            &lock_path,
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false),
        )?;
        lock.lock()
            .map_err(|e| SessionError::io("lock", lock_path.clone(), e))?;
        // The marker may be in any bucket a kept claim can be in (its stamp
        // depends on when it was written), or where an older build kept it.
        let legacy = self.legacy_replay_dir();
        crate::file::in_home(Some(&self.home), &legacy)?;
        let candidates = std::iter::once(legacy.join(&name)).chain(
            live_buckets(claim.window_secs)
                .map(|bucket| claims.join(bucket.to_string()).join(&name)),
        );
        let chat_key = format!("{bot}/{chat}");
        let mut found: Option<(Utf8PathBuf, Marker)> = None;
        for path in candidates {
            match Marker::read(&path) {
                Ok(None) => {}
                // An empty marker names no chat: the bound ledger decides,
                // as for a try of this chat that never said `committed`.
                Ok(Some(said))
                    if said.is_empty() || (said.chat_key == chat_key && !said.committed) =>
                {
                    if found.as_ref().is_none_or(|(_, kept)| kept.is_empty()) {
                        found = Some((path, said));
                    }
                }
                // Another chat's, committed, or not a marker this store
                // wrote: no proof the request is new.
                Ok(Some(_)) | Err(()) => return Err(SessionError::Replayed),
            }
        }
        let (marker, marked, tried) = match found {
            Some((path, said)) => (path, true, said.sessions),
            None => (
                claims.join(bucket_of(stamp).to_string()).join(&name),
                false,
                Vec::new(),
            ),
        };
        let dir = marker.parent().map_or(claims, Utf8Path::to_owned);
        crate::file::in_home(Some(&self.home), &dir)?;
        Ok(ReplayHold {
            _lock: lock,
            dir,
            marker,
            chat_key,
            marked,
            tried,
            stamp,
        })
    }
}

/// The time a request claiming `at` files its signature's lock under: the
/// request's time brought into `[now − window, now + window]` — itself, for
/// every request the service accepts — so concurrent deliveries of one
/// request find one lock whatever each one's clock reads.
fn lock_time(at: i64, window_secs: i64) -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    let window = std::time::Duration::from_secs(window_secs.unsigned_abs());
    let earliest = now.checked_sub(window).unwrap_or(std::time::UNIX_EPOCH);
    let latest = now.checked_add(window).unwrap_or(now);
    u64::try_from(at)
        .ok()
        .and_then(|secs| std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs)))
        .unwrap_or(std::time::UNIX_EPOCH)
        .clamp(earliest, latest)
}

impl ReplayHold {
    /// Make the marker say, durably, that this try's turn goes to
    /// `session` (with its chat, and every earlier try's session).
    fn mark(&mut self, session: &SessionId) -> Result<(), SessionError> {
        if self.tried.contains(session) {
            return Ok(());
        }
        // Under the signature's lock, only a hand copy can have appeared
        // since the marker was read: it proves nothing, so the request is
        // refused rather than the copy replaced.
        if !self.marked && crate::file::is_present(&self.marker) {
            return Err(SessionError::Replayed);
        }
        let mut sessions = self.tried.clone();
        sessions.push(session.clone());
        self.replace(&Marker {
            chat_key: self.chat_key.clone(),
            sessions,
            committed: false,
        })?;
        self.tried.push(session.clone());
        self.marked = true;
        Ok(())
    }

    /// Replace the marker with `marker`'s text: a temporary file written in
    /// full, stamped and fsynced, renamed over the marker, and the
    /// directory fsynced.
    fn replace(&self, marker: &Marker) -> Result<(), SessionError> {
        use std::io::Write as _;
        crate::jsonl::ensure_dir(&self.dir)?;
        let text = marker.render();
        vak_fs::replace(
            &self.marker,
            |file| {
                file.write_all(text.as_bytes())?;
                // Pruning goes by mtime, and so does `vak store import`.
                file.set_modified(self.stamp)
            },
            || vak_session::crash::point("marker-written"),
        )
        .map_err(crate::file::fs_error)?;
        Ok(())
    }

    /// Say in the marker that its delivery committed: a committed marker
    /// refuses every later claim ([`FileStore::hold_claim`]). A failure is
    /// logged, not returned: the delivery has committed, and a retry is
    /// still refused by the ledger of the session it went to while the
    /// chat stays there.
    fn committed(&mut self) {
        let replaced = self.replace(&Marker {
            chat_key: self.chat_key.clone(),
            sessions: self.tried.clone(),
            committed: true,
        });
        if let Err(error) = replaced {
            tracing::warn!(%error, "a replay marker could not record its delivery as committed");
        }
    }

    /// Release the lock; every 256th claim of this process forgets old
    /// claims (a few directory entries to list, whole buckets to drop).
    fn finish(self, claim: &Claim<'_>, store: &FileStore) {
        if CLAIMS
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(256)
        {
            // Old lock files go too: their requests are refused as stale
            // before any delivery, so nobody waits on them.
            store.prune_all_claims(claim.window_secs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_session::Turn;

    /// Where the marker of `claim`, written now, is.
    fn marker_of(home: &Utf8Path, claim: &Claim<'_>) -> Utf8PathBuf {
        let stamp = marker_time(claim.at, claim.window_secs);
        home.join(".vak/gateway/claims")
            .join(bucket_of(stamp).to_string())
            .join(claim.digest())
    }

    fn unix(time: std::time::SystemTime) -> i64 {
        time.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
    }

    /// A marker is stamped with its request's time (at most now), and old
    /// markers are pruned by this machine's clock: a request dated far
    /// ahead prunes nothing its own clock would keep, and a stale marker
    /// goes whatever the request says.
    #[test]
    fn markers_carry_the_request_time_and_are_pruned_by_the_clock() {
        use vak_prompt_blocks::NameKind;
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8Path::from_path(dir.path()).expect("utf8");
        let store = FileStore::new(home);
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let deliver = |key: &str, at: i64| {
            let claim = Claim {
                key,
                at,
                window_secs: 300,
            };
            store
                .deliver_at(&bot, &chat, None, Some(&claim), &mut |_| {
                    Some(ChatPlan::Fresh(Box::new(FreshSession {
                        meta: SessionMeta::default(),
                        contract: FrozenContract::default(),
                        change: None,
                        turn: Turn::now(key, ""),
                    })))
                })
                .expect("delivered");
            marker_of(home, &claim)
        };
        let mtime = |path: &Utf8Path| {
            unix(
                std::fs::metadata(path)
                    .and_then(|m| m.modified())
                    .expect("mtime"),
            )
        };
        let now = unix(std::time::SystemTime::now());

        // Not pruned by these two: the counter is past a multiple of 256.
        CLAIMS.store(1, std::sync::atomic::Ordering::Relaxed);
        let recent = deliver("v1=recent", now - 100);
        assert_eq!(mtime(&recent), now - 100, "the request's time");
        let ahead = deliver("v1=ahead", now + 250);
        let stamped = mtime(&ahead);
        assert!(
            (now..=unix(std::time::SystemTime::now())).contains(&stamped),
            "a request dated ahead is stamped now, not {stamped}"
        );
        // A bucket long past, and a marker of the old flat layout.
        let stale_bucket = home.join(".vak/gateway/claims/1");
        std::fs::create_dir_all(&stale_bucket).expect("old bucket");
        std::fs::write(stale_bucket.join("2".repeat(64)), "helpdesk/42\n").expect("old claim");
        let stale = home.join(".vak/gateway/replay").join("0".repeat(64));
        std::fs::create_dir_all(stale.parent().expect("dir")).expect("old layout");
        std::fs::write(&stale, "helpdesk/42\n").expect("stale marker");
        std::fs::File::options()
            .write(true)
            .open(&stale)
            .and_then(|f| {
                f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(1000))
            })
            .expect("age it");

        // This one prunes (the counter is at a multiple of 256), dated far
        // ahead of the clock.
        CLAIMS.store(0, std::sync::atomic::Ordering::Relaxed);
        let forged = deliver("v1=forged", now + 1_000_000);
        assert!(recent.exists(), "a marker still in its window is kept");
        assert!(ahead.exists() && forged.exists());
        assert!(!stale.exists(), "a marker past twice the window is pruned");
        assert!(
            !stale_bucket.exists(),
            "a bucket past twice the window is dropped"
        );
        assert!(
            !home.join(".vak/gateway/replay").exists(),
            "the old layout's directory goes once empty"
        );
    }

    /// A signed delivery retried after the chat rotated to a new session
    /// (whose ledger has no such turn) is still refused: the marker says
    /// its delivery committed.
    #[test]
    fn a_committed_delivery_is_refused_after_the_chat_rotates() {
        use vak_prompt_blocks::NameKind;
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8Path::from_path(dir.path()).expect("utf8");
        let store = FileStore::new(home);
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let now = unix(std::time::SystemTime::now());
        // Every plan is a fresh session: each delivery rotates the chat.
        let deliver = |key: &str| {
            let claim = Claim {
                key,
                at: now,
                window_secs: 300,
            };
            store.deliver_at(&bot, &chat, None, Some(&claim), &mut |_| {
                Some(ChatPlan::Fresh(Box::new(FreshSession {
                    meta: SessionMeta::default(),
                    contract: FrozenContract::default(),
                    change: None,
                    turn: Turn::now(key, ""),
                })))
            })
        };
        deliver("v2=first").expect("delivered");
        deliver("v2=second").expect("delivered, on a new session");
        assert!(matches!(deliver("v2=first"), Err(SessionError::Replayed)));
        assert_eq!(
            store.list_newest(10).expect("list").0.len(),
            2,
            "recorded again"
        );
    }

    /// A try killed after its turn was appended but before its marker said
    /// `committed`, then a rotation, then the sender's retry: the retry is
    /// refused (the marker names the session the turn went to), and the
    /// message is recorded once. `vak store import` carries that marker,
    /// and not one whose try never got as far as its turn.
    #[test]
    fn a_killed_try_is_found_in_its_session_after_the_chat_rotates() {
        use vak_prompt_blocks::NameKind;
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8Path::from_path(dir.path()).expect("utf8");
        let store = FileStore::new(home);
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let now = unix(std::time::SystemTime::now());
        fn claim(key: &str, at: i64) -> Claim<'_> {
            Claim {
                key,
                at,
                window_secs: 300,
            }
        }
        let deliver = |key: &str| {
            store.deliver_at(&bot, &chat, None, Some(&claim(key, now)), &mut |_| {
                Some(ChatPlan::Fresh(Box::new(FreshSession {
                    meta: SessionMeta::default(),
                    contract: FrozenContract::default(),
                    change: None,
                    turn: Turn::now(key, ""),
                })))
            })
        };
        let marker = marker_of(home, &claim("v2=first", now));
        let first = deliver("v2=first").expect("delivered").expect("committed");
        let said = std::fs::read_to_string(&marker).expect("marker");
        assert_eq!(
            said,
            format!("helpdesk/42\nsession {}\ncommitted\n", first.session)
        );
        // What a kill before `committed` leaves.
        std::fs::write(&marker, format!("helpdesk/42\nsession {}\n", first.session))
            .expect("uncommit");
        deliver("v2=second").expect("delivered, on a new session");
        assert_eq!(
            store.replay_markers().expect("markers").len(),
            2,
            "the killed try's turn is in a ledger: its marker is carried"
        );
        assert!(matches!(deliver("v2=first"), Err(SessionError::Replayed)));
        let turns: usize = store
            .list_newest(10)
            .expect("list")
            .0
            .iter()
            .map(|s| store.sessions.read(s).expect("ledger").records.len())
            .sum();
        assert_eq!(turns, 2, "recorded again");
        assert!(
            std::fs::read_to_string(&marker)
                .expect("marker")
                .ends_with("committed\n"),
            "the refusal records what it found"
        );

        // A try killed before its turn: its marker names a session without
        // the turn. Not carried by import, and the retry is delivered.
        let third = claim("v2=third", now);
        let bound = store
            .bindings
            .binding(&bot, &chat)
            .expect("binding")
            .expect("bound")
            .session_id;
        let lost = marker_of(home, &third);
        std::fs::write(&lost, format!("helpdesk/42\nsession {bound}\n")).expect("lost try");
        let legacy = home.join(".vak/gateway/replay").join("1".repeat(64));
        std::fs::create_dir_all(legacy.parent().expect("dir")).expect("old layout");
        std::fs::write(&legacy, "helpdesk/42\n").expect("an older build's try");
        let listed: Vec<String> = store
            .replay_markers()
            .expect("markers")
            .into_iter()
            .map(|(digest, _)| digest)
            .collect();
        assert!(!listed.contains(&third.digest()), "{listed:?}");
        assert!(!listed.contains(&"1".repeat(64)), "{listed:?}");
        deliver("v2=third").expect("a try that never got to its turn is delivered");
        assert!(matches!(deliver("v2=third"), Err(SessionError::Replayed)));
    }

    #[test]
    fn markers_parse_what_this_store_writes_and_nothing_else() {
        let id = SessionId::generate();
        assert_eq!(
            Marker::parse(""),
            Some(Marker::default()),
            "empty: proves nothing by itself"
        );
        let marker = Marker {
            chat_key: "a/b".to_owned(),
            sessions: vec![id.clone(), SessionId::generate()],
            committed: true,
        };
        assert_eq!(Marker::parse(&marker.render()), Some(marker));
        assert_eq!(
            Marker::parse(&format!("a/b\nsession {id}\ncommitted\n")),
            Some(Marker {
                chat_key: "a/b".to_owned(),
                sessions: vec![id.clone()],
                committed: true,
            })
        );
        assert_eq!(
            Marker::parse("a/b\n").map(|m| (m.sessions.len(), m.committed)),
            Some((0, false))
        );
        assert_eq!(Marker::parse("a/b\nsession ../x\n"), None);
        assert_eq!(Marker::parse("a/b\nwhatever\n"), None);
    }

    /// The directories this store's delivery added — the claims' buckets,
    /// the old layout's markers, the pending ledgers — linked out of the
    /// home: the delivery is refused naming the directory, and nothing is
    /// written where the link leads.
    #[test]
    fn claims_and_pending_ledgers_linked_out_of_the_home_are_refused() {
        use vak_prompt_blocks::NameKind;
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        for dir in [
            ".vak/gateway/claims",
            ".vak/gateway/replay",
            ".vak/sessions/pending",
        ] {
            let home_dir = tempfile::tempdir().expect("tempdir");
            let home = Utf8Path::from_path(home_dir.path()).expect("utf8");
            let outside = tempfile::tempdir().expect("outside");
            let link = home.join(dir);
            std::fs::create_dir_all(link.parent().expect("parent")).expect("dirs");
            std::os::unix::fs::symlink(outside.path(), &link).expect("link");
            let store = FileStore::new(home);
            let claim = Claim {
                key: "v2=linked",
                at: unix(std::time::SystemTime::now()),
                window_secs: 300,
            };
            let refused = store
                .deliver_at(&bot, &chat, None, Some(&claim), &mut |_| {
                    Some(ChatPlan::Fresh(Box::new(FreshSession {
                        meta: SessionMeta::default(),
                        contract: FrozenContract::default(),
                        change: None,
                        turn: Turn::now("hello", ""),
                    })))
                })
                .expect_err(dir);
            let last = dir.rsplit('/').next().expect("name");
            assert!(refused.to_string().contains(last), "{dir}: {refused}");
            assert_eq!(
                std::fs::read_dir(outside.path()).expect("list").count(),
                0,
                "{dir}: nothing written outside"
            );
            assert_eq!(store.list_newest(10).expect("list").1, 0, "{dir}");
        }
    }
}
