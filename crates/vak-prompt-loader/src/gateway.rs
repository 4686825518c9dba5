//! The gateway tiers: `bots.json` (bot) and `allowlist.json` (chat). The
//! loader is the one owner of this format, and [`GatewayTable`] is its one
//! reader: a file's text is parsed once into a typed table, and the chain
//! (`load_gateway`), admission ([`gateway_entry_listed`]), the admin API
//! and history ([`read_gateway`]) and a write ([`write_gateway_prompt`],
//! which edits the table) all answer from it, so a fix lands once.
//!
//! Each bot or chat entry may carry a `prompts` object whose keys are block
//! wire names and whose values are strings. A present key decides, an empty
//! string means deliberately nothing, an absent key inherits: the same rule
//! as file presence in a directory layer.
//!
//! Honest about what it does not use: a file over [`MAX_GATEWAY_BYTES`],
//! not valid JSON, or with a key given twice in one object (JSON parsers
//! differ on which wins) is refused whole and reported; an entry of the
//! wrong type (a string or array where an object belongs) is kept as found
//! ([`Shape::Wrong`]) and reported with the file and key when asked for,
//! never ignored silently.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use camino::{Utf8Path, Utf8PathBuf};
use serde::Serialize;
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

/// A value where the reader wanted one shape: that shape, or the value
/// the file holds instead, kept whole, so a write leaves it as it was and
/// a lookup that reaches it names its kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Shape<T> {
    /// The shape wanted.
    Is(T),
    /// Something else (`json_kind` names it).
    Wrong(Value),
}

/// An object's keys, each with its value's [`Shape`], sorted by key (as
/// the parsed file's objects have always been listed and written) and
/// looked up by binary search. A sorted `Vec`, not a `BTreeMap`: a 1 MB
/// `allowlist.json` has thousands of small objects, and a map's node for
/// each was most of a parse's allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Keyed<'t, T>(Vec<(Cow<'t, str>, Shape<T>)>);

impl<T> Default for Keyed<'_, T> {
    fn default() -> Self {
        Keyed(Vec::new())
    }
}

impl<'t, T> Keyed<'t, T> {
    /// No keys.
    pub fn new() -> Self {
        Keyed::default()
    }

    fn at(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Shape<T>> {
        self.at(key).ok().map(|i| &self.0[i].1)
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }

    /// The keys and values, sorted by key.
    pub fn iter(&self) -> std::slice::Iter<'_, (Cow<'t, str>, Shape<T>)> {
        self.0.iter()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `key`, made by `make` when absent.
    fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> Shape<T>) -> &mut Shape<T> {
        let i = match self.at(key) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (Cow::Owned(key.to_owned()), make()));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Set `key` to `value`.
    fn set(&mut self, key: &str, value: Shape<T>) {
        *self.get_or_insert_with(key, || Shape::Wrong(Value::Null)) = value;
    }

    /// Remove `key`.
    fn remove(&mut self, key: &str) {
        if let Ok(i) = self.at(key) {
            self.0.remove(i);
        }
    }
}

impl<'a, 't, T> IntoIterator for &'a Keyed<'t, T> {
    type Item = &'a (Cow<'t, str>, Shape<T>);
    type IntoIter = std::slice::Iter<'a, (Cow<'t, str>, Shape<T>)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// One bot's (`bots.json`) or chat's (`allowlist.json`) entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableEntry<'t> {
    /// `prompts`: absent, block names to texts, or of the wrong type.
    pub prompts: Option<Shape<Keyed<'t, Cow<'t, str>>>>,
    /// Every other key (`name`, `display_name`, …), sorted, kept for a
    /// write.
    pub other: Vec<(Cow<'t, str>, Value)>,
}

/// A gateway file, parsed: what every reader of the format asks. A write
/// serialises it as the `Value` document it replaced did (every object's
/// keys sorted, a wrong value as found).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum GatewayTable<'t> {
    /// `bots.json`: each bot's entry.
    Bots(Keyed<'t, TableEntry<'t>>),
    /// `allowlist.json`: each bot's chats, each chat's entry.
    Allowlist(Keyed<'t, Keyed<'t, TableEntry<'t>>>),
}

/// Where a value sits: the JSON pointer of a duplicate key, spelled only
/// when one is found (spelling every key's pointer was most of a parse).
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

    /// Note `self` as the key given twice, unless one was noted first:
    /// the first found is the one named.
    fn repeated(&self, duplicate: &mut Option<String>) {
        if duplicate.is_none() {
            let mut pointer = String::new();
            self.spell(&mut pointer);
            *duplicate = Some(pointer);
        }
    }
}

/// Where the reader is, and the first key given twice so far. A duplicate
/// does not stop the parse: a syntax error later in the file is what the
/// file is refused for, as a parser that reads it all would say.
struct At<'a, 'p> {
    at: &'p Pointer<'p>,
    duplicate: &'a mut Option<String>,
}

impl At<'_, '_> {
    /// The same state, one key or index deeper.
    fn child<'b>(&'b mut self, at: &'b Pointer<'b>) -> At<'b, 'b> {
        At {
            at,
            duplicate: &mut *self.duplicate,
        }
    }
}

/// Any JSON value, kept as a `Value`, its objects' keys checked for
/// duplicates: what the reader keeps where the format says nothing (an
/// entry's other keys) or where it found the wrong type.
struct Checked<'a, 'p>(At<'a, 'p>);

impl<'de> DeserializeSeed<'de> for Checked<'_, '_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked<'_, '_> {
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
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let at = Pointer::Index(self.0.at, out.len());
            match seq.next_element_seed(Checked(self.0.child(&at)))? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let at = Pointer::Key(self.0.at, &key);
            let value = map.next_value_seed(Checked(self.0.child(&at)))?;
            if out.contains_key(&key) {
                at.repeated(self.0.duplicate);
            } else {
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
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

/// The shape the reader wants at one place of the file, and what it makes
/// of a value of that shape there.
trait Wanted<'de>: Copy {
    /// What a value of this shape becomes.
    type Made;

    /// Read the object at `at`: the shape, or (for a text) the wrong type.
    fn object<A: MapAccess<'de>>(
        self,
        at: &mut At<'_, '_>,
        map: &mut A,
    ) -> Result<Shape<Self::Made>, A::Error>;

    /// A string here: the shape for a prompt text, else given back.
    fn text(self, text: Cow<'de, str>) -> Result<Self::Made, Cow<'de, str>> {
        Err(text)
    }
}

/// The top of a file: bots, keyed by id.
#[derive(Clone, Copy)]
struct Top(GatewayFile);

/// `allowlist.json`'s object of one bot's chats.
#[derive(Clone, Copy)]
struct Chats;

/// A bot's or chat's entry.
#[derive(Clone, Copy)]
struct Entry;

/// An entry's `prompts`.
#[derive(Clone, Copy)]
struct Prompts;

/// One prompt text.
#[derive(Clone, Copy)]
struct Text;

impl<'de> Wanted<'de> for Top {
    type Made = GatewayTable<'de>;
    fn object<A: MapAccess<'de>>(
        self,
        at: &mut At<'_, '_>,
        map: &mut A,
    ) -> Result<Shape<Self::Made>, A::Error> {
        Ok(Shape::Is(match self.0 {
            GatewayFile::Bots => GatewayTable::Bots(keyed(at, map, Entry)?),
            GatewayFile::Allowlist => GatewayTable::Allowlist(keyed(at, map, Chats)?),
        }))
    }
}

impl<'de> Wanted<'de> for Chats {
    type Made = Keyed<'de, TableEntry<'de>>;
    fn object<A: MapAccess<'de>>(
        self,
        at: &mut At<'_, '_>,
        map: &mut A,
    ) -> Result<Shape<Self::Made>, A::Error> {
        keyed(at, map, Entry).map(Shape::Is)
    }
}

