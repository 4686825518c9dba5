//! The prompt history ([`History`]) on PostgreSQL: kept texts in
//! `vak_objects`, version records in `vak_versions` (migration 3).
//!
//! An object row is keyed by the sha256 of its exact bytes and inserted
//! with `ON CONFLICT DO NOTHING`, so keeping the same text from any number
//! of processes at once writes one row and fails none. Rows are never
//! updated; a read re-hashes the bytes and refuses a row whose bytes do
//! not hash to its key ([`HistoryError::AlteredIn`]), so a row altered
//! behind vak's back is never served. A version row keeps the record's
//! exact JSON (as the file log's line) beside the columns it is queried
//! by, so fields a newer build adds survive an older one.

use vak_prompt_blocks::Sha256Hex;
use vak_prompt_history::{
    History, HistoryError, MAX_RECORD_BYTES, VersionRecord, Versions, is_digest, object_digest,
    verified_object,
};

use crate::PgStore;
use crate::store::Explain;

impl PgStore {
    fn history_error(&self, error: &(impl Explain + ?Sized)) -> HistoryError {
        HistoryError::Backend {
            store: self.described.clone(),
            reason: error.explain(),
        }
    }

    /// The records `sql` selects (their JSON text), parsed; a row that does
    /// not parse is skipped and counted, as a torn line in the file log.
    fn version_rows(
        &self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Versions, HistoryError> {
        let rows: Vec<String> = self
            .pool
            .with(|client| {
                Ok(client
                    .query(sql, params)?
                    .into_iter()
                    .map(|row| row.get(0))
                    .collect())
            })
            .map_err(|e| self.history_error(&e))?;
        let mut out = Versions::default();
        for text in rows {
            match serde_json::from_str::<VersionRecord>(&text) {
                Ok(record) if record.kind == "version" => out.records.push(record),
                _ => out.skipped += 1,
            }
        }
        Ok(out)
    }
}

/// Keep an object unless a row with its digest is there: true when the
/// row is there now with exactly these bytes (inserted, or kept before).
/// Nothing is locked or written for a row already there: a row inserted
/// by a transaction that committed after this statement's snapshot, or one
/// whose bytes were altered, answers false, and [`REPAIR_OBJECT`] settles
/// it.
const KEEP_OBJECT: &str = "WITH kept AS (
    INSERT INTO vak_objects (digest, content) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM kept)
    OR EXISTS (SELECT 1 FROM vak_objects WHERE digest = $1 AND content = $2)";

/// A row already there is left alone, unless its bytes were altered: then
/// it gets back exactly the bytes its digest names (as the file store
/// rewrites an altered object), never anything else.
const REPAIR_OBJECT: &str = "INSERT INTO vak_objects (digest, content) VALUES ($1, $2)
 ON CONFLICT (digest) DO UPDATE SET content = EXCLUDED.content
 WHERE vak_objects.content IS DISTINCT FROM EXCLUDED.content";

impl History for PgStore {
    fn history_location(&self) -> String {
        self.described.clone()
    }

    fn put_object(&self, text: &str) -> Result<Sha256Hex, HistoryError> {
        let digest = object_digest(text)?;
        let bytes = text.as_bytes();
        self.pool
            .with_prepared(|client, prepared| {
                // Most texts a session keeps are already there, kept by the
                // chat before it: answered from a read, without locking the
                // row or writing, so concurrent new sessions sharing texts
                // neither wait on each other nor flush a commit each.
                let keep = prepared.get(client, KEEP_OBJECT)?;
                if client
                    .query_one(&keep, &[&digest, &bytes])?
                    .get::<_, bool>(0)
                {
                    return Ok(());
                }
                let repair = prepared.get(client, REPAIR_OBJECT)?;
                client.execute(&repair, &[&digest, &bytes]).map(drop)
            })
            .map_err(|e| self.history_error(&e))?;
        Ok(digest)
    }

