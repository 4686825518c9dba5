//! `vak gateway serve`: the chat gateway as an HTTP service.
//!
//! `POST /v1/bots/{bot}/chats/{chat}/messages` with `{"text": "…"}`,
//! signed per bot, answers 200 with the object `vak gateway deliver
//! --format json` prints; `GET /healthz` answers 200 when the store
//! answers. Every refusal is a JSON `{"error": …, "status": …}` and writes
//! nothing. Deliveries run on blocking threads (the store is synchronous).
//! [`Service::into_parts`] hands the listener and router to an accept loop
//! (`vak gateway serve` uses `vak_admin::serve_router_with`: connection cap,
//! header and idle timeouts, and on SIGTERM or Ctrl-C it stops accepting and
//! lets deliveries in flight finish; what hyper refuses before the router —
//! 400, 414, 431 — gets [`head_refusal`]'s JSON body).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use camino::Utf8PathBuf;
use serde_json::{Value, json};
use vak_core::home::ReplicaCheck;
use vak_core::prompts::{Claim, Name, NameKind, SessionError, Store, SurfaceKind};
use vak_core::{CoreError, InboundPrompts, PromptCache, Selectors};

use crate::secret_cache::SecretCache;
use crate::{
    Formats, LifecycleError, REPLAY_WINDOW_SECS, SignatureRefusal, Verified, deliver_served,
    meta_for,
};

/// The body of a delivered message: its text and, optionally, the paths
/// its turn touches (relative to the project root; they choose the scoped
/// rules in the turn's tail). Other keys are ignored.
#[derive(serde::Deserialize)]
struct MessageBody {
    text: String,
    #[serde(default)]
    paths: Option<Vec<String>>,
}

/// The blocking threads of a service on the file store, whose deliveries
/// wait on no connection pool (as many as before the PostgreSQL store's
/// threads followed its pool).
const FILE_STORE_BLOCKING_THREADS: usize = 64;

/// The largest request body accepted (413 above it).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How long a request body may take to arrive, however steadily (408).
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What `vak gateway serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The vak home.
    pub home: Utf8PathBuf,
    /// The project the bots work in.
    pub project: Utf8PathBuf,
    /// `host:port` to listen on.
    pub listen: String,
    /// `--store`, if given.
    pub store: Option<String>,
}

/// A bound, not yet serving, gateway service.
#[derive(Debug)]
pub struct Service {
    listener: std::net::TcpListener,
    blocking_threads: usize,
    state: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    home: Utf8PathBuf,
    project: Utf8PathBuf,
    store: std::sync::Arc<dyn Store>,
    /// Resolutions reused while their inputs are unchanged: vak-core's one
    /// cache, one entry per bot and chat, one inotify instance for all.
    cache: PromptCache,
    /// The signature formats accepted: `v1` only with `[gateway] accept_v1
    /// = true` in the shared config, read when the service starts.
    formats: Formats,
    /// What this node last found of its home-side replica: a delivery
    /// hashes nothing while the cache's notifications say nothing changed.
    replica: ReplicaCheck,
    /// Each bot's signing secret as last read: a request is verified (or
    /// refused) without waiting for the store.
    secrets: SecretCache,
}

impl Service {
    /// Open the store and bind `config.listen` (port 0 picks one).
    pub fn bind(config: ServiceConfig) -> Result<Service, LifecycleError> {
        let (store, width) = crate::store::open_store_sized(&config.home, config.store.as_deref())?;
        // A node starts from the store's whole home side: a local file the
        // store lacks, or one edited by hand, refuses the start.
        vak_core::home::sync_if_shared(&config.home, &*store, true)?;
        // After the sync: with the home side in the store, the shared
        // config is the store's.
        let formats = Formats::of_home(&config.home)?;
        let listener =
            std::net::TcpListener::bind(&config.listen).map_err(|e| LifecycleError::Listen {
                addr: config.listen.clone(),
                reason: e.to_string(),
            })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| LifecycleError::Listen {
                addr: config.listen.clone(),
                reason: e.to_string(),
            })?;
        Ok(Service {
            listener,
            blocking_threads: width.unwrap_or(FILE_STORE_BLOCKING_THREADS),
            state: Arc::new(Shared {
                cache: PromptCache::within_window(),
                formats,
                secrets: SecretCache::default(),
                replica: ReplicaCheck::new(),
                home: config.home,
                project: config.project,
                store,
            }),
        })
    }

    /// How many blocking threads the runtime serving this service should
    /// have at most: a PostgreSQL store's connections (`vak_pool=N`) and
    /// one batch (`vak_batch=N`), so that a batch fills while every
    /// connection is busy.
    /// Deliveries run on blocking threads, each holding a connection; with
    /// more threads than connections the extra ones slept in the pool's
    /// queue and were woken and switched to in turn, and at 32 clients a
    /// delivery cost a quarter more of the node's CPU. With as many as
    /// connections, a request waits for a thread in the runtime's queue and
    /// a thread that finishes one delivery takes the next without sleeping.
    /// Refusals the held secret decides never take one (`messages`).
    pub fn blocking_threads(&self) -> usize {
        self.blocking_threads
    }

    /// The address bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        self.local_addr()
            .map_or_else(String::new, |addr| format!("http://{addr}"))
    }

    /// Which store the service delivers into.
    pub fn store_description(&self) -> String {
        self.state.store.describe()
    }

    /// The bound listener and the router, for an accept loop to serve
    /// (`vak gateway serve` uses the admin server's hardened one:
    /// connection cap, header and idle timeouts, graceful stop).
    pub fn into_parts(self) -> (std::net::TcpListener, Router) {
        (self.listener, router(self.state))
    }
}