impl<'de> Wanted<'de> for Prompts {
    type Made = Keyed<'de, Cow<'de, str>>;
    fn object<A: MapAccess<'de>>(
        self,
        at: &mut At<'_, '_>,
        map: &mut A,
    ) -> Result<Shape<Self::Made>, A::Error> {
        keyed(at, map, Text).map(Shape::Is)
    }
}

impl<'de> Wanted<'de> for Text {
    type Made = Cow<'de, str>;
    fn object<A: MapAccess<'de>>(
        self,
        at: &mut At<'_, '_>,
        map: &mut A,
    ) -> Result<Shape<Self::Made>, A::Error> {
        Checked(at.child(at.at)).visit_map(map).map(Shape::Wrong)
    }
    fn text(self, text: Cow<'de, str>) -> Result<Self::Made, Cow<'de, str>> {
        Ok(text)
    }
}

impl<'de> Wanted<'de> for Entry {
    type Made = TableEntry<'de>;
    fn object<A: MapAccess<'de>>(
        self,
        at: &mut At<'_, '_>,
        map: &mut A,
    ) -> Result<Shape<Self::Made>, A::Error> {
        let mut entry = TableEntry::default();
        let mut seen = SeenKeys::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let here = Pointer::Key(at.at, &key);
            if key == "prompts" {
                let value = map.next_value_seed(Typed {
                    at: at.child(&here),
                    want: Prompts,
                })?;
                if seen.first(key.clone(), &here, at.duplicate) {
                    entry.prompts = Some(value);
                }
            } else {
                let value = map.next_value_seed(Checked(at.child(&here)))?;
                if seen.first(key.clone(), &here, at.duplicate) {
                    entry.other.push((key, value));
                }
            }
        }
        entry.other.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        Ok(Shape::Is(entry))
    }
}

/// The typed reader of one value: the shape `want` names, or the value
/// found instead ([`Shape::Wrong`], read by [`Checked`]).
struct Typed<'a, 'p, W> {
    at: At<'a, 'p>,
    want: W,
}

