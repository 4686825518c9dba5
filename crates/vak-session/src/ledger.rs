//! The session ledger's records: what each line of a ledger holds, in any
//! store. Line 1 is the `created` record holding the [`FrozenContract`];
//! every later line is a turn, an accepted drift, or a record type a newer
//! build added (skipped by readers). Every record is a JSON object with a
//! `type` field, and every store keeps the same JSON line.

use std::sync::LazyLock;

use camino::Utf8PathBuf;
use memchr::memmem::Finder;
use serde::{Deserialize, Serialize};

use crate::{FrozenContract, LayerChange, SessionId, TornLine, now_rfc3339};
use vak_prompt_blocks::Source;

/// Where and how a session was started, recorded beside its contract.
/// Selectors are wire strings, as given on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// RFC 3339 UTC instant of creation.
    #[serde(default)]
    pub created_at: String,
    /// The project directory the prompt was resolved for.
    #[serde(default)]
    pub project: Option<String>,
    /// The surface kind, e.g. `cli` or `chat`.
    #[serde(default)]
    pub surface: Option<String>,
    /// The gateway bot, for chat sessions.
    #[serde(default)]
    pub bot: Option<String>,
    /// The gateway chat, for chat sessions.
    #[serde(default)]
    pub chat: Option<String>,
    /// The worker role selector, if any.
    #[serde(default)]
    pub agent: Option<String>,
    /// The project was forced untrusted (`--untrusted`) at creation, so a
    /// resume must resolve it the same way to compare like with like.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
    /// The working directory inside the project when the session was
    /// created from below its root: the directory sub-layers between the
    /// two are part of what it froze, so a resume must resolve them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

impl SessionMeta {
    /// Metadata stamped with the current instant and no selectors yet.
    pub fn now() -> Self {
        SessionMeta {
            created_at: now_rfc3339(),
            ..SessionMeta::default()
        }
    }
}

/// The first record of every ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Creation metadata.
    #[serde(flatten)]
    pub meta: SessionMeta,
    /// What the session froze. Defaulted so a ledger from before contracts
    /// carried prompt layers reads as an unknown baseline.
    #[serde(default)]
    pub contract: FrozenContract,
}

/// One exchange: the message sent and the tail rendered for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// RFC 3339 UTC instant of the turn.
    pub at: String,
    /// The user's (or chat's) message.
    pub message: String,
    /// The per-turn tail rendered for the request.
    #[serde(default)]
    pub tail: String,
    /// For a turn a signed request delivered, its signature's digest
    /// ([`Claim::digest`](crate::Claim::digest)): written in the same line
    /// as the turn, so a retry of a delivery that committed but was never
    /// acknowledged is found in the ledger and refused as a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    /// The turn's number in its session (1 for the first), written by a
    /// chat's delivery: the ledger's last line then says how many turns the
    /// chat has, so a delivery never reads the turns in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The scoped rules in force for this turn (those whose globs matched
    /// the paths it named), each with its digest: which rules applied to an
    /// edit is answered from the ledger. Absent when none applied; a reader
    /// from before scoped rules ignores it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<TurnRule>,
}

/// One scoped rule in force for a turn, as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WireTurnRule")]
pub struct TurnRule {
    /// The rule's name: `payments` for `rules/payments.md`.
    pub name: String,
    /// The rule file. Written as its path, read back once, here, with
    /// [`Source::from_wire`].
    pub source: Source,
    /// The layer it lives in (wire name: `shared`, `project`).
    pub layer: String,
    /// `guardrails` or `operating-rules`.
    pub block: String,
    /// The sha256 (hex) of the text it contributed.
    pub digest: String,
    /// The turn's paths it matched, relative to the project root.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// A turn's rule as the ledger holds it: the source a string.
#[derive(Deserialize)]
struct WireTurnRule {
    name: String,
    source: String,
    layer: String,
    block: String,
    digest: String,
    #[serde(default)]
    paths: Vec<String>,
}

impl From<WireTurnRule> for TurnRule {
    /// The ledger boundary: the one place a recorded rule's source is read
    /// back.
    fn from(wire: WireTurnRule) -> Self {
        TurnRule {
            source: Source::from_wire(&wire.layer, &wire.block, &wire.source),
            name: wire.name,
            layer: wire.layer,
            block: wire.block,
            digest: wire.digest,
            paths: wire.paths,
        }
    }
}

impl Turn {
    /// A turn stamped now.
    pub fn now(message: impl Into<String>, tail: impl Into<String>) -> Self {
        Turn {
            at: now_rfc3339(),
            message: message.into(),
            tail: tail.into(),
            delivery: None,
            seq: None,
            rules: Vec::new(),
        }
    }

