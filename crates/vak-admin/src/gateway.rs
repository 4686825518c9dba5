//! The bot and chat tiers: the `prompts` objects in
//! `$VAK_HOME/.vak/gateway/bots.json` (key `<bot>`) and `allowlist.json`
//! (key `<bot>` → `<chat>`). This API is the only writer of those objects.
//!
//! The format belongs to the loader (`vak_core::prompts::read_gateway`,
//! `write_gateway_prompt`): it reads the file hostile-first (confined,
//! bounded, duplicate keys and wrong types refused), changes one key of one
//! entry's `prompts`, and writes the file back with the loader's atomic
//! save, checked against the digest of the file as read: a concurrent
//! writer makes the save fail with 409 rather than being overwritten. This
//! module only routes and renders.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use vak_core::prompts::{
    ABSENT_DIGEST, Escaped, GatewayError, GatewayFile, GatewayTable, Shape, TableEntry,
    gateway_dir, json_kind, read_gateway,
};
use vak_core::prompts::{Block, Name, NameKind, ResolvedPrompt, SurfaceKind, sha256_hex};
use vak_core::{GatewayChange, GatewayChangeError, GatewayEntry, Preview, Selectors, Unchecked};

use crate::AdminError;
use crate::api::{
    SaveBody, body, check_text_size, edit_error, editable_block, effective_json, history_error,
    name, path, query, required_digest, save_error, unchecked,
};
use crate::server::AppState;
use vak_core::history;
use vak_core::output::{VersionDiff, VersionsReport, composition_name};

const BOTS: &str = "bots.json";
const ALLOWLIST: &str = "allowlist.json";

/// A loader refusal as an API error: a refused save keeps its status.
fn gateway_error(error: GatewayError) -> AdminError {
    match error {
        GatewayError::Save(save) => save_error(save),
        GatewayError::ForbiddenCharacter { .. } => AdminError::BadRequest(error.to_string()),
        GatewayError::TextTooLarge { .. } => AdminError::TooLarge(error.to_string()),
        other => AdminError::Gateway(other.to_string()),
    }
}

/// A refusal of the store's home side: a conflict keeps the save's status.
pub(crate) fn home_error(error: vak_core::home::HomeError) -> AdminError {
    match error {
        vak_core::home::HomeError::Write(save) => save_error(save),
        moving @ vak_core::home::HomeError::KeptMoving { .. } => {
            AdminError::Busy(moving.to_string())
        }
        other => AdminError::Internal(other.to_string()),
    }
}

/// The prompt this entry's tier resolves to on the chat surface, for the
/// "what the prompt uses now" half of each block. `None` when it cannot be
/// resolved; the entry is still listed and editable.
fn resolve_tier(state: &AppState, tier: &GatewayEntry) -> Option<ResolvedPrompt> {
    let core = state
        .core(Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(tier.bot.clone()),
            chat: tier.chat.clone(),
            ..state.selectors()
        })
        .ok()?;
    core.resolve().ok()
}

fn block_json(
    entry: Option<&TableEntry<'_>>,
    tier: &GatewayEntry,
    resolved: Option<&ResolvedPrompt>,
) -> Vec<Value> {
    Block::EDITABLE
        .iter()
        .map(|&block| {
            let key = tier.key(block).to_string();
            let entry_path = tier.entry_path();
            let (state, text, problem) =
                match entry.map(|e| e.prompt(block, tier.file(), &entry_path)) {
                None | Some(Ok(None)) => ("inherited", None, None),
                Some(Ok(Some(text))) if text.trim().is_empty() => ("empty", Some(text), None),
                Some(Ok(Some(text))) => ("overridden", Some(text), None),
                Some(Err(e)) => ("inherited", None, Some(e.to_string())),
            };
            json!({
                "block": block.wire_name(),
                "label": block.label(),
                "state": state,
                "text": text,
                "digest": text.map_or_else(|| ABSENT_DIGEST.to_owned(), |t| sha256_hex(t.as_bytes())),
                "key": key,
                "problem": problem,
                "composition": composition_name(block),
                "lands_in": block.wire_name(),
                "effective": resolved.and_then(|r| r.block(block)).map(effective_json),
            })
        })
        .collect()
}

