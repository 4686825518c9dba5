//! Create, resume and deliver: the lifecycle of the resume table
//! (docs/sessions.md), with typed outcomes.

use camino::Utf8Path;
use serde::Serialize;
use serde_json::json;
use vak_core::home::ReplicaCheck;
use vak_core::prompts::{
    Bound, ChatPlan, Claim, ConfigChange, DriftAccepted, DriftReport, FreshSession, FrozenContract,
    LayerChange, Name, NameKind, ParentSession, Record, ResolvedPrompt, ResumeDecision, ResumePath,
    SessionError, SessionId, SessionMeta, Store, SurfaceKind, TornLine, Turn, TurnRule, decide,
    now_rfc3339,
};
use vak_core::{Admission, Core, InboundPrompts, PromptCache, Selectors};

use crate::{LifecycleError, Request, render_tail_for, render_tail_from};

/// What a new session freezes, from a fresh resolution
/// ([`ResolvedPrompt::freeze`]).
pub fn freeze(resolved: &ResolvedPrompt, parent: Option<ParentSession>) -> FrozenContract {
    resolved.freeze(parent)
}

/// The creation metadata: the selectors, so a resume re-resolves the same
/// chain.
pub fn meta_for(selectors: &Selectors) -> SessionMeta {
    SessionMeta {
        project: Some(selectors.project.to_string()),
        surface: Some(selectors.surface.wire_name().to_owned()),
        bot: selectors.bot.as_ref().map(ToString::to_string),
        chat: selectors.chat.as_ref().map(ToString::to_string),
        agent: selectors.agent.as_ref().map(ToString::to_string),
        untrusted: selectors.force_untrusted,
        workdir: selectors.workdir.as_ref().map(ToString::to_string),
        ..SessionMeta::now()
    }
}

/// The selectors session `id` was created with. A ledger without a project
/// (one written before projects were recorded) resolves for
/// `fallback_project`.
pub fn selectors_of(
    home: &Utf8Path,
    id: &SessionId,
    meta: &SessionMeta,
    fallback_project: &Utf8Path,
) -> Result<Selectors, LifecycleError> {
    let surface = match &meta.surface {
        Some(raw) => raw
            .parse::<SurfaceKind>()
            .map_err(|e| LifecycleError::RecordedSelectors {
                id: id.to_string(),
                what: "was created for a surface this build does not know",
                reason: e.to_string(),
            })?,
        None => SurfaceKind::Cli,
    };
    let project = meta
        .project
        .as_deref()
        .map_or_else(|| fallback_project.to_owned(), Into::into);
    let selector = |kind: NameKind, raw: &Option<String>| {
        raw.as_deref()
            .map(|raw| Name::new(kind, raw))
            .transpose()
            .map_err(|e| LifecycleError::RecordedSelectors {
                id: id.to_string(),
                what: "records a selector this build rejects",
                reason: e.to_string(),
            })
    };
    Ok(Selectors {
        surface,
        bot: selector(NameKind::Bot, &meta.bot)?,
        chat: selector(NameKind::Chat, &meta.chat)?,
        agent: selector(NameKind::Role, &meta.agent)?,
        force_untrusted: meta.untrusted,
        workdir: meta.workdir.as_deref().map(|workdir| {
            let workdir = Utf8Path::new(workdir);
            // A directory that has since become a repository of its own is
            // no layer of this project any more: the session resolves from
            // just above it, so its layers show as drift (exit 3, or run on
            // the frozen prompt with --accept-drift) rather than making the
            // session impossible to resume or diff.
            match vak_core::prompts::nested_repository(&project, workdir) {
                Some(nested) => project.join(nested.parent().unwrap_or(Utf8Path::new(""))),
                None => workdir.to_owned(),
            }
        }),
        ..Selectors::new(home, project)
    })
}

