use std::borrow::Cow;

use crate::{Block, Provenance, Sha256Writer, Source, TextDigest};
use serde::{Deserialize, Serialize};

/// Where one layer's text for one block came from, with its digest.
///
/// `block` and `layer` are wire strings, not the enums, so a ledger written
/// today still parses after a build that renames or adds a layer. Only
/// winners are recorded; for accumulating blocks every contributor wins.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "WireDescriptor")]
pub struct PromptLayerDescriptor {
    /// Block wire name: `identity`, `operating-rules`, `guardrails`, …
    /// (borrowed from the build's own names when made from a resolution,
    /// owned when read from a ledger).
    pub block: Cow<'static, str>,
    /// Layer wire name: `seed`, `shared`, `project`, …, or `runtime`.
    pub layer: Cow<'static, str>,
    /// Where the text came from. Written as its rendering (a path, gateway
    /// key, or `builtin:`/`runtime:` name), read back once, here, with
    /// [`Source::from_wire`].
    pub source: Option<Source>,
    /// Lowercase hex sha256 of exactly the text this layer contributed.
    pub digest: String,
    /// Length of that text in bytes.
    pub bytes: usize,
    /// For a signed managed file, the key that signed it
    /// (`ed25519:<base64>`). Absent everywhere else, and in ledgers
    /// written before signed managed layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

impl PromptLayerDescriptor {
    /// The descriptor of `text`, contributed to `block` from `provenance`.
    /// The only constructor, so digest and bytes always match the text.
    pub fn of(block: Block, provenance: &Provenance, text: &str) -> Self {
        Self::of_digest(block, provenance, &TextDigest::of(text))
    }

    /// [`of`](Self::of) the text `digest` was made from: a resolution
    /// digests each text as it composes and writes its descriptors out
    /// only when asked.
    pub fn of_digest(block: Block, provenance: &Provenance, digest: &TextDigest) -> Self {
        PromptLayerDescriptor {
            block: Cow::Borrowed(block.wire_name()),
            layer: Cow::Borrowed(provenance.layer.wire_name()),
            source: Some(provenance.source.clone()),
            digest: digest.hex(),
            bytes: digest.bytes(),
            signed_by: provenance.signed_by.clone(),
        }
    }
}

/// A descriptor as a ledger holds it: the source as a string.
#[derive(Deserialize)]
struct WireDescriptor {
    block: Cow<'static, str>,
    layer: Cow<'static, str>,
    #[serde(default)]
    source: Option<String>,
    digest: String,
    bytes: usize,
    #[serde(default)]
    signed_by: Option<String>,
}

impl From<WireDescriptor> for PromptLayerDescriptor {
    /// The ledger boundary: the one place a recorded source string is read
    /// back into a [`Source`].
    fn from(wire: WireDescriptor) -> Self {
        let source = wire
            .source
            .map(|s| Source::from_wire(&wire.layer, &wire.block, &s));
        PromptLayerDescriptor {
            block: wire.block,
            layer: wire.layer,
            source,
            digest: wire.digest,
            bytes: wire.bytes,
            signed_by: wire.signed_by,
        }
    }
}

/// The prefix fingerprint: `sha256:` and the digest over the ordered
/// descriptors' block, layer and digest.
///
/// The source path is left out on purpose: moving a home directory does not
/// change the instructions, and drift is about instructions.
pub fn fingerprint(descriptors: &[PromptLayerDescriptor]) -> String {
    fingerprint_of(
        descriptors
            .iter()
            .map(|d| (&*d.block, &*d.layer, LineDigest::Hex(&d.digest))),
    )
}

/// A descriptor's digest as the fingerprint reads it: written out, or still
/// a [`TextDigest`].
#[derive(Debug, Clone, Copy)]
pub enum LineDigest<'a> {
    /// The lowercase hex digest, as a descriptor holds it.
    Hex(&'a str),
    /// The digest of the text, not yet written out.
    Text(&'a TextDigest),
}

/// [`fingerprint`] of descriptors given as their block, layer and digest,
/// in order: what a resolution computes before writing any descriptor out.
pub fn fingerprint_of<'a>(
    lines: impl IntoIterator<Item = (&'a str, &'a str, LineDigest<'a>)>,
) -> String {
    // The canonical text is hashed as it is written, never held whole.
    let mut canonical = Sha256Writer::new();
    for (block, layer, digest) in lines {
        for part in [block, "\t", layer, "\t"] {
            canonical.push_str(part);
        }
        match digest {
            LineDigest::Hex(hex) => canonical.push_str(hex),
            LineDigest::Text(digest) => digest.write_hex(&mut canonical),
        }
        canonical.push_str("\n");
    }
    let mut out = String::with_capacity(SHA256_PREFIX.len() + 64);
    out.push_str(SHA256_PREFIX);
    canonical.finish_into(&mut out);
    out
}

/// The text [`fingerprint`] is the sha256 of: one `block\tlayer\tdigest\n`
/// line per descriptor. Kept in the object store beside a session's texts,
/// so the fingerprint in its ledger resolves like every other digest.
pub fn fingerprint_text(descriptors: &[PromptLayerDescriptor]) -> String {
    let mut text = String::with_capacity(descriptors.len() * 96);
    canonical_parts(descriptors, |part| text.push_str(part));
    text
}

/// The canonical text's pieces, in order, as [`fingerprint_of`] hashes
/// them (a test holds the two to one text).
fn canonical_parts(descriptors: &[PromptLayerDescriptor], mut push: impl FnMut(&str)) {
    for d in descriptors {
        for part in [&d.block, "\t", &d.layer, "\t", &d.digest, "\n"] {
            push(part);
        }
    }
}

const SHA256_PREFIX: &str = "sha256:";

/// One callable tool in the runtime's capability catalog.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CapabilityDescriptor {
    /// The tool's name as the model calls it.
    pub name: String,
    /// Lowercase hex sha256 of the tool's rendered contract line.
    pub digest: String,
}

/// The worker role a session runs as, frozen with its definition's digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentIdentity {
    /// The role name, e.g. `reviewer`.
    pub role: String,
    /// Lowercase hex sha256 over the role's contributed instruction texts.
    pub digest: String,
    /// The role directories the definition was read from.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// The session a child or flow session was started from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParentSession {
    /// The parent's session id.
    pub session_id: String,
    /// The parent's agent identity, copied so provenance survives even if
    /// the parent's ledger is later removed.
    #[serde(default)]
    pub agent: Option<AgentIdentity>,
}