fn router(state: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/bots/{bot}/chats/{chat}/messages", post(messages))
        .fallback(|| async {
            refusal(
                StatusCode::NOT_FOUND,
                "no such route; deliveries go to POST /v1/bots/{bot}/chats/{chat}/messages",
            )
        })
        .method_not_allowed_fallback(|| async {
            refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                "wrong method: deliveries are POST, /healthz is GET",
            )
        })
        .with_state(state)
}

/// The JSON body of a refusal hyper makes before the router sees the
/// request (see `vak_admin::serve_router_with`), the same
/// `{"error": …, "status": …}` as every other refusal of the service.
pub fn head_refusal(status: StatusCode) -> String {
    let message = match status.as_u16() {
        431 => "the request's head (request line and headers) is over 64 KiB; send smaller headers",
        414 => {
            "the request's URI is too long; deliveries go to POST /v1/bots/{bot}/chats/{chat}/messages"
        }
        _ => {
            "the request is not valid HTTP/1.1 (an HTTP/2 preface, or a request line or a header that does not parse)"
        }
    };
    json!({"error": message, "status": status.as_u16()}).to_string()
}

fn refusal(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": message, "status": status.as_u16()})),
    )
        .into_response()
}

async fn healthz(State(state): State<Arc<Shared>>) -> Response {
    let probe = tokio::task::spawn_blocking(move || {
        let (hits, misses) = state.cache.counts();
        let checks = state.replica.checks();
        state.store.list_newest(1)?;
        // The generation of the store's home side, when it holds one, so an
        // operator can see every node at the same one.
        let generation = state
            .store
            .home()
            .map(vak_core::prompts::HomeStore::home_generation)
            .transpose()?;
        // The kind only: this route is unauthenticated, and the store's
        // description names the home's path or the database's host.
        Ok::<_, vak_core::prompts::SessionError>((
            state.store.kind(),
            hits,
            misses,
            generation,
            checks,
        ))
    })
    .await;
    match probe {
        Ok(Ok((store, hits, misses, generation, checks))) => axum::Json(json!({
            "status": "ok",
            "store": store,
            "home_generation": generation,
            // How many deliveries checked the replica against the store
            // (read its manifest, hashed its files): few while nothing
            // under the home changes.
            "replica_checks": checks,
            "resolution_cache": {"hits": hits, "misses": misses},
        }))
        .into_response(),
        _ => refusal(StatusCode::SERVICE_UNAVAILABLE, "the store does not answer"),
    }
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

async fn messages(
    State(state): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let Ok(Path((bot, chat))) = path else {
        return refusal(
            StatusCode::BAD_REQUEST,
            "the bot and chat in the path are not valid UTF-8",
        );
    };
    // The names' own rule, worded once (as the CLI says it).
    let (bot, chat) = match (
        Name::new(NameKind::Bot, &bot),
        Name::new(NameKind::Chat, &chat),
    ) {
        (Ok(bot), Ok(chat)) => (bot, chat),
        (Err(error), _) | (_, Err(error)) => {
            return refusal(StatusCode::BAD_REQUEST, &error.to_string());
        }
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return logged(
            &bot,
            &chat,
            started,
            refusal(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 64 KiB"),
        );
    }
    let Ok(read) = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    else {
        return logged(
            &bot,
            &chat,
            started,
            refusal(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive within 30 s",
            ),
        );
    };
    let body = match read {
        Ok(body) => body,
        Err(error) => {
            // Over the limit, or cut off (the client closed the connection
            // mid-body): logged as what it was.
            let over = error
                .into_inner()
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            let answer = if over {
                refusal(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 64 KiB")
            } else {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "the body ended before it was whole (the connection was closed mid-body)",
                )
            };
            return logged(&bot, &chat, started, answer);
        }
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(ToOwned::to_owned)
    };
    let timestamp = header("x-vak-timestamp");
    let signature = header("x-vak-signature");
    // A refusal the held secret decides is answered here, without a
    // blocking thread: there are only as many as the store's connections,
    // and all of them may be waiting on deliveries.
    if let Some(refused) = refused_by_held(
        &state,
        (&bot, &chat),
        timestamp.as_deref(),
        signature.as_deref(),
        &body,
    ) {
        return logged(&bot, &chat, started, refused);
    }
    let (bot_c, chat_c) = (bot.clone(), chat.clone());
    let answer = tokio::task::spawn_blocking(move || {
        handle(
            &state,
            bot_c,
            chat_c,
            timestamp.as_deref(),
            signature.as_deref(),
            &body,
        )
    })
    .await;
    let response = match answer {
        Ok(response) => response,
        Err(_) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the delivery did not finish",
        ),
    };
    logged(&bot, &chat, started, response)
}

/// The 401 `handle` would answer, when the secret held for `bot` (fresh,
/// so no store read) decides it: the signature does not verify, and it is
/// too soon to read the secret again (`handle`'s rule). `None`: verified,
/// or the store must be asked; `handle` then verifies the request itself.
fn refused_by_held(
    state: &Shared,
    (bot, chat): (&Name, &Name),
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
) -> Option<Response> {
    let now = Instant::now();
    let held = state.secrets.held(bot.as_str(), now)?;
    let checked = match held.as_deref() {
        Some(secret) => crate::verify(
            secret,
            state.formats,
            (bot.as_str(), chat.as_str()),
            timestamp,
            signature,
            body,
            now_secs(),
        )
        .err()
        .map(Some),
        None => Some(None),
    };
    match checked? {
        // No secret, or one that does not match: the secret may have
        // changed since it was read, which `handle` asks the store when due.
        why @ (None | Some(SignatureRefusal::Wrong)) => {
            (!state.secrets.reread_due(bot.as_str(), now)).then(|| unverified(why))
        }
        why => Some(unverified(why)),
    }
}

/// The one log line per delivery: bot, chat, outcome, session, duration —
/// never the text, never a secret.
fn logged(bot: &Name, chat: &Name, started: Instant, response: Response) -> Response {
    let status = response.status().as_u16();
    let outcome = response
        .extensions()
        .get::<Delivery>()
        .map_or("refused", |d| d.outcome);
    let session = response
        .extensions()
        .get::<Delivery>()
        .map_or("-", |d| d.session.as_str());
    tracing::info!(
        bot = bot.as_str(),
        chat = chat.as_str(),
        status,
        outcome,
        session,
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "delivery"
    );
    response
}

#[derive(Debug, Clone)]
struct Delivery {
    outcome: &'static str,
    session: String,
}

fn handle(
    state: &Shared,
    bot: Name,
    chat: Name,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &Bytes,
) -> Response {
    let now = now_secs();
    let read = || crate::bot_secret(&*state.store, &state.home, &bot);
    // `None`: the bot has no secret.
    let check = |secret: Option<&str>| -> Result<Verified, Option<SignatureRefusal>> {
        crate::verify(
            secret.ok_or(None)?,
            state.formats,
            (bot.as_str(), chat.as_str()),
            timestamp,
            signature,
            body,
            now,
        )
        .map_err(Some)
    };
    let held = match state.secrets.get(bot.as_str(), Instant::now(), read) {
        Ok(held) => held,
        Err(error) => return secret_failure(&error),
    };
    let verified = match check(held.as_deref()) {
        Ok(verified) => verified,
        // A signature that does not match, or no secret: the secret may
        // have been created or replaced since it was read (secret_cache.rs
        // says how often it is read again).
        Err(first @ (None | Some(SignatureRefusal::Wrong))) => {
            match state.secrets.reread(bot.as_str(), Instant::now(), read) {
                Ok(Some(fresh)) if fresh != held => match check(fresh.as_deref()) {
                    Ok(verified) => verified,
                    Err(why) => return unverified(why),
                },
                Ok(_) => return unverified(first),
                Err(error) => return secret_failure(&error),
            }
        }
        Err(why) => return unverified(why),
    };
    let (text, paths) = match serde_json::from_slice::<MessageBody>(body) {
        Ok(MessageBody { text, paths }) if !text.trim().is_empty() => (text, paths),
        // Two `text` keys are refused, not read as the last: a proxy or a
        // log that reads the first would see another message than the one
        // recorded.
        Err(error) if error.to_string().starts_with("duplicate field `paths`") => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the body names `paths` twice; send it once",
            );
        }
        Err(error) if error.to_string().starts_with("duplicate field") => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the body names `text` twice; send it once",
            );
        }
        Ok(_) | Err(_) if serde_json::from_slice::<Value>(body).is_ok_and(|v| v.is_object()) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the body must be {\"text\": \"…\"} with a non-empty string, and `paths`, when given, an array of strings",
            );
        }
        _ => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the body must be the JSON object {\"text\": \"…\"}",
            );
        }
    };
    // Validated before anything is resolved or written: a bad path is the
    // sender's to fix (400), naming the path.
    let paths = match vak_core::paths_from_root(paths.as_deref().unwrap_or_default()) {
        Ok(paths) => paths,
        Err(error) => return refusal(StatusCode::BAD_REQUEST, &error.to_string()),
    };
    let selectors = Selectors {
        surface: SurfaceKind::Chat,
        bot: Some(bot),
        chat: Some(chat),
        ..Selectors::new(state.home.clone(), state.project.clone())
    };
    let meta = meta_for(&selectors);
    let prompts = match InboundPrompts::open(selectors) {
        Ok(prompts) => prompts,
        Err(error) => return failure(&LifecycleError::Core(error)),
    };
    // The delivery syncs the home side, checks the allowlist (403, nothing
    // written) and takes the signature in its transaction under the chat's
    // lock: taken when it commits, free again when it fails, so the
    // sender's retry of a failed delivery is not a replay.
    let claim = Claim {
        key: &verified.key,
        at: verified.at,
        window_secs: REPLAY_WINDOW_SECS,
    };
    match deliver_served(
        &*state.store,
        &prompts,
        &meta,
        &text,
        &paths,
        &state.cache,
        &state.replica,
        Some(&claim),
    ) {
        Ok(delivered) => {
            let mut response = axum::Json(delivered.json()).into_response();
            response.extensions_mut().insert(Delivery {
                outcome: delivered.outcome.wire_name(),
                session: delivered.session.to_string(),
            });
            response
        }
        Err(error) => failure(&error),
    }
}