/// A session just created.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Its id.
    pub id: SessionId,
    /// What it froze.
    pub contract: FrozenContract,
    /// The resolution's warnings (removed characters, skipped files), and
    /// the prompt's being over its cap.
    pub warnings: Vec<String>,
    /// Whether the frozen prefix is over its cap (frozen all the same:
    /// only the model's context window refuses).
    pub over_cap: bool,
}

/// `vak session new`: resolve, check the window, freeze, create.
pub fn new_session(
    store: &dyn Store,
    core: &Core,
    parent: Option<&SessionId>,
) -> Result<NewSession, LifecycleError> {
    let parent = match parent {
        Some(parent_id) => {
            let header = store.read_header(parent_id)?;
            Some(ParentSession {
                session_id: parent_id.to_string(),
                agent: header.contract.agent,
            })
        }
        None => None,
    };
    // A store holding the home side: resolve from a replica brought up to it.
    vak_core::home::sync_if_shared(&core.selectors().home, store, false)?;
    let resolved = core.resolve()?;
    let budget = vak_core::check_window(&resolved)?;
    let contract = freeze(&resolved, parent);
    let mut warnings = resolved.warnings.clone();
    let config = vak_core::shared_config(&core.selectors().home);
    warnings.extend(vak_core::over_cap_warning(&budget.report, &config));
    if let Err(error) = vak_core::history::keep_contributions(store.history(), &resolved) {
        warnings.push(format!(
            "the texts this session froze could not be kept, so `vak session diff` will say \"text not kept\" for them: {error}"
        ));
    }
    let id = store.create(meta_for(core.selectors()), contract.clone())?;
    Ok(NewSession {
        id,
        contract,
        warnings,
        over_cap: budget.report.is_over(),
    })
}

/// A named session resumed.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The session.
    pub id: SessionId,
    /// Its frozen fingerprint.
    pub fingerprint: String,
    /// The current resolution's fingerprint.
    pub current_fingerprint: String,
    /// Frozen vs current.
    pub drift: DriftReport,
    /// The request an agent would send.
    pub request: Request,
    /// Whether a turn was appended (a message was given).
    pub turn_recorded: bool,
    /// The scoped rules in force for this turn (in its tail, and in its
    /// ledger record when one was appended).
    pub rules: Vec<TurnRule>,
    /// What a person should know about the scoped rules: a rule file left
    /// out (bad front matter, a link out of the project), a rule that
    /// matched but does not apply (an untrusted project's operating rules).
    pub rule_notes: Vec<String>,
}

/// The paths a turn names, as they were given: they choose the scoped
/// rules in its tail.
#[derive(Debug, Clone, Copy, Default)]
pub enum TurnPaths<'a> {
    /// No path: no scoped rule applies.
    #[default]
    None,
    /// From a command line: relative to `cwd`, or absolute.
    FromCwd {
        /// The directory the command ran in.
        cwd: &'a std::path::Path,
        /// The paths.
        paths: &'a [std::path::PathBuf],
    },
    /// From a delivery's body: relative to the project root.
    FromRoot(&'a [String]),
}

/// The scoped part of one turn.
#[derive(Debug, Clone, Default)]
pub struct TurnScoped {
    /// The lines that follow the tail's own (empty when no rule applies).
    pub text: String,
    /// What the turn's ledger record says about each rule in force.
    pub rules: Vec<TurnRule>,
    /// Each rule's text as it entered the tail, kept in the history store
    /// under the digest the record names, so the digest resolves.
    pub texts: Vec<String>,
    /// What a person should read about the rest: rule files left out,
    /// rules demoted, text cleaned.
    pub notes: Vec<String>,
}

/// The scoped part of a turn's tail for `core`'s project: the rules `paths`
/// select, and what a person should be told about the rest.
///
/// # Errors
///
/// A path outside the project, malformed, or too many
/// ([`vak_core::CoreError::TurnPath`]).
pub fn scoped_for_turn(core: &Core, paths: TurnPaths<'_>) -> Result<TurnScoped, LifecycleError> {
    let paths = match paths {
        TurnPaths::None => return Ok(TurnScoped::default()),
        TurnPaths::FromCwd { cwd, paths } => {
            vak_core::paths_from_cwd(&core.selectors().project, cwd, paths)?
        }
        TurnPaths::FromRoot(paths) => vak_core::paths_from_root(paths)?,
    };
    let trust = core.trust()?;
    let (scoped, set) = core.scoped_tail(&paths, trust);
    Ok(scoped_parts(scoped, &set))
}

