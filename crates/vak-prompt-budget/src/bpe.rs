//! Byte-pair encoding over rank tables laid out at build time (`build.rs`).
//!
//! Loading is free: the tables are byte slices in the binary's read-only
//! data, paged in by the kernel as lookups touch them. A lookup hashes the
//! bytes ([`rank_hash`]), probes the open-addressing table, skips slots
//! whose tag differs and compares the rest against the token's bytes in the
//! arena. The merge is OpenAI's: merge the
//! lowest-ranked adjacent pair, leftmost first, until none is in the
//! vocabulary.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::rank_hash::{RANK_BITS, rank_hash, rank_tag};

const RANK_MASK: u32 = (1 << RANK_BITS) - 1;

/// One encoding's rank table.
pub(crate) struct Ranks {
    /// Which encoding, for the memo (never 0).
    id: u8,
    arena: &'static [u8],
    offsets: &'static [u8],
    table: &'static [u8],
}

macro_rules! ranks {
    ($id:literal, $name:literal) => {
        Ranks {
            id: $id,
            arena: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".arena")),
            offsets: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".offsets")),
            table: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".table")),
        }
    };
}

pub(crate) static O200K_BASE: Ranks = ranks!(1, "o200k_base");
pub(crate) static CL100K_BASE: Ranks = ranks!(2, "cl100k_base");

/// Longest piece the memo keeps, and most tokens it keeps for one.
const MEMO_KEY: usize = 16;
const MEMO_IDS: usize = 4;
/// Direct-mapped slots per thread (a power of two; 2048 × 36 bytes).
const MEMO_SLOTS: usize = 2048;

/// One remembered piece: its bytes and its tokens.
#[derive(Clone, Copy)]
struct Memo {
    /// The encoding's `Ranks::id`; 0 = empty.
    owner: u8,
    len: u8,
    n: u8,
    key: [u8; MEMO_KEY],
    ids: [u32; MEMO_IDS],
}

const EMPTY_MEMO: Memo = Memo {
    owner: 0,
    len: 0,
    n: 0,
    key: [0; MEMO_KEY],
    ids: [0; MEMO_IDS],
};

thread_local! {
    /// Pieces recur (the same prompt is counted on every edit): a small hot
    /// table of the recent ones saves the walk through the big rank table.
    static MEMO: std::cell::RefCell<Box<[Memo]>> =
        std::cell::RefCell::new(vec![EMPTY_MEMO; MEMO_SLOTS].into_boxed_slice());
}