impl<'de, W: Wanted<'de>> DeserializeSeed<'de> for Typed<'_, '_, W> {
    type Value = Shape<W::Made>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, W: Wanted<'de>> Visitor<'de> for Typed<'_, '_, W> {
    type Value = Shape<W::Made>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Shape::Wrong(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Shape::Wrong(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Shape::Wrong(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // As `Value` keeps it: a float JSON cannot hold is null.
        Ok(Shape::Wrong(
            serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(self.text(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.text(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(self.text(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Shape::Wrong(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Shape::Wrong(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Checked(self.at).visit_seq(seq).map(Shape::Wrong)
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        self.want.object(&mut self.at, &mut map)
    }
}

impl<'de, W: Wanted<'de>> Typed<'_, '_, W> {
    /// A string: a prompt text where one is wanted, else the wrong type.
    fn text(self, text: Cow<'de, str>) -> Shape<W::Made> {
        match self.want.text(text) {
            Ok(made) => Shape::Is(made),
            Err(text) => Shape::Wrong(Value::String(text.into_owned())),
        }
    }
}

/// One object whose every value has the shape `want`, keys checked.
fn keyed<'de, A: MapAccess<'de>, W: Wanted<'de>>(
    at: &mut At<'_, '_>,
    map: &mut A,
    want: W,
) -> Result<Keyed<'de, W::Made>, A::Error> {
    let mut out = Vec::new();
    let mut seen = SeenKeys::default();
    while let Some(key) = map.next_key_seed(KeySeed)? {
        let here = Pointer::Key(at.at, &key);
        let value = map.next_value_seed(Typed {
            at: at.child(&here),
            want,
        })?;
        if seen.first(key.clone(), &here, at.duplicate) {
            out.push((key, value));
        }
    }
    // Keys are unique, so an unstable sort orders them as a map would.
    out.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    Ok(Keyed(out))
}

/// How many keys of one object [`SeenKeys`] compares one by one.
const FEW_KEYS: usize = 8;

/// The keys of one object seen so far: the first [`FEW_KEYS`] kept on the
/// stack and compared one by one (an entry has a handful), the rest in a
/// `HashSet` (std's hasher is randomly keyed, so a file cannot choose keys
/// that collide), so an object with many keys stays linear.
struct SeenKeys<'t> {
    few: [Cow<'t, str>; FEW_KEYS],
    len: usize,
    many: HashSet<Cow<'t, str>>,
}

impl Default for SeenKeys<'_> {
    fn default() -> Self {
        SeenKeys {
            few: [const { Cow::Borrowed("") }; FEW_KEYS],
            len: 0,
            many: HashSet::new(),
        }
    }
}

impl<'t> SeenKeys<'t> {
    fn contains(&self, key: &str) -> bool {
        self.few[..self.len].iter().any(|k| k == key) || self.many.contains(key)
    }

    /// Whether `key` (a copy: borrowed, it is a pointer), at `here`, is
    /// the first of its name in the object (then it is kept), else noted
    /// as given twice.
    fn first(
        &mut self,
        key: Cow<'t, str>,
        here: &Pointer<'_>,
        duplicate: &mut Option<String>,
    ) -> bool {
        if self.contains(&key) {
            here.repeated(duplicate);
            return false;
        }
        self.insert(key);
        true
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

impl<'t> GatewayTable<'t> {
    /// An empty table of `file`'s shape.
    pub fn empty(file: GatewayFile) -> Self {
        match file {
            GatewayFile::Bots => GatewayTable::Bots(Keyed::new()),
            GatewayFile::Allowlist => GatewayTable::Allowlist(Keyed::new()),
        }
    }

    /// Which file's shape this is.
    pub fn file(&self) -> GatewayFile {
        match self {
            GatewayTable::Bots(_) => GatewayFile::Bots,
            GatewayTable::Allowlist(_) => GatewayFile::Allowlist,
        }
    }

    /// Parse `text`, the JSON of `file` under the home `home`, once
    /// (the file's path is spelt only for a refusal): refused whole
    /// when it is not JSON, gives a key twice anywhere (the first found is
    /// named), or is not an object at the top; every entry of the wrong
    /// type is kept, to be reported when asked for. Texts without escapes
    /// are borrowed from `text`.
    ///
    /// # Errors
    ///
    /// [`GatewayError::NotJson`], [`GatewayError::DuplicateKey`],
    /// [`GatewayError::NotObject`].
    pub fn parse(file: GatewayFile, home: &Utf8Path, text: &'t str) -> Result<Self, GatewayError> {
        let mut duplicate = None;
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let top = Typed {
            at: At {
                at: &Pointer::Root,
                duplicate: &mut duplicate,
            },
            want: Top(file),
        }
        .deserialize(&mut deserializer)
        .and_then(|v| deserializer.end().map(|()| v))
        .map_err(|e| GatewayError::NotJson {
            path: file.path(home),
            message: e.to_string(),
        })?;
        if let Some(pointer) = duplicate {
            return Err(GatewayError::DuplicateKey {
                path: file.path(home),
                pointer,
            });
        }
        match top {
            Shape::Is(table) => Ok(table),
            Shape::Wrong(other) => Err(GatewayError::NotObject {
                key: gateway_pointer(file, &[], ""),
                found: json_kind(&other),
                expected: " keyed by bot id",
            }),
        }
    }

    /// The same table, holding its own text (what a holder that outlives
    /// the bytes keeps).
    pub fn into_owned(self) -> GatewayTable<'static> {
        match self {
            GatewayTable::Bots(bots) => GatewayTable::Bots(owned(bots, TableEntry::into_owned)),
            GatewayTable::Allowlist(bots) => {
                GatewayTable::Allowlist(owned(bots, |chats| owned(chats, TableEntry::into_owned)))
            }
        }
    }

    /// The bot ids, sorted.
    pub fn bots(&self) -> impl Iterator<Item = &str> {
        let keys: Box<dyn Iterator<Item = &str>> = match self {
            GatewayTable::Bots(bots) => Box::new(bots.keys()),
            GatewayTable::Allowlist(bots) => Box::new(bots.keys()),
        };
        keys
    }

    /// Whether this table lists `bot` (and, in `allowlist.json`, its
    /// `chat`; with no chat, whether the bot has an object of chats).
    ///
    /// # Errors
    ///
    /// [`GatewayError::NotObject`] for the bot's value or the entry when
    /// either is not an object.
    pub fn listed(&self, bot: &str, chat: Option<&str>) -> Result<bool, GatewayError> {
        match (self, chat) {
            (GatewayTable::Allowlist(bots), None) => Ok(match bots.get(bot) {
                None => false,
                Some(Shape::Is(_)) => true,
                Some(Shape::Wrong(value)) => {
                    return Err(not_object(GatewayFile::Allowlist, &[bot], value, false));
                }
            }),
            _ => self.entry(bot, chat).map(|entry| entry.is_some()),
        }
    }

    /// The entry of `bot` (`bots.json`) or of `bot`'s `chat`
    /// (`allowlist.json`). `Ok(None)` when absent, or when `chat` is not
    /// given for `allowlist.json`.
    ///
    /// # Errors
    ///
    /// [`GatewayError::NotObject`] naming the first value on the way that
    /// is not an object.
    pub fn entry(
        &self,
        bot: &str,
        chat: Option<&str>,
    ) -> Result<Option<&TableEntry<'t>>, GatewayError> {
        let file = self.file();
        match (self, chat) {
            (GatewayTable::Bots(bots), _) => found(bots.get(bot), file, &[bot]),
            (GatewayTable::Allowlist(_), None) => Ok(None),
            (GatewayTable::Allowlist(bots), Some(chat)) => match bots.get(bot) {
                None => Ok(None),
                Some(Shape::Wrong(value)) => Err(not_object(file, &[bot], value, true)),
                Some(Shape::Is(chats)) => found(chats.get(chat), file, &[bot, chat]),
            },
        }
    }

    /// The entry at `entry_path` to edit, created (with the bot's object
    /// of chats) when absent.
    fn entry_mut(&mut self, entry_path: &[&str]) -> Result<&mut TableEntry<'t>, GatewayError> {
        let file = self.file();
        let slot = |depth: usize, value: &Value| {
            not_object(
                file,
                &entry_path[..=depth],
                value,
                depth + 1 < entry_path.len(),
            )
        };
        let entries = match self {
            GatewayTable::Bots(bots) => bots,
            GatewayTable::Allowlist(bots) => {
                let bot = entry_path.first().copied().unwrap_or_default();
                match bots.get_or_insert_with(bot, || Shape::Is(Keyed::new())) {
                    Shape::Is(chats) => chats,
                    Shape::Wrong(value) => return Err(slot(0, value)),
                }
            }
        };
        let depth = entry_path.len().saturating_sub(1);
        let key = entry_path.get(depth).copied().unwrap_or_default();
        match entries.get_or_insert_with(key, || Shape::Is(TableEntry::default())) {
            Shape::Is(entry) => Ok(entry),
            Shape::Wrong(value) => Err(slot(depth, value)),
        }
    }
}

/// The entry in `slot`, the one at `path` of `file`, when it is one.
fn found<'m, 't>(
    slot: Option<&'m Shape<TableEntry<'t>>>,
    file: GatewayFile,
    path: &[&str],
) -> Result<Option<&'m TableEntry<'t>>, GatewayError> {
    match slot {
        None => Ok(None),
        Some(Shape::Is(entry)) => Ok(Some(entry)),
        Some(Shape::Wrong(value)) => Err(not_object(file, path, value, false)),
    }
}

/// A map's keys and values made to hold their own text.
fn owned<T, U>(map: Keyed<'_, T>, value: impl Fn(T) -> U) -> Keyed<'static, U> {
    Keyed(
        map.0
            .into_iter()
            .map(|(key, shape)| {
                let shape = match shape {
                    Shape::Is(inner) => Shape::Is(value(inner)),
                    Shape::Wrong(wrong) => Shape::Wrong(wrong),
                };
                (Cow::Owned(key.into_owned()), shape)
            })
            .collect(),
    )
}

/// A value on the way to an entry, or the entry, that is not an object.
fn not_object(file: GatewayFile, path: &[&str], value: &Value, intermediate: bool) -> GatewayError {
    GatewayError::NotObject {
        key: gateway_pointer(file, path, ""),
        found: json_kind(value),
        expected: entry_expectation(file, intermediate),
    }
}

fn entry_expectation(file: GatewayFile, intermediate: bool) -> &'static str {
    match (file, intermediate) {
        (GatewayFile::Allowlist, true) => " of chat ids to chat entries",
        _ => " (an entry, with an optional `prompts` object of block names to strings)",
    }
}

impl TableEntry<'_> {
    /// The text of `block` in this entry, the one at `entry_path` in
    /// `file`. `Ok(None)` when the key is absent.
    ///
    /// # Errors
    ///
    /// A `prompts` that is not an object, or a value that is not a string.
    pub fn prompt(
        &self,
        block: Block,
        file: GatewayFile,
        entry_path: &[&str],
    ) -> Result<Option<&str>, GatewayError> {
        let prompts = match &self.prompts {
            None => return Ok(None),
            Some(Shape::Is(prompts)) => prompts,
            Some(Shape::Wrong(value)) => {
                return Err(GatewayError::NotObject {
                    key: gateway_pointer(file, entry_path, "/prompts"),
                    found: json_kind(value),
                    expected: " of block names to strings",
                });
            }
        };
        match prompts.get(block.wire_name()) {
            None => Ok(None),
            Some(Shape::Is(text)) => Ok(Some(text)),
            Some(Shape::Wrong(value)) => Err(GatewayError::NotString {
                key: gateway_pointer(file, entry_path, &format!("/prompts/{block}")).to_string(),
                found: json_kind(value),
            }),
        }
    }

    /// Whether `prompts` is an object with at least one key.
    pub fn has_prompts(&self) -> bool {
        matches!(&self.prompts, Some(Shape::Is(prompts)) if !prompts.is_empty())
    }

    /// Another key's string value (`name`, `display_name`).
    pub fn text_field(&self, key: &str) -> Option<&str> {
        let at = self.other.binary_search_by(|(k, _)| k.as_ref().cmp(key));
        at.ok().and_then(|i| self.other[i].1.as_str())
    }

    fn into_owned(self) -> TableEntry<'static> {
        TableEntry {
            prompts: self.prompts.map(|prompts| match prompts {
                Shape::Is(prompts) => Shape::Is(owned(prompts, |t| Cow::Owned(t.into_owned()))),
                Shape::Wrong(value) => Shape::Wrong(value),
            }),
            other: self
                .other
                .into_iter()
                .map(|(key, value)| (Cow::Owned(key.into_owned()), value))
                .collect(),
        }
    }
}

impl<T: Serialize> Serialize for Keyed<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(key, value)| (key, value)))
    }
}

impl<'t> Serialize for TableEntry<'t> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fields(self, s)
    }
}

