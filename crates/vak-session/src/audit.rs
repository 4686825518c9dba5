//! The security audit log, `$VAK_HOME/.vak/audit/security.jsonl`: one JSON
//! object per line, tagged by `type`, appended under a lock and fsynced.

use camino::{Utf8Path, Utf8PathBuf};
use serde::{Deserialize, Serialize};

use crate::jsonl::{self, TornLine};
use crate::{LayerChange, SessionError, SessionId};

/// A gateway chat binding rotated to a fresh session because the prompt in
/// force changed. Without this record a rotation would look like a route
/// change or a deleted ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// RFC 3339 UTC instant.
    pub at: String,
    /// The bot of the binding.
    pub bot: String,
    /// The chat of the binding.
    pub chat: String,
    /// The session the chat was bound to; its ledger is kept.
    pub old_session: SessionId,
    /// The fresh session the chat is bound to now.
    pub new_session: SessionId,
    /// The old session's frozen fingerprint.
    #[serde(default)]
    pub old_fingerprint: Option<String>,
    /// The fingerprint of the current resolution.
    #[serde(default)]
    pub new_fingerprint: Option<String>,
    /// Each changed block and layer, with both digests.
    #[serde(default)]
    pub changes: Vec<LayerChange>,
}

/// One line of the security log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SecurityEvent {
    /// A binding rotated because its prompt drifted.
    ConfigChange(ConfigChange),
    /// An event type this build does not know, written by a newer one.
    #[serde(other)]
    Unknown,
}

/// The security log as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntries {
    /// Every event this build knows, oldest first.
    pub events: Vec<SecurityEvent>,
    /// How many events of unknown type were skipped.
    pub skipped_unknown: usize,
    /// A torn last line, if one was skipped.
    pub warnings: Vec<TornLine>,
}

/// The security audit log of one `$VAK_HOME`.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: Utf8PathBuf,
}

impl AuditLog {
    /// The log of `home`: `home/.vak/audit/security.jsonl`.
    pub fn new(home: &Utf8Path) -> Self {
        AuditLog {
            path: home.join(".vak").join("audit").join("security.jsonl"),
        }
    }

    /// The log file.
    pub fn path(&self) -> &Utf8Path {
        &self.path
    }

    /// Append `event`; returns once it is durable.
    pub fn append(&self, event: &SecurityEvent) -> Result<(), SessionError> {
        if let Some(dir) = self.path.parent() {
            jsonl::ensure_dir(dir)?;
        }
        let line = serde_json::to_vec(event).map_err(|source| SessionError::Encode {
            path: self.path.clone(),
            source,
        })?;
        let existed = crate::file::is_present(&self.path);
        jsonl::append(&self.path, line, true)?;
        if !existed {
            // The log's directory entry must survive a crash too.
            if let Some(dir) = self.path.parent() {
                jsonl::sync_dir(dir)?;
            }
        }
        Ok(())
    }

    /// Every event, oldest first. A missing log is an empty one.
    pub fn list(&self) -> Result<AuditEntries, SessionError> {
        if !crate::file::is_present(&self.path) {
            return Ok(AuditEntries {
                events: Vec::new(),
                skipped_unknown: 0,
                warnings: Vec::new(),
            });
        }
        let parsed = jsonl::read::<SecurityEvent>(&self.path)?;
        let mut events = Vec::with_capacity(parsed.records.len());
        let mut skipped_unknown = 0;
        for (_, event) in parsed.records {
            match event {
                SecurityEvent::Unknown => skipped_unknown += 1,
                known => events.push(known),
            }
        }
        Ok(AuditEntries {
            events,
            skipped_unknown,
            warnings: parsed.torn.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChangeKind;

    #[test]
    fn config_change_round_trips_and_unknown_events_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8");
        let log = AuditLog::new(&home);
        assert!(log.list().expect("empty").events.is_empty());
        let event = SecurityEvent::ConfigChange(ConfigChange {
            at: crate::now_rfc3339(),
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
                source: Some("bots.json#/helpdesk/prompts/identity".into()),
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
    }
}