/// A turn's scoped tail as a [`TurnScoped`].
fn scoped_parts(
    scoped: vak_core::prompts::ScopedTail,
    set: &vak_core::prompts::RuleSet,
) -> TurnScoped {
    let mut notes: Vec<String> = set.skipped.iter().map(ToString::to_string).collect();
    notes.extend(scoped.warnings.iter().cloned());
    for demoted in &scoped.demoted {
        notes.push(format!(
            "scoped rule `{}` matched but does not apply: {}",
            vak_core::prompts::Escaped(&demoted.provenance.source.to_string()),
            demoted.reason.explain()
        ));
    }
    TurnScoped {
        rules: vak_core::turn_rules(&scoped),
        texts: scoped.active.iter().map(|r| r.text.clone()).collect(),
        text: scoped.text,
        notes,
    }
}

/// Keep each rule text of a turn in the history store, so the digests its
/// record names resolve.
fn keep_rule_texts(store: &dyn Store, scoped: &TurnScoped) -> Result<(), LifecycleError> {
    for text in &scoped.texts {
        store.history().put_object(text)?;
    }
    Ok(())
}

/// The tail with the scoped rules' lines after its own.
fn with_scoped(tail: String, scoped: &str) -> String {
    if scoped.is_empty() {
        tail
    } else {
        format!("{}\n{}", tail.trim_end(), scoped.trim_end())
    }
}

/// What resuming a named session did (the resume table's named path).
#[derive(Debug, Clone)]
pub enum Exec {
    /// The prompt is unchanged (or the baseline unknown): resumed.
    Continued(Resumed),
    /// The prompt changed and drift was accepted: resumed on the frozen
    /// prefix, the acceptance recorded in the ledger.
    ProceedOnFrozen(Resumed),
    /// The prompt changed and drift was not accepted: nothing written.
    Refused {
        /// The session.
        id: SessionId,
        /// Its frozen fingerprint.
        fingerprint: String,
        /// The current resolution's fingerprint.
        current_fingerprint: String,
        /// What changed.
        drift: DriftReport,
    },
}

impl Exec {
    /// The resume decision, as its wire word.
    pub fn decision(&self) -> ResumeDecision {
        match self {
            Exec::Continued(_) => ResumeDecision::Continue,
            Exec::ProceedOnFrozen(_) => ResumeDecision::ProceedOnFrozen,
            Exec::Refused { .. } => ResumeDecision::Refuse,
        }
    }

    /// The `vak exec --format json` object.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Exec::Continued(r) | Exec::ProceedOnFrozen(r) => json!({
                "session_id": r.id,
                "decision": self.decision(),
                "fingerprint": r.fingerprint,
                "current_fingerprint": r.current_fingerprint,
                "drift": r.drift,
                "request": r.request,
                "turn_recorded": r.turn_recorded,
                "rules": r.rules,
            }),
            Exec::Refused {
                id,
                fingerprint,
                current_fingerprint,
                drift,
            } => json!({
                "session_id": id,
                "decision": self.decision(),
                "fingerprint": fingerprint,
                "current_fingerprint": current_fingerprint,
                "drift": drift,
            }),
        }
    }
}

/// The prefix a session runs on: frozen, unless it froze none.
fn session_prefix(contract: &FrozenContract, current: &ResolvedPrompt) -> (String, &'static str) {
    if contract.prefix.is_empty() {
        (current.prefix.clone(), "current")
    } else {
        (contract.prefix.clone(), "frozen")
    }
}

