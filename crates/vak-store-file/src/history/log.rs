//! The version log: `$VAK_HOME/.vak/history/versions.jsonl`, one record per
//! change vak made to a layer file or gateway key.
//!
//! Appends take an exclusive lock on the log, terminate a torn last line
//! left by a writer that stopped mid-append (so the new record starts on
//! its own line, and readers skip the torn one), write one full line and
//! fsync. Readers stream the log under a shared lock, one line at a time,
//! each bounded by [`MAX_RECORD_BYTES`]; a line that is not a record or is
//! too long is skipped and counted, never fatal. Unknown fields are ignored
//! and every field has a default, so old and new builds read each other.

use std::io::{BufRead, BufReader, Read as _, Seek, SeekFrom, Write as _};
use std::os::unix::fs::PermissionsExt as _;

use camino::{Utf8Path, Utf8PathBuf};

use vak_prompt_history::{HistoryError, MAX_RECORD_BYTES, VersionRecord, Versions};

use super::objects::store_dir;
use super::{io_error, refusal_error};
use vak_prompt_loader::confine::ConfinedDir;

const LOG_NAME: &str = "versions.jsonl";

/// The version log of one home.
#[derive(Debug, Clone)]
pub struct VersionLog {
    home: Utf8PathBuf,
    dir: Utf8PathBuf,
}

impl VersionLog {
    /// The log of `home`. Nothing is touched until it is read or appended.
    pub fn new(home: &Utf8Path) -> Self {
        VersionLog {
            home: home.to_owned(),
            dir: home.join(".vak").join("history"),
        }
    }

    /// The log file.
    pub fn path(&self) -> Utf8PathBuf {
        self.dir.join(LOG_NAME)
    }

    /// Whether a record could be appended now: the log opens for append
    /// (made, empty, when there is none). Asked before a change is written,
    /// so a log that could not take its record refuses the change instead
    /// of leaving a version no `log` lists.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append), for the same causes.
    pub fn check_appendable(&self) -> Result<(), HistoryError> {
        self.open_for_append().map(drop)
    }

