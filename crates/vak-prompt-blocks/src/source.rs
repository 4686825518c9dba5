//! Where a contributed text came from, as a typed value.
//!
//! A source is built once, by whoever read the text (the loader, the config
//! reader, the runtime), and carried unchanged. Its string form — the one
//! ledgers, `explain` and JSON show — is a rendering ([`fmt::Display`]);
//! nothing inside the workspace reads it back to learn what the source is.
//! The one exception is a frozen ledger, whose strings are turned back into
//! sources once, where they are read ([`Source::from_wire`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};

use crate::{Block, Name, NameKind, PromptLayer};

/// One of the two gateway files that carry prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GatewayFile {
    /// `bots.json`: `{ "<bot>": { "prompts": { … } } }`.
    Bots,
    /// `allowlist.json`: `{ "<bot>": { "<chat>": { "prompts": { … } } } }`.
    Allowlist,
}

impl GatewayFile {
    /// The file's name.
    pub fn file_name(self) -> &'static str {
        match self {
            GatewayFile::Bots => "bots.json",
            GatewayFile::Allowlist => "allowlist.json",
        }
    }

    /// The tier its prompts are.
    pub fn layer(self) -> PromptLayer {
        match self {
            GatewayFile::Bots => PromptLayer::Bot,
            GatewayFile::Allowlist => PromptLayer::Chat,
        }
    }

    /// The file's path under `home`.
    pub fn path(self, home: &Utf8Path) -> Utf8PathBuf {
        // Sized once: every gateway text's provenance is built from it.
        let name = self.file_name();
        let mut path = Utf8PathBuf::with_capacity(home.as_str().len() + 15 + name.len());
        path.push(home);
        path.push(".vak");
        path.push("gateway");
        path.push(name);
        path
    }
}

/// One gateway entry: a bot's (`bots.json#/BOT`) or one of its chats'
/// (`allowlist.json#/BOT/CHAT`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GatewayEntry {
    /// The bot.
    pub bot: Name,
    /// The chat, for a chat's entry.
    pub chat: Option<Name>,
}

impl GatewayEntry {
    /// The file the entry is in.
    pub fn file(&self) -> GatewayFile {
        match self.chat {
            None => GatewayFile::Bots,
            Some(_) => GatewayFile::Allowlist,
        }
    }

    /// The tier the entry's texts are in.
    pub fn layer(&self) -> PromptLayer {
        self.file().layer()
    }

    /// The JSON path from the file's root to the entry.
    pub fn entry_path(&self) -> Vec<&str> {
        let mut path = vec![self.bot.as_str()];
        path.extend(self.chat.as_ref().map(Name::as_str));
        path
    }

    /// `block`'s key of this entry.
    pub fn key(&self, block: Block) -> GatewayKey {
        GatewayKey {
            bot: self.bot.clone(),
            chat: self.chat.clone(),
            block,
        }
    }

    /// `bot `helpdesk`` or `chat `42` of bot `helpdesk``, for messages.
    pub fn describe(&self) -> String {
        match &self.chat {
            None => format!("bot `{}`", self.bot),
            Some(chat) => format!("chat `{chat}` of bot `{}`", self.bot),
        }
    }
}

impl fmt::Display for GatewayEntry {
    /// `bots.json#/<bot>` or `allowlist.json#/<bot>/<chat>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#/{}", self.file().file_name(), self.bot)?;
        if let Some(chat) = &self.chat {
            write!(f, "/{chat}")?;
        }
        Ok(())
    }
}

/// One key of one gateway entry: a bot's (`bots.json#/BOT/prompts/KEY`) or
/// one of its chats' (`allowlist.json#/BOT/CHAT/prompts/KEY`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GatewayKey {
    /// The bot.
    pub bot: Name,
    /// The chat, for a chat's key.
    pub chat: Option<Name>,
    /// The block the key holds; one of [`Block::EDITABLE`].
    pub block: Block,
}

