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
    arena: &'static [u8],
    offsets: &'static [u8],
    table: &'static [u8],
}

macro_rules! ranks {
    ($name:literal) => {
        Ranks {
            arena: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".arena")),
            offsets: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".offsets")),
            table: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".table")),
        }
    };
}

pub(crate) static O200K_BASE: Ranks = ranks!("o200k_base");
pub(crate) static CL100K_BASE: Ranks = ranks!("cl100k_base");

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
        let mask = self.slots() - 1;
        let hash = rank_hash(key);
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
        if let Some(rank) = self.rank(piece) {
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