/// `GET /api/gateway`: every bot and chat entry and its `prompts`.
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, AdminError> {
    let dir = gateway_dir(&state.home);
    let bots_path = GatewayFile::Bots.path(&state.home);
    let allow_path = GatewayFile::Allowlist.path(&state.home);
    let bots = match read_gateway(&state.home, GatewayFile::Bots).map_err(gateway_error)? {
        Some(doc) => match doc.table {
            GatewayTable::Bots(bots) => bots,
            GatewayTable::Allowlist(_) => Default::default(),
        },
        None => Default::default(),
    };
    let allow = match read_gateway(&state.home, GatewayFile::Allowlist).map_err(gateway_error)? {
        Some(doc) => match doc.table {
            GatewayTable::Allowlist(allow) => allow,
            GatewayTable::Bots(_) => Default::default(),
        },
        None => Default::default(),
    };
    let mut ids: Vec<&str> = bots.keys().chain(allow.keys()).map(AsRef::as_ref).collect();
    ids.sort();
    ids.dedup();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for id in ids {
        let Ok(bot) = Name::new(NameKind::Bot, id) else {
            problems.push(format!(
                "bot id `{id}` is not a valid name (letters, digits, `-`, `_`); it is never loaded"
            ));
            continue;
        };
        let entry = match bots.get(id) {
            Some(Shape::Is(entry)) => Some(entry),
            Some(Shape::Wrong(wrong)) => {
                problems.push(format!(
                    "`{BOTS}#/{}` is {}, not an object; it is not used",
                    Escaped(id),
                    json_kind(wrong)
                ));
                None
            }
            None => None,
        };
        let mut chats = Vec::new();
        if let Some(Shape::Wrong(wrong)) = allow.get(id) {
            problems.push(format!(
                "`{ALLOWLIST}#/{}` is {}, not an object of chat ids; it is not used",
                Escaped(id),
                json_kind(wrong)
            ));
        }
        if let Some(Shape::Is(chat_map)) = allow.get(id) {
            for (chat_id, chat_entry) in chat_map {
                let chat_entry = match chat_entry {
                    Shape::Is(chat_entry) => chat_entry,
                    Shape::Wrong(wrong) => {
                        problems.push(format!(
                            "`{ALLOWLIST}#/{}/{}` is {}, not an object; it is not used",
                            Escaped(id),
                            Escaped(chat_id),
                            json_kind(wrong)
                        ));
                        continue;
                    }
                };
                let Ok(chat) = Name::new(NameKind::Chat, chat_id) else {
                    problems.push(format!(
                        "chat id `{chat_id}` under bot `{id}` is not a valid name; it is never loaded"
                    ));
                    continue;
                };
                let tier = GatewayEntry {
                    bot: bot.clone(),
                    chat: Some(chat),
                };
                chats.push(json!({
                    "chat": chat_id,
                    "name": chat_entry.text_field("name"),
                    "prompts": block_json(Some(chat_entry), &tier, resolve_tier(&state, &tier).as_ref()),
                }));
            }
        }
        let tier = GatewayEntry { bot, chat: None };
        out.push(json!({
            "bot": id,
            "display_name": entry.and_then(|e| e.text_field("display_name")),
            "prompts": block_json(entry, &tier, resolve_tier(&state, &tier).as_ref()),
            "chats": chats,
        }));
    }
    Ok(Json(json!({
        "dir": dir,
        "bots_file": bots_path,
        "allowlist_file": allow_path,
        "bots": out,
        "problems": problems,
    })))
}

/// What the prompt of this bot (and chat) would be with `text` in place,
/// on the chat surface, budgeted by the same functions as a file save.
pub(crate) fn preview(
    state: &AppState,
    bot: &Name,
    chat: Option<&Name>,
    block: Block,
    text: Option<&str>,
) -> Result<Preview, AdminError> {
    let tier = GatewayEntry {
        bot: bot.clone(),
        chat: chat.cloned(),
    };
    preview_tier(state, &tier, block, text)
}

