//! A small blocking connection pool: at most `max` connections, idle ones
//! reused, a broken one dropped.

use std::sync::{Condvar, Mutex, MutexGuard};

use postgres::{Client, Config, NoTls};

/// The pool.
pub(crate) struct Pool {
    config: Config,
    max: usize,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    idle: Vec<Client>,
    open: usize,
}

impl Pool {
    pub(crate) fn new(config: Config, max: usize) -> Self {
        Pool {
            config,
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
    ) -> Result<T, postgres::Error> {
        let mut client = self.take()?;
        let result = work(&mut client);
        let mut state = self.lock();
        if client.is_closed() {
            state.open -= 1;
        } else {
            state.idle.push(client);
        }
        drop(state);
        self.freed.notify_one();
        result
    }

    fn take(&self) -> Result<Client, postgres::Error> {
        let mut state = self.lock();
        loop {
            while let Some(client) = state.idle.pop() {
                if client.is_closed() {
                    state.open -= 1;
                    continue;
                }
                return Ok(client);
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return self.config.connect(NoTls).inspect_err(|_| {
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
