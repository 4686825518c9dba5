//! The file store's security audit log, `$VAK_HOME/.vak/audit/security.jsonl`:
//! one `vak_session::SecurityEvent` per line, tagged by `type`, appended
//! under a lock and fsynced.

use camino::{Utf8Path, Utf8PathBuf};

use std::collections::VecDeque;
use std::io::BufReader;

use vak_session::{AuditEntries, MAX_LINE_BYTES, MAX_WARNINGS, SecurityEvent, SessionError};

use crate::jsonl::{self, Entry, LineReader};

impl jsonl::JsonLine for SecurityEvent {}

/// The security audit log of one `$VAK_HOME`.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: Utf8PathBuf,
    /// The home the log belongs to: its directory must not lead out of it.
    home: Utf8PathBuf,
}

impl AuditLog {
    /// The log of `home`: `home/.vak/audit/security.jsonl`.
    pub fn new(home: &Utf8Path) -> Self {
        AuditLog {
            path: home.join(".vak").join("audit").join("security.jsonl"),
            home: home.to_owned(),
        }
    }

    /// The log file.
    pub fn path(&self) -> &Utf8Path {
        &self.path
    }

    /// Append `event`; returns once it is durable.
    pub fn append(&self, event: &SecurityEvent) -> Result<(), SessionError> {
        crate::file::in_home(Some(&self.home), &self.path)?;
        if let Some(dir) = self.path.parent() {
            jsonl::ensure_dir(dir)?;
        }
        let line = serde_json::to_vec(event).map_err(|source| SessionError::Encode {
            path: self.path.clone(),
            source,
        })?;
        let existed = crate::file::is_present(&self.path);
        jsonl::append::<SecurityEvent>(&self.path, line, true)?;
        if !existed {
            // The log's directory entry must survive a crash too.
            if let Some(dir) = self.path.parent() {
                jsonl::sync_dir(dir)?;
            }
        }
        Ok(())
    }

    /// Every event, oldest first. A missing log is an empty one. Memory
    /// grows with the log: for people, use [`list_newest`](Self::list_newest).
    pub fn list(&self) -> Result<AuditEntries, SessionError> {
        let mut entries = self.scan(None)?;
        entries.events.reverse();
        Ok(entries)
    }

    /// The newest `limit` events, newest first, and how many there are in
    /// all. The log is streamed line by line under the line bound, keeping
    /// only `limit` events, so memory does not grow with the log.
    ///
    /// The audit log is a report, not a contract: a line that is not a
    /// record is skipped wherever it is, counted and named (up to
    /// [`MAX_WARNINGS`]), so one damaged line never hides every event.
    pub fn list_newest(&self, limit: usize) -> Result<AuditEntries, SessionError> {
        self.scan(Some(limit))
    }