/// The sentence a save to `bot`'s or `chat`'s prompt would be refused
/// with because the gateway files have no entry for it; `None` when they do.
/// The live count says so before the save is tried.
///
/// # Errors
///
/// The gateway file cannot be read or is malformed.
pub(crate) fn missing_entry(
    state: &AppState,
    bot: &Name,
    chat: Option<&Name>,
) -> Result<Option<String>, AdminError> {
    let tier = GatewayEntry {
        bot: bot.clone(),
        chat: chat.cloned(),
    };
    let doc = read_gateway(&state.home, tier.file()).map_err(gateway_error)?;
    let missing = vak_core::missing_entry(&tier, doc.as_ref()).map_err(gateway_error)?;
    Ok(missing.map(|refusal| refusal.to_string()))
}

fn preview_tier(
    state: &AppState,
    tier: &GatewayEntry,
    block: Block,
    text: Option<&str>,
) -> Result<Preview, AdminError> {
    state
        .core(state.selectors())?
        .preview_gateway_key(&tier.key(block), text)
        .map_err(edit_error)
}

/// How a gateway edit is asked for.
struct EditRequest<'a> {
    /// The digest of the key's value the page last saw.
    if_digest: &'a str,
    /// A save, a reset, or a revert to a kept version.
    action: history::Action,
    /// Create the bot's or chat's entry when it has none.
    create_entry: bool,
    /// What to do when not every chain the key reaches could be budgeted.
    unchecked: Unchecked,
}

/// Set (`Some`) or remove (`None`) one block of one gateway entry, as
/// `request` says: `Core::change_gateway_key` decides, this renders.
fn edit(
    state: &AppState,
    tier: &GatewayEntry,
    block: Block,
    text: Option<&str>,
    request: EditRequest<'_>,
) -> Result<Value, AdminError> {
    // One edit at a time in this process; the save lock and the file
    // digest cover writers in other processes.
    let _guard = state.gateway_lock.lock().map_err(|_| {
        AdminError::Internal(
            "the gateway edit lock is poisoned; restart `vak admin serve`".to_owned(),
        )
    })?;
    let who = state.who();
    let changed = state
        .core(state.selectors())?
        .change_gateway_key(
            &tier.key(block),
            GatewayChange {
                text,
                if_digest: request.if_digest,
                action: request.action,
                create_entry: request.create_entry,
                unchecked: request.unchecked,
                who: &who,
            },
        )
        .map_err(change_error)?;
    let Some(written) = changed.written else {
        return Ok(json!({
            "key": changed.key, "file": changed.file, "removed": null, "changed": false,
            "digest": text.map(|t| sha256_hex(t.as_bytes())), "previous": changed.previous,
            "recorded": false,
        }));
    };
    let report = &written.preview.budget.report;
    Ok(json!({
        "key": changed.key,
        "file": changed.file,
        "file_digest": written.file_digest,
        "digest": text.map(|t| sha256_hex(t.as_bytes())),
        "previous": changed.previous,
        "tokens": report.summary(),
        "tokens_before": written.preview.budget_before.report.summary(),
        "tokens_after": report.summary(),
        "lints": written.preview.lints,
        "changed": true,
        "recorded": written.unrecorded.is_none(),
        "over_cap": written.over_cap,
        "unrecorded": written.unrecorded,
        "unbudgeted": written.left_out.note(),
    }))
}

/// A refused gateway change as the API answers it.
fn change_error(error: GatewayChangeError) -> AdminError {
    match error {
        GatewayChangeError::Gateway(e) => gateway_error(e),
        GatewayChangeError::Home(e) => home_error(e),
        GatewayChangeError::NoEntry { .. } => AdminError::NotFound(error.to_string()),
        GatewayChangeError::Stale {
            ref current_digest, ..
        } => AdminError::Conflict {
            current_digest: Some(current_digest.clone()),
            message: error.to_string(),
        },
        GatewayChangeError::CreateDir { .. } => AdminError::Internal(error.to_string()),
        GatewayChangeError::Edit(e) => edit_error(e),
    }
}

