//! The effective config: home then project `config.toml`, after the
//! project's privileged keys are demoted, with the source of every value.

use std::sync::Arc;

use camino::Utf8Path;
use vak_prompt_blocks::{MCP_SERVERS_KEY, Origin, PromptLayer, Provenance, Source};
use vak_prompt_loader::ConfigFile;
use vak_prompt_trust::{DemotedKey, Trust, demote_config, would_demote};

use crate::resolve::Demotion;

/// A config value and the file that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Home or project.
    pub origin: Origin,
    /// The file and key it came from: always a [`Source::ConfigKey`],
    /// rendered `<file>#<key>` for people.
    pub source: Source,
}

impl<T> Sourced<T> {
    /// The file the value came from.
    pub fn file(&self) -> &str {
        self.source.config_file().map_or("", Utf8Path::as_str)
    }
}

/// Which permission list a rule is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PermissionKind {
    /// Runs without asking.
    Allow,
    /// Asks the person first.
    Ask,
    /// Never runs.
    Deny,
}

impl PermissionKind {
    /// `allow`, `ask` or `deny`.
    pub fn wire_name(self) -> &'static str {
        match self {
            PermissionKind::Allow => "allow",
            PermissionKind::Ask => "ask",
            PermissionKind::Deny => "deny",
        }
    }
}

/// One MCP server from `mcp.servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// Its name.
    pub name: String,
    /// Its inventory line in the prompt.
    pub line: String,
}

/// What the config files say, after demotion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EffectiveConfig {
    /// `model`: the narrowest file that sets it.
    pub model: Option<Sourced<String>>,
    /// `prompts.max_tokens` from every file that sets it, widest first; the
    /// budget applies its own rule for who may raise the cap.
    pub max_tokens: Vec<Sourced<i64>>,
    /// Every permission rule, with where it came from.
    pub permissions: Vec<(PermissionKind, Sourced<String>)>,
    /// MCP servers, sorted by name within each file, home first.
    pub mcp_servers: Vec<Sourced<McpServer>>,
    /// Config keys or values that were malformed, as warnings.
    pub warnings: Vec<String>,
}

impl EffectiveConfig {
    /// Put the managed layer's `prompts.max_tokens` first, widest: the
    /// budget holds every other value under it.
    pub(crate) fn add_managed(&mut self, managed: &vak_prompt_loader::ManagedLayer) {
        if let (Some(value), Some(file)) = (managed.max_tokens, &managed.config) {
            self.max_tokens.insert(
                0,
                Sourced {
                    value,
                    origin: Origin::Managed,
                    source: Source::ConfigKey {
                        file: file.clone().into(),
                        key: "prompts.max_tokens".into(),
                        name: None,
                    },
                },
            );
        }
    }
}

fn mcp_line(name: &str, server: &toml::Table) -> String {
    let text = |key: &str| server.get(key).and_then(toml::Value::as_str);
    let mut line = String::with_capacity(48 + name.len());
    for part in ["- `", name, "` ("] {
        line.push_str(part);
    }
    if let Some(command) = text("command") {
        line.push_str("command `");
        line.push_str(command);
        let args = server.get("args").and_then(toml::Value::as_array);
        for arg in args.into_iter().flatten().filter_map(toml::Value::as_str) {
            line.push(' ');
            line.push_str(arg);
        }
        line.push('`');
    } else if let Some(url) = text("url") {
        line.push_str("at ");
        line.push_str(url);
    } else {
        line.push_str("configured");
    }
    line.push(')');
    if let Some(description) = text("description") {
        line.push_str(": ");
        line.push_str(description);
    }
    line
}

/// `value` with its source: the file and the fixed dotted `key`, with the
/// user's `name` under it when the key is a table of them.
fn sourced<T>(file: &ConfigFile, value: T, key: &'static str, name: Option<&str>) -> Sourced<T> {
    Sourced {
        value,
        origin: file.origin,
        source: Source::ConfigKey {
            file: file.path.clone(),
            key: key.into(),
            name: name.map(str::to_owned),
        },
    }
}

/// The table at `path` in `table`, or `None` when it is absent; one that
/// is there but not a table (`[[prompts]]`, `mcp = "none"`) is warned about,
/// naming the file, rather than passed over as if it were absent.
fn section<'t>(
    table: &'t toml::Table,
    path: &[&str],
    file: &ConfigFile,
    warnings: &mut Vec<String>,
) -> Option<&'t toml::Table> {
    let mut at = table;
    for (depth, key) in path.iter().enumerate() {
        match at.get(*key) {
            None => return None,
            Some(toml::Value::Table(inner)) => at = inner,
            Some(_) => {
                // Only the innermost is said: an outer one that is not a
                // table was said when it was asked for alone.
                if depth + 1 == path.len() {
                    warnings.push(format!(
                        "`{}` in `{}` is not a table; ignored",
                        path.join("."),
                        file.path
                    ));
                }
                return None;
            }
        }
    }
    Some(at)
}

