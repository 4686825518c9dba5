//! The prompt routes: effective prompt, layers, save, reset, live token
//! counts, permissions, audit. Every handler calls the same `vak_core`
//! functions the CLI calls; nothing here composes, counts or writes by itself.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use vak_core::history::{HistoryError, TextChange};
use vak_core::output::{
    self, Audience, AuditPage, BudgetRefusal, PromptDocument, SavedReport, VersionDiff,
    VersionsReport, composition_name, trust_name,
};
use vak_core::prompts::{
    Block, Name, NameKind, ResolvedBlock, ResolvedPrompt, SessionError, SessionId, SurfaceKind,
    Trust, Verdict, prompt_verdict,
};
use vak_core::prompts::{MAX_FILE_BYTES, SaveError};
use vak_core::{
    Budget, Core, EditError, EditTarget, PromptReport, Scope, Selectors, SubLayer, Unchecked,
};

use crate::AdminError;
use crate::server::AppState;

type Shared = State<Arc<AppState>>;

/// Turn a query-string rejection into a 400 that says what is wrong.
pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, AdminError> {
    query.map(|Query(q)| q).map_err(|e| {
        AdminError::BadRequest(format!("the query string is malformed: {}", e.body_text()))
    })
}

/// Turn a path-segment rejection (bad percent-encoding) into a JSON 400.
pub(crate) fn path<T>(path: Result<Path<T>, PathRejection>) -> Result<T, AdminError> {
    path.map(|Path(p)| p).map_err(|e| {
        AdminError::BadRequest(format!("the request path is malformed: {}", e.body_text()))
    })
}

/// Parse a JSON body, answering 413 for one over the limit and 400 for one
/// that is not the expected object.
pub(crate) fn body<T: serde::de::DeserializeOwned>(
    bytes: Result<Bytes, BytesRejection>,
) -> Result<T, AdminError> {
    let bytes = bytes.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            AdminError::TooLarge(format!(
                "the request body is larger than the {}-byte limit",
                crate::MAX_BODY_BYTES
            ))
        } else {
            AdminError::BadRequest(format!(
                "the request body could not be read: {}",
                e.body_text()
            ))
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        AdminError::BadRequest(format!(
            "the request body is not the JSON this route expects: {e}"
        ))
    })
}

/// A text about to become a layer file or gateway value: held to the
/// loader's per-file limit, which a larger text would exceed on the next read.
pub(crate) fn check_text_size(text: &str) -> Result<(), AdminError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(AdminError::TooLarge(format!(
            "the text is {} bytes, over the {MAX_FILE_BYTES}-byte limit for prompt files",
            text.len()
        )));
    }
    Ok(())
}

pub(crate) fn name(kind: NameKind, raw: &str) -> Result<Name, AdminError> {
    Name::new(kind, raw).map_err(|e| AdminError::BadRequest(e.to_string()))
}

pub(crate) fn editable_block(raw: &str) -> Result<Block, AdminError> {
    let block: Block = raw
        .parse()
        .map_err(|e: vak_core::prompts::BlocksError| AdminError::BadRequest(e.to_string()))?;
    if !block.is_editable() {
        return Err(AdminError::BadRequest(format!(
            "`{block}` is not editable: editable blocks are identity, operating-rules, guardrails and surface-note"
        )));
    }
    Ok(block)
}

fn surface(raw: Option<&str>) -> Result<SurfaceKind, AdminError> {
    match raw.filter(|s| !s.is_empty()) {
        None => Ok(SurfaceKind::Cli),
        Some(raw) => raw
            .parse()
            .map_err(|e: vak_core::prompts::BlocksError| AdminError::BadRequest(e.to_string())),
    }
}

/// `?surface=&bot=&chat=&agent=&untrusted=`: which chain to resolve.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ViewQuery {
    surface: Option<String>,
    bot: Option<String>,
    chat: Option<String>,
    agent: Option<String>,
    untrusted: Option<bool>,
    /// A directory of the project, relative to its root, whose directory
    /// layers apply.
    dir: Option<String>,
}

impl ViewQuery {
    fn selectors(&self, state: &AppState) -> Result<Selectors, AdminError> {
        let opt = |kind, raw: &Option<String>| {
            raw.as_deref()
                .filter(|s| !s.is_empty())
                .map(|raw| name(kind, raw))
                .transpose()
        };
        let base = state.selectors();
        let workdir = match self.dir.as_deref().filter(|s| !s.is_empty()) {
            Some(dir) => Some(base.project.join(plain_dir(dir)?)),
            None => base.workdir.clone(),
        };
        let selectors = Selectors {
            workdir,
            surface: surface(self.surface.as_deref())?,
            bot: opt(NameKind::Bot, &self.bot)?,
            chat: opt(NameKind::Chat, &self.chat)?,
            agent: opt(NameKind::Role, &self.agent)?,
            force_untrusted: self.untrusted.unwrap_or(false),
            ..base
        };
        if selectors.chat.is_some() && selectors.bot.is_none() {
            return Err(AdminError::BadRequest(
                "`chat` needs `bot`: a chat is always one bot's chat".to_owned(),
            ));
        }
        Ok(selectors)
    }
}