/// [`TableEntry`]'s keys in order, `prompts` among the others.
fn fields<'a, 't, S: serde::Serializer>(
    entry: &'a TableEntry<'t>,
    s: S,
) -> Result<S::Ok, S::Error> {
    /// One key's value: another key's, or `prompts`.
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Field<'a, 't> {
        Other(&'a Value),
        Prompts(&'a Shape<Keyed<'t, Cow<'t, str>>>),
    }
    let at = entry
        .other
        .partition_point(|(key, _)| key.as_ref() < "prompts");
    let (before, after) = entry.other.split_at(at);
    let field = |(key, value): &'a (Cow<'t, str>, Value)| (key.as_ref(), Field::Other(value));
    let prompts = (entry.prompts.as_ref()).map(|p| ("prompts", Field::Prompts(p)));
    s.collect_map(
        before
            .iter()
            .map(field)
            .chain(prompts)
            .chain(after.iter().map(field)),
    )
}

/// A gateway file as read: its table and the digest of its bytes (what a
/// write checks it still has).
#[derive(Debug, Clone)]
pub struct GatewayDoc {
    /// The file.
    pub path: Utf8PathBuf,
    /// Which file.
    pub file: GatewayFile,
    /// Its entries.
    pub table: GatewayTable<'static>,
    /// The sha256 of its bytes.
    pub digest: Sha256Hex,
}

impl GatewayDoc {
    /// The entry at `entry_path` (`[bot]` or `[bot, chat]`), checking that
    /// every step is an object. `Ok(None)` when absent.
    ///
    /// # Errors
    ///
    /// [`GatewayError::NotObject`] naming the key that is not.
    pub fn entry(&self, entry_path: &[&str]) -> Result<Option<&TableEntry<'static>>, GatewayError> {
        match entry_path {
            [bot] => self.table.entry(bot, None),
            [bot, chat] => self.table.entry(bot, Some(chat)),
            _ => Ok(None),
        }
    }

    /// The text of `block` in the entry at `entry_path`. `Ok(None)` when
    /// the entry or the key is absent.
    ///
    /// # Errors
    ///
    /// A wrong type anywhere on the way.
    pub fn prompt(&self, entry_path: &[&str], block: Block) -> Result<Option<&str>, GatewayError> {
        match self.entry(entry_path)? {
            Some(entry) => entry.prompt(block, self.file, entry_path),
            None => Ok(None),
        }
    }
}

/// Read one gateway file under `home`: confined to the home, at most
/// [`MAX_GATEWAY_BYTES`], then [`GatewayTable::parse`]d. `Ok(None)` when
/// there is no file.
///
/// # Errors
///
/// See [`GatewayError`].
pub fn read_gateway(
    home: &Utf8Path,
    file: GatewayFile,
) -> Result<Option<GatewayDoc>, GatewayError> {
    let Some(bytes) = read_bytes(home, None, file)? else {
        return Ok(None);
    };
    let path = file.path(home);
    let table = GatewayTable::parse(file, home, utf8(home, file, &bytes)?)?.into_owned();
    Ok(Some(GatewayDoc {
        path,
        file,
        table,
        digest: sha256_hex(&bytes),
    }))
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

/// Set (`Some`) or remove (`None`) `block` in the entry at `entry_path`
/// (`[bot]` in `bots.json`, `[bot, chat]` in `allowlist.json`, as
/// `GatewayEntry::entry_path` gives it) of a gateway file under `home`,
/// creating the entry when a value is set, keeping every other key. The file must still have the digest
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
    let mut table =
        read_gateway(home, file)?.map_or_else(|| GatewayTable::empty(file), |doc| doc.table);
    let entry = table.entry_mut(entry_path)?;
    let prompts = match entry.prompts.get_or_insert_with(|| Shape::Is(Keyed::new())) {
        Shape::Is(prompts) => prompts,
        Shape::Wrong(value) => {
            return Err(GatewayError::NotObject {
                key: gateway_pointer(file, entry_path, "/prompts"),
                found: json_kind(value),
                expected: " of block names to strings",
            });
        }
    };
    match text {
        Some(text) => {
            let key = gateway_pointer(file, entry_path, &format!("/prompts/{block}"));
            check_gateway_text(&key.to_string(), text)?;
            prompts.set(block.wire_name(), Shape::Is(Cow::Owned(text.to_owned())));
        }
        None => {
            prompts.remove(block.wire_name());
            if prompts.is_empty() {
                entry.prompts = None;
            }
        }
    }
    // Sorted keys, pretty, a final newline: what this writer has always
    // written, so a write changes only the edited key's lines.
    let mut out = serde_json::to_string_pretty(&table).map_err(|e| GatewayError::NotJson {
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

/// Why a whole file is not used, as a chain reports it: where (the file,
/// or the top of it when that is not an object) and a fragment after it.
fn file_refusal(home: &Utf8Path, file: GatewayFile, error: &GatewayError) -> Refusal {
    let reason = match error {
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
    };
    let source = match error {
        GatewayError::NotObject { key, .. } => key.clone(),
        _ => Source::File(file.path(home)),
    };
    Refusal { source, reason }
}

/// A gateway file a chain does not use, as its `Skipped` says it.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    source: Source,
    reason: String,
}

/// The bytes of one gateway file: through the home's opened directories
/// when there are some, else through its own.
fn read_bytes(
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

/// `bytes` of `file` as text, or why not.
fn utf8<'b>(home: &Utf8Path, file: GatewayFile, bytes: &'b [u8]) -> Result<&'b str, GatewayError> {
    std::str::from_utf8(bytes).map_err(|e| GatewayError::Unreadable {
        path: file.path(home),
        reason: ReadRefusal::NotUtf8 {
            at_byte: e.valid_up_to(),
        },
    })
}

/// Whether `file` in `home` lists `bot` (and, in `allowlist.json`, its
/// `chat`), as [`GatewayTable::listed`] answers. `Ok(false)` when the file
/// is absent. With `tables`, a text it parsed before is answered from its
/// table: a delivery's admission does not parse a 1 MB `allowlist.json`
/// again.
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
    tables: Option<&GatewayTables>,
) -> Result<bool, GatewayError> {
    let Some(bytes) = read_bytes(home, None, file)? else {
        return Ok(false);
    };
    match tables {
        Some(tables) => tables.table(home, file, &bytes)?.listed(bot, chat),
        None => GatewayTable::parse(file, home, utf8(home, file, &bytes)?)?.listed(bot, chat),
    }
}

/// [`gateway_entry_listed`] for a warning that a bot or chat id may be
/// mistyped: a file that cannot be read or an entry of the wrong type
/// counts as listed, since the resolution reports those itself.
pub fn gateway_lists(home: &Utf8Path, file: GatewayFile, bot: &str, chat: Option<&str>) -> bool {
    gateway_entry_listed(home, file, bot, chat, None).unwrap_or(true)
}

/// How many parsed gateway texts one [`GatewayTables`] keeps
/// (`bots.json` and `allowlist.json`, and an edit of each).
const REMEMBERED_GATEWAY_TEXTS: usize = 4;

/// One remembered text: its file, its bytes and its table.
type Remembered = (GatewayFile, Box<[u8]>, Arc<GatewayTable<'static>>);

/// The parsed tables of the gateway texts one owner read: what a service
/// answering many deliveries looks a bot or chat up in instead of parsing
/// a 1 MB `allowlist.json` again on each.
///
/// Held by whoever asks many questions (the gateway's prompt cache, and
/// the snapshots it opens) and dropped with it; never process-wide. Clones
/// share one memory. Keyed by the whole text, compared byte for byte, so
/// an edit is never answered from a stale table. A refused text is not
/// kept: each read reports why.
#[derive(Clone, Default)]
pub struct GatewayTables {
    remembered: Arc<Mutex<Vec<Remembered>>>,
    parses: Arc<AtomicUsize>,
}

impl fmt::Debug for GatewayTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayTables")
            .field("parses", &self.parses())
            .finish_non_exhaustive()
    }
}

impl GatewayTables {
    /// How many texts this memory parsed: a work counter for tests and
    /// benchmarks.
    pub fn parses(&self) -> usize {
        self.parses.load(Ordering::Relaxed)
    }