/// What composing many chains of one snapshot does once rather than per
/// chain: an untrusted config's demotion, and the structural containment
/// of a text. A check crossing every role with every layer composes an
/// untrusted clone's large config (12,000 keys) thousands of times; the
/// snapshot shares one parsed table among them, and this memo shares its
/// demoted copy. Every chain of a check contains the same layer texts
/// (a list of rules is parsed as Markdown to be contained); this memo
/// contains each once, keyed by the `blake3` digest of the text. It
/// belongs to one check and is dropped with it, never kept for the
/// process.
#[derive(Debug, Default)]
pub struct ComposeMemo {
    /// Each shared table demoted, found by pointer, with the original
    /// kept alive here so its address is never reused for another table.
    demoted: Vec<(Arc<toml::Table>, Arc<toml::Table>, Vec<DemotedKey>)>,
    /// `contain_markdown` of each text by digest: `None` when it keeps the
    /// text as it is.
    contained: std::collections::HashMap<[u8; 32], Option<Arc<str>>>,
}

/// Texts shorter than this are contained each time: digesting one costs
/// about what its containment's first look does.
const CONTAIN_MEMO_MIN_BYTES: usize = 256;

impl ComposeMemo {
    /// An empty memo.
    pub fn new() -> Self {
        ComposeMemo::default()
    }

    /// [`contain_markdown`](vak_prompt_blocks::contain_markdown) of
    /// `text`, each text contained once per memo.
    pub(crate) fn contain<'t>(&mut self, text: &'t str) -> std::borrow::Cow<'t, str> {
        use std::borrow::Cow;
        // A text its first look passes over costs less than its digest,
        // and that look is taken once here, not again inside.
        if !vak_prompt_blocks::needs_containment(text) {
            return Cow::Borrowed(text);
        }
        if text.len() < CONTAIN_MEMO_MIN_BYTES {
            return vak_prompt_blocks::contain_markdown(text);
        }
        let key = *blake3::hash(text.as_bytes()).as_bytes();
        let contained =
            self.contained
                .entry(key)
                .or_insert_with(|| match vak_prompt_blocks::contain_markdown(text) {
                    Cow::Borrowed(_) => None,
                    Cow::Owned(owned) => Some(Arc::from(owned)),
                });
        match contained {
            None => Cow::Borrowed(text),
            Some(owned) => Cow::Owned(owned.to_string()),
        }
    }

    /// `table` with [`demote_config`] applied, and what it removed: a
    /// table held elsewhere too (a snapshot's, shared by its chains) is
    /// demoted once per memo; one nobody else holds is demoted and not
    /// kept.
    fn demoted(
        &mut self,
        table: &Arc<toml::Table>,
        trust: Trust,
    ) -> (Arc<toml::Table>, Vec<DemotedKey>) {
        let shared = Arc::strong_count(table) > 1;
        if shared
            && let Some((_, demoted, keys)) =
                self.demoted.iter().find(|(of, ..)| Arc::ptr_eq(of, table))
        {
            return (Arc::clone(demoted), keys.clone());
        }
        let mut copy = toml::Table::clone(table);
        let keys = demote_config(&mut copy, trust);
        let copy = Arc::new(copy);
        if shared {
            self.demoted
                .push((Arc::clone(table), Arc::clone(&copy), keys.clone()));
        }
        (copy, keys)
    }
}

