//! The gateway tiers: `bots.json` (bot) and `allowlist.json` (chat). The
//! loader is the one owner of this format: it reads it for the chain and
//! reads and writes it for the admin API ([`read_gateway`],
//! [`write_gateway_prompt`]), so a fix lands once.
//!
//! Each bot or chat entry may carry a `prompts` object whose keys are block
//! wire names and whose values are strings. A present key decides, an empty
//! string means deliberately nothing, an absent key inherits: the same rule
//! as file presence in a directory layer.
//!
//! Honest about what it does not use: a file over [`MAX_GATEWAY_BYTES`],
//! not valid JSON, or with a key given twice in one object (JSON parsers
//! differ on which wins) is refused whole and reported; an entry of the
//! wrong type (a string or array where an object belongs) is reported with
//! the file and key, never ignored silently.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use camino::{Utf8Path, Utf8PathBuf};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use thiserror::Error;
use vak_prompt_blocks::{
    Block, Escaped, GatewayEntry, Name, Origin, Owner, PromptLayer, Provenance, Sha256Hex, Source,
    sha256_hex,
};

use crate::chain::{Contribution, Skipped};
use crate::confine::OpenedDirs;
use crate::paths::join;
use crate::safe_read::{MAX_FILE_BYTES, ReadRefusal};
use crate::snapshot::Snapshot;
use crate::write::{SaveError, SaveOutcome, save_atomic};

/// The largest gateway JSON file read.
pub const MAX_GATEWAY_BYTES: u64 = 1024 * 1024;

/// `$VAK_HOME/.vak/gateway`: the directory holding the gateway's JSON files.
pub fn gateway_dir(home: &Utf8Path) -> Utf8PathBuf {
    join(home, &[".vak", "gateway"])
}

pub use vak_prompt_blocks::GatewayFile;

/// A place in a gateway file that is not one prompt key, typed: the
/// entry at `entry_path`, then `tail` (`/prompts`, or empty).
pub fn gateway_pointer(file: GatewayFile, entry_path: &[&str], tail: &str) -> Source {
    let mut pointer =
        String::with_capacity(entry_path.iter().map(|p| p.len() + 1).sum::<usize>() + tail.len());
    for part in entry_path {
        pointer.push('/');
        pointer.push_str(part);
    }
    pointer.push_str(tail);
    Source::GatewayPointer { file, pointer }
}

/// Why a gateway file, entry or key is not used. Each message names the
/// file and the key.
#[derive(Debug, Error)]
pub enum GatewayError {
    /// The file could not be read safely.
    #[error("`{}` {reason}; fix it by hand", Escaped(.path.as_str()))]
    Unreadable {
        /// The file.
        path: Utf8PathBuf,
        /// Why (a sentence fragment).
        reason: ReadRefusal,
    },
    /// Not JSON.
    #[error("`{}` is not valid JSON ({}); fix it by hand", Escaped(.path.as_str()), Escaped(.message))]
    NotJson {
        /// The file.
        path: Utf8PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A key appears twice in one object.
    #[error(
        "`{}` gives the key `{}` more than once; which one applies is ambiguous, so the file is not used: remove the duplicate",
        Escaped(.path.as_str()),
        Escaped(.pointer)
    )]
    DuplicateKey {
        /// The file.
        path: Utf8PathBuf,
        /// The JSON pointer of the repeated key, e.g. `#/helpdesk/prompts`.
        pointer: String,
    },
    /// A value of the wrong type where an object belongs.
    #[error(
        "`{}` is {found}, not an object{expected}; fix it by hand",
        Escaped(&.key.to_string()),
        found = .found,
        expected = .expected
    )]
    NotObject {
        /// Where, e.g. `bots.json#/helpdesk`.
        key: Source,
        /// What was found (`a string`, `an array`, …).
        found: &'static str,
        /// What the object holds, for the message.
        expected: &'static str,
    },
    /// A prompt value that is not a string.
    #[error("`{}` is {found}, not a string; fix it by hand", Escaped(.key))]
    NotString {
        /// The source key.
        key: String,
        /// What was found.
        found: &'static str,
    },
    /// The text to save holds a character no prompt may contain:
    /// refused, as a layer file's save is.
    #[error(
        "refusing to save `{}`: it contains {found}, a control or invisible formatting character no prompt may hold; remove it (line ends must be LF) and save again",
        Escaped(.key)
    )]
    ForbiddenCharacter {
        /// The key that was left unchanged.
        key: String,
        /// The character and where it is.
        found: vak_prompt_blocks::ForbiddenChar,
    },
    /// The text to save is over the bound of any one prompt text (as a
    /// prompt file's is): refused, as it would be skipped when read.
    #[error(
        "refusing to save `{}`: it is {bytes} bytes, larger than 256 KiB (the limit for any one prompt text, as for a prompt file); shorten it and save again",
        Escaped(.key)
    )]
    TextTooLarge {
        /// The key that was left unchanged.
        key: String,
        /// The text's length in bytes.
        bytes: usize,
    },
    /// The write failed or was refused.
    #[error(transparent)]
    Save(#[from] SaveError),
}

/// `a string`, `an array`… for messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A gateway file as read: its top-level object and the digest of its
/// bytes (what a write checks it still has).
#[derive(Debug, Clone)]
pub struct GatewayDoc {
    /// The file.
    pub path: Utf8PathBuf,
    /// Which file.
    pub file: GatewayFile,
    /// Its top-level object.
    pub entries: Map<String, Value>,
    /// The sha256 of its bytes.
    pub digest: Sha256Hex,
}

/// Parse JSON, refusing a key repeated within one object.
struct Checked<'a> {
    pointer: String,
    duplicate: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Checked<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Checked {
            pointer: format!("{}/{}", self.pointer, out.len()),
            duplicate: &mut *self.duplicate,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let pointer = format!("{}/{key}", self.pointer);
            let value = map.next_value_seed(Checked {
                pointer: pointer.clone(),
                duplicate: &mut *self.duplicate,
            })?;
            if out.contains_key(&key) && self.duplicate.is_none() {
                *self.duplicate = Some(pointer);
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Parse `text` as the JSON of `path`, refusing duplicate keys.
pub fn parse_gateway_json(path: &Utf8Path, text: &str) -> Result<Value, GatewayError> {
    let mut duplicate = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = Checked {
        pointer: "#".to_owned(),
        duplicate: &mut duplicate,
    }
    .deserialize(&mut deserializer)
    .and_then(|v| deserializer.end().map(|()| v))
    .map_err(|e| GatewayError::NotJson {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    match duplicate {
        Some(pointer) => Err(GatewayError::DuplicateKey {
            path: path.to_owned(),
            pointer,
        }),
        None => Ok(value),
    }
}

/// Read one gateway file under `home`: confined to the home, at most
/// [`MAX_GATEWAY_BYTES`], valid JSON without duplicate keys, an object at
/// the top. `Ok(None)` when there is no file.
///
/// # Errors
///
/// See [`GatewayError`].
pub fn read_gateway(
    home: &Utf8Path,
    file: GatewayFile,
) -> Result<Option<GatewayDoc>, GatewayError> {
    let mut dirs = match OpenedDirs::open(home) {
        Ok(Some(dirs)) => dirs,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(GatewayError::Unreadable {
                path: file.path(home),
                reason: ReadRefusal::Io(e.to_string()),
            });
        }
    };
    read_gateway_in(&mut dirs, home, file)
}

/// [`read_gateway`] through the home's already opened directories.
fn read_gateway_in(
    dirs: &mut OpenedDirs,
    home: &Utf8Path,
    file: GatewayFile,
) -> Result<Option<GatewayDoc>, GatewayError> {
    let path = file.path(home);
    let unreadable = |reason| GatewayError::Unreadable {
        path: path.clone(),
        reason,
    };
    let bytes = match dirs.read_one(&path, MAX_GATEWAY_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(refusal) => return Err(unreadable(refusal.into())),
    };
    let digest = sha256_hex(&bytes);
    let text = String::from_utf8(bytes).map_err(|e| {
        unreadable(ReadRefusal::NotUtf8 {
            at_byte: e.utf8_error().valid_up_to(),
        })
    })?;
    match parse_gateway_json(&path, &text)? {
        Value::Object(entries) => Ok(Some(GatewayDoc {
            path,
            file,
            entries,
            digest,
        })),
        other => Err(GatewayError::NotObject {
            key: gateway_pointer(file, &[], ""),
            found: json_kind(&other),
            expected: " keyed by bot id",
        }),
    }
}

impl GatewayDoc {
    /// The entry at `entry_path` (`[bot]` or `[bot, chat]`), checking that
    /// every step is an object. `Ok(None)` when absent.
    ///
    /// # Errors
    ///
    /// [`GatewayError::NotObject`] naming the key that is not.
    pub fn entry(&self, entry_path: &[&str]) -> Result<Option<&Value>, GatewayError> {
        let mut at = &self.entries;
        let mut found = None;
        for (i, part) in entry_path.iter().enumerate() {
            let Some(value) = at.get(*part) else {
                return Ok(None);
            };
            match value {
                Value::Object(map) => at = map,
                other => {
                    return Err(GatewayError::NotObject {
                        key: gateway_pointer(self.file, &entry_path[..=i], ""),
                        found: json_kind(other),
                        expected: entry_expectation(self.file, i + 1 < entry_path.len()),
                    });
                }
            }
            found = Some(value);
        }
        Ok(found)
    }

    /// The text of `block` in the entry at `entry_path`. `Ok(None)` when
    /// the entry or the key is absent.
    ///
    /// # Errors
    ///
    /// A wrong type anywhere on the way.
    pub fn prompt(&self, entry_path: &[&str], block: Block) -> Result<Option<&str>, GatewayError> {
        match self.entry(entry_path)? {
            Some(entry) => prompt_of(entry, block, self.file, entry_path),
            None => Ok(None),
        }
    }
}

fn entry_expectation(file: GatewayFile, intermediate: bool) -> &'static str {
    match (file, intermediate) {
        (GatewayFile::Allowlist, true) => " of chat ids to chat entries",
        _ => " (an entry, with an optional `prompts` object of block names to strings)",
    }
}

/// `bots.json#/<bot>` or `allowlist.json#/<bot>/<chat>`.
pub fn entry_key(file: GatewayFile, entry_path: &[&str]) -> String {
    let name = file.file_name();
    let mut key = String::with_capacity(
        name.len() + 1 + entry_path.iter().map(|p| p.len() + 1).sum::<usize>(),
    );
    key.push_str(name);
    key.push('#');
    for part in entry_path {
        key.push('/');
        key.push_str(part);
    }
    key
}

/// The text of `block` in one entry, the one at `entry_path` in `file`.
///
/// # Errors
///
/// A `prompts` that is not an object, or a value that is not a string.
pub fn prompt_of<'a>(
    entry: &'a Value,
    block: Block,
    file: GatewayFile,
    entry_path: &[&str],
) -> Result<Option<&'a str>, GatewayError> {
    let Some(prompts) = entry.get("prompts") else {
        return Ok(None);
    };
    let Some(prompts) = prompts.as_object() else {
        return Err(GatewayError::NotObject {
            key: gateway_pointer(file, entry_path, "/prompts"),
            found: json_kind(prompts),
            expected: " of block names to strings",
        });
    };
    match prompts.get(block.wire_name()) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(GatewayError::NotString {
            key: gateway_pointer(file, entry_path, &format!("/prompts/{block}")).to_string(),
            found: json_kind(other),
        }),
    }
}

