//! The home side of the prompt (the shared layer, its `surface/<kind>/` and
//! `agents/<role>/` sub-layers, the gateway tiers `bots.json` and
//! `allowlist.json`, the shared `config.toml` without its node-local
//! `[store]` table — model, budget, permissions, MCP servers — and the
//! skills' `SKILL.md` files: everything a prompt depends on that the home
//! holds) and the bots' signing secrets, as a store may hold
//! them: the PostgreSQL store does, so every gateway node
//! resolves the same operator prompts; the file store does not (the files
//! of the home are the home side).
//!
//! Paths are relative to the home and always one of the shapes
//! [`home_side_path`] accepts, so a row altered in a database can never
//! name a file outside the home side.

use crate::SessionError;

/// One home-side file as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeFile {
    /// Relative to the home: `.vak/prompts/guardrails.md`,
    /// `.vak/gateway/bots.json`, …
    pub path: String,
    /// Its text.
    pub text: String,
    /// The sha256 of `text`, as recorded when it was stored.
    pub sha256: String,
    /// Who stored it (the OS user, or `admin-token:<id>`).
    pub by: String,
    /// When (RFC 3339).
    pub at: String,
}

/// Every home-side file at one generation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HomeSnapshot {
    /// The generation: bumped in the same transaction as every change.
    pub generation: i64,
    /// The files, by path.
    pub files: Vec<HomeFile>,
}

/// What a compare-and-swap expects the file to be before the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Absent.
    Absent,
    /// Present with this sha256.
    Digest(String),
}

impl Expect {
    /// `Absent` for `None`, else the digest.
    pub fn of(digest: Option<&str>) -> Self {
        match digest {
            None | Some("") => Expect::Absent,
            Some(d) => Expect::Digest(d.to_owned()),
        }
    }
}

/// What a compare-and-swap did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swapped {
    /// Written; the new generation.
    Done(i64),
    /// The file was not what the caller expected: its digest now (`None`:
    /// absent). Nothing was written.
    Conflict(Option<String>),
    /// The home side is no longer at the generation the caller's checks
    /// were made at (another change, to any file, committed since): the
    /// generation now. Nothing was written; the caller brings its replica
    /// up to the store and checks again.
    Moved(i64),
}

/// The home side and the signing secrets in a store.
pub trait HomeStore: Send + Sync {
    /// The current generation (one query: the cheap check before a sync).
    fn home_generation(&self) -> Result<i64, SessionError>;

    /// Every home-side file, at one generation, in one transaction.
    fn home_snapshot(&self) -> Result<HomeSnapshot, SessionError>;

    /// Write `text` at `path` if the file is as `expect` says and, when
    /// `at` is given, the home side is still at generation `at`
    /// ([`Swapped::Moved`] otherwise), bumping the generation in the same
    /// transaction. `at` is the generation a save's budget check read: the
    /// check covers every chain the file is in, and those chains hold
    /// other home-side files too, so a change to any of them in between
    /// (on any node) makes the check stale, not only a change to this file.
    fn home_put(
        &self,
        path: &str,
        text: &str,
        expect: &Expect,
        at: Option<i64>,
        by: &str,
    ) -> Result<Swapped, SessionError>;

    /// Remove `path` if it is as `expect` says and the home side is still
    /// at `at` when given, as [`home_put`](Self::home_put) (removing an
    /// absent file that is expected absent changes nothing and answers the
    /// current generation).
    fn home_remove(
        &self,
        path: &str,
        expect: &Expect,
        at: Option<i64>,
        by: &str,
    ) -> Result<Swapped, SessionError>;

    /// The signing secret of `bot`, if it has one.
    fn bot_secret(&self, bot: &str) -> Result<Option<String>, SessionError>;

    /// Store `secret` for `bot` unless it has one; answers the secret it
    /// has now (the one given, or the one that was there).
    fn bot_secret_create(&self, bot: &str, secret: &str) -> Result<String, SessionError>;
}

/// The user-editable files of a directory layer.
pub const LAYER_FILES: [&str; 4] = [
    "identity.md",
    "operating-rules.md",
    "guardrails.md",
    "surface-note.md",
];

/// The gateway tiers.
pub const GATEWAY_FILES: [&str; 2] = ["bots.json", "allowlist.json"];

/// The shared config, relative to the home. The store keeps it without its
/// `[store]` table, which names the node's own store and stays on the node.
pub const SHARED_CONFIG: &str = ".vak/config.toml";