/// Resolve the chain a session was created for, as it is now. A role the
/// session ran as that is no longer defined (its directory deleted) is no
/// error here: the chain is resolved without it, so its layers show as
/// drift, as any other removed layer does, and `--accept-drift` can still
/// run on the frozen prompt.
///
/// # Errors
///
/// As [`Core::resolve`].
pub fn resolve_session(core: &Core) -> Result<vak_core::prompts::ResolvedPrompt, LifecycleError> {
    match core.resolve() {
        Err(vak_core::CoreError::Loader(vak_core::prompts::LoaderError::UnknownRole {
            ..
        })) => {
            let without = Selectors {
                agent: None,
                ..core.selectors().clone()
            };
            Ok(Core::open(without)?.resolve()?)
        }
        other => Ok(other?),
    }
}

/// `vak exec`: resume session `id` of `home`. Fails closed on drift
/// ([`Exec::Refused`]) unless `accept_drift`, which runs on the frozen
/// prefix and records that the drift was accepted. Returns the ledger's
/// warnings (a torn last line) beside the outcome.
pub fn exec(
    store: &dyn Store,
    home: &Utf8Path,
    id: &SessionId,
    accept_drift: bool,
    message: Option<&str>,
    paths: TurnPaths<'_>,
    fallback_project: &Utf8Path,
) -> Result<(Exec, Vec<TornLine>), LifecycleError> {
    let ledger = store.read(id)?;
    let warnings = ledger.warnings.clone();
    vak_core::home::sync_if_shared(home, store, false)?;
    let core = Core::open(selectors_of(
        home,
        id,
        &ledger.header.meta,
        fallback_project,
    )?)?;
    // A bad path is refused before anything is written, drift or not.
    let scoped = scoped_for_turn(&core, paths)?;
    let current = resolve_session(&core)?;
    let drift = vak_core::history::session_drift(ledger.contract(), &current);
    let decision = decide(ResumePath::NamedSession { accept_drift }, &drift);
    match decision {
        ResumeDecision::Refuse => {
            return Ok((
                Exec::Refused {
                    id: id.clone(),
                    fingerprint: ledger.contract().fingerprint.clone(),
                    current_fingerprint: current.fingerprint,
                    drift,
                },
                warnings,
            ));
        }
        ResumeDecision::ProceedOnFrozen => {
            // Proceeding on the current prompt while saying "frozen" would
            // be the drift the caller was told is refused.
            if ledger.contract().prefix.is_empty() {
                return Err(LifecycleError::NoFrozenPrompt { id: id.to_string() });
            }
            // The record names the current texts' digests: keep them first,
            // so each resolves, or record nothing.
            vak_core::history::keep_contributions(store.history(), &current)?;
            store.append(
                id,
                &Record::DriftAccepted(DriftAccepted {
                    at: now_rfc3339(),
                    changes: drift.changes.clone(),
                    current_fingerprint: Some(current.fingerprint.clone()),
                }),
            )?;
        }
        ResumeDecision::Continue => {
            vak_core::check_window(&current)?;
        }
        ResumeDecision::Rotate => {
            return Err(LifecycleError::CannotRotate { id: id.to_string() });
        }
    }
    let turns: Vec<&Turn> = ledger.turns().collect();
    let tail = with_scoped(render_tail_for(&turns, message), &scoped.text);
    let (prefix, prefix_source) = session_prefix(ledger.contract(), &current);
    if let Some(message) = message {
        // Kept first, so every digest the record names resolves.
        keep_rule_texts(store, &scoped)?;
        store.append(
            id,
            &Record::Turn(Turn::now(message, tail.clone()).with_rules(scoped.rules.clone())),
        )?;
    }
    let resumed = Resumed {
        id: id.clone(),
        fingerprint: ledger.contract().fingerprint.clone(),
        current_fingerprint: current.fingerprint.clone(),
        drift,
        request: Request {
            prefix,
            prefix_source,
            tail,
            message: message.map(ToOwned::to_owned),
        },
        turn_recorded: message.is_some(),
        rules: scoped.rules,
        rule_notes: scoped.notes,
    };
    Ok((
        if decision == ResumeDecision::ProceedOnFrozen {
            Exec::ProceedOnFrozen(resumed)
        } else {
            Exec::Continued(resumed)
        },
        warnings,
    ))
}

