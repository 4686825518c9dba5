//! A small blocking connection pool: at most `max` connections, idle ones
//! reused, a broken one dropped, a new one given up when the server has not
//! finished answering within the connect timeout, and waiters served in the
//! order they came (a queue, each waiter woken alone). Without the order, a thread that gives
//! a connection back and asks again at once takes it before the waiter that
//! was woken for it, and under sustained load one request could wait
//! seconds while the others are served in milliseconds.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use postgres::{Client, Config, GenericClient, NoTls, Statement};

/// The statements prepared on one connection, by their text: a statement
/// run by its text is prepared again every time (a round trip of its own
/// before the one that runs it), a prepared one is only run.
#[derive(Default)]
pub(crate) struct Prepared(HashMap<&'static str, Statement>);

impl Prepared {
    /// `sql` prepared on `client`'s connection (prepared now, the first
    /// time on this connection). Statements outlive transactions, so one
    /// prepared in a transaction that rolls back is still there.
    pub(crate) fn get(
        &mut self,
        client: &mut impl GenericClient,
        sql: &'static str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        self.0.insert(sql, statement.clone());
        Ok(statement)
    }
}

/// A pooled connection and what was prepared on it.
struct Conn {
    client: Client,
    prepared: Prepared,
}

/// Why no connection, or no result on one, came back.
#[derive(Debug)]
pub(crate) enum PoolError {
    /// The database, or the connection to it, failed.
    Db(postgres::Error),
    /// Connecting (the socket, the startup and authentication exchange)
    /// did not finish within this long: something accepted the connection
    /// and never answered.
    NoAnswer(Duration),
    /// No thread could be started to connect on.
    Spawn(std::io::Error),
}

impl From<postgres::Error> for PoolError {
    fn from(error: postgres::Error) -> Self {
        PoolError::Db(error)
    }
}

/// Open a connection, giving up after `within`. The `postgres` crate bounds
/// only the socket's connect; a peer that accepts and then says nothing
/// would hold the startup exchange for good. So the connection is made on
/// a thread of its own and waited for at most `within`; an attempt given
/// up on is left to that thread, which ends when the peer closes (or with
/// the process: a CLI command exits straight after the error).
fn connect_within(config: &Config, within: Duration) -> Result<Client, PoolError> {
    let (send, receive) = mpsc::sync_channel(1);
    let config = config.clone();
    std::thread::Builder::new()
        .name("vak-pg-connect".to_owned())
        .spawn(move || {
            let _ = send.send(config.connect(NoTls));
        })
        .map_err(PoolError::Spawn)?;
    match receive.recv_timeout(within) {
        Ok(connected) => connected.map_err(PoolError::Db),
        Err(_) => Err(PoolError::NoAnswer(within)),
    }
}

/// The pool.
pub(crate) struct Pool {
    config: Config,
    /// How long a new connection may take, startup and authentication
    /// included.
    connect_timeout: Duration,
    max: usize,
    state: Mutex<State>,
}

struct State {
    /// Idle connections and when each was given back.
    idle: Vec<(Conn, Instant)>,
    open: usize,
    /// The callers waiting, in the order they came, each woken through its
    /// own condition variable: only the first may take a connection, and
    /// only it is woken when one comes back (waking every waiter to let
    /// the first one through cost a futex call per waiter per connection).
    queue: VecDeque<Arc<Condvar>>,
}

impl State {
    /// Wake the first waiter, if any: its turn, or a connection for it.
    fn wake_first(&self) {
        if let Some(first) = self.queue.front() {
            first.notify_one();
        }
    }
}

/// A connection idle longer than this is checked with a round trip before
/// it is used: the server may have closed it meanwhile (a restart, an
/// administrator's `pg_terminate_backend`, an idle timeout), which the
/// client learns only on its next use, and a request would fail on it.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);
/// How long that check may take before the connection is given up.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

impl Pool {
    /// The most connections the pool opens.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    pub(crate) fn new(config: Config, connect_timeout: Duration, max: usize) -> Self {
        Pool {
            config,
            connect_timeout,
            max: max.max(1),
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
                queue: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `work` on a connection: an idle one, a new one if fewer than
    /// `max` are open, else the next one returned. The connection goes
    /// back afterwards unless it broke.
    pub(crate) fn with<T>(
        &self,
        work: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, PoolError> {
        self.with_prepared(|client, _| work(client))
    }

    /// [`Pool::with`], handing `work` the statements prepared on the
    /// connection too (to run the hot paths one round trip a statement).
    pub(crate) fn with_prepared<T>(
        &self,
        work: impl FnOnce(&mut Client, &mut Prepared) -> Result<T, postgres::Error>,
    ) -> Result<T, PoolError> {
        let mut conn = self.take()?;
        let result = work(&mut conn.client, &mut conn.prepared).map_err(PoolError::Db);
        let mut state = self.lock();
        if conn.client.is_closed() {
            state.open -= 1;
        } else {
            state.idle.push((conn, Instant::now()));
        }
        state.wake_first();
        result
    }

    /// A connection of its own, outside the pool and its count: for a
    /// session-level lock held across many pooled calls (an import), which
    /// must not hold one of the connections those calls need.
    pub(crate) fn connect_alone(&self) -> Result<Client, PoolError> {
        connect_within(&self.config, self.connect_timeout)
    }

    /// A connection, in the order callers asked: each joins the queue and
    /// waits to be first, then for a connection; it leaves the queue when
    /// it has one (or room to open one), and the next one's turn begins.
    fn take(&self) -> Result<Conn, PoolError> {
        let me = Arc::new(Condvar::new());
        let mut state = self.lock();
        state.queue.push_back(Arc::clone(&me));
        while !state
            .queue
            .front()
            .is_some_and(|first| Arc::ptr_eq(first, &me))
        {
            state = wait(&me, state);
        }
        let taken = self.take_in_turn(&me, state);
        let mut state = self.lock();
        state.queue.pop_front();
        state.wake_first();
        drop(state);
        taken
    }

    /// How many callers wait for a connection (tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().queue.len()
    }

    /// The first waiter's wait for a connection; `me` is its condition
    /// variable, notified when one comes back.
    fn take_in_turn<'a>(
        &'a self,
        me: &Condvar,
        mut state: MutexGuard<'a, State>,
    ) -> Result<Conn, PoolError> {
        loop {
            while let Some((mut conn, since)) = state.idle.pop() {
                if conn.client.is_closed() {
                    state.open -= 1;
                    continue;
                }
                if since.elapsed() < CHECK_AFTER_IDLE {
                    return Ok(conn);
                }
                drop(state);
                if conn.client.is_valid(CHECK_TIMEOUT).is_ok() {
                    return Ok(conn);
                }
                drop(conn);
                state = self.lock();
                state.open -= 1;
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return connect_within(&self.config, self.connect_timeout)
                    .map(|client| Conn {
                        client,
                        prepared: Prepared::default(),
                    })
                    .inspect_err(|_| {
                        let mut state = self.lock();
                        state.open -= 1;
                        state.wake_first();
                    });
            }
            state = wait(me, state);
        }
    }
}

fn wait<'a>(on: &Condvar, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    on.wait(state)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_the_server_closed_while_idle_is_replaced_not_failed() {
        let Some(url) = crate::testing::pg_url() else {
            return;
        };
        let url = crate::testing::scratch_database(&url, "pool");
        let config: Config = url.parse().expect("url");
        let pool = Pool::new(config.clone(), Duration::from_secs(10), 2);
        let pid = |pool: &Pool| -> Result<i32, PoolError> {
            pool.with(|c| Ok(c.query_one("SELECT pg_backend_pid()", &[])?.get(0)))
        };
        let first = pid(&pool).expect("first");
        let mut admin = config.connect(NoTls).expect("admin");
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&first])
            .expect("terminate");
        std::thread::sleep(CHECK_AFTER_IDLE + Duration::from_millis(200));
        let second = pid(&pool).expect("the closed connection is replaced");
        assert_ne!(first, second);
        assert_eq!(pool.lock().open, 1, "the closed one is no longer counted");
    }

    /// A caller that gives its connection back and asks again at once
    /// waits behind the caller already waiting: served in order, never
    /// overtaken.
    #[test]
    fn waiters_are_served_in_the_order_they_came() {
        let Some(url) = crate::testing::pg_url() else {
            return;
        };
        let url = crate::testing::scratch_database(&url, "pool_fifo");
        let config: Config = url.parse().expect("url");
        let pool = std::sync::Arc::new(Pool::new(config, Duration::from_secs(10), 1));
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        for round in 0..20 {
            let waiter = pool
                .with(|_| {
                    let (theirs, their_order) = (pool.clone(), order.clone());
                    let waiter = std::thread::spawn(move || {
                        theirs
                            .with(|_| {
                                their_order.lock().expect("order").push(("waiter", round));
                                Ok(())
                            })
                            .map_err(|_| ())
                            .expect("waiter");
                    });
                    while pool.waiting() == 0 {
                        std::thread::yield_now();
                    }
                    Ok(waiter)
                })
                .map_err(|_| ())
                .expect("first");
            // Given back and asked for again straight away.
            pool.with(|_| {
                order.lock().expect("order").push(("again", round));
                Ok(())
            })
            .map_err(|_| ())
            .expect("again");
            waiter.join().expect("joined");
        }
        let order = order.lock().expect("order");
        for round in 0..20 {
            assert_eq!(order[2 * round], ("waiter", round), "{order:?}");
        }
    }
}