/// The one file of a skill the prompt reads (`.vak/skills/<name>/SKILL.md`).
pub const SKILL_FILE: &str = "SKILL.md";

/// How many names below `.vak/prompts/` a carried imported file may have
/// (directories and the file): deeper trees stay on their node.
const MAX_IMPORTED_DEPTH: usize = 8;

/// Whether `path` (relative to the home) is a home-side file: a layer file
/// of `.vak/prompts/`, `.vak/prompts/surface/<kind>/` or
/// `.vak/prompts/agents/<role>/`, any other `.md` file below
/// `.vak/prompts/` (a file a block file may import), a gateway tier file,
/// the shared `.vak/config.toml`, or a skill's
/// `.vak/skills/<name>/SKILL.md`. The directory names must be valid names
/// (`Name` rules: no `..`, no `/`; for an imported file, plain names, none
/// hidden).
pub fn home_side_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let name_ok = |s: &str| {
        vak_prompt_blocks::Name::new(vak_prompt_blocks::NameKind::Role, s).is_ok()
            && !s.starts_with('.')
    };
    match parts.as_slice() {
        [".vak", "gateway", file] => GATEWAY_FILES.contains(file),
        [".vak", "config.toml"] => true,
        [".vak", "skills", dir, file] => name_ok(dir) && *file == SKILL_FILE,
        [".vak", "prompts", file] => LAYER_FILES.contains(file) || imported_file(&parts[2..]),
        [".vak", "prompts", "surface" | "agents", dir, file] => {
            (name_ok(dir) && LAYER_FILES.contains(file)) || imported_file(&parts[2..])
        }
        // A scoped rule of the shared home: `rules/<name>.md`.
        [".vak", "prompts", "rules", file] => file.strip_suffix(".md").is_some_and(name_ok),
        [".vak", "prompts", rest @ ..] => imported_file(rest),
        _ => false,
    }
}

/// Whether `rest` (the names below `.vak/prompts/`) is a file a block file
/// may import: a `.md` file, every name plain and none hidden (an import
/// may not name a hidden one either), at most [`MAX_IMPORTED_DEPTH`] deep.
fn imported_file(rest: &[&str]) -> bool {
    rest.len() <= MAX_IMPORTED_DEPTH
        && rest.iter().all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && !part
                    .chars()
                    .any(|c| c == '\\' || c.is_control() || vak_prompt_blocks::is_forbidden(c))
        })
        && rest.last().is_some_and(|file| file.ends_with(".md"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_home_side_shapes_are_home_side_paths() {
        for good in [
            ".vak/prompts/guardrails.md",
            ".vak/prompts/surface/telegram/identity.md",
            ".vak/prompts/agents/reviewer/operating-rules.md",
            ".vak/gateway/bots.json",
            ".vak/gateway/allowlist.json",
            ".vak/config.toml",
            ".vak/skills/changelog/SKILL.md",
            // Files a block file may import.
            ".vak/prompts/notes.md",
            ".vak/prompts/parts/tone.md",
            ".vak/prompts/surface/a/b/guardrails.md",
            ".vak/prompts/rules/payments.md",
        ] {
            assert!(home_side_path(good), "{good}");
        }
        for bad in [
            "../etc/passwd",
            ".vak/prompts/../../x.md",
            ".vak/prompts/agents/../guardrails.md",
            ".vak/prompts/agents/./guardrails.md",
            ".vak/prompts/notes.txt",
            ".vak/prompts/.hidden.md",
            ".vak/prompts/a/b/c/d/e/f/g/h/deep.md",
            ".vak/gateway/secrets/helpdesk",
            ".vak/skills/../SKILL.md",
            ".vak/skills/.hidden/SKILL.md",
            ".vak/skills/changelog/script.sh",
            ".vak/skills/SKILL.md",
            ".vak/prompts/config.toml",
            "/.vak/prompts/guardrails.md",
            ".vak/prompts/agents//guardrails.md",
            ".vak/prompts/agents/.hidden/guardrails.md",
            // The managed layer is the machine's, and so is this home's pin
            // of its keys: neither travels with a store.
            ".vak/managed-keys.toml",
            ".vak/prompts/rules/.hidden.md",
            ".vak/prompts/rules/notes.txt",
            ".vak/prompts/rules/../guardrails.md",
            ".vak/prompts/rules/.md",
            // A name a reader cannot see as it is (a bidi override).
            ".vak/prompts/parts/a\u{202e}b.md",
        ] {
            assert!(!home_side_path(bad), "{bad}");
        }
    }
}