/// `?scope=shared|project[&surface=KIND|&agent=ROLE]`: one directory layer.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LayerQuery {
    scope: Option<String>,
    surface: Option<String>,
    agent: Option<String>,
    /// A directory sub-layer of the project, relative to its root.
    dir: Option<String>,
    if_digest: Option<String>,
    /// A reset's `--over-budget`: reset even when not every chain it
    /// reaches could be budgeted.
    #[serde(default)]
    over_budget: bool,
}

/// What a change does with chains it could not budget.
pub(crate) fn unchecked(over_budget: bool) -> Unchecked {
    Unchecked::from_over_budget(over_budget)
}

impl LayerQuery {
    fn scope(&self) -> Result<Scope, AdminError> {
        match self.scope.as_deref() {
            Some("shared") => Ok(Scope::Shared),
            Some("project") => Ok(Scope::Project),
            Some("managed") => Err(AdminError::ReadOnly(format!(
                "the managed layer is read-only here: it belongs to the machine's administrator (`{}`), and vak never writes it; `GET /api/managed` shows it",
                vak_core::prompts::SYSTEM_MANAGED_DIR
            ))),
            Some(other) => Err(AdminError::BadRequest(format!(
                "`scope={other}` is not a scope; use `scope=shared` or `scope=project`"
            ))),
            None => Err(AdminError::BadRequest(
                "this route needs `scope=shared` or `scope=project`".to_owned(),
            )),
        }
    }

    fn sub(&self) -> Result<SubLayer, AdminError> {
        let surface = self.surface.as_deref().filter(|s| !s.is_empty());
        let agent = self.agent.as_deref().filter(|s| !s.is_empty());
        if let Some(dir) = self.dir.as_deref().filter(|s| !s.is_empty()) {
            if surface.is_some() || agent.is_some() {
                return Err(AdminError::BadRequest(
                    "give `dir`, `surface` or `agent`, not two: a file lives in one sub-layer"
                        .to_owned(),
                ));
            }
            return Ok(SubLayer::Directory(plain_dir(dir)?.into()));
        }
        match (surface, agent) {
            (Some(_), Some(_)) => Err(AdminError::BadRequest(
                "give `surface` or `agent`, not both: a file lives in one sub-layer".to_owned(),
            )),
            (Some(kind), None) => Ok(SubLayer::Surface(surface_kind(kind)?)),
            (None, Some(role)) => Ok(SubLayer::Agent(name(NameKind::Role, role)?)),
            (None, None) => Ok(SubLayer::Base),
        }
    }
}

/// `dir=services/payments`: plain names below the project root only.
fn plain_dir(raw: &str) -> Result<&str, AdminError> {
    let plain = raw.split('/').all(|part| {
        !part.is_empty() && part != "." && part != ".." && !part.contains(['\\', '\0'])
    });
    if plain && !raw.starts_with('/') {
        Ok(raw)
    } else {
        Err(AdminError::BadRequest(format!(
            "`dir={}` is not a directory inside the project, relative to its root",
            vak_core::prompts::Escaped(raw)
        )))
    }
}

fn surface_kind(raw: &str) -> Result<SurfaceKind, AdminError> {
    raw.parse()
        .map_err(|e: vak_core::prompts::BlocksError| AdminError::BadRequest(e.to_string()))
}

fn target(scope: Scope, sub: SubLayer, block: Block) -> Result<EditTarget, AdminError> {
    EditTarget::new(scope, sub, block).map_err(edit_error)
}

fn core_for(state: &AppState, target: &EditTarget) -> Result<Core, AdminError> {
    Ok(state.core(target.selectors(state.selectors()))?)
}

/// The library's edit refusals as HTTP answers.
pub(crate) fn edit_error(error: EditError) -> AdminError {
    match error {
        EditError::NotEditable(..)
        | EditError::ForbiddenCharacter { .. }
        | EditError::ImportRefused { .. }
        | EditError::BadDirectory(_) => AdminError::BadRequest(error.to_string()),
        EditError::Core(core) => AdminError::Core(core),
        EditError::OverBudget {
            ref report,
            ref over,
            ..
        } => {
            let message = error.to_string();
            match output::to_value(&BudgetRefusal::of(report, over)) {
                Ok(detail) => AdminError::OverBudget { detail, message },
                Err(e) => AdminError::Internal(format!("{message} (and its figures: {e})")),
            }
        }
        // Not over as far as it looked, but it could not look everywhere:
        // `unchecked` says why, and the same request with `over_budget`
        // makes the change.
        EditError::Unchecked { ref why, .. } => AdminError::OverBudget {
            detail: json!({ "unchecked": why }),
            message: error.to_string(),
        },
        EditError::Save(save) => save_error(save),
        EditError::Home(home) => crate::gateway::home_error(home),
        EditError::ProjectInHome { .. }
        | EditError::IntoHome { .. }
        | EditError::Unkeepable { .. } => AdminError::Conflict {
            current_digest: None,
            message: error.to_string(),
        },
        EditError::History(ref history) if history.is_not_kept() => {
            AdminError::NotFound(error.to_string())
        }
        // Not a version of this file: as a version never kept, nothing there.
        EditError::History(HistoryError::NotAVersion { .. }) => {
            AdminError::NotFound(error.to_string())
        }
        EditError::History(HistoryError::BadDigest(_)) => AdminError::BadRequest(error.to_string()),
        EditError::History(_) => AdminError::Internal(error.to_string()),
    }
}

