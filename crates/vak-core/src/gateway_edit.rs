//! One change of one gateway key: the lifecycle
//! the admin API's gateway saves, resets and reverts run, as a layer file's
//! change runs [`Core::save_block_by`]. The caller parses and renders; the
//! checks, the budget on every chain the key reaches, the history and the
//! write are here.

use camino::Utf8PathBuf;
use thiserror::Error;
use vak_prompt_blocks::{Escaped, Provenance, sha256_hex};
use vak_prompt_compose::TailContext;
use vak_prompt_loader::{ABSENT_DIGEST, GatewayDoc, GatewayError, read_gateway};

use crate::edit::{ChainsLeftOut, EditError, Preview, Unchecked, budget_of, lints_of_text};
use crate::history::{self, Action, VersionRecord, Who};
use crate::home::{GatewayWriteError, HomeError};
use crate::over_cap::{OverCap, OverChain};
use crate::{Core, CoreError, Selectors};

pub use vak_prompt_blocks::{GatewayEntry, GatewayKey};

/// The selectors of `key`'s own chain in `base`'s project: the chat
/// surface, its bot and chat.
pub fn key_selectors(key: &GatewayKey, base: Selectors) -> Selectors {
    Selectors {
        surface: vak_prompt_blocks::SurfaceKind::Chat,
        bot: Some(key.bot.clone()),
        chat: key.chat.clone(),
        ..base
    }
}

/// [`GatewayChangeError::NoEntry`] when `doc`, the entry's file (`None`:
/// absent), has no `entry`: a change is refused then unless it creates
/// the entry.
///
/// # Errors
///
/// The entry's path holds something that is not an object.
pub fn missing_entry(
    entry: &GatewayEntry,
    doc: Option<&GatewayDoc>,
) -> Result<Option<GatewayChangeError>, GatewayError> {
    let listed = match doc {
        Some(doc) => doc.entry(&entry.entry_path())?.is_some(),
        None => false,
    };
    Ok((!listed).then(|| GatewayChangeError::NoEntry {
        describe: entry.describe(),
        file: entry.file().file_name(),
    }))
}

/// How one change of a gateway key is asked for.
#[derive(Debug, Clone, Copy)]
pub struct GatewayChange<'a> {
    /// The new text; `None` removes the key, so the tier inherits again.
    pub text: Option<&'a str>,
    /// The sha256 of the key's value the editor started from; empty when
    /// the key was absent.
    pub if_digest: &'a str,
    /// A save, a reset, or a revert to a kept version.
    pub action: Action,
    /// Create the bot's or chat's entry when it has none: an entry is what
    /// lets a chat's messages in, so never implied.
    pub create_entry: bool,
    /// What to do when not every chain the key reaches could be budgeted.
    pub unchecked: Unchecked,
    /// Who the change is recorded as.
    pub who: &'a Who,
}

/// What a change of a gateway key did.
#[derive(Debug)]
pub struct GatewayChanged {
    /// The key.
    pub key: String,
    /// The gateway file.
    pub file: Utf8PathBuf,
    /// The key's sha256 before the change, `None` when it was absent.
    pub previous: Option<String>,
    /// What was written; `None` when the change changed nothing (removing
    /// an absent key, saving the text the key holds): no version recorded.
    pub written: Option<GatewayWritten>,
}

/// A change of a gateway key that was written.
#[derive(Debug)]
pub struct GatewayWritten {
    /// The file's sha256 after the write.
    pub file_digest: String,
    /// The prompt of the key's own chain before and after, budgeted.
    pub preview: Preview,
    /// Chains the key reaches that were not budgeted, said, not refused.
    pub left_out: ChainsLeftOut,
    /// Why the version record could not be kept, when it could not (the
    /// file is written).
    pub unrecorded: Option<String>,
    /// Whether the change was made with chains over the cap, as asked
    /// (`over_budget`); the version record says so too.
    pub over_cap: bool,
}

