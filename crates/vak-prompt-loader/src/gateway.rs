//! The gateway tiers: `bots.json` (bot) and `allowlist.json` (chat).
//!
//! Each bot or chat entry may carry a `prompts` object whose keys are block
//! wire names and whose values are strings. A present key decides, an empty
//! string means deliberately nothing, an absent key inherits: the same rule
//! as file presence in a directory layer.

use camino::Utf8Path;
use serde_json::Value;
use vak_prompt_blocks::{Block, Name, Origin, PromptLayer, Provenance};

use crate::chain::{Contribution, Skipped};
use crate::safe_read::read_safely;

/// The directory holding the gateway's JSON files.
fn gateway_dir(home: &Utf8Path) -> camino::Utf8PathBuf {
    home.join(".vak").join("gateway")
}

fn read_json(
    path: &Utf8Path,
    root: &Utf8Path,
    layer: PromptLayer,
    skipped: &mut Vec<Skipped>,
) -> Option<Value> {
    let provenance = Provenance::new(layer, Origin::Gateway, path.as_str());
    match read_safely(path, root) {
        Ok(Some(text)) => match serde_json::from_str(&text) {
            Ok(value) => Some(value),
            Err(error) => {
                skipped.push(Skipped {
                    block: None,
                    provenance,
                    reason: format!("is not valid JSON: {error}"),
                });
                None
            }
        },
        Ok(None) => None,
        Err(refusal) => {
            skipped.push(Skipped {
                block: None,
                provenance,
                reason: refusal.to_string(),
            });
            None
        }
    }
}

/// Contributions from one entry's `prompts` object. `key_prefix` is the
/// JSON pointer of the entry, e.g. `bots.json#/helpdesk`.
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
        skipped.push(Skipped {
            block: None,
            provenance: Provenance::new(layer, Origin::Gateway, format!("{key_prefix}/prompts")),
            reason: "is not an object of block names to strings".to_owned(),
        });
        return;
    };
    // Read in the fixed block order, not the JSON's key order, so the
    // contribution list is deterministic.
    for block in Block::EDITABLE {
        let Some(value) = prompts.get(block.wire_name()) else {
            continue;
        };
        let provenance = Provenance::new(
            layer,
            Origin::Gateway,
            format!("{key_prefix}/prompts/{block}"),
        );
        match value.as_str() {
            Some(text) => contributions.push(Contribution {
                block,
                provenance,
                text: text.to_owned(),
            }),
            None => skipped.push(Skipped {
                block: Some(block),
                provenance,
                reason: "is not a string".to_owned(),
            }),
        }
    }
    for key in prompts.keys() {
        if !Block::EDITABLE.iter().any(|b| b.wire_name() == key) {
            let reason = match key.parse::<Block>() {
                Ok(_) => "names a code-owned block that no layer may set".to_owned(),
                Err(_) => "is not a block name (expected identity, operating-rules, guardrails or surface-note)".to_owned(),
            };
            skipped.push(Skipped {
                block: None,
                provenance: Provenance::new(
                    layer,
                    Origin::Gateway,
                    format!("{key_prefix}/prompts/{key}"),
                ),
                reason,
            });
        }
    }
}

/// Append the bot and chat tiers' contributions.
pub(crate) fn load_gateway(
    home: &Utf8Path,
    bot: Option<&Name>,
    chat: Option<&Name>,
    contributions: &mut Vec<Contribution>,
    skipped: &mut Vec<Skipped>,
) {
    let Some(bot) = bot else { return };
    let dir = gateway_dir(home);
    if let Some(bots) = read_json(&dir.join("bots.json"), &dir, PromptLayer::Bot, skipped)
        && let Some(entry) = bots.get(bot.as_str())
    {
        entry_prompts(
            entry,
            &format!("bots.json#/{bot}"),
            PromptLayer::Bot,
            contributions,
            skipped,
        );
    }
    let Some(chat) = chat else { return };
    if let Some(allow) = read_json(
        &dir.join("allowlist.json"),
        &dir,
        PromptLayer::Chat,
        skipped,
    ) && let Some(entry) = allow.get(bot.as_str()).and_then(|b| b.get(chat.as_str()))
    {
        entry_prompts(
            entry,
            &format!("allowlist.json#/{bot}/{chat}"),
            PromptLayer::Chat,
            contributions,
            skipped,
        );
    }
}