    /// This turn, recording `rules` as in force.
    #[must_use]
    pub fn with_rules(mut self, rules: Vec<TurnRule>) -> Self {
        self.rules = rules;
        self
    }
}

/// The user resumed a drifted session on its frozen prefix, knowingly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftAccepted {
    /// RFC 3339 UTC instant.
    pub at: String,
    /// What differed between the frozen contract and the current resolution.
    #[serde(default)]
    pub changes: Vec<LayerChange>,
    /// The fingerprint of the current resolution that was declined.
    #[serde(default)]
    pub current_fingerprint: Option<String>,
}

/// One line of a ledger, tagged by its `type` field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Record {
    /// Line 1: the frozen contract and creation metadata.
    Created(Box<Header>),
    /// A turn.
    Turn(Turn),
    /// Drift was accepted with `--accept-drift`.
    DriftAccepted(DriftAccepted),
    /// A record type this build does not know, written by a newer one.
    #[serde(other)]
    Unknown,
}

impl Record {
    /// One ledger line, parsed: exactly what `serde_json::from_slice` gives
    /// for a [`Record`], without its detour.
    ///
    /// The derived, internally tagged parse first copies the whole line into
    /// a buffered tree to find the `type` field, then parses the record from
    /// that copy: a `created` line carries the frozen prefix, kilobytes, and
    /// that detour was a third of resuming a session. Lines as vak writes
    /// them put `type` first, so a line that starts `{"type":"<known>",` and
    /// names no other `type` key (not even through a `\u` escape) is parsed
    /// straight into its variant, which ignores the `type` key as the
    /// derived parse removes it. Any other line, and any error, takes the
    /// derived parse, so every answer and message stays its.
    pub fn from_json(line: &[u8]) -> serde_json::Result<Record> {
        let direct = match tag_written_first(line) {
            Some("created") => serde_json::from_slice::<Header>(line)
                .ok()
                .map(|header| Record::Created(Box::new(header))),
            Some("turn") => serde_json::from_slice(line).ok().map(Record::Turn),
            Some("drift-accepted") => serde_json::from_slice(line).ok().map(Record::DriftAccepted),
            _ => None,
        };
        match direct {
            Some(record) => Ok(record),
            None => serde_json::from_slice(line),
        }
    }

    /// The wire name of the record's type.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Created(_) => "created",
            Record::Turn(_) => "turn",
            Record::DriftAccepted(_) => "drift-accepted",
            Record::Unknown => "unknown",
        }
    }
}