    /// The table of `bytes`, the contents of `file` under `home`: the one
    /// kept when these bytes were parsed before, else parsed now and kept.
    ///
    /// # Errors
    ///
    /// As [`GatewayTable::parse`], and a text that is not UTF-8.
    pub fn table(
        &self,
        home: &Utf8Path,
        file: GatewayFile,
        bytes: &[u8],
    ) -> Result<Arc<GatewayTable<'static>>, GatewayError> {
        let known = |remembered: &[Remembered]| {
            remembered
                .iter()
                .find(|(seen_file, seen, _)| *seen_file == file && **seen == *bytes)
                .map(|(_, _, table)| Arc::clone(table))
        };
        if let Some(table) = self.remembered.lock().ok().and_then(|r| known(&r)) {
            return Ok(table);
        }
        // Parsed outside the lock: a delivery of another chat is not held
        // up by this one's parse.
        let table = GatewayTable::parse(file, home, utf8(home, file, bytes)?)?;
        let table = Arc::new(table.into_owned());
        self.parses.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut remembered) = self.remembered.lock()
            && known(&remembered).is_none()
        {
            if remembered.len() >= REMEMBERED_GATEWAY_TEXTS {
                remembered.remove(0);
            }
            remembered.push((file, bytes.into(), Arc::clone(&table)));
        }
        Ok(table)
    }
}

/// One gateway file as a [`Snapshot`] read it: its table (or why it was
/// refused), so later chains of the snapshot neither read nor parse it
/// again.
pub(crate) type GatewayRead = Result<Option<Arc<GatewayTable<'static>>>, Refusal>;

/// Append the bot and chat tiers' contributions.
pub(crate) fn load_gateway(
    home: &Utf8Path,
    snap: &mut Snapshot,
    bot: Option<&Name>,
    chat: Option<&Name>,
    contributions: &mut Vec<Contribution>,
    skipped: &mut Vec<Skipped>,
) {
    load_gateway_files(
        home,
        snap,
        (bot, chat),
        &[GatewayFile::Bots, GatewayFile::Allowlist],
        (contributions, skipped),
    );
}

/// [`load_gateway`], reading only `files` of the two: a chat's own texts
/// are its `allowlist.json` entry's alone.
pub(crate) fn load_gateway_files(
    home: &Utf8Path,
    snap: &mut Snapshot,
    (bot, chat): (Option<&Name>, Option<&Name>),
    files: &[GatewayFile],
    (contributions, skipped): (&mut Vec<Contribution>, &mut Vec<Skipped>),
) {
    let Some(bot) = bot else { return };
    for &file in files {
        let chat = match file {
            GatewayFile::Bots => None,
            GatewayFile::Allowlist if chat.is_none() => return,
            GatewayFile::Allowlist => chat,
        };
        // The selection's names, typed, for the keys' sources.
        let entry = GatewayEntry {
            bot: bot.clone(),
            chat: chat.cloned(),
        };
        let take = |table: &GatewayTable<'_>, contributions: &mut _, skipped: &mut _| {
            entry_contributions(table, &entry, contributions, skipped);
        };
        let refused = |refusal: &Refusal, skipped: &mut Vec<Skipped>| {
            skip(
                skipped,
                None,
                file.layer(),
                refusal.source.clone(),
                refusal.reason.clone(),
            );
        };
        if snap.kept(|r| r.gateway.get(&file)).is_none()
            && let Some(bytes) = read_unkept(home, snap, file)
        {
            if snap.once && snap.tables.is_none() {
                // One chain reads each file once: parsed borrowing its
                // bytes, answered, dropped.
                let parsed =
                    utf8(home, file, &bytes).and_then(|text| GatewayTable::parse(file, home, text));
                match parsed {
                    Ok(table) => take(&table, contributions, skipped),
                    Err(error) => refused(&file_refusal(home, file, &error), skipped),
                }
                continue;
            }
            keep_parsed(home, snap, file, &bytes);
        }
        match snap.kept(|r| r.gateway.get(&file)) {
            Some(Ok(Some(table))) => take(table, contributions, skipped),
            Some(Err(refusal)) => refused(refusal, skipped),
            Some(Ok(None)) | None => {}
        }
    }
}

/// The bytes of `file`, which `snap` has not read yet; when there is no
/// such file, or it is refused, that is kept in `snap` instead (and
/// `None` returned), for every chain of it to answer alike.
fn read_unkept(home: &Utf8Path, snap: &mut Snapshot, file: GatewayFile) -> Option<Vec<u8>> {
    // The gateway files share the home's opened directories; a home that
    // cannot be resolved is reported by the read itself.
    let dirs = snap.root(home, false).ok().flatten();
    let read = match read_bytes(home, dirs, file) {
        Ok(Some(bytes)) => return Some(bytes),
        Ok(None) => Ok(None),
        Err(error) => Err(file_refusal(home, file, &error)),
    };
    snap.reads.gateway.insert(file, read);
    None
}

/// `file`'s `bytes` parsed (or taken from the owner's tables) and kept in
/// `snap`, so no later chain of it reads or parses the file again.
fn keep_parsed(home: &Utf8Path, snap: &mut Snapshot, file: GatewayFile, bytes: &[u8]) {
    let parsed = match &snap.tables {
        Some(tables) => tables.table(home, file, bytes),
        None => utf8(home, file, bytes)
            .and_then(|text| GatewayTable::parse(file, home, text))
            .map(|table| Arc::new(table.into_owned())),
    };
    let read = parsed
        .map(Some)
        .map_err(|error| file_refusal(home, file, &error));
    snap.reads.gateway.insert(file, read);
}

/// `file`'s table as `snap` keeps it, read and parsed the first time a
/// snapshot asks; `None` when there is no such file, or it is refused (a
/// chain that reads it says why).
pub(crate) fn kept_table(
    home: &Utf8Path,
    snap: &mut Snapshot,
    file: GatewayFile,
) -> Option<Arc<GatewayTable<'static>>> {
    if snap.kept(|r| r.gateway.get(&file)).is_none()
        && let Some(bytes) = read_unkept(home, snap, file)
    {
        keep_parsed(home, snap, file, &bytes);
    }
    snap.kept(|r| r.gateway.get(&file))
        .and_then(|read| read.as_ref().ok().cloned().flatten())
}

