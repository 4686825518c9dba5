use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use vak_prompt_blocks::{Name, NameKind};

use crate::SessionError;

/// A validated session id: one path component naming exactly one ledger.
///
/// Generated ids are ULID-shaped (26 Crockford base32 characters: 48 bits of
/// milliseconds, then 80 bits of entropy) so they sort by creation time; any
/// other id is accepted only if it passes [`Name`] validation, which is what
/// keeps `..`, `/` and NUL away from the sessions directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(Name);

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Bumped per generated id so two ids made in the same millisecond by one
/// process still differ even if the hasher's entropy repeated.
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl SessionId {
    /// Validate `raw` as a session id before it is used in any path.
    pub fn parse(raw: &str) -> Result<Self, SessionError> {
        Name::new(NameKind::Session, raw)
            .map(SessionId)
            .map_err(SessionError::InvalidId)
    }

    /// A fresh, time-sortable id. Uniqueness across processes comes from the
    /// per-process random seed of [`RandomState`], the pid and a counter;
    /// the store still creates ledgers with create-if-absent semantics, so a
    /// collision is retried rather than overwriting.
    pub fn generate() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let millis = u64::try_from(now.as_millis()).unwrap_or(u64::MAX) & ((1 << 48) - 1);
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut hi = RandomState::new().build_hasher();
        hi.write_u128(now.as_nanos());
        hi.write_u32(std::process::id());
        hi.write_u64(count);
        let hi = hi.finish();
        let mut lo = RandomState::new().build_hasher();
        lo.write_u64(hi);
        lo.write_u64(count);
        let lo = lo.finish();
        // 128 bits: 48 of time, 80 of entropy (16 from `hi`, 64 from `lo`).
        let value: u128 =
            (u128::from(millis) << 80) | (u128::from(hi & 0xffff) << 64) | u128::from(lo);
        let mut out = String::with_capacity(26);
        for i in (0..26).rev() {
            let digit = (value >> (i * 5)) & 0x1f;
            out.push(char::from(CROCKFORD[digit as usize]));
        }
        match Name::new(NameKind::Session, &out) {
            Ok(name) => SessionId(name),
            Err(_) => unreachable!("26 Crockford base32 characters are always a valid name"),
        }
    }

    /// The id as written in paths and JSON.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SessionId {
    type Err = SessionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::parse(s)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        SessionId::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn generated_ids_are_valid_unique_and_sorted_by_time() {
        let ids: Vec<SessionId> = (0..2000).map(|_| SessionId::generate()).collect();
        let unique: HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        for id in &ids {
            assert_eq!(id.as_str().len(), 26);
            assert_eq!(&SessionId::parse(id.as_str()).expect("valid"), id);
        }
        let first = SessionId::generate();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let later = SessionId::generate();
        assert!(first < later, "{first} should sort before {later}");
    }

    #[test]
    fn path_tricks_are_rejected() {
        for bad in ["", "..", "a/b", "../x", "a\0", "-x"] {
            assert!(SessionId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(serde_json::from_str::<SessionId>("\"../etc\"").is_err());
    }
}