/// Set (`Some`) or remove (`None`) `block` in the entry at `entry_path`
/// of a gateway file under `home`, creating the entry when a value is
/// set, keeping every other key. The file must still have the digest
/// `expected` (the digest of the [`GatewayDoc`] the caller read, or
/// [`crate::ABSENT_DIGEST`] for no file); the write is the loader's atomic,
/// confined save.
///
/// # Errors
///
/// A wrong type on the way, or a refused save (a stale digest is
/// [`SaveError::Stale`]).
pub fn write_gateway_prompt(
    home: &Utf8Path,
    file: GatewayFile,
    entry_path: &[&str],
    block: Block,
    text: Option<&str>,
    expected: &str,
) -> Result<SaveOutcome, GatewayError> {
    let (path, out) = gateway_prompt_text(home, file, entry_path, block, text)?;
    Ok(save_atomic(&path, home, &out, Some(expected))?)
}

/// Refuse a gateway prompt text holding a character no prompt may contain,
/// as a layer file's save is refused, or over 256 KiB (it
/// would be skipped when read); `key` names it.
/// Every gateway write checks it; a caller may check first, to refuse
/// before any other work.
///
/// # Errors
///
/// [`GatewayError::ForbiddenCharacter`], [`GatewayError::TextTooLarge`].
pub fn check_gateway_text(key: &str, text: &str) -> Result<(), GatewayError> {
    if too_large(text) {
        return Err(GatewayError::TextTooLarge {
            key: key.to_owned(),
            bytes: text.len(),
        });
    }
    match vak_prompt_blocks::first_forbidden(text) {
        Some(found) => Err(GatewayError::ForbiddenCharacter {
            key: key.to_owned(),
            found,
        }),
        None => Ok(()),
    }
}

/// The file [`write_gateway_prompt`] would write, and its whole new text,
/// without writing it (a store that holds the home side writes it instead).
///
/// # Errors
///
/// As [`write_gateway_prompt`], but never a stale digest.
pub fn gateway_prompt_text(
    home: &Utf8Path,
    file: GatewayFile,
    entry_path: &[&str],
    block: Block,
    text: Option<&str>,
) -> Result<(Utf8PathBuf, String), GatewayError> {
    let path = file.path(home);
    let mut root = read_gateway(home, file)?
        .map(|d| d.entries)
        .unwrap_or_default();
    let mut map = &mut root;
    for (i, part) in entry_path.iter().enumerate() {
        let slot = map
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        let found = json_kind(slot);
        map = slot
            .as_object_mut()
            .ok_or_else(|| GatewayError::NotObject {
                key: gateway_pointer(file, &entry_path[..=i], ""),
                found,
                expected: entry_expectation(file, i + 1 < entry_path.len()),
            })?;
    }
    let prompts = map
        .entry("prompts".to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    let found = json_kind(prompts);
    let prompts_map = prompts
        .as_object_mut()
        .ok_or_else(|| GatewayError::NotObject {
            key: gateway_pointer(file, entry_path, "/prompts"),
            found,
            expected: " of block names to strings",
        })?;
    match text {
        Some(text) => {
            let key = gateway_pointer(file, entry_path, &format!("/prompts/{block}"));
            check_gateway_text(&key.to_string(), text)?;
            prompts_map.insert(block.wire_name().to_owned(), Value::String(text.to_owned()));
        }
        None => {
            prompts_map.remove(block.wire_name());
            if prompts_map.is_empty() {
                map.remove("prompts");
            }
        }
    }
    let mut out =
        serde_json::to_string_pretty(&Value::Object(root)).map_err(|e| GatewayError::NotJson {
            path: path.clone(),
            message: e.to_string(),
        })?;
    out.push('\n');
    if out.len() as u64 > MAX_GATEWAY_BYTES {
        return Err(GatewayError::Save(SaveError::TooLarge {
            path,
            bytes: out.len(),
        }));
    }
    Ok((path, out))
}

/// Whether a gateway text is over [`MAX_FILE_BYTES`], the bound of any one
/// prompt text: a gateway file may be four times that, but no one text in
/// it reaches the prompt past the bound a prompt file has.
fn too_large(text: &str) -> bool {
    u64::try_from(text.len()).map_or(true, |n| n > MAX_FILE_BYTES)
}

/// Why a text over the bound is not used, after its key.
fn too_large_reason(text: &str) -> String {
    format!(
        "is {} bytes, larger than 256 KiB (the limit for any one prompt text, as for a prompt file); it is not used",
        text.len()
    )
}

fn skip(
    skipped: &mut Vec<Skipped>,
    block: Option<Block>,
    layer: PromptLayer,
    source: Source,
    reason: String,
) {
    skipped.push(Skipped {
        block,
        provenance: Provenance::new(layer, Origin::Gateway, source),
        reason,
    });
}

/// The reason a whole file is not used, as a fragment after its name.
fn file_reason(error: &GatewayError) -> String {
    match error {
        GatewayError::Unreadable { reason, .. } => reason.to_string(),
        GatewayError::NotJson { message, .. } => {
            format!("is not valid JSON: {}", Escaped(message))
        }
        GatewayError::DuplicateKey { pointer, .. } => format!(
            "gives the key `{}` more than once; which one applies is ambiguous, so the file is not used: remove the duplicate",
            Escaped(pointer)
        ),
        GatewayError::NotObject {
            found, expected, ..
        } => {
            format!("is {found}, not an object{expected}")
        }
        other => other.to_string(),
    }
}

/// The bytes of one gateway file for the chain: through the home's opened
/// directories when there are some, else as [`read_gateway`] reads it.
fn read_bytes_for_chain(
    home: &Utf8Path,
    dirs: Option<&mut OpenedDirs>,
    file: GatewayFile,
) -> Result<Option<Vec<u8>>, GatewayError> {
    let mut own;
    let dirs = match dirs {
        Some(dirs) => dirs,
        None => match OpenedDirs::open(home) {
            Ok(Some(dirs)) => {
                own = dirs;
                &mut own
            }
            Ok(None) => return Ok(None),
            Err(e) => {
                return Err(GatewayError::Unreadable {
                    path: file.path(home),
                    reason: ReadRefusal::Io(e.to_string()),
                });
            }
        },
    };
    let path = file.path(home);
    match dirs.read_one(&path, MAX_GATEWAY_BYTES) {
        Ok(bytes) => Ok(bytes),
        Err(refusal) => Err(GatewayError::Unreadable {
            path,
            reason: refusal.into(),
        }),
    }
}

/// Whether `file` in `home` has an entry for `bot` (and, in
/// `allowlist.json`, its `chat`), answered as [`read_gateway`] then
/// [`GatewayDoc::entry`] answer it, but by the chain's walk rather than by
/// building the document (for a 1 MB `allowlist.json`, 8 ms of a `show`,
/// and of every delivery's admission). `Ok(false)` when the file is absent;
/// a long text `indexes` saw often is answered from its index.
///
/// # Errors
///
/// As [`read_gateway`] (the file unreadable, not JSON, a key given twice,
/// not an object), and [`GatewayError::NotObject`] for a value on the way
/// to the entry, or the entry itself, that is not an object.
pub fn gateway_entry_listed(
    home: &Utf8Path,
    file: GatewayFile,
    bot: &str,
    chat: Option<&str>,
    indexes: &GatewayIndexes,
) -> Result<bool, GatewayError> {
    let Some(bytes) = read_bytes_for_chain(home, None, file)? else {
        return Ok(false);
    };
    let selection = Selection { file, bot, chat };
    let index = indexes.indexed(file, &bytes);
    let found = match &index {
        Some(index) => index.found(selection),
        None => {
            let text = std::str::from_utf8(&bytes).map_err(|e| GatewayError::Unreadable {
                path: file.path(home),
                reason: ReadRefusal::NotUtf8 {
                    at_byte: e.valid_up_to(),
                },
            })?;
            walk_gateway(text, selection, &|| file.path(home))?
        }
    };
    let not_object = |path: &[&str], kind: Kind, intermediate: bool| GatewayError::NotObject {
        key: gateway_pointer(file, path, ""),
        found: kind.name(),
        expected: entry_expectation(file, intermediate),
    };
    if file == GatewayFile::Allowlist {
        match found.bot {
            None => return Ok(false),
            Some(Kind::Object) => {}
            Some(kind) => return Err(not_object(&[bot], kind, chat.is_some())),
        }
        if chat.is_none() {
            return Ok(true);
        }
    }
    match found.entry {
        None => Ok(false),
        Some(Kind::Object) => Ok(true),
        Some(kind) => {
            let path: Vec<&str> = [Some(bot), chat].into_iter().flatten().collect();
            Err(not_object(&path, kind, false))
        }
    }
}

/// [`gateway_entry_listed`] for a warning that a bot or chat id may be
/// mistyped: a file that cannot be read or an entry of the wrong type
/// counts as listed, since the resolution reports those itself.
pub fn gateway_lists(home: &Utf8Path, file: GatewayFile, bot: &str, chat: Option<&str>) -> bool {
    gateway_entry_listed(home, file, bot, chat, &GatewayIndexes::default()).unwrap_or(true)
}

/// Read one gateway file for the chain and walk it for the selected entry
/// ([`walk_gateway`]); a file not used is reported whole, as
/// [`read_gateway`]'s refusal.
fn read_for_chain<'t>(
    home: &Utf8Path,
    bytes: &'t [u8],
    selection: Selection<'_>,
    skipped: &mut Vec<Skipped>,
) -> Option<Found<'t>> {
    let path = || selection.file.path(home);
    let walked = match std::str::from_utf8(bytes) {
        Ok(text) => walk_gateway(text, selection, &path),
        Err(e) => Err(GatewayError::Unreadable {
            path: path(),
            reason: ReadRefusal::NotUtf8 {
                at_byte: e.valid_up_to(),
            },
        }),
    };
    match walked {
        Ok(found) => Some(found),
        Err(error) => {
            let source = match &error {
                GatewayError::NotObject { key, .. } => key.clone(),
                _ => Source::File(path()),
            };
            skip(
                skipped,
                None,
                selection.file.layer(),
                source,
                file_reason(&error),
            );
            None
        }
    }
}

