//! The PostgreSQL backend of the session store ([`vak_session::Store`]).
//!
//! Ledgers, chat bindings and audit events live in four tables (see
//! `migrations/`); every record is kept as the exact JSON text the file
//! backend writes as one line, so a store moved from files keeps its
//! digests and unknown fields survive.
//!
//! The prompt history (kept texts and version records) is
//! in the same database: [`PgStore`] is also a
//! [`History`](vak_prompt_history::History) (`history.rs`).
//!
//! # Sync, on a small pool
//!
//! The interface is synchronous (the `postgres` crate: `tokio-postgres` on
//! a private current-thread runtime per connection). The CLI needs no
//! runtime, and the service calls the store from `spawn_blocking`, where a
//! delivery waiting on a chat's lock holds a blocking thread rather than a
//! reactor. A pool of at most [`DEFAULT_POOL`] connections per process is
//! shared by all threads.
//!
//! # One delivery, one transaction
//!
//! [`PgStore::deliver`] runs lookup, plan, create, audit event, turn and
//! bind in one transaction that first takes the chat's lock, so however
//! many processes deliver to one chat, the plan always sees the last
//! committed binding. The lock is a row lock on the chat's binding
//! ([`LockMode::Row`], the default) or a transaction-scoped advisory lock
//! on a hash of the chat ([`LockMode::Advisory`]). `docs/gateway.md` has
//! the measurements: with the final code the two are level at every
//! contention tried, so the row lock is the default for what it is — the
//! chat's own row, never shared with another chat through a hash, visible
//! as such in `pg_locks`.

mod batch;
mod history;
mod home;
mod migrate;
mod pool;
mod store;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use migrate::{MIGRATIONS, Migration};
pub use store::{
    DEFAULT_BATCH, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL, DEFAULT_STATEMENT_TIMEOUT,
    EventsImported, ImportLock, LockMode, PgStore,
};
