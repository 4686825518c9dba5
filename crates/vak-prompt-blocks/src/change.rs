use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Source;

/// How one block's contribution from one layer differs between a frozen
/// contract and the current resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// The layer contributes to the block now but did not when frozen.
    Added,
    /// The layer contributed when frozen and does not now.
    Removed,
    /// The layer contributes the same text at another place in its block
    /// (a skill or MCP server now listed after another): the rendered
    /// prompt changed though no text did.
    Reordered,
    /// The layer contributes different text.
    Changed,
}

impl ChangeKind {
    /// The wire string.
    pub fn wire_name(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Reordered => "reordered",
            ChangeKind::Changed => "changed",
        }
    }
}

/// One changed (block, layer) pair, with both digests. Stored in the ledger
/// when drift is accepted and in the audit log when a binding rotates, so it
/// lives beside the contract types rather than in the drift crate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "WireChange")]
pub struct LayerChange {
    /// Block wire name.
    pub block: String,
    /// Layer wire name.
    pub layer: String,
    /// Which contribution of this (block, layer) pair, counting from 0; only
    /// above 0 when one layer contributes twice (home and project surface
    /// directories, say).
    #[serde(default)]
    pub occurrence: usize,
    /// Added, removed, reordered or changed.
    pub kind: ChangeKind,
    /// The frozen digest; `None` when added.
    #[serde(default)]
    pub frozen_digest: Option<String>,
    /// The current digest; `None` when removed.
    #[serde(default)]
    pub current_digest: Option<String>,
    /// Where the text comes from now (or came from, when removed).
    /// Written as its rendering, read back once, here, with
    /// [`Source::from_wire`].
    pub source: Option<Source>,
}

/// A change as a ledger or the audit log holds it: the source a string.
#[derive(Deserialize)]
struct WireChange {
    block: String,
    layer: String,
    #[serde(default)]
    occurrence: usize,
    kind: ChangeKind,
    #[serde(default)]
    frozen_digest: Option<String>,
    #[serde(default)]
    current_digest: Option<String>,
    #[serde(default)]
    source: Option<String>,
}

impl From<WireChange> for LayerChange {
    /// The ledger boundary: the one place a recorded source is read back.
    fn from(wire: WireChange) -> Self {
        let source = wire
            .source
            .map(|s| Source::from_wire(&wire.layer, &wire.block, &s));
        LayerChange {
            block: wire.block,
            layer: wire.layer,
            occurrence: wire.occurrence,
            kind: wire.kind,
            frozen_digest: wire.frozen_digest,
            current_digest: wire.current_digest,
            source,
        }
    }
}

/// The first four hex digits and an ellipsis: enough for a person to tell
/// two digests apart in a one-line message.
pub fn short_digest(digest: &str) -> String {
    let cut = digest
        .char_indices()
        .nth(4)
        .map_or(digest.len(), |(i, _)| i);
    if cut < digest.len() {
        format!("{}…", &digest[..cut])
    } else {
        digest.to_owned()
    }
}

impl fmt::Display for LayerChange {
    /// `identity (project): changed 3f2a…→9b1c…`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}", self.block, self.layer)?;
        if self.occurrence > 0 {
            write!(f, " #{}", self.occurrence + 1)?;
        }
        write!(f, "): {}", self.kind.wire_name())?;
        match (&self.frozen_digest, &self.current_digest) {
            (Some(old), Some(new)) => write!(f, " {}→{}", short_digest(old), short_digest(new))?,
            (Some(one), None) | (None, Some(one)) => write!(f, " {}", short_digest(one))?,
            (None, None) => {}
        }
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_for_people() {
        let change = LayerChange {
            block: "identity".into(),
            layer: "project".into(),
            occurrence: 0,
            kind: ChangeKind::Changed,
            frozen_digest: Some("3f2a00".into()),
            current_digest: Some("9b1cff".into()),
            source: None,
        };
        assert_eq!(
            change.to_string(),
            "identity (project): changed 3f2a…→9b1c…"
        );
        let added = LayerChange {
            kind: ChangeKind::Added,
            frozen_digest: None,
            occurrence: 1,
            source: Some("/p/.vak/prompts/guardrails.md".into()),
            ..change
        };
        assert_eq!(
            added.to_string(),
            "identity (project #2): added 9b1c… (/p/.vak/prompts/guardrails.md)"
        );
        let wire = serde_json::to_string(&added).unwrap();
        assert!(
            wire.contains(r#""source":"/p/.vak/prompts/guardrails.md""#),
            "{wire}"
        );
        let read: LayerChange = serde_json::from_str(&wire).unwrap();
        assert_eq!(read, added);
        assert_eq!(short_digest("ab"), "ab");
    }
}
