//! The one place that reads and appends JSON-lines files. Ledgers and the
//! audit log share it so both get the same lock, fsync and torn-line rules.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use camino::{Utf8Path, Utf8PathBuf};
use serde::de::DeserializeOwned;
use vak_prompt_blocks::Escaped;

use vak_session::{MAX_LINE_BYTES, SessionError, SkipReason, TornLine};

/// One line as the bounded reader saw it. Its bytes (when not too long) are
/// in [`LineReader::bytes`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawLine {
    /// 1-based line number.
    pub(crate) line: usize,
    /// Its length in bytes, newline included.
    pub(crate) len: u64,
    /// It ends in a newline.
    pub(crate) complete: bool,
    /// It is longer than the bound; its bytes were not kept.
    pub(crate) too_long: bool,
}

/// Reads lines of at most `max` bytes into one reused buffer; a longer line
/// is counted and passed over without being kept, so memory is bounded by
/// `max` whatever the file holds.
pub(crate) struct LineReader<R> {
    reader: R,
    line: usize,
    buf: Vec<u8>,
    max: usize,
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(reader: R, max: usize) -> Self {
        LineReader {
            reader,
            line: 0,
            buf: Vec::new(),
            max,
        }
    }

    /// The bytes of the line last returned (empty if it was too long).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The next line, or `None` at the end of the input.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<RawLine>> {
        self.buf.clear();
        let mut len = 0u64;
        let mut too_long = false;
        let mut complete = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            // A ledger's first line holds the whole frozen prefix (kilobytes):
            // a byte-at-a-time search for its end was most of this loop.
            let (take, found) = match memchr::memchr(b'\n', available) {
                Some(pos) => (pos + 1, true),
                None => (available.len(), false),
            };
            if !too_long {
                if self.buf.len() + take > self.max {
                    too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(&available[..take]);
                }
            }
            len += take as u64;
            self.reader.consume(take);
            if found {
                complete = true;
                break;
            }
        }
        if len == 0 {
            return Ok(None);
        }
        self.line += 1;
        Ok(Some(RawLine {
            line: self.line,
            len,
            complete,
            too_long,
        }))
    }
}

/// A record of a JSON-lines file: how one line is parsed.
pub(crate) trait JsonLine: DeserializeOwned {
    /// The record `line` holds; `serde_json::from_slice` unless the record
    /// has a faster way to the same answer.
    fn from_line(line: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(line)
    }
}

/// What one line of a JSON-lines file is.
pub(crate) enum Entry<T> {
    /// A record.
    Record(usize, T),
    /// Only whitespace: ignored by everyone.
    Blank,
    /// Skipped, with the parse error when there was one.
    Skipped(TornLine, Option<serde_json::Error>),
}

/// Classify the line `raw` (whose bytes are `bytes`) of `path`.
pub(crate) fn classify<T: JsonLine>(path: &Utf8Path, raw: RawLine, bytes: &[u8]) -> Entry<T> {
    let skipped = |reason| TornLine {
        path: path.to_owned(),
        line: raw.line,
        bytes: raw.len,
        reason,
    };
    if raw.too_long {
        return Entry::Skipped(skipped(SkipReason::TooLong), None);
    }
    if raw.complete && bytes.iter().all(u8::is_ascii_whitespace) {
        return Entry::Blank;
    }
    match T::from_line(bytes) {
        // Without its newline the append never finished, even if the bytes
        // happen to parse; the next append moves it aside the same way.
        Ok(_) if !raw.complete => Entry::Skipped(skipped(SkipReason::Torn), None),
        Ok(record) => Entry::Record(raw.line, record),
        Err(e) if !raw.complete => Entry::Skipped(skipped(SkipReason::Torn), Some(e)),
        Err(e) => Entry::Skipped(skipped(SkipReason::Invalid), Some(e)),
    }
}

/// Records of one file, each with its 1-based line number, and the skipped
/// last line if there was one.
pub(crate) struct Parsed<T> {
    pub(crate) records: Vec<(usize, T)>,
    pub(crate) torn: Option<TornLine>,
}