impl GatewayKey {
    /// The entry the key is in.
    pub fn entry(&self) -> GatewayEntry {
        GatewayEntry {
            bot: self.bot.clone(),
            chat: self.chat.clone(),
        }
    }

    /// The file the entry is in.
    pub fn file(&self) -> GatewayFile {
        match self.chat {
            None => GatewayFile::Bots,
            Some(_) => GatewayFile::Allowlist,
        }
    }

    /// The tier the key's text is in.
    pub fn layer(&self) -> PromptLayer {
        self.file().layer()
    }

    /// The key as the loader reports it and the history records it by
    /// (`bots.json#/helpdesk/prompts/identity`).
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// The JSON path from the file's root to the entry.
    pub fn entry_path(&self) -> Vec<&str> {
        let mut path = vec![self.bot.as_str()];
        path.extend(self.chat.as_ref().map(Name::as_str));
        path
    }

    /// `bot `helpdesk`` or `chat `42` of bot `helpdesk``, for messages.
    pub fn describe(&self) -> String {
        self.entry().describe()
    }
}

impl fmt::Display for GatewayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#/{}", self.file().file_name(), self.bot)?;
        if let Some(chat) = &self.chat {
            write!(f, "/{chat}")?;
        }
        write!(f, "/prompts/{}", self.block.wire_name())
    }
}

