//! The names a home and a project know, for a command line to offer as
//! completions: roles with a directory, gateway bots and their chats.

use camino::Utf8Path;
use vak_prompt_blocks::{Name, NameKind};
use vak_prompt_loader::{GatewayFile, GatewayTable, Shape, read_gateway};

use crate::Selectors;

/// Every name a selector can take here, each valid (so safe to print),
/// sorted and without repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownNames {
    /// Roles with a directory under the home or the project.
    pub roles: Vec<Name>,
    /// Bots of `bots.json` and of `allowlist.json`.
    pub bots: Vec<Name>,
    /// Chats of `allowlist.json`, under any bot.
    pub chats: Vec<Name>,
}

/// The names `selectors`' home and project know. Files that cannot be read
/// add nothing: a completion never fails, it offers less.
pub fn known_names(selectors: &Selectors) -> KnownNames {
    let (bots, chats) = gateway_names(&selectors.home);
    KnownNames {
        roles: crate::roles_with_dirs(selectors),
        bots,
        chats,
    }
}

/// The bots and the chats the gateway files of `home` name.
fn gateway_names(home: &Utf8Path) -> (Vec<Name>, Vec<Name>) {
    let mut bots = Vec::new();
    let mut chats = Vec::new();
    if let Ok(Some(doc)) = read_gateway(home, GatewayFile::Bots) {
        bots.extend(
            doc.table
                .bots()
                .filter_map(|bot| Name::new(NameKind::Bot, bot).ok()),
        );
    }
    if let Ok(Some(doc)) = read_gateway(home, GatewayFile::Allowlist)
        && let GatewayTable::Allowlist(entries) = &doc.table
    {
        for (bot, entry) in entries {
            bots.extend(Name::new(NameKind::Bot, bot).ok());
            if let Shape::Is(entry) = entry {
                chats.extend(
                    entry
                        .keys()
                        .filter_map(|chat| Name::new(NameKind::Chat, chat).ok()),
                );
            }
        }
    }
    for names in [&mut bots, &mut chats] {
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup_by(|a, b| a.as_str() == b.as_str());
    }
    (bots, chats)
}
