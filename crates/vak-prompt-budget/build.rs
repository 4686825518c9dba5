//! Lays out, at build time, everything the tokenizer needs so that loading it
//! at run time costs nothing (see README.md, "Tokenizer"):
//!
//! - per encoding, three little-endian `u32`/byte blobs included in the
//!   binary: the token bytes in rank order (`arena`), where each rank's bytes
//!   start (`offsets`, one more entry than ranks) and an open-addressing hash
//!   table of `rank + 1` (`table`, 0 = empty, linear probing, load ≤ 0.8)
//!   with a hash tag in each slot's high bits (`src/rank_hash.rs`);
//! - the Unicode general-category ranges the pre-tokenizer patterns use,
//!   taken from `regex-syntax` (the Unicode tables the reference
//!   implementations' regex engines use), as a sorted Rust table.
//!
//! The ranks come from the `tiktoken` crate's packaged vocabularies (offline),
//! so the runtime has no tokenizer dependency at all.

use std::fmt::Write as _;
use std::path::Path;

#[path = "src/rank_hash.rs"]
mod rank_hash;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/rank_hash.rs");
    let out = std::env::var("OUT_DIR")?;
    let out = Path::new(&out);
    for (name, bpe) in [
        ("o200k_base", tiktoken::encoding::o200k_base()),
        ("cl100k_base", tiktoken::encoding::cl100k_base()),
    ] {
        write_ranks(out, name, &bpe)?;
    }
    write_classes(out)?;
    Ok(())
}

fn write_ranks(
    out: &Path,
    name: &str,
    bpe: &tiktoken::CoreBpe,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = bpe.vocab_size();
    let mut arena = Vec::new();
    let mut offsets = Vec::with_capacity(4 * (n + 1));
    let mut tokens: Vec<(usize, usize)> = Vec::with_capacity(n);
    for rank in 0..n {
        let rank = u32::try_from(rank)?;
        let bytes = bpe.decode(&[rank]);
        if bytes.is_empty() {
            return Err(format!("{name}: rank {rank} has no bytes").into());
        }
        offsets.extend_from_slice(&u32::try_from(arena.len())?.to_le_bytes());
        tokens.push((arena.len(), bytes.len()));
        arena.extend_from_slice(&bytes);
    }
    offsets.extend_from_slice(&u32::try_from(arena.len())?.to_le_bytes());
    let slots = (n * 5 / 4).next_power_of_two();
    let mask = slots - 1;
    if n + 1 >= 1 << rank_hash::RANK_BITS {
        return Err(format!(
            "{name}: {n} ranks do not fit in {} bits",
            rank_hash::RANK_BITS
        )
        .into());
    }
    let rank_mask = (1u32 << rank_hash::RANK_BITS) - 1;
    let mut table = vec![0u32; slots];
    for (rank, &(start, len)) in tokens.iter().enumerate() {
        let key = &arena[start..start + len];
        let hash = rank_hash::rank_hash(key);
        let mut i = (hash as usize) & mask;
        while table[i] != 0 {
            let other = ((table[i] & rank_mask) - 1) as usize;
            let (s, l) = tokens[other];
            if &arena[s..s + l] == key {
                return Err(format!("{name}: ranks {other} and {rank} share bytes").into());
            }
            i = (i + 1) & mask;
        }
        table[i] = (rank_hash::rank_tag(hash) << rank_hash::RANK_BITS) | (u32::try_from(rank)? + 1);
    }
    let table: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out.join(format!("{name}.arena")), &arena)?;
    std::fs::write(out.join(format!("{name}.offsets")), &offsets)?;
    std::fs::write(out.join(format!("{name}.table")), &table)?;
    Ok(())
}

/// Character classes, one per general category group the patterns tell
/// apart; the values match `Class` in `src/pretokenize.rs`.
fn write_classes(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    // Disjoint by construction of the general categories (and `\s` holds
    // only separators and controls); the overlap check below proves it.
    let groups: [(&str, u8); 6] = [
        (r"[\p{Lu}\p{Lt}]", 1),
        (r"\p{Ll}", 2),
        (r"[\p{Lm}\p{Lo}]", 3),
        (r"\p{M}", 4),
        (r"\p{N}", 5),
        (r"\s", 6),
    ];
    let mut ranges: Vec<(u32, u32, u8)> = Vec::new();
    for (pattern, class) in groups {
        let hir = regex_syntax::ParserBuilder::new().build().parse(pattern)?;
        let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(cls)) = hir.kind()
        else {
            return Err(format!("{pattern} is not a Unicode class").into());
        };
        for r in cls.ranges() {
            ranges.push((u32::from(r.start()), u32::from(r.end()), class));
        }
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[0].1 >= w[1].0 {
            return Err(format!("overlapping classes at {:#x}", w[1].0).into());
        }
    }
    let mut src = String::from(
        "/// `(first, last, class)`, sorted, disjoint.\nstatic RANGES: &[(u32, u32, u8)] = &[\n",
    );
    for (a, b, c) in &ranges {
        writeln!(src, "    ({a:#x}, {b:#x}, {c}),")?;
    }
    src.push_str("];\n");
    std::fs::write(out.join("classes.rs"), src)?;
    Ok(())
}