/// What a delivery did with the chat's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The chat had no binding; a session was created and bound.
    Created,
    /// The bound session's prompt is unchanged; it continues.
    Continued,
    /// The prompt drifted; a fresh session was bound, the old ledger kept,
    /// one `config-change` event written.
    Rotated {
        /// The session the chat was bound to.
        previous: SessionId,
        /// What changed.
        changes: Vec<LayerChange>,
    },
    /// The bound session's ledger is gone; a fresh session was bound.
    Rebound {
        /// The session whose ledger is gone.
        gone: SessionId,
    },
}

impl DeliveryOutcome {
    /// The wire word: `created`, `continued`, `rotated`, `rebound`.
    pub fn wire_name(&self) -> &'static str {
        match self {
            DeliveryOutcome::Created => "created",
            DeliveryOutcome::Continued => "continued",
            DeliveryOutcome::Rotated { .. } => "rotated",
            DeliveryOutcome::Rebound { .. } => "rebound",
        }
    }
}

/// A delivery committed.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The bot.
    pub bot: Name,
    /// The chat.
    pub chat: Name,
    /// The session the turn was appended to.
    pub session: SessionId,
    /// What happened to the binding.
    pub outcome: DeliveryOutcome,
    /// The request an agent would send.
    pub request: Request,
    /// What the resolution skipped or linted (a refused layer file, an
    /// ignored key), for the operator: deliveries go on without them.
    pub warnings: Vec<String>,
}

#[derive(Serialize)]
struct DeliveredJson<'a> {
    bot: &'a str,
    chat: &'a str,
    session_id: &'a SessionId,
    outcome: &'static str,
    previous_session: Option<&'a SessionId>,
    changes: &'a [LayerChange],
    request: &'a Request,
    warnings: &'a [String],
}

impl Delivered {
    /// The session the chat was bound to before, if any.
    pub fn previous_session(&self) -> Option<&SessionId> {
        match &self.outcome {
            DeliveryOutcome::Created => None,
            DeliveryOutcome::Continued => Some(&self.session),
            DeliveryOutcome::Rotated { previous, .. } => Some(previous),
            DeliveryOutcome::Rebound { gone } => Some(gone),
        }
    }

    /// The changes that caused a rotation (empty otherwise).
    pub fn changes(&self) -> &[LayerChange] {
        match &self.outcome {
            DeliveryOutcome::Rotated { changes, .. } => changes,
            _ => &[],
        }
    }

    /// The `vak gateway deliver --format json` object, which the service
    /// answers too.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.json()).unwrap_or_else(|e| json!({"error": e.to_string()}))
    }

    /// The same object as [`Delivered::to_json`], borrowed: the service
    /// serialises it straight into its answer, since building the
    /// `Value` first copied the whole prompt into a tree of maps on every
    /// delivery. Its keys come in a fixed order of their own, not sorted.
    pub fn json(&self) -> impl Serialize + '_ {
        DeliveredJson {
            bot: self.bot.as_str(),
            chat: self.chat.as_str(),
            session_id: &self.session,
            outcome: self.outcome.wire_name(),
            previous_session: self.previous_session(),
            changes: self.changes(),
            request: &self.request,
            warnings: &self.warnings,
        }
    }
}

/// Deliver `text` to the chat `prompts` was opened for, as one store
/// transaction: the allowlist is checked first (refused, nothing written),
/// then under the chat's lock the binding is looked up, the prompt
/// resolved, and the chat continues, rotates (one `config-change` event)
/// or is bound afresh, and the turn appended.
pub fn deliver(
    store: &dyn Store,
    prompts: &InboundPrompts,
    meta: &SessionMeta,
    text: &str,
) -> Result<Delivered, LifecycleError> {
    deliver_cached(store, prompts, meta, text, None, None)
}