/// The 401 for a request not verified: `why`, or the bot has no secret.
fn unverified(why: Option<SignatureRefusal>) -> Response {
    match why {
        Some(why) => refusal(StatusCode::UNAUTHORIZED, why.message()),
        None => refusal(
            StatusCode::UNAUTHORIZED,
            "this bot has no signing secret; create it with `vak gateway secret BOT`",
        ),
    }
}

/// A secret that could not be read: the server's failure, never the
/// sender's (a 401 would tell a sender its signature is wrong, and it
/// would not retry).
fn secret_failure(error: &LifecycleError) -> Response {
    match error {
        LifecycleError::Store(error) => {
            tracing::warn!(%error, "the store did not answer for a signing secret");
            refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store does not answer; nothing was written, so send the same signed request again",
            )
        }
        error => {
            tracing::error!(%error, "a signing secret is unreadable");
            refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "this bot's signing secret is unreadable on the server; nothing was written, and the server log says why",
            )
        }
    }
}

fn failure(error: &LifecycleError) -> Response {
    match error {
        LifecycleError::UnknownBot { .. } | LifecycleError::UnknownChat { .. } => {
            refusal(StatusCode::FORBIDDEN, &error.to_string())
        }
        LifecycleError::Store(SessionError::Replayed) => {
            refusal(StatusCode::UNAUTHORIZED, &error.to_string())
        }
        LifecycleError::Core(CoreError::OverContextWindow(_)) => {
            refusal(StatusCode::UNPROCESSABLE_ENTITY, &error.to_string())
        }
        // The prompt itself is refused: no retry helps until someone on the
        // server fixes a file. The sender learns the class, the log the
        // file (its path is the server's, not the sender's business).
        LifecycleError::Core(CoreError::Loader(vak_core::prompts::LoaderError::Managed(_))) => {
            tracing::error!(%error, "a delivery was refused: the managed layer is refused");
            refusal(
                StatusCode::CONFLICT,
                "the server's managed prompt layer is refused (a file's mode, owner or signature, or its keys), so no session starts on it; nothing was acknowledged, and the server log names the file",
            )
        }
        LifecycleError::Core(CoreError::ImportRefused(_)) => {
            tracing::error!(%error, "a delivery was refused: an import cannot be read");
            refusal(
                StatusCode::CONFLICT,
                "a prompt file in force on the server imports a file that cannot be read (missing, outside its prompts directory, a cycle or too deep), so no session starts on it; nothing was acknowledged, and the server log names the file",
            )
        }
        other => {
            tracing::error!(error = %other, "a delivery failed");
            refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the delivery failed on the server and nothing was acknowledged; the server log says why",
            )
        }
    }
}
