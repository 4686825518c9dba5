//! [`PgStore`]: the [`Store`] interface on PostgreSQL.

use std::collections::HashMap;
use std::str::FromStr;

use camino::Utf8PathBuf;
use postgres::config::Host;
use postgres::{Config, GenericClient};
use vak_prompt_blocks::{Escaped, Name};
use vak_session::{
    AuditEntries, Binding, Bound, BoundSession, ChatPlan, Committed, FreshSession, Header, Ledger,
    Record, SecurityEvent, SessionError, SessionId, SessionMeta, Store, Turn,
};

use crate::batch::{Batcher, Item, Outcome, Take};
use crate::migrate;
use crate::pool::{Pool, PoolError, Prepared};

/// How long a new connection may take, socket, startup and authentication
/// included, unless the URL's `connect_timeout` (seconds) says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long one statement may run on the server, unless the URL's
/// `options` set `statement_timeout` themselves.
pub const DEFAULT_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How many connections one process opens at most. Measured on a quiet
/// 2-core machine sharing the node with the database, 12 delivered ~5 %
/// more per second than 16 with less CPU per delivery on both sides
/// (BENCHMARKS.md, fifth round); 8 and 10 did not gain.
pub const DEFAULT_POOL: usize = 12;

/// The most continuing deliveries written in one transaction
/// (`vak_batch=N`; 1 writes each alone). One such transaction is written
/// at a time, its deliveries taken once it has a connection: measured,
/// PostgreSQL spent the least CPU per delivery with 8 (against 4, 12 and
/// 16), and two or three batches at once cost it more than no batching
/// at all (BENCHMARKS.md).
pub const DEFAULT_BATCH: usize = 8;

/// How many connections a process opens and how many deliveries it
/// writes in one transaction, from the store URL's `vak_pool` and
/// `vak_batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sizes {
    pool: usize,
    batch: usize,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            pool: DEFAULT_POOL,
            batch: DEFAULT_BATCH,
        }
    }
}

/// How a delivery serialises with others to the same chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// `SELECT … FOR UPDATE` on the binding row (inserted empty first when
    /// absent, so a chat's first delivery is serialised too). The default:
    /// measured level with the advisory lock (see `docs/gateway.md`), and
    /// the lock is the chat's own row, so two chats never share one.
    Row,
    /// `pg_advisory_xact_lock` on a 64-bit hash of `bot/chat`, released at
    /// commit (`?vak_lock=advisory`).
    Advisory,
}

impl LockMode {
    /// The name in `vak_lock=` and in the `vak_settings` row.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Row => "row",
            LockMode::Advisory => "advisory",
        }
    }
}

/// The `vak_settings` key of the database's lock mode.
const LOCK_MODE_KEY: &str = "lock_mode";

/// A key for `pg_advisory_lock` that only `vak store import` takes.
const IMPORT_LOCK: i64 = 0x0076_616b_5f69_6d70; // "vak_imp"

/// How long after its request's time a taken signature is kept, as a
/// multiple of the signing window: the window itself, and as much again
/// for nodes whose clocks differ from the database's, whose clock decides.
const REPLAY_KEEP_WINDOWS: i64 = 2;

/// How long a claim is kept, in seconds: [`REPLAY_KEEP_WINDOWS`] windows,
/// never negative, never overflowing (and small enough that the
/// database's `now − keep` cannot overflow either).
fn keep_secs(window_secs: i64) -> i64 {
    REPLAY_KEEP_WINDOWS.saturating_mul(self::window_secs(window_secs))
}

/// A claim's window in seconds, never negative and small enough that the
/// database's `now − window` cannot overflow.
fn window_secs(window_secs: i64) -> i64 {
    window_secs.clamp(0, i64::from(u32::MAX))
}

/// `vak store import`'s hold on a database ([`PgStore::lock_import`]): a
/// session-level advisory lock on a connection of its own, released when
/// this is dropped (or the process dies, which closes the connection).
pub struct ImportLock {
    client: postgres::Client,
}

impl std::fmt::Debug for ImportLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportLock").finish_non_exhaustive()
    }
}

impl Drop for ImportLock {
    fn drop(&mut self) {
        // Closing the connection releases it too; unlocking first lets the
        // next import in without waiting for the server to notice.
        let _ = self
            .client
            .execute("SELECT pg_advisory_unlock($1)", &[&IMPORT_LOCK]);
    }
}

/// What [`PgStore::import_events`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsImported {
    /// The database's events were the first of those given; the others
    /// were appended after them (this many).
    Appended(usize),
    /// The database holds `present` events that are not the first of those
    /// given (a history of its own): nothing was written.
    Foreign {
        /// How many events the database holds.
        present: usize,
    },
    /// Read back after the append, the database's events differ from those
    /// given: rolled back, nothing was written.
    Differs,
}

/// The PostgreSQL store.
pub struct PgStore {
    pub(crate) pool: Pool,
    pub(crate) described: String,
    lock: LockMode,
    /// Whether the URL named `vak_lock=` (only then does `migrate` record it).
    lock_named: bool,
    /// Set once this process has seen the database agree to its lock mode.
    lock_agreed: std::sync::OnceLock<()>,
    /// What never changes of the session each chat was last seen bound to.
    known: Known,
    /// Continuing deliveries planned from memory, written together; `None`
    /// with `vak_batch=1`.
    batcher: Option<Batcher>,
    /// Claims this store committed, to prune old ones every 256th: its
    /// own, so that two stores (or two tests) never move each other's count.
    claims: std::sync::atomic::AtomicU64,
}

/// For each chat, the session it was last seen bound to, with that
/// session's header and first turn, which never change once written: a
/// delivery that finds the chat still bound to it (and the session still
/// there) is not sent them again, and parses neither. Once this node has
/// written a turn to the chat it also remembers that turn and its row, and
/// plans the chat's next delivery from them without reading at all: the
/// write checks under the chat's lock that they are still the chat's last
/// (`vak_continue_at`, migration 7). At most [`MAX_KNOWN`] chats; past it
/// the map starts over.
#[derive(Default)]
struct Known(std::sync::Mutex<HashMap<(String, String), KnownSession>>);

/// How many chats' sessions [`Known`] holds: as many as the service's
/// prompt cache holds resolutions (`vak_core::MAX_CACHED`), a parsed header
/// and first turn being a few KiB, so the map stays within a few MiB. A
/// service with more chats than that in use is sent some headers again,
/// as before this map.
const MAX_KNOWN: usize = 1024;

#[derive(Clone)]
struct KnownSession {
    id: SessionId,
    header: Header,
    first_turn: Turn,
    /// The last turn this node wrote to the session, and its row in
    /// `vak_records`.
    last: Option<(Turn, i64)>,
    /// Whether to plan from `last` without reading first. Cleared when a
    /// delivery planned from it found that another had written since
    /// (another node delivers to this chat too: planning from memory would
    /// cost a wasted call each time); set again when a read finds this
    /// node's turn still the last.
    trusted: bool,
    /// Whether a delivery planned from `last` joins a batch. Cleared when
    /// one in a batch found its plan stale; set again when one planned
    /// from memory and sent alone is written. Where several nodes take
    /// turns on a chat, a read that finds this node's turn last says
    /// little about the next delivery, and a stale delivery in a batch
    /// waits for the batch before it is read and sent again: measured
    /// with four nodes, batching those cost a quarter of the rate.
    batchable: bool,
}

impl Known {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), KnownSession>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, bot: &str, chat: &str) -> Option<KnownSession> {
        self.map().get(&(bot.to_owned(), chat.to_owned())).cloned()
    }

    fn keep(&self, bot: &str, chat: &str, session: &BoundSession) {
        let Some(first_turn) = &session.first_turn else {
            return;
        };
        let mut map = self.map();
        if map.len() >= MAX_KNOWN {
            map.clear();
        }
        map.insert(
            (bot.to_owned(), chat.to_owned()),
            KnownSession {
                id: session.id.clone(),
                header: session.header.clone(),
                first_turn: first_turn.clone(),
                last: None,
                trusted: false,
                batchable: true,
            },
        );
    }

    /// This node wrote `turn` to the chat's session `id` as row `row`;
    /// `trusted`: whether its next delivery plans from it without reading.
    fn wrote(&self, bot: &str, chat: &str, id: &SessionId, turn: Turn, row: i64, trusted: bool) {
        if let Some(known) = self.map().get_mut(&(bot.to_owned(), chat.to_owned()))
            && known.id == *id
        {
            known.last = Some((turn, row));
            known.trusted = trusted;
        }
    }

    /// The chat was delivered to under its lock: its session is read again
    /// by its next delivery.
    fn forget(&self, bot: &str, chat: &str) {
        self.map().remove(&(bot.to_owned(), chat.to_owned()));
    }

    /// A delivery planned from the chat's remembered last turn found
    /// another written since; `in_batch`: it had joined a batch.
    fn missed(&self, bot: &str, chat: &str, in_batch: bool) {
        if let Some(known) = self.map().get_mut(&(bot.to_owned(), chat.to_owned())) {
            known.trusted = false;
            known.batchable &= !in_batch;
        }
    }

    /// A delivery planned from memory and sent alone was written: the
    /// chat's next ones join batches again.
    fn batchable(&self, bot: &str, chat: &str) {
        if let Some(known) = self.map().get_mut(&(bot.to_owned(), chat.to_owned())) {
            known.batchable = true;
        }
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("at", &self.described)
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("postgres");
    // The URL is input: a host or database name may hold a newline or an
    // escape sequence, and this text heads every error about the store.
    format!(
        "the PostgreSQL store at {}:{port}/{}",
        Escaped(&host),
        Escaped(db)
    )
}

