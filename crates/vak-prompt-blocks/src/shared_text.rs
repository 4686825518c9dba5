//! A text held once and shared: what a file read, and the parts of it that
//! composition keeps, without a copy for each holder.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// An immutable text, or a part of one, shared by reference count.
///
/// The loader reads a file straight into one; every chain a snapshot
/// builds, and the contributor composition keeps of it (trimmed, so
/// usually a part), share that one allocation. A text built in memory (a
/// skill's line, an expanded import) is held as the `String` it was built
/// in, never copied to be shared. Compares, hashes and prints as the `str`
/// it holds.
#[derive(Clone)]
pub struct SharedText(Repr);

#[derive(Clone)]
enum Repr {
    /// Built in memory: a clone copies it, as a `String`'s does.
    Owned(String),
    /// Shared: `range` is the part of `whole` this is, always on character
    /// boundaries.
    Shared {
        whole: Arc<str>,
        range: Range<usize>,
    },
}

impl SharedText {
    /// All of `whole`.
    pub fn new(whole: Arc<str>) -> Self {
        let range = 0..whole.len();
        SharedText(Repr::Shared { whole, range })
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Owned(text) => text,
            Repr::Shared { whole, range } => whole.get(range.clone()).unwrap_or_default(),
        }
    }

    /// The allocation this text is a part of, and where in it, when it is
    /// shared (`None` for a text built in memory). While a caller holds a
    /// clone of that allocation its address is never reused, so the
    /// address and range name this text's content: what a memo of many
    /// chains keys a shared text by without reading it.
    pub fn shared_part(&self) -> Option<(&Arc<str>, Range<usize>)> {
        match &self.0 {
            Repr::Owned(_) => None,
            Repr::Shared { whole, range } => Some((whole, range.clone())),
        }
    }

    /// `part` shared, when this text is shared and `part` is a slice of it
    /// (as `trim` and its like return); `None` for any other string, equal
    /// or not.
    pub fn share(&self, part: &str) -> Option<SharedText> {
        let Repr::Shared { whole, range } = &self.0 else {
            return None;
        };
        let text = self.as_str();
        let offset = part.as_ptr().addr().checked_sub(text.as_ptr().addr())?;
        let end = offset.checked_add(part.len())?;
        // A slice of `text` has its bounds inside it and on its boundaries;
        // `get` checks both, so a string that merely sits next to it in
        // memory is never taken for a part of it.
        let inside = text.get(offset..end)?;
        (inside.as_ptr() == part.as_ptr()).then(|| {
            SharedText(Repr::Shared {
                whole: Arc::clone(whole),
                range: range.start + offset..range.start + end,
            })
        })
    }

    /// `part` shared when it is a slice of `base` ([`SharedText::share`]),
    /// else copied into a text of its own.
    pub fn share_or_copy(base: Option<&SharedText>, part: &str) -> SharedText {
        base.and_then(|base| base.share(part))
            .unwrap_or_else(|| SharedText(Repr::Owned(part.to_owned())))
    }
}

impl Default for SharedText {
    fn default() -> Self {
        SharedText::from("")
    }
}

impl Deref for SharedText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<Arc<str>> for SharedText {
    fn from(whole: Arc<str>) -> Self {
        SharedText::new(whole)
    }
}

/// Copied once, into a text that is shared from then on.
impl From<&str> for SharedText {
    fn from(text: &str) -> Self {
        SharedText::new(Arc::from(text))
    }
}

/// Kept as it was built: no copy.
impl From<String> for SharedText {
    fn from(text: String) -> Self {
        SharedText(Repr::Owned(text))
    }
}

impl From<Cow<'_, str>> for SharedText {
    fn from(text: Cow<'_, str>) -> Self {
        match text {
            Cow::Borrowed(text) => SharedText::from(text),
            Cow::Owned(text) => SharedText::from(text),
        }
    }
}

impl PartialEq for SharedText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SharedText {}

impl PartialEq<str> for SharedText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl std::hash::Hash for SharedText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for SharedText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_allocation(a: &SharedText, b: &SharedText) -> bool {
        matches!((&a.0, &b.0), (Repr::Shared { whole: x, .. }, Repr::Shared { whole: y, .. }) if Arc::ptr_eq(x, y))
    }

    #[test]
    fn a_built_text_is_kept_as_built_and_never_shared() {
        let built = SharedText::from(String::from("line"));
        assert!(matches!(built.0, Repr::Owned(_)));
        assert!(built.share(&built[1..]).is_none());
        assert_eq!(SharedText::from(Cow::Owned(String::from("x"))), "x");
    }

    #[test]
    fn a_trimmed_part_is_shared_and_reads_as_the_part() {
        let whole = SharedText::from("\n\n  body line \n");
        let trimmed = whole.trim();
        let part = whole.share(trimmed).unwrap();
        assert_eq!(part, "body line");
        assert!(same_allocation(&part, &whole));
        // A part of a part is a part of the whole.
        let inner = part.share(&part[5..]).unwrap();
        assert_eq!(inner, "line");
        assert!(matches!(&inner.0, Repr::Shared { range, .. } if *range == (9..13)));
    }

    #[test]
    fn an_equal_string_elsewhere_is_not_a_part() {
        let whole = SharedText::from("same");
        let other = String::from("same");
        assert!(whole.share(&other).is_none());
        let copied = SharedText::share_or_copy(Some(&whole), &other);
        assert_eq!(copied, "same");
        assert!(!same_allocation(&copied, &whole));
        assert_eq!(SharedText::share_or_copy(None, "x"), "x");
    }

    #[test]
    fn a_string_just_past_the_end_is_not_a_part() {
        let whole = SharedText::from("abcdef");
        let head = whole.share(&whole[..3]).unwrap();
        // "def" lies right after the part "abc" in memory: not inside it.
        assert!(head.share(&whole[3..]).is_none());
        assert!(head.share(&whole[3..3]).is_some_and(|e| e.is_empty()));
    }

    proptest::proptest! {
        #[test]
        fn every_slice_on_boundaries_is_shared_as_itself(
            text in "\\PC{0,24}", a in 0usize..32, b in 0usize..32,
        ) {
            let whole = SharedText::from(text.as_str());
            let (a, b) = (a.min(b), a.max(b));
            if let Some(part) = whole.get(a..b) {
                let shared = whole.share(part).unwrap();
                proptest::prop_assert_eq!(shared.as_str(), part);
            }
        }
    }
}