/// [`deliver`], resolving through `cache` when one is given (the service
/// does: a [`PromptCache::within_window`], so what it answers fits the
/// model's window; the resolution still happens under the chat's lock),
/// and taking `claim` (a signed request's signature; the service passes
/// one, `vak gateway deliver` none) in the delivery's own transaction: a
/// replay is refused as [`SessionError::Replayed`] with nothing written,
/// and a delivery that fails leaves the signature free for the retry.
pub fn deliver_cached(
    store: &dyn Store,
    prompts: &InboundPrompts,
    meta: &SessionMeta,
    text: &str,
    cache: Option<&PromptCache>,
    claim: Option<&Claim<'_>>,
) -> Result<Delivered, LifecycleError> {
    deliver_with(
        store,
        prompts,
        meta,
        text,
        &[],
        cache.map(|c| (c, None)),
        claim,
    )
}

/// [`deliver_cached`] for a message that names the paths its turn touches
/// (relative to the project root, already validated:
/// [`vak_core::paths_from_root`]): the scoped rules they select join the
/// turn's tail, and its ledger record names them.
pub fn deliver_paths(
    store: &dyn Store,
    prompts: &InboundPrompts,
    meta: &SessionMeta,
    text: &str,
    paths: &[camino::Utf8PathBuf],
    cache: Option<&PromptCache>,
    claim: Option<&Claim<'_>>,
) -> Result<Delivered, LifecycleError> {
    deliver_with(
        store,
        prompts,
        meta,
        text,
        paths,
        cache.map(|c| (c, None)),
        claim,
    )
}

/// [`deliver_paths`] as a long-running service delivers: resolving
/// through `cache`, and checking the home-side replica through `replica`,
/// which reads and hashes nothing while `cache`'s change notifications say
/// nothing under the home changed. The generation it remembers is checked
/// by the store under the chat's lock, so a save on another node is still
/// taken at this node's next delivery: the store refuses the stale
/// generation (nothing written), the replica is synced and the delivery
/// resolved again.
#[allow(clippy::too_many_arguments)]
pub fn deliver_served(
    store: &dyn Store,
    prompts: &InboundPrompts,
    meta: &SessionMeta,
    text: &str,
    paths: &[camino::Utf8PathBuf],
    cache: &PromptCache,
    replica: &ReplicaCheck,
    claim: Option<&Claim<'_>>,
) -> Result<Delivered, LifecycleError> {
    deliver_with(
        store,
        prompts,
        meta,
        text,
        paths,
        Some((cache, Some(replica))),
        claim,
    )
}

fn deliver_with(
    store: &dyn Store,
    prompts: &InboundPrompts,
    meta: &SessionMeta,
    text: &str,
    paths: &[camino::Utf8PathBuf],
    served: Option<(&PromptCache, Option<&ReplicaCheck>)>,
    claim: Option<&Claim<'_>>,
) -> Result<Delivered, LifecycleError> {
    let (Some(bot), Some(chat)) = (prompts.bot().cloned(), prompts.chat().cloned()) else {
        return Err(LifecycleError::NotAChat);
    };
    let cache = served.map(|(cache, _)| cache);
    // A store holding the home side: resolve from a replica synced to its
    // generation, and let the store refuse (nothing written) when it moved
    // on before the chat's lock was taken; then sync and resolve again.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let synced = match served {
            Some((cache, Some(replica))) => prompts.sync_home_watched(store, cache, replica)?,
            _ => prompts.sync_home(store, false)?,
        };
        let generation = match synced {
            Some(synced) => {
                if synced.changed
                    && let Some(cache) = cache
                {
                    cache.clear();
                }
                Some(synced.generation)
            }
            None => None,
        };
        match deliver_once(
            store,
            prompts,
            meta,
            (text, paths),
            cache,
            &bot,
            &chat,
            generation,
            claim,
        ) {
            Err(LifecycleError::Store(SessionError::HomeMoved { .. }))
                if attempt < HOME_RETRIES =>
            {
                if let Some((_, Some(replica))) = served {
                    replica.forget();
                }
            }
            other => return other,
        }
    }
}