impl PgStore {
    /// Open the store at `url` (`postgres://user@host:port/db`, with the
    /// optional vak parameters `vak_lock=advisory|row` and `vak_pool=N`)
    /// without checking its schema; see [`open`](Self::open).
    pub fn connect(url: &str) -> Result<Self, SessionError> {
        let (url, lock, lock_named, sizes) = vak_params(url)?;
        let mut config = Config::from_str(&url).map_err(|e| SessionError::Backend {
            store: "the PostgreSQL store".to_owned(),
            reason: format!(
                "the store URL is not a valid PostgreSQL URL ({})",
                Escaped(&e.to_string())
            ),
        })?;
        if config.get_application_name().is_none() {
            config.application_name("vak");
        }
        // An unreachable database, or one that accepts and never answers,
        // is an error in seconds, not a hang: the whole connection (socket,
        // startup, authentication) within `connect_timeout`.
        let connect_timeout = *config
            .get_connect_timeout()
            .unwrap_or(&DEFAULT_CONNECT_TIMEOUT);
        config.connect_timeout(connect_timeout);
        // And no statement runs longer on the server than
        // `statement_timeout`, unless the URL's `options` set their own.
        let options = config.get_options().unwrap_or_default().to_owned();
        if !options.contains("statement_timeout") {
            let statement = format!(
                "-c statement_timeout={}s",
                DEFAULT_STATEMENT_TIMEOUT.as_secs()
            );
            config.options(format!("{options} {statement}").trim_start());
        }
        let described = describe(&config);
        Ok(PgStore {
            pool: Pool::new(config, connect_timeout, sizes.pool),
            described,
            lock,
            lock_named,
            lock_agreed: std::sync::OnceLock::new(),
            known: Known::default(),
            batcher: (sizes.batch > 1).then(|| Batcher::new(sizes.batch, 1)),
            claims: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The most connections this process opens to the database
    /// ([`DEFAULT_POOL`], or the URL's `vak_pool=N`): no more deliveries
    /// than this run against it at once.
    pub fn connections(&self) -> usize {
        self.pool.max()
    }

    /// How many deliveries this store serves at once: one per connection,
    /// and with batching (`vak_batch=N` over 1) as many more as the
    /// batches written at once can hold, so that batches fill while every
    /// connection is busy. A service runs this many blocking threads.
    pub fn deliveries_at_once(&self) -> usize {
        self.pool.max()
            + self
                .batcher
                .as_ref()
                .map_or(0, |b| b.max_items() * b.leaders())
    }

    /// Open the store at `url` and check that its schema is the one this
    /// build ships (`vak store migrate` applies it).
    pub fn open(url: &str) -> Result<Self, SessionError> {
        let store = Self::connect(url)?;
        let current = store
            .pool
            .with(migrate::current)
            .map_err(|e| store.err(&e))?;
        let latest = migrate::latest();
        match current {
            Some(v) if v == latest => {
                let missing = store
                    .pool
                    .with(migrate::missing)
                    .map_err(|e| store.err(&e))?;
                if missing.is_empty() {
                    Ok(store)
                } else {
                    let versions: Vec<String> = missing.iter().map(ToString::to_string).collect();
                    Err(store.fail(format!(
                        "its schema lacks migration {} of this build; run `vak store migrate --store URL`",
                        versions.join(", ")
                    )))
                }
            }
            Some(found) if found > latest => Err(SessionError::SchemaTooNew {
                store: store.described.clone(),
                found,
                known: latest,
            }),
            Some(v) => Err(store.fail(format!(
                "its schema is version {v}, older than this build's {latest}; run `vak store migrate --store URL`"
            ))),
            None => Err(store.fail(
                "it has no vak schema yet; run `vak store migrate --store URL` first".to_owned(),
            )),
        }
    }

    /// Apply the migrations not yet applied; returns their versions. A URL
    /// that names `vak_lock=` records that mode as the database's, for every
    /// node (run with every node stopped: one still locking the old way
    /// would not exclude the others).
    ///
    /// # Errors
    ///
    /// [`SessionError::SchemaTooNew`] (nothing written) when a newer build
    /// migrated the database past this one's migrations.
    pub fn migrate(&self) -> Result<Vec<i32>, SessionError> {
        let applied = match self.pool.with(migrate::apply).map_err(|e| self.err(&e))? {
            migrate::Applied::Versions(applied) => applied,
            migrate::Applied::Newer(found) => {
                return Err(SessionError::SchemaTooNew {
                    store: self.described.clone(),
                    found,
                    known: migrate::latest(),
                });
            }
        };
        if self.lock_named {
            let mode = self.lock.as_str();
            self.pool
                .with(|client| {
                    client.execute(
                        "INSERT INTO vak_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = $2",
                        &[&LOCK_MODE_KEY, &mode],
                    )
                })
                .map_err(|e| self.err(&e))?;
        }
        Ok(applied)
    }

    /// Refuse to deliver with a lock mode other than the database's: nodes
    /// locking a chat in two ways would not exclude each other, and one
    /// prompt change would rotate a chat twice. The first delivery on a
    /// database records its mode; checked once per process.
    fn agree_on_lock_mode(&self) -> Result<(), SessionError> {
        if self.lock_agreed.get().is_some() {
            return Ok(());
        }
        let mode = self.lock.as_str();
        let recorded: String = self
            .pool
            .with(|client| {
                client.execute(
                    "INSERT INTO vak_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                    &[&LOCK_MODE_KEY, &mode],
                )?;
                Ok(client
                    .query_one("SELECT value FROM vak_settings WHERE key = $1", &[&LOCK_MODE_KEY])?
                    .get(0))
            })
            .map_err(|e| self.err(&e))?;
        if recorded != mode {
            return Err(self.fail(format!(
                "its nodes lock chats with `vak_lock={}` and this URL asks for `vak_lock={mode}`; nodes locking two ways do not exclude each other, so use `vak_lock={}` here too (to change the database's mode, stop every node and run `vak store migrate --store URL?vak_lock={mode}`)",
                Escaped(&recorded),
                Escaped(&recorded)
            )));
        }
        let _ = self.lock_agreed.set(());
        Ok(())
    }

    /// The lock mode in use.
    pub fn lock_mode(&self) -> LockMode {
        self.lock
    }

    pub(crate) fn fail(&self, reason: String) -> SessionError {
        SessionError::Backend {
            store: self.described.clone(),
            reason,
        }
    }

    /// The first `limit` text values of `rows_sql` (which takes the limit
    /// as `$1`), and the count `count_sql` gives: one page of a listing.
    fn newest(
        &self,
        rows_sql: &str,
        count_sql: &str,
        limit: usize,
    ) -> Result<(Vec<String>, usize), SessionError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (rows, total) = self
            .pool
            .with(|client| {
                let rows: Vec<String> = client
                    .query(rows_sql, &[&limit])?
                    .into_iter()
                    .map(|row| row.get(0))
                    .collect();
                let total: i64 = client.query_one(count_sql, &[])?.get(0);
                Ok((rows, total))
            })
            .map_err(|e| self.err(&e))?;
        Ok((rows, usize::try_from(total).unwrap_or(0)))
    }

    pub(crate) fn err(&self, error: &(impl Explain + ?Sized)) -> SessionError {
        self.fail(error.explain())
    }

    fn location(id: &SessionId) -> Utf8PathBuf {
        Utf8PathBuf::from(format!("postgres:vak_sessions/{id}"))
    }

    fn encode<T: serde::Serialize>(
        &self,
        value: &T,
        id: &SessionId,
    ) -> Result<String, SessionError> {
        serde_json::to_string(value).map_err(|source| SessionError::Encode {
            path: Self::location(id),
            source,
        })
    }

    fn bad(&self, id: &SessionId, what: &str, e: &serde_json::Error) -> SessionError {
        self.fail(format!(
            "session `{id}` holds {what} that does not parse ({e})"
        ))
    }
}

/// A failure that can say what went wrong, as a clause for a message.
pub(crate) trait Explain {
    /// The clause.
    fn explain(&self) -> String;
}

impl Explain for postgres::Error {
    fn explain(&self) -> String {
        reason(self)
    }
}

impl Explain for PoolError {
    fn explain(&self) -> String {
        match self {
            PoolError::Db(error) => reason(error),
            PoolError::NoAnswer(within) => format!(
                "did not answer within {} seconds (the URL's `connect_timeout` sets how long to wait)",
                within.as_secs()
            ),
            PoolError::Spawn(error) => format!("cannot start a thread to connect on ({error})"),
        }
    }
}

/// What a database error says, as a clause for a message.
pub(crate) fn reason(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!(
            "the database refused: {} ({})",
            db.message(),
            db.code().code()
        ),
        None => match std::error::Error::source(error) {
            Some(cause) => format!("{error} ({cause})"),
            None => error.to_string(),
        },
    }
}

/// Split vak's own parameters off a store URL.
fn vak_params(url: &str) -> Result<(String, LockMode, bool, Sizes), SessionError> {
    let bad = |reason: String| SessionError::Backend {
        store: "the PostgreSQL store".to_owned(),
        reason,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), LockMode::Row, false, Sizes::default()));
    };
    let mut lock = LockMode::Row;
    let mut named = false;
    let mut sizes = Sizes::default();
    let count = |key: &str, n: &str| -> Result<usize, SessionError> {
        n.parse()
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "`{key}={}` in the store URL: expected 1 to 64",
                    Escaped(n)
                ))
            })
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("vak_lock", "advisory")) => (lock, named) = (LockMode::Advisory, true),
            Some(("vak_lock", "row")) => (lock, named) = (LockMode::Row, true),
            Some(("vak_lock", other)) => {
                return Err(bad(format!(
                    "`vak_lock={}` in the store URL: expected `advisory` or `row`",
                    Escaped(other)
                )));
            }
            Some(("vak_pool", n)) => sizes.pool = count("vak_pool", n)?,
            Some(("vak_batch", n)) => sizes.batch = count("vak_batch", n)?,
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, lock, named, sizes))
}

fn read_ledger(
    store: &PgStore,
    client: &mut impl GenericClient,
    id: &SessionId,
) -> Result<Result<Ledger, SessionError>, postgres::Error> {
    let Some(row) = client.query_opt(
        "SELECT header FROM vak_sessions WHERE id = $1",
        &[&id.as_str()],
    )?
    else {
        return Ok(Err(not_found(id)));
    };
    let header_text: String = row.get(0);
    let header = match serde_json::from_str::<Header>(&header_text) {
        Ok(h) => h,
        Err(e) => return Ok(Err(store.bad(id, "a created record", &e))),
    };
    let mut records = Vec::new();
    let mut skipped_unknown = 0;
    for row in client.query(
        "SELECT record FROM vak_records WHERE session_id = $1 ORDER BY seq",
        &[&id.as_str()],
    )? {
        let text: String = row.get(0);
        match Record::from_json(text.as_bytes()) {
            Ok(Record::Unknown) => skipped_unknown += 1,
            Ok(record) => records.push(record),
            Err(e) => return Ok(Err(store.bad(id, "a record", &e))),
        }
    }
    Ok(Ok(Ledger {
        id: id.clone(),
        path: PgStore::location(id),
        header,
        records,
        skipped_unknown,
        warnings: Vec::new(),
    }))
}

/// A turn record as the store writes it begins with its tag:
/// `{"type":"turn",`. The statements that look for turns spell it as a
/// literal, `record LIKE '{"type":"turn",%'`, the predicate of the partial
/// index `vak_records_turns` (migration 6): with the pattern as a
/// parameter the planner cannot use that index, and its generic plan read
/// and sorted every record of the session on every delivery.
/// A delivery's writes, prepared once per connection.
const INSERT_RECORD: &str = "INSERT INTO vak_records (session_id, record) VALUES ($1, $2)";
const INSERT_SESSION: &str =
    "INSERT INTO vak_sessions (id, created_at, header) VALUES ($1, $2, $3)";
const INSERT_EVENT: &str = "INSERT INTO vak_audit (event) VALUES ($1)";
const BIND: &str = "INSERT INTO vak_bindings (bot, chat, session_id, bound_at) VALUES ($1, $2, $3, $4)
 ON CONFLICT (bot, chat) DO UPDATE SET session_id = EXCLUDED.session_id, bound_at = EXCLUDED.bound_at";

/// The chat's lock by the binding row; no row for a chat never delivered
/// to.
const ROW_LOCK: &str = "SELECT 1 FROM vak_bindings WHERE bot = $1 AND chat = $2 FOR UPDATE";

/// The empty binding row a new chat's lock is taken on.
const ROW_INSERT: &str =
    "INSERT INTO vak_bindings (bot, chat) VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// The chat's lock by a transaction-scoped advisory lock on a hash of
/// `bot/chat`.
const ADVISORY_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 7))";

/// Everything a delivery reads under the chat's lock, in one statement:
/// whether the claim (`$3`, none when NULL) was taken, the home side's
/// generation, the bound session's id and header, its first and last turn
/// (indexed reads, never its whole history) and the last turn's row.
/// The turn count is the last turn's `seq`, which every delivery writes;
/// only a last turn without one (written by an older build, or appended
/// outside a delivery) costs a [`COUNT_TURNS`], which grows with the
/// session.
const LOOKUP: &str = r#"
WITH claim AS (
    INSERT INTO vak_replay (key, at)
    SELECT $3::text, LEAST(GREATEST($4::bigint, n - $5::bigint), n)
    FROM (SELECT extract(epoch FROM now())::bigint AS n) AS clock
    WHERE $3::text IS NOT NULL
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
), bound AS (
    SELECT session_id FROM vak_bindings WHERE bot = $1 AND chat = $2
)
SELECT (SELECT count(*) FROM claim),
       (SELECT generation FROM vak_home_generation),
       b.session_id,
       (SELECT header FROM vak_sessions WHERE id = b.session_id),
       (SELECT record FROM vak_records
         WHERE session_id = b.session_id AND record LIKE '{"type":"turn",%' ORDER BY seq ASC LIMIT 1),
       last.record,
       last.seq
FROM (SELECT 1) AS one LEFT JOIN bound AS b ON true
LEFT JOIN LATERAL (SELECT record, seq FROM vak_records
         WHERE session_id = b.session_id AND record LIKE '{"type":"turn",%' ORDER BY seq DESC LIMIT 1
) AS last ON true"#;

/// [`LOOKUP`] without the chat's lock or the claim (its first column is
/// always 1): the read a continuing delivery plans from, committed by
/// [`CONTINUE`] only if it still holds. `$3` is the session the chat was
/// last seen bound to ([`Known`]): when it still is, and is still there,
/// its header and first turn are not sent (the last column says so).
const LOOKUP_UNLOCKED: &str = r#"
SELECT 1::bigint,
       (SELECT generation FROM vak_home_generation),
       b.session_id,
       CASE WHEN k.known THEN NULL ELSE (SELECT header FROM vak_sessions WHERE id = b.session_id) END,
       CASE WHEN k.known THEN NULL ELSE (SELECT record FROM vak_records
         WHERE session_id = b.session_id AND record LIKE '{"type":"turn",%' ORDER BY seq ASC LIMIT 1) END,
       last.record,
       last.seq,
       k.known
FROM (SELECT 1) AS one
LEFT JOIN vak_bindings AS b ON b.bot = $1 AND b.chat = $2
LEFT JOIN LATERAL (SELECT b.session_id = $3::text
         AND EXISTS (SELECT 1 FROM vak_sessions WHERE id = $3::text) AS known) AS k ON true
LEFT JOIN LATERAL (SELECT record, seq FROM vak_records
         WHERE session_id = b.session_id AND record LIKE '{"type":"turn",%' ORDER BY seq DESC LIMIT 1
) AS last ON true"#;