/// `?if_digest=` for the gateway resets.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DigestQuery {
    if_digest: Option<String>,
    /// Reset even when not every chain the key reaches could be budgeted.
    #[serde(default)]
    over_budget: bool,
}

fn save_to(
    state: &AppState,
    tier: GatewayEntry,
    block: &str,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    let block = editable_block(block)?;
    let b: SaveBody = body(bytes)?;
    check_text_size(&b.text)?;
    let if_digest = required_digest(b.if_digest)?;
    Ok(Json(edit(
        state,
        &tier,
        block,
        Some(&b.text),
        EditRequest {
            if_digest: &if_digest,
            action: history::Action::Save,
            create_entry: b.create_entry,
            unchecked: unchecked(b.over_budget),
        },
    )?))
}

fn reset_of(
    state: &AppState,
    tier: GatewayEntry,
    block: &str,
    q: Result<Query<DigestQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let block = editable_block(block)?;
    let q = query(q)?;
    let if_digest = required_digest(q.if_digest)?;
    Ok(Json(edit(
        state,
        &tier,
        block,
        None,
        EditRequest {
            if_digest: &if_digest,
            action: history::Action::Reset,
            create_entry: false,
            unchecked: unchecked(q.over_budget),
        },
    )?))
}

/// `PUT /api/gateway/bots/{bot}/{block}`.
pub(crate) async fn save_bot(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String)>, PathRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, block) = path(segments)?;
        let tier = bot_tier(&bot)?;
        save_to(&state, tier, &block, bytes)
    })
    .await
}

/// `DELETE /api/gateway/bots/{bot}/{block}?if_digest=`.
pub(crate) async fn reset_bot(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<DigestQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, block) = path(segments)?;
        let tier = bot_tier(&bot)?;
        reset_of(&state, tier, &block, q)
    })
    .await
}

/// `PUT /api/gateway/chats/{bot}/{chat}/{block}`.
pub(crate) async fn save_chat(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String, String)>, PathRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, chat, block) = path(segments)?;
        let tier = chat_tier(&bot, &chat)?;
        save_to(&state, tier, &block, bytes)
    })
    .await
}

/// `DELETE /api/gateway/chats/{bot}/{chat}/{block}?if_digest=`.
pub(crate) async fn reset_chat(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String, String)>, PathRejection>,
    q: Result<Query<DigestQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, chat, block) = path(segments)?;
        let tier = chat_tier(&bot, &chat)?;
        reset_of(&state, tier, &block, q)
    })
    .await
}

/// The versions of one gateway key, oldest first, and its digest now.
fn history_of(state: &AppState, tier: &GatewayEntry, block: &str) -> Result<Value, AdminError> {
    let block = editable_block(block)?;
    let key = tier.key(block).to_string();
    let versions = state
        .store
        .history()
        .versions_of(&key)
        .map_err(history_error)?;
    let current = current_of(state, tier, block)?.map(|c| c.digest);
    let current = current.unwrap_or_else(|| ABSENT_DIGEST.to_owned());
    Ok(crate::api::document(
        &VersionsReport::of(&versions)
            .block(block)
            .at_key(&key)
            .with_current(&current, versions.skipped),
    )?
    .0)
}

/// One gateway key's text now, with its digest; `None` when it is not set.
fn current_of(
    state: &AppState,
    tier: &GatewayEntry,
    block: Block,
) -> Result<Option<history::CurrentText>, AdminError> {
    history::gateway_current_text(&state.home, tier.file(), &tier.entry_path(), block)
        .map_err(gateway_error)
}

/// A unified diff between two versions of one gateway key (empty digest:
/// no key); the key's text now answers for its own digest, recorded or not.
fn history_diff_of(
    state: &AppState,
    tier: &GatewayEntry,
    block: &str,
    q: Result<Query<VersionPair>, QueryRejection>,
) -> Result<Value, AdminError> {
    let block = editable_block(block)?;
    let q = query(q)?;
    let history = state.store.history();
    let from = q.from.filter(|d| !d.is_empty());
    let to = q.to.filter(|d| !d.is_empty());
    let current = current_of(state, tier, block)?;
    let key = tier.key(block).to_string();
    let diff = VersionDiff::between(history, &key, "(no key)", from, to, current.as_ref())
        .map_err(history_error)?;
    Ok(crate::api::document(&diff.of_key(key))?.0)
}

