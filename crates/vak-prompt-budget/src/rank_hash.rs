//! The hash that places a token in the static rank table. Shared, through
//! `#[path]`, by `build.rs` (which lays the table out) and by the lookup, so
//! both sides agree by construction.

/// FNV-1a over the token's bytes, high bits folded into the low ones (the
/// table is indexed by the low bits).
#[inline]
pub(crate) fn rank_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ (h >> 31)
}

/// Ranks take the low bits of a table slot (`rank + 1`, 0 = empty); the high
/// bits hold a tag from the hash's top bits, so a probe rejects almost every
/// slot holding another token without reading that token's bytes.
pub(crate) const RANK_BITS: u32 = 18;

/// The tag stored above the rank for a key hashing to `hash`.
#[inline]
pub(crate) fn rank_tag(hash: u64) -> u32 {
    (hash >> (64 - (32 - RANK_BITS))) as u32
}