/// The continuing delivery's write, in one statement (migrations 6 and 7
/// say what `vak_continue_at` checks under the chat's lock before it
/// writes); it answers the row of the turn it wrote.
const CONTINUE_AT: &str = "SELECT outcome, generation, written FROM vak_continue_at($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// Several continuing deliveries' writes in one call, one transaction
/// (`vak_continue_many`, migration 8): one row per item.
const CONTINUE_MANY: &str = "SELECT item, outcome, generation, written FROM vak_continue_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// A session's turns counted, when its last turn does not carry its number.
const COUNT_TURNS: &str =
    r#"SELECT count(*) FROM vak_records WHERE session_id = $1 AND record LIKE '{"type":"turn",%'"#;

/// The bound session for a delivery from the [`LOOKUP`] row: unbound, live
/// (header, first and last turn, count) or gone (its ledger is not there).
/// `count` counts the turns when the last one does not say its number.
fn bound_of(
    store: &PgStore,
    row: &postgres::Row,
    count: impl FnOnce(&SessionId) -> Result<i64, SessionError>,
) -> Result<Bound, SessionError> {
    let Some(raw) = row.get::<_, Option<String>>(2) else {
        return Ok(Bound::Unbound);
    };
    let id = SessionId::parse(&raw)?;
    let Some(header_text) = row.get::<_, Option<String>>(3) else {
        return Ok(Bound::Gone(id));
    };
    let header = serde_json::from_str::<Header>(&header_text)
        .map_err(|e| store.bad(&id, "a created record", &e))?;
    let turn = |text: Option<String>| -> Result<Option<Turn>, SessionError> {
        match text.map(|text| Record::from_json(text.as_bytes())) {
            None => Ok(None),
            Some(Ok(Record::Turn(turn))) => Ok(Some(turn)),
            Some(Ok(_)) => Ok(None),
            Some(Err(e)) => Err(store.bad(&id, "a record", &e)),
        }
    };
    let first_turn = turn(row.get(4))?;
    let last_turn = turn(row.get(5))?;
    let turns = match (&first_turn, last_turn.as_ref().and_then(|t| t.seq)) {
        (None, _) => 0,
        (Some(_), Some(seq)) if seq >= 1 => usize::try_from(seq).unwrap_or(0),
        (Some(_), _) => usize::try_from(count(&id)?).unwrap_or(0),
    };
    Ok(Bound::Live(Box::new(BoundSession {
        id,
        header,
        first_turn,
        last_turn,
        turns,
    })))
}

/// Every audit event of a type this build knows, oldest first (the others
/// are passed over, as [`Store::audit_newest`] does).
fn known_events(client: &mut impl GenericClient) -> Result<Vec<SecurityEvent>, postgres::Error> {
    Ok(client
        .query("SELECT event FROM vak_audit ORDER BY seq", &[])?
        .into_iter()
        .filter_map(|row| {
            let text: String = row.get(0);
            serde_json::from_str::<SecurityEvent>(&text).ok()
        })
        .filter(|event| !matches!(event, SecurityEvent::Unknown))
        .collect())
}

fn not_found(id: &SessionId) -> SessionError {
    SessionError::NotFound {
        id: id.to_string(),
        path: PgStore::location(id),
    }
}

fn insert_session(
    client: &mut impl GenericClient,
    id: &SessionId,
    created_at: &str,
    header: &str,
) -> Result<(), postgres::Error> {
    client.execute(
        "INSERT INTO vak_sessions (id, created_at, header) VALUES ($1, $2, $3)",
        &[&id.as_str(), &created_at, &header],
    )?;
    Ok(())
}

fn insert_record(
    client: &mut impl GenericClient,
    id: &SessionId,
    record: &str,
) -> Result<(), postgres::Error> {
    client.execute(
        "INSERT INTO vak_records (session_id, record) VALUES ($1, $2)",
        &[&id.as_str(), &record],
    )?;
    Ok(())
}

impl PgStore {
    fn header_text(
        &self,
        id: &SessionId,
        meta: SessionMeta,
        contract: vak_session::FrozenContract,
    ) -> Result<(String, String), SessionError> {
        let created_at = meta.created_at.clone();
        // The same JSON the file backend writes as a ledger's first line.
        let text = self.encode(&Record::Created(Box::new(Header { meta, contract })), id)?;
        Ok((created_at, text))
    }

    /// Insert a session with a given id and records, as `vak store import`
    /// does; `false` when the id is taken (nothing written).
    pub fn import_session(&self, ledger: &Ledger) -> Result<bool, SessionError> {
        let (created_at, header) = self.header_text(
            &ledger.id,
            ledger.header.meta.clone(),
            ledger.header.contract.clone(),
        )?;
        let records = ledger
            .records
            .iter()
            .map(|r| self.encode(r, &ledger.id))
            .collect::<Result<Vec<_>, _>>()?;
        self.pool
            .with(|client| {
                let mut tx = client.transaction()?;
                let inserted = tx.execute(
                    "INSERT INTO vak_sessions (id, created_at, header) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
                    &[&ledger.id.as_str(), &created_at, &header],
                )?;
                if inserted == 0 {
                    return Ok(false);
                }
                for record in &records {
                    insert_record(&mut tx, &ledger.id, record)?;
                }
                tx.commit()?;
                Ok(true)
            })
            .map_err(|e| self.err(&e))
    }

