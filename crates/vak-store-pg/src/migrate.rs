//! Versioned schema migrations, shipped in the binary and applied in order
//! under an advisory lock, each in its own transaction with its version
//! row: applying is idempotent and safe from several processes at once.

use postgres::Client;

/// One schema migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its version; applied in ascending order, never reused.
    pub version: i32,
    /// A short name.
    pub name: &'static str,
    /// The SQL.
    pub sql: &'static str,
}

/// Every migration this build knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "sessions",
        sql: include_str!("migrations/0001_sessions.sql"),
    },
    Migration {
        version: 2,
        name: "replay",
        sql: include_str!("migrations/0002_replay.sql"),
    },
    Migration {
        version: 3,
        name: "history",
        sql: include_str!("migrations/0003_history.sql"),
    },
    Migration {
        version: 4,
        name: "home",
        sql: include_str!("migrations/0004_home.sql"),
    },
    Migration {
        version: 5,
        name: "settings",
        sql: include_str!("migrations/0005_settings.sql"),
    },
    Migration {
        version: 6,
        name: "deliveries",
        sql: include_str!("migrations/0006_deliveries.sql"),
    },
    Migration {
        version: 7,
        name: "continue_at",
        sql: include_str!("migrations/0007_known_turn.sql"),
    },
    Migration {
        version: 8,
        name: "continue_many",
        sql: include_str!("migrations/0008_continue_many.sql"),
    },
];

/// A key for `pg_advisory_lock` that only migrations take.
const MIGRATION_LOCK: i64 = 0x0076_616b_5f6d_6967; // "vak_mig"

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS vak_schema_migrations (
    version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    /// These versions were applied now (none: already current).
    Versions(Vec<i32>),
    /// The database's schema is at this version, newer than [`latest`]:
    /// nothing was applied or written.
    Newer(i32),
}

/// Apply every migration not yet applied, unless the database is at a
/// version newer than this build's.
pub(crate) fn apply(client: &mut Client) -> Result<Applied, postgres::Error> {
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])?;
    let result = apply_locked(client);
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    let applied = result?;
    unlocked?;
    Ok(applied)
}

fn apply_locked(client: &mut Client) -> Result<Applied, postgres::Error> {
    // Before anything is written: a newer build's schema may have moved
    // on in ways this build's missing migrations (and writes) do not know.
    if let Some(found) = current(client)?
        && found > latest()
    {
        return Ok(Applied::Newer(found));
    }
    client.batch_execute(CREATE_TABLE)?;
    let mut applied = Vec::new();
    for migration in MIGRATIONS {
        let done = client
            .query_opt(
                "SELECT 1 FROM vak_schema_migrations WHERE version = $1",
                &[&migration.version],
            )?
            .is_some();
        if done {
            continue;
        }
        let mut tx = client.transaction()?;
        tx.batch_execute(migration.sql)?;
        tx.execute(
            "INSERT INTO vak_schema_migrations (version, name) VALUES ($1, $2)",
            &[&migration.version, &migration.name],
        )?;
        tx.commit()?;
        applied.push(migration.version);
    }
    Ok(Applied::Versions(applied))
}

/// The newest version applied, or `None` for a database never migrated.
pub(crate) fn current(client: &mut Client) -> Result<Option<i32>, postgres::Error> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('vak_schema_migrations') IS NOT NULL",
            &[],
        )?
        .get(0);
    if !exists {
        return Ok(None);
    }
    Ok(client
        .query_one("SELECT max(version) FROM vak_schema_migrations", &[])?
        .get(0))
}

/// The newest version this build ships.
pub(crate) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The versions this build ships that `client`'s database has not applied
/// (a database migrated by a build that lacked one in the middle).
pub(crate) fn missing(client: &mut Client) -> Result<Vec<i32>, postgres::Error> {
    let applied: Vec<i32> = client
        .query("SELECT version FROM vak_schema_migrations", &[])?
        .into_iter()
        .map(|row| row.get(0))
        .collect();
    Ok(MIGRATIONS
        .iter()
        .map(|m| m.version)
        .filter(|v| !applied.contains(v))
        .collect())
}