    fn get_object(&self, digest: &str) -> Result<String, HistoryError> {
        if !is_digest(digest) {
            return Err(HistoryError::BadDigest(digest.to_owned()));
        }
        let row: Option<Vec<u8>> = self
            .pool
            .with(|client| {
                Ok(client
                    .query_opt(
                        "SELECT content FROM vak_objects WHERE digest = $1",
                        &[&digest],
                    )?
                    .map(|row| row.get(0)))
            })
            .map_err(|e| self.history_error(&e))?;
        let Some(bytes) = row else {
            return Err(HistoryError::NotKeptIn {
                digest: digest.to_owned(),
                store: self.described.clone(),
            });
        };
        verified_object(digest, bytes, |actual| HistoryError::AlteredIn {
            digest: digest.to_owned(),
            store: self.described.clone(),
            actual,
        })
    }

    fn append_version(&self, record: &VersionRecord) -> Result<(), HistoryError> {
        let text = serde_json::to_string(record).map_err(|e| HistoryError::Backend {
            store: self.described.clone(),
            reason: format!("a version record does not encode ({e})"),
        })?;
        if text.len() + 1 > MAX_RECORD_BYTES {
            return Err(HistoryError::TooLarge {
                what: format!(
                    "a version record for `{}`",
                    vak_prompt_blocks::Escaped(&record.target)
                ),
                bytes: text.len() as u64 + 1,
                limit: MAX_RECORD_BYTES as u64,
            });
        }
        let tokens = record.tokens.and_then(|t| i64::try_from(t).ok());
        self.pool
            .with(|client| {
                client.execute(
                    "INSERT INTO vak_versions (target, block, action, who, at, before, after, tokens, record)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    &[
                        &record.target,
                        &record.block,
                        &record.action.as_str(),
                        &record.who,
                        &record.time,
                        &record.before,
                        &record.after,
                        &tokens,
                        &text,
                    ],
                )
            })
            .map_err(|e| self.history_error(&e))?;
        Ok(())
    }

    fn versions_of(&self, target: &str) -> Result<Versions, HistoryError> {
        self.version_rows(
            "SELECT record FROM vak_versions WHERE target = $1 ORDER BY seq",
            &[&target],
        )
    }

    fn all_versions(&self) -> Result<Versions, HistoryError> {
        self.version_rows("SELECT record FROM vak_versions ORDER BY seq", &[])
    }

    fn object_digests(&self) -> Result<Vec<Sha256Hex>, HistoryError> {
        self.pool
            .with(|client| {
                Ok(client
                    .query("SELECT digest FROM vak_objects ORDER BY digest", &[])?
                    .into_iter()
                    .map(|row| row.get(0))
                    .collect())
            })
            .map_err(|e| self.history_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use vak_prompt_blocks::sha256_hex;
    use vak_prompt_history::{Action, MAX_OBJECT_BYTES};
    use vak_session::Store as _;

    /// A fresh, migrated database; the store on it and its URL.
    fn scratch() -> Option<(PgStore, String)> {
        let scratch = crate::testing::scratch_database(&crate::testing::pg_url()?, "h");
        PgStore::connect(&scratch).unwrap().migrate().unwrap();
        Some((PgStore::open(&scratch).unwrap(), scratch))
    }

    #[test]
    fn the_same_text_kept_from_many_threads_at_once_is_one_row_and_no_error() {
        let Some((store, url)) = scratch() else {
            return;
        };
        let store = Arc::new(store);
        let text = "- never push to main\n";
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let store = Arc::clone(&store);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    store.history().put_object(text)
                })
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().unwrap().unwrap(), sha256_hex(text));
        }
        // Another process (a second store on the same database) too.
        let other = PgStore::open(&url).unwrap();
        assert_eq!(other.put_object(text).unwrap(), sha256_hex(text));
        assert_eq!(other.object_digests().unwrap(), [sha256_hex(text)]);
        assert_eq!(store.get_object(&sha256_hex(text)).unwrap(), text);
    }

    /// A text kept again (every new session of a chat keeps the same
    /// texts) neither locks nor rewrites its row: the row's `xmax`, which a
    /// lock or an update would set, stays 0, and its `xmin` is the insert's.
    #[test]
    fn a_text_kept_again_neither_locks_nor_writes_its_row() {
        let Some((store, url)) = scratch() else {
            return;
        };
        let digest = store.put_object("You are careful.").unwrap();
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let versions = |client: &mut postgres::Client| -> (String, String) {
            let row = client
                .query_one(
                    "SELECT xmin::text, xmax::text FROM vak_objects WHERE digest = $1",
                    &[&digest],
                )
                .unwrap();
            (row.get(0), row.get(1))
        };
        let first = versions(&mut client);
        assert_eq!(first.1, "0");
        for _ in 0..3 {
            assert_eq!(store.put_object("You are careful.").unwrap(), digest);
        }
        assert_eq!(versions(&mut client), first);
    }

    #[test]
    fn a_row_altered_in_the_database_is_refused_naming_digest_and_store() {
        let Some((store, url)) = scratch() else {
            return;
        };
        let digest = store.put_object("You are careful.").unwrap();
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client
            .execute(
                "UPDATE vak_objects SET content = convert_to('You are reckless.', 'UTF8') WHERE digest = $1",
                &[&digest],
            )
            .unwrap();
        let error = store.get_object(&digest).unwrap_err();
        assert!(matches!(error, HistoryError::AlteredIn { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains(&digest), "{message}");
        assert!(message.contains("PostgreSQL store"), "{message}");
        assert!(!message.contains("reckless"), "{message}");
        // `find` does not turn it into "not kept" either.
        assert!(store.find_object(&digest).is_err());
        // Keeping the right text again restores exactly the bytes the digest
        // names, as the file store does.
        store.put_object("You are careful.").unwrap();
        assert_eq!(store.get_object(&digest).unwrap(), "You are careful.");
        // Bytes that are not UTF-8 under the right digest are refused too.
        let bad = [0xffu8, 0xfe];
        let bad_digest = sha256_hex(bad);
        client
            .execute(
                "INSERT INTO vak_objects (digest, content) VALUES ($1, $2)",
                &[&bad_digest, &&bad[..]],
            )
            .unwrap();
        assert!(matches!(
            store.get_object(&bad_digest),
            Err(HistoryError::AlteredIn { .. })
        ));
    }

    #[test]
    fn an_unknown_digest_is_text_not_kept_and_a_bad_one_is_refused() {
        let Some((store, _url)) = scratch() else {
            return;
        };
        let digest = sha256_hex("never kept");
        let error = store.get_object(&digest).unwrap_err();
        assert!(error.is_not_kept(), "{error:?}");
        assert!(error.to_string().starts_with("text not kept"), "{error}");
        assert_eq!(store.find_object(&digest).unwrap(), None);
        assert!(matches!(
            store.get_object("'; DROP TABLE vak_objects; --"),
            Err(HistoryError::BadDigest(_))
        ));
        let big = "x".repeat(MAX_OBJECT_BYTES as usize + 1);
        assert!(matches!(
            store.put_object(&big),
            Err(HistoryError::TooLarge { .. })
        ));
    }

    #[test]
    fn version_records_read_back_per_target_in_order_with_every_field() {
        let Some((store, _url)) = scratch() else {
            return;
        };
        let record = |target: &str, after: &str, action| VersionRecord {
            time: "2026-12-03T08:00:00.000Z".to_owned(),
            who: "user:o'brien".to_owned(),
            before: None,
            after: Some(after.to_owned()),
            tokens: Some(12),
            ..VersionRecord::new(target, "guardrails", action)
        };
        store
            .append_version(&record("/a", "1", Action::Save))
            .unwrap();
        store
            .append_version(&record("bots.json#/b/prompts/identity", "2", Action::Save))
            .unwrap();
        store
            .append_version(&record("/a", "3", Action::Revert))
            .unwrap();
        let a = store.versions_of("/a").unwrap();
        assert_eq!(
            a.records,
            [
                record("/a", "1", Action::Save),
                record("/a", "3", Action::Revert)
            ]
        );
        assert_eq!(store.all_versions().unwrap().records.len(), 3);
        assert!(store.versions_of("/nothing").unwrap().records.is_empty());
    }
}