/// Which entry of which gateway file the chain wants.
#[derive(Clone, Copy)]
struct Selection<'s> {
    file: GatewayFile,
    bot: &'s str,
    chat: Option<&'s str>,
}

/// What a JSON value is, as [`json_kind`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "a boolean",
            Kind::Number => "a number",
            Kind::String => "a string",
            Kind::Array => "an array",
            Kind::Object => "an object",
        }
    }
}

/// A value as the walk keeps it: its kind, and a prompt string's text.
struct Seen<'t> {
    kind: Kind,
    text: Option<Cow<'t, str>>,
}

impl<'t> Seen<'t> {
    fn of(kind: Kind) -> Self {
        Seen { kind, text: None }
    }

    /// The same value, holding its own text.
    fn into_owned(self) -> Seen<'static> {
        Seen {
            kind: self.kind,
            text: self.text.map(|text| Cow::Owned(text.into_owned())),
        }
    }

    /// The same value, its text borrowed from this one.
    fn borrowed(&self) -> Seen<'_> {
        Seen {
            kind: self.kind,
            text: self.text.as_deref().map(Cow::Borrowed),
        }
    }
}

/// What the walk found on the way to the selected entry. A key given twice
/// refuses the whole file, so which of two values is kept never matters.
#[derive(Default)]
struct Found<'t> {
    /// `allowlist.json`: the bot's object of chats.
    bot: Option<Kind>,
    /// The selected entry.
    entry: Option<Kind>,
    /// The entry's `prompts`.
    prompts: Option<Kind>,
    /// The keys of `prompts`, in the file's order, with their values.
    keys: Vec<(Cow<'t, str>, Seen<'t>)>,
}

impl Found<'_> {
    /// The same finds, holding their own text.
    fn into_owned(self) -> Found<'static> {
        Found {
            bot: self.bot,
            entry: self.entry,
            prompts: self.prompts,
            keys: self
                .keys
                .into_iter()
                .map(|(key, seen)| (Cow::Owned(key.into_owned()), seen.into_owned()))
                .collect(),
        }
    }

    /// The entry's finds (not the bot's kind), borrowed from these.
    fn entry_view(&self) -> Found<'_> {
        Found {
            bot: None,
            entry: self.entry,
            prompts: self.prompts,
            keys: self
                .keys
                .iter()
                .map(|(key, seen)| (Cow::Borrowed(key.as_ref()), seen.borrowed()))
                .collect(),
        }
    }
}

/// Every entry's finds in one gateway file, from one walk of it: what a
/// check that loads thousands of chains looks each chat up in, instead of
/// walking the whole file once per chain.
#[derive(Default)]
struct GatewayIndex {
    /// By bot: for `bots.json` the bot's entry, for `allowlist.json` the
    /// kind of the bot's value (`bot`), with its chats' entries.
    bots: HashMap<String, IndexedBot>,
}

/// One bot of a [`GatewayIndex`].
#[derive(Default)]
struct IndexedBot {
    found: Found<'static>,
    chats: HashMap<String, Found<'static>>,
}

impl GatewayIndex {
    /// What [`walk_gateway`] finds for `selection` in the text indexed.
    fn found(&self, selection: Selection<'_>) -> Found<'_> {
        let Some(bot) = self.bots.get(selection.bot) else {
            return Found::default();
        };
        match selection.file {
            GatewayFile::Bots => bot.found.entry_view(),
            GatewayFile::Allowlist => {
                let chat = selection.chat.and_then(|chat| bot.chats.get(chat));
                Found {
                    bot: bot.found.bot,
                    ..chat.map(Found::entry_view).unwrap_or_default()
                }
            }
        }
    }
}

/// A gateway text at least this long is indexed ([`GatewayIndex`]) once
/// one process has walked it [`WALKS_BEFORE_INDEX`] times; a shorter one is
/// walked each time.
const INDEXED_GATEWAY_BYTES: usize = 16 * 1024;

/// How many times one process walks a long gateway text before it indexes
/// it: building the index costs about two and a half walks, and a
/// delivery reads `allowlist.json` twice (admission, then the chain), so
/// only a process that reads it more often than that gains.
const WALKS_BEFORE_INDEX: u8 = 2;

/// What one process knows of a long gateway text it read.
enum Indexing {
    /// Read this many times, each walked for one chain, like any other.
    Walked(u8),
    /// Read more often: indexed.
    Indexed(Arc<GatewayIndex>),
    /// Not a valid gateway file: every chain walks it and reports why.
    Refused,
}

/// How many long gateway texts one [`GatewayIndexes`] remembers
/// (`bots.json` and `allowlist.json`, and an edit of each).
const REMEMBERED_GATEWAY_TEXTS: usize = 4;

type Remembered = Vec<(GatewayFile, Box<[u8]>, Indexing)>;

/// The indexes of the long gateway texts one owner read often: what a
/// service answering many deliveries, or a check loading thousands of
/// chains, looks a bot or chat up in instead of walking a 1 MB
/// `allowlist.json` again (1.7–3.6 ms a walk, 0.11 ms from an index).
///
/// Held by whoever asks many questions (the gateway's prompt cache, a
/// [`Snapshot`]) and dropped with it; never process-wide. Clones share one
/// memory. Keyed by the whole text, compared byte for byte, so an edit is
/// never answered from a stale index; a text read once or twice (a `show`,
/// one delivery) is walked as before, never indexed.
#[derive(Clone, Default)]
pub struct GatewayIndexes {
    remembered: Arc<Mutex<Remembered>>,
}

impl std::fmt::Debug for GatewayIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayIndexes").finish_non_exhaustive()
    }
}

impl GatewayIndexes {
    /// How many texts are indexed (not merely remembered as walked): a
    /// work counter for tests and benchmarks.
    pub fn indexed_texts(&self) -> usize {
        self.remembered.lock().map_or(0, |remembered| {
            remembered
                .iter()
                .filter(|(_, _, indexing)| matches!(indexing, Indexing::Indexed(_)))
                .count()
        })
    }

    /// The index of `text`, the contents of a gateway `file`, when this
    /// owner read the same text more than [`WALKS_BEFORE_INDEX`] times
    /// before.
    fn indexed(&self, file: GatewayFile, text: &[u8]) -> Option<Arc<GatewayIndex>> {
        if text.len() < INDEXED_GATEWAY_BYTES {
            return None;
        }
        let mut remembered = self.remembered.lock().ok()?;
        let Some(at) = remembered
            .iter()
            .position(|(seen_file, seen, _)| *seen_file == file && **seen == *text)
        else {
            if remembered.len() >= REMEMBERED_GATEWAY_TEXTS {
                remembered.remove(0);
            }
            remembered.push((file, text.into(), Indexing::Walked(1)));
            return None;
        };
        let indexing = &mut remembered[at].2;
        if let Indexing::Walked(walks) = indexing {
            if *walks < WALKS_BEFORE_INDEX {
                *walks += 1;
                return None;
            }
            *indexing = match std::str::from_utf8(text)
                .ok()
                .and_then(|text| index_gateway(text, file))
            {
                Some(index) => Indexing::Indexed(Arc::new(index)),
                None => Indexing::Refused,
            };
        }
        match indexing {
            Indexing::Indexed(index) => Some(Arc::clone(index)),
            Indexing::Walked(_) | Indexing::Refused => None,
        }
    }
}

