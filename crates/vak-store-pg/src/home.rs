//! The home side of the prompt and the bots' signing secrets in PostgreSQL
//! (migration 4): `vak_home_files` by path relative to the home,
//! `vak_home_generation` bumped in the same transaction as every change,
//! `vak_bot_secrets`.
//!
//! Every write takes the generation row `FOR UPDATE` first, so home-side
//! changes are serialised among themselves (they are rare) and a
//! compare-and-swap compares against the last committed text and, when
//! the caller gives one, the generation its budget check was made at.

use postgres::GenericClient;
use vak_prompt_blocks::sha256_hex;
use vak_session::{
    Expect, HomeFile, HomeSnapshot, HomeStore, SessionError, Swapped, home_side_path, now_rfc3339,
};

use crate::PgStore;

/// The current generation, read inside whatever transaction `client` is.
const GENERATION: &str = "SELECT generation FROM vak_home_generation";

pub(crate) fn generation(client: &mut impl GenericClient) -> Result<i64, postgres::Error> {
    Ok(client.query_one(GENERATION, &[])?.get(0))
}

impl PgStore {
    fn refuse_path(&self, path: &str) -> Result<(), SessionError> {
        if home_side_path(path) {
            Ok(())
        } else {
            Err(self.fail(format!(
                "`{}` is not a home-side file (a layer file under `.vak/prompts/`, its `surface/<kind>/` or `agents/<role>/`, another plain `.md` file below `.vak/prompts/` that a block file may import, `.vak/gateway/bots.json` or `allowlist.json`, `.vak/config.toml`, or a skill's `.vak/skills/<name>/SKILL.md`); nothing was written",
                vak_prompt_blocks::Escaped(path)
            )))
        }
    }

    /// One compare-and-swap: `text` `None` removes; `at`, the generation
    /// the caller's checks were made at, is compared under the same lock as
    /// the file's digest, so nothing can change the home side between that
    /// comparison and the commit.
    fn swap(
        &self,
        path: &str,
        text: Option<&str>,
        expect: &Expect,
        at: Option<i64>,
        by: &str,
    ) -> Result<Swapped, SessionError> {
        self.refuse_path(path)?;
        self.pool
            .with(|client| {
                let mut tx = client.transaction()?;
                let current: i64 = tx
                    .query_one(
                        "SELECT generation FROM vak_home_generation FOR UPDATE",
                        &[],
                    )?
                    .get(0);
                if let Some(at) = at
                    && at != current
                {
                    return Ok(Swapped::Moved(current));
                }
                let now: Option<String> = tx
                    .query_opt("SELECT sha256 FROM vak_home_files WHERE path = $1", &[&path])?
                    .map(|row| row.get(0));
                let matches = match expect {
                    Expect::Absent => now.is_none(),
                    Expect::Digest(d) => now.as_deref() == Some(d.as_str()),
                };
                if !matches {
                    return Ok(Swapped::Conflict(now));
                }
                match text {
                    Some(text) => {
                        if now.as_deref() == Some(sha256_hex(text).as_str()) {
                            return Ok(Swapped::Done(current));
                        }
                        tx.execute(
                            "INSERT INTO vak_home_files (path, text, sha256, by_who, at) VALUES ($1, $2, $3, $4, $5)
                             ON CONFLICT (path) DO UPDATE SET text = EXCLUDED.text, sha256 = EXCLUDED.sha256,
                             by_who = EXCLUDED.by_who, at = EXCLUDED.at",
                            &[&path, &text, &sha256_hex(text), &by, &now_rfc3339()],
                        )?;
                    }
                    None => {
                        if now.is_none() {
                            return Ok(Swapped::Done(current));
                        }
                        tx.execute("DELETE FROM vak_home_files WHERE path = $1", &[&path])?;
                    }
                }
                let next: i64 = tx
                    .query_one(
                        "UPDATE vak_home_generation SET generation = generation + 1 RETURNING generation",
                        &[],
                    )?
                    .get(0);
                tx.commit()?;
                Ok(Swapped::Done(next))
            })
            .map_err(|e| self.err(&e))
    }
}

impl HomeStore for PgStore {
    fn home_generation(&self) -> Result<i64, SessionError> {
        // Read before every delivery (the sync's cheap check): prepared
        // once per connection, one round trip.
        self.pool
            .with_prepared(|client, prepared| {
                let statement = prepared.get(client, GENERATION)?;
                Ok(client.query_one(&statement, &[])?.get(0))
            })
            .map_err(|e| self.err(&e))
    }

    fn home_snapshot(&self) -> Result<HomeSnapshot, SessionError> {
        let snapshot = self
            .pool
            .with(|client| {
                // One snapshot: the generation and the files it names.
                let mut tx = client
                    .build_transaction()
                    .isolation_level(postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()?;
                let generation = generation(&mut tx)?;
                let files = tx
                    .query(
                        "SELECT path, text, sha256, by_who, at FROM vak_home_files ORDER BY path",
                        &[],
                    )?
                    .into_iter()
                    .map(|row| HomeFile {
                        path: row.get(0),
                        text: row.get(1),
                        sha256: row.get(2),
                        by: row.get(3),
                        at: row.get(4),
                    })
                    .collect();
                tx.commit()?;
                Ok(HomeSnapshot { generation, files })
            })
            .map_err(|e| self.err(&e))?;
        // A row altered in the database is refused, never served.
        for file in &snapshot.files {
            self.refuse_path(&file.path)?;
            if sha256_hex(&file.text) != file.sha256 {
                return Err(self.fail(format!(
                    "the home-side file `{}` in `vak_home_files` does not match its recorded sha256 (the row was altered); save it again through vak (`vak prompts set`, the admin page) or re-import it",
                    vak_prompt_blocks::Escaped(&file.path)
                )));
            }
        }
        Ok(snapshot)
    }

    fn home_put(
        &self,
        path: &str,
        text: &str,
        expect: &Expect,
        at: Option<i64>,
        by: &str,
    ) -> Result<Swapped, SessionError> {
        self.swap(path, Some(text), expect, at, by)
    }

    fn home_remove(
        &self,
        path: &str,
        expect: &Expect,
        at: Option<i64>,
        by: &str,
    ) -> Result<Swapped, SessionError> {
        self.swap(path, None, expect, at, by)
    }

    fn bot_secret(&self, bot: &str) -> Result<Option<String>, SessionError> {
        self.pool
            .with(|client| {
                Ok(client
                    .query_opt("SELECT secret FROM vak_bot_secrets WHERE bot = $1", &[&bot])?
                    .map(|row| row.get(0)))
            })
            .map_err(|e| self.err(&e))
    }

    fn bot_secret_create(&self, bot: &str, secret: &str) -> Result<String, SessionError> {
        self.pool
            .with(|client| {
                client.execute(
                    "INSERT INTO vak_bot_secrets (bot, secret, created_at) VALUES ($1, $2, $3) ON CONFLICT (bot) DO NOTHING",
                    &[&bot, &secret, &now_rfc3339()],
                )?;
                Ok(client
                    .query_one("SELECT secret FROM vak_bot_secrets WHERE bot = $1", &[&bot])?
                    .get(0))
            })
            .map_err(|e| self.err(&e))
    }
}