/// Save the version of one gateway key kept under `to` back, through every
/// check of a gateway save, recorded as a revert.
fn revert_of(
    state: &AppState,
    tier: &GatewayEntry,
    block: &str,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Value, AdminError> {
    let block = editable_block(block)?;
    let b: RevertBody = body(bytes)?;
    let if_digest = required_digest(b.if_digest)?;
    let key = tier.key(block).to_string();
    let records = state
        .store
        .history()
        .versions_of(&key)
        .map_err(history_error)?
        .records;
    let text = history::revert_text(state.store.history(), &records, &key, &b.to)
        .map_err(history_error)?;
    check_text_size(&text)?;
    edit(
        state,
        tier,
        block,
        Some(&text),
        EditRequest {
            if_digest: &if_digest,
            action: history::Action::Revert,
            create_entry: false,
            unchecked: unchecked(b.over_budget),
        },
    )
}

/// `?from=&to=` of a gateway key's diff.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct VersionPair {
    from: Option<String>,
    to: Option<String>,
}

/// The body of a gateway key's revert.
#[derive(Debug, Deserialize)]
pub(crate) struct RevertBody {
    /// The version to save back.
    to: String,
    /// The digest of the key's value the page last saw.
    if_digest: Option<String>,
    /// Revert even when not every chain the key reaches could be budgeted.
    #[serde(default)]
    over_budget: bool,
}

fn bot_tier(bot: &str) -> Result<GatewayEntry, AdminError> {
    Ok(GatewayEntry {
        bot: name(NameKind::Bot, bot)?,
        chat: None,
    })
}

fn chat_tier(bot: &str, chat: &str) -> Result<GatewayEntry, AdminError> {
    Ok(GatewayEntry {
        bot: name(NameKind::Bot, bot)?,
        chat: Some(name(NameKind::Chat, chat)?),
    })
}

/// `GET /api/gateway/bots/{bot}/{block}/history`.
pub(crate) async fn bot_history(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, block) = path(segments)?;
        Ok(Json(history_of(&state, &bot_tier(&bot)?, &block)?))
    })
    .await
}

/// `GET /api/gateway/bots/{bot}/{block}/history/diff?from=D&to=D`.
pub(crate) async fn bot_history_diff(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<VersionPair>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, block) = path(segments)?;
        Ok(Json(history_diff_of(&state, &bot_tier(&bot)?, &block, q)?))
    })
    .await
}

/// `POST /api/gateway/bots/{bot}/{block}/history/revert`.
pub(crate) async fn bot_revert(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String)>, PathRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, block) = path(segments)?;
        Ok(Json(revert_of(&state, &bot_tier(&bot)?, &block, bytes)?))
    })
    .await
}

/// `GET /api/gateway/chats/{bot}/{chat}/{block}/history`.
pub(crate) async fn chat_history(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, chat, block) = path(segments)?;
        Ok(Json(history_of(&state, &chat_tier(&bot, &chat)?, &block)?))
    })
    .await
}

/// `GET /api/gateway/chats/{bot}/{chat}/{block}/history/diff?from=D&to=D`.
pub(crate) async fn chat_history_diff(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String, String)>, PathRejection>,
    q: Result<Query<VersionPair>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, chat, block) = path(segments)?;
        Ok(Json(history_diff_of(
            &state,
            &chat_tier(&bot, &chat)?,
            &block,
            q,
        )?))
    })
    .await
}

/// `POST /api/gateway/chats/{bot}/{chat}/{block}/history/revert`.
pub(crate) async fn chat_revert(
    State(state): State<Arc<AppState>>,
    segments: Result<Path<(String, String, String)>, PathRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let (bot, chat, block) = path(segments)?;
        Ok(Json(revert_of(
            &state,
            &chat_tier(&bot, &chat)?,
            &block,
            bytes,
        )?))
    })
    .await
}