/// Walk `text` once for every entry; `None` when the file is refused (the
/// walk for one chain then reports why).
fn index_gateway(text: &str, file: GatewayFile) -> Option<GatewayIndex> {
    let mut every = Every::default();
    let selection = Selection {
        file,
        bot: "",
        chat: None,
    };
    let (top, duplicate) =
        drive_walk(text, selection, &mut Found::default(), Some(&mut every)).ok()?;
    (duplicate.is_none() && top == Kind::Object).then_some(every.index)
}

/// Drive one [`Walk`] over the whole of `text`: the kind of its top
/// level, and the pointer of the first key given twice, if any.
fn drive_walk<'t>(
    text: &'t str,
    selection: Selection<'_>,
    found: &mut Found<'t>,
    every: Option<&mut Every>,
) -> Result<(Kind, Option<String>), serde_json::Error> {
    let mut duplicate = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let top = Walk {
        at: &Pointer::Root,
        want: Want::Top,
        selection,
        found,
        duplicate: &mut duplicate,
        every,
    }
    .deserialize(&mut deserializer)
    .and_then(|v| deserializer.end().map(|()| v))?;
    Ok((top.kind, duplicate))
}

/// An index walk's state: the bot whose chats are being walked, and the
/// index so far.
#[derive(Default)]
struct Every {
    bot: String,
    index: GatewayIndex,
}

/// What the walk keeps of the value at hand.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// The top-level object.
    Top,
    /// `allowlist.json`'s object of the selected bot's chats.
    Chats,
    /// The selected entry.
    Entry,
    /// The entry's `prompts` object.
    Prompts,
    /// A value in `prompts`: a string's text is kept.
    Text,
    /// Only its kind, and its keys checked for duplicates.
    Nothing,
}

/// Where a value sits: the JSON pointer of a duplicate key, spelled only
/// when one is found.
enum Pointer<'p> {
    Root,
    Key(&'p Pointer<'p>, &'p str),
    Index(&'p Pointer<'p>, usize),
}

impl Pointer<'_> {
    fn spell(&self, out: &mut String) {
        match self {
            Pointer::Root => out.push('#'),
            Pointer::Key(parent, key) => {
                parent.spell(out);
                out.push('/');
                out.push_str(key);
            }
            Pointer::Index(parent, index) => {
                parent.spell(out);
                out.push('/');
                out.push_str(&index.to_string());
            }
        }
    }
}

/// Walk a gateway file's JSON for the chain, without building it: every
/// byte is parsed by the same parser, in the same order, as
/// [`parse_gateway_json`] parses it (so a syntax error is the same error
/// at the same place), every object's keys are checked for duplicates (the
/// first found is the one named, as there), and only the selected entry's
/// kinds and its `prompts` strings are kept.
struct Walk<'a, 'p, 't> {
    at: &'p Pointer<'p>,
    want: Want,
    selection: Selection<'a>,
    found: &'a mut Found<'t>,
    duplicate: &'a mut Option<String>,
    /// An index walk ([`index_gateway`]): every bot and chat is an entry,
    /// and each entry's finds go into the index, not `found`.
    every: Option<&'a mut Every>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_, 'de> {
    type Value = Seen<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Seen<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_, 'de> {
    type Value = Seen<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Seen<'de>, E> {
        Ok(Seen::of(Kind::Bool))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Seen<'de>, E> {
        Ok(Seen::of(Kind::Number))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Seen<'de>, E> {
        Ok(Seen::of(Kind::Number))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Seen<'de>, E> {
        // As `Value` keeps it: a float JSON cannot hold is null.
        Ok(Seen::of(if v.is_finite() {
            Kind::Number
        } else {
            Kind::Null
        }))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Seen<'de>, E> {
        Ok(Seen {
            kind: Kind::String,
            text: (self.want == Want::Text).then_some(Cow::Borrowed(v)),
        })
    }
    fn visit_str<E>(self, v: &str) -> Result<Seen<'de>, E> {
        Ok(Seen {
            kind: Kind::String,
            text: (self.want == Want::Text).then(|| Cow::Owned(v.to_owned())),
        })
    }
    fn visit_string<E>(self, v: String) -> Result<Seen<'de>, E> {
        Ok(Seen {
            kind: Kind::String,
            text: (self.want == Want::Text).then_some(Cow::Owned(v)),
        })
    }
    fn visit_unit<E>(self) -> Result<Seen<'de>, E> {
        Ok(Seen::of(Kind::Null))
    }
    fn visit_none<E>(self) -> Result<Seen<'de>, E> {
        Ok(Seen::of(Kind::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen<'de>, A::Error> {
        let mut index = 0;
        loop {
            let at = Pointer::Index(self.at, index);
            let item = Walk {
                at: &at,
                want: Want::Nothing,
                selection: self.selection,
                found: &mut *self.found,
                duplicate: &mut *self.duplicate,
                every: None,
            };
            if seq.next_element_seed(item)?.is_none() {
                break;
            }
            index += 1;
        }
        Ok(Seen::of(Kind::Array))
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Seen<'de>, A::Error> {
        let mut keys = SeenKeys::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let want = self.child(&key);
            let at = Pointer::Key(self.at, &key);
            // An index walk gives each entry finds of its own.
            let mut entry = Found::default();
            let into = match (&self.every, want) {
                (Some(_), Want::Entry) => &mut entry,
                _ => &mut *self.found,
            };
            let every = match (self.every.as_deref_mut(), want) {
                (Some(every), Want::Chats) => {
                    every.bot.clear();
                    every.bot.push_str(&key);
                    Some(every)
                }
                _ => None,
            };
            let value = map.next_value_seed(Walk {
                at: &at,
                want,
                selection: self.selection,
                found: into,
                duplicate: &mut *self.duplicate,
                every,
            })?;
            match (self.every.as_deref_mut(), want) {
                (Some(every), Want::Chats) => {
                    let bot = every.index.bots.entry(key.to_string()).or_default();
                    bot.found.bot = Some(value.kind);
                }
                (Some(every), Want::Entry) => {
                    entry.entry = Some(value.kind);
                    let entry = entry.into_owned();
                    match self.selection.file {
                        GatewayFile::Bots => {
                            let bot = every.index.bots.entry(key.to_string()).or_default();
                            bot.found = entry;
                        }
                        GatewayFile::Allowlist => {
                            let bot = every.index.bots.entry(every.bot.clone()).or_default();
                            bot.chats.insert(key.to_string(), entry);
                        }
                    }
                }
                (_, Want::Chats) => self.found.bot = Some(value.kind),
                (_, Want::Entry) => self.found.entry = Some(value.kind),
                (_, Want::Prompts) => self.found.prompts = Some(value.kind),
                (_, Want::Text) => self.found.keys.push((key.clone(), value)),
                (_, Want::Top | Want::Nothing) => {}
            }
            if keys.contains(&key) {
                if self.duplicate.is_none() {
                    let mut pointer = String::new();
                    at.spell(&mut pointer);
                    *self.duplicate = Some(pointer);
                }
            } else {
                keys.insert(key);
            }
        }
        Ok(Seen::of(Kind::Object))
    }
}

/// How many keys of one object [`SeenKeys`] compares one by one.
const FEW_KEYS: usize = 8;

/// The keys of one object seen so far: the first [`FEW_KEYS`] kept on the
/// stack and compared one by one (a gateway object has a handful, and a
/// `BTreeSet` allocated per object was most of the walk's allocations),
/// the rest in a `BTreeSet`, so an object with many keys stays n log n.
struct SeenKeys<'t> {
    few: [Cow<'t, str>; FEW_KEYS],
    len: usize,
    many: BTreeSet<Cow<'t, str>>,
}

impl Default for SeenKeys<'_> {
    fn default() -> Self {
        SeenKeys {
            few: [const { Cow::Borrowed("") }; FEW_KEYS],
            len: 0,
            many: BTreeSet::new(),
        }
    }
}

impl<'t> SeenKeys<'t> {
    fn contains(&self, key: &str) -> bool {
        self.few[..self.len].iter().any(|k| k == key) || self.many.contains(key)
    }

    /// Add `key`, which is not there yet.
    fn insert(&mut self, key: Cow<'t, str>) {
        if let Some(slot) = self.few.get_mut(self.len) {
            *slot = key;
            self.len += 1;
        } else {
            self.many.insert(key);
        }
    }
}

impl Walk<'_, '_, '_> {
    /// What to keep of the value under `key` of the object at hand.
    fn child(&self, key: &str) -> Want {
        let selection = self.selection;
        let every = self.every.is_some();
        match self.want {
            Want::Top if every || key == selection.bot => match selection.file {
                GatewayFile::Bots => Want::Entry,
                GatewayFile::Allowlist => Want::Chats,
            },
            Want::Chats if every || Some(key) == selection.chat => Want::Entry,
            Want::Entry if key == "prompts" => Want::Prompts,
            Want::Prompts => Want::Text,
            _ => Want::Nothing,
        }
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
}

/// Walk `text` (the JSON of the file `path` names) for `selection`:
/// refused whole exactly as [`read_gateway`] refuses it (not JSON, a key
/// given twice, not an object at the top), else what was found.
fn walk_gateway<'t>(
    text: &'t str,
    selection: Selection<'_>,
    path: &dyn Fn() -> Utf8PathBuf,
) -> Result<Found<'t>, GatewayError> {
    let mut found = Found::default();
    let (top, duplicate) =
        drive_walk(text, selection, &mut found, None).map_err(|e| GatewayError::NotJson {
            path: path(),
            message: e.to_string(),
        })?;
    if let Some(pointer) = duplicate {
        return Err(GatewayError::DuplicateKey {
            path: path(),
            pointer,
        });
    }
    if top != Kind::Object {
        return Err(GatewayError::NotObject {
            key: gateway_pointer(selection.file, &[], ""),
            found: top.name(),
            expected: " keyed by bot id",
        });
    }
    Ok(found)
}