fn word(bytes: &[u8], i: usize) -> u32 {
    let at = 4 * i;
    match bytes.get(at..at + 4) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Byte equality without a call into `memcmp`: keys are a few bytes long.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Pieces longer than this merge through a heap (n log n) rather than by
/// rescanning (n²): a 256 KiB run of `=` stays fast.
const HEAP_ABOVE: usize = 128;

impl Ranks {
    fn slots(&self) -> usize {
        self.table.len() / 4
    }

    fn token(&self, rank: u32) -> &'static [u8] {
        let r = rank as usize;
        let (start, end) = (
            word(self.offsets, r) as usize,
            word(self.offsets, r + 1) as usize,
        );
        self.arena.get(start..end).unwrap_or_default()
    }

    /// The rank of exactly these bytes, if they are one token.
    pub(crate) fn rank(&self, key: &[u8]) -> Option<u32> {
        self.rank_hashed(key, rank_hash(key))
    }

    fn rank_hashed(&self, key: &[u8], hash: u64) -> Option<u32> {
        let mask = self.slots() - 1;
        let tag = rank_tag(hash);
        let mut i = (hash as usize) & mask;
        loop {
            let v = word(self.table, i);
            if v == 0 {
                return None;
            }
            if v >> RANK_BITS == tag {
                let rank = (v & RANK_MASK) - 1;
                if same(self.token(rank), key) {
                    return Some(rank);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Appends the tokens of one pre-tokenized piece to `out`.
    pub(crate) fn encode_piece(&self, piece: &[u8], out: &mut impl Extend<u32>) {
        let hash = rank_hash(piece);
        if piece.len() > MEMO_KEY {
            self.encode_uncached(piece, hash, out);
            return;
        }
        let slot = (hash >> 40) as usize & (MEMO_SLOTS - 1);
        let remembered = MEMO
            .try_with(|memo| {
                let memo = memo.try_borrow().ok()?;
                let entry = memo.get(slot)?;
                let len = usize::from(entry.len);
                (entry.owner == self.id && len == piece.len() && entry.key[..len] == *piece)
                    .then_some((entry.ids, usize::from(entry.n)))
            })
            .ok()
            .flatten();
        if let Some((ids, n)) = remembered {
            out.extend(ids.into_iter().take(n));
            return;
        }
        let mut ids = Vec::with_capacity(MEMO_IDS);
        self.encode_uncached(piece, hash, &mut ids);
        if ids.len() <= MEMO_IDS {
            let mut entry = Memo {
                owner: self.id,
                len: piece.len() as u8,
                n: ids.len() as u8,
                ..EMPTY_MEMO
            };
            entry.key[..piece.len()].copy_from_slice(piece);
            entry.ids[..ids.len()].copy_from_slice(&ids);
            let _ = MEMO.try_with(|memo| {
                if let Ok(mut memo) = memo.try_borrow_mut()
                    && let Some(place) = memo.get_mut(slot)
                {
                    *place = entry;
                }
            });
        }
        out.extend(ids);
    }

    fn encode_uncached(&self, piece: &[u8], hash: u64, out: &mut impl Extend<u32>) {
        if let Some(rank) = self.rank_hashed(piece, hash) {
            out.extend([rank]);
            return;
        }
        let bounds = if piece.len() > HEAP_ABOVE {
            self.merge_heap(piece)
        } else {
            self.merge_scan(piece)
        };
        out.extend(bounds.windows(2).map(|w| {
            // Every part left is a token (single bytes always are).
            self.rank(&piece[w[0]..w[1]]).unwrap_or(u32::MAX)
        }));
    }

    fn pair_rank(&self, piece: &[u8], start: usize, end: usize) -> u32 {
        self.rank(&piece[start..end]).unwrap_or(u32::MAX)
    }

    /// OpenAI's `_byte_pair_merge`: the part boundaries after merging.
    fn merge_scan(&self, piece: &[u8]) -> Vec<usize> {
        // (start of part, rank of the pair starting here)
        let mut parts: Vec<(usize, u32)> = (0..=piece.len())
            .map(|i| {
                let r = if i + 2 <= piece.len() {
                    self.pair_rank(piece, i, i + 2)
                } else {
                    u32::MAX
                };
                (i, r)
            })
            .collect();
        while let Some((i, _)) = parts[..parts.len() - 1]
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1 != u32::MAX)
            .min_by_key(|&(i, p)| (p.1, i))
        {
            parts.remove(i + 1);
            let rank_at = |parts: &[(usize, u32)], j: usize| {
                if j + 2 < parts.len() {
                    self.pair_rank(piece, parts[j].0, parts[j + 2].0)
                } else {
                    u32::MAX
                }
            };
            parts[i].1 = rank_at(&parts, i);
            if i > 0 {
                parts[i - 1].1 = rank_at(&parts, i - 1);
            }
        }
        parts.into_iter().map(|(start, _)| start).collect()
    }

    /// The same merge with a linked list and a heap of (rank, start): the
    /// lowest rank, leftmost first, exactly as the scan picks it.
    fn merge_heap(&self, piece: &[u8]) -> Vec<usize> {
        let n = piece.len();
        // next[i]: start of the part after the one starting at i (n = end);
        // prev[i] likewise; version[i] invalidates heap entries of part i.
        let mut next: Vec<usize> = (1..=n + 1).collect();
        let mut prev: Vec<usize> = (0..=n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n + 1];
        let mut version = vec![0u32; n + 1];
        let mut heap = BinaryHeap::new();
        let rank_of = |next: &[usize], i: usize| -> u32 {
            let j = next[i];
            if j >= n {
                return u32::MAX;
            }
            self.pair_rank(piece, i, next[j])
        };
        for i in 0..n {
            let r = rank_of(&next, i);
            if r != u32::MAX {
                heap.push(Reverse((r, i, 0u32)));
            }
        }
        while let Some(Reverse((r, i, v))) = heap.pop() {
            if !alive[i] || version[i] != v {
                continue;
            }
            let j = next[i];
            // merge part j into part i
            alive[j] = false;
            next[i] = next[j];
            if next[j] <= n {
                prev[next[j]] = i;
            }
            version[i] += 1;
            let ri = rank_of(&next, i);
            if ri != u32::MAX {
                heap.push(Reverse((ri, i, version[i])));
            }
            let p = prev[i];
            if p != usize::MAX {
                version[p] += 1;
                let rp = rank_of(&next, p);
                if rp != u32::MAX {
                    heap.push(Reverse((rp, p, version[p])));
                }
            }
            debug_assert!(r != u32::MAX);
        }
        let mut bounds = Vec::new();
        let mut i = 0;
        while i <= n {
            bounds.push(i);
            if i == n {
                break;
            }
            i = next[i];
        }
        bounds
    }
}

/// Counts into a number instead of collecting ids.
pub(crate) struct Counter(pub(crate) usize);

impl Extend<u32> for Counter {
    fn extend<T: IntoIterator<Item = u32>>(&mut self, iter: T) {
        self.0 += iter.into_iter().count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_byte_is_a_token_and_tokens_round_trip() {
        for ranks in [&O200K_BASE, &CL100K_BASE] {
            for b in 0..=255u8 {
                assert!(ranks.rank(&[b]).is_some(), "byte {b}");
            }
            for rank in [0u32, 1, 500, 50_000, 99_000] {
                assert_eq!(ranks.rank(ranks.token(rank)), Some(rank));
            }
        }
        assert_eq!(CL100K_BASE.rank(b"hello"), Some(15339));
        assert_eq!(CL100K_BASE.rank(b"not a token at all"), None);
    }

    #[test]
    fn the_memo_keeps_encodings_and_pieces_apart() {
        for _ in 0..3 {
            let mut a = Vec::new();
            O200K_BASE.encode_piece(b"hello world", &mut a);
            let mut b = Vec::new();
            CL100K_BASE.encode_piece(b"hello world", &mut b);
            assert_eq!(a, [24912, 2375]);
            assert_eq!(b, [15339, 1917]);
            let mut c = Vec::new();
            CL100K_BASE.encode_piece(b"hello", &mut c);
            assert_eq!(c, [15339]);
        }
    }

    proptest! {
        #[test]
        fn heap_merge_equals_scan_merge(bytes in proptest::collection::vec(any::<u8>(), 2..300),
                                         ascii in "[a-c =]{2,300}") {
            for piece in [&bytes[..], ascii.as_bytes()] {
                for ranks in [&O200K_BASE, &CL100K_BASE] {
                    prop_assert_eq!(ranks.merge_heap(piece), ranks.merge_scan(piece));
                }
            }
        }
    }
}