/// How often a delivery resolves again because the home side moved under it.
const HOME_RETRIES: usize = 8;

#[allow(clippy::too_many_arguments)]
fn deliver_once(
    store: &dyn Store,
    prompts: &InboundPrompts,
    meta: &SessionMeta,
    (text, paths): (&str, &[camino::Utf8PathBuf]),
    cache: Option<&PromptCache>,
    bot: &Name,
    chat: &Name,
    generation: Option<i64>,
    claim: Option<&Claim<'_>>,
) -> Result<Delivered, LifecycleError> {
    let (bot, chat) = (bot.clone(), chat.clone());
    match prompts.admission(cache)? {
        Admission::Admitted => {}
        Admission::UnknownBot => {
            return Err(LifecycleError::UnknownBot {
                bot: bot.to_string(),
            });
        }
        Admission::UnknownChat => {
            return Err(LifecycleError::UnknownChat {
                bot: bot.to_string(),
                chat: chat.to_string(),
            });
        }
        Admission::NotAChat => return Err(LifecycleError::NotAChat),
    }
    // Read before the chat's lock is taken: the rules are per turn, never
    // part of what a binding decision compares.
    let scoped = if paths.is_empty() {
        TurnScoped::default()
    } else {
        let (tail, set) = prompts.scoped_tail(paths)?;
        scoped_parts(tail, &set)
    };
    // Kept before the turn that names them is written (idempotent, and
    // outside the chat's lock: see below on a pooled connection).
    keep_rule_texts(store, &scoped)?;
    let mut failure: Option<LifecycleError> = None;
    let mut planned: Option<(DeliveryOutcome, Request, Vec<String>)> = None;
    let mut to_keep: Option<std::sync::Arc<ResolvedPrompt>> = None;
    let mut plan = |bound: &Bound| -> Option<ChatPlan> {
        match plan_delivery(prompts, cache, meta, &bot, &chat, bound, text, &scoped) {
            Ok((plan, outcome, request, mut warnings, keep)) => {
                warnings.extend(scoped.notes.iter().cloned());
                planned = Some((outcome, request, warnings));
                to_keep = keep;
                Some(plan)
            }
            Err(error) => {
                failure = Some(error);
                None
            }
        }
    };
    let committed = store.deliver_at(&bot, &chat, generation, claim, &mut plan)?;
    if let Some(error) = failure {
        return Err(error);
    }
    // A fresh session's texts are kept once it is committed, not under the
    // chat's lock: with PostgreSQL the delivery holds a pooled connection
    // for its transaction, and keeping would need a second one (a full pool
    // of deliveries would then wait on each other forever). Keeping is
    // idempotent, so a crash in between costs only "text not kept".
    if let (Some(_), Some((_, _, warnings)), Some(resolved)) =
        (&committed, planned.as_mut(), to_keep.as_deref())
        && let Err(error) = prompts.keep_contributions(store.history(), resolved)
    {
        warnings.push(format!(
            "the texts this session froze could not be kept, so `vak session diff` will say \"text not kept\" for them: {error}"
        ));
    }
    match (committed, planned) {
        (Some(committed), Some((outcome, request, warnings))) => Ok(Delivered {
            warnings,
            bot,
            chat,
            session: committed.session,
            outcome,
            request,
        }),
        _ => Err(LifecycleError::BindingDecision {
            bot: bot.to_string(),
            chat: chat.to_string(),
        }),
    }
}

/// What a delivery's plan decided: the plan, what it means, the request,
/// the resolution's warnings, and (for a fresh session) the resolution
/// whose texts to keep once it is committed.
type Planned = (
    ChatPlan,
    DeliveryOutcome,
    Request,
    Vec<String>,
    Option<std::sync::Arc<ResolvedPrompt>>,
);

