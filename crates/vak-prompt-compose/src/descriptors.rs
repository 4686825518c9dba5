//! A resolution's descriptors: each text digested as it is composed, the
//! descriptors themselves written out only when something reads them.
//!
//! A turn that only compares fingerprints (a warm gateway chat, `vak
//! prompts show`) never needs a descriptor's 64-character digest or its
//! copy of the source: two allocations a descriptor, a tenth of a cold
//! resolution's. The fingerprint is computed from the digests as held.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use vak_prompt_blocks::{
    Block, LineDigest, PromptLayerDescriptor, Provenance, TextDigest, fingerprint_of,
};

/// One descriptor as composition records it.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// A built-in text's, written out once per process.
    Made(&'static PromptLayerDescriptor),
    /// The digest of a text contributed to `block` from `provenance`.
    Text {
        block: Block,
        provenance: Arc<Provenance>,
        digest: TextDigest,
    },
}

impl Entry {
    /// The entry of `text`, contributed to `block` from `provenance`.
    pub(crate) fn of(block: Block, provenance: &Arc<Provenance>, text: &str) -> Entry {
        Entry::Text {
            block,
            provenance: Arc::clone(provenance),
            digest: TextDigest::of(text),
        }
    }

    /// Its line of the fingerprint's canonical text.
    fn line(&self) -> (&str, &str, LineDigest<'_>) {
        match self {
            Entry::Made(made) => (&made.block, &made.layer, LineDigest::Hex(&made.digest)),
            Entry::Text {
                block,
                provenance,
                digest,
            } => (
                block.wire_name(),
                provenance.layer.wire_name(),
                LineDigest::Text(digest),
            ),
        }
    }

    /// Append its hex digest to `out`.
    pub(crate) fn push_hex(&self, out: &mut String) {
        match self {
            Entry::Made(made) => out.push_str(&made.digest),
            Entry::Text { digest, .. } => digest.push_hex(out),
        }
    }

    pub(crate) fn written(&self) -> PromptLayerDescriptor {
        match self {
            Entry::Made(made) => PromptLayerDescriptor::clone(made),
            Entry::Text {
                block,
                provenance,
                digest,
            } => PromptLayerDescriptor::of_digest(*block, provenance, digest),
        }
    }
}

/// One descriptor per winning layer per block, in render order. Reads as
/// a slice of [`PromptLayerDescriptor`]s, written out on the first read and
/// kept.
#[derive(Clone, Default)]
pub struct Descriptors {
    entries: Vec<Entry>,
    written: OnceLock<Vec<PromptLayerDescriptor>>,
}

impl Descriptors {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Descriptors {
            entries: Vec::with_capacity(capacity),
            written: OnceLock::new(),
        }
    }

    pub(crate) fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// How many were recorded, without writing any out.
    pub(crate) fn recorded(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn entry(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index)
    }

    /// `sha256:…` over the descriptors, as
    /// [`fingerprint`](vak_prompt_blocks::fingerprint) of them written out.
    pub(crate) fn fingerprint(&self) -> String {
        fingerprint_of(self.entries.iter().map(Entry::line))
    }

    /// The descriptors, written out.
    pub fn as_slice(&self) -> &[PromptLayerDescriptor] {
        self.written
            .get_or_init(|| self.entries.iter().map(Entry::written).collect())
    }
}

impl Deref for Descriptors {
    type Target = [PromptLayerDescriptor];

    fn deref(&self) -> &[PromptLayerDescriptor] {
        self.as_slice()
    }
}

impl<'a> IntoIterator for &'a Descriptors {
    type Item = &'a PromptLayerDescriptor;
    type IntoIter = std::slice::Iter<'a, PromptLayerDescriptor>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl PartialEq for Descriptors {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Descriptors {}

impl fmt::Debug for Descriptors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}
