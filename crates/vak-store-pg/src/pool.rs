//! A small blocking connection pool: at most `max` connections, idle ones
//! reused, a broken one dropped, and a new one given up when the server
//! has not finished answering within the connect timeout.

use std::sync::{Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use postgres::{Client, Config, NoTls};

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
    freed: Condvar,
}

struct State {
    /// Idle connections and when each was given back.
    idle: Vec<(Client, Instant)>,
    open: usize,
}

/// A connection idle longer than this is checked with a round trip before
/// it is used: the server may have closed it meanwhile (a restart, an
/// administrator's `pg_terminate_backend`, an idle timeout), which the
/// client learns only on its next use, and a request would fail on it.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);
/// How long that check may take before the connection is given up.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

impl Pool {
    pub(crate) fn new(config: Config, connect_timeout: Duration, max: usize) -> Self {
        Pool {
            config,
            connect_timeout,
            max: max.max(1),
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
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
        let mut client = self.take()?;
        let result = work(&mut client).map_err(PoolError::Db);
        let mut state = self.lock();
        if client.is_closed() {
            state.open -= 1;
        } else {
            state.idle.push((client, Instant::now()));
        }
        drop(state);
        self.freed.notify_one();
        result
    }

    /// A connection of its own, outside the pool and its count: for a
    /// session-level lock held across many pooled calls (an import), which
    /// must not hold one of the connections those calls need.
    pub(crate) fn connect_alone(&self) -> Result<Client, PoolError> {
        connect_within(&self.config, self.connect_timeout)
    }

    fn take(&self) -> Result<Client, PoolError> {
        let mut state = self.lock();
        loop {
            while let Some((mut client, since)) = state.idle.pop() {
                if client.is_closed() {
                    state.open -= 1;
                    continue;
                }
                if since.elapsed() < CHECK_AFTER_IDLE {
                    return Ok(client);
                }
                drop(state);
                if client.is_valid(CHECK_TIMEOUT).is_ok() {
                    return Ok(client);
                }
                drop(client);
                state = self.lock();
                state.open -= 1;
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return connect_within(&self.config, self.connect_timeout).inspect_err(|_| {
                    self.lock().open -= 1;
                    self.freed.notify_one();
                });
            }
            state = self
                .freed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
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
}
