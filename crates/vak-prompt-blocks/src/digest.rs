use sha2::{Digest, Sha256};

/// A lowercase hex sha256 digest, 64 characters.
pub type Sha256Hex = String;

/// The lowercase hex sha256 of `bytes`.
///
/// Every digest in the ledger goes through this one function, so a
/// descriptor's digest can always be recomputed from the text it names.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> Sha256Hex {
    let digest = Sha256::digest(bytes.as_ref());
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

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
}
