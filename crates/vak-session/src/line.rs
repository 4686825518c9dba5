//! How a JSON-lines reader reports a line it skipped, and the bound on one
//! line: shared by every store that keeps a record as one JSON line, so a
//! listing says the same thing whichever store it read.

use std::fmt;

use camino::Utf8PathBuf;
use vak_prompt_blocks::Escaped;

/// The longest line any reader takes into memory. A record is one line; the
/// largest vak writes is a `created` record, whose frozen prefix is bounded
/// by the context window, far below this. A longer line is skipped (last
/// line) or refused (a ledger's earlier line) without being read whole.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Why a line was skipped by a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The last line has no newline: a writer stopped mid-append.
    Torn,
    /// A complete line that is not a record: not JSON, not UTF-8, or JSON
    /// without a `type`.
    Invalid,
    /// A line longer than [`MAX_LINE_BYTES`].
    TooLong,
}

/// A line a reader skipped: torn by a writer that stopped mid-append, not a
/// valid record, or too long to read. Appends never build on one: they move
/// it aside first (see the crate docs), so a skipped line never hides a
/// record written after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// The JSON-lines file.
    pub path: Utf8PathBuf,
    /// 1-based line number of the skipped line.
    pub line: usize,
    /// How many bytes it had.
    pub bytes: u64,
    /// Why it was skipped.
    pub reason: SkipReason,
}

impl fmt::Display for TornLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.reason {
            SkipReason::Torn => "a torn last record left by a writer that stopped mid-append",
            SkipReason::Invalid => "a line that is not a valid record",
            SkipReason::TooLong => "a line over the 8 MiB bound for one record",
        };
        write!(
            f,
            "`{}` line {}: skipped {what} ({} bytes)",
            Escaped(self.path.as_str()),
            self.line,
            self.bytes
        )
    }
}
