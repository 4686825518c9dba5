//! The version log's records: one change vak made to a layer file or
//! gateway key, as every history backend keeps it.

use serde::{Deserialize, Serialize};

/// The longest record line read or written. A record names one file or key
/// and two digests; far below this.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// `set`, `edit`, or an admin save.
    #[default]
    Save,
    /// `reset`: the file removed.
    Reset,
    /// `revert`: an earlier version saved back.
    Revert,
}

impl Action {
    /// The word a listing shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Save => "save",
            Action::Reset => "reset",
            Action::Revert => "revert",
        }
    }
}

/// One change to one layer file or gateway key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct VersionRecord {
    /// Always `version`.
    #[serde(rename = "type")]
    pub kind: String,
    /// RFC 3339 UTC, when the change was written.
    pub time: String,
    /// Who: `user:<os user>` or `admin-token:<id>`.
    pub who: String,
    /// What the change was.
    pub action: Action,
    /// The file path, or the gateway key (`bots.json#/<bot>/prompts/identity`).
    pub target: String,
    /// The block's wire name.
    pub block: String,
    /// The file's sha256 before (`None`: there was no file).
    pub before: Option<String>,
    /// The file's sha256 after (`None`: the file was removed).
    pub after: Option<String>,
    /// Tokens of the text after (`None` after a reset).
    pub tokens: Option<usize>,
    /// Whether the change was made with a chain it reaches over the cap,
    /// because the user asked for it (`--over-budget`, the admin API's
    /// `over_budget`). Written only when true; older readers ignore it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub over_cap: bool,
}

impl VersionRecord {
    /// A record of a change to `target`.
    pub fn new(target: &str, block: &str, action: Action) -> Self {
        VersionRecord {
            kind: "version".to_owned(),
            target: target.to_owned(),
            block: block.to_owned(),
            action,
            ..VersionRecord::default()
        }
    }
}

/// The records for one target, oldest first, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct Versions {
    /// The records, oldest first.
    pub records: Vec<VersionRecord>,
    /// Lines skipped: torn, not a record, or over the bound.
    pub skipped: usize,
}
