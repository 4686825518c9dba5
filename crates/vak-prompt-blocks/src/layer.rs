use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use camino::{Utf8Path, Utf8PathBuf};

use crate::{BlocksError, GatewayKey, Source};

/// A tier of the prompt chain.
///
/// Declaration order is ascending precedence: `Seed` is widest, `Agent`
/// narrowest. `Runtime` is not a tier users write; it labels text the runtime
/// derives (the surface line, inventories) and never competes with the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PromptLayer {
    /// The shipped, code-owned prompt built into the binary.
    Seed,
    /// `/etc/vak/prompts/`: the machine administrator's floor, read-only to
    /// vak. Its guardrails and surface notes come first after the seed's;
    /// for identity and operating rules it is the widest user tier unless
    /// its config locks the block.
    Managed,
    /// `$VAK_HOME/.vak/prompts/`: the user's own defaults for every project.
    Shared,
    /// `<project>/.vak/prompts/`: checked into (or cloned with) a project.
    Project,
    /// `surface/<kind>/` under the shared and project prompt directories.
    Surface,
    /// A gateway bot's entry in `bots.json`.
    Bot,
    /// A chat's entry under its bot in `allowlist.json`.
    Chat,
    /// A worker role's directory under `agents/<role>/`.
    Agent,
    /// Derived by the runtime at resolution time.
    Runtime,
}

impl PromptLayer {
    /// The tiers a user or operator can write, widest first.
    pub const CHAIN: [PromptLayer; 8] = [
        PromptLayer::Seed,
        PromptLayer::Managed,
        PromptLayer::Shared,
        PromptLayer::Project,
        PromptLayer::Surface,
        PromptLayer::Bot,
        PromptLayer::Chat,
        PromptLayer::Agent,
    ];

    /// The stable string written to ledgers and JSON. Deliberately separate
    /// from [`label`](Self::label) so a ledger written today still parses
    /// after a build that renames a layer for people.
    pub fn wire_name(self) -> &'static str {
        match self {
            PromptLayer::Seed => "seed",
            PromptLayer::Managed => "managed",
            PromptLayer::Shared => "shared",
            PromptLayer::Project => "project",
            PromptLayer::Surface => "surface",
            PromptLayer::Bot => "bot",
            PromptLayer::Chat => "chat",
            PromptLayer::Agent => "agent",
            PromptLayer::Runtime => "runtime",
        }
    }

    /// A name for people.
    pub fn label(self) -> &'static str {
        match self {
            PromptLayer::Seed => "Built-in seed",
            PromptLayer::Managed => "Managed",
            PromptLayer::Shared => "Shared",
            PromptLayer::Project => "This project",
            PromptLayer::Surface => "Surface",
            PromptLayer::Bot => "Bot",
            PromptLayer::Chat => "Chat",
            PromptLayer::Agent => "Agent role",
            PromptLayer::Runtime => "Runtime",
        }
    }
}

impl fmt::Display for PromptLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl FromStr for PromptLayer {
    type Err = BlocksError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PromptLayer::CHAIN
            .into_iter()
            .chain([PromptLayer::Runtime])
            .find(|layer| layer.wire_name() == s)
            .ok_or_else(|| BlocksError::UnknownLayer(s.to_owned()))
    }
}

/// Where a contributed text physically came from. Coarser than the layer:
/// the surface and agent tiers have both a home and a project directory, and
/// trust is decided by origin, not by tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// Compiled into the binary.
    BuiltIn,
    /// The managed layer's directory (`/etc/vak/prompts/`): the machine
    /// administrator's, always applied, never written by vak.
    Managed,
    /// A file under `$VAK_HOME`: user-owned, always trusted.
    Home,
    /// A file under the project directory: trusted only when the user says so.
    Project,
    /// Gateway JSON under `$VAK_HOME/.vak/gateway/`: operator-owned.
    Gateway,
    /// Derived by the runtime.
    Runtime,
}

impl Origin {
    /// A short lowercase name, used in JSON.
    pub fn wire_name(self) -> &'static str {
        match self {
            Origin::BuiltIn => "built-in",
            Origin::Managed => "managed",
            Origin::Home => "home",
            Origin::Project => "project",
            Origin::Gateway => "gateway",
            Origin::Runtime => "runtime",
        }
    }
}