/// The `type` of a line written as vak writes it: the object's first key,
/// with a plain string value, and the only key that can read as `type`
/// (the bytes `"type"` appear nowhere after it, nor any `\u` escape, the one
/// way to spell a key's letters otherwise). `None` for anything else.
fn tag_written_first(line: &[u8]) -> Option<&str> {
    let rest = line.strip_prefix(br#"{"type":""#)?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    let after = rest.get(end..)?.strip_prefix(b"\"")?;
    // Built once: building a searcher costs more than a line's search.
    static TYPE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(br#""type""#));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(br"\u"));
    if TYPE_KEY.find(after).is_some() || ESCAPE.find(after).is_some() {
        return None;
    }
    std::str::from_utf8(rest.get(..end)?).ok()
}

/// A whole ledger as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// The session.
    pub id: SessionId,
    /// Its file.
    pub path: Utf8PathBuf,
    /// The `created` record.
    pub header: Header,
    /// Every later record this build knows, in order.
    pub records: Vec<Record>,
    /// How many records of unknown type were skipped.
    pub skipped_unknown: usize,
    /// A torn last line, if one was skipped.
    pub warnings: Vec<TornLine>,
}

impl Ledger {
    /// The frozen contract.
    pub fn contract(&self) -> &FrozenContract {
        &self.header.contract
    }

    /// The turns, in order.
    pub fn turns(&self) -> impl Iterator<Item = &Turn> {
        self.records.iter().filter_map(|r| match r {
            Record::Turn(t) => Some(t),
            _ => None,
        })
    }

    /// Whether a turn of this ledger came with the signed delivery whose
    /// signature's digest is `delivery`.
    pub fn has_delivery(&self, delivery: &str) -> bool {
        self.turns()
            .any(|turn| turn.delivery.as_deref() == Some(delivery))
    }

    /// Every accepted drift, in order.
    pub fn drift_accepted(&self) -> impl Iterator<Item = &DriftAccepted> {
        self.records.iter().filter_map(|r| match r {
            Record::DriftAccepted(d) => Some(d),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PromptLayerDescriptor;
    use vak_prompt_blocks::{Block, Provenance};

    fn contract() -> FrozenContract {
        let layers = vec![PromptLayerDescriptor::of(
            Block::Identity,
            &Provenance::seed("identity"),
            "You are Vak.",
        )];
        FrozenContract {
            fingerprint: crate::fingerprint(&layers),
            prompt_layers: layers,
            prefix: "You are Vak.".into(),
            ..FrozenContract::default()
        }
    }

    /// `Record::from_json` against the derived parse it stands in for: the
    /// same record, or an error for both.
    fn agrees(line: &[u8]) {
        let derived = serde_json::from_slice::<Record>(line);
        let direct = Record::from_json(line);
        match (&derived, &direct) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(line)),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!(
                "derived {derived:?} but direct {direct:?} for {}",
                String::from_utf8_lossy(line)
            ),
        }
    }

    #[test]
    fn lines_as_written_take_the_direct_parse() {
        let header = Record::Created(Box::new(Header {
            meta: SessionMeta {
                project: Some("/p".into()),
                ..SessionMeta::now()
            },
            contract: contract(),
        }));
        let accepted = Record::DriftAccepted(DriftAccepted {
            at: "2026-12-03T00:00:00Z".into(),
            changes: Vec::new(),
            current_fingerprint: Some("sha256:00".into()),
        });
        for (record, tag) in [
            (header, "created"),
            (Record::Turn(Turn::now("hi", "tail")), "turn"),
            (accepted, "drift-accepted"),
        ] {
            let line = serde_json::to_vec(&record).expect("serialize");
            assert_eq!(tag_written_first(&line), Some(tag));
            assert_eq!(Record::from_json(&line).expect("parse"), record);
            agrees(&line);
        }
    }

    #[test]
    fn lines_not_as_written_answer_as_the_derived_parse() {
        for line in [
            // The tag elsewhere, spelled with escapes, or twice.
            r#"{"at":"t","message":"m","type":"turn"}"#,
            r#"{"type":"turn","at":"t","message":"m","type":"turn"}"#,
            r#"{"type":"turn","at":"t","message":"m","type":"created"}"#,
            r#"{"type":"turn","at":"t","message":"m","\u0074ype":"created"}"#,
            r#"{"\u0074ype":"turn","at":"t","message":"m"}"#,
            r#"{"type":"tu\u0072n","at":"t","message":"m"}"#,
            // Unknown, missing, wrong-typed tags and fields.
            r#"{"type":"newer-kind","x":1}"#,
            r#"{"type":"turn"}"#,
            r#"{"type":"turn","at":1,"message":"m"}"#,
            r#"{"type":"created","contract":7}"#,
            r#"{"type":"created","contract":{"prefix":"p"},"contract":{}}"#,
            r#"{"type":"created","created_at":"a","created_at":"b"}"#,
            r#"{"type":7,"at":"t","message":"m"}"#,
            r#"{"at":"t","message":"m"}"#,
            // Not quite one object.
            r#"{"type":"turn","at":"t","message":"m"} x"#,
            r#"{"type":"turn","at":"t","message":"m""#,
            r#"["turn","t","m","tail"]"#,
            r#" {"type":"turn","at":"t","message":"m"}"#,
            r#"{"type":"turn","at":"t","message":"type"}"#,
            r#"{"type":"turn","at":"t","message":"\"type\" \\u"}"#,
            "",
            "null",
        ] {
            agrees(line.as_bytes());
        }
        // Bytes that are not UTF-8, in a value and in the tag itself.
        for line in [
            &b"{\"type\":\"turn\",\"at\":\"t\",\"message\":\"\xff\xfe\"}"[..],
            &b"{\"type\":\"tu\xffrn\",\"at\":\"t\",\"message\":\"m\"}"[..],
            &b"{\"type\":\"created\",\"contract\":{\"prefix\":\"\xc3\"}}"[..],
        ] {
            agrees(line);
        }
    }

    proptest::proptest! {
        /// Any turn or header vak could write, and the same line with a
        /// stray key, parse alike both ways.
        #[test]
        fn direct_and_derived_parses_agree(
            message in ".{0,40}",
            tail in "(type|\"|\\\\|u|\\PC){0,12}",
            project in proptest::option::of(".{0,12}"),
            extra in proptest::option::of("[a-z\"\\\\]{1,6}"),
        ) {
            let turn = Record::Turn(Turn { at: "t".into(), message, tail, delivery: None, seq: None, rules: Vec::new() });
            let header = Record::Created(Box::new(Header {
                meta: SessionMeta { project, ..SessionMeta::default() },
                contract: contract(),
            }));
            for record in [turn, header] {
                let line = serde_json::to_string(&record).expect("serialize");
                proptest::prop_assert_eq!(Record::from_json(line.as_bytes()).expect("parse"), record);
                agrees(line.as_bytes());
                if let Some(key) = &extra {
                    let key = serde_json::to_string(key).expect("key");
                    let stray = format!("{},{key}:1}}", &line[..line.len() - 1]);
                    agrees(stray.as_bytes());
                }
            }
        }
    }
}