/// The selected entry's contributions, or what is wrong on the way to it,
/// reported as [`GatewayTable::entry`] and [`TableEntry::prompt`] report it.
fn entry_contributions(
    table: &GatewayTable<'_>,
    selected: &GatewayEntry,
    contributions: &mut Vec<Contribution>,
    skipped: &mut Vec<Skipped>,
) {
    let file = table.file();
    let layer = file.layer();
    let entry = match table.entry(
        selected.bot.as_str(),
        selected.chat.as_ref().map(Name::as_str),
    ) {
        Ok(Some(entry)) => entry,
        Ok(None) => return,
        Err(GatewayError::NotObject {
            key,
            found,
            expected,
        }) => {
            return skip(
                skipped,
                None,
                layer,
                key,
                format!("is {found}, not an object{expected}; it is not used"),
            );
        }
        Err(other) => {
            return skip(
                skipped,
                None,
                layer,
                Source::File(Utf8PathBuf::new()),
                other.to_string(),
            );
        }
    };
    let prompts = match &entry.prompts {
        None => return,
        Some(Shape::Is(prompts)) => prompts,
        Some(Shape::Wrong(value)) => {
            return skip(
                skipped,
                None,
                layer,
                gateway_pointer(file, &selected.entry_path(), "/prompts"),
                format!(
                    "is {}, not an object of block names to strings",
                    json_kind(value)
                ),
            );
        }
    };
    // Read in the fixed block order, not the JSON's key order, so the
    // contribution list is deterministic.
    for block in Block::EDITABLE {
        let Some(value) = prompts.get(block.wire_name()) else {
            continue;
        };
        let source = Source::Gateway(selected.key(block));
        match value {
            Shape::Is(text) if too_large(text) => {
                skip(skipped, Some(block), layer, source, too_large_reason(text));
            }
            Shape::Is(text) => contributions.push(Contribution {
                block,
                provenance: Arc::new(Provenance::new(layer, Origin::Gateway, source)),
                text: vak_prompt_blocks::SharedText::from(text.as_ref()),
                interop: false,
                imports: crate::Imports::default(),
                level: 0,
            }),
            Shape::Wrong(value) => skip(
                skipped,
                Some(block),
                layer,
                source,
                format!("is {}, not a string", json_kind(value)),
            ),
        }
    }
    // The rest in key order.
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
            gateway_pointer(
                file,
                &selected.entry_path(),
                &format!("/prompts/{}", Escaped(key)),
            ),
            reason,
        );
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

    /// The gateway's reading as it was before the typed table: the file
    /// parsed into a `Value`, then looked up. The table must answer the
    /// same.
    pub(super) mod before {
        use super::super::*;
        use serde_json::Value;

        // The reader as it was before the typed table, kept to pin that
        // the table answers, refuses and writes as it did.
        use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
        use serde_json::Map;
        use std::fmt;

        /// A gateway file as read: its top-level object and the digest of its
        /// bytes (what a write checks it still has).
        #[derive(Debug, Clone)]
        pub(super) struct Doc {
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
        pub(super) fn parse_gateway_json(
            path: &Utf8Path,
            text: &str,
        ) -> Result<Value, GatewayError> {
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

        pub(super) fn read_gateway(
            home: &Utf8Path,
            file: GatewayFile,
        ) -> Result<Option<Doc>, GatewayError> {
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
        pub(super) fn read_gateway_in(
            dirs: &mut OpenedDirs,
            home: &Utf8Path,
            file: GatewayFile,
        ) -> Result<Option<Doc>, GatewayError> {
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
                Value::Object(entries) => Ok(Some(Doc {
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

        impl Doc {
            /// The entry at `entry_path` (`[bot]` or `[bot, chat]`), checking that
            /// every step is an object. `Ok(None)` when absent.
            ///
            /// # Errors
            ///
            /// [`GatewayError::NotObject`] naming the key that is not.
            pub(super) fn entry(
                &self,
                entry_path: &[&str],
            ) -> Result<Option<&Value>, GatewayError> {
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
            pub(super) fn prompt(
                &self,
                entry_path: &[&str],
                block: Block,
            ) -> Result<Option<&str>, GatewayError> {
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

        /// The text of `block` in one entry, the one at `entry_path` in `file`.
        ///
        /// # Errors
        ///
        /// A `prompts` that is not an object, or a value that is not a string.
        pub(super) fn prompt_of<'a>(
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
                    key: gateway_pointer(file, entry_path, &format!("/prompts/{block}"))
                        .to_string(),
                    found: json_kind(other),
                }),
            }
        }

        /// The file [`write_gateway_prompt`] would write, and its whole new text,
        /// without writing it (a store that holds the home side writes it instead).
        ///
        /// # Errors
        ///
        /// As [`write_gateway_prompt`], but never a stale digest.
        pub(super) fn gateway_prompt_text(
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
                    prompts_map
                        .insert(block.wire_name().to_owned(), Value::String(text.to_owned()));
                }
                None => {
                    prompts_map.remove(block.wire_name());
                    if prompts_map.is_empty() {
                        map.remove("prompts");
                    }
                }
            }
            let mut out = serde_json::to_string_pretty(&Value::Object(root)).map_err(|e| {
                GatewayError::NotJson {
                    path: path.clone(),
                    message: e.to_string(),
                }
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
        ) -> Option<Doc> {
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
                        text: text.to_owned().into(),
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
        let filler: String = (0..600)
            .map(|i| format!(r#", "filler{i}": {{"ops": {{"prompts": {{}}}}}}"#))
            .collect();
        let long = [
            format!(r#"{{"helpdesk": {{"ops": {{}}, "dev": 3}}, "other": ["ops"]{filler}}}"#),
            format!(r#"{{"helpdesk": "be nice", "third": {{}}{filler}}}"#),
        ];
        let mut cases = 0;
        for text in texts.into_iter().chain(long.iter().map(|t| t.as_bytes())) {
            for file in [GatewayFile::Bots, GatewayFile::Allowlist] {
                std::fs::write(file.path(&home), text).unwrap();
                for bot in ["helpdesk", "other", "third", "missing"] {
                    let chats: &[Option<&str>] = match file {
                        GatewayFile::Bots => &[None],
                        GatewayFile::Allowlist => {
                            &[Some("ops"), Some("dev"), Some("missing"), None]
                        }
                    };
                    for chat in chats {
                        let path: Vec<&str> = [Some(bot), *chat].into_iter().flatten().collect();
                        let parsed = match before::read_gateway(&home, file) {
                            Ok(Some(doc)) => doc.entry(&path).map(|e| e.is_some()),
                            Ok(None) => Ok(false),
                            Err(e) => Err(e),
                        }
                        .map_err(|e| e.to_string());
                        // Parsed for the one question, then from a memory
                        // that parses it once and answers again from it.
                        let tables = GatewayTables::default();
                        for tables in [None, Some(&tables), Some(&tables)] {
                            let listed = gateway_entry_listed(&home, file, bot, *chat, tables);
                            assert_eq!(
                                listed.map_err(|e| e.to_string()),
                                parsed,
                                "{file:?} {} {bot} {chat:?}",
                                String::from_utf8_lossy(text)
                            );
                        }
                        assert!(tables.parses() <= 1);
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
        let tables = GatewayTables::default();
        let listed = |tables| {
            gateway_entry_listed(
                &home,
                GatewayFile::Allowlist,
                "helpdesk",
                Some("ops"),
                tables,
            )
        };
        std::os::unix::fs::symlink(&target, &path).unwrap();
        for tables in [None, Some(&tables)] {
            assert!(matches!(
                listed(tables),
                Err(GatewayError::Unreadable { .. })
            ));
        }
        std::fs::remove_file(&path).unwrap();
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&path)
                .status()
                .unwrap()
                .success()
        );
        for tables in [None, Some(&tables)] {
            assert!(matches!(
                listed(tables),
                Err(GatewayError::Unreadable { .. })
            ));
        }
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
        for tables in [None, Some(&tables)] {
            assert!(matches!(
                listed(tables),
                Err(GatewayError::Unreadable { .. })
            ));
        }
        assert_eq!(tables.parses(), 0, "nothing refused is kept");
    }

    mod table_property {
        use super::super::*;
        use super::{before, home};
        use proptest::prelude::*;

        /// JSON as text, objects as lists of pairs so that a key may be
        /// given twice at any depth.
        #[derive(Debug, Clone)]
        enum Json {
            Leaf(serde_json::Value),
            Array(Vec<Json>),
            Object(Vec<(&'static str, Json)>),
        }

        impl Json {
            fn write(&self, out: &mut String) {
                match self {
                    Json::Leaf(value) => out.push_str(&value.to_string()),
                    Json::Array(items) => {
                        out.push('[');
                        for (i, item) in items.iter().enumerate() {
                            if i > 0 {
                                out.push(',');
                            }
                            item.write(out);
                        }
                        out.push(']');
                    }
                    Json::Object(pairs) => {
                        out.push('{');
                        for (i, (key, value)) in pairs.iter().enumerate() {
                            if i > 0 {
                                out.push(',');
                            }
                            out.push_str(&serde_json::Value::from(*key).to_string());
                            out.push(':');
                            value.write(out);
                        }
                        out.push('}');
                    }
                }
            }
        }

        /// Keys from a small set, so bots, chats, `prompts`, block names
        /// and unknown keys collide, nest and repeat; values of every kind.
        fn json() -> impl Strategy<Value = Json> {
            use serde_json::Value;
            let key = prop::sample::select(vec![
                "helpdesk",
                "ops",
                "dev",
                "prompts",
                "identity",
                "guardrails",
                "surface-note",
                "safety-floor",
                "name",
                "zeta",
            ]);
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i32>().prop_map(Value::from),
                any::<f64>().prop_map(
                    |f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
                ),
                "[a-z \\-\n\u{e9}\"\\\\]{0,12}".prop_map(Value::String),
            ]
            .prop_map(Json::Leaf);
            leaf.prop_recursive(5, 64, 6, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3).prop_map(Json::Array),
                    prop::collection::vec((key.clone(), inner), 0..5).prop_map(Json::Object),
                ]
            })
        }

        /// An object of `(key, value)` pairs, keys from `keys` (so they
        /// repeat now and then).
        fn object(
            keys: &'static [&'static str],
            value: impl Strategy<Value = Json> + Clone,
        ) -> impl Strategy<Value = Json> + Clone {
            prop::collection::vec((prop::sample::select(keys), value), 0..5).prop_map(Json::Object)
        }

        /// Mostly the shape wanted (`shaped`), now and then anything.
        fn mostly(
            shaped: impl Strategy<Value = Json> + Clone + 'static,
        ) -> impl Strategy<Value = Json> + Clone {
            prop_oneof![5 => shaped, 1 => json()]
        }

        /// A gateway file's entry: `prompts` of block names (and others)
        /// to texts (and other values), and other keys.
        fn entry() -> impl Strategy<Value = Json> + Clone {
            let text = prop_oneof![
                3 => "[a-z \\-]{0,8}".prop_map(|t| Json::Leaf(serde_json::Value::String(t))),
                1 => json(),
            ];
            let prompts = mostly(object(
                &[
                    "identity",
                    "guardrails",
                    "surface-note",
                    "operating-rules",
                    "safety-floor",
                    "agent-instructions",
                    "zeta",
                ],
                text,
            ));
            let field = prop_oneof![
                3 => prompts.prop_map(|p| ("prompts", p)),
                1 => (prop::sample::select(&["name", "display_name", "zeta"][..]), json()),
            ];
            mostly(prop::collection::vec(field, 0..3).prop_map(Json::Object))
        }

        /// `bots.json`: bots to entries; `allowlist.json`: bots to chats
        /// to entries.
        fn gateway(file: GatewayFile) -> impl Strategy<Value = Json> {
            const BOTS: &[&str] = &["helpdesk", "ops", "dev", "qa", "b1", "b2", "b3"];
            const CHATS: &[&str] = &["ops", "dev", "helpdesk", "c1", "c2", "c3"];
            match file {
                GatewayFile::Bots => mostly(object(BOTS, entry())).boxed(),
                GatewayFile::Allowlist => {
                    mostly(object(BOTS, mostly(object(CHATS, entry())))).boxed()
                }
            }
        }

        fn text_of(json: &Json, broken: u8) -> String {
            let mut text = String::new();
            json.write(&mut text);
            // Now and then a syntax error, at the end or inside.
            match broken {
                0 => text.push_str(" x"),
                1 if text.len() > 2 => {
                    text.truncate(text.len() - 1);
                }
                _ => {}
            }
            text
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(160))]

            /// Whatever the file holds, the typed table answers every
            /// chain, admission, prompt and write exactly as the reader
            /// before it did: the same contributions, the same skipped
            /// entries and messages, the same errors, the same bytes.
            #[test]
            fn the_table_answers_as_the_reader_before_it(
                bots in gateway(GatewayFile::Bots),
                allow in gateway(GatewayFile::Allowlist),
                broken in 0u8..24,
            ) {
                let (_keep, home) = home();
                let bots_text = text_of(&bots, broken);
                let allow_text = text_of(&allow, broken.wrapping_sub(6));
                std::fs::write(GatewayFile::Bots.path(&home), &bots_text).unwrap();
                std::fs::write(GatewayFile::Allowlist.path(&home), &allow_text).unwrap();
                let tables = GatewayTables::default();
                for bot in ["helpdesk", "ops"] {
                    let bot_name = Name::new(vak_prompt_blocks::NameKind::Bot, bot).unwrap();
                    for chat in [Some("ops"), Some("dev"), None] {
                        let chat_name = chat.map(|c| Name::new(vak_prompt_blocks::NameKind::Chat, c).unwrap());
                        let (mut c0, mut s0) = (Vec::new(), Vec::new());
                        before::load_gateway(&home, None, Some(&bot_name), chat_name.as_ref(), &mut c0, &mut s0);
                        for mut snap in [Snapshot::new(), Snapshot::once(), Snapshot::once_sharing(&tables)] {
                            let (mut c, mut s) = (Vec::new(), Vec::new());
                            load_gateway(&home, &mut snap, Some(&bot_name), chat_name.as_ref(), &mut c, &mut s);
                            prop_assert_eq!(&(c, s), &(c0.clone(), s0.clone()), "{} {}", bots_text, allow_text);
                        }
                        for file in [GatewayFile::Bots, GatewayFile::Allowlist] {
                            let path: Vec<&str> = match file {
                                GatewayFile::Bots => vec![bot],
                                GatewayFile::Allowlist => [Some(bot), chat].into_iter().flatten().collect(),
                            };
                            let old = before::read_gateway(&home, file);
                            let listed = match &old {
                                Ok(Some(doc)) => doc.entry(&path).map(|e| e.is_some()).map_err(|e| e.to_string()),
                                Ok(None) => Ok(false),
                                Err(e) => Err(e.to_string()),
                            };
                            let chat_asked = if file == GatewayFile::Allowlist { chat } else { None };
                            prop_assert_eq!(
                                gateway_entry_listed(&home, file, bot, chat_asked, Some(&tables)).map_err(|e| e.to_string()),
                                listed.clone()
                            );
                            prop_assert_eq!(
                                gateway_entry_listed(&home, file, bot, chat_asked, None).map_err(|e| e.to_string()),
                                listed
                            );
                            let new = read_gateway(&home, file);
                            prop_assert_eq!(
                                new.as_ref().map(|d| d.as_ref().map(|d| d.digest.clone())).map_err(ToString::to_string),
                                old.as_ref().map(|d| d.as_ref().map(|d| d.digest.clone())).map_err(ToString::to_string)
                            );
                            if file == GatewayFile::Allowlist && chat.is_none() {
                                continue;
                            }
                            for block in [Block::Identity, Block::Guardrails] {
                                if let (Ok(Some(new)), Ok(Some(old))) = (&new, &old) {
                                    prop_assert_eq!(
                                        new.prompt(&path, block).map_err(|e| e.to_string()),
                                        old.prompt(&path, block).map_err(|e| e.to_string())
                                    );
                                }
                                for text in [Some("new text"), None] {
                                    prop_assert_eq!(
                                        gateway_prompt_text(&home, file, &path, block, text).map_err(|e| e.to_string()),
                                        before::gateway_prompt_text(&home, file, &path, block, text).map_err(|e| e.to_string())
                                    );
                                }
                            }
                        }
                    }
                }
                prop_assert!(tables.parses() <= 2);
            }
        }
    }

    /// The memory a prompt cache holds: a text is parsed once however
    /// often it is asked about, an edit (even of one byte, the same
    /// length) is parsed afresh, and a refused text is reported each time.
    #[test]
    fn a_text_is_parsed_once_per_owner_and_an_edit_is_seen() {
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
        let tables = GatewayTables::default();
        let load = |i: usize| {
            let (mut c, mut s) = (Vec::new(), Vec::new());
            load_gateway(
                &home,
                &mut Snapshot::once_sharing(&tables),
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
        std::fs::write(&path, &first).unwrap();
        for i in [0, 1, 599] {
            assert_eq!(load(i), [format!("- never {i}")]);
            assert!(
                gateway_entry_listed(
                    &home,
                    GatewayFile::Allowlist,
                    "helpdesk",
                    Some(&format!("c{i}")),
                    Some(&tables)
                )
                .unwrap()
            );
        }
        assert_eq!(tables.parses(), 1, "one text, parsed once");
        let edited = text("nevex");
        assert_eq!(edited.len(), first.len());
        std::fs::write(&path, &edited).unwrap();
        for i in [0, 7, 599, 5] {
            assert_eq!(load(i), [format!("- nevex {i}")]);
        }
        assert_eq!(tables.parses(), 2);
        std::fs::write(&path, &first).unwrap();
        assert_eq!(load(3), ["- never 3"]);
        assert_eq!(tables.parses(), 2, "the first text is still remembered");
        let mut broken = first.into_bytes();
        broken[10] = 0xff;
        std::fs::write(&path, &broken).unwrap();
        for _ in 0..3 {
            let (mut c, mut s) = (Vec::new(), Vec::new());
            let snap = &mut Snapshot::once_sharing(&tables);
            load_gateway(&home, snap, Some(&bot), Some(&chat_of(0)), &mut c, &mut s);
            assert!(c.is_empty() && s.len() == 1, "{c:?} {s:?}");
            assert!(s[0].reason.contains("UTF-8"), "{}", s[0]);
        }
    }

    /// Hostile texts, each at the typed reader directly: what it refuses
    /// whole, and what it keeps to report per entry.
    #[test]
    fn hostile_texts_are_refused_or_reported_as_before() {
        fn parse(file: GatewayFile, text: &str) -> Result<GatewayTable<'_>, GatewayError> {
            GatewayTable::parse(file, Utf8Path::new("/h"), text)
        }
        // Nesting past the parser's depth is not JSON; never a stack overflow.
        let deep = format!(
            r#"{{"helpdesk": {{"ops": {{"x": {}1{}}}}}}}"#,
            "[".repeat(4096),
            "]".repeat(4096)
        );
        assert!(matches!(
            parse(GatewayFile::Allowlist, &deep),
            Err(GatewayError::NotJson { .. })
        ));
        // A key given twice at each depth is named by its pointer.
        for (text, pointer) in [
            (r#"{"b": {}, "b": {}}"#, "#/b"),
            (r#"{"b": {"c": {}, "c": {}}}"#, "#/b/c"),
            (r#"{"b": {"c": {"name": 1, "name": 2}}}"#, "#/b/c/name"),
            (
                r#"{"b": {"c": {"prompts": {}, "prompts": {}}}}"#,
                "#/b/c/prompts",
            ),
            (
                r#"{"b": {"c": {"prompts": {"identity": "a", "identity": "b"}}}}"#,
                "#/b/c/prompts/identity",
            ),
            (
                r#"{"b": {"c": {"prompts": {"identity": {"k": 1, "k": 2}}}}}"#,
                "#/b/c/prompts/identity/k",
            ),
            (
                r#"{"b": {"c": {"x": [0, {"k": 1, "k": 2}]}}}"#,
                "#/b/c/x/1/k",
            ),
            (r#"{"b": [{"k": 1, "k": 2}]}"#, "#/b/0/k"),
            // The inner one is complete first, so it is the one named.
            (r#"{"b": 1, "b": {"k": 1, "k": 2}}"#, "#/b/k"),
        ] {
            match parse(GatewayFile::Allowlist, text) {
                Err(GatewayError::DuplicateKey { pointer: found, .. }) => {
                    assert_eq!(found, pointer, "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // A duplicate before a syntax error: the file is not JSON.
        assert!(matches!(
            parse(GatewayFile::Bots, r#"{"b": {}, "b": {}"#),
            Err(GatewayError::NotJson { .. })
        ));
        // Wrong kinds are kept, and reported when asked for.
        let table = parse(
            GatewayFile::Allowlist,
            r#"{"b": {"n": null, "s": "x", "c": {"prompts": {"identity": 3, "guardrails": null, "surface-note": "ok"}}}, "z": null}"#,
        )
        .unwrap();
        assert!(matches!(
            table.entry("z", Some("c")),
            Err(GatewayError::NotObject { found: "null", .. })
        ));
        assert!(matches!(
            table.entry("b", Some("n")),
            Err(GatewayError::NotObject { found: "null", .. })
        ));
        assert!(matches!(
            table.entry("b", Some("s")),
            Err(GatewayError::NotObject {
                found: "a string",
                ..
            })
        ));
        let entry = table.entry("b", Some("c")).unwrap().unwrap();
        let at = ["b", "c"];
        assert!(matches!(
            entry.prompt(Block::Identity, GatewayFile::Allowlist, &at),
            Err(GatewayError::NotString {
                found: "a number",
                ..
            })
        ));
        assert!(matches!(
            entry.prompt(Block::Guardrails, GatewayFile::Allowlist, &at),
            Err(GatewayError::NotString { found: "null", .. })
        ));
        assert_eq!(
            entry
                .prompt(Block::SurfaceNote, GatewayFile::Allowlist, &at)
                .unwrap(),
            Some("ok")
        );
        // The top of the file must be an object.
        for (text, found) in [
            ("null", "null"),
            ("[]", "an array"),
            ("\"x\"", "a string"),
            ("1", "a number"),
        ] {
            assert!(
                matches!(parse(GatewayFile::Bots, text), Err(GatewayError::NotObject { found: f, .. }) if f == found),
                "{text}"
            );
        }
        // A huge string is kept and borrowed, not copied; a 1 MB file of
        // many chats is one parse, each chat a lookup.
        let huge = format!(
            r#"{{"b": {{"prompts": {{"identity": "{}"}}}}}}"#,
            "a".repeat(900_000)
        );
        let table = parse(GatewayFile::Bots, &huge).unwrap();
        let text = table
            .entry("b", None)
            .unwrap()
            .unwrap()
            .prompt(Block::Identity, GatewayFile::Bots, &["b"])
            .unwrap()
            .unwrap();
        assert_eq!(text.len(), 900_000);
        assert!(
            huge.as_bytes().as_ptr_range().contains(&text.as_ptr()),
            "borrowed from the text"
        );
        let chats = (0..14_000)
            .map(|i| {
                format!(r#""c{i}": {{"name": "Chat {i}", "prompts": {{"guardrails": "- {i}"}}}}"#)
            })
            .collect::<Vec<_>>()
            .join(",");
        let big = format!(r#"{{"b": {{{chats}}}}}"#);
        assert!(
            big.len() > 900_000 && big.len() as u64 <= MAX_GATEWAY_BYTES,
            "{}",
            big.len()
        );
        let table = parse(GatewayFile::Allowlist, &big).unwrap();
        for i in [0, 6_999, 13_999] {
            let chat = format!("c{i}");
            let entry = table.entry("b", Some(&chat)).unwrap().unwrap();
            assert_eq!(entry.text_field("name"), Some(format!("Chat {i}").as_str()));
            assert_eq!(
                entry
                    .prompt(Block::Guardrails, GatewayFile::Allowlist, &["b", &chat])
                    .unwrap(),
                Some(format!("- {i}").as_str())
            );
        }
        assert!(table.entry("b", Some("c14000")).unwrap().is_none());
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
        let entry = doc2.entry(&["helpdesk"]).unwrap().unwrap();
        assert_eq!(entry.text_field("display_name"), Some("Help"));
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