/// Where one contributed (or refused) text came from.
///
/// Cargo's `Value<T>` definition and gix-config's `Metadata` are the models:
/// the value knows its source as data, and the string people read is
/// rendered from it. [`fmt::Display`] renders exactly the strings ledgers
/// have always recorded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A file (or, for a refusal, a directory), by its path.
    File(Utf8PathBuf),
    /// One key of one gateway entry.
    Gateway(GatewayKey),
    /// A place in a gateway file that is not one prompt key (an entry, its
    /// `prompts` object, an unknown key), named when it is refused.
    /// `pointer` is the JSON pointer after the `#`, starting with `/`.
    GatewayPointer {
        /// The file.
        file: GatewayFile,
        /// The JSON pointer into it, already escaped for people.
        pointer: String,
    },
    /// Text shipped in the binary (`builtin:<name>`).
    Builtin(Cow<'static, str>),
    /// Text the runtime derives (`runtime:<name>`).
    Runtime(Cow<'static, str>),
    /// A change of a session ledger's own (its frozen prefix, its layer
    /// list), at the [`LEDGER_LAYER`]: the sentence saying what changed,
    /// rendered as it is.
    Ledger(Cow<'static, str>),
    /// A key of a `config.toml` (`<file>#<key>` or `<file>#<key>.<name>`).
    ConfigKey {
        /// The config file: shared by every key of it, so a composition
        /// that names many keys of one file does not copy its path for each.
        file: Arc<Utf8Path>,
        /// The dotted key: `model`, `prompts.max_tokens`, `permissions`,
        /// `mcp.servers`, or a key trust demoted (`hooks`, …).
        key: Cow<'static, str>,
        /// The user's name under the key: a permission list's kind, an MCP
        /// server's name.
        name: Option<String>,
    },
}

/// The layer name a change of a ledger's own is reported at: what changed
/// is the ledger, not a layer of the chain.
pub const LEDGER_LAYER: &str = "ledger";

/// The config key MCP servers are listed under.
pub const MCP_SERVERS_KEY: &str = "mcp.servers";

impl Source {
    /// A file's source.
    pub fn file(path: impl Into<Utf8PathBuf>) -> Self {
        Source::File(path.into())
    }

    /// The path, for a file.
    pub fn path(&self) -> Option<&Utf8Path> {
        match self {
            Source::File(path) => Some(path),
            _ => None,
        }
    }

    /// The config file, for a config key.
    pub fn config_file(&self) -> Option<&Utf8Path> {
        match self {
            Source::ConfigKey { file, .. } => Some(&**file),
            _ => None,
        }
    }

    /// The gateway key, for a gateway text.
    pub fn gateway_key(&self) -> Option<&GatewayKey> {
        match self {
            Source::Gateway(key) => Some(key),
            _ => None,
        }
    }

    /// The MCP server's name, for an MCP server's config key.
    pub fn mcp_server(&self) -> Option<&str> {
        match self {
            Source::ConfigKey {
                key,
                name: Some(name),
                ..
            } if key == MCP_SERVERS_KEY => Some(name),
            _ => None,
        }
    }

    /// The source a frozen ledger recorded as `wire`, for a descriptor of
    /// `block` at `layer` (both wire names): the one place a source string
    /// is read back, where the ledger is read. The layer and block say
    /// which kinds of source are possible, so a file whose path holds a `#`
    /// or starts with `builtin:` stays a file. Whatever is read,
    /// [`fmt::Display`] renders `wire` again, byte for byte.
    pub fn from_wire(layer: &str, block: &str, wire: &str) -> Source {
        if layer == LEDGER_LAYER {
            return Source::Ledger(Cow::Owned(wire.to_owned()));
        }
        let gateway =
            layer == PromptLayer::Bot.wire_name() || layer == PromptLayer::Chat.wire_name();
        if layer == PromptLayer::Seed.wire_name()
            && let Some(name) = wire.strip_prefix("builtin:")
        {
            return Source::Builtin(Cow::Owned(name.to_owned()));
        }
        if layer == PromptLayer::Runtime.wire_name() {
            // The file is always a `config.toml`; cut at its first
            // `config.toml#mcp.servers.`, so a server named with a `#` (a
            // quoted TOML key) keeps its whole name.
            const AFTER_FILE: &str = "#mcp.servers.";
            if block == Block::Mcp.wire_name()
                && let Some(at) = wire.find("config.toml#mcp.servers.")
            {
                let (file, name) = wire.split_at(at + "config.toml".len());
                let name = &name[AFTER_FILE.len()..];
                return Source::ConfigKey {
                    file: Utf8Path::new(file).into(),
                    key: Cow::Borrowed(MCP_SERVERS_KEY),
                    name: Some(name.to_owned()),
                };
            }
            if let Some(name) = wire.strip_prefix("runtime:") {
                return Source::Runtime(Cow::Owned(name.to_owned()));
            }
        }
        if gateway && let Some(source) = gateway_from_wire(wire) {
            return source;
        }
        Source::File(wire.into())
    }
}

/// A gateway key or pointer as [`Source`]'s rendering writes it; `None`
/// when `wire` is not one.
fn gateway_from_wire(wire: &str) -> Option<Source> {
    let (file, pointer) = wire.split_once('#')?;
    let file = [GatewayFile::Bots, GatewayFile::Allowlist]
        .into_iter()
        .find(|f| f.file_name() == file)?;
    let parts: Vec<&str> = pointer.strip_prefix('/')?.split('/').collect();
    let key = match (file, parts.as_slice()) {
        (GatewayFile::Bots, [bot, "prompts", block]) => {
            Some((Name::new(NameKind::Bot, bot).ok(), None, block))
        }
        (GatewayFile::Allowlist, [bot, chat, "prompts", block]) => Some((
            Name::new(NameKind::Bot, bot).ok(),
            Name::new(NameKind::Chat, chat).ok(),
            block,
        )),
        _ => None,
    };
    if let Some((Some(bot), chat, block)) = key
        && (file == GatewayFile::Bots || chat.is_some())
        && let Ok(block) = block.parse::<Block>()
        && Block::EDITABLE.contains(&block)
    {
        return Some(Source::Gateway(GatewayKey { bot, chat, block }));
    }
    Some(Source::GatewayPointer {
        file,
        pointer: pointer.to_owned(),
    })
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => f.write_str(path.as_str()),
            Source::Gateway(key) => key.fmt(f),
            Source::GatewayPointer { file, pointer } => {
                write!(f, "{}#{pointer}", file.file_name())
            }
            Source::Builtin(name) => write!(f, "builtin:{name}"),
            Source::Runtime(name) => write!(f, "runtime:{name}"),
            Source::Ledger(sentence) => f.write_str(sentence),
            Source::ConfigKey { file, key, name } => {
                write!(f, "{file}#{key}")?;
                match name {
                    Some(name) => write!(f, ".{name}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl serde::Serialize for Source {
    /// As its rendering: the string JSON output has always carried.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name(kind: NameKind, raw: &str) -> Name {
        Name::new(kind, raw).unwrap()
    }

    #[test]
    fn renders_the_strings_ledgers_have_always_held() {
        let bot = name(NameKind::Bot, "helpdesk");
        let chat = name(NameKind::Chat, "-100123");
        let cases = [
            (
                Source::file("/p/.vak/prompts/identity.md"),
                "/p/.vak/prompts/identity.md",
            ),
            (
                Source::Gateway(GatewayKey {
                    bot: bot.clone(),
                    chat: None,
                    block: Block::Identity,
                }),
                "bots.json#/helpdesk/prompts/identity",
            ),
            (
                Source::Gateway(GatewayKey {
                    bot: bot.clone(),
                    chat: Some(chat),
                    block: Block::SurfaceNote,
                }),
                "allowlist.json#/helpdesk/-100123/prompts/surface-note",
            ),
            (
                Source::GatewayPointer {
                    file: GatewayFile::Bots,
                    pointer: "/helpdesk/prompts".into(),
                },
                "bots.json#/helpdesk/prompts",
            ),
            (Source::Builtin("identity".into()), "builtin:identity"),
            (
                Source::Runtime("surface/chat".into()),
                "runtime:surface/chat",
            ),
            (
                Source::ConfigKey {
                    file: Utf8Path::new("/h/.vak/config.toml").into(),
                    key: "model".into(),
                    name: None,
                },
                "/h/.vak/config.toml#model",
            ),
            (
                Source::ConfigKey {
                    file: Utf8Path::new("/work/issue#12/.vak/config.toml").into(),
                    key: Cow::Borrowed(MCP_SERVERS_KEY),
                    name: Some("db".into()),
                },
                "/work/issue#12/.vak/config.toml#mcp.servers.db",
            ),
        ];
        for (source, wire) in cases {
            assert_eq!(source.to_string(), wire);
            assert_eq!(
                serde_json::to_value(&source).unwrap(),
                serde_json::json!(wire)
            );
        }
        assert_eq!(
            GatewayEntry { bot, chat: None }.to_string(),
            "bots.json#/helpdesk"
        );
    }

    #[test]
    fn a_ledger_string_is_read_as_what_its_layer_allows() {
        // A project file whose name looks like a builtin, a gateway key or
        // a config key is a file: only the seed has builtins, only the bot
        // and chat tiers gateway keys, only the runtime's MCP servers keys.
        for wire in [
            "builtin:identity",
            "bots.json#/a/prompts/identity",
            "/p#mcp.servers.x",
        ] {
            assert_eq!(
                Source::from_wire("project", "mcp", wire),
                Source::File(wire.into())
            );
        }
        assert_eq!(
            Source::from_wire("runtime", "mcp", "/h/.vak/config.toml#mcp.servers.db").mcp_server(),
            Some("db")
        );
        // A server whose quoted name holds the separator keeps all of it.
        let odd = "/h/.vak/config.toml#mcp.servers.a#mcp.servers.b";
        let read = Source::from_wire("runtime", "mcp", odd);
        assert_eq!(read.mcp_server(), Some("a#mcp.servers.b"));
        assert_eq!(read.to_string(), odd);
        assert!(matches!(
            Source::from_wire("chat", "identity", "allowlist.json#/b/c/prompts/identity"),
            Source::Gateway(GatewayKey { chat: Some(_), .. })
        ));
    }

    fn layers() -> impl Strategy<Value = PromptLayer> {
        proptest::sample::select(
            PromptLayer::CHAIN
                .into_iter()
                .chain([PromptLayer::Runtime])
                .collect::<Vec<_>>(),
        )
    }

    /// Every layer name a ledger may hold: the chain's and the ledger's own.
    fn wire_layers() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            layers().prop_map(PromptLayer::wire_name),
            Just(LEDGER_LAYER)
        ]
    }

    fn blocks() -> impl Strategy<Value = Block> {
        proptest::sample::select(Block::ALL.to_vec())
    }

    fn names(kind: NameKind) -> impl Strategy<Value = Name> {
        "[a-z0-9_][a-z0-9_-]{0,8}".prop_map(move |raw| Name::new(kind, &raw).unwrap())
    }

    /// The sources the loader makes, each with the layer and block it
    /// makes them for.
    fn made() -> impl Strategy<Value = (PromptLayer, Block, Source)> {
        let path = "/[a-z#:./ ]{0,20}";
        prop_oneof![
            (layers(), blocks(), path).prop_map(|(l, b, p)| (l, b, Source::file(p))),
            (
                names(NameKind::Bot),
                proptest::option::of(names(NameKind::Chat)),
                proptest::sample::select(Block::EDITABLE.to_vec()),
            )
                .prop_map(|(bot, chat, block)| {
                    let key = GatewayKey { bot, chat, block };
                    (key.layer(), block, Source::Gateway(key))
                }),
            (blocks(), "[a-z-]{1,12}").prop_map(|(b, n)| (
                PromptLayer::Seed,
                b,
                Source::Builtin(n.into())
            )),
            "[a-z/]{1,12}".prop_map(|n| (
                PromptLayer::Runtime,
                Block::Surface,
                Source::Runtime(n.into())
            )),
            // A config file is always a `config.toml`; the server's name may
            // hold anything a quoted TOML key can, the separator included.
            (path, "[a-z0-9_.#-]{1,12}|a#mcp\\.servers\\.b").prop_map(|(dir, name)| {
                let source = Source::ConfigKey {
                    file: Utf8PathBuf::from(format!("{dir}/.vak/config.toml")).into(),
                    key: Cow::Borrowed(MCP_SERVERS_KEY),
                    name: Some(name),
                };
                (PromptLayer::Runtime, Block::Mcp, source)
            }),
        ]
    }

    proptest! {
        /// Whatever a ledger holds, reading it and rendering it again gives
        /// back the same bytes: a ledger re-written by this build is the
        /// ledger the previous one wrote.
        #[test]
        fn any_ledger_string_renders_back_unchanged(
            layer in wire_layers(),
            block in blocks(),
            wire in "\\PC{0,40}",
        ) {
            let read = Source::from_wire(layer, block.wire_name(), &wire);
            prop_assert_eq!(read.to_string(), wire);
        }

        /// A source the loader makes, rendered into a ledger and read back,
        /// is the same typed source, except that a file path (whose layer
        /// allows no other reading) may be read as a file in every case.
        #[test]
        fn a_made_source_survives_the_ledger((layer, block, source) in made()) {
            let wire = source.to_string();
            let read = Source::from_wire(layer.wire_name(), block.wire_name(), &wire);
            prop_assert_eq!(read.to_string(), wire);
            if !matches!(source, Source::File(_)) {
                prop_assert_eq!(&read, &source);
            }
        }

        /// A descriptor carrying a made source, written to a ledger and read
        /// back: the same JSON bytes when written again, the same digest and
        /// the same fingerprint.
        #[test]
        fn a_descriptor_survives_the_ledger((layer, block, source) in made(), text in "\\PC{0,20}") {
            let provenance = crate::Provenance::new(layer, crate::Origin::Home, source);
            let made = crate::PromptLayerDescriptor::of(block, &provenance, &text);
            let wire = serde_json::to_string(&made).unwrap();
            let read: crate::PromptLayerDescriptor = serde_json::from_str(&wire).unwrap();
            prop_assert_eq!(serde_json::to_string(&read).unwrap(), wire);
            prop_assert_eq!(&read.digest, &made.digest);
            prop_assert_eq!(
                crate::fingerprint(std::slice::from_ref(&read)),
                crate::fingerprint(std::slice::from_ref(&made))
            );
        }
    }
}