/// Merge the config files, demoting an untrusted project's privileged keys.
pub(crate) fn effective_config(
    configs: &[ConfigFile],
    trust: Trust,
    demoted: &mut Vec<Demotion>,
    memo: &mut ComposeMemo,
) -> EffectiveConfig {
    let mut effective = EffectiveConfig::default();
    for file in configs {
        let file_trust = if file.origin == Origin::Project {
            trust
        } else {
            Trust::Trusted
        };
        // The table is shared (parsed once per snapshot); it is copied only
        // when an untrusted file holds keys demotion removes, and then once
        // per shared table and memo ([`ComposeMemo`]).
        let layer = if file.origin == Origin::Project {
            PromptLayer::Project
        } else {
            PromptLayer::Shared
        };
        let (table, demoted_keys) = if would_demote(&file.table, file_trust) {
            memo.demoted(&file.table, file_trust)
        } else {
            (Arc::clone(&file.table), Vec::new())
        };
        for key in demoted_keys {
            demoted.push(Demotion {
                block: None,
                config_key: Some(key.key.clone()),
                provenance: std::sync::Arc::new(Provenance::new(
                    layer,
                    file.origin,
                    Source::ConfigKey {
                        file: file.path.clone(),
                        key: key.key.clone().into(),
                        name: None,
                    },
                )),
                reason: key.reason,
            });
        }
        match table.get("model") {
            // DECISIONS §7 selects the model by the shared config; a trusted
            // project may choose its own, a clone may not pick what the
            // budget is measured against.
            Some(toml::Value::String(_)) if file_trust == Trust::Untrusted => {
                effective.warnings.push(format!(
                    "`model` in `{}` is ignored: an untrusted project may not choose the model; run `vak trust` on the project to apply it",
                    file.path
                ))
            }
            Some(toml::Value::String(model)) => {
                effective.model = Some(sourced(file, model.clone(), "model", None))
            }
            Some(_) => effective.warnings.push(format!(
                "`model` in `{}` is not a string; ignored",
                file.path
            )),
            None => {}
        }
        let warnings = &mut effective.warnings;
        let prompts = section(&table, &["prompts"], file, warnings);
        let permissions = section(&table, &["permissions"], file, warnings);
        let servers = section(&table, &["mcp"], file, warnings)
            .and_then(|_| section(&table, &["mcp", "servers"], file, warnings));
        if let Some(prompts) = prompts {
            match prompts.get("max_tokens") {
                Some(toml::Value::Integer(n)) => {
                    effective
                        .max_tokens
                        .push(sourced(file, *n, "prompts.max_tokens", None))
                }
                Some(_) => effective.warnings.push(format!(
                    "`prompts.max_tokens` in `{}` is not an integer; ignored",
                    file.path
                )),
                None => {}
            }
        }
        if let Some(permissions) = permissions {
            for kind in [
                PermissionKind::Allow,
                PermissionKind::Ask,
                PermissionKind::Deny,
            ] {
                let key = kind.wire_name();
                let Some(list) = permissions.get(key) else {
                    continue;
                };
                let Some(list) = list.as_array() else {
                    effective.warnings.push(format!(
                        "`permissions.{key}` in `{}` is not a list of strings; ignored",
                        file.path
                    ));
                    continue;
                };
                for rule in list.iter().filter_map(toml::Value::as_str) {
                    effective.permissions.push((
                        kind,
                        sourced(file, rule.to_owned(), "permissions", Some(key)),
                    ));
                }
            }
        }
        if let Some(servers) = servers {
            for (name, server) in servers {
                let Some(server) = server.as_table() else {
                    effective.warnings.push(format!(
                        "`mcp.servers.{name}` in `{}` is not a table; ignored",
                        file.path
                    ));
                    continue;
                };
                effective.mcp_servers.push(sourced(
                    file,
                    McpServer {
                        name: name.clone(),
                        line: mcp_line(name, server),
                    },
                    MCP_SERVERS_KEY,
                    Some(name),
                ));
            }
        }
    }
    effective
}

#[cfg(test)]
mod tests {

    /// Each shape of server reads as one inventory line.
    #[test]
    fn an_mcp_server_is_one_line_of_what_it_runs() {
        let line = |toml: &str| super::mcp_line("docs", &toml.parse::<toml::Table>().unwrap());
        assert_eq!(line("command = \"d\""), "- `docs` (command `d`)");
        assert_eq!(line("command = \"d\"\nargs = []"), "- `docs` (command `d`)");
        assert_eq!(
            line("command = \"d\"\nargs = [\"-p\", 1, \"80\"]\ndescription = \"Docs\""),
            "- `docs` (command `d -p 80`): Docs"
        );
        assert_eq!(line("url = \"http://x\""), "- `docs` (at http://x)");
        assert_eq!(line("description = \"?\""), "- `docs` (configured): ?");
    }

    /// The file of a sourced value is the file's path as it was, found
    /// without parsing `source`: a `#` in a directory name is kept.
    #[test]
    fn a_sourced_value_names_its_file_whatever_the_path_holds() {
        let file = ConfigFile {
            origin: Origin::Project,
            path: camino::Utf8PathBuf::from("/work/issue#12/.vak/config.toml").into(),
            table: std::sync::Arc::new(toml::Table::new()),
        };
        let sourced = sourced(&file, 1500, "prompts.max_tokens", None);
        assert_eq!(sourced.file(), "/work/issue#12/.vak/config.toml");
        assert_eq!(
            sourced.source.to_string(),
            "/work/issue#12/.vak/config.toml#prompts.max_tokens"
        );
    }

    use super::*;

    /// A shared table is demoted once per memo and the result shared; a
    /// table nobody else holds is demoted afresh and never kept; another
    /// memo demotes again.
    #[test]
    fn a_shared_table_is_demoted_once_per_memo() {
        let mut memo = ComposeMemo::new();
        let table: Arc<toml::Table> = Arc::new(
            "hooks = { pre = \"x\" }\n[permissions]\nallow = [\"a\"]\ndeny = [\"b\"]\n"
                .parse()
                .unwrap(),
        );
        let held = Arc::clone(&table);
        let (first, keys) = memo.demoted(&table, Trust::Untrusted);
        assert_eq!(keys.len(), 2);
        assert!(!first.contains_key("hooks"));
        assert!(first["permissions"].get("deny").is_some());
        let (again, keys_again) = memo.demoted(&table, Trust::Untrusted);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(keys, keys_again);
        let (other, _) = ComposeMemo::new().demoted(&table, Trust::Untrusted);
        assert!(!Arc::ptr_eq(&first, &other));
        assert!(held.contains_key("hooks"), "the original is untouched");
        let alone: Arc<toml::Table> = Arc::new("hooks = 1\n".parse().unwrap());
        let (a, _) = memo.demoted(&alone, Trust::Untrusted);
        let (b, _) = memo.demoted(&alone, Trust::Untrusted);
        assert!(!Arc::ptr_eq(&a, &b));
    }
}