/// Everything a session freezes at creation. The first record of its ledger.
///
/// Every field has a default so a ledger written before prompt layers
/// existed still reads, as an unknown baseline ([`Baseline::Unknown`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenContract {
    /// The capability catalog in force.
    #[serde(default)]
    pub capabilities: Vec<CapabilityDescriptor>,
    /// Every contributing layer of every block, in render order. Empty means
    /// the baseline is unknown, not that everything was added, unless the
    /// list was emptied by hand (see [`FrozenContract::baseline`]).
    #[serde(default)]
    pub prompt_layers: Vec<PromptLayerDescriptor>,
    /// [`fingerprint`] of `prompt_layers`.
    #[serde(default)]
    pub fingerprint: String,
    /// The assembled prefix text, so a session can run on it after drift.
    #[serde(default)]
    pub prefix: String,
    /// The role this session runs as, if any.
    #[serde(default)]
    pub agent: Option<AgentIdentity>,
    /// The session this one was started from, if any.
    #[serde(default)]
    pub parent: Option<ParentSession>,
}

/// What a contract's prompt layer list is a baseline for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    /// It lists the layers the session froze: drift is checked against them.
    Recorded,
    /// It lists none and holds neither a fingerprint nor a frozen prefix:
    /// written by a build from before prompt layers were recorded
    /// (`fixtures/ledgers/old-no-descriptors.jsonl`). No drift is reported.
    Unknown,
    /// It lists none, yet holds a fingerprint or a frozen prefix. Every
    /// build that records layers writes all three together, and a
    /// resolution always has layers (the seed's, at least), so the list was
    /// emptied after the fact: drift, never an unknown baseline.
    Emptied,
}