/// The origin of one contributed text: which tier, which physical source,
/// and the typed [`Source`] that names it.
///
/// Built once by the loader and carried unchanged to descriptors, so the
/// ledger and `explain` can never disagree about where text came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Provenance {
    /// The tier the text belongs to.
    pub layer: PromptLayer,
    /// The physical source, for trust.
    pub origin: Origin,
    /// The file, gateway key, config key, or built-in or runtime name.
    pub source: Source,
    /// For a signed managed file, the key that signed it
    /// (`ed25519:<base64>`), carried into its descriptor.
    pub signed_by: Option<String>,
}

impl Provenance {
    /// Provenance for text read from `source` at `layer`.
    pub fn new(layer: PromptLayer, origin: Origin, source: impl Into<Source>) -> Self {
        Provenance {
            layer,
            origin,
            source: source.into(),
            signed_by: None,
        }
    }

    /// Provenance for a managed-layer file at `path`, signed by
    /// `signed_by` when the managed layer requires signatures.
    pub fn managed(path: impl Into<Utf8PathBuf>, signed_by: Option<String>) -> Self {
        Provenance {
            signed_by,
            ..Provenance::new(
                PromptLayer::Managed,
                Origin::Managed,
                Source::File(path.into()),
            )
        }
    }

    /// Provenance for text shipped in the binary.
    pub fn seed(name: impl Into<Cow<'static, str>>) -> Self {
        Provenance::new(
            PromptLayer::Seed,
            Origin::BuiltIn,
            Source::Builtin(name.into()),
        )
    }

    /// Provenance for text the runtime derives.
    pub fn runtime(name: impl Into<Cow<'static, str>>) -> Self {
        Provenance::new(
            PromptLayer::Runtime,
            Origin::Runtime,
            Source::Runtime(name.into()),
        )
    }

    /// Provenance for a gateway key's text.
    pub fn gateway(key: GatewayKey) -> Self {
        Provenance::new(key.layer(), Origin::Gateway, Source::Gateway(key))
    }
}

impl From<Utf8PathBuf> for Source {
    fn from(path: Utf8PathBuf) -> Self {
        Source::File(path)
    }
}

/// A path given as a string is a file's path: sources of every other kind
/// are built as what they are, never from their rendering.
impl From<&str> for Source {
    fn from(path: &str) -> Self {
        Source::File(path.into())
    }
}

/// As for `&str`: a file's path.
impl From<String> for Source {
    fn from(path: String) -> Self {
        Source::File(path.into())
    }
}

impl From<&Utf8Path> for Source {
    fn from(path: &Utf8Path) -> Self {
        Source::File(path.to_owned())
    }
}

impl From<&Utf8PathBuf> for Source {
    fn from(path: &Utf8PathBuf) -> Self {
        Source::File(path.clone())
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} layer `{}`",
            self.layer,
            crate::Escaped(&self.source.to_string())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_is_ascending_precedence() {
        let mut sorted = PromptLayer::CHAIN;
        sorted.sort();
        assert_eq!(sorted, PromptLayer::CHAIN);
    }

    #[test]
    fn wire_names_round_trip_and_are_frozen() {
        let names: Vec<_> = PromptLayer::CHAIN.iter().map(|l| l.wire_name()).collect();
        assert_eq!(
            names,
            [
                "seed", "managed", "shared", "project", "surface", "bot", "chat", "agent"
            ]
        );
        for layer in PromptLayer::CHAIN.into_iter().chain([PromptLayer::Runtime]) {
            assert_eq!(layer.wire_name().parse::<PromptLayer>(), Ok(layer));
            assert_ne!(layer.wire_name(), layer.label());
        }
    }

    #[test]
    fn provenance_display_names_layer_and_source() {
        let p = Provenance::new(
            PromptLayer::Project,
            Origin::Project,
            Utf8PathBuf::from("./.vak/prompts/identity.md"),
        );
        assert_eq!(p.to_string(), "project layer `./.vak/prompts/identity.md`");
    }
}