/// Why a change of a gateway key was refused. Nothing was written.
#[derive(Debug, Error)]
pub enum GatewayChangeError {
    /// The text holds a character no prompt may hold, or the gateway file
    /// cannot be read or is malformed.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The store or the replica refused it.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The entry is not in its file and creating it was not asked for.
    #[error(
        "{describe} has no entry in `{file}`, so there is no prompt of it to edit; add the entry first, or save with `\"create_entry\": true` to create it (which lets its messages in)"
    )]
    NoEntry {
        /// `bot `helpdesk``.
        describe: String,
        /// `bots.json`.
        file: &'static str,
    },
    /// The key changed since the editor read it.
    #[error(
        "`{key}` changed since you read it: its sha256 is now {}, not {}; reload it and redo your change",
        shown_digest(.current.as_ref().map(|_| .current_digest.as_str())),
        shown_digest(Some(.expected.as_str()).filter(|d| !d.is_empty()))
    )]
    Stale {
        /// The key.
        key: String,
        /// The digest the editor gave.
        expected: String,
        /// The key's value now, `None` when absent.
        current: Option<String>,
        /// Its sha256 (empty when absent).
        current_digest: String,
    },
    /// The gateway directory could not be created.
    #[error("cannot create `{}`: {source}", Escaped(.path.as_str()))]
    CreateDir {
        /// The directory.
        path: Utf8PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Over the cap on a chain the key reaches, not every chain could be
    /// budgeted, the history could not keep the texts, or a chain could
    /// not be read.
    #[error(transparent)]
    Edit(#[from] EditError),
}

impl From<CoreError> for GatewayChangeError {
    fn from(error: CoreError) -> Self {
        GatewayChangeError::Edit(EditError::Core(error))
    }
}

impl Core {
    /// The prompt of `key`'s own chain with `text` in place of its value
    /// (`None`: the key removed), budgeted, without writing anything. This
    /// core's selectors name the project (and its trust) the chain runs in.
    ///
    /// # Errors
    ///
    /// [`EditError::Core`] when the chain cannot be read.
    pub fn preview_gateway_key(
        &self,
        key: &GatewayKey,
        text: Option<&str>,
    ) -> Result<Preview, EditError> {
        let core = Core::open(key_selectors(key, self.selectors().clone()))?
            .with_store(std::sync::Arc::clone(self.store()));
        let trust = core.trust()?;
        let chain = core.load()?;
        let before = core.compose(&chain, trust, TailContext::now());
        let mut after_chain = chain;
        after_chain.substitute(key.block, &Provenance::gateway(key.clone()), text);
        let after = core.compose(&after_chain, trust, TailContext::now());
        Ok(Preview {
            path: Utf8PathBuf::from(key.key()),
            budget: budget_of(&after),
            budget_before: budget_of(&before),
            lints: text
                .map(|t| lints_of_text(key.block, t))
                .unwrap_or_default(),
            not_applied: None,
            before,
            after,
        })
    }

    /// Set or remove one gateway key: refused before anything is written
    /// when its text holds a forbidden character, when the key changed
    /// since `change.if_digest`, when its entry is missing (unless asked to
    /// create it), or when it would push any chain it reaches over the cap
    /// ([`Core::check_gateway_reach`]); the values before and after are
    /// kept in the object store first (a store that cannot keep them
    /// refuses), and the change is recorded by key after.
    /// Holds the home's save lock throughout.
    ///
    /// # Errors
    ///
    /// See [`GatewayChangeError`].
    pub fn change_gateway_key(
        &self,
        key: &GatewayKey,
        change: GatewayChange<'_>,
    ) -> Result<GatewayChanged, GatewayChangeError> {
        let home = &self.selectors().home;
        let name = key.key();
        if let Some(text) = change.text {
            vak_prompt_loader::check_gateway_text(&name, text)?;
        }
        let _saving = crate::home::lock_saves(home)?;
        crate::home::retried(
            || self.change_checked(key, change),
            |error| match error {
                GatewayChangeError::Home(home) => Some(home),
                GatewayChangeError::Edit(edit) => crate::edit::home_error(edit),
                _ => None,
            },
        )
    }

    /// One attempt of [`change_gateway_key`](Self::change_gateway_key),
    /// under the save lock: sync the home side, check, write at the
    /// generation checked (made again when another node moved it).
    fn change_checked(
        &self,
        key: &GatewayKey,
        change: GatewayChange<'_>,
    ) -> Result<GatewayChanged, GatewayChangeError> {
        let home = &self.selectors().home;
        let name = key.key();
        // The budget runs on the replica: bring it up to the store first,
        // and write only if the store is still at that generation.
        let at = crate::home::sync_if_shared(home, &**self.store(), false)?
            .map(|synced| synced.generation);
        let dir = vak_prompt_loader::gateway_dir(home);
        vak_prompt_loader::create_dirs(&dir).map_err(|source| GatewayChangeError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let file = key.file().path(home);
        let doc = read_gateway(home, key.file())?;
        let file_digest = doc
            .as_ref()
            .map_or_else(|| ABSENT_DIGEST.to_owned(), |d| d.digest.clone());
        if !change.create_entry
            && let Some(missing) = missing_entry(&key.entry(), doc.as_ref())?
        {
            return Err(missing);
        }
        let current = match &doc {
            Some(doc) => doc.prompt(&key.entry_path(), key.block)?.map(str::to_owned),
            None => None,
        };
        let current_digest = current
            .as_deref()
            .map_or_else(|| ABSENT_DIGEST.to_owned(), |t| sha256_hex(t.as_bytes()));
        if change.if_digest != current_digest {
            return Err(GatewayChangeError::Stale {
                key: name,
                expected: change.if_digest.to_owned(),
                current,
                current_digest,
            });
        }
        let previous = current.as_ref().map(|_| current_digest.clone());
        // Nothing to change: removing an absent key, or saving the text the
        // key already holds. Nothing is written and no version recorded.
        if current.as_deref() == change.text {
            return Ok(GatewayChanged {
                key: name,
                file,
                previous,
                written: None,
            });
        }

        let preview = self.preview_gateway_key(key, change.text)?;
        let mut over = OverCap::default();
        if preview.over_budget() {
            over.push(OverChain::here(
                crate::describe_chain(
                    &key_selectors(key, self.selectors().clone()),
                    vak_prompt_trust::Trust::Untrusted,
                ),
                preview.budget.report.clone(),
            ));
        }
        // Every other chain the key reaches: a bot's text is
        // in each of its chats' prompts.
        let left_out = self.check_gateway_reach(
            (&key.bot, key.chat.as_ref(), key.block),
            &Provenance::gateway(key.clone()),
            change.text,
            change.unchecked,
            preview.budget_before.report.cap,
            &mut over,
        )?;

        let history = self.store().history();
        let texts: Vec<&str> = current.as_deref().into_iter().chain(change.text).collect();
        history::keep_before_change(history, &texts, &preview.before).map_err(EditError::from)?;
        let saved = crate::home::write_gateway_prompt(
            &**self.store(),
            home,
            key.file(),
            &key.entry_path(),
            key.block,
            change.text,
            &file_digest,
            at,
            &change.who.label(),
        )
        .map_err(|e| match e {
            GatewayWriteError::Gateway(e) => GatewayChangeError::Gateway(e),
            GatewayWriteError::Home(e) => GatewayChangeError::Home(e),
        })?;
        tracing::info!(key = %Escaped(&name), file = %saved.path, "edited a gateway prompt");
        let mut record = VersionRecord::new(&name, key.block.wire_name(), change.action);
        record.before.clone_from(&previous);
        record.after = change.text.map(|t| sha256_hex(t.as_bytes()));
        record.tokens = change.text.map(|t| preview.budget.report.encoding.count(t));
        record.over_cap = !over.is_empty();
        let unrecorded = history::record_change(history, record, change.who, &preview.after);
        Ok(GatewayChanged {
            key: name,
            file: saved.path,
            previous,
            written: Some(GatewayWritten {
                file_digest: saved.digest,
                preview,
                left_out,
                unrecorded,
                over_cap: !over.is_empty(),
            }),
        })
    }
}

/// A digest in a refusal: `absent (no key)` for none.
fn shown_digest(digest: Option<&str>) -> String {
    digest.map_or_else(|| "absent (no key)".to_owned(), |d| Escaped(d).to_string())
}
