use sha2::{Digest, Sha256};

/// A lowercase hex sha256 digest, 64 characters.
pub type Sha256Hex = String;

/// The lowercase hex sha256 of `bytes`.
///
/// Every digest in the ledger goes through this one function, so a
/// descriptor's digest can always be recomputed from the text it names.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> Sha256Hex {
    let mut out = String::with_capacity(64);
    push_hex(&Sha256::digest(bytes.as_ref()).into(), &mut out);
    out
}

/// Append the 64 lowercase hex digits of `digest` to `out`.
fn push_hex(digest: &[u8; 32], out: &mut String) {
    out.push_str(HexDigits::of(digest).as_str());
}

/// Each byte's two lowercase hex digits: one lookup a byte.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [HEX[byte >> 4], HEX[byte & 0x0f]];
        byte += 1;
    }
    pairs
};

/// The 64 lowercase hex digits of a sha256, laid out on the stack: pushing
/// them a `char` at a time was a sixth of a resolution's hashing (each
/// push checks capacity and encodes UTF-8).
struct HexDigits([u8; 64]);

impl HexDigits {
    fn of(digest: &[u8; 32]) -> Self {
        let mut digits = [0u8; 64];
        for (pair, byte) in digits.chunks_exact_mut(2).zip(digest) {
            pair.copy_from_slice(&HEX_PAIRS[usize::from(*byte)]);
        }
        HexDigits(digits)
    }

    fn as_str(&self) -> &str {
        // Every byte is one of `HEX`: ASCII, so this never falls back.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The sha256 of one text and its length in bytes: what a descriptor
/// records of the text, held without the 64-character string a written
/// descriptor carries. Made only from the text itself, so the two always
/// match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TextDigest {
    digest: [u8; 32],
    bytes: usize,
}

impl TextDigest {
    /// The digest of `text`.
    pub fn of(text: &str) -> Self {
        TextDigest {
            digest: Sha256::digest(text.as_bytes()).into(),
            bytes: text.len(),
        }
    }

    /// The text's length in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The lowercase hex digest, as [`sha256_hex`] of the text gives it.
    pub fn hex(&self) -> Sha256Hex {
        let mut out = String::with_capacity(64);
        self.push_hex(&mut out);
        out
    }

    /// Append [`hex`](Self::hex) to `out`.
    pub fn push_hex(&self, out: &mut String) {
        push_hex(&self.digest, out);
    }

    /// Append [`hex`](Self::hex) to what `writer` hashes.
    pub fn write_hex(&self, writer: &mut Sha256Writer) {
        // The digits go in as bytes: the hasher needs no proof they are
        // text, so they are not checked as UTF-8 on the way.
        writer.push_bytes(&HexDigits::of(&self.digest).0);
    }
}

/// A sha256 of text given in many small pieces (a canonical form written
/// field by field), without building that text as one string first.
///
/// The pieces are gathered in a buffer on the stack and hashed a buffer at a
/// time: handing the hasher each piece on its own costs more than building
/// the string, and the string is one more large allocation.
pub struct Sha256Writer {
    hasher: Sha256,
    buffer: [u8; Self::BUFFER],
    filled: usize,
}

impl Default for Sha256Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256Writer {
    /// A whole number of sha256 blocks (64 bytes each).
    const BUFFER: usize = 512;

    /// A writer with nothing written yet.
    pub fn new() -> Self {
        Sha256Writer {
            hasher: Sha256::new(),
            buffer: [0; Self::BUFFER],
            filled: 0,
        }
    }

    /// Append `text` to what is hashed.
    #[inline]
    pub fn push_str(&mut self, text: &str) {
        self.push_bytes(text.as_bytes());
    }

    #[inline]
    fn push_bytes(&mut self, bytes: &[u8]) {
        if let Some(room) = self.buffer.get_mut(self.filled..self.filled + bytes.len()) {
            room.copy_from_slice(bytes);
            self.filled += bytes.len();
            return;
        }
        self.flush();
        if let Some(room) = self.buffer.get_mut(..bytes.len()) {
            room.copy_from_slice(bytes);
            self.filled = bytes.len();
        } else {
            self.hasher.update(bytes);
        }
    }

    fn flush(&mut self) {
        self.hasher
            .update(self.buffer.get(..self.filled).unwrap_or_default());
        self.filled = 0;
    }

    /// Append the lowercase hex sha256 of everything written to `out`: the
    /// same 64 characters [`sha256_hex`] gives for the text as one string.
    pub fn finish_into(&mut self, out: &mut String) {
        self.flush();
        push_hex(&self.hasher.finalize_reset().into(), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn writer_hashes_its_pieces_as_one_text() {
        // Pieces that fill the buffer exactly, straddle it, and exceed it.
        let long = "x".repeat(Sha256Writer::BUFFER * 2 + 3);
        let pieces: Vec<&str> = vec![
            "",
            "abc",
            &long[..Sha256Writer::BUFFER - 3],
            "tab\t",
            &long,
            "z",
            &long[..Sha256Writer::BUFFER],
            "",
        ];
        for end in 0..=pieces.len() {
            let mut writer = Sha256Writer::new();
            let mut whole = String::new();
            for piece in &pieces[..end] {
                writer.push_str(piece);
                whole.push_str(piece);
            }
            let mut hex = String::new();
            writer.finish_into(&mut hex);
            assert_eq!(hex, sha256_hex(&whole), "{end} pieces");
        }
    }
}
