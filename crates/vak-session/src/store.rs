//! One store interface for ledgers, chat bindings and audit events, and
//! the plans a delivery runs under it. The backends are `vak-store-file`
//! (the files under `$VAK_HOME/.vak/`) and `vak-store-pg` (PostgreSQL).
//!
//! The interface is synchronous. The file backend is blocking file I/O
//! under `flock`, and a PostgreSQL backend runs its queries on a small
//! pool of blocking connections; an async service calls the store from a
//! blocking task (`spawn_blocking`), so a slow lock never stalls its
//! reactor, and the CLI needs no runtime at all.
//!
//! A delivery to a chat is one call, [`Store::deliver`]: the store takes
//! the chat's lock, looks the binding up, hands the bound ledger to the
//! caller's pure `plan`, and writes what the plan says (create, audit
//! event, bind, turn) before it lets the next delivery for that chat in.

use serde::{Deserialize, Serialize};
use vak_prompt_blocks::Name;
use vak_prompt_history::History;

use crate::{
    AuditEntries, ConfigChange, FrozenContract, Header, HomeStore, Ledger, Record, SessionError,
    SessionId, SessionMeta, Turn,
};

/// One chat's binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The session the chat's messages go to.
    pub session_id: SessionId,
    /// RFC 3339 UTC instant the binding was made.
    #[serde(default)]
    pub bound_at: String,
}

/// What a chat's binding points at when a delivery looks it up.
#[derive(Debug)]
pub enum Bound {
    /// The chat has no binding.
    Unbound,
    /// The chat is bound to a session whose ledger is gone.
    Gone(SessionId),
    /// The chat is bound to this live session.
    Live(Box<BoundSession>),
}

/// What a delivery needs of the bound session: its contract and, for the
/// tail, its first and last turns and how many there are — not every turn,
/// so a long chat does not make each delivery read its whole history from
/// a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSession {
    /// The session.
    pub id: SessionId,
    /// Its `created` record.
    pub header: Header,
    /// Its first turn, if any.
    pub first_turn: Option<Turn>,
    /// Its last turn, if any.
    pub last_turn: Option<Turn>,
    /// How many turns it has.
    pub turns: usize,
}

impl BoundSession {
    /// The frozen contract.
    pub fn contract(&self) -> &FrozenContract {
        &self.header.contract
    }

    /// The summary of a whole ledger.
    pub fn of(ledger: Ledger) -> Self {
        let mut turns = ledger.records.into_iter().filter_map(|r| match r {
            Record::Turn(t) => Some(t),
            _ => None,
        });
        let first_turn = turns.next();
        let (rest, last_turn) = turns.fold((0, None), |(n, _), t| (n + 1, Some(t)));
        let count = usize::from(first_turn.is_some()) + rest;
        let last_turn = last_turn.or_else(|| first_turn.clone());
        BoundSession {
            id: ledger.id,
            header: ledger.header,
            first_turn,
            last_turn,
            turns: count,
        }
    }
}

/// What a delivery writes, decided by the caller from [`Bound`].
#[derive(Debug, Clone)]
pub enum ChatPlan {
    /// Append `turn` to the bound session.
    Continue {
        /// The turn to record.
        turn: Turn,
    },
    /// Create a session, record its `config-change` event (if rotating),
    /// bind the chat to it, and append the first turn.
    Fresh(Box<FreshSession>),
}

/// The session a [`ChatPlan::Fresh`] creates.
#[derive(Debug, Clone)]
pub struct FreshSession {
    /// The new session's metadata.
    pub meta: SessionMeta,
    /// What it freezes.
    pub contract: FrozenContract,
    /// The rotation's `config-change` event; the store fills in
    /// `new_session` with the id it created.
    pub change: Option<ConfigChange>,
    /// The first turn.
    pub turn: Turn,
}

/// What a delivery committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The session the turn was appended to.
    pub session: SessionId,
}

/// A signed request's signature, taken once across every process using a
/// store, together with the delivery it arrived with (see
/// [`Store::deliver_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The signature as received (`v1=<hex>`).
    pub key: &'a str,
    /// The request's Unix time (its `X-Vak-Timestamp`).
    pub at: i64,
    /// The signing window in seconds: a claim older than twice this may be
    /// forgotten, since its request would be refused as stale anyway.
    pub window_secs: i64,
}

impl Claim<'_> {
    /// The signature's digest (SHA-256, hex): what names its replay marker
    /// and what a turn it delivered records ([`Turn::delivery`]).
    pub fn digest(&self) -> String {
        vak_prompt_blocks::sha256_hex(self.key.as_bytes())
    }
}