/// Open `path` for reading (a regular file, never through a symlink) under
/// a shared lock, so a concurrent append is never seen half-written.
pub(crate) fn open_shared(path: &Utf8Path) -> Result<File, SessionError> {
    let file = crate::file::open(path, OpenOptions::new().read(true))?;
    file.lock_shared()
        .map_err(|e| SessionError::io("lock", path, e))?;
    Ok(file)
}

/// Read every record of `path` strictly: a skipped line is tolerated only
/// as the last one; an earlier one is an error naming the
/// file and line, so history is never silently dropped.
pub(crate) fn read<T: JsonLine>(path: &Utf8Path) -> Result<Parsed<T>, SessionError> {
    let file = open_shared(path)?;
    let mut lines = LineReader::new(BufReader::new(&file), MAX_LINE_BYTES);
    let mut records = Vec::new();
    let mut pending: Option<(TornLine, Option<serde_json::Error>)> = None;
    while let Some(raw) = lines
        .next_line()
        .map_err(|e| SessionError::io("read", path, e))?
    {
        let entry = classify::<T>(path, raw, lines.bytes());
        if matches!(entry, Entry::Blank) {
            continue;
        }
        if let Some((skipped, error)) = pending.take() {
            return Err(earlier_line_error(skipped, error));
        }
        match entry {
            Entry::Record(line, record) => records.push((line, record)),
            Entry::Skipped(skipped, error) => pending = Some((skipped, error)),
            Entry::Blank => {}
        }
    }
    Ok(Parsed {
        records,
        torn: pending.map(|(skipped, _)| skipped),
    })
}

fn earlier_line_error(skipped: TornLine, error: Option<serde_json::Error>) -> SessionError {
    match error {
        Some(source) => SessionError::BadLine {
            path: skipped.path,
            line: skipped.line,
            source,
        },
        None => SessionError::LineTooLong {
            path: skipped.path,
            line: skipped.line,
            max: MAX_LINE_BYTES,
        },
    }
}

/// Read only the first record, for listings that must not cost a full read.
/// `None` when the first line is torn, too long or absent.
pub(crate) fn read_first<T: JsonLine>(path: &Utf8Path) -> Result<Option<T>, SessionError> {
    let file = open_shared(path)?;
    let mut lines = LineReader::new(BufReader::new(&file), MAX_LINE_BYTES);
    let Some(raw) = lines
        .next_line()
        .map_err(|e| SessionError::io("read", path, e))?
    else {
        return Ok(None);
    };
    match classify::<T>(path, raw, lines.bytes()) {
        Entry::Record(_, record) => Ok(Some(record)),
        Entry::Blank => Ok(None),
        Entry::Skipped(skipped, error) => match (skipped.reason, error) {
            (SkipReason::Invalid, Some(source)) => Err(SessionError::BadLine {
                path: path.to_owned(),
                line: 1,
                source,
            }),
            _ => Ok(None),
        },
    }
}

/// The first `count` records of `path` (fewer at its end), or `None` when
/// a line among them is one a reader would skip (torn, too long, not a
/// record): the caller then reads the file whole, which reports it.
pub(crate) fn read_head<T: JsonLine>(
    path: &Utf8Path,
    count: usize,
) -> Result<Option<Vec<T>>, SessionError> {
    let file = open_shared(path)?;
    let mut lines = LineReader::new(BufReader::new(&file), MAX_LINE_BYTES);
    let mut records = Vec::with_capacity(count);
    while records.len() < count {
        let Some(raw) = lines
            .next_line()
            .map_err(|e| SessionError::io("read", path, e))?
        else {
            break;
        };
        match classify::<T>(path, raw, lines.bytes()) {
            Entry::Record(_, record) => records.push(record),
            Entry::Blank => {}
            Entry::Skipped(..) => return Ok(None),
        }
    }
    Ok(Some(records))
}

