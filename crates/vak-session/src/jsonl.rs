//! The one place that reads and appends JSON-lines files. Ledgers and the
//! audit log share it so both get the same lock, fsync and torn-line rules.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};

use camino::{Utf8Path, Utf8PathBuf};
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::SessionError;

/// A last line that was cut short by a writer that stopped mid-append. It
/// was never reported as written (appends report only after fsync), so
/// skipping it loses nothing anyone was told about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// The JSON-lines file.
    pub path: Utf8PathBuf,
    /// 1-based line number of the torn line.
    pub line: usize,
    /// How many bytes it had.
    pub bytes: usize,
}

impl fmt::Display for TornLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` line {}: skipped a torn last record ({} bytes) left by a writer that stopped mid-append",
            self.path, self.line, self.bytes
        )
    }
}

/// Records of one file, each with its 1-based line number, and the torn
/// last line if there was one.
pub(crate) struct Parsed<T> {
    pub(crate) records: Vec<(usize, T)>,
    pub(crate) torn: Option<TornLine>,
}

/// Read every record of `path` under a shared lock, so a concurrent append
/// is never seen half-written.
pub(crate) fn read<T: DeserializeOwned>(path: &Utf8Path) -> Result<Parsed<T>, SessionError> {
    let mut file = crate::file::open(path, OpenOptions::new().read(true))?;
    file.lock_shared()
        .map_err(|e| SessionError::io("lock", path, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| SessionError::io("read", path, e))?;
    drop(file);
    parse(path, &bytes)
}

/// Read only the first record, for listings that must not cost a full read.
pub(crate) fn read_first<T: DeserializeOwned>(path: &Utf8Path) -> Result<Option<T>, SessionError> {
    let file = crate::file::open(path, OpenOptions::new().read(true))?;
    file.lock_shared()
        .map_err(|e| SessionError::io("lock", path, e))?;
    let mut line = Vec::new();
    let mut reader = io::BufReader::new(&file);
    io::BufRead::read_until(&mut reader, b'\n', &mut line)
        .map_err(|e| SessionError::io("read", path, e))?;
    if !line.ends_with(b"\n") {
        // A torn (or absent) first line is no record at all.
        return Ok(None);
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|source| SessionError::BadLine {
            path: path.to_owned(),
            line: 1,
            source,
        })
}

pub(crate) fn parse<T: DeserializeOwned>(
    path: &Utf8Path,
    bytes: &[u8],
) -> Result<Parsed<T>, SessionError> {
    let segments: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
    let mut records = Vec::with_capacity(segments.len());
    let mut torn = None;
    for (index, segment) in segments.iter().enumerate() {
        let line = index + 1;
        let is_last = index + 1 == segments.len();
        if segment.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let complete = segment.ends_with(b"\n");
        match serde_json::from_slice::<T>(segment) {
            Ok(record) if complete => records.push((line, record)),
            Err(source) if !is_last => {
                return Err(SessionError::BadLine {
                    path: path.to_owned(),
                    line,
                    source,
                });
            }
            // The last line: unparseable, or without its newline (the append
            // never finished, even if the bytes happen to parse; the next
            // append cuts it the same way).
            _ => {
                torn = Some(TornLine {
                    path: path.to_owned(),
                    line,
                    bytes: segment.len(),
                });
            }
        }
    }
    Ok(Parsed { records, torn })
}

/// Append `line` (no newline) to `path` under an exclusive lock: one write
/// of the full line, then fsync. Returns only once the record is durable.
///
/// A torn tail left by an earlier crashed writer is cut off first, so it
/// never becomes a bad line in the middle of the file.
pub(crate) fn append(path: &Utf8Path, mut line: Vec<u8>, create: bool) -> Result<(), SessionError> {
    let mut file = crate::file::open(
        path,
        OpenOptions::new().read(true).append(true).create(create),
    )?;
    file.lock().map_err(|e| SessionError::io("lock", path, e))?;
    repair_tail(&mut file, path)
        .map_err(|e| SessionError::io("repair the torn tail of", path, e))?;
    line.push(b'\n');
    file.write_all(&line)
        .map_err(|e| SessionError::io("append to", path, e))?;
    file.sync_all()
        .map_err(|e| SessionError::io("fsync", path, e))?;
    Ok(())
}

/// Cut a last line that lacks its newline or does not parse as JSON.
fn repair_tail(file: &mut File, path: &Utf8Path) -> io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let start = last_line_start(file, len)?;
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(start))?;
    file.take(len - start).read_to_end(&mut tail)?;
    let sound = tail.ends_with(b"\n")
        && (tail.iter().all(u8::is_ascii_whitespace)
            || serde_json::from_slice::<IgnoredAny>(&tail).is_ok());
    if !sound {
        tracing::warn!(%path, bytes = tail.len(), "cutting a torn last record before appending");
        file.set_len(start)?;
        file.sync_all()?;
    }
    Ok(())
}

/// Offset of the first byte of the last line: just after the last newline
/// that is not the file's final byte.
fn last_line_start(file: &mut File, len: u64) -> io::Result<u64> {
    const CHUNK: u64 = 8192;
    // The final byte is skipped: if it is a newline it ends the last line.
    let mut end = len - 1;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let n = usize::try_from(end - start).unwrap_or(buf.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(pos) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + pos as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// fsync a directory so a rename or link in it survives a crash.
pub(crate) fn sync_dir(dir: &Utf8Path) -> Result<(), SessionError> {
    crate::file::open_dir(dir)?
        .sync_all()
        .map_err(|e| SessionError::io("fsync directory", dir, e))
}

/// Create `dir` and its parents.
pub(crate) fn ensure_dir(dir: &Utf8Path) -> Result<(), SessionError> {
    std::fs::create_dir_all(dir).map_err(|e| SessionError::io("create directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn utf8(dir: &tempfile::TempDir) -> Utf8PathBuf {
        Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8 temp dir")
    }

    #[test]
    fn torn_last_line_is_reported_and_skipped() {
        let path = Utf8Path::new("x.jsonl");
        let parsed: Parsed<Value> = parse(path, b"{\"a\":1}\n{\"a\":2}\n{\"a\":").expect("reads");
        assert_eq!(parsed.records.len(), 2);
        let torn = parsed.torn.expect("torn reported");
        assert_eq!((torn.line, torn.bytes), (3, 5));
        assert!(torn.to_string().contains("x.jsonl` line 3"));
    }

    #[test]
    fn complete_json_without_newline_is_still_torn() {
        let parsed: Parsed<Value> =
            parse(Utf8Path::new("x"), b"{\"a\":1}\n{\"a\":2}").expect("reads");
        assert_eq!(parsed.records.len(), 1);
        assert!(parsed.torn.is_some());
    }

    #[test]
    fn bad_earlier_line_is_an_error_naming_file_and_line() {
        let err = parse::<Value>(Utf8Path::new("s/x.jsonl"), b"{\"a\":1}\n{oops\n{\"a\":2}\n")
            .err()
            .expect("error");
        let msg = err.to_string();
        assert!(msg.contains("`s/x.jsonl` line 2"), "{msg}");
    }

    #[test]
    fn append_cuts_a_torn_tail_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = utf8(&dir).join("l.jsonl");
        std::fs::write(&path, b"{\"a\":1}\n{\"a\":2}\n{\"a\":3").expect("write");
        append(&path, b"{\"a\":4}".to_vec(), false).expect("append");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"{\"a\":1}\n{\"a\":2}\n{\"a\":4}\n"
        );
        // A garbage last line that does end in a newline is cut as well.
        std::fs::write(&path, b"{\"a\":1}\n\0\0\0\n").expect("write");
        append(&path, b"{\"a\":5}".to_vec(), false).expect("append");
        let parsed: Parsed<Value> = read(&path).expect("reads");
        assert_eq!(parsed.records.len(), 2);
        assert!(parsed.torn.is_none());
    }

    #[test]
    fn last_line_start_spans_chunks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = utf8(&dir).join("big.jsonl");
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(20_000));
        std::fs::write(&path, format!("{{\"a\":1}}\n{long}")).expect("write");
        append(&path, b"{\"a\":2}".to_vec(), false).expect("append");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"{\"a\":1}\n{\"a\":2}\n"
        );
    }
}