/// The pure half of a delivery, run under the chat's lock.
#[allow(clippy::too_many_arguments)]
fn plan_delivery(
    prompts: &InboundPrompts,
    cache: Option<&PromptCache>,
    meta: &SessionMeta,
    bot: &Name,
    chat: &Name,
    bound: &Bound,
    text: &str,
    TurnScoped {
        text: scoped,
        rules,
        ..
    }: &TurnScoped,
) -> Result<Planned, LifecycleError> {
    let current = match cache {
        Some(cache) => {
            let current = cache.resolve(prompts)?;
            if !cache.checks_window() {
                vak_core::check_window(&current)?;
            }
            current
        }
        None => {
            let current = prompts.resolve()?;
            vak_core::check_window(&current)?;
            std::sync::Arc::new(current)
        }
    };
    let fresh = |outcome: DeliveryOutcome, change: Option<ConfigChange>| {
        let tail = with_scoped(render_tail_for(&[], Some(text)), scoped);
        let request = Request {
            prefix: current.prefix.clone(),
            prefix_source: "frozen",
            tail: tail.clone(),
            message: Some(text.to_owned()),
        };
        let plan = ChatPlan::Fresh(Box::new(FreshSession {
            meta: SessionMeta {
                created_at: now_rfc3339(),
                ..meta.clone()
            },
            contract: freeze(&current, None),
            change,
            turn: Turn::now(text, tail).with_rules(rules.clone()),
        }));
        (plan, outcome, request)
    };
    let planned = match bound {
        Bound::Unbound => Ok(fresh(DeliveryOutcome::Created, None)),
        Bound::Gone(gone) => Ok(fresh(DeliveryOutcome::Rebound { gone: gone.clone() }, None)),
        Bound::Live(ledger) => {
            // As `exec` judges a named session: a frozen prefix its layers
            // no longer render rotates the chat too, rather than being sent.
            let report = vak_core::history::session_drift(ledger.contract(), &current);
            match decide(ResumePath::ChatBinding, &report) {
                ResumeDecision::Continue => {
                    let tail = with_scoped(
                        render_tail_from(
                            ledger.first_turn.as_ref(),
                            ledger.last_turn.as_ref(),
                            ledger.turns,
                            Some(text),
                        ),
                        scoped,
                    );
                    let (prefix, prefix_source) = session_prefix(ledger.contract(), &current);
                    Ok((
                        ChatPlan::Continue {
                            turn: Turn::now(text, tail.clone()).with_rules(rules.clone()),
                        },
                        DeliveryOutcome::Continued,
                        Request {
                            prefix,
                            prefix_source,
                            tail,
                            message: Some(text.to_owned()),
                        },
                    ))
                }
                ResumeDecision::Rotate => {
                    let change = ConfigChange {
                        at: now_rfc3339(),
                        bot: bot.to_string(),
                        chat: chat.to_string(),
                        old_session: ledger.id.clone(),
                        // Filled in by the store with the id it creates.
                        new_session: ledger.id.clone(),
                        old_fingerprint: Some(ledger.contract().fingerprint.clone()),
                        new_fingerprint: Some(current.fingerprint.clone()),
                        changes: report.changes.clone(),
                    };
                    Ok(fresh(
                        DeliveryOutcome::Rotated {
                            previous: ledger.id.clone(),
                            changes: report.changes,
                        },
                        Some(change),
                    ))
                }
                ResumeDecision::Refuse | ResumeDecision::ProceedOnFrozen => {
                    Err(LifecycleError::BindingDecision {
                        bot: bot.to_string(),
                        chat: chat.to_string(),
                    })
                }
            }
        }
    };
    let mut warnings = current.warnings.clone();
    if let Bound::Gone(gone) = bound {
        warnings.push(format!(
            "chat {bot}/{chat} was bound to session {gone}, whose ledger is gone (deleted or moved away); it is bound to a fresh session now, which does not hold the earlier turns"
        ));
    }
    let to_keep = matches!(planned, Ok((ChatPlan::Fresh(_), _, _))).then(|| current.clone());
    planned.map(|(plan, outcome, request)| (plan, outcome, request, warnings, to_keep))
}