impl FrozenContract {
    /// What [`prompt_layers`](Self::prompt_layers) is a baseline for. The
    /// fields that tell an old ledger from an emptied one are the two that
    /// came with the layers: nothing older than them wrote either.
    pub fn baseline(&self) -> Baseline {
        if !self.prompt_layers.is_empty() {
            Baseline::Recorded
        } else if self.fingerprint.is_empty() && self.prefix.is_empty() {
            Baseline::Unknown
        } else {
            Baseline::Emptied
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Origin, PromptLayer, sha256_hex};

    #[test]
    fn descriptor_digest_is_sha256_of_text() {
        let p = Provenance::new(
            PromptLayer::Shared,
            Origin::Home,
            "/h/.vak/prompts/identity.md",
        );
        let d = PromptLayerDescriptor::of(Block::Identity, &p, "You are Vak.");
        assert_eq!(d.block, "identity");
        assert_eq!(d.layer, "shared");
        assert_eq!(d.digest, sha256_hex("You are Vak."));
        assert_eq!(d.bytes, 12);
    }

    /// A descriptor written by the previous release reads back equal to
    /// the one this build makes, and writes back byte for byte.
    #[test]
    fn a_ledger_descriptor_reads_typed_and_writes_unchanged() {
        let made = [
            PromptLayerDescriptor::of(Block::Identity, &Provenance::seed("identity"), "a"),
            PromptLayerDescriptor::of(
                Block::Mcp,
                &Provenance::new(
                    PromptLayer::Runtime,
                    Origin::Home,
                    Source::ConfigKey {
                        file: camino::Utf8Path::new("/h#1/.vak/config.toml").into(),
                        key: crate::MCP_SERVERS_KEY.into(),
                        name: Some("db".into()),
                    },
                ),
                "- `db`",
            ),
            PromptLayerDescriptor::of(
                Block::Identity,
                &Provenance::new(PromptLayer::Project, Origin::Project, "/p#x/builtin:y.md"),
                "b",
            ),
        ];
        for d in made {
            let wire = serde_json::to_string(&d).unwrap();
            let read: PromptLayerDescriptor = serde_json::from_str(&wire).unwrap();
            assert_eq!(read, d, "{wire}");
            assert_eq!(serde_json::to_string(&read).unwrap(), wire);
        }
        let old = r#"{"block":"identity","layer":"seed","source":null,"digest":"x","bytes":1}"#;
        let read: PromptLayerDescriptor = serde_json::from_str(old).unwrap();
        assert_eq!(read.source, None);
        assert_eq!(serde_json::to_string(&read).unwrap(), old);
    }

    #[test]
    fn fingerprint_ignores_source_but_not_order() {
        let a = PromptLayerDescriptor::of(Block::Identity, &Provenance::seed("identity"), "a");
        let b = PromptLayerDescriptor::of(Block::Guardrails, &Provenance::seed("guardrails"), "b");
        let mut moved = a.clone();
        moved.source = Some("elsewhere".into());
        assert_eq!(
            fingerprint(&[a.clone(), b.clone()]),
            fingerprint(&[moved, b.clone()])
        );
        assert_ne!(fingerprint(&[a.clone(), b.clone()]), fingerprint(&[b, a]));
    }

    #[test]
    fn fingerprint_is_sha256_of_the_canonical_lines() {
        let descriptors: Vec<PromptLayerDescriptor> = (0..40)
            .map(|i| {
                PromptLayerDescriptor::of(
                    Block::ALL[i % Block::ALL.len()],
                    &Provenance::seed("identity"),
                    &"text ".repeat(i),
                )
            })
            .collect();
        for end in 0..=descriptors.len() {
            let mut canonical = String::new();
            for d in &descriptors[..end] {
                canonical.push_str(&format!("{}\t{}\t{}\n", d.block, d.layer, d.digest));
            }
            assert_eq!(fingerprint_text(&descriptors[..end]), canonical);
            assert_eq!(
                fingerprint(&descriptors[..end]),
                format!("sha256:{}", sha256_hex(canonical))
            );
        }
    }

    #[test]
    fn a_digest_not_written_out_fingerprints_and_describes_as_its_text() {
        let provenance = Provenance::seed("identity");
        let texts: Vec<String> = (0..12).map(|i| "word ".repeat(i * 7)).collect();
        let digests: Vec<TextDigest> = texts.iter().map(|t| TextDigest::of(t)).collect();
        let written: Vec<PromptLayerDescriptor> = texts
            .iter()
            .map(|t| PromptLayerDescriptor::of(Block::Guardrails, &provenance, t))
            .collect();
        for (digest, descriptor) in digests.iter().zip(&written) {
            assert_eq!(
                PromptLayerDescriptor::of_digest(Block::Guardrails, &provenance, digest),
                *descriptor
            );
        }
        // Mixed forms, as a resolution has them (built-in texts written
        // out once per process, the rest held as digests).
        let mixed = fingerprint_of(digests.iter().zip(&written).enumerate().map(
            |(i, (digest, d))| {
                let digest = if i % 2 == 0 {
                    LineDigest::Text(digest)
                } else {
                    LineDigest::Hex(&d.digest)
                };
                (&*d.block, &*d.layer, digest)
            },
        ));
        assert_eq!(mixed, fingerprint(&written));
    }

    #[test]
    fn old_contracts_parse_with_unknown_fields() {
        let old: FrozenContract = serde_json::from_str(
            r#"{"capabilities":[{"name":"read_file","digest":"00"}],"future":1}"#,
        )
        .expect("parses");
        assert!(old.prompt_layers.is_empty());
        assert_eq!(old.capabilities.len(), 1);
        assert_eq!(old.baseline(), Baseline::Unknown);
    }

    #[test]
    fn a_layer_list_emptied_by_hand_is_no_unknown_baseline() {
        let layers = vec![PromptLayerDescriptor::of(
            Block::Identity,
            &Provenance::seed("identity"),
            "a",
        )];
        let whole = FrozenContract {
            fingerprint: fingerprint(&layers),
            prompt_layers: layers,
            prefix: "You are Vak.".to_owned(),
            ..FrozenContract::default()
        };
        assert_eq!(whole.baseline(), Baseline::Recorded);
        let emptied = FrozenContract {
            prompt_layers: Vec::new(),
            ..whole.clone()
        };
        assert_eq!(emptied.baseline(), Baseline::Emptied);
        // Either field of the two that came with the layers tells.
        for (fingerprint, prefix) in [("", "You are Vak."), ("sha256:00", "")] {
            let partly = FrozenContract {
                fingerprint: fingerprint.to_owned(),
                prefix: prefix.to_owned(),
                ..emptied.clone()
            };
            assert_eq!(partly.baseline(), Baseline::Emptied);
        }
        // All three gone is what an old build wrote: nothing tells them apart.
        let stripped = FrozenContract {
            fingerprint: String::new(),
            prefix: String::new(),
            ..emptied
        };
        assert_eq!(stripped.baseline(), Baseline::Unknown);
    }
}