pub(crate) fn save_error(error: SaveError) -> AdminError {
    match error {
        SaveError::Stale { ref actual, .. } => AdminError::Conflict {
            current_digest: Some(actual.clone().unwrap_or_default()),
            message: error.to_string(),
        },
        SaveError::BadDigest(_) => AdminError::BadRequest(error.to_string()),
        SaveError::TooLarge { .. } => AdminError::TooLarge(error.to_string()),
        SaveError::Symlink(_)
        | SaveError::NotRegularFile(_)
        | SaveError::OutsideRoot { .. }
        | SaveError::InNestedRepository { .. }
        | SaveError::InTheWay { .. } => AdminError::Conflict {
            current_digest: None,
            message: error.to_string(),
        },
        SaveError::Io { .. } => AdminError::Internal(error.to_string()),
    }
}

/// One of [`vak_core::output`]'s documents as the answer, encoded as the
/// CLI encodes it.
pub(crate) fn document(document: &impl serde::Serialize) -> Result<Json<Value>, AdminError> {
    output::to_value(document)
        .map(Json)
        .map_err(|e| AdminError::Internal(format!("cannot encode the answer: {e}")))
}

/// One block's provenance in a few words, as doc 45's sketch shows it:
/// `from Shared`, `seed + Shared + 2`, `locked`, `runtime`.
pub(crate) fn provenance_summary(block: &ResolvedBlock) -> String {
    vak_core::provenance_summary(block, vak_core::LayerNaming::Label)
}

/// `GET /api/prompt`: the effective prompt for the selectors.
pub(crate) async fn prompt(
    State(state): Shared,
    q: Result<Query<ViewQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let core = state.core(query(q)?.selectors(&state)?)?;
    let (resolved, budget) = state.answers.answer(core)?;
    // The tail is rendered for this request, never the composition's.
    let tail = vak_core::prompts::render_tail(&vak_core::prompts::TailContext::now());
    let mut report = PromptReport::new(&resolved, &budget);
    report.tail = &tail;
    // The page's words for each block, and the whole budget.
    document(
        &PromptDocument::new(report)
            .with_page_words(&resolved)
            .with_budget(&budget),
    )
}

/// What `/api/prompt` answers from memory: the resolutions of vak-core's
/// [`vak_core::PromptCache`] (composed again only when an input changed,
/// by its change notifications) and the budget counted for each, so a view
/// of an unchanged prompt reads, composes and counts nothing.
#[derive(Debug, Default)]
pub(crate) struct PromptAnswers {
    prompts: vak_core::PromptCache,
    /// The budget of each resolution the cache holds, by identity: the
    /// `Arc` is kept, so its address names it while it is here.
    budgets: std::sync::Mutex<Vec<(Arc<ResolvedPrompt>, Arc<Budget>)>>,
}

/// How many budgets [`PromptAnswers`] keeps: the views an admin page
/// switches between, not every chat.
const KEPT_BUDGETS: usize = 64;

impl PromptAnswers {
    /// Forget every answer (the home side's replica was just synced).
    pub(crate) fn clear(&self) {
        self.prompts.clear();
        self.budgets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// The resolution of `core` and its budget, from memory when nothing
    /// it was read from changed.
    fn answer(
        &self,
        core: vak_core::Core,
    ) -> Result<(Arc<ResolvedPrompt>, Arc<Budget>), vak_core::CoreError> {
        let resolved = self
            .prompts
            .resolve(&vak_core::InboundPrompts::from_core(core))?;
        let mut budgets = self
            .budgets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, budget)) = budgets.iter().find(|(r, _)| Arc::ptr_eq(r, &resolved)) {
            return Ok((resolved, Arc::clone(budget)));
        }
        let budget = Arc::new(vak_core::budget_of(&resolved));
        if budgets.len() >= KEPT_BUDGETS {
            budgets.remove(0);
        }
        budgets.push((Arc::clone(&resolved), Arc::clone(&budget)));
        Ok((resolved, budget))
    }
}