/// The selected entry's contributions, or what is wrong on the way to it,
/// reported as [`GatewayDoc::entry`] and [`prompt_of`] report it.
fn found_prompts(
    found: Found<'_>,
    selection: Selection<'_>,
    entry: &GatewayEntry,
    contributions: &mut Vec<Contribution>,
    skipped: &mut Vec<Skipped>,
) {
    let file = selection.file;
    let layer = file.layer();
    // The entry's path: the bot, then the chat for `allowlist.json`.
    let mut steps = [selection.bot, ""];
    let mut depth = 1;
    if file == GatewayFile::Allowlist {
        match found.bot {
            None => return,
            Some(Kind::Object) => {}
            Some(kind) => {
                let error = GatewayError::NotObject {
                    key: gateway_pointer(file, &steps[..depth], ""),
                    found: kind.name(),
                    expected: entry_expectation(file, true),
                };
                return wrong_entry(skipped, layer, error);
            }
        }
        match selection.chat {
            Some(chat) => {
                steps[1] = chat;
                depth = 2;
            }
            None => return,
        }
    }
    let entry_path = &steps[..depth];
    match found.entry {
        None => return,
        Some(Kind::Object) => {}
        Some(kind) => {
            let error = GatewayError::NotObject {
                key: gateway_pointer(file, entry_path, ""),
                found: kind.name(),
                expected: entry_expectation(file, false),
            };
            return wrong_entry(skipped, layer, error);
        }
    }
    match found.prompts {
        None => return,
        Some(Kind::Object) => {}
        Some(kind) => {
            return skip(
                skipped,
                None,
                layer,
                gateway_pointer(file, entry_path, "/prompts"),
                format!(
                    "is {}, not an object of block names to strings",
                    kind.name()
                ),
            );
        }
    }
    let mut keys = found.keys;
    // Read in the fixed block order, not the JSON's key order, so the
    // contribution list is deterministic.
    for block in Block::EDITABLE {
        let Some(at) = keys.iter().position(|(k, _)| k == block.wire_name()) else {
            continue;
        };
        let (_, value) = keys.swap_remove(at);
        let source = Source::Gateway(entry.key(block));
        match value.text {
            Some(text) if too_large(&text) => {
                skip(skipped, Some(block), layer, source, too_large_reason(&text));
            }
            Some(text) => contributions.push(Contribution {
                block,
                provenance: std::sync::Arc::new(Provenance::new(layer, Origin::Gateway, source)),
                text: text.into_owned(),
                interop: false,
                imports: crate::Imports::default(),
                level: 0,
            }),
            None => skip(
                skipped,
                Some(block),
                layer,
                source,
                format!("is {}, not a string", value.kind.name()),
            ),
        }
    }
    // The rest in key order, as an object of the parsed file lists them.
    keys.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    for (key, _) in keys {
        let reason = match key.parse::<Block>() {
            Ok(Block::AgentInstructions) => "cannot be set by a gateway entry: `agent-instructions` is made from an agent role's `identity.md` and `operating-rules.md` (in `.vak/prompts/agents/<role>/`); put the text there, or use this entry's `identity`/`operating-rules`".to_owned(),
            Ok(block) if block.owner() == Owner::Code => format!(
                "names `{block}`, which the runtime writes; no layer may set it (editable: identity, operating-rules, guardrails, surface-note)"
            ),
            Ok(block) => format!(
                "names `{block}`, which no gateway entry may set (editable: identity, operating-rules, guardrails, surface-note)"
            ),
            Err(_) => "is not a block name (expected identity, operating-rules, guardrails or surface-note)".to_owned(),
        };
        skip(
            skipped,
            None,
            layer,
            gateway_pointer(file, entry_path, &format!("/prompts/{}", Escaped(&key))),
            reason,
        );
    }
}

/// Report an entry that is there but not an object.
fn wrong_entry(skipped: &mut Vec<Skipped>, layer: PromptLayer, error: GatewayError) {
    if let GatewayError::NotObject {
        key,
        found,
        expected,
    } = &error
    {
        skip(
            skipped,
            None,
            layer,
            key.clone(),
            format!("is {found}, not an object{expected}; it is not used"),
        );
    } else {
        skip(
            skipped,
            None,
            layer,
            Source::File(Utf8PathBuf::new()),
            error.to_string(),
        );
    }
}

/// Append the bot and chat tiers' contributions.
/// One gateway file as a [`Snapshot`] read it: its bytes (or why they
/// were refused, as a `Skipped` says it), and its index once
/// [`indexed`] built one, so later chains of the snapshot neither read the
/// file again nor compare it with the indexed text.
pub(crate) struct GatewayText {
    read: Result<Option<Arc<[u8]>>, String>,
    index: Option<Arc<GatewayIndex>>,
}

