//! The one size rule and the one check of every object store: what a text
//! is kept under, and what a text read back must hash to.

use vak_prompt_blocks::{Sha256Hex, sha256_hex};

use crate::HistoryError;

/// The largest text kept: the gateway JSON bound (the largest input a
/// single contribution can come from).
pub const MAX_OBJECT_BYTES: u64 = 1024 * 1024;

/// The digest `text` is kept under, refusing a text over
/// [`MAX_OBJECT_BYTES`]: the one size rule of every object store.
///
/// # Errors
///
/// [`HistoryError::TooLarge`], naming the text by its digest.
pub fn object_digest(text: &str) -> Result<Sha256Hex, HistoryError> {
    let bytes = text.len() as u64;
    let digest = sha256_hex(text);
    if bytes > MAX_OBJECT_BYTES {
        return Err(HistoryError::TooLarge {
            what: format!("the text with sha256 {digest}"),
            bytes,
            limit: MAX_OBJECT_BYTES,
        });
    }
    Ok(digest)
}

/// The text of an object read back under `digest`, only if its bytes hash
/// to it and are UTF-8: what every object store checks before serving one.
/// `altered` makes the store's own error from what the bytes really are.
///
/// # Errors
///
/// `altered(actual digest)`, or `altered("bytes that are not UTF-8")`.
pub fn verified_object(
    digest: &str,
    bytes: Vec<u8>,
    altered: impl Fn(String) -> HistoryError,
) -> Result<String, HistoryError> {
    let actual = sha256_hex(&bytes);
    if actual != digest {
        return Err(altered(actual));
    }
    String::from_utf8(bytes).map_err(|_| altered("bytes that are not UTF-8".to_owned()))
}

/// Whether `digest` is a sha256 as vak writes them: 64 lowercase hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