fn sub_name(sub: &SubLayer) -> String {
    match sub {
        SubLayer::Base => "base".to_owned(),
        SubLayer::Surface(kind) => format!("surface/{kind}"),
        SubLayer::Agent(role) => format!("agents/{role}"),
        SubLayer::Directory(dir) => format!("dir/{dir}"),
    }
}

/// Roles that have a directory under either scope's `agents/`.
fn known_roles(state: &AppState) -> Vec<String> {
    let mut roles = std::collections::BTreeSet::new();
    for root in [&state.home, &state.project] {
        let dir = vak_core::prompts::prompt_dir(root).join("agents");
        let Ok(entries) = vak_core::files::entries(&dir, usize::MAX) else {
            continue;
        };
        for entry in entries {
            if let Some(raw) = entry.name
                && entry.is_dir
                && Name::new(NameKind::Role, &raw).is_ok()
            {
                roles.insert(raw);
            }
        }
    }
    roles.into_iter().collect()
}

/// What the prompt uses for one block now: the summary, every contributing
/// layer with its source and text, and the composed text.
pub(crate) fn effective_json(b: &ResolvedBlock) -> Value {
    json!({
        "summary": provenance_summary(b),
        "layers": b.layers().iter().map(|l| l.wire_name()).collect::<Vec<_>>(),
        "sources": b.contributors.iter().map(|c| json!({
            "layer": c.provenance.layer.wire_name(),
            "label": c.provenance.layer.label(),
            "source": c.provenance.source,
            "text": c.text,
            // Files this one imports: part of its text, each its own
            // descriptor; read-only here (edited as files).
            "imports": c.imports.iter().map(|i| json!({
                "source": i.provenance.source,
                "text": i.text,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "text": b.text,
    })
}

/// `GET /api/layers`: every editable block of one directory layer.
pub(crate) async fn layers(
    State(state): Shared,
    q: Result<Query<LayerQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let q = query(q)?;
    let scope = q.scope()?;
    let sub = q.sub()?;
    let probe = target(scope, sub.clone(), Block::Identity)?;
    let core = core_for(&state, &probe)?;
    let trust = core.trust()?;
    // Through the edit preview, so a role with no directory yet resolves
    // (without its tier) instead of failing: saving is what creates it.
    let resolved = core.preview(&probe, None).map_err(edit_error)?.before;
    let selectors = core.selectors().clone();
    let mut blocks = Vec::new();
    for block in Block::EDITABLE {
        let target = target(scope, sub.clone(), block)?;
        let path = target.path(&selectors);
        // One unreadable file (over the size bound, a FIFO, a link leading
        // out of its layer) is that card's problem, not the whole page's:
        // the user must still see the other blocks and be able to reset it.
        let start = match core.edit_start(&target) {
            Ok(start) => start,
            Err(error) => {
                blocks.push(json!({
                    "block": block.wire_name(),
                    "label": block.label(),
                    "composition": composition_name(block),
                    "lands_in": target.effective_block().wire_name(),
                    "state": "unreadable",
                    "exists": true,
                    "text": null,
                    "editor_text": "",
                    "digest": null,
                    "path": path,
                    "problem": error.to_string(),
                    "not_applied": null,
                    "effective": resolved.block(target.effective_block()).map(effective_json),
                }));
                continue;
            }
        };
        let state_name = match (start.exists, start.text.trim().is_empty()) {
            (false, _) => "inherited",
            (true, true) => "empty",
            (true, false) => "overridden",
        };
        let effective_block = target.effective_block();
        let effective = resolved.block(effective_block);
        let verdict = prompt_verdict(&target.provenance(&selectors), effective_block, trust);
        let locked = effective.is_some_and(|b| b.locked);
        let not_applied = match verdict {
            // Every layer edited here is narrower than the managed one.
            _ if locked => Some(format!(
                "This layer's `{block}` is kept on disk but {}",
                vak_core::prompts::DemoteReason::LockedByManaged
            )),
            Verdict::Keep => None,
            Verdict::Demote(reason) => Some(format!(
                "This project is untrusted, so its `{block}` is not applied: {reason}"
            )),
        };
        blocks.push(json!({
            "block": block.wire_name(),
            "label": block.label(),
            "composition": composition_name(block),
            "lands_in": effective_block.wire_name(),
            "state": state_name,
            "exists": start.exists,
            "text": if start.exists { Some(&start.text) } else { None },
            "editor_text": start.text,
            "digest": start.digest,
            "path": path,
            "not_applied": not_applied,
            "effective": effective.map(effective_json),
        }));
    }
    let dir = target(scope, sub.clone(), Block::Identity)?
        .path(&selectors)
        .parent()
        .map(|p| p.to_string())
        .unwrap_or_default();
    Ok(Json(json!({
        "scope": match scope { Scope::Shared => "shared", Scope::Project => "project" },
        "sub": sub_name(&sub),
        "layer": probe.layer().wire_name(),
        "label": probe.layer().label(),
        "dir": dir,
        "home": state.home,
        "project": state.project,
        "trust": trust_name(trust),
        "roles": known_roles(&state),
        "directories": vak_core::layer_directories(&selectors),
        "surfaces": SurfaceKind::ALL.iter().map(|k| k.wire_name()).collect::<Vec<_>>(),
        "blocks": blocks,
    })))
}

/// The body of a save.
#[derive(Debug, Deserialize)]
pub(crate) struct SaveBody {
    /// The new text.
    pub(crate) text: String,
    /// The digest the editor started from; `""` when the block was inherited.
    pub(crate) if_digest: Option<String>,
    /// Gateway saves only: create the bot's or chat's entry when it has
    /// none, which puts it on the gateway's lists. Never implied, so an
    /// edit (or a typo in an id) cannot grant a chat access.
    #[serde(default)]
    pub(crate) create_entry: bool,
    /// `--over-budget`: save even when not every chain the file reaches
    /// could be budgeted (a chain known to go over is refused all the
    /// same).
    #[serde(default)]
    pub(crate) over_budget: bool,
}

pub(crate) fn required_digest(digest: Option<String>) -> Result<String, AdminError> {
    digest.ok_or_else(|| {
        AdminError::BadRequest(
            "send `if_digest`: the digest the editor started from, or \"\" when the block was inherited"
                .to_owned(),
        )
    })
}

/// `PUT /api/layers/{block}`: save one block of one layer.
pub(crate) async fn save(
    State(state): Shared,
    block: Result<Path<String>, PathRejection>,
    q: Result<Query<LayerQuery>, QueryRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let q = query(q)?;
        let block = editable_block(&path(block)?)?;
        let body: SaveBody = body(bytes)?;
        check_text_size(&body.text)?;
        let if_digest = required_digest(body.if_digest)?;
        let target = target(q.scope()?, q.sub()?, block)?;
        let core = core_for(&state, &target)?;
        let saved = core
            .save_block_by(
                &target,
                &body.text,
                Some(&if_digest),
                &state.who(),
                vak_core::history::Action::Save,
                unchecked(body.over_budget),
            )
            .map_err(edit_error)?;
        tracing::info!(path = %saved.outcome.path, "saved a prompt layer file");
        document(&SavedReport::saved(block, &saved, Audience::Page))
    })
    .await
}

/// `DELETE /api/layers/{block}?…&if_digest=`: delete the file, inherit again.
pub(crate) async fn reset(
    State(state): Shared,
    block: Result<Path<String>, PathRejection>,
    q: Result<Query<LayerQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let q = query(q)?;
        let block = editable_block(&path(block)?)?;
        let if_digest = required_digest(q.if_digest.clone())?;
        let target = target(q.scope()?, q.sub()?, block)?;
        let core = core_for(&state, &target)?;
        let reset = core
            .reset_block_by(
                &target,
                Some(&if_digest),
                &state.who(),
                unchecked(q.over_budget),
            )
            .map_err(edit_error)?;
        tracing::info!(path = %reset.preview.path, "reset a prompt layer file");
        document(&SavedReport::reset(block, &reset, Audience::Page))
    })
    .await
}

/// The body of a live count: a candidate text for one block of one layer.
#[derive(Debug, Deserialize)]
pub(crate) struct TokensBody {
    scope: Option<String>,
    surface: Option<String>,
    agent: Option<String>,
    #[serde(default)]
    dir: Option<String>,
    bot: Option<String>,
    chat: Option<String>,
    block: String,
    text: String,
    /// As a gateway save's: the entry would be made, so its absence is no
    /// refusal.
    #[serde(default)]
    create_entry: bool,
}

/// `POST /api/tokens`: what the prefix would count with a candidate text,
/// counted by the budget crate's tokenizer, without writing anything.
pub(crate) async fn tokens(
    State(state): Shared,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    let b: TokensBody = body(bytes)?;
    check_text_size(&b.text)?;
    let block = editable_block(&b.block)?;
    let mut missing_entry = None;
    let preview = match b.bot.as_deref().filter(|s| !s.is_empty()) {
        Some(bot) => {
            let bot = name(NameKind::Bot, bot)?;
            let chat = b
                .chat
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(|c| name(NameKind::Chat, c))
                .transpose()?;
            if !b.create_entry {
                missing_entry = crate::gateway::missing_entry(&state, &bot, chat.as_ref())?;
            }
            crate::gateway::preview(&state, &bot, chat.as_ref(), block, Some(&b.text))?
        }
        None => {
            let q = LayerQuery {
                scope: b.scope,
                surface: b.surface,
                agent: b.agent,
                dir: b.dir,
                if_digest: None,
                over_budget: false,
            };
            let target = target(q.scope()?, q.sub()?, block)?;
            core_for(&state, &target)?
                .preview(&target, Some(&b.text))
                .map_err(edit_error)?
        }
    };
    let forbidden = vak_core::prompts::first_forbidden(&b.text).map(|found| found.to_string());
    let report = &preview.budget.report;
    let text_tokens: Option<usize> = report
        .layers
        .iter()
        .flat_map(|l| &l.sources)
        .find(|s| s.source().to_string() == preview.path.as_str())
        .map(|s| s.tokens);
    Ok(Json(json!({
        "prefix_tokens": report.prefix_tokens,
        "prefix_tokens_before": preview.budget_before.report.prefix_tokens,
        "text_tokens": text_tokens,
        "cap": report.cap,
        "model": report.model,
        "context_window": report.context_window,
        "approximate": report.approximate,
        "over_cap": report.is_over(),
        // A save refuses a forbidden character before any count; the live
        // count says so too, naming it.
        "refused": preview.over_budget() || forbidden.is_some() || missing_entry.is_some(),
        "forbidden": forbidden,
        "missing_entry": missing_entry,
        "not_applied": preview.not_applied,
        "lints": preview.lints,
    })))
}

/// `GET /api/permissions`: the effective allow/ask/deny lists and where each
/// rule came from, plus the rules trust did not apply.
/// `GET /api/managed`: the managed layer, read-only — its directory,
/// locks, ceiling, keys and files (each with the key that signed it), or
/// why it is refused. Never written here: a `scope=managed` write is
/// `403`.
pub(crate) async fn managed(State(state): Shared) -> Result<Json<Value>, AdminError> {
    let Some(location) = vak_core::prompts::ManagedLocation::find() else {
        return Ok(Json(json!({ "present": false })));
    };
    let layer = match vak_core::prompts::load_managed(&state.home) {
        Ok(Some(layer)) => layer,
        Ok(None) => return Ok(Json(json!({ "present": false, "dir": location.dir }))),
        Err(error) => {
            return Ok(Json(json!({
                "present": true,
                "dir": location.dir,
                "read_only": true,
                "refused": error.to_string(),
            })));
        }
    };
    let files: Vec<Value> = layer
        .files
        .iter()
        .map(|f| {
            json!({
                "block": f.block.wire_name(),
                "surface": f.surface.map(|s| s.to_string()),
                "path": f.provenance.source,
                "text": f.text,
                "signed_by": f.provenance.signed_by,
                "locked": layer.locks(f.block),
            })
        })
        .collect();
    Ok(Json(json!({
        "present": true,
        "dir": layer.dir,
        "read_only": true,
        "config": layer.config,
        "locked": layer.locked.iter().map(|b| b.wire_name()).collect::<Vec<_>>(),
        "max_tokens": layer.max_tokens,
        "keys": layer.keys,
        "files": files,
    })))
}

pub(crate) async fn permissions(
    State(state): Shared,
    q: Result<Query<ViewQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let core = state.core(query(q)?.selectors(&state)?)?;
    let resolved = core.resolve()?;
    let rules: Vec<Value> = resolved
        .config
        .permissions
        .iter()
        .map(|(kind, rule)| {
            json!({
                "kind": kind.wire_name(),
                "rule": rule.value,
                "origin": rule.origin.wire_name(),
                "source": rule.source,
            })
        })
        .collect();
    let not_applied: Vec<Value> = resolved
        .demoted
        .iter()
        .filter(|d| d.block.is_none())
        .map(|d| {
            json!({
                "key": d.config_key,
                "source": d.provenance.source,
                "reason": d.reason.explain(),
            })
        })
        .collect();
    Ok(Json(json!({
        "trust": trust_name(resolved.trust),
        "rules": rules,
        "not_applied": not_applied,
    })))
}

/// `?path=P&untrusted=`: which path a turn would touch, relative to the
/// project root (optional), for `GET /api/rules`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RulesQuery {
    path: Option<String>,
    untrusted: Option<bool>,
}

/// `GET /api/rules[?path=P]`: every scoped rule of the project and the
/// home with its globs, block, layer and file; with `path`, which rules
/// match it and the tail lines a turn touching it would carry; rule files
/// left out and rules demoted, each with why. Read-only: rules are edited
/// as files.
pub(crate) async fn rules(
    State(state): Shared,
    q: Result<Query<RulesQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let q = query(q)?;
    let selectors = ViewQuery {
        untrusted: q.untrusted,
        ..ViewQuery::default()
    }
    .selectors(&state)?;
    let core = state.core(selectors)?;
    let paths = match q.path.as_deref().filter(|p| !p.is_empty()) {
        Some(path) => vak_core::paths_from_root(&[path.to_owned()])
            .map_err(|e| AdminError::BadRequest(e.to_string()))?,
        None => Vec::new(),
    };
    let trust = core.trust()?;
    let report = core.rules_report(&paths, trust);
    document(&report.listing(trust))
}

/// `GET /api/audit?limit=N` answers this many events by default.
const AUDIT_DEFAULT_LIMIT: usize = 100;
/// … and never more than this many in one response.
const AUDIT_MAX_LIMIT: usize = 1000;

/// The query of `GET /api/audit`.
#[derive(Debug, Deserialize)]
pub(crate) struct AuditQuery {
    /// How many of the newest events to answer.
    #[serde(default)]
    limit: Option<usize>,
}

/// The page size asked for, defaulted and checked against the maximum.
fn audit_limit(asked: Option<usize>) -> Result<usize, AdminError> {
    match asked {
        None => Ok(AUDIT_DEFAULT_LIMIT),
        Some(n) if (1..=AUDIT_MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(AdminError::BadRequest(format!(
            "limit {n} is out of range: ask for 1 to {AUDIT_MAX_LIMIT} events"
        ))),
    }
}

/// `GET /api/audit[?limit=N]`: the newest `limit` security events (default
/// 100, at most 1000), newest first, and how many there are in all. The
/// log is streamed on a blocking thread under a per-line bound, keeping only
/// one page, so neither a large log nor a FIFO stalls other requests.
pub(crate) async fn audit(
    State(state): Shared,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let limit = audit_limit(query(q)?.limit)?;
    let store = Arc::clone(&state.store);
    let path = store.describe();
    let entries = tokio::task::spawn_blocking(move || store.audit_newest(limit))
        .await
        .map_err(|e| AdminError::Internal(format!("the audit log reader stopped: {e}")))?
        .map_err(|e| AdminError::Internal(e.to_string()))?;
    document(&AuditPage::of(&entries, limit).at(&path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_core::prompts::{Contributor, Origin, PromptLayer, Provenance};

    fn resolved(block: Block, layers: &[PromptLayer]) -> ResolvedBlock {
        ResolvedBlock {
            locked: false,
            block,
            contributors: layers
                .iter()
                .map(|&layer| Contributor {
                    provenance: Provenance::new(layer, Origin::Home, "x").into(),
                    text: "t".to_owned().into(),
                    interop: false,
                    imports: Vec::new(),
                })
                .collect(),
            shadowed: Vec::new(),
            text: "t".to_owned().into(),
        }
    }

    #[test]
    fn provenance_reads_like_doc_45s_sketch() {
        use PromptLayer::*;
        let cases = [
            (Block::Identity, vec![Shared], "from Shared"),
            (Block::OperatingRules, vec![Seed], "from seed"),
            (Block::Identity, vec![], "empty"),
            (
                Block::Guardrails,
                vec![Seed, Shared, Project, Surface],
                "seed + Shared + 2",
            ),
            (Block::Guardrails, vec![Seed, Shared], "seed + Shared"),
            (Block::SurfaceNote, vec![Project], "This project"),
            (Block::CapabilityContract, vec![Seed], "locked"),
            (Block::Surface, vec![Runtime], "runtime"),
            (Block::Skills, vec![Runtime, Runtime], "runtime, 2 entries"),
        ];
        for (block, layers, want) in cases {
            assert_eq!(
                provenance_summary(&resolved(block, &layers)),
                want,
                "{block}"
            );
        }
    }

    #[test]
    fn the_audit_page_has_a_default_and_a_maximum() {
        assert_eq!(audit_limit(None).ok(), Some(AUDIT_DEFAULT_LIMIT));
        assert_eq!(audit_limit(Some(5)).ok(), Some(5));
        assert_eq!(
            audit_limit(Some(AUDIT_MAX_LIMIT)).ok(),
            Some(AUDIT_MAX_LIMIT)
        );
        for bad in [0, AUDIT_MAX_LIMIT + 1, usize::MAX] {
            assert!(
                matches!(audit_limit(Some(bad)), Err(AdminError::BadRequest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_user_blocks_are_editable_targets() {
        assert!(editable_block("identity").is_ok());
        assert!(editable_block("surface-note").is_ok());
        for bad in [
            "capability-contract",
            "surface",
            "skills",
            "agent-instructions",
            "../x",
            "",
        ] {
            assert!(
                matches!(editable_block(bad), Err(AdminError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}

/// The history's refusals as HTTP answers.
pub(crate) fn history_error(error: HistoryError) -> AdminError {
    match error {
        HistoryError::BadDigest(_) => AdminError::BadRequest(error.to_string()),
        HistoryError::NotAVersion { .. } => AdminError::NotFound(error.to_string()),
        ref not_kept if not_kept.is_not_kept() => AdminError::NotFound(error.to_string()),
        other => AdminError::Internal(other.to_string()),
    }
}

/// `GET /api/history/{block}?scope=…`: the versions of one block of one
/// layer, oldest first, and the file's digest now.
pub(crate) async fn history(
    State(state): Shared,
    block: Result<Path<String>, PathRejection>,
    q: Result<Query<LayerQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let q = query(q)?;
        let block = editable_block(&path(block)?)?;
        let target = target(q.scope()?, q.sub()?, block)?;
        let core = core_for(&state, &target)?;
        let versions = vak_core::history::versions(&core, &target).map_err(history_error)?;
        let current = core.edit_start(&target).map_err(edit_error)?;
        let path = target.path(core.selectors());
        document(
            &VersionsReport::of(&versions)
                .block(block)
                .at_path(&path)
                .with_current(&current.digest, versions.skipped),
        )
    })
    .await
}

/// `?from=&to=` of a history diff: digests, empty for "no file".
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DiffQuery {
    #[serde(flatten)]
    layer: LayerQuery,
    from: Option<String>,
    to: Option<String>,
}

/// `GET /api/history/{block}/diff?scope=…&from=D&to=D`: a unified diff
/// between two versions (empty digest: no file).
pub(crate) async fn history_diff(
    State(state): Shared,
    block: Result<Path<String>, PathRejection>,
    q: Result<Query<DiffQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let q = query(q)?;
        let block = editable_block(&path(block)?)?;
        let target = target(q.layer.scope()?, q.layer.sub()?, block)?;
        let core = core_for(&state, &target)?;
        let history = core.store().history();
        let from = q.from.filter(|d| !d.is_empty());
        let to = q.to.filter(|d| !d.is_empty());
        // The file as it is now answers for its own digest, recorded or not
        // (edited by hand, or by a `git pull`).
        // Both versions are named: a file that cannot be read now only
        // means its own digest reads from the store, like any other.
        let current = vak_core::history::current_text(&core, &target)
            .ok()
            .flatten();
        document(
            &VersionDiff::between(
                history,
                &block.to_string(),
                "(no file)",
                from,
                to,
                current.as_ref(),
            )
            .map_err(history_error)?,
        )
    })
    .await
}

/// The body of a revert.
#[derive(Debug, Deserialize)]
pub(crate) struct RevertBody {
    /// The version to save back.
    to: String,
    /// The digest the page last saw (conflict otherwise).
    if_digest: Option<String>,
    /// As a save's.
    #[serde(default)]
    over_budget: bool,
}

/// `POST /api/history/{block}/revert?scope=…`: save an earlier version
/// back, through the same checks as a save.
pub(crate) async fn revert(
    State(state): Shared,
    block: Result<Path<String>, PathRejection>,
    q: Result<Query<LayerQuery>, QueryRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let q = query(q)?;
        let block = editable_block(&path(block)?)?;
        let body: RevertBody = body(bytes)?;
        let if_digest = required_digest(body.if_digest)?;
        let target = target(q.scope()?, q.sub()?, block)?;
        let core = core_for(&state, &target)?;
        let saved = core
            .revert_block(
                &target,
                &body.to,
                Some(&if_digest),
                &state.who(),
                unchecked(body.over_budget),
            )
            .map_err(edit_error)?;
        tracing::info!(path = %saved.outcome.path, "reverted a prompt layer file");
        document(&SavedReport::saved(block, &saved, Audience::Page))
    })
    .await
}

/// `GET /api/trust-preview`: what trusting this server's project would
/// change. Writes nothing.
pub(crate) async fn trust_preview(State(state): Shared) -> Result<Json<Value>, AdminError> {
    let core = state.core(state.selectors())?;
    let trusted = core.trust()? == Trust::Trusted;
    let preview = vak_core::history::trust_preview(&state.selectors())?;
    document(&preview.report().trusted(trusted))
}

/// `?old=ID&new=ID`: a rotation's two sessions.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RotationQuery {
    old: Option<String>,
    new: Option<String>,
}

/// `GET /api/audit/diff?old=ID&new=ID`: behind a `config-change` event, the
/// text diff per changed block and layer between what the old session froze
/// and what the new one froze (both read from the object store; a text that
/// was never kept says so).
pub(crate) async fn rotation_diff(
    State(state): Shared,
    q: Result<Query<RotationQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    crate::server::blocking(move || {
        let q = query(q)?;
        let id = |raw: Option<String>, which: &str| {
            let raw = raw.ok_or_else(|| {
                AdminError::BadRequest(format!("this route needs `{which}=<session id>`"))
            })?;
            SessionId::parse(&raw).map_err(|e| AdminError::BadRequest(e.to_string()))
        };
        let (old, new) = (id(q.old, "old")?, id(q.new, "new")?);
        let store = &state.store;
        let read = |id: &SessionId| {
            store.read(id).map_err(|e| match e {
                SessionError::NotFound { .. } => AdminError::NotFound(e.to_string()),
                other => AdminError::Internal(other.to_string()),
            })
        };
        let (old_ledger, new_ledger) = (read(&old)?, read(&new)?);
        let changes = vak_core::history::contract_changes(
            store.history(),
            &old_ledger.contract().prompt_layers,
            &new_ledger.contract().prompt_layers,
        );
        let list: Vec<_> = changes.iter().map(TextChange::report).collect();
        Ok(Json(json!({
            "old": old.to_string(),
            "new": new.to_string(),
            "changes": list,
        })))
    })
    .await
}
