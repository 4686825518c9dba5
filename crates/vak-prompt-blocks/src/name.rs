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
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

impl Name {
    /// Validate `raw` as a name of `kind`.
    pub fn new(kind: NameKind, raw: &str) -> Result<Self, BlocksError> {
        let ok = !raw.is_empty()
            && raw.len() <= 64
            && !raw.starts_with('-')
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(Name(raw.to_owned()))
        } else {
            Err(BlocksError::InvalidName {
                kind: kind.as_str(),
                name: raw.to_owned(),
            })
        }
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
