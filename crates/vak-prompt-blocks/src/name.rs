use std::fmt;

use crate::BlocksError;

/// What a validated [`Name`] names; used in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A worker role under `agents/<role>/`.
    Role,
    /// A gateway bot id.
    Bot,
    /// A gateway chat id.
    Chat,
    /// A session id.
    Session,
}

impl NameKind {
    fn as_str(self) -> &'static str {
        match self {
            NameKind::Role => "role",
            NameKind::Bot => "bot",
            NameKind::Chat => "chat",
            NameKind::Session => "session",
        }
    }
}

/// A name that is safe to use as one path component: 1 to 64 ASCII letters,
/// digits, `-` or `_`, not starting with `-`. Validated before it touches a
/// path, so `..`, `/`, NUL and friends never reach the filesystem.
///
/// Shared, not copied, when cloned: every gateway key and every provenance
/// of a chat's texts names its bot and chat.
#[derive(Debug, Clone, PartialOrd, Ord)]
pub struct Name(std::sync::Arc<str>);

/// Equal when the texts are. Clones of one name (a check compares the
/// names of hundreds of thousands of chains, all cloned from one list) are
/// told equal without reading them: `Arc<str>`'s own equality always
/// compares the bytes.
impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Name {}

/// As the text hashes, so equal names hash alike.
impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Name {
    /// Validate `raw` as a name of `kind`.
    pub fn new(kind: NameKind, raw: &str) -> Result<Self, BlocksError> {
        if Name::is_valid(kind, raw) {
            Ok(Name(std::sync::Arc::from(raw)))
        } else {
            Err(BlocksError::InvalidName {
                kind: kind.as_str(),
                name: raw.to_owned(),
            })
        }
    }

    /// Whether [`Name::new`] accepts `raw` as a name of `kind`, without
    /// making one.
    pub fn is_valid(kind: NameKind, raw: &str) -> bool {
        // A leading `-` could read as an option to whatever is handed the
        // name; a chat may still be a negative number, as chat platforms
        // number their groups (Telegram: `-100123`), which no tool reads as
        // a word of options.
        let negative_number = kind == NameKind::Chat
            && raw.len() > 1
            && raw.bytes().skip(1).all(|b| b.is_ascii_digit());
        !raw.is_empty()
            && raw.len() <= 64
            && (!raw.starts_with('-') || negative_number)
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    /// The validated name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_path_tricks() {
        for bad in [
            "",
            "..",
            ".",
            "a/b",
            "../etc",
            "a\\b",
            "-rf",
            "a b",
            "a\0b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(
                Name::new(NameKind::Role, bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        for good in ["reviewer", "bot_1", "01J9Z", "a-b"] {
            assert!(Name::new(NameKind::Role, good).is_ok());
        }
    }

    #[test]
    fn names_are_equal_and_hash_alike_when_their_texts_are() {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        let a = Name::new(NameKind::Bot, "helpdesk").unwrap();
        let same = Name::new(NameKind::Bot, "helpdesk").unwrap();
        let other = Name::new(NameKind::Bot, "helpdesks").unwrap();
        assert_eq!(a, a.clone());
        assert_eq!(a, same);
        assert_eq!(state.hash_one(&a), state.hash_one(&same));
        assert_ne!(a, other);
        assert_ne!(a.clone(), other);
    }

    #[test]
    fn a_chat_may_be_a_negative_number_and_nothing_else_may_start_with_a_dash() {
        assert!(Name::new(NameKind::Chat, "-100123").is_ok());
        for bad in ["-", "-rf", "-1a", "--1", "-1-2", "-1_"] {
            assert!(Name::new(NameKind::Chat, bad).is_err(), "{bad:?}");
        }
        for kind in [NameKind::Role, NameKind::Bot, NameKind::Session] {
            assert!(Name::new(kind, "-100123").is_err());
        }
        let error = Name::new(NameKind::Chat, "-x").unwrap_err().to_string();
        assert!(error.contains("negative number"), "{error}");
        let error = Name::new(NameKind::Bot, "-x").unwrap_err().to_string();
        assert!(!error.contains("negative number"), "{error}");
    }

    proptest! {
        #[test]
        fn accepted_names_are_single_safe_components(raw in "\\PC{0,20}") {
            if let Ok(name) = Name::new(NameKind::Chat, &raw) {
                prop_assert!(!name.as_str().contains('/'));
                prop_assert!(!name.as_str().contains(".."));
                prop_assert!(name.as_str() != ".");
            }
        }
    }
}