/// The last record of `path` a reader keeps, found from the end (blank
/// lines and one torn last line passed over, as a full read does), or
/// `None` when that takes more than a few lines: the caller then reads the
/// file whole.
pub(crate) fn read_last<T: JsonLine>(path: &Utf8Path) -> Result<Option<T>, SessionError> {
    const MAX_LINES_BACK: usize = 4;
    let read_err = |e| SessionError::io("read the end of", path, e);
    let mut file = open_shared(path)?;
    let len = file.metadata().map_err(read_err)?.len();
    let mut end = len;
    for _ in 0..MAX_LINES_BACK {
        if end == 0 {
            return Ok(None);
        }
        let start = line_start(&mut file, end).map_err(read_err)?;
        if end - start > MAX_LINE_BYTES as u64 {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(start)).map_err(read_err)?;
        (&file)
            .take(end - start)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        let complete = bytes.ends_with(b"\n");
        if complete && bytes.iter().all(u8::is_ascii_whitespace) {
            end = start;
            continue;
        }
        match T::from_line(&bytes) {
            Ok(record) if complete => return Ok(Some(record)),
            // Only the very last line may be skipped, as a full read does.
            _ if end == len => end = start,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) fn parse<T: JsonLine>(path: &Utf8Path, bytes: &[u8]) -> Result<Parsed<T>, SessionError> {
    let dir = tempfile::tempdir().map_err(|e| SessionError::io("create", path, e))?;
    let file = Utf8PathBuf::from_path_buf(dir.path().join("f"))
        .map_err(|_| SessionError::io("create", path, io::ErrorKind::InvalidData.into()))?;
    std::fs::write(&file, bytes).map_err(|e| SessionError::io("write", path, e))?;
    let parsed = read::<T>(&file).map_err(|e| match e {
        SessionError::BadLine { line, source, .. } => SessionError::BadLine {
            path: path.to_owned(),
            line,
            source,
        },
        other => other,
    })?;
    Ok(Parsed {
        records: parsed.records,
        torn: parsed.torn.map(|t| TornLine {
            path: path.to_owned(),
            ..t
        }),
    })
}

/// Append `line` (no newline) to `path` under an exclusive lock: one write
/// of the full line, then fsync. Returns only once the record is durable.
///
/// Before it writes, every trailing line a reader of `T` would skip (torn,
/// not a record, too long) is moved aside into a sibling
/// `<name>.foreign-<unix nanos>` and cut off, under the same lock: the new
/// record never lands after a line readers skip, so it is never lost behind
/// one, and the bytes that were there are kept.
pub(crate) fn append<T: JsonLine>(
    path: &Utf8Path,
    mut line: Vec<u8>,
    create: bool,
) -> Result<(), SessionError> {
    let mut file = crate::file::open(
        path,
        OpenOptions::new().read(true).append(true).create(create),
    )?;
    file.lock().map_err(|e| SessionError::io("lock", path, e))?;
    repair_tail::<T>(&mut file, path)?;
    line.push(b'\n');
    let before = file
        .metadata()
        .map_err(|e| SessionError::io("append to", path, e))?
        .len();
    if let Err(e) = file.write_all(&line) {
        // A full disk or a file-size limit: take back what part of the line
        // went in, under the lock still held, so the file ends where it did
        // (the next append would move a torn line aside anyway).
        let _ = file.set_len(before);
        let _ = file.sync_all();
        return Err(SessionError::io("append to", path, e));
    }
    file.sync_all()
        .map_err(|e| SessionError::io("fsync", path, e))?;
    Ok(())
}

/// Move every trailing line a reader of `T` would skip into a sibling file
/// and truncate `file` to the end of its last good line. Returns the sibling
/// when anything was moved.
fn repair_tail<T: JsonLine>(
    file: &mut File,
    path: &Utf8Path,
) -> Result<Option<Utf8PathBuf>, SessionError> {
    let read_err = |e| SessionError::io("read the tail of", path, e);
    let len = file.metadata().map_err(read_err)?.len();
    let mut end = len;
    while end > 0 {
        let start = line_start(file, end).map_err(read_err)?;
        if line_is_sound::<T>(file, start, end).map_err(read_err)? {
            break;
        }
        end = start;
    }
    if end == len {
        return Ok(None);
    }
    let aside = move_aside(file, path, end, len)?;
    tracing::warn!(
        "moved {} bytes that are not a valid record from the end of `{}` to `{}` before appending",
        len - end,
        Escaped(path.as_str()),
        Escaped(aside.as_str())
    );
    Ok(Some(aside))
}

/// Whether the line `[start, end)` is one readers keep: complete, within the
/// bound, and blank or a record of `T`.
fn line_is_sound<T: JsonLine>(file: &mut File, start: u64, end: u64) -> io::Result<bool> {
    let len = end - start;
    if len > MAX_LINE_BYTES as u64 {
        return Ok(false);
    }
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(start))?;
    (&*file).take(len).read_to_end(&mut bytes)?;
    Ok(bytes.ends_with(b"\n")
        && (bytes.iter().all(u8::is_ascii_whitespace) || T::from_line(&bytes).is_ok()))
}

/// Copy `[from, len)` of `file` into a new sibling of `path` (never
/// replacing one), make it durable, then cut `file` at `from`.
fn move_aside(
    file: &mut File,
    path: &Utf8Path,
    from: u64,
    len: u64,
) -> Result<Utf8PathBuf, SessionError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = path.file_name().unwrap_or("store");
    let mut attempt = 0u128;
    let (aside_path, mut aside) = loop {
        let candidate = path.with_file_name(format!("{name}.foreign-{}", nanos + attempt));
        match crate::file::open(&candidate, OpenOptions::new().write(true).create_new(true)) {
            Ok(aside) => break (candidate, aside),
            Err(SessionError::Io { source, .. })
                if source.kind() == io::ErrorKind::AlreadyExists && attempt < 64 =>
            {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    file.seek(SeekFrom::Start(from))
        .and_then(|_| io::copy(&mut (&*file).take(len - from), &mut aside))
        .map_err(|e| SessionError::io("copy foreign bytes into", aside_path.clone(), e))?;
    aside
        .sync_all()
        .map_err(|e| SessionError::io("fsync", aside_path.clone(), e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    file.set_len(from)
        .map_err(|e| SessionError::io("truncate", path, e))?;
    file.sync_all()
        .map_err(|e| SessionError::io("fsync", path, e))?;
    Ok(aside_path)
}

/// Offset of the first byte of the line that ends at `end` (exclusive):
/// just after the last newline before `end - 1`.
fn line_start(file: &mut File, end: u64) -> io::Result<u64> {
    const CHUNK: u64 = 8192;
    // The byte at `end - 1` is skipped: if it is a newline it ends the line.
    let mut stop = end - 1;
    let mut buf = vec![0u8; CHUNK as usize];
    while stop > 0 {
        let start = stop.saturating_sub(CHUNK);
        let n = usize::try_from(stop - start).unwrap_or(buf.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(pos) = memchr::memrchr(b'\n', &buf[..n]) {
            return Ok(start + pos as u64 + 1);
        }
        stop = start;
    }
    Ok(0)
}

/// fsync a directory so a rename or link in it survives a crash.
pub(crate) fn sync_dir(dir: &Utf8Path) -> Result<(), SessionError> {
    vak_fs::sync_dir(dir).map_err(crate::file::fs_error)
}

/// Create `dir` and its parents, never writable by group or others.
pub(crate) fn ensure_dir(dir: &Utf8Path) -> Result<(), SessionError> {
    vak_prompt_loader::create_dirs(dir).map_err(|e| SessionError::io("create directory", dir, e))
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
    fn append_moves_a_torn_tail_aside_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = utf8(&dir).join("l.jsonl");
        std::fs::write(&path, b"{\"a\":1}\n{\"a\":2}\n{\"a\":3").expect("write");
        append::<Value>(&path, b"{\"a\":4}".to_vec(), false).expect("append");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"{\"a\":1}\n{\"a\":2}\n{\"a\":4}\n"
        );
        // A garbage last line that does end in a newline is cut as well.
        std::fs::write(&path, b"{\"a\":1}\n\0\0\0\n").expect("write");
        append::<Value>(&path, b"{\"a\":5}".to_vec(), false).expect("append");
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
        append::<Value>(&path, b"{\"a\":2}".to_vec(), false).expect("append");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"{\"a\":1}\n{\"a\":2}\n"
        );
    }

    /// A record type for tests: what readers keep has a `type`.
    #[derive(serde::Deserialize)]
    #[expect(dead_code, reason = "only parsed")]
    struct Typed {
        r#type: String,
    }

    impl JsonLine for Typed {}
    impl JsonLine for serde_json::Value {}

    fn foreign_files(dir: &Utf8Path) -> Vec<Vec<u8>> {
        let mut found: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().contains(".jsonl.foreign-"))
            .collect();
        found.sort();
        found
            .iter()
            .map(|p| std::fs::read(p).expect("read"))
            .collect()
    }

    #[test]
    fn foreign_last_lines_are_moved_aside_and_the_append_is_readable() {
        let good = b"{\"type\":\"a\"}\n".to_vec();
        for foreign in [
            b"{\"x\":1}\n".to_vec(),
            b"\xff\xfe not utf-8\n".to_vec(),
            b"{\"type\":\"half".to_vec(),
            b"{\"x\":1}\n\xff\n{\"ty".to_vec(),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let root = utf8(&dir);
            let path = root.join("l.jsonl");
            std::fs::write(&path, [good.clone(), foreign.clone()].concat()).expect("write");
            append::<Typed>(&path, b"{\"type\":\"b\"}".to_vec(), false).expect("append");
            assert_eq!(
                std::fs::read(&path).expect("read"),
                b"{\"type\":\"a\"}\n{\"type\":\"b\"}\n"
            );
            let parsed: Parsed<Typed> = read(&path).expect("reads");
            assert_eq!(parsed.records.len(), 2);
            assert!(parsed.torn.is_none());
            assert_eq!(foreign_files(&root), vec![foreign]);
        }
    }

    #[test]
    fn a_sound_tail_and_unknown_types_are_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = utf8(&dir);
        let path = root.join("l.jsonl");
        std::fs::write(&path, b"{\"type\":\"from-a-newer-build\"}\n\n").expect("write");
        append::<Typed>(&path, b"{\"type\":\"b\"}".to_vec(), false).expect("append");
        let parsed: Parsed<Typed> = read(&path).expect("reads");
        assert_eq!(parsed.records.len(), 2);
        assert!(foreign_files(&root).is_empty());
    }

    #[test]
    fn an_oversized_line_is_skipped_without_being_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = utf8(&dir);
        let path = root.join("l.jsonl");
        let mut bytes = b"{\"type\":\"a\"}\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 10));
        bytes.push(b'\n');
        std::fs::write(&path, &bytes).expect("write");
        let parsed: Parsed<Typed> = read(&path).expect("reads");
        assert_eq!(parsed.records.len(), 1);
        let torn = parsed.torn.expect("skipped");
        assert_eq!(torn.reason, SkipReason::TooLong);
        assert!(torn.to_string().contains("8 MiB bound"), "{torn}");
        // As an earlier line it is an error naming the line.
        std::fs::write(&path, [bytes.as_slice(), b"{\"type\":\"b\"}\n"].concat()).expect("write");
        let err = read::<Typed>(&path).err().expect("error");
        assert!(
            matches!(err, SessionError::LineTooLong { line: 2, .. }),
            "{err}"
        );
        // An append moves it aside.
        std::fs::write(&path, &bytes).expect("write");
        append::<Typed>(&path, b"{\"type\":\"b\"}".to_vec(), false).expect("append");
        assert_eq!(read::<Typed>(&path).expect("reads").records.len(), 2);
    }
}