    /// Events newest first, keeping at most `keep`.
    fn scan(&self, keep: Option<usize>) -> Result<AuditEntries, SessionError> {
        crate::file::in_home(Some(&self.home), &self.path)?;
        let mut entries = AuditEntries {
            events: Vec::new(),
            total: 0,
            skipped_unknown: 0,
            skipped_lines: 0,
            warnings: Vec::new(),
        };
        if !crate::file::is_present(&self.path) {
            return Ok(entries);
        }
        let file = jsonl::open_shared(&self.path)?;
        let mut lines = LineReader::new(BufReader::new(&file), MAX_LINE_BYTES);
        let mut kept = VecDeque::new();
        while let Some(raw) = lines
            .next_line()
            .map_err(|e| SessionError::io("read", self.path.clone(), e))?
        {
            match jsonl::classify::<SecurityEvent>(&self.path, raw, lines.bytes()) {
                Entry::Record(_, SecurityEvent::Unknown) => entries.skipped_unknown += 1,
                Entry::Record(_, event) => {
                    entries.total += 1;
                    kept.push_back(event);
                    if keep.is_some_and(|keep| kept.len() > keep) {
                        kept.pop_front();
                    }
                }
                Entry::Blank => {}
                Entry::Skipped(skipped, _) => {
                    entries.skipped_lines += 1;
                    if entries.warnings.len() < MAX_WARNINGS {
                        entries.warnings.push(skipped);
                    }
                }
            }
        }
        entries.events = kept.into_iter().rev().collect();
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_session::{ChangeKind, ConfigChange, LayerChange, SessionId};

    #[test]
    fn config_change_round_trips_and_unknown_events_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let log = AuditLog::new(&home);
        assert!(log.list().expect("empty").events.is_empty());
        let event = SecurityEvent::ConfigChange(ConfigChange {
            at: vak_session::now_rfc3339(),
            bot: "helpdesk".into(),
            chat: "42".into(),
            old_session: SessionId::generate(),
            new_session: SessionId::generate(),
            old_fingerprint: Some("sha256:aa".into()),
            new_fingerprint: Some("sha256:bb".into()),
            changes: vec![LayerChange {
                block: "identity".into(),
                layer: "bot".into(),
                occurrence: 0,
                kind: ChangeKind::Changed,
                frozen_digest: Some("aa".into()),
                current_digest: Some("bb".into()),
                source: Some(vak_prompt_blocks::Source::from_wire(
                    "bot",
                    "identity",
                    "bots.json#/helpdesk/prompts/identity",
                )),
            }],
        });
        log.append(&event).expect("append");
        std::fs::write(
            log.path(),
            format!(
                "{}{{\"type\":\"login\",\"who\":\"x\"}}\n",
                std::fs::read_to_string(log.path()).expect("read")
            ),
        )
        .expect("write");
        log.append(&event).expect("append again");
        let entries = log.list().expect("list");
        assert_eq!(entries.events, vec![event.clone(), event]);
        assert_eq!(entries.skipped_unknown, 1);
        let text = std::fs::read_to_string(log.path()).expect("read");
        assert!(text.starts_with("{\"type\":\"config-change\""), "{text}");
        let newest = log.list_newest(1).expect("newest");
        assert_eq!((newest.events.len(), newest.total), (1, 2));
    }

    fn event(chat: &str) -> SecurityEvent {
        SecurityEvent::ConfigChange(ConfigChange {
            at: vak_session::now_rfc3339(),
            bot: "helpdesk".into(),
            chat: chat.into(),
            old_session: SessionId::generate(),
            new_session: SessionId::generate(),
            old_fingerprint: None,
            new_fingerprint: None,
            changes: Vec::new(),
        })
    }

    fn chat_of(event: &SecurityEvent) -> &str {
        match event {
            SecurityEvent::ConfigChange(c) => &c.chat,
            SecurityEvent::Rebound(r) => &r.chat,
            SecurityEvent::TrustOverCap(_) | SecurityEvent::Unknown => "",
        }
    }

    #[test]
    fn foreign_lines_are_moved_aside_counted_and_never_hide_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let log = AuditLog::new(&home);
        log.append(&event("1")).expect("append");
        // A foreign last line: readers skip it, the next append moves it aside.
        let mut bytes = std::fs::read(log.path()).expect("read");
        bytes.extend_from_slice(b"{\"x\":1}\n");
        std::fs::write(log.path(), &bytes).expect("write");
        let listed = log.list_newest(10).expect("list");
        assert_eq!((listed.total, listed.skipped_lines), (1, 1));
        log.append(&event("2")).expect("append");
        let listed = log.list_newest(10).expect("list");
        assert_eq!(listed.skipped_lines, 0);
        assert_eq!(
            listed.events.iter().map(chat_of).collect::<Vec<_>>(),
            ["2", "1"]
        );
        let aside: Vec<_> = std::fs::read_dir(log.path().parent().expect("dir"))
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("security.jsonl.foreign-")
            })
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(
            std::fs::read(aside[0].path()).expect("read"),
            b"{\"x\":1}\n"
        );
        // A damaged line in the middle (by hand) is skipped and named, the
        // events around it still listed.
        let text = std::fs::read_to_string(log.path()).expect("read");
        let (first, rest) = text.split_once('\n').expect("two lines");
        std::fs::write(log.path(), format!("{first}\n\u{1b}[2Kjunk\n{rest}")).expect("write");
        let listed = log.list_newest(1).expect("list");
        assert_eq!(
            (listed.events.len(), listed.total, listed.skipped_lines),
            (1, 2, 1)
        );
        assert_eq!(chat_of(&listed.events[0]), "2");
        assert_eq!(listed.warnings[0].line, 2);
    }
}