    /// Wait for, then take, the lock only `vak store import` takes, so two
    /// imports into this database never interleave (each would find the
    /// other's half-copied audit events and sessions). Held until the
    /// returned [`ImportLock`] is dropped.
    ///
    /// # Errors
    ///
    /// The database cannot be reached or refuses the lock.
    pub fn lock_import(&self) -> Result<ImportLock, SessionError> {
        let mut client = self.pool.connect_alone().map_err(|e| self.err(&e))?;
        // Waiting for another import is waiting, not a stuck statement:
        // this connection only ever holds the lock.
        client
            .batch_execute("SET statement_timeout = 0")
            .map_err(|e| self.err(&e))?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&IMPORT_LOCK])
            .map_err(|e| self.err(&e))?;
        Ok(ImportLock { client })
    }

    /// Copy a file store's audit events (`events`, oldest first), as `vak
    /// store import` does, in one transaction that holds the audit table
    /// against every other writer (a delivery's `config-change` event waits
    /// for it): the database's events must be the first of `events`, the
    /// rest are appended, and the whole table is read back and compared
    /// before it commits. Events of a type this build does not know are
    /// passed over on both sides, as the listings do.
    ///
    /// # Errors
    ///
    /// An event that does not encode, or the database failing.
    pub fn import_events(&self, events: &[SecurityEvent]) -> Result<EventsImported, SessionError> {
        let texts = events
            .iter()
            .map(|event| serde_json::to_string(event).map_err(|e| self.fail(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        self.pool
            .with(|client| {
                let mut tx = client.transaction()?;
                // SHARE ROW EXCLUSIVE conflicts with the ROW EXCLUSIVE an
                // insert takes, and with itself: what is read below is
                // still the table when the appended rows commit.
                tx.batch_execute("LOCK TABLE vak_audit IN SHARE ROW EXCLUSIVE MODE")?;
                let present = known_events(&mut tx)?;
                if events.get(..present.len()) != Some(&present[..]) {
                    return Ok(EventsImported::Foreign {
                        present: present.len(),
                    });
                }
                let missing = texts.get(present.len()..).unwrap_or_default();
                for text in missing {
                    tx.execute("INSERT INTO vak_audit (event) VALUES ($1)", &[text])?;
                }
                if known_events(&mut tx)? != events {
                    // Dropped without a commit: rolled back.
                    return Ok(EventsImported::Differs);
                }
                tx.commit()?;
                Ok(EventsImported::Appended(missing.len()))
            })
            .map_err(|e| self.err(&e))
    }

    /// Add a binding the database does not hold yet, as `vak store import`
    /// does, or move one it holds on from `replaces`, the session it binds
    /// the chat to now (an earlier import's, which the file store has
    /// since moved on from); `true` when it was added or moved. One that
    /// binds the chat to any other session is left as it is: a node on the
    /// database moved the chat on, and an import is never to roll that back
    /// (the import then finds the bindings differ, and says so).
    pub fn import_binding(
        &self,
        bot: &str,
        chat: &str,
        binding: &Binding,
        replaces: Option<&str>,
    ) -> Result<bool, SessionError> {
        self.pool
            .with(|client| {
                let changed = client.execute(
                    "INSERT INTO vak_bindings (bot, chat, session_id, bound_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (bot, chat) DO UPDATE SET session_id = EXCLUDED.session_id, bound_at = EXCLUDED.bound_at
                     WHERE vak_bindings.session_id = $5",
                    &[
                        &bot,
                        &chat,
                        &binding.session_id.as_str(),
                        &binding.bound_at,
                        &replaces,
                    ],
                )?;
                Ok(changed == 1)
            })
            .map_err(|e| self.err(&e))
    }

    /// Take the signature whose digest is `digest` (the file store's replay
    /// marker of a request it delivered at `at`), as `vak store import`
    /// does, so the request is refused here too within its window; `true`
    /// when the database did not hold it yet.
    pub fn import_replay(&self, digest: &str, at: i64) -> Result<bool, SessionError> {
        self.pool
            .with(|client| {
                let added = client.execute(
                    "INSERT INTO vak_replay (key, at) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                    &[&digest, &at],
                )?;
                Ok(added == 1)
            })
            .map_err(|e| self.err(&e))
    }
}

impl Store for PgStore {
    fn prune_claims(&self, window_secs: i64) -> Result<(), SessionError> {
        self.pool
            .with(|client| {
                client.execute(
                    "DELETE FROM vak_replay WHERE at < extract(epoch FROM now())::bigint - $1",
                    &[&keep_secs(window_secs)],
                )?;
                Ok(())
            })
            .map_err(|e| self.err(&e))
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn history(&self) -> &dyn vak_session::History {
        self
    }

    fn create(
        &self,
        meta: SessionMeta,
        contract: vak_session::FrozenContract,
    ) -> Result<SessionId, SessionError> {
        let id = SessionId::generate();
        let (created_at, header) = self.header_text(&id, meta, contract)?;
        self.pool
            .with(|client| insert_session(client, &id, &created_at, &header))
            .map_err(|e| self.err(&e))?;
        Ok(id)
    }

    fn append(&self, id: &SessionId, record: &Record) -> Result<(), SessionError> {
        if matches!(record, Record::Created(_) | Record::Unknown) {
            return Err(SessionError::NotAppendable {
                kind: record.kind(),
                id: id.to_string(),
            });
        }
        let text = self.encode(record, id)?;
        let inserted = self
            .pool
            .with(|client| {
                client.execute(
                    "INSERT INTO vak_records (session_id, record) SELECT id, $2 FROM vak_sessions WHERE id = $1",
                    &[&id.as_str(), &text],
                )
            })
            .map_err(|e| self.err(&e))?;
        if inserted == 0 {
            return Err(not_found(id));
        }
        Ok(())
    }

    fn read(&self, id: &SessionId) -> Result<Ledger, SessionError> {
        self.pool
            .with(|client| read_ledger(self, client, id))
            .map_err(|e| self.err(&e))?
    }

    fn read_header(&self, id: &SessionId) -> Result<Header, SessionError> {
        let text: Option<String> = self
            .pool
            .with(|client| {
                Ok(client
                    .query_opt(
                        "SELECT header FROM vak_sessions WHERE id = $1",
                        &[&id.as_str()],
                    )?
                    .map(|row| row.get(0)))
            })
            .map_err(|e| self.err(&e))?;
        let text = text.ok_or_else(|| not_found(id))?;
        serde_json::from_str(&text).map_err(|e| self.bad(id, "a created record", &e))
    }

    fn list_newest(&self, limit: usize) -> Result<(Vec<SessionId>, usize), SessionError> {
        let (rows, total) = self.newest(
            "SELECT id FROM vak_sessions ORDER BY id DESC LIMIT $1",
            "SELECT count(*) FROM vak_sessions",
            limit,
        )?;
        let ids = rows
            .iter()
            .map(|raw| SessionId::parse(raw))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ids, total))
    }

    fn audit_newest(&self, limit: usize) -> Result<AuditEntries, SessionError> {
        let (rows, total) = self.newest(
            "SELECT event FROM vak_audit ORDER BY seq DESC LIMIT $1",
            "SELECT count(*) FROM vak_audit",
            limit,
        )?;
        let mut entries = AuditEntries {
            total,
            ..AuditEntries::default()
        };
        for text in rows {
            match serde_json::from_str::<SecurityEvent>(&text) {
                Ok(SecurityEvent::Unknown) => entries.skipped_unknown += 1,
                Ok(event) => entries.events.push(event),
                Err(_) => entries.skipped_lines += 1,
            }
        }
        Ok(entries)
    }

    fn bindings(&self) -> Result<Vec<(String, String, Binding)>, SessionError> {
        let rows: Vec<(String, String, String, String)> = self
            .pool
            .with(|client| {
                Ok(client
                    .query(
                        "SELECT bot, chat, session_id, bound_at FROM vak_bindings WHERE session_id IS NOT NULL ORDER BY bot, chat",
                        &[],
                    )?
                    .into_iter()
                    .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
                    .collect())
            })
            .map_err(|e| self.err(&e))?;
        rows.into_iter()
            .map(|(bot, chat, id, bound_at)| {
                Ok((
                    bot,
                    chat,
                    Binding {
                        session_id: SessionId::parse(&id)?,
                        bound_at,
                    },
                ))
            })
            .collect()
    }

    fn home(&self) -> Option<&dyn vak_session::HomeStore> {
        Some(self)
    }

    fn deliver_at(
        &self,
        bot: &Name,
        chat: &Name,
        home_generation: Option<i64>,
        claim: Option<&vak_session::Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Committed>, SessionError> {
        self.agree_on_lock_mode()?;
        // Set when a plan from memory found the chat not continuing its
        // session: it is delivered under the lock at once, as
        // `continue_unlocked` would after planning the same from memory.
        let mut not_continuing = false;
        if let Some(done) =
            self.continue_batched(bot, chat, home_generation, claim, plan, &mut not_continuing)
        {
            return done;
        }
        let mut outcome: Result<Option<Committed>, SessionError> = Ok(None);
        let (bot_s, chat_s) = (bot.as_str(), chat.as_str());
        self.pool
            .with_prepared(|client, prepared| {
                // The common case, a chat whose session continues, in two
                // round trips without a transaction held open between them;
                // every other case, or a read that no longer held, under
                // the chat's lock.
                if !not_continuing
                    && let Some(done) = self.continue_unlocked(
                        client,
                        prepared,
                        bot,
                        chat,
                        home_generation,
                        claim,
                        plan,
                    )?
                {
                    if matches!(done, Ok(Some(_))) {
                        prune_claims_now(client, &self.claims, claim);
                    }
                    outcome = done;
                    return Ok(());
                }
                let mut tx = client.transaction()?;
                // The chat's lock: one statement when the chat has a
                // binding row (every chat after its first delivery).
                match self.lock {
                    LockMode::Advisory => {
                        let lock = prepared.get(&mut tx, ADVISORY_LOCK)?;
                        tx.execute(&lock, &[&bot_s, &chat_s])?;
                    }
                    LockMode::Row => {
                        let lock = prepared.get(&mut tx, ROW_LOCK)?;
                        if tx.query_opt(&lock, &[&bot_s, &chat_s])?.is_none() {
                            let insert = prepared.get(&mut tx, ROW_INSERT)?;
                            tx.execute(&insert, &[&bot_s, &chat_s])?;
                            tx.query_opt(&lock, &[&bot_s, &chat_s])?;
                        }
                    }
                }
                // Then, in one statement (its snapshot taken after the lock,
                // so it sees the last delivery to this chat whole): the
                // signature taken, the home side's generation, the binding
                // and the bound session's header, first and last turn and
                // turn count.
                //
                // The signature is taken in this transaction, so it is
                // taken exactly when the delivery commits: a delivery that
                // fails rolls it back and the sender's retry is delivered.
                // A concurrent insert of the same key (the same signed
                // request on another node, to any chat) makes this one wait
                // for that transaction and then insert nothing. It is
                // stamped with the request's time brought into the
                // database's `[now − window, now]`: a time dated far back
                // (the sender's claim, up to `i64::MIN`) must not make the
                // claim look old enough to prune while its request is in
                // the window.
                let lookup = prepared.get(&mut tx, LOOKUP)?;
                let (key, at, window) = match claim {
                    Some(claim) => (
                        Some(claim.digest()),
                        claim.at,
                        window_secs(claim.window_secs),
                    ),
                    None => (None, 0, 0),
                };
                let row = tx.query_one(&lookup, &[&bot_s, &chat_s, &key, &at, &window])?;
                if claim.is_some() && row.get::<_, i64>(0) == 0 {
                    outcome = Err(SessionError::Replayed);
                    return Ok(());
                }
                // Under the chat's lock: a prompt resolved from an older
                // home side must not be planned with (it could rotate the
                // chat back to a prompt another node already moved past).
                if let Some(resolved) = home_generation {
                    let now: i64 = row.get(1);
                    if now != resolved {
                        outcome = Err(SessionError::HomeMoved {
                            store: self.described.clone(),
                            resolved,
                            now,
                        });
                        return Ok(());
                    }
                }
                let bound = self.read_bound(&mut tx, prepared, &row)?;
                let bound = match bound {
                    Ok(bound) => bound,
                    Err(e) => {
                        outcome = Err(e);
                        return Ok(());
                    }
                };
                let Some(planned) = plan(&bound) else {
                    return Ok(());
                };
                // Both stores record the delivery a turn came with; here the
                // claim's row commits with it, so nothing reads it back.
                let delivery = claim.map(vak_session::Claim::digest);
                let session = match planned {
                    ChatPlan::Continue { mut turn } => {
                        turn.delivery = delivery;
                        let Bound::Live(ledger) = &bound else {
                            outcome = Err(SessionError::PlanMismatch {
                                bot: bot.to_string(),
                                chat: chat.to_string(),
                            });
                            return Ok(());
                        };
                        // Its number, so the next delivery reads the count
                        // off this line (as the file store does).
                        turn.seq = Some(ledger.turns as u64 + 1);
                        match self.encode(&Record::Turn(turn), &ledger.id) {
                            Ok(text) => {
                                let insert = prepared.get(&mut tx, INSERT_RECORD)?;
                                tx.execute(&insert, &[&ledger.id.as_str(), &text])?;
                            }
                            Err(e) => {
                                outcome = Err(e);
                                return Ok(());
                            }
                        }
                        ledger.id.clone()
                    }
                    ChatPlan::Fresh(fresh) => {
                        let FreshSession {
                            meta,
                            contract,
                            change,
                            mut turn,
                        } = *fresh;
                        turn.delivery = delivery;
                        turn.seq = Some(1);
                        let id = SessionId::generate();
                        let encoded = self.header_text(&id, meta, contract).and_then(|h| {
                            let turn = self.encode(&Record::Turn(turn), &id)?;
                            let event = change
                                .map(|mut change| {
                                    change.new_session = id.clone();
                                    serde_json::to_string(&SecurityEvent::ConfigChange(change))
                                        .map_err(|e| self.fail(e.to_string()))
                                })
                                .transpose()?;
                            // A chat bound to a session whose ledger is gone
                            // says so in the audit log, in this transaction.
                            let rebound = match &bound {
                                Bound::Gone(gone) => Some(
                                    serde_json::to_string(&SecurityEvent::Rebound(
                                        vak_session::Rebound {
                                            at: vak_session::now_rfc3339(),
                                            bot: bot.to_string(),
                                            chat: chat.to_string(),
                                            gone_session: gone.clone(),
                                            new_session: id.clone(),
                                        },
                                    ))
                                    .map_err(|e| self.fail(e.to_string()))?,
                                ),
                                _ => None,
                            };
                            Ok((
                                h,
                                turn,
                                event.into_iter().chain(rebound).collect::<Vec<_>>(),
                            ))
                        });
                        let ((created_at, header), turn, events) = match encoded {
                            Ok(parts) => parts,
                            Err(e) => {
                                outcome = Err(e);
                                return Ok(());
                            }
                        };
                        let insert = prepared.get(&mut tx, INSERT_SESSION)?;
                        tx.execute(&insert, &[&id.as_str(), &created_at, &header])?;
                        for event in &events {
                            let insert = prepared.get(&mut tx, INSERT_EVENT)?;
                            tx.execute(&insert, &[event])?;
                        }
                        let insert = prepared.get(&mut tx, INSERT_RECORD)?;
                        tx.execute(&insert, &[&id.as_str(), &turn])?;
                        let bound_at = vak_session::now_rfc3339();
                        let bind = prepared.get(&mut tx, BIND)?;
                        tx.execute(&bind, &[&bot_s, &chat_s, &id.as_str(), &bound_at])?;
                        id
                    }
                };
                vak_session::crash::point("transaction-written");
                tx.commit()?;
                vak_session::crash::point("transaction-committed");
                // What this node remembers of the chat no longer describes
                // its last turn (nor, after a new session, its session).
                self.known.forget(bot_s, chat_s);
                outcome = Ok(Some(Committed { session }));
                prune_claims_now(client, &self.claims, claim);
                Ok(())
            })
            .map_err(|e| self.err(&e))?;
        outcome
    }
}

/// After a committed delivery that took `claim`: every 256th time, forget
/// the claims older than the replay window.
///
/// Old claims are forgotten outside the delivery's transaction (two
/// deliveries deleting the same rows in different orders could deadlock),
/// and best effort: the delivery is committed, so a failed prune must not
/// turn its 200 into a 500 whose retry would be refused. The cut-off is
/// the database's clock, never the claim's time: that is the sender's, and
/// one dated far ahead would delete signatures whose requests are still in
/// their window.
fn prune_claims_now(
    client: &mut postgres::Client,
    claims: &std::sync::atomic::AtomicU64,
    claim: Option<&vak_session::Claim<'_>>,
) {
    if let Some(claim) = claim {
        prune_claims_after(client, claims, 1, claim.window_secs);
    }
}

/// After `taken` claims committed together: prune as [`prune_claims_now`]
/// does when the count passed a multiple of 256.
fn prune_claims_after(
    client: &mut postgres::Client,
    claims: &std::sync::atomic::AtomicU64,
    taken: u64,
    window_secs: i64,
) {
    let before = claims.fetch_add(taken, std::sync::atomic::Ordering::Relaxed);
    if taken > 0 && (before.is_multiple_of(256) || before / 256 != (before + taken - 1) / 256) {
        let _ = client.execute(
            "DELETE FROM vak_replay WHERE at < extract(epoch FROM now())::bigint - $1",
            &[&keep_secs(window_secs)],
        );
    }
}

impl PgStore {
    /// The bound session of a [`LOOKUP`] or [`LOOKUP_UNLOCKED`] row, its
    /// turns counted on `client` when the last turn does not say how many.
    fn read_bound(
        &self,
        client: &mut impl GenericClient,
        prepared: &mut Prepared,
        row: &postgres::Row,
    ) -> Result<Result<Bound, SessionError>, postgres::Error> {
        let mut failed: Option<postgres::Error> = None;
        let bound = bound_of(self, row, |id| {
            let count = prepared
                .get(client, COUNT_TURNS)
                .and_then(|statement| client.query_one(&statement, &[&id.as_str()]));
            count.map(|row| row.get(0)).map_err(|e| {
                let error = self.fail(reason(&e));
                failed = Some(e);
                error
            })
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(bound),
        }
    }

    /// A delivery that continues the chat's session without holding its
    /// lock while it plans. When this node wrote the chat's last turn it
    /// plans from what it remembers and sends one statement,
    /// [`CONTINUE_AT`], which takes the lock and writes only if that is
    /// still the chat's last turn (one round trip). Otherwise, or when
    /// another delivery wrote since, it plans from a read made without the
    /// lock, checked the same way (two). Either way the turn is exactly the
    /// one a delivery under the lock would have written. `None`, nothing
    /// written, when the chat is not continuing or the read no longer held:
    /// the caller delivers under the lock.
    #[allow(clippy::too_many_arguments)]
    fn continue_unlocked(
        &self,
        client: &mut postgres::Client,
        prepared: &mut Prepared,
        bot: &Name,
        chat: &Name,
        home_generation: Option<i64>,
        claim: Option<&vak_session::Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Result<Option<Committed>, SessionError>>, postgres::Error> {
        let (bot_s, chat_s) = (bot.as_str(), chat.as_str());
        let mut write = |client: &mut postgres::Client,
                         prepared: &mut Prepared,
                         bound: &Bound,
                         last: Option<i64>,
                         trusted: bool| {
            self.continue_at(
                client,
                prepared,
                (bot, chat),
                home_generation,
                claim,
                bound,
                last,
                trusted,
                plan,
            )
        };
        if let Some(known) = self.known.get(bot_s, chat_s)
            && known.trusted
            && let Some((turn, row)) = known.last
            && let Some(turns) = turn.seq.and_then(|seq| usize::try_from(seq).ok())
        {
            let bound = Bound::Live(Box::new(BoundSession {
                id: known.id,
                header: known.header,
                first_turn: Some(known.first_turn),
                last_turn: Some(turn),
                turns,
            }));
            match write(client, prepared, &bound, Some(row), true)? {
                Attempt::Done(done) => {
                    if matches!(done, Ok(Some(_))) {
                        self.known.batchable(bot_s, chat_s);
                    }
                    return Ok(Some(done));
                }
                Attempt::NotContinuing => return Ok(None),
                Attempt::Moved => {
                    tracing::debug!(bot = bot_s, chat = chat_s, "remembered last turn is stale");
                    self.known.missed(bot_s, chat_s, false);
                }
            }
        }
        let lookup = prepared.get(client, LOOKUP_UNLOCKED)?;
        let known = self.known.get(bot_s, chat_s);
        let known_id = known.as_ref().map(|k| k.id.as_str());
        let row = client.query_one(&lookup, &[&bot_s, &chat_s, &known_id])?;
        // A generation row gone from the database (NULL) is left to the
        // path under the lock, as it always was.
        if let Some(done) = self.home_moved(home_generation, row.get(1)) {
            return Ok(done);
        }
        let last: Option<i64> = row.get(6);
        // This node's remembered turn is still the chat's last: no other
        // node is delivering to it, so the next delivery plans from memory.
        let mut agreed = true;
        let bound = match (known, row.get::<_, Option<bool>>(7)) {
            (Some(known), Some(true)) => {
                agreed = known
                    .last
                    .as_ref()
                    .is_none_or(|(_, row)| Some(*row) == last);
                let last_turn = match row.get::<_, Option<String>>(5) {
                    Some(text) => match Record::from_json(text.as_bytes()) {
                        Ok(Record::Turn(turn)) => Some(turn),
                        Ok(_) => None,
                        Err(e) => return Ok(Some(Err(self.bad(&known.id, "a record", &e)))),
                    },
                    None => None,
                };
                let turns = match last_turn.as_ref().and_then(|t| t.seq) {
                    Some(seq) if seq >= 1 => usize::try_from(seq).unwrap_or(0),
                    _ => {
                        let count = prepared.get(client, COUNT_TURNS)?;
                        let n: i64 = client.query_one(&count, &[&known.id.as_str()])?.get(0);
                        usize::try_from(n).unwrap_or(0)
                    }
                };
                Bound::Live(Box::new(BoundSession {
                    id: known.id,
                    header: known.header,
                    first_turn: Some(known.first_turn),
                    last_turn,
                    turns,
                }))
            }
            _ => match self.read_bound(client, prepared, &row)? {
                Ok(bound) => {
                    if let Bound::Live(session) = &bound {
                        self.known.keep(bot_s, chat_s, session);
                    }
                    bound
                }
                Err(e) => return Ok(Some(Err(e))),
            },
        };
        Ok(match write(client, prepared, &bound, last, agreed)? {
            Attempt::Done(done) => Some(done),
            Attempt::NotContinuing | Attempt::Moved => None,
        })
    }

    /// `Some`: the delivery is refused because the home side moved from
    /// `resolved` to `now`; `Some(None)`: the generation row is gone, which
    /// the path under the lock reports.
    fn home_moved(
        &self,
        resolved: Option<i64>,
        now: Option<i64>,
    ) -> Option<Option<Result<Option<Committed>, SessionError>>> {
        match (resolved, now) {
            (Some(resolved), Some(now)) if resolved != now => {
                Some(Some(Err(SessionError::HomeMoved {
                    store: self.described.clone(),
                    resolved,
                    now,
                })))
            }
            (Some(_), None) => Some(None),
            _ => None,
        }
    }

    /// A continuing delivery this node can plan from memory, written in a
    /// batch with the others ready at the same moment ([`Batcher`]): one
    /// call and one commit for all of them. `None` when it cannot be (no
    /// batching, nothing trusted in memory, not continuing) or must be
    /// delivered again on the ordinary path (its plan went stale, or its
    /// batch's statement failed and rolled back whole); nothing of it is
    /// then written.
    fn continue_batched(
        &self,
        bot: &Name,
        chat: &Name,
        home_generation: Option<i64>,
        claim: Option<&vak_session::Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
        not_continuing: &mut bool,
    ) -> Option<Result<Option<Committed>, SessionError>> {
        let batcher = self.batcher.as_ref()?;
        let (bot_s, chat_s) = (bot.as_str(), chat.as_str());
        let known = self
            .known
            .get(bot_s, chat_s)
            .filter(|k| k.trusted && k.batchable)?;
        let (turn, row) = known.last?;
        let turns = turn.seq.and_then(|seq| usize::try_from(seq).ok())?;
        let bound = Bound::Live(Box::new(BoundSession {
            id: known.id,
            header: known.header,
            first_turn: Some(known.first_turn),
            last_turn: Some(turn),
            turns,
        }));
        let planned = match self.plan_continue(
            (bot, chat),
            home_generation,
            claim,
            &bound,
            Some(row),
            plan,
        ) {
            Ok(planned) => planned,
            Err(Attempt::Done(done)) => return Some(done),
            Err(Attempt::NotContinuing | Attempt::Moved) => {
                *not_continuing = true;
                return None;
            }
        };
        let (item, turn, session) = planned;
        match batcher.submit(item, &mut |take| self.write_batch(take)) {
            // Nothing of the batch was written: planned again, alone.
            Outcome::Alone => None,
            Outcome::Failed(reason) => Some(Err(self.fail(reason))),
            outcome => match self.settle(
                (bot_s, chat_s),
                turn,
                session,
                outcome,
                home_generation,
                true,
            ) {
                Attempt::Done(done) => Some(done),
                Attempt::Moved => {
                    tracing::debug!(bot = bot_s, chat = chat_s, "remembered last turn is stale");
                    self.known.missed(bot_s, chat_s, true);
                    None
                }
                Attempt::NotContinuing => {
                    *not_continuing = true;
                    None
                }
            },
        }
    }

    /// Write a batch of continuing deliveries in one call of
    /// `vak_continue_many`, answering each its own outcome only once the
    /// call returned, so after the commit. A statement the server refused
    /// rolled back whole: every item goes alone. Any other failure leaves
    /// the commit unknown: none is acknowledged.
    fn write_batch(&self, take: &mut Take<'_>) -> Vec<Outcome> {
        let advisory = self.lock == LockMode::Advisory;
        // Taken once the connection is in hand: the batch holds every
        // delivery queued while this one waited for it.
        let mut batch = Vec::new();
        let rows = self.pool.with_prepared(|client, prepared| {
            batch = take();
            let items: Vec<&Item> = batch.iter().map(|p| &p.item).collect();
            let bots: Vec<&str> = items.iter().map(|i| i.bot.as_str()).collect();
            let chats: Vec<&str> = items.iter().map(|i| i.chat.as_str()).collect();
            let sessions: Vec<&str> = items.iter().map(|i| i.session.as_str()).collect();
            let lasts: Vec<Option<i64>> = items.iter().map(|i| i.last).collect();
            let generations: Vec<Option<i64>> = items.iter().map(|i| i.generation).collect();
            let keys: Vec<Option<&str>> = items.iter().map(|i| i.key.as_deref()).collect();
            let ats: Vec<i64> = items.iter().map(|i| i.at).collect();
            let windows: Vec<i64> = items.iter().map(|i| i.window).collect();
            let records: Vec<&str> = items.iter().map(|i| i.record.as_str()).collect();
            let window = items.iter().find(|i| i.key.is_some()).map(|i| i.window);
            if items.is_empty() {
                return Ok(Vec::new());
            }
            vak_session::crash::point("batch-written");
            let statement = prepared.get(client, CONTINUE_MANY)?;
            let rows = client.query(
                &statement,
                &[
                    &advisory,
                    &bots,
                    &chats,
                    &sessions,
                    &lasts,
                    &generations,
                    &keys,
                    &ats,
                    &windows,
                    &records,
                ],
            )?;
            vak_session::crash::point("batch-committed");
            let taken = rows
                .iter()
                .filter(|row| row.get::<_, &str>(1) == "ok")
                .count();
            if let Some(window) = window {
                prune_claims_after(client, &self.claims, taken as u64, window);
            }
            Ok(rows)
        });
        let rows = match rows {
            Ok(rows) => rows,
            Err(PoolError::Db(e)) if e.as_db_error().is_some() => {
                tracing::debug!(items = batch.len(), reason = %reason(&e), "a batch was refused; its deliveries go alone");
                return vec![Outcome::Alone; batch.len()];
            }
            Err(e) => return vec![Outcome::Failed(e.explain()); batch.len()],
        };
        let mut outcomes =
            vec![
                Outcome::Failed("the batch's call answered nothing for this delivery".to_owned());
                batch.len()
            ];
        for row in rows {
            let index = usize::try_from(row.get::<_, i64>(0) - 1).ok();
            if let Some(slot) = index.and_then(|i| outcomes.get_mut(i)) {
                *slot = outcome_of(row.get(1), row.get(2), row.get(3));
            }
        }
        outcomes
    }

    /// Plan a continuing delivery from `bound` (a read made without the
    /// chat's lock, or what this node remembers), whose last turn is row
    /// `last`: the call's arguments, the turn and its session; or what the
    /// delivery is when it is not a continuing one.
    fn plan_continue(
        &self,
        (bot, chat): (&Name, &Name),
        home_generation: Option<i64>,
        claim: Option<&vak_session::Claim<'_>>,
        bound: &Bound,
        last: Option<i64>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<(Item, Turn, SessionId), Attempt> {
        let Bound::Live(ledger) = bound else {
            return Err(Attempt::NotContinuing);
        };
        let Some(planned) = plan(bound) else {
            return Err(Attempt::Done(Ok(None)));
        };
        let ChatPlan::Continue { mut turn } = planned else {
            return Err(Attempt::NotContinuing);
        };
        turn.delivery = claim.map(vak_session::Claim::digest);
        // Its number, so the next delivery reads the count off this line
        // (as the file store does).
        turn.seq = Some(ledger.turns as u64 + 1);
        let record = Record::Turn(turn);
        let text = self
            .encode(&record, &ledger.id)
            .map_err(|e| Attempt::Done(Err(e)))?;
        let Record::Turn(turn) = record else {
            return Err(Attempt::NotContinuing);
        };
        let (key, at, window) = match claim {
            Some(claim) => (
                Some(claim.digest()),
                claim.at,
                window_secs(claim.window_secs),
            ),
            None => (None, 0, 0),
        };
        let item = Item {
            bot: bot.as_str().to_owned(),
            chat: chat.as_str().to_owned(),
            session: ledger.id.as_str().to_owned(),
            last,
            generation: home_generation,
            key,
            at,
            window,
            record: text,
        };
        Ok((item, turn, ledger.id.clone()))
    }

    /// What a write's outcome means for the delivery: the turn written is
    /// remembered, planned from next time when `trusted`.
    fn settle(
        &self,
        (bot_s, chat_s): (&str, &str),
        turn: Turn,
        session: SessionId,
        outcome: Outcome,
        home_generation: Option<i64>,
        trusted: bool,
    ) -> Attempt {
        match outcome {
            Outcome::Written(row) => {
                self.known
                    .wrote(bot_s, chat_s, &session, turn, row, trusted);
                Attempt::Done(Ok(Some(Committed { session })))
            }
            Outcome::Replayed => Attempt::Done(Err(SessionError::Replayed)),
            Outcome::Home(now) => match self.home_moved(home_generation, now).flatten() {
                Some(done) => Attempt::Done(done),
                None => Attempt::NotContinuing,
            },
            Outcome::Failed(reason) => Attempt::Done(Err(self.fail(reason))),
            Outcome::Moved | Outcome::Alone => Attempt::Moved,
        }
    }

    /// Plan a continuing delivery from `bound` and write it alone with
    /// [`CONTINUE_AT`] if what it was planned from still holds under the
    /// lock.
    #[allow(clippy::too_many_arguments)]
    fn continue_at(
        &self,
        client: &mut postgres::Client,
        prepared: &mut Prepared,
        (bot, chat): (&Name, &Name),
        home_generation: Option<i64>,
        claim: Option<&vak_session::Claim<'_>>,
        bound: &Bound,
        last: Option<i64>,
        trusted: bool,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Attempt, postgres::Error> {
        let (item, turn, session) =
            match self.plan_continue((bot, chat), home_generation, claim, bound, last, plan) {
                Ok(planned) => planned,
                Err(attempt) => return Ok(attempt),
            };
        let advisory = self.lock == LockMode::Advisory;
        vak_session::crash::point("transaction-written");
        let statement = prepared.get(client, CONTINUE_AT)?;
        let row = client.query_one(
            &statement,
            &[
                &item.bot,
                &item.chat,
                &advisory,
                &item.session,
                &item.last,
                &item.generation,
                &item.key,
                &item.at,
                &item.window,
                &item.record,
            ],
        )?;
        let outcome = outcome_of(row.get(0), row.get(1), row.get(2));
        if matches!(outcome, Outcome::Written(_)) {
            vak_session::crash::point("transaction-committed");
        }
        Ok(self.settle(
            (bot.as_str(), chat.as_str()),
            turn,
            session,
            outcome,
            home_generation,
            trusted,
        ))
    }
}

/// A `vak_continue_at` or `vak_continue_many` answer as an [`Outcome`].
fn outcome_of(outcome: &str, generation: Option<i64>, written: Option<i64>) -> Outcome {
    match (outcome, written) {
        ("ok", Some(row)) => Outcome::Written(row),
        // Committed, but without the row a next delivery would plan from:
        // never answered by this schema; not acknowledged, so the
        // sender's retry is refused as a replay rather than written twice.
        ("ok", None) => {
            Outcome::Failed("the store wrote the turn but did not say where".to_owned())
        }
        ("replayed", _) => Outcome::Replayed,
        ("home", _) => Outcome::Home(generation),
        _ => Outcome::Moved,
    }
}

/// What [`PgStore::continue_at`] did.
enum Attempt {
    /// Committed, refused, or nothing to write (the plan said so).
    Done(Result<Option<Committed>, SessionError>),
    /// The chat is not continuing its session (unbound, gone, rotating),
    /// or its home generation row is gone: delivered under the lock.
    NotContinuing,
    /// What the plan was made from no longer held under the chat's lock
    /// (another delivery wrote, or the chat was bound elsewhere): nothing
    /// written.
    Moved,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch database on the test server, migrated; `None` when no
    /// server is configured (the test is then skipped, as every store test
    /// here is).
    fn migrated(tag: &str) -> Option<String> {
        let url = crate::testing::scratch_database(&crate::testing::pg_url()?, tag);
        PgStore::connect(&url)
            .expect("url")
            .migrate()
            .expect("migrate");
        Some(url)
    }

    #[test]
    fn the_turn_lookups_spell_the_partial_index_predicate() {
        // The planner uses `vak_records_turns` only for a query whose
        // WHERE implies the index's predicate: the same literal.
        const PREDICATE: &str = r#"record LIKE '{"type":"turn",%'"#;
        let migration = crate::MIGRATIONS
            .iter()
            .find(|m| m.name == "deliveries")
            .map(|m| m.sql)
            .unwrap_or_default();
        assert!(migration.contains(&format!("WHERE {PREDICATE};")));
        assert_eq!(LOOKUP.matches(PREDICATE).count(), 2);
        assert_eq!(LOOKUP_UNLOCKED.matches(PREDICATE).count(), 2);
        assert!(COUNT_TURNS.contains(PREDICATE));
        // The function's own check of the last turn, with its alias.
        assert!(migration.contains(&format!("r.{PREDICATE}")));
        // No statement looks for turns by a pattern given as a parameter.
        assert!(!LOOKUP.contains("LIKE $") && !LOOKUP_UNLOCKED.contains("LIKE $"));
    }

    #[test]
    fn vak_parameters_are_split_off_the_url() {
        let (url, lock, named, sizes) = vak_params(
            "postgres://vak@127.0.0.1:5432/vak?vak_lock=advisory&sslmode=disable&vak_pool=3&vak_batch=1",
        )
        .expect("valid");
        assert_eq!(url, "postgres://vak@127.0.0.1:5432/vak?sslmode=disable");
        assert_eq!((lock, named), (LockMode::Advisory, true));
        assert_eq!(sizes, Sizes { pool: 3, batch: 1 });
        assert!(vak_params("postgres://x/y?vak_batch=65").is_err());
        let (_, lock, named, _) = vak_params("postgres://x/y").expect("valid");
        assert_eq!((lock, named), (LockMode::Row, false));
        assert!(vak_params("postgres://x/y?vak_lock=table").is_err());
        assert!(vak_params("postgres://x/y?vak_pool=0").is_err());
    }

    #[test]
    fn statements_are_bounded_unless_the_url_says_otherwise() {
        let Some(url) = crate::testing::pg_url() else {
            return;
        };
        let url = crate::testing::scratch_database(&url, "timeouts");
        let shown = |url: &str| -> String {
            let store = PgStore::connect(url).expect("url");
            store
                .pool
                .with(|c| Ok(c.query_one("SHOW statement_timeout", &[])?.get(0)))
                .expect("show")
        };
        assert_eq!(shown(&url), "30s");
        let sep = if url.contains('?') { '&' } else { '?' };
        let own = format!("{url}{sep}options=-c%20statement_timeout%3D5min");
        assert_eq!(shown(&own), "5min");
    }

    #[test]
    fn nodes_on_one_database_lock_chats_one_way() {
        let Some(url) = migrated("lockmode") else {
            return;
        };
        let row = PgStore::open(&url).expect("open");
        let advisory = PgStore::open(&format!("{url}?vak_lock=advisory")).expect("open");
        // The first to deliver records its mode; the other is refused.
        row.agree_on_lock_mode().expect("first");
        let refused = advisory
            .agree_on_lock_mode()
            .expect_err("mixed")
            .to_string();
        assert!(refused.contains("vak_lock=row"), "{refused}");
        // A migrate naming the mode changes it; then the row node is refused.
        PgStore::connect(&format!("{url}?vak_lock=advisory"))
            .expect("url")
            .migrate()
            .expect("migrate");
        PgStore::open(&format!("{url}?vak_lock=advisory"))
            .expect("open")
            .agree_on_lock_mode()
            .expect("agrees now");
        let refused = PgStore::open(&url)
            .expect("open")
            .agree_on_lock_mode()
            .expect_err("row is refused now")
            .to_string();
        assert!(refused.contains("vak_lock=advisory"), "{refused}");
        // A migrate that names no mode leaves it as it is.
        PgStore::connect(&url)
            .expect("url")
            .migrate()
            .expect("migrate");
        assert!(
            PgStore::open(&url)
                .expect("open")
                .agree_on_lock_mode()
                .is_err()
        );
    }

    /// Old signatures are forgotten by the database's clock: a claim dated
    /// far ahead (the sender's to choose) deletes none whose request is
    /// still in its window, and one long past its window goes.
    #[test]
    fn replay_cleanup_goes_by_the_database_clock_not_the_claim() {
        use vak_prompt_blocks::NameKind;
        let Some(url) = migrated("replayclock") else {
            return;
        };
        let store = PgStore::open(&url).expect("open");
        let now = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_secs(),
        )
        .expect("fits");
        store.import_replay("live", now - 100).expect("live");
        store.import_replay("stale", now - 10_000).expect("stale");
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let forged = vak_session::Claim {
            key: "v1=dated-far-ahead",
            at: now + 1_000_000,
            window_secs: 300,
        };
        // This claim is the one that prunes (a multiple of 256).
        store.claims.store(0, std::sync::atomic::Ordering::Relaxed);
        store
            .deliver_at(&bot, &chat, None, Some(&forged), &mut |_| {
                Some(ChatPlan::Fresh(Box::new(FreshSession {
                    meta: SessionMeta::default(),
                    contract: vak_session::FrozenContract::default(),
                    change: None,
                    turn: Turn::now("hello", ""),
                })))
            })
            .expect("delivered")
            .expect("committed");
        let mut keys: Vec<String> = store
            .pool
            .with(|client| {
                Ok(client
                    .query("SELECT key FROM vak_replay ORDER BY key", &[])?
                    .into_iter()
                    .map(|row| row.get(0))
                    .collect())
            })
            .expect("keys");
        keys.retain(|k| k == "live" || k == "stale");
        assert_eq!(keys, ["live"], "the live one kept, the stale one gone");
    }

    /// A TCP proxy to the server of `url` that counts the client's
    /// writes: each is one request the client then waits on (a round
    /// trip), since the driver sends a request whole and reads the answer
    /// before the next. Answers the URL through the proxy.
    fn counting_proxy(url: &str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        use std::sync::atomic::AtomicUsize;
        let (head, rest) = url.split_once('@').expect("user@host");
        let (server, tail) = rest.split_once('/').expect("host/db");
        let server = server.to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let proxied = format!("{head}@{}/{tail}", listener.local_addr().expect("addr"));
        let writes = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = writes.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let upstream = std::net::TcpStream::connect(&server).expect("server");
                let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
                let (mut c_in, mut u_out) = (
                    client.try_clone().expect("c"),
                    upstream.try_clone().expect("u"),
                );
                let (mut u_in, mut c_out) = (upstream, client);
                let counted = counted.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 || u_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut u_in, &mut c_out);
                });
            }
        });
        (proxied, writes)
    }

    /// How many round trips a delivery to a chat that has a session takes
    /// (the common case under load), with a signature to claim and a home
    /// generation to check: each is a wait on the database's answer, so
    /// it bounds what one connection delivers per second.
    #[test]
    fn a_delivery_to_a_bound_chat_takes_few_round_trips() {
        use std::sync::atomic::Ordering::SeqCst;
        use vak_prompt_blocks::NameKind;
        let Some(url) = migrated("roundtrips") else {
            return;
        };
        let (proxied, writes) = counting_proxy(&url);
        let store = PgStore::open(&format!("{proxied}?vak_pool=1")).expect("open");
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let generation = vak_session::HomeStore::home_generation(&store).expect("generation");
        let deliver = |n: usize, fresh: bool| {
            let key = format!("v2=roundtrip-{n}");
            let claim = vak_session::Claim {
                key: &key,
                at: 0,
                window_secs: 300,
            };
            store
                .deliver_at(&bot, &chat, Some(generation), Some(&claim), &mut |bound| {
                    Some(if fresh {
                        ChatPlan::Fresh(Box::new(FreshSession {
                            meta: SessionMeta::default(),
                            contract: vak_session::FrozenContract::default(),
                            change: None,
                            turn: Turn::now("hello", ""),
                        }))
                    } else {
                        assert!(matches!(bound, Bound::Live(_)), "bound");
                        ChatPlan::Continue {
                            turn: Turn::now("again", ""),
                        }
                    })
                })
                .expect("delivered")
                .expect("committed")
        };
        deliver(0, true);
        deliver(1, false);
        let mut counts = Vec::new();
        for n in 2..6 {
            let before = writes.load(SeqCst);
            deliver(n, false);
            counts.push(writes.load(SeqCst) - before);
        }
        eprintln!("round trips per delivery: {counts:?}");
        // The first delivery planned from memory also prepares the batch's
        // statement on the connection, once.
        assert!(counts[0] <= ROUND_TRIPS + 1, "{counts:?}");
        assert!(counts[1..].iter().all(|&n| n <= ROUND_TRIPS), "{counts:?}");
        // A signature already taken, planned from memory: refused in the
        // same one round trip, nothing written, and the memory still good.
        let turns = |store: &PgStore| {
            let id = store.known.get("helpdesk", "42").expect("known").id;
            store.read(&id).expect("ledger").turns().count()
        };
        let written = turns(&store);
        // The ledger's read leaves its statement to be closed on the
        // connection's next request: a delivery first, so that the count
        // below is the replay's alone.
        deliver(9, false);
        let before = writes.load(SeqCst);
        let key = "v2=roundtrip-5".to_owned();
        let claim = vak_session::Claim {
            key: &key,
            at: 0,
            window_secs: 300,
        };
        let replayed = store.deliver_at(&bot, &chat, Some(generation), Some(&claim), &mut |_| {
            Some(ChatPlan::Continue {
                turn: Turn::now("again", ""),
            })
        });
        assert!(
            matches!(replayed, Err(SessionError::Replayed)),
            "{replayed:?}"
        );
        assert_eq!(writes.load(SeqCst) - before, ROUND_TRIPS);
        assert_eq!(turns(&store), written + 1, "nothing written by the replay");
        deliver(7, false);
        let before = writes.load(SeqCst);
        deliver(10, false);
        assert_eq!(
            writes.load(SeqCst) - before,
            ROUND_TRIPS,
            "still from memory"
        );
        // A new session for the bound chat (a rotation without its audit
        // event): planned from memory, not a continuation, so nothing is
        // sent for it; then BEGIN, lock, lookup, session, turn, binding,
        // COMMIT.
        let before = writes.load(SeqCst);
        deliver(8, true);
        let rotated = writes.load(SeqCst) - before;
        eprintln!("round trips of a new session for a bound chat: {rotated}");
        assert!(rotated <= 7, "{rotated}");
    }

    /// A database at version 6 with a chat already delivered to (by the
    /// previous build's two-round-trip path) is refused until migrated;
    /// `migrate` then applies 7 and 8, again applies nothing, and the
    /// chat's session continues where it was, numbered on (its later
    /// deliveries planned from memory, so written in batches); one at
    /// version 7 is brought to 8 the same way.
    #[test]
    fn a_database_at_version_6_or_7_is_migrated_and_its_chats_continue() {
        use vak_prompt_blocks::NameKind;
        let Some(url) = migrated("from_6") else {
            return;
        };
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let deliver = |store: &PgStore, text: &str| {
            store
                .deliver_at(&bot, &chat, None, None, &mut |bound| {
                    let turn = Turn::now(text, "");
                    Some(match bound {
                        Bound::Live(_) => ChatPlan::Continue { turn },
                        _ => ChatPlan::Fresh(Box::new(FreshSession {
                            meta: SessionMeta::default(),
                            contract: vak_session::FrozenContract::default(),
                            change: None,
                            turn,
                        })),
                    })
                })
                .expect("delivered")
                .expect("committed")
                .session
        };
        let first = deliver(&PgStore::open(&url).expect("open"), "one");
        let mut db =
            postgres::Client::connect(url.split('?').next().unwrap_or(&url), postgres::NoTls)
                .expect("connect");
        let back_to_7 =
            "DROP FUNCTION vak_continue_many; DELETE FROM vak_schema_migrations WHERE version = 8";
        db.batch_execute(&format!(
            "{back_to_7}; DROP FUNCTION vak_continue_at; DELETE FROM vak_schema_migrations WHERE version = 7"
        ))
        .expect("back to 6");
        let refused = PgStore::open(&url).expect_err("refused at 6").to_string();
        assert!(refused.contains("vak store migrate"), "{refused}");
        let store = PgStore::connect(&url).expect("url");
        assert_eq!(store.migrate().expect("migrate"), [7, 8]);
        assert_eq!(store.migrate().expect("again"), Vec::<i32>::new());
        let store = PgStore::open(&url).expect("open at 8");
        for text in ["two", "three"] {
            assert_eq!(deliver(&store, text), first);
        }
        db.batch_execute(back_to_7).expect("back to 7");
        assert!(PgStore::open(&url).is_err(), "refused at 7");
        let store = PgStore::connect(&url).expect("url");
        assert_eq!(store.migrate().expect("migrate"), [8]);
        let store = PgStore::open(&url).expect("open at 8");
        for text in ["four", "five"] {
            assert_eq!(deliver(&store, text), first);
        }
        let turns: Vec<(String, Option<u64>)> = store
            .read(&first)
            .expect("ledger")
            .turns()
            .map(|t| (t.message.clone(), t.seq))
            .collect();
        assert_eq!(
            turns,
            [
                ("one".to_owned(), Some(1)),
                ("two".to_owned(), Some(2)),
                ("three".to_owned(), Some(3)),
                ("four".to_owned(), Some(4)),
                ("five".to_owned(), Some(5)),
            ]
        );
    }

    /// The round trips of a delivery to a bound chat whose last turn this
    /// node wrote: one statement that takes the chat's lock, checks that
    /// turn is still the last, takes the claim and writes the turn.
    const ROUND_TRIPS: usize = 1;

    /// A node that remembers a chat's last turn plans from it only while
    /// no other node delivers to the chat: the first delivery after
    /// another node's writes nothing from its remembered plan and reads
    /// again (three round trips), and while the other node keeps delivering
    /// each takes the read and the write (two), never three again; once
    /// its own turn is the last again it plans from memory (one). Every
    /// turn is numbered in order, none lost, none twice.
    #[test]
    fn a_node_plans_from_memory_only_while_it_alone_delivers_to_the_chat() {
        use std::sync::atomic::Ordering::SeqCst;
        use vak_prompt_blocks::NameKind;
        let Some(url) = migrated("remembered") else {
            return;
        };
        let (proxied, writes) = counting_proxy(&url);
        let here = PgStore::open(&format!("{proxied}?vak_pool=1")).expect("open");
        let there = PgStore::open(&url).expect("open");
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        // Another chat's deliveries first, so that every statement is
        // prepared on the connection (a preparation is a round trip of its
        // own, once).
        let warm = Name::new(NameKind::Chat, "41").expect("chat");
        for fresh in [true, false] {
            here.deliver_at(&bot, &warm, None, None, &mut |_| {
                Some(if fresh {
                    ChatPlan::Fresh(Box::new(FreshSession {
                        meta: SessionMeta::default(),
                        contract: vak_session::FrozenContract::default(),
                        change: None,
                        turn: Turn::now("warm", ""),
                    }))
                } else {
                    ChatPlan::Continue {
                        turn: Turn::now("warm", ""),
                    }
                })
            })
            .expect("delivered")
            .expect("committed");
        }
        let plans: std::cell::RefCell<Vec<(usize, Option<String>)>> = Default::default();
        let deliver = |store: &PgStore, text: &str| {
            let before = writes.load(SeqCst);
            store
                .deliver_at(&bot, &chat, None, None, &mut |bound| {
                    let turn = Turn::now(text, "");
                    Some(match bound {
                        Bound::Live(ledger) => {
                            if std::ptr::eq(store, &here) {
                                plans.borrow_mut().push((
                                    ledger.turns,
                                    ledger.last_turn.as_ref().map(|t| t.message.clone()),
                                ));
                            }
                            ChatPlan::Continue { turn }
                        }
                        _ => ChatPlan::Fresh(Box::new(FreshSession {
                            meta: SessionMeta::default(),
                            contract: vak_session::FrozenContract::default(),
                            change: None,
                            turn,
                        })),
                    })
                })
                .expect("delivered")
                .expect("committed");
            writes.load(SeqCst) - before
        };
        deliver(&here, "1");
        assert_eq!(deliver(&here, "2"), 2, "read, then write");
        assert_eq!(
            deliver(&here, "3"),
            2,
            "from memory, the batch's statement prepared on the connection"
        );
        deliver(&there, "4");
        assert_eq!(deliver(&here, "5"), 3, "stale memory, read, write");
        deliver(&there, "6");
        assert_eq!(deliver(&here, "7"), 2, "read, write: memory not trusted");
        assert_eq!(
            deliver(&here, "8"),
            2,
            "read, write: its turn is the last again"
        );
        assert_eq!(deliver(&here, "9"), 1, "from memory again");
        let last = |n: usize, text: &str| (n, Some(text.to_owned()));
        // Planned by `here` from: a read (2), memory (3), memory gone stale
        // and a read (5), reads (7, 8), memory (9).
        assert_eq!(
            plans.borrow()[..],
            [
                last(1, "1"),
                last(2, "2"),
                last(3, "3"),
                last(4, "4"),
                last(6, "6"),
                last(7, "7"),
                last(8, "8"),
            ]
        );
        let id = here.known.get("helpdesk", "42").expect("known").id;
        let turns: Vec<(String, Option<u64>)> = here
            .read(&id)
            .expect("ledger")
            .turns()
            .map(|t| (t.message.clone(), t.seq))
            .collect();
        let expected: Vec<(String, Option<u64>)> =
            (1..=9).map(|n| (n.to_string(), Some(n as u64))).collect();
        assert_eq!(turns, expected);
    }

    /// A continuing delivery is not sent the header and first turn of a
    /// session this store already read for the chat, and plans from the
    /// same bound session either way; a session deleted behind vak's back
    /// is seen gone, not served from memory.
    #[test]
    fn a_chat_whose_known_session_was_deleted_is_seen_gone() {
        use vak_prompt_blocks::NameKind;
        let Some(url) = migrated("known_gone") else {
            return;
        };
        let store = PgStore::open(&url).expect("open");
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let seen: std::cell::RefCell<Vec<(String, usize, Option<String>)>> = Default::default();
        let deliver = |text: &str| {
            store
                .deliver_at(&bot, &chat, None, None, &mut |bound| {
                    let turn = Turn::now(text, "");
                    Some(match bound {
                        Bound::Live(ledger) => {
                            seen.borrow_mut().push((
                                ledger.id.to_string(),
                                ledger.turns,
                                ledger.first_turn.as_ref().map(|t| t.message.clone()),
                            ));
                            ChatPlan::Continue { turn }
                        }
                        Bound::Unbound | Bound::Gone(_) => {
                            seen.borrow_mut().push((format!("{bound:?}"), 0, None));
                            ChatPlan::Fresh(Box::new(FreshSession {
                                meta: SessionMeta::default(),
                                contract: vak_session::FrozenContract::default(),
                                change: None,
                                turn,
                            }))
                        }
                    })
                })
                .expect("delivered")
                .expect("committed")
        };
        let first = deliver("one").session;
        deliver("two");
        deliver("three");
        assert!(store.known.get("helpdesk", "42").is_some(), "kept");
        let id = first.to_string();
        let live = |turns| (id.clone(), turns, Some("one".to_owned()));
        assert_eq!(seen.borrow()[1..], [live(1), live(2)]);
        let mut db =
            postgres::Client::connect(url.split('?').next().unwrap_or(&url), postgres::NoTls)
                .expect("connect");
        db.execute("DELETE FROM vak_records WHERE session_id = $1", &[&id])
            .expect("records");
        db.execute("DELETE FROM vak_sessions WHERE id = $1", &[&id])
            .expect("session");
        let fresh = deliver("four").session;
        assert_ne!(fresh, first);
        assert_eq!(
            seen.borrow().last().map(|s| s.0.clone()),
            Some(format!("Gone({first:?})"))
        );
    }

    /// A continuing delivery planned at a home generation that another node
    /// moved past between its read and its write (here: a save from inside
    /// its plan) writes nothing and says so, naming both generations; the
    /// signature stays free for the delivery tried again.
    #[test]
    fn a_continuing_delivery_whose_home_side_moved_before_its_write_writes_nothing() {
        use vak_prompt_blocks::NameKind;
        use vak_session::HomeStore;
        let Some(url) = migrated("home_moved") else {
            return;
        };
        let store = PgStore::open(&url).expect("open");
        let other = PgStore::open(&url).expect("open");
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let at = store.home_generation().expect("generation");
        let first = store
            .deliver_at(&bot, &chat, Some(at), None, &mut |_| {
                Some(ChatPlan::Fresh(Box::new(FreshSession {
                    meta: SessionMeta::default(),
                    contract: vak_session::FrozenContract::default(),
                    change: None,
                    turn: Turn::now("first", ""),
                })))
            })
            .expect("delivered")
            .expect("committed");
        let key = "v2=moved-under-it".to_owned();
        let claim = vak_session::Claim {
            key: &key,
            at: 0,
            window_secs: 300,
        };
        let refused = store.deliver_at(&bot, &chat, Some(at), Some(&claim), &mut |_| {
            let saved = other
                .home_put(
                    ".vak/prompts/guardrails.md",
                    "- Saved on another node.\n",
                    &vak_session::Expect::Absent,
                    None,
                    "other node",
                )
                .expect("saved");
            assert!(matches!(saved, vak_session::Swapped::Done(_)));
            Some(ChatPlan::Continue {
                turn: Turn::now("second", ""),
            })
        });
        match refused {
            Err(SessionError::HomeMoved { resolved, now, .. }) => {
                assert_eq!(resolved, at);
                assert!(now > at, "{now}");
            }
            other => panic!("{other:?}"),
        }
        let ledger = store.read(&first.session).expect("ledger");
        assert_eq!(ledger.turns().count(), 1, "nothing written");
        // The signature was not taken: the same request, at the new
        // generation, is delivered.
        let now = store.home_generation().expect("generation");
        let again = store
            .deliver_at(&bot, &chat, Some(now), Some(&claim), &mut |_| {
                Some(ChatPlan::Continue {
                    turn: Turn::now("second", ""),
                })
            })
            .expect("delivered");
        assert!(again.is_some());
        assert_eq!(
            store.read(&first.session).expect("ledger").turns().count(),
            2
        );
    }

    /// A delivery planned from a read that another delivery to the same
    /// chat made stale before it wrote (here: from inside its plan, which
    /// runs between the read and the write) writes nothing from that plan:
    /// it is planned again under the chat's lock, so the chat's turns are
    /// numbered 1, 2, 3 with none lost and none twice.
    #[test]
    fn a_continuing_delivery_whose_read_went_stale_is_planned_again_under_the_lock() {
        use vak_prompt_blocks::NameKind;
        let Some(url) = migrated("stale_read") else {
            return;
        };
        let store = PgStore::open(&url).expect("open");
        let other = PgStore::open(&url).expect("open");
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(NameKind::Chat, "42").expect("chat");
        let fresh = |bound: &Bound| {
            assert!(matches!(bound, Bound::Unbound), "unbound");
            Some(ChatPlan::Fresh(Box::new(FreshSession {
                meta: SessionMeta::default(),
                contract: vak_session::FrozenContract::default(),
                change: None,
                turn: Turn::now("first", ""),
            })))
        };
        let first = store
            .deliver_at(&bot, &chat, None, None, &mut { fresh })
            .expect("delivered")
            .expect("committed");
        let mut plans = Vec::new();
        let mut interfered = false;
        let third = store
            .deliver_at(&bot, &chat, None, None, &mut |bound| {
                let Bound::Live(ledger) = bound else {
                    panic!("live");
                };
                plans.push(ledger.turns);
                if !interfered {
                    interfered = true;
                    other
                        .deliver_at(&bot, &chat, None, None, &mut |_| {
                            Some(ChatPlan::Continue {
                                turn: Turn::now("second", ""),
                            })
                        })
                        .expect("delivered")
                        .expect("committed");
                }
                Some(ChatPlan::Continue {
                    turn: Turn::now("third", ""),
                })
            })
            .expect("delivered")
            .expect("committed");
        assert_eq!(first.session, third.session);
        // Planned once from the stale read (one turn), once under the lock
        // (two).
        assert_eq!(plans, [1, 2]);
        let ledger = store.read(&first.session).expect("ledger");
        let turns: Vec<(String, Option<u64>)> =
            ledger.turns().map(|t| (t.message.clone(), t.seq)).collect();
        assert_eq!(
            turns,
            [
                ("first".to_owned(), Some(1)),
                ("second".to_owned(), Some(2)),
                ("third".to_owned(), Some(3)),
            ]
        );
    }

    /// Deliver `texts[i]` to chat `chats[i]` of bot `helpdesk` on
    /// `store` (pool of one) from one thread each, all ready together:
    /// the pool's one connection is held until every delivery is queued
    /// for its batch or in one, so they are written in as few batches as
    /// the queue allows. Each delivery's signature is its text.
    fn deliver_together(store: &PgStore, chats: &[&str], texts: &[String]) {
        use vak_prompt_blocks::NameKind;
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        let batcher = store.batcher.as_ref().expect("batching");
        std::thread::scope(|scope| {
            let held = store.pool.with(|_| {
                let threads: Vec<_> = chats
                    .iter()
                    .zip(texts)
                    .map(|(chat, text)| {
                        let bot = &bot;
                        scope.spawn(move || {
                            let chat = Name::new(NameKind::Chat, chat).expect("chat");
                            let claim = vak_session::Claim {
                                key: text,
                                at: 0,
                                window_secs: 300,
                            };
                            store
                                .deliver_at(bot, &chat, None, Some(&claim), &mut |_| {
                                    Some(ChatPlan::Continue {
                                        turn: Turn::now(text, ""),
                                    })
                                })
                                .expect("delivered")
                                .expect("committed")
                        })
                    })
                    .collect();
                let hang = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while batcher.waiting() < chats.len() {
                    assert!(std::time::Instant::now() < hang, "deliveries never queued");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Ok(threads)
            });
            for thread in held.expect("held") {
                thread.join().expect("delivery");
            }
        });
    }

    /// The turns' texts and numbers of the chat `helpdesk/<chat>` on `store`.
    fn turns_of(store: &PgStore, chat: &str) -> Vec<(String, Option<u64>)> {
        let id: String = store
            .pool
            .with(|c| {
                Ok(c.query_one(
                    "SELECT session_id FROM vak_bindings WHERE bot = 'helpdesk' AND chat = $1",
                    &[&chat],
                )?
                .get(0))
            })
            .expect("bound");
        store
            .read(&SessionId::parse(&id).expect("id"))
            .expect("ledger")
            .turns()
            .map(|t| (t.message.clone(), t.seq))
            .collect()
    }

    /// The chat `helpdesk/<chat>` holds the two turns [`warm`] gave it,
    /// then `text` as its third.
    fn assert_warmed_then(store: &PgStore, chat: &str, text: &str) {
        assert_eq!(
            turns_of(store, chat),
            [
                ("one".to_owned(), Some(1)),
                ("two".to_owned(), Some(2)),
                (text.to_owned(), Some(3)),
            ],
            "{chat}"
        );
    }

    /// Each of `chats` delivered to twice by `store`, one at a time, so
    /// that it plans their next deliveries from memory.
    fn warm(store: &PgStore, chats: &[&str]) {
        use vak_prompt_blocks::NameKind;
        let bot = Name::new(NameKind::Bot, "helpdesk").expect("bot");
        for chat in chats {
            let chat = Name::new(NameKind::Chat, chat).expect("chat");
            for text in ["one", "two"] {
                store
                    .deliver_at(&bot, &chat, None, None, &mut |bound| {
                        let turn = Turn::now(text, "");
                        Some(match bound {
                            Bound::Live(_) => ChatPlan::Continue { turn },
                            _ => ChatPlan::Fresh(Box::new(FreshSession {
                                meta: SessionMeta::default(),
                                contract: vak_session::FrozenContract::default(),
                                change: None,
                                turn,
                            })),
                        })
                    })
                    .expect("delivered")
                    .expect("committed");
            }
        }
    }

    /// Continuing deliveries to different chats that are ready at the same
    /// moment share one transaction: fewer round trips than deliveries
    /// (counted through the proxy, no clocks), and every turn written
    /// once, numbered after its chat's last; with either lock.
    #[test]
    fn deliveries_ready_together_are_written_in_few_transactions_each_once() {
        for lock in ["row", "advisory"] {
            batched_deliveries_land_once(lock);
        }
    }

    fn batched_deliveries_land_once(lock: &str) {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(url) = migrated(&format!("batched_{lock}")) else {
            return;
        };
        let (proxied, writes) = counting_proxy(&url);
        let store = PgStore::open(&format!("{proxied}?vak_pool=1&vak_lock={lock}")).expect("open");
        let chats = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"];
        warm(&store, &chats);
        // One batch first, so its statement is prepared on the connection.
        deliver_together(&store, &chats[..1], &["warm".to_owned()]);
        let texts: Vec<String> = chats.iter().map(|c| format!("together-{c}")).collect();
        let before = writes.load(SeqCst);
        deliver_together(&store, &chats, &texts);
        let trips = writes.load(SeqCst) - before;
        eprintln!("{lock}: {trips} round trips for {} deliveries", chats.len());
        assert!(
            trips < chats.len(),
            "{trips} round trips for {} deliveries",
            chats.len()
        );
        for (chat, text) in chats.iter().zip(&texts) {
            let mut want = vec![("one".to_owned(), Some(1)), ("two".to_owned(), Some(2))];
            if *chat == "c0" {
                want.push(("warm".to_owned(), Some(3)));
            }
            let n = want.len() as u64 + 1;
            want.push((text.clone(), Some(n)));
            assert_eq!(turns_of(&store, chat), want, "{chat}");
        }
        // The same signed deliveries again: each refused, nothing written.
        let bot = Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").expect("bot");
        let chat = Name::new(vak_prompt_blocks::NameKind::Chat, "c3").expect("chat");
        let claim = vak_session::Claim {
            key: &texts[3],
            at: 0,
            window_secs: 300,
        };
        let again = store.deliver_at(&bot, &chat, None, Some(&claim), &mut |_| {
            Some(ChatPlan::Continue {
                turn: Turn::now("again", ""),
            })
        });
        assert!(matches!(again, Err(SessionError::Replayed)), "{again:?}");
        assert_eq!(turns_of(&store, "c3").len(), 3);
    }

    /// A batch the server refuses (here: its function gone, as a deadlock
    /// or a statement timeout would be refused) rolls back whole, and each
    /// of its deliveries is written alone instead: every turn once.
    #[test]
    fn a_batch_the_server_refuses_is_delivered_alone_each_once() {
        let Some(url) = migrated("batchrefused") else {
            return;
        };
        let store = PgStore::open(&format!("{url}?vak_pool=1")).expect("open");
        let chats = ["r0", "r1", "r2"];
        warm(&store, &chats);
        store
            .pool
            .with(|c| c.batch_execute("DROP FUNCTION vak_continue_many"))
            .expect("drop");
        let texts: Vec<String> = chats.iter().map(|c| format!("alone-{c}")).collect();
        deliver_together(&store, &chats, &texts);
        for (chat, text) in chats.iter().zip(&texts) {
            assert_warmed_then(&store, chat, text);
        }
    }

    /// A batch never waits for a chat's lock: while another transaction
    /// holds one chat's, the batch writes the others' deliveries (they
    /// commit while that lock is still held) and leaves that one to be
    /// delivered alone, once the lock is free.
    #[test]
    fn a_batch_writes_around_a_chat_another_transaction_holds() {
        let Some(url) = migrated("batchskip") else {
            return;
        };
        let store = PgStore::open(&format!("{url}?vak_pool=1")).expect("open");
        let chats = ["k0", "k1", "k2"];
        warm(&store, &chats);
        let plain = url.split('?').next().unwrap_or(&url).to_owned();
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let texts: Vec<String> = chats.iter().map(|c| format!("around-{c}")).collect();
        std::thread::scope(|scope| {
            let plain = &plain;
            scope.spawn(move || {
                let mut holder = postgres::Client::connect(plain, postgres::NoTls).expect("holder");
                let mut poller = postgres::Client::connect(plain, postgres::NoTls).expect("poller");
                let mut tx = holder.transaction().expect("begin");
                tx.execute(
                    "SELECT 1 FROM vak_bindings WHERE bot = 'helpdesk' AND chat = 'k1' FOR UPDATE",
                    &[],
                )
                .expect("lock");
                locked_tx.send(()).expect("send");
                // The other two commit while k1's lock is held.
                let hang = std::time::Instant::now() + std::time::Duration::from_secs(60);
                loop {
                    let n: i64 = poller
                        .query_one(
                            "SELECT count(*) FROM vak_records WHERE record LIKE '%around-k0%' OR record LIKE '%around-k2%'",
                            &[],
                        )
                        .expect("count")
                        .get(0);
                    if n == 2 {
                        break;
                    }
                    assert!(std::time::Instant::now() < hang, "the batch waited on k1's lock");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                tx.commit().expect("release");
            });
            locked_rx.recv().expect("locked");
            deliver_together(&store, &chats, &texts);
        });
        for (chat, text) in chats.iter().zip(&texts) {
            assert_warmed_then(&store, chat, text);
        }
    }

    /// A batch in which one delivery was planned from a last turn another
    /// node has since replaced: that one writes nothing in the batch and
    /// is delivered alone, planned again from a read; the others commit
    /// in the batch; every turn once, in order.
    #[test]
    fn a_stale_delivery_in_a_batch_is_planned_again_alone_and_the_others_written() {
        let Some(url) = migrated("batchstale") else {
            return;
        };
        let here = PgStore::open(&format!("{url}?vak_pool=1")).expect("open");
        let there = PgStore::open(&url).expect("open");
        let chats = ["s0", "s1", "s2", "s3"];
        warm(&here, &chats);
        let bot = Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").expect("bot");
        let s0 = Name::new(vak_prompt_blocks::NameKind::Chat, "s0").expect("chat");
        there
            .deliver_at(&bot, &s0, None, None, &mut |_| {
                Some(ChatPlan::Continue {
                    turn: Turn::now("there", ""),
                })
            })
            .expect("delivered")
            .expect("committed");
        let texts: Vec<String> = chats.iter().map(|c| format!("together-{c}")).collect();
        deliver_together(&here, &chats, &texts);
        // The stale one no longer joins batches until a delivery planned
        // from memory and sent alone is written; the others still do.
        let batchable = |chat: &str| here.known.get("helpdesk", chat).expect("known").batchable;
        assert!(!batchable("s0"));
        assert!(chats[1..].iter().all(|c| batchable(c)));
        assert_eq!(
            turns_of(&here, "s0"),
            [
                ("one".to_owned(), Some(1)),
                ("two".to_owned(), Some(2)),
                ("there".to_owned(), Some(3)),
                ("together-s0".to_owned(), Some(4)),
            ]
        );
        for chat in &chats[1..] {
            assert_warmed_then(&here, chat, &format!("together-{chat}"));
        }
    }

    #[test]
    fn the_description_names_no_password() {
        let store =
            PgStore::connect("postgres://vak:hunter2@db.example:6543/prod").expect("parses");
        assert_eq!(
            store.describe(),
            "the PostgreSQL store at db.example:6543/prod"
        );
        assert!(!format!("{store:?}").contains("hunter2"));
    }
}