/// Ledgers, bindings and audit events behind one interface.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Where the store lives, for messages (`file store at …`).
    fn describe(&self) -> String;

    /// `file` or `postgres`: what an unauthenticated probe may learn
    /// (`/healthz`), where [`describe`](Self::describe) names paths and hosts.
    fn kind(&self) -> &'static str;

    /// The prompt history kept in this store: kept texts
    /// and version records live beside the ledgers whose digests they
    /// resolve, so every machine sharing the store reads the same ones.
    fn history(&self) -> &dyn History;

    /// Create a session freezing `contract`; returns its fresh id.
    fn create(
        &self,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError>;

    /// Append a record to an existing session.
    fn append(&self, id: &SessionId, record: &Record) -> Result<(), SessionError>;

    /// A whole ledger.
    fn read(&self, id: &SessionId) -> Result<Ledger, SessionError>;

    /// A ledger's first record only.
    fn read_header(&self, id: &SessionId) -> Result<Header, SessionError>;

    /// The newest `limit` session ids, newest first, and how many there are.
    fn list_newest(&self, limit: usize) -> Result<(Vec<SessionId>, usize), SessionError>;

    /// The newest `limit` audit events, newest first.
    fn audit_newest(&self, limit: usize) -> Result<AuditEntries, SessionError>;

    /// Every binding as `(bot, chat, binding)`, for display.
    fn bindings(&self) -> Result<Vec<(String, String, Binding)>, SessionError>;

    /// One delivery to `bot`/`chat`, all or nothing under the chat's lock:
    /// look the binding up, ask `plan` what to write, write it. `plan` runs
    /// under the lock (so it may resolve the prompt there: a resolution made
    /// before the lock could undo a newer rotation); when it answers `None`
    /// nothing is written and `Ok(None)` is returned.
    fn deliver(
        &self,
        bot: &Name,
        chat: &Name,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Committed>, SessionError> {
        self.deliver_at(bot, chat, None, None, plan)
    }

    /// [`deliver`](Self::deliver) for a prompt resolved from the home side
    /// at `home_generation` (`None`: not from a store's home side), taking
    /// `claim` (a signed request's signature, `None` for an unsigned
    /// delivery) as part of the delivery's outcome.
    ///
    /// A store that holds the home side compares `home_generation` with its
    /// generation under the chat's lock, before `plan` runs, and answers
    /// [`SessionError::HomeMoved`] (nothing written) when it moved on, so a
    /// node holding an older replica can never rotate a chat back.
    ///
    /// The claim is checked under the chat's lock before `plan` runs: one
    /// already taken by a committed delivery answers
    /// [`SessionError::Replayed`] and nothing is written. It is recorded
    /// only with a delivery that commits, so a delivery that fails (or whose
    /// plan answers `None`) leaves the signature free for the sender's
    /// retry.
    fn deliver_at(
        &self,
        bot: &Name,
        chat: &Name,
        home_generation: Option<i64>,
        claim: Option<&Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Committed>, SessionError>;

    /// Forget the signatures claimed more than twice `window_secs` ago by
    /// this store's clock (deliveries do it now and then on their own). A
    /// claim is stamped, when taken, with its request's time brought into
    /// `[now − window, now]`, so whatever time a request claims, its
    /// signature outlives the window it could be replayed in.
    fn prune_claims(&self, window_secs: i64) -> Result<(), SessionError>;

    /// The home side of the prompt and the signing secrets, when this store
    /// holds them (the PostgreSQL store). `None` (the file
    /// store): the home's files are the home side, as they always were.
    fn home(&self) -> Option<&dyn HomeStore> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use camino::Utf8PathBuf;

    #[test]
    fn a_bound_session_keeps_the_first_and_last_turn_and_the_count() {
        let ledger = |records: Vec<Record>| Ledger {
            id: SessionId::generate(),
            path: Utf8PathBuf::from("x"),
            header: Header {
                meta: SessionMeta::default(),
                contract: FrozenContract::default(),
            },
            records,
            skipped_unknown: 0,
            warnings: Vec::new(),
        };
        let turn = |m: &str| Record::Turn(Turn::now(m, ""));
        let none = BoundSession::of(ledger(vec![]));
        assert_eq!(
            (none.first_turn, none.last_turn, none.turns),
            (None, None, 0)
        );
        let one = BoundSession::of(ledger(vec![turn("a")]));
        assert_eq!(one.turns, 1);
        assert_eq!(one.last_turn.map(|t| t.message), Some("a".to_owned()));
        let three = BoundSession::of(ledger(vec![turn("a"), turn("b"), turn("c")]));
        assert_eq!(three.turns, 3);
        assert_eq!(three.first_turn.map(|t| t.message), Some("a".to_owned()));
        assert_eq!(three.last_turn.map(|t| t.message), Some("c".to_owned()));
    }
}