pub(crate) fn load_gateway(
    home: &Utf8Path,
    snap: &mut Snapshot,
    bot: Option<&Name>,
    chat: Option<&Name>,
    contributions: &mut Vec<Contribution>,
    skipped: &mut Vec<Skipped>,
) {
    let Some(bot) = bot else { return };
    let tiers = [
        Selection {
            file: GatewayFile::Bots,
            bot: bot.as_str(),
            chat: None,
        },
        Selection {
            file: GatewayFile::Allowlist,
            bot: bot.as_str(),
            chat: chat.map(Name::as_str),
        },
    ];
    for selection in tiers {
        if selection.file == GatewayFile::Allowlist && selection.chat.is_none() {
            return;
        }
        if !snap.gateway.contains_key(&selection.file) {
            // The gateway files share the home's opened directories; a home
            // that cannot be resolved is reported by the read itself.
            let dirs = snap.root(home, false).ok().flatten();
            let read = read_bytes_for_chain(home, dirs, selection.file)
                .map(|bytes| bytes.map(Arc::from))
                .map_err(|error| file_reason(&error));
            snap.gateway
                .insert(selection.file, GatewayText { read, index: None });
        }
        let Some(text) = snap.gateway.get_mut(&selection.file) else {
            continue;
        };
        let bytes = match &text.read {
            Ok(Some(bytes)) => Arc::clone(bytes),
            Ok(None) => continue,
            Err(reason) => {
                let source = Source::File(selection.file.path(home));
                skip(
                    skipped,
                    None,
                    selection.file.layer(),
                    source,
                    reason.clone(),
                );
                continue;
            }
        };
        if text.index.is_none() {
            text.index = snap.indexes.indexed(selection.file, &bytes);
        }
        let index = text.index.clone();
        let found = match &index {
            Some(index) => Some(index.found(selection)),
            None => read_for_chain(home, &bytes, selection, skipped),
        };
        if let Some(found) = found {
            // The selection's names, typed, for the keys' sources.
            let entry = GatewayEntry {
                bot: bot.clone(),
                chat: selection.chat.and(chat.cloned()),
            };
            found_prompts(found, selection, &entry, contributions, skipped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(gateway_dir(&path)).unwrap();
        (dir, path)
    }

    fn load(home: &Utf8Path, chat: bool) -> (Vec<Contribution>, Vec<Skipped>) {
        let bot = Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").unwrap();
        let chat_name = Name::new(vak_prompt_blocks::NameKind::Chat, "ops").unwrap();
        let (mut c, mut s) = (Vec::new(), Vec::new());
        load_gateway(
            home,
            &mut Snapshot::new(),
            Some(&bot),
            chat.then_some(&chat_name),
            &mut c,
            &mut s,
        );
        (c, s)
    }

    /// The chain's gateway reading as it was before the walk: the file
    /// parsed into a `Value`, then looked up. The walk must answer the same.
    mod before {
        use super::super::*;
        use serde_json::Value;

        /// The reference built its sources as strings; the typed source
        /// they render from, for comparing.
        fn wire(layer: PromptLayer, source: String) -> Source {
            Source::from_wire(layer.wire_name(), "identity", &source)
        }

        fn read_for_chain(
            home: &Utf8Path,
            dirs: Option<&mut OpenedDirs>,
            file: GatewayFile,
            skipped: &mut Vec<Skipped>,
        ) -> Option<GatewayDoc> {
            let read = match dirs {
                Some(dirs) => read_gateway_in(dirs, home, file),
                None => read_gateway(home, file),
            };
            match read {
                Ok(doc) => doc,
                Err(error) => {
                    let source = match &error {
                        GatewayError::NotObject { key, .. } => key.clone(),
                        _ => Source::File(file.path(home)),
                    };
                    skip(skipped, None, file.layer(), source, file_reason(&error));
                    None
                }
            }
        }

        /// Contributions from one entry's `prompts` object. `key_prefix` is the
        /// source key of the entry, e.g. `bots.json#/helpdesk`.
        fn entry_prompts(
            entry: &Value,
            key_prefix: &str,
            layer: PromptLayer,
            contributions: &mut Vec<Contribution>,
            skipped: &mut Vec<Skipped>,
        ) {
            let Some(prompts) = entry.get("prompts") else {
                return;
            };
            let Some(prompts) = prompts.as_object() else {
                skip(
                    skipped,
                    None,
                    layer,
                    wire(layer, format!("{key_prefix}/prompts")),
                    format!(
                        "is {}, not an object of block names to strings",
                        json_kind(prompts)
                    ),
                );
                return;
            };
            // Read in the fixed block order, not the JSON's key order, so the
            // contribution list is deterministic.
            for block in Block::EDITABLE {
                let Some(value) = prompts.get(block.wire_name()) else {
                    continue;
                };
                let source = wire(layer, format!("{key_prefix}/prompts/{block}"));
                match value.as_str() {
                    Some(text) if too_large(text) => {
                        skip(skipped, Some(block), layer, source, too_large_reason(text));
                    }
                    Some(text) => contributions.push(Contribution {
                        block,
                        provenance: std::sync::Arc::new(Provenance::new(
                            layer,
                            Origin::Gateway,
                            source,
                        )),
                        text: text.to_owned(),
                        interop: false,
                        imports: crate::Imports::default(),
                        level: 0,
                    }),
                    None => skip(
                        skipped,
                        Some(block),
                        layer,
                        source,
                        format!("is {}, not a string", json_kind(value)),
                    ),
                }
            }
            for key in prompts.keys() {
                if Block::EDITABLE.iter().any(|b| b.wire_name() == key) {
                    continue;
                }
                let reason = match key.parse::<Block>() {
                    Ok(Block::AgentInstructions) => "cannot be set by a gateway entry: `agent-instructions` is made from an agent role's `identity.md` and `operating-rules.md` (in `.vak/prompts/agents/<role>/`); put the text there, or use this entry's `identity`/`operating-rules`".to_owned(),
                    Ok(block) if block.owner() == Owner::Code => format!(
                        "names `{block}`, which the runtime writes; no layer may set it (editable: identity, operating-rules, guardrails, surface-note)"
                    ),
                    Ok(block) => format!(
                        "names `{block}`, which no gateway entry may set (editable: identity, operating-rules, guardrails, surface-note)"
                    ),
                    Err(_) => "is not a block name (expected identity, operating-rules, guardrails or surface-note)".to_owned(),
                };
                skip(
                    skipped,
                    None,
                    layer,
                    wire(layer, format!("{key_prefix}/prompts/{}", Escaped(key))),
                    reason,
                );
            }
        }

        /// Report an entry that is there but not an object.
        fn wrong_entry(skipped: &mut Vec<Skipped>, layer: PromptLayer, error: GatewayError) {
            if let GatewayError::NotObject {
                key,
                found,
                expected,
            } = &error
            {
                skip(
                    skipped,
                    None,
                    layer,
                    key.clone(),
                    format!("is {found}, not an object{expected}; it is not used"),
                );
            } else {
                skip(
                    skipped,
                    None,
                    layer,
                    Source::File(Utf8PathBuf::new()),
                    error.to_string(),
                );
            }
        }

        /// Append the bot and chat tiers' contributions.
        pub(super) fn load_gateway(
            home: &Utf8Path,
            mut dirs: Option<&mut OpenedDirs>,
            bot: Option<&Name>,
            chat: Option<&Name>,
            contributions: &mut Vec<Contribution>,
            skipped: &mut Vec<Skipped>,
        ) {
            let Some(bot) = bot else { return };
            if let Some(doc) = read_for_chain(home, dirs.as_deref_mut(), GatewayFile::Bots, skipped)
            {
                let path = [bot.as_str()];
                match doc.entry(&path) {
                    Ok(Some(entry)) => entry_prompts(
                        entry,
                        &entry_key(GatewayFile::Bots, &path),
                        PromptLayer::Bot,
                        contributions,
                        skipped,
                    ),
                    Ok(None) => {}
                    Err(error) => wrong_entry(skipped, PromptLayer::Bot, error),
                }
            }
            let Some(chat) = chat else { return };
            if let Some(doc) = read_for_chain(home, dirs, GatewayFile::Allowlist, skipped) {
                let path = [bot.as_str(), chat.as_str()];
                match doc.entry(&path) {
                    Ok(Some(entry)) => entry_prompts(
                        entry,
                        &entry_key(GatewayFile::Allowlist, &path),
                        PromptLayer::Chat,
                        contributions,
                        skipped,
                    ),
                    Ok(None) => {}
                    Err(error) => wrong_entry(skipped, PromptLayer::Chat, error),
                }
            }
        }
    }

    #[test]
    fn the_walk_answers_as_the_parsed_value_did() {
        let bots = [
            r#"{"helpdesk": {"prompts": {"identity": "bot identity", "operating-rules": "r", "guardrails": "- g", "surface-note": "n"}}}"#,
            r#"{"helpdesk": {"display_name": "Help", "prompts": {"identity": "esc\u00e9\n\"q\"", "zeta": 1, "alpha": "x", "safety-floor": "s", "agent-instructions": "a", "guardrails": 3, "surface-note": null, "odd\u001bkey": "k"}}, "other": {"prompts": 5}}"#,
            r#"{"helpdesk": {"prompts": {"identity": "first", "identity": "second"}}}"#,
            r#"{"a": [{"x": 1, "x": 2}], "helpdesk": {"prompts": {"identity": "i"}}, "a": 1}"#,
            r#"{"helpdesk": {"prompts": {"identity": {"k": 1, "k": 2}}, "prompts": 1}}"#,
            r#"{"helpdesk": "be nice"}"#,
            r#"{"helpdesk": {"prompts": ["identity"]}}"#,
            r#"{"helpdesk": {"prompts": {}}}"#,
            r#"{"other": {}}"#,
            r#"["helpdesk"]"#,
            r#""text""#,
            r#"{"helpdesk": {"prompts": {"identity": "i",}}}"#,
            r#"{"helpdesk": 1} trailing"#,
            r#"{"helpdesk": {"prompts": {"identity": 1e999}}}"#,
            r#"{"helpdesk": {"prompts": {"identity": "i"}}, "\u0068elpdesk": {}}"#,
            "{\"helpdesk\": {\"prompts\": {\"identity\": \"bad \u{1}\"}}}",
            "",
        ];
        let allow = [
            r#"{"helpdesk": {"ops": {"prompts": {"identity": "chat", "guardrails": "- g"}}}}"#,
            r#"{"helpdesk": {"ops": ["x"]}}"#,
            r#"{"helpdesk": ["ops"]}"#,
            r#"{"helpdesk": {"ops": {"prompts": {"identity": 1}}, "ops2": {"a": 1, "a": 1}}}"#,
            r#"{"helpdesk": {"other": {}}}"#,
            r#"[{"a": 1}, {"b": 2, "b": 3}]"#,
            r#"{"other": {"ops": {"prompts": "x"}}}"#,
        ];
        let (_keep, home) = home();
        let bot = Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").unwrap();
        let chat = Name::new(vak_prompt_blocks::NameKind::Chat, "ops").unwrap();
        let mut cases = 0;
        for bots_text in bots
            .iter()
            .map(|t| Some(t.as_bytes()))
            .chain([None, Some(&b"{\"helpdesk\": \"\xff\"}"[..])])
        {
            for allow_text in allow.iter().map(|t| Some(*t)).chain([None]) {
                match bots_text {
                    Some(text) => std::fs::write(GatewayFile::Bots.path(&home), text).unwrap(),
                    None => {
                        let _ = std::fs::remove_file(GatewayFile::Bots.path(&home));
                    }
                }
                match allow_text {
                    Some(text) => std::fs::write(GatewayFile::Allowlist.path(&home), text).unwrap(),
                    None => {
                        let _ = std::fs::remove_file(GatewayFile::Allowlist.path(&home));
                    }
                }
                for with_chat in [false, true] {
                    for with_dirs in [false, true] {
                        let run = |walk: bool| {
                            let mut dirs = OpenedDirs::open(&home).unwrap().unwrap();
                            let dirs = with_dirs.then_some(&mut dirs);
                            let (mut c, mut s) = (Vec::new(), Vec::new());
                            let chat = with_chat.then_some(&chat);
                            if walk {
                                let snap = &mut Snapshot::new();
                                load_gateway(&home, snap, Some(&bot), chat, &mut c, &mut s);
                            } else {
                                before::load_gateway(&home, dirs, Some(&bot), chat, &mut c, &mut s);
                            }
                            (c, s)
                        };
                        let (walked, parsed) = (run(true), run(false));
                        assert_eq!(walked, parsed, "{bots_text:?} {allow_text:?} {with_chat}");
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 100);
    }

    #[test]
    fn the_walk_finds_duplicates_among_many_keys_as_the_parsed_value_did() {
        // Objects past the keys compared one by one: a duplicate of a key
        // kept on the stack, of one kept in the set, or none, at every depth
        // of the walk.
        let (_keep, home) = home();
        let bot = Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").unwrap();
        let chat = Name::new(vak_prompt_blocks::NameKind::Chat, "ops").unwrap();
        let object = |n: usize, dup: Option<(usize, usize)>, inner: &str| {
            let mut keys: Vec<String> = (0..n).map(|i| format!("k{i:02}")).collect();
            if let Some((of, at)) = dup.filter(|(of, at)| of < at && *at < n) {
                keys[at] = keys[of].clone();
            }
            let mut text = String::from("{");
            for (i, key) in keys.iter().enumerate() {
                text.push_str(&format!("\"{key}\": \"v{i}\", "));
            }
            text.push_str(inner);
            text.push('}');
            text
        };
        let mut cases = 0;
        for n in [0, 1, 7, 8, 9, 12, 20] {
            for dup in [
                None,
                Some((0, 3)),
                Some((2, 7)),
                Some((1, 8)),
                Some((3, 11)),
                Some((9, 15)),
                Some((10, 19)),
            ] {
                let prompts = object(n, dup, r#""identity": "i", "guardrails": "- g""#);
                let entry = object(n, dup, &format!(r#""prompts": {prompts}"#));
                let plain_prompts = r#"{"identity": "i"}"#;
                let plain_entry = format!(r#"{{"prompts": {plain_prompts}}}"#);
                let bots = [
                    format!(r#"{{"helpdesk": {{"prompts": {prompts}}}}}"#),
                    format!(r#"{{"helpdesk": {entry}}}"#),
                    object(n, dup, &format!(r#""helpdesk": {plain_entry}"#)),
                    object(
                        n,
                        dup,
                        &format!(r#""other": {prompts}, "helpdesk": {plain_entry}"#),
                    ),
                ];
                let allow = [
                    format!(r#"{{"helpdesk": {{"ops": {entry}}}}}"#),
                    format!(
                        r#"{{"helpdesk": {}}}"#,
                        object(n, dup, &format!(r#""ops": {plain_entry}"#))
                    ),
                ];
                for (bots_text, allow_text) in bots.iter().zip(allow.iter().cycle()) {
                    std::fs::write(GatewayFile::Bots.path(&home), bots_text).unwrap();
                    std::fs::write(GatewayFile::Allowlist.path(&home), allow_text).unwrap();
                    let run = |walk: bool| {
                        let mut dirs = OpenedDirs::open(&home).unwrap().unwrap();
                        let (mut c, mut s) = (Vec::new(), Vec::new());
                        if walk {
                            let snap = &mut Snapshot::new();
                            load_gateway(&home, snap, Some(&bot), Some(&chat), &mut c, &mut s);
                        } else {
                            before::load_gateway(
                                &home,
                                Some(&mut dirs),
                                Some(&bot),
                                Some(&chat),
                                &mut c,
                                &mut s,
                            );
                        }
                        (c, s)
                    };
                    assert_eq!(run(true), run(false), "{bots_text} {allow_text}");
                    cases += 1;
                }
            }
        }
        assert!(cases > 100, "{cases}");
    }

    /// What one chain takes from `found`: its contributions and skips.
    fn taken(found: Found<'_>, selection: Selection<'_>) -> (Vec<Contribution>, Vec<Skipped>) {
        let (mut c, mut s) = (Vec::new(), Vec::new());
        let entry = GatewayEntry {
            bot: Name::new(vak_prompt_blocks::NameKind::Bot, selection.bot).unwrap(),
            chat: selection
                .chat
                .map(|c| Name::new(vak_prompt_blocks::NameKind::Chat, c).unwrap()),
        };
        found_prompts(found, selection, &entry, &mut c, &mut s);
        (c, s)
    }

    #[test]
    fn the_index_answers_every_entry_as_the_walk_does() {
        let many_chats = (0..40)
            .map(|i| {
                format!(r#""c{i}": {{"prompts": {{"guardrails": "- chat {i}", "identity": {i}}}}}"#)
            })
            .collect::<Vec<_>>()
            .join(", ");
        let allow = [
            r#"{"helpdesk": {"ops": {"prompts": {"identity": "chat", "guardrails": "- g"}}, "dev": {"prompts": {"surface-note": "n", "zeta": "z"}}}, "other": {"ops": {"prompts": {"identity": "other's"}}}}"#.to_owned(),
            r#"{"helpdesk": {"ops": ["x"], "dev": {"prompts": 1}, "qa": "y", "ux": {}}, "other": ["ops"], "third": 3}"#.to_owned(),
            r#"{"helpdesk": {"ops": {"prompts": {"identity": "esc\u00e9\n\"q\"", "odd\u001bkey": "k", "agent-instructions": "a"}}}}"#.to_owned(),
            format!(r#"{{"helpdesk": {{{many_chats}}}, "other": {{{many_chats}}}}}"#),
        ];
        let bots = [
            r#"{"helpdesk": {"prompts": {"identity": "bot", "guardrails": "- g"}}, "other": {"prompts": 5}, "third": "x", "fourth": {}}"#,
            r#"{"helpdesk": {"display_name": "Help", "prompts": {"identity": null, "safety-floor": "s"}}}"#,
        ];
        // Only valid names: a chain selects its bot and chat by `Name`.
        let names = ["helpdesk", "other", "third", "fourth", "missing"];
        let chats = ["ops", "dev", "qa", "ux", "c0", "c39", "missing"];
        let mut cases = 0;
        for (file, texts) in [
            (GatewayFile::Allowlist, allow.to_vec()),
            (GatewayFile::Bots, bots.map(str::to_owned).to_vec()),
        ] {
            for text in &texts {
                let index = index_gateway(text, file).expect("a valid file is indexed");
                for bot in names {
                    for chat in chats.iter().map(|c| Some(*c)).chain([None]) {
                        let selection = Selection { file, bot, chat };
                        let walked = walk_gateway(text, selection, &|| "f".into()).unwrap();
                        assert_eq!(
                            taken(index.found(selection), selection),
                            taken(walked, selection),
                            "{file:?} {text} {bot} {chat:?}"
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 200);
        // A file the walk refuses is not indexed: the walk reports why.
        for refused in [
            r#"{"helpdesk": {}, "helpdesk": {}}"#,
            r#"{"helpdesk": {"ops": {"prompts": {"identity": "a", "identity": "b"}}}}"#,
            r#"{"helpdesk": {"ops": {}}"#,
            r#"["helpdesk"]"#,
            "",
        ] {
            assert!(
                index_gateway(refused, GatewayFile::Allowlist).is_none(),
                "{refused}"
            );
        }
    }

    #[test]
    fn gateway_entry_listed_answers_as_the_parsed_document_does() {
        let (_keep, home) = home();
        let texts: [&[u8]; 12] = [
            br#"{"helpdesk": {"ops": {"prompts": {}}, "dev": 3}, "other": ["ops"], "third": {}}"#,
            br#"{"helpdesk": {"prompts": {"identity": "i"}}, "x": "y"}"#,
            br#"{"helpdesk": "be nice", "ops": {"ops": {}}}"#,
            br#"{"helpdesk": {"ops": {}}, "helpdesk": {}}"#,
            br#"{"helpdesk": {"ops": {}}"#,
            br#"["helpdesk"]"#,
            br#"{}"#,
            b"{\"helpdesk\": \"\xff\"}",
            br#"{"\u0068elpdesk": {"\u006fps": {}}}"#,
            br#"{"helpdesk": null}"#,
            br#"{"helpdesk": {"ops": null}}"#,
            b"",
        ];
        // Long enough to be indexed when read often.
        let filler: String = (0..600)
            .map(|i| format!(r#", "filler{i}": {{"ops": {{"prompts": {{}}}}}}"#))
            .collect();
        let long = [
            format!(r#"{{"helpdesk": {{"ops": {{}}, "dev": 3}}, "other": ["ops"]{filler}}}"#),
            format!(r#"{{"helpdesk": "be nice", "third": {{}}{filler}}}"#),
        ];
        assert!(long.iter().all(|t| t.len() >= INDEXED_GATEWAY_BYTES));
        let mut cases = 0;
        for text in texts.into_iter().chain(long.iter().map(|t| t.as_bytes())) {
            for file in [GatewayFile::Bots, GatewayFile::Allowlist] {
                std::fs::write(file.path(&home), text).unwrap();
                for bot in ["helpdesk", "other", "third", "missing"] {
                    let chats: &[Option<&str>] = match file {
                        GatewayFile::Bots => &[None],
                        GatewayFile::Allowlist => &[Some("ops"), Some("dev"), Some("missing")],
                    };
                    for chat in chats {
                        let path: Vec<&str> = [Some(bot), *chat].into_iter().flatten().collect();
                        let parsed = match read_gateway(&home, file) {
                            Ok(Some(doc)) => doc.entry(&path).map(|e| e.is_some()),
                            Ok(None) => Ok(false),
                            Err(e) => Err(e),
                        }
                        .map_err(|e| e.to_string());
                        // Walked, then from the index a long text gets
                        // when read often.
                        let indexes = GatewayIndexes::default();
                        for _ in 0..=WALKS_BEFORE_INDEX {
                            let walked = gateway_entry_listed(&home, file, bot, *chat, &indexes);
                            assert_eq!(
                                walked.map_err(|e| e.to_string()),
                                parsed,
                                "{file:?} {} {bot} {chat:?}",
                                String::from_utf8_lossy(text)
                            );
                        }
                        assert_eq!(
                            gateway_lists(&home, file, bot, *chat),
                            parsed.unwrap_or(true)
                        );
                        cases += 1;
                    }
                }
            }
            std::fs::remove_file(GatewayFile::Bots.path(&home)).unwrap();
            assert!(!gateway_lists(&home, GatewayFile::Bots, "helpdesk", None));
        }
        assert!(cases > 150);
    }

    /// A gateway file that is a symlink out of the home, a FIFO or over
    /// the size limit is an error for the admission (never "not listed",
    /// never a hang), and counts as listed for the CLI's warning.
    #[test]
    fn a_hostile_gateway_file_is_an_error_not_an_answer() {
        let (_keep, home) = home();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("allowlist.json");
        std::fs::write(&target, r#"{"helpdesk": {"ops": {}}}"#).unwrap();
        let path = GatewayFile::Allowlist.path(&home);
        let listed = || {
            gateway_entry_listed(
                &home,
                GatewayFile::Allowlist,
                "helpdesk",
                Some("ops"),
                &GatewayIndexes::default(),
            )
        };
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(listed(), Err(GatewayError::Unreadable { .. })));
        std::fs::remove_file(&path).unwrap();
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&path)
                .status()
                .unwrap()
                .success()
        );
        assert!(matches!(listed(), Err(GatewayError::Unreadable { .. })));
        assert!(gateway_lists(
            &home,
            GatewayFile::Allowlist,
            "helpdesk",
            Some("ops")
        ));
        std::fs::remove_file(&path).unwrap();
        let big = format!(
            r#"{{"helpdesk": {{"ops": {{}}}}, "pad": "{}"}}"#,
            "x".repeat(MAX_GATEWAY_BYTES as usize)
        );
        std::fs::write(&path, big).unwrap();
        assert!(matches!(listed(), Err(GatewayError::Unreadable { .. })));
    }

    mod index_property {
        use super::super::*;
        use super::taken;
        use proptest::prelude::*;

        /// A JSON value of any kind, objects keyed from a small set of
        /// names (so bots, chats and `prompts` keys collide and repeat).
        fn value() -> impl Strategy<Value = serde_json::Value> {
            use serde_json::Value;
            let key = prop::sample::select(vec![
                "helpdesk",
                "ops",
                "dev",
                "prompts",
                "identity",
                "guardrails",
                "surface-note",
                "zeta",
            ]);
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i32>().prop_map(Value::from),
                "[a-z \\-\n\u{e9}]{0,12}".prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 48, 6, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                    prop::collection::btree_map(key.clone(), inner, 0..5).prop_map(|m| {
                        Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                    }),
                ]
            })
        }

        proptest! {
            /// Every entry the index answers for, it answers as the walk
            /// for that one entry does; a text the walk refuses is not
            /// indexed.
            #[test]
            fn the_index_answers_as_the_walk(doc in value()) {
                let text = doc.to_string();
                for file in [GatewayFile::Bots, GatewayFile::Allowlist] {
                    let index = index_gateway(&text, file);
                    for bot in ["helpdesk", "ops", "missing"] {
                        for chat in [Some("ops"), Some("dev"), Some("missing"), None] {
                            let selection = Selection { file, bot, chat };
                            match (walk_gateway(&text, selection, &|| "f".into()), &index) {
                                (Ok(walked), Some(index)) => prop_assert_eq!(
                                    taken(index.found(selection), selection),
                                    taken(walked, selection)
                                ),
                                (Err(_), None) => {}
                                (walked, index) => prop_assert!(
                                    false,
                                    "walk ok: {}, indexed: {}",
                                    walked.is_ok(),
                                    index.is_some()
                                ),
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_long_gateway_text_is_indexed_when_read_often_and_an_edit_is_seen() {
        let (_keep, home) = home();
        let bot = Name::new(vak_prompt_blocks::NameKind::Bot, "helpdesk").unwrap();
        let chat_of =
            |i: usize| Name::new(vak_prompt_blocks::NameKind::Chat, &format!("c{i}")).unwrap();
        let text = |guardrail: &str| {
            let chats = (0..600)
                .map(|i| format!(r#""c{i}": {{"prompts": {{"guardrails": "- {guardrail} {i}"}}}}"#))
                .collect::<Vec<_>>()
                .join(", ");
            format!(r#"{{"helpdesk": {{{chats}}}}}"#)
        };
        // One owner's memory, shared by every snapshot it opens, as the
        // gateway's prompt cache shares its own.
        let indexes = GatewayIndexes::default();
        let load = |i: usize| {
            let (mut c, mut s) = (Vec::new(), Vec::new());
            load_gateway(
                &home,
                &mut Snapshot::once_sharing(&indexes),
                Some(&bot),
                Some(&chat_of(i)),
                &mut c,
                &mut s,
            );
            assert!(s.is_empty(), "{s:?}");
            c.into_iter().map(|c| c.text).collect::<Vec<_>>()
        };
        let path = GatewayFile::Allowlist.path(&home);
        let first = text("never");
        assert!(first.len() >= INDEXED_GATEWAY_BYTES);
        std::fs::write(&path, &first).unwrap();
        let bytes = first.as_bytes();
        for read in 1..=WALKS_BEFORE_INDEX {
            assert!(
                indexes.indexed(GatewayFile::Allowlist, bytes).is_none(),
                "read {read} times: walked"
            );
        }
        assert!(
            indexes.indexed(GatewayFile::Allowlist, bytes).is_some(),
            "read more often: indexed"
        );
        for i in [0, 1, 599] {
            assert_eq!(load(i), [format!("- never {i}")]);
        }
        // The same length, one byte different: never the stale index.
        let edited = text("nevex");
        assert_eq!(edited.len(), first.len());
        std::fs::write(&path, &edited).unwrap();
        for i in [0, 7, 599, 5] {
            assert_eq!(load(i), [format!("- nevex {i}")]);
        }
        std::fs::write(&path, &first).unwrap();
        assert_eq!(load(3), ["- never 3"]);
        // A long file that is refused is reported on every read, never
        // answered from an index.
        let mut broken = first.into_bytes();
        broken[10] = 0xff;
        std::fs::write(&path, &broken).unwrap();
        for _ in 0..3 {
            let (mut c, mut s) = (Vec::new(), Vec::new());
            let snap = &mut Snapshot::new();
            load_gateway(&home, snap, Some(&bot), Some(&chat_of(0)), &mut c, &mut s);
            assert!(c.is_empty() && s.len() == 1, "{c:?} {s:?}");
        }
    }

    #[test]
    fn a_duplicate_key_refuses_the_file_and_names_the_key() {
        let (_keep, home) = home();
        std::fs::write(
            GatewayFile::Bots.path(&home),
            r#"{"helpdesk": {"prompts": {"identity": "first", "identity": "second"}}}"#,
        )
        .unwrap();
        let (c, s) = load(&home, false);
        assert!(c.is_empty(), "{c:?}");
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].reason
                .contains("`#/helpdesk/prompts/identity` more than once"),
            "{}",
            s[0]
        );
    }

    #[test]
    fn wrong_types_are_reported_with_file_and_key() {
        let (_keep, home) = home();
        std::fs::write(GatewayFile::Bots.path(&home), r#"{"helpdesk": "be nice"}"#).unwrap();
        std::fs::write(
            GatewayFile::Allowlist.path(&home),
            r#"{"helpdesk": {"ops": ["x"]}}"#,
        )
        .unwrap();
        let (_, s) = load(&home, true);
        let text: Vec<String> = s.iter().map(ToString::to_string).collect();
        assert!(
            text[0].contains("`bots.json#/helpdesk` is a string, not an object"),
            "{text:?}"
        );
        assert!(
            text[1].contains("`allowlist.json#/helpdesk/ops` is an array, not an object"),
            "{text:?}"
        );
    }

    #[test]
    fn agent_instructions_key_gets_its_own_message() {
        let (_keep, home) = home();
        std::fs::write(
            GatewayFile::Bots.path(&home),
            r#"{"helpdesk": {"prompts": {"agent-instructions": "x"}}}"#,
        )
        .unwrap();
        let (_, s) = load(&home, false);
        assert!(s[0].reason.contains("agents/<role>"), "{}", s[0]);
        assert!(!s[0].reason.contains("code-owned"), "{}", s[0]);
    }

    /// A text over the per-file bound is refused by its key, as a file over
    /// it is: skipped, named, not in the prompt; one at the bound is used.
    #[test]
    fn a_text_over_the_file_bound_is_skipped_by_its_key() {
        let (_keep, home) = home();
        let at_bound = "a".repeat(MAX_FILE_BYTES as usize);
        let over = "b".repeat(MAX_FILE_BYTES as usize + 1);
        std::fs::write(
            GatewayFile::Bots.path(&home),
            serde_json::json!({"helpdesk": {"prompts": {"identity": over, "guardrails": at_bound}}})
                .to_string(),
        )
        .unwrap();
        std::fs::write(
            GatewayFile::Allowlist.path(&home),
            serde_json::json!({"helpdesk": {"ops": {"prompts": {"surface-note": over}}}})
                .to_string(),
        )
        .unwrap();
        let (c, s) = load(&home, true);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].block, Block::Guardrails);
        let text: Vec<String> = s.iter().map(ToString::to_string).collect();
        assert_eq!(s.len(), 2, "{text:?}");
        for (skipped, key) in s.iter().zip([
            "bots.json#/helpdesk/prompts/identity",
            "allowlist.json#/helpdesk/ops/prompts/surface-note",
        ]) {
            let said = skipped.to_string();
            assert!(said.contains(key), "{said}");
            assert!(said.contains("larger than 256 KiB"), "{said}");
        }
        // Nor is one written.
        assert!(matches!(
            check_gateway_text("bots.json#/helpdesk/prompts/identity", &over),
            Err(GatewayError::TextTooLarge { .. })
        ));
        assert!(check_gateway_text("bots.json#/helpdesk/prompts/identity", &at_bound).is_ok());
    }

    #[test]
    fn oversized_is_refused_by_size() {
        let (_keep, home) = home();
        let big = format!(r#"{{"helpdesk": {{"x": "{}"}}}}"#, "a".repeat(2 << 20));
        std::fs::write(GatewayFile::Bots.path(&home), big).unwrap();
        let (_, s) = load(&home, false);
        assert!(
            s[0].reason.contains("larger than") || s[0].reason.contains("bytes"),
            "{}",
            s[0]
        );
    }

    #[test]
    fn write_keeps_other_keys_and_checks_the_digest() {
        let (_keep, home) = home();
        let path = GatewayFile::Bots.path(&home);
        std::fs::write(&path, r#"{"helpdesk": {"display_name": "Help"}}"#).unwrap();
        let doc = read_gateway(&home, GatewayFile::Bots).unwrap().unwrap();
        write_gateway_prompt(
            &home,
            GatewayFile::Bots,
            &["helpdesk"],
            Block::Identity,
            Some("hi"),
            &doc.digest,
        )
        .unwrap();
        let doc2 = read_gateway(&home, GatewayFile::Bots).unwrap().unwrap();
        assert_eq!(
            doc2.prompt(&["helpdesk"], Block::Identity).unwrap(),
            Some("hi")
        );
        assert_eq!(doc2.entries["helpdesk"]["display_name"], "Help");
        let stale = write_gateway_prompt(
            &home,
            GatewayFile::Bots,
            &["helpdesk"],
            Block::Identity,
            None,
            &doc.digest,
        );
        assert!(
            matches!(stale, Err(GatewayError::Save(SaveError::Stale { .. }))),
            "{stale:?}"
        );
    }
}