    /// The history directory, confined, and the log opened for append.
    fn open_for_append(&self) -> Result<(ConfinedDir, std::fs::File), HistoryError> {
        let dir = store_dir(&self.home, &self.dir, true)?.ok_or_else(|| HistoryError::Io {
            action: "open the history directory",
            path: self.dir.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        // Owner-only: a record names who saved, an admin save by its token's
        // id, which another local user could test guessed tokens against.
        let file = dir
            .open_append(LOG_NAME, 0o600)
            .map_err(|refusal| refusal_error(&self.path(), refusal))?;
        Ok((dir, file))
    }

    /// Append `record`, durably.
    ///
    /// # Errors
    ///
    /// [`HistoryError::Refused`] when the log is a symlink, FIFO or device,
    /// or its directory leads out of the home; [`HistoryError::TooLarge`]
    /// for a record over [`MAX_RECORD_BYTES`]; [`HistoryError::Io`].
    pub fn append(&self, record: &VersionRecord) -> Result<(), HistoryError> {
        let path = self.path();
        let mut line = serde_json::to_string(record)
            .map_err(|e| io_error("encode a record for", &path)(e.into()))?;
        line.push('\n');
        if line.len() > MAX_RECORD_BYTES {
            return Err(HistoryError::TooLarge {
                what: format!(
                    "a version record for `{}`",
                    vak_prompt_blocks::Escaped(&record.target)
                ),
                bytes: line.len() as u64,
                limit: MAX_RECORD_BYTES as u64,
            });
        }
        let (dir, mut file) = self.open_for_append()?;
        file.lock().map_err(io_error("lock", &path))?;
        let metadata = file
            .metadata()
            .map_err(io_error("read the size of", &path))?;
        // A log made before it was owner-only is narrowed on its next
        // append; one this user does not own (or an append-only one) is
        // left as it is rather than losing the record.
        if metadata.permissions().mode() & 0o077 != 0 {
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
        }
        let len = metadata.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))
                .and_then(|_| file.read_exact(&mut last))
                .map_err(io_error("read", &path))?;
            if last[0] != b'\n' {
                line.insert(0, '\n');
            }
        }
        if let Err(error) = file.write_all(line.as_bytes()) {
            // A full disk or a file-size limit cut the record short: take
            // the part-line back, so the log ends where it did.
            let _ = file.set_len(len);
            return Err(io_error("append to", &path)(error));
        }
        file.sync_all().map_err(io_error("sync", &path))?;
        if len == 0 {
            dir.as_file()
                .and_then(|handle| handle.sync_all())
                .map_err(io_error("sync the directory", &self.dir))?;
        }
        Ok(())
    }

    /// Every record whose target is `target`, oldest first.
    ///
    /// # Errors
    ///
    /// [`HistoryError::Refused`] for a symlinked, FIFO or device log;
    /// [`HistoryError::Io`]. A missing log is no records.
    pub fn for_target(&self, target: &str) -> Result<Versions, HistoryError> {
        self.read(|record| record.target == target)
    }

    /// Every record that `keep` accepts, oldest first.
    ///
    /// # Errors
    ///
    /// As [`for_target`](Self::for_target).
    pub fn read(&self, keep: impl Fn(&VersionRecord) -> bool) -> Result<Versions, HistoryError> {
        let path = self.path();
        let Some(dir) = store_dir(&self.home, &self.dir, false)? else {
            return Ok(Versions::default());
        };
        let file = match dir.open_regular_nofollow(LOG_NAME) {
            Ok(Some(file)) => file,
            Ok(None) => return Ok(Versions::default()),
            Err(refusal) => return Err(refusal_error(&path, refusal)),
        };
        file.lock_shared().map_err(io_error("lock", &path))?;
        let mut reader = BufReader::new(file);
        let mut out = Versions::default();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let read = (&mut reader)
                .take(MAX_RECORD_BYTES as u64 + 1)
                .read_until(b'\n', &mut buf)
                .map_err(io_error("read", &path))?;
            if read == 0 {
                break;
            }
            if buf.last() != Some(&b'\n') {
                if buf.len() > MAX_RECORD_BYTES {
                    // Too long: skip the rest of the line without keeping it.
                    out.skipped += 1;
                    skip_line(&mut reader).map_err(io_error("read", &path))?;
                } else {
                    // A torn last line.
                    out.skipped += 1;
                }
                continue;
            }
            match serde_json::from_slice::<VersionRecord>(&buf) {
                // A record whose digests are not digests (written by hand)
                // is not a record: it would name no text `diff` or
                // `revert` could find.
                Ok(record)
                    if record.kind == "version"
                        && [&record.before, &record.after]
                            .into_iter()
                            .flatten()
                            .all(|d| vak_prompt_history::is_digest(d)) =>
                {
                    if keep(&record) {
                        out.records.push(record);
                    }
                }
                _ => out.skipped += 1,
            }
        }
        Ok(out)
    }
}

fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        if let Some(at) = chunk.iter().position(|&b| b == b'\n') {
            reader.consume(at + 1);
            return Ok(());
        }
        let len = chunk.len();
        reader.consume(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::temp_home as home;
    use std::fs;
    use vak_prompt_history::Action;

    fn record(target: &str, after: &str) -> VersionRecord {
        VersionRecord {
            time: "2026-12-03T08:00:00.000Z".to_owned(),
            who: "user:test".to_owned(),
            after: Some(d(after)),
            ..VersionRecord::new(target, "guardrails", Action::Save)
        }
    }

    /// `s` as a digest: padded with zeros to 64 hex digits.
    fn d(s: &str) -> String {
        format!("{s:0>64}")
    }

    #[test]
    fn appends_read_back_per_target_in_order() {
        let (_keep, home) = home();
        let log = VersionLog::new(&home);
        assert!(log.for_target("/a").unwrap().records.is_empty());
        log.append(&record("/a", "1")).unwrap();
        log.append(&record("/b", "2")).unwrap();
        log.append(&record("/a", "3")).unwrap();
        let a = log.for_target("/a").unwrap();
        let afters: Vec<_> = a.records.iter().map(|r| r.after.clone().unwrap()).collect();
        assert_eq!(afters, [d("1"), d("3")]);
    }

    #[test]
    fn the_log_is_owner_only_and_an_older_one_is_narrowed_on_append() {
        let (_keep, home) = home();
        let log = VersionLog::new(&home);
        let mode = || fs::metadata(log.path()).unwrap().permissions().mode() & 0o777;
        log.append(&record("/a", "1")).unwrap();
        assert_eq!(mode(), 0o600);
        fs::set_permissions(log.path(), fs::Permissions::from_mode(0o644)).unwrap();
        log.append(&record("/a", "2")).unwrap();
        assert_eq!(mode(), 0o600);
        assert_eq!(log.for_target("/a").unwrap().records.len(), 2);
    }

    #[test]
    fn a_torn_or_foreign_line_is_skipped_and_never_swallows_the_next() {
        let (_keep, home) = home();
        let log = VersionLog::new(&home);
        log.append(&record("/a", "1")).unwrap();
        let mut bytes = fs::read(log.path()).unwrap();
        bytes.extend_from_slice(b"{\"type\":\"version\",\"tar");
        fs::write(log.path(), &bytes).unwrap();
        log.append(&record("/a", "2")).unwrap();
        let mut long = fs::read(log.path()).unwrap();
        long.extend(std::iter::repeat_n(b'x', MAX_RECORD_BYTES + 10));
        long.push(b'\n');
        fs::write(log.path(), &long).unwrap();
        log.append(&record("/a", "3")).unwrap();
        let a = log.for_target("/a").unwrap();
        let afters: Vec<_> = a.records.iter().map(|r| r.after.clone().unwrap()).collect();
        assert_eq!(afters, [d("1"), d("2"), d("3")]);
        assert_eq!(a.skipped, 2);
    }

    #[test]
    fn a_fifo_or_symlinked_log_is_refused_without_blocking() {
        let (_keep, home) = home();
        let log = VersionLog::new(&home);
        fs::create_dir_all(home.join(".vak/history")).unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(log.path())
            .status()
            .unwrap();
        assert!(status.success());
        assert!(matches!(
            log.append(&record("/a", "1")),
            Err(HistoryError::Refused { .. })
        ));
        assert!(matches!(
            log.for_target("/a"),
            Err(HistoryError::Refused { .. })
        ));
        fs::remove_file(log.path()).unwrap();
        fs::write(home.join("elsewhere"), "").unwrap();
        std::os::unix::fs::symlink(home.join("elsewhere"), log.path()).unwrap();
        assert!(matches!(
            log.append(&record("/a", "1")),
            Err(HistoryError::Refused { .. })
        ));
        assert_eq!(fs::read(home.join("elsewhere")).unwrap(), b"");
    }

    #[test]
    fn a_record_whose_digests_are_not_digests_is_skipped() {
        let (_keep, home) = home();
        let log = VersionLog::new(&home);
        log.append(&record("/a", "1")).unwrap();
        let mut bytes = fs::read(log.path()).unwrap();
        bytes.extend_from_slice(
            b"{\"type\":\"version\",\"target\":\"/a\",\"before\":\"not-a-digest\",\"after\":\"../../etc/hostname\"}\n",
        );
        fs::write(log.path(), &bytes).unwrap();
        let read = log.for_target("/a").unwrap();
        assert_eq!(read.records.len(), 1);
        assert_eq!(read.skipped, 1);
    }

    #[test]
    fn old_and_new_fields_parse() {
        let line = br#"{"type":"version","target":"/a","after":"x","future":1}"#;
        let record: VersionRecord = serde_json::from_slice(line).unwrap();
        assert_eq!(record.target, "/a");
        assert_eq!(record.action, Action::Save);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Whatever a crashed writer or a stranger left between appends
        /// (a torn line, garbage), every record appended reads back, in
        /// order, and nothing else does.
        #[test]
        fn every_append_reads_back_whatever_is_left_between(
            junk in proptest::collection::vec(proptest::option::of("[^\n]{0,40}"), 1..8)
        ) {
            let (_keep, home) = home();
            let log = VersionLog::new(&home);
            let mut expected = Vec::new();
            for (i, garbage) in junk.iter().enumerate() {
                let after = format!("{i}");
                log.append(&record("/a", &after)).unwrap();
                expected.push(d(&after));
                if let Some(garbage) = garbage {
                    let mut bytes = fs::read(log.path()).unwrap();
                    bytes.extend_from_slice(garbage.as_bytes());
                    fs::write(log.path(), &bytes).unwrap();
                }
            }
            let read: Vec<_> = log
                .for_target("/a")
                .unwrap()
                .records
                .into_iter()
                .filter_map(|r| r.after)
                .collect();
            proptest::prop_assert_eq!(read, expected);
        }
    }
}
