//! Binding, the router, and the guard every request passes.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, HOST, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use camino::Utf8PathBuf;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use percent_encoding::percent_decode_str;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use vak_core::prompts::Store;
use vak_core::{Core, Selectors};

use crate::token::{AdminToken, TokenSource};
use crate::{AdminError, api, assets, gateway};

/// The largest request body accepted. Twice the loader's per-file limit, so
/// a maximal prompt file still fits after JSON escaping; the text inside is
/// then held to the per-file limit itself.
pub const MAX_BODY_BYTES: usize = 2 * vak_core::prompts::MAX_FILE_BYTES as usize;

/// What `vak admin serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `$VAK_HOME`: the shared layer, the gateway files, the token file.
    pub home: Utf8PathBuf,
    /// The project whose layers "This project" edits.
    pub project: Utf8PathBuf,
    /// `IP:PORT`; port 0 picks a free port.
    pub listen: String,
    /// The value of `VAK_ADMIN_TOKEN`, if set. Passed in rather than read
    /// here so tests need not touch the process environment.
    pub env_token: Option<String>,
    /// The store sessions, audit events, kept texts and versions are read
    /// from and written to (`vak_gateway::open_store`); `None` is the home's
    /// file store.
    pub store: Option<Arc<dyn Store>>,
}

/// Shared by every request.
#[derive(Debug)]
pub(crate) struct AppState {
    /// Absolute `$VAK_HOME`.
    pub(crate) home: Utf8PathBuf,
    /// Absolute project directory.
    pub(crate) project: Utf8PathBuf,
    token: AdminToken,
    /// `Host` values this server answers to.
    hosts: Vec<String>,
    /// The URL people open, for error messages.
    pub(crate) origin: String,
    /// Serialises gateway JSON edits within this process; the loader's
    /// digest-checked atomic save covers other writers.
    pub(crate) gateway_lock: Mutex<()>,
    /// The store this server reads and writes.
    pub(crate) store: Arc<dyn Store>,
    /// The prompts `/api/prompt` composed, answered from memory while none
    /// of their inputs changed (vak-core's cache, watched by one inotify
    /// instance), and their budgets.
    pub(crate) answers: crate::api::PromptAnswers,
}

impl AppState {
    /// A core for `selectors` on this server's store.
    pub(crate) fn core(&self, selectors: Selectors) -> Result<Core, vak_core::CoreError> {
        Ok(Core::open(selectors)?.with_store(Arc::clone(&self.store)))
    }

    /// Selectors for this server's home and project.
    pub(crate) fn selectors(&self) -> Selectors {
        Selectors::new(self.home.clone(), self.project.clone())
    }

    /// Who a change through this server is recorded as: the token's id.
    pub(crate) fn who(&self) -> vak_core::history::Who {
        vak_core::history::Who::AdminToken(self.token.id())
    }
}

/// A bound, not yet running, admin server.
#[derive(Debug)]
pub struct Server {
    listener: std::net::TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
    token: String,
    limits: Limits,
}

impl Server {
    /// Resolve the home and project, load or generate the token, and bind
    /// `config.listen`. Nothing is served until [`Server::run`].
    pub fn bind(config: ServeConfig) -> Result<Server, AdminError> {
        let requested: SocketAddr = config
            .listen
            .parse()
            .map_err(|_| AdminError::BadListen(config.listen.clone()))?;
        if !requested.ip().is_loopback() {
            tracing::warn!(
                %requested,
                "the admin server is listening beyond loopback; anyone who can reach it and has the token can edit prompts"
            );
        }
        // Core::open makes the paths absolute exactly as every resolution
        // will, so the sources the loader reports match the paths we write.
        let core = Core::open(Selectors::new(config.home.clone(), config.project.clone()))?;
        let home = core.selectors().home.clone();
        let project = core.selectors().project.clone();
        let store = config
            .store
            .unwrap_or_else(|| Arc::new(vak_core::prompts::FileStore::new(&home)));
        // A store holding the home side: start from its whole home side (a
        // local file it lacks, or one edited by hand, refuses the start).
        vak_core::home::sync_if_shared(&home, &*store, true)
            .map_err(|e| AdminError::Internal(e.to_string()))?;
        // The token file lives under the home, which may not exist yet.
        let (token, secret) = AdminToken::load(&home, config.env_token.as_deref())?;
        if vak_core::files::is_dir(&project) != Some(true) {
            return Err(AdminError::BadRequest(format!(
                "project directory `{project}` does not exist; pass --project DIR"
            )));
        }
        let listener =
            std::net::TcpListener::bind(requested).map_err(|source| AdminError::Bind {
                addr: config.listen.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| AdminError::Bind {
            addr: config.listen.clone(),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| AdminError::Bind {
                addr: config.listen.clone(),
                source,
            })?;
        let state = Arc::new(AppState {
            home,
            project,
            token,
            hosts: allowed_hosts(addr),
            origin: format!("http://{addr}"),
            gateway_lock: Mutex::new(()),
            store,
            answers: crate::api::PromptAnswers::default(),
        });
        Ok(Server {
            listener,
            addr,
            state,
            token: secret,
            limits: Limits::default(),
        })
    }

    /// The address actually bound (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT/#/prompts`: what to open in a browser.
    pub fn url(&self) -> String {
        format!("{}/#/prompts", self.state.origin)
    }

    /// Where the token in force came from.
    pub fn token_source(&self) -> &TokenSource {
        self.state.token.source()
    }

    /// The token itself, for tests and for a caller that generated it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Replace the default [`Limits`] (tests use short timeouts).
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Server {
        self.limits = limits;
        self
    }

    /// Serve until Ctrl-C or SIGTERM, on [`workers`] threads: a view such
    /// as `/api/prompt` loads, composes and budgets a chain on the thread
    /// that answers it, so one thread served one such request at a time
    /// however many cores there were (BENCHMARKS.md, `admin throughput`).
    /// Requests were never ordered by the thread anyway: the store's work
    /// and every save already run on blocking threads, and saves exclude
    /// each other with the home's save lock, a file lock.
    pub fn run(self) -> Result<(), AdminError> {
        self.run_on(workers())
    }

    /// [`Server::run`] on `threads` worker threads (at least one).
    pub fn run_on(self, threads: usize) -> Result<(), AdminError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("vak-admin")
            .enable_io()
            .enable_time()
            .build()
            .map_err(AdminError::Runtime)?;
        // The last handle on the state (and so on a PostgreSQL store, whose
        // client runs a runtime of its own) must go after this runtime, not
        // inside it: dropping that client in an async context panics.
        let outlives_runtime = Arc::clone(&self.state);
        let served = runtime.block_on(self.serve());
        drop(runtime);
        drop(outlives_runtime);
        served
    }

    /// Serve on the current tokio runtime (which needs IO and time enabled)
    /// until Ctrl-C or SIGTERM, then let requests in flight finish.
    pub async fn serve(self) -> Result<(), AdminError> {
        let signal = stop_signal().map_err(AdminError::Serve)?;
        self.serve_until(signal).await
    }

    /// Serve until `stop` completes, then stop accepting, let requests in
    /// flight finish (at most [`Limits::shutdown_grace`]) and return.
    ///
    /// At most [`Limits::max_connections`] connections (fewer when the
    /// descriptor limit is low) are served at once; further ones wait in
    /// the kernel's backlog until one ends. A client
    /// that sends no complete request head within
    /// [`Limits::header_read_timeout`] (including between keep-alive
    /// requests), or moves no byte for [`Limits::idle_timeout`], is
    /// disconnected. Accept errors (out of descriptors) are logged and
    /// retried after a short pause, never fatal.
    pub async fn serve_until(self, stop: impl Future<Output = ()>) -> Result<(), AdminError> {
        let app = router(self.state, self.limits.body_read_timeout);
        serve_router(self.listener, app, self.limits, "admin", stop).await
    }
}

/// How many threads answer admin requests: one per core, at most
/// [`MAX_WORKERS`] (an admin server has few users; more threads would only
/// take cores from the gateway service beside it).
pub fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, MAX_WORKERS)
}

/// The most threads [`workers`] answers.
pub const MAX_WORKERS: usize = 4;

/// Serve `app` on `listener` with this accept loop until `stop` completes,
/// then stop accepting, let requests in flight finish (at most
/// [`Limits::shutdown_grace`]) and return. `label` names the server in its
/// log lines (`admin`, `gateway`). Shared by `vak admin serve` and `vak
/// gateway serve`; see [`Server::serve_until`] for the bounds it keeps.
pub async fn serve_router(
    listener: std::net::TcpListener,
    app: Router,
    limits: Limits,
    label: &'static str,
    stop: impl Future<Output = ()>,
) -> Result<(), AdminError> {
    serve_router_with(listener, app, limits, label, stop, None).await
}

/// The JSON body a server sends with a refusal hyper makes on its own,
/// before the router sees the request: 400 (not a valid HTTP/1.1 request),
/// 414 (a URI over hyper's bound) or 431 (a head over 64 KiB).
pub type HeadRefusal = fn(axum::http::StatusCode) -> String;

/// [`serve_router`], answering the requests hyper refuses before the
/// router sees them (400, 414, 431) with `head_refusal`'s JSON body (as
/// `application/json`) instead of hyper's empty one, so a client gets the
/// same shape of error as from the router; `None` keeps hyper's.
pub async fn serve_router_with(
    listener: std::net::TcpListener,
    app: Router,
    limits: Limits,
    label: &'static str,
    stop: impl Future<Output = ()>,
    head_refusal: Option<HeadRefusal>,
) -> Result<(), AdminError> {
    let listener = tokio::net::TcpListener::from_std(listener).map_err(AdminError::Serve)?;
    let service = TowerToHyperService::new(app);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let slots = Arc::new(Semaphore::new(connection_cap(limits.max_connections)));
    let conns = Arc::new(Conns::default());
    let graceful = GracefulShutdown::new();
    // Whether accepting is failing: warned once when it starts, noted
    // when it ends, not every pause.
    let mut starved = false;
    tokio::pin!(stop);
    loop {
        // Accepted first, then given a slot: with every slot taken, a
        // client that is actually waiting makes room by closing the oldest
        // connection that has not sent a whole request (see `Conns`), so
        // clients that hold connections open without finishing a request
        // cannot keep everyone else out.
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) if is_per_connection(&error) => {
                tracing::debug!(%error, "a connection failed before it was accepted");
                continue;
            }
            Err(error) => {
                if !starved {
                    tracing::warn!(
                        %error,
                        "cannot accept {label} connections (out of file descriptors?); retrying every 100 ms"
                    );
                    starved = true;
                }
                tokio::select! {
                    () = &mut stop => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        if std::mem::take(&mut starved) {
            tracing::info!("accepting {label} connections again");
        }
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(tokio::sync::TryAcquireError::Closed) => break,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                if conns.shed_one() {
                    tracing::debug!(
                        "every {label} slot is taken: closed the oldest connection without a whole request"
                    );
                }
                let slot = tokio::select! {
                    () = &mut stop => break,
                    slot = Arc::clone(&slots).acquire_owned() => slot,
                };
                let Ok(slot) = slot else { break };
                slot
            }
        };
        let activity = Activity::new();
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
            head_refusal,
            pending: Vec::new(),
            opening: Some(Vec::with_capacity(H2_PREFACE_START.len())),
            refused: false,
        });
        let conn = conns.add();
        let staged = Staged {
            inner: service.clone(),
            conn: Arc::clone(&conn),
        };
        let connection = graceful.watch(http.serve_connection(io, staged));
        let conns = Arc::clone(&conns);
        tokio::spawn(async move {
            drive(connection, &activity, limits.idle_timeout, &conn).await;
            conns.remove(&conn);
            drop(slot);
        });
    }
    drop(listener);
    tracing::info!("{label} server stopping; finishing requests in flight");
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_s = limits.shutdown_grace.as_secs(),
            "requests still in flight after the grace period were dropped"
        );
    }
    Ok(())
}

/// The largest request head (request line and headers) read; a larger one
/// is answered `431` by hyper and the connection closed.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long accepting pauses after an error such as EMFILE.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Bounds on connections and time. The defaults suit one person's browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Time a client has to send a complete request head, from the
    /// connection's start or from the end of the previous response (so it
    /// is also how long an idle keep-alive connection is kept).
    pub header_read_timeout: Duration,
    /// A connection that reads and writes nothing for this long, in the
    /// middle of a request or a response, is closed.
    pub idle_timeout: Duration,
    /// How long an authenticated request's body may take to arrive, however
    /// steadily it trickles.
    pub body_read_timeout: Duration,
    /// After Ctrl-C or SIGTERM, how long requests in flight may take.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Descriptors kept free for what requests open (layer files, stores) and
/// for the runtime itself.
const RESERVED_DESCRIPTORS: u64 = 32;

/// `wanted`, lowered so that the connections and the files their requests
/// open fit in the process's descriptor limit (`ulimit -n`): half of what
/// is left after [`RESERVED_DESCRIPTORS`], at least one.
#[cfg(unix)]
fn connection_cap(wanted: usize) -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let cap = fit_in_descriptors(wanted, soft);
    if cap < wanted {
        tracing::warn!(
            wanted,
            cap,
            descriptors = soft,
            "the descriptor limit (ulimit -n) is low; serving fewer admin connections at once"
        );
    }
    cap
}

#[cfg(not(unix))]
fn connection_cap(wanted: usize) -> usize {
    wanted.max(1)
}

/// [`connection_cap`] for a soft descriptor limit (`None`: unlimited).
fn fit_in_descriptors(wanted: usize, soft_limit: Option<u64>) -> usize {
    let fit = soft_limit.map_or(usize::MAX, |soft| {
        usize::try_from(soft.saturating_sub(RESERVED_DESCRIPTORS) / 2).unwrap_or(usize::MAX)
    });
    wanted.min(fit).max(1)
}

/// Errors that concern one connection only: accept again at once.
fn is_per_connection(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::Interrupted
            | std::io::ErrorKind::WouldBlock
    )
}

/// Completes on Ctrl-C or, on Unix, SIGTERM.
pub fn stop_signal() -> std::io::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    })
}

/// Drive one connection until it ends, moves no byte for `idle`, or is
/// closed to make room ([`Conns::shed_one`]).
async fn drive<F, E>(connection: F, activity: &Activity, idle: Duration, conn: &Conn)
where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(connection);
    loop {
        let deadline = activity.last() + idle;
        tokio::select! {
            result = &mut connection => {
                if let Err(error) = result {
                    tracing::debug!(%error, "admin connection ended with an error");
                }
                return;
            }
            () = conn.close.notified() => {
                tracing::debug!("closed a connection without a whole request to make room");
                return;
            }
            () = tokio::time::sleep_until(deadline) => {
                if activity.last() + idle <= Instant::now() {
                    tracing::debug!(idle_s = idle.as_secs(), "closed an idle admin connection");
                    return;
                }
            }
        }
    }
}

/// A connection's stage: waiting for a request head (new, or idle between
/// keep-alive requests).
const WAITING: u8 = 0;
/// A request head arrived; its body has not been read to its end.
const RECEIVING: u8 = 1;
/// A whole request arrived and is being answered.
const HANDLING: u8 = 2;

/// One connection being served, as [`Conns`] sees it.
#[derive(Debug)]
struct Conn {
    /// [`WAITING`], [`RECEIVING`] or [`HANDLING`].
    stage: AtomicU8,
    /// Set once it was chosen to close, so it is chosen once.
    closing: AtomicBool,
    /// Wakes the task driving it, to close it.
    close: tokio::sync::Notify,
}

/// The connections being served. When every slot is taken and another
/// client is waiting, the oldest connection that is not answering a whole
/// request is closed to make room: a client that opens connections and
/// never finishes a request head (or trickles a body) loses its oldest
/// connection to each newcomer, so it cannot hold every slot, while a
/// request being answered is never cut.
#[derive(Debug, Default)]
struct Conns {
    /// Oldest first: in the order accepted.
    live: Mutex<Vec<Arc<Conn>>>,
}

impl Conns {
    fn add(&self) -> Arc<Conn> {
        let conn = Arc::new(Conn {
            stage: AtomicU8::new(WAITING),
            closing: AtomicBool::new(false),
            close: tokio::sync::Notify::new(),
        });
        if let Ok(mut live) = self.live.lock() {
            live.push(Arc::clone(&conn));
        }
        conn
    }

    fn remove(&self, conn: &Conn) {
        if let Ok(mut live) = self.live.lock() {
            live.retain(|c| !std::ptr::eq(&**c, conn));
        }
    }

    /// Close the oldest connection without a whole request; `false` when
    /// every one is answering one (then the newcomer waits for a slot).
    fn shed_one(&self) -> bool {
        let Ok(live) = self.live.lock() else {
            return false;
        };
        let oldest = live.iter().find(|c| {
            c.stage.load(Ordering::Relaxed) != HANDLING && !c.closing.load(Ordering::Relaxed)
        });
        match oldest {
            Some(conn) => {
                conn.closing.store(true, Ordering::Relaxed);
                // Kept if the task is not waiting yet: it closes at once.
                conn.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The router, recording each connection's stage as its requests arrive
/// and are answered (see [`Conns`]).
#[derive(Clone)]
struct Staged {
    inner: TowerToHyperService<Router>,
    conn: Arc<Conn>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Staged {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        self.conn.stage.store(RECEIVING, Ordering::Relaxed);
        let conn = Arc::clone(&self.conn);
        let request = request.map(|body| {
            axum::body::Body::new(StagedBody {
                inner: body,
                conn: Arc::clone(&conn),
            })
        });
        let answer = hyper::service::Service::call(&self.inner, request);
        Box::pin(async move {
            let answer = answer.await;
            conn.stage.store(WAITING, Ordering::Relaxed);
            answer
        })
    }
}

/// A request body that moves its connection to [`HANDLING`] once it has
/// been read to its end.
struct StagedBody {
    inner: hyper::body::Incoming,
    conn: Arc<Conn>,
}

impl hyper::body::Body for StagedBody {
    type Data = hyper::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.conn.stage.store(HANDLING, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// When a connection last moved a byte, shared between its stream and the
/// task that drives it.
#[derive(Debug, Clone)]
struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A stream that records every read or write that moved bytes, and that
/// gives hyper's own refusals a body when the server has a
/// [`HeadRefusal`].
struct Tracked<S> {
    inner: S,
    activity: Activity,
    head_refusal: Option<HeadRefusal>,
    /// The rest of a rewritten refusal, reported to hyper as written and
    /// still to be sent, before anything else.
    pending: Vec<u8>,
    /// The connection's first bytes while they may still open an HTTP/2
    /// preface; `None` once they cannot.
    opening: Option<Vec<u8>>,
    /// An HTTP/2 preface was answered: hyper reads the end of the stream.
    refused: bool,
}

/// How an HTTP/2 connection preface starts. hyper's HTTP/1.1 server closes
/// such a connection without a word; this server answers it 400 (with
/// the [`HeadRefusal`]'s body when it has one), as it does any request that
/// is not HTTP/1.1.
const H2_PREFACE_START: &[u8] = b"PRI * HTTP/2.0";

/// The 400 an HTTP/2 preface is answered with, closing the connection.
fn preface_refusal(head_refusal: Option<HeadRefusal>) -> Vec<u8> {
    let head = "HTTP/1.1 400 Bad Request\r\nconnection: close\r\n";
    match head_refusal {
        Some(render) => with_body(
            &format!("{head}\r\n"),
            &render(axum::http::StatusCode::BAD_REQUEST),
        ),
        None => format!("{head}content-length: 0\r\n\r\n").into_bytes(),
    }
}

/// The statuses hyper answers on its own when it cannot parse a request.
const HEAD_REFUSALS: [u16; 3] = [400, 414, 431];

/// The status of `bytes` when they are exactly one of hyper's own refusals
/// of a request it could not parse: a head alone (no body) with status 400,
/// 414 or 431 and `content-length: 0`. The router never sends such a
/// response when the server has a [`HeadRefusal`] (its refusals carry a
/// JSON body), so nothing it answers is mistaken for one.
fn automatic_refusal(bytes: &[u8]) -> Option<u16> {
    let head = std::str::from_utf8(bytes).ok()?;
    let fields = head.strip_suffix("\r\n\r\n")?;
    if fields.contains("\r\n\r\n") {
        return None;
    }
    let mut lines = fields.split("\r\n");
    let status: u16 = lines
        .next()?
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()?;
    let empty = lines
        .clone()
        .any(|line| line.eq_ignore_ascii_case("content-length: 0"));
    (HEAD_REFUSALS.contains(&status) && empty).then_some(status)
}

/// hyper's refusal `head` (see [`automatic_refusal`]) with `body` as its
/// JSON body: the status line and every field but the length kept, the
/// type and length of the body added.
fn with_body(head: &str, body: &str) -> Vec<u8> {
    let mut out = String::with_capacity(head.len() + body.len() + 64);
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        if line.to_ascii_lowercase().starts_with("content-length:") {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("content-type: application/json\r\n");
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    out.push_str(body);
    out.into_bytes()
}

impl<S: AsyncWrite + Unpin> Tracked<S> {
    /// Send what is left of a rewritten refusal.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.pending.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.activity.touch();
                    self.pending.drain(..n);
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.refused {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
            let this = &mut *self;
            if let Some(seen) = &mut this.opening {
                let new = &buf.filled()[before..];
                let take = (H2_PREFACE_START.len() - seen.len()).min(new.len());
                seen.extend_from_slice(&new[..take]);
                if !H2_PREFACE_START.starts_with(seen) {
                    this.opening = None;
                } else if seen.len() == H2_PREFACE_START.len() {
                    // hyper sees the stream end here and closes the
                    // connection, sending the answer on its way out.
                    this.opening = None;
                    this.refused = true;
                    buf.set_filled(before);
                    this.pending = preface_refusal(this.head_refusal);
                }
            }
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        // With writes not vectored (below), hyper hands over a whole
        // response in one buffer: its own refusal is recognised entire.
        if let Some(render) = self.head_refusal
            && let Some(code) = automatic_refusal(buf)
            && let Ok(status) = axum::http::StatusCode::from_u16(code)
        {
            let head = String::from_utf8_lossy(buf);
            self.pending = with_body(&head, &render(status));
            // Taken whole: what is left goes out before anything else,
            // and at the latest when hyper flushes.
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        // Not when refusals are rewritten: hyper then flattens each
        // response into one buffer, so a refusal is seen whole.
        self.head_refusal.is_none() && self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The `Host` values a browser sends for this address. A DNS-rebinding page
/// reaches us under its own host name, which is never in this list.
fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![addr.to_string()];
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => hosts.push(format!("localhost:{port}")),
        IpAddr::V6(ip) if ip.is_loopback() => hosts.push(format!("localhost:{port}")),
        _ => {}
    }
    hosts
}

fn router(state: Arc<AppState>, body_read_timeout: Duration) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/app.js", get(assets::script))
        .route("/app.css", get(assets::style))
        .route("/api/prompt", get(api::prompt))
        .route("/api/layers", get(api::layers))
        .route("/api/layers/{block}", put(api::save).delete(api::reset))
        .route("/api/tokens", post(api::tokens))
        .route("/api/history/{block}", get(api::history))
        .route("/api/history/{block}/diff", get(api::history_diff))
        .route("/api/history/{block}/revert", post(api::revert))
        .route("/api/trust-preview", get(api::trust_preview))
        .route("/api/permissions", get(api::permissions))
        .route("/api/managed", get(api::managed))
        .route("/api/rules", get(api::rules))
        .route("/api/audit", get(api::audit))
        .route("/api/audit/diff", get(api::rotation_diff))
        .route("/api/gateway", get(gateway::list))
        .route(
            "/api/gateway/bots/{bot}/{block}",
            put(gateway::save_bot).delete(gateway::reset_bot),
        )
        .route(
            "/api/gateway/chats/{bot}/{chat}/{block}",
            put(gateway::save_chat).delete(gateway::reset_chat),
        )
        .route(
            "/api/gateway/bots/{bot}/{block}/history",
            get(gateway::bot_history),
        )
        .route(
            "/api/gateway/bots/{bot}/{block}/history/diff",
            get(gateway::bot_history_diff),
        )
        .route(
            "/api/gateway/bots/{bot}/{block}/history/revert",
            post(gateway::bot_revert),
        )
        .route(
            "/api/gateway/chats/{bot}/{chat}/{block}/history",
            get(gateway::chat_history),
        )
        .route(
            "/api/gateway/chats/{bot}/{chat}/{block}/history/diff",
            get(gateway::chat_history_diff),
        )
        .route(
            "/api/gateway/chats/{bot}/{chat}/{block}/history/revert",
            post(gateway::chat_revert),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Guard {
                state: state.clone(),
                body_read_timeout,
            },
            guard,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn not_found(request: Request) -> AdminError {
    AdminError::NotFound(format!(
        "no route `{} {}`; see docs/admin-api.md for the routes",
        request.method(),
        request.uri().path()
    ))
}

async fn method_not_allowed(request: Request) -> Response {
    let error = AdminError::NotFound(format!(
        "`{}` does not accept {}; see docs/admin-api.md",
        request.uri().path(),
        request.method()
    ));
    let mut response = error.into_response();
    *response.status_mut() = axum::http::StatusCode::METHOD_NOT_ALLOWED;
    response
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// What every request must be before anything else looks at it: an
/// origin-form target (`/api/…`; never `http://host/…`, `host:port` or `*`)
/// and exactly one `Host` header naming the address this server listens on
/// (the DNS-rebinding defence: a rebinding page arrives under its own name).
fn admit(state: &AppState, request: &Request) -> Result<(), AdminError> {
    let uri = request.uri();
    if uri.scheme().is_some() || uri.authority().is_some() || !uri.path().starts_with('/') {
        let target = escape_target(&uri.to_string());
        return Err(AdminError::BadRequest(format!(
            "the request target `{target}` is not origin-form; send only the path, such as `GET /api/prompt`, with `Host: {}`",
            state.hosts.first().map_or("", String::as_str)
        )));
    }
    let mut hosts = request.headers().get_all(HOST).iter();
    let (Some(host), None) = (hosts.next(), hosts.next()) else {
        let count = request.headers().get_all(HOST).iter().count();
        return Err(AdminError::BadRequest(if count == 0 {
            format!(
                "the request has no Host header; open {} in a browser",
                state.origin
            )
        } else {
            format!(
                "the request has {count} Host headers; send exactly one, naming {}",
                state.origin
            )
        }));
    };
    // Two credentials are one too many to judge: a proxy that adds its own
    // while passing the client's would otherwise decide which one counts.
    let authorizations = request.headers().get_all(AUTHORIZATION).iter().count();
    if authorizations > 1 {
        return Err(AdminError::BadRequest(format!(
            "the request has {authorizations} Authorization headers; send exactly one, `Authorization: Bearer <token>`"
        )));
    }
    // Query values are decoded lossily by the extractor; a byte that is not
    // UTF-8 would silently become U+FFFD and name another directory or key.
    if let Some(query) = uri.query()
        && let Some(bad) = query.split('&').find(|pair| {
            percent_decode_str(&pair.replace('+', " "))
                .decode_utf8()
                .is_err()
        })
    {
        return Err(AdminError::BadRequest(format!(
            "the query part `{}` does not decode to UTF-8; percent-encode the UTF-8 bytes of the name",
            escape_target(bad)
        )));
    }
    let host = String::from_utf8_lossy(host.as_bytes());
    if !state.hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        let host = escape_target(&host);
        tracing::warn!(%host, "refused a request for another host");
        return Err(AdminError::WrongHost(format!(
            "Host `{host}` is not the address this server listens on; open {} instead",
            state.origin
        )));
    }
    // A declared length over the limit is refused before a byte of the body
    // is read; a chunked body is cut off at the limit as it is read.
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(bytes) = declared.filter(|&b| b > MAX_BODY_BYTES as u64) {
        return Err(body_too_large(bytes));
    }
    Ok(())
}

/// The 413 for a request body that declares more than [`MAX_BODY_BYTES`].
fn body_too_large(bytes: u64) -> AdminError {
    AdminError::TooLarge(format!(
        "the request body is {bytes} bytes, over the {MAX_BODY_BYTES}-byte limit for request bodies; nothing was read or saved"
    ))
}

/// A request target or Host, quoted in an error: at most 200 characters,
/// control characters escaped.
fn escape_target(text: &str) -> String {
    let mut out = String::new();
    for (index, c) in text.chars().enumerate() {
        if index == 200 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every request: [`admit`] first; then every `/api/` request must carry
/// the bearer token. Security headers go on every response.
/// What [`guard`] needs: the shared state and how long a body may take.
#[derive(Debug, Clone)]
struct Guard {
    state: Arc<AppState>,
    body_read_timeout: Duration,
}

/// Read an authenticated request's body before any handler sees it:
/// bounded by [`MAX_BODY_BYTES`] as it is read (a chunked body has no
/// `Content-Length` for [`admit`] to judge) and by `deadline`, so a client
/// that trickles a body cannot hold a connection.
async fn read_body(request: Request, deadline: Duration) -> Result<Request, AdminError> {
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Err(_) => Err(AdminError::BodyTimeout(format!(
            "the request body did not arrive within {} s; send it in one go",
            deadline.as_secs()
        ))),
        Ok(Err(error)) => {
            let error = error.into_inner();
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(AdminError::TooLarge(format!(
                    "the request body is larger than the {MAX_BODY_BYTES}-byte limit for request bodies; nothing was saved"
                )))
            } else {
                Err(AdminError::BadRequest(format!(
                    "the request body could not be read: {error}"
                )))
            }
        }
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, axum::body::Body::from(bytes))),
    }
}

/// Bring the home's replica up to the store's home side before an API
/// request reads or saves; nothing for the file store.
async fn sync_home(state: &Arc<AppState>) -> Result<(), AdminError> {
    if state.store.home().is_none() {
        return Ok(());
    }
    let state = Arc::clone(state);
    let synced = tokio::task::spawn_blocking(move || {
        let synced = vak_core::home::sync_if_shared(&state.home, &*state.store, false);
        // The replica just moved: the prompts answered from memory go now,
        // without waiting for the watch to be read (as the gateway does).
        if let Ok(Some(synced)) = &synced
            && synced.changed
        {
            state.answers.clear();
        }
        synced
    })
    .await
    .map_err(|e| AdminError::Internal(format!("the home-side sync failed: {e}")))?;
    synced.map_err(crate::gateway::home_error)?;
    Ok(())
}

async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let state = &guard.state;
    let mut response = match admit(state, &request) {
        Err(refusal) => refusal.into_response(),
        Ok(()) => {
            let path = request.uri().path();
            let is_api = path == "/api" || path.starts_with("/api/");
            if is_api && request.method() != Method::OPTIONS {
                match bearer(&request) {
                    Some(token) if state.token.matches(token) => {
                        match read_body(request, guard.body_read_timeout).await {
                            Ok(request) => match sync_home(state).await {
                                Ok(()) => next.run(request).await,
                                Err(refusal) => refusal.into_response(),
                            },
                            Err(refusal) => refusal.into_response(),
                        }
                    }
                    Some(_) => AdminError::Unauthorized(format!(
                        "the bearer token is wrong; use the token from {}",
                        state.token.source()
                    ))
                    .into_response(),
                    None => AdminError::Unauthorized(format!(
                        "this route needs `Authorization: Bearer <token>`; the token is in {}",
                        state.token.source()
                    ))
                    .into_response(),
                }
            } else if is_api {
                AdminError::Unauthorized(
                    "cross-origin requests are not served; use the page this server serves"
                        .to_owned(),
                )
                .into_response()
            } else {
                next.run(request).await
            }
        }
    };
    let headers = response.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    response
}

/// Run a request's work on a blocking thread. The store is synchronous (a
/// PostgreSQL store drives its own runtime per connection, which must not
/// be started on the server's reactor thread), and file I/O under a lock
/// should not stall other requests either.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, crate::AdminError> + Send + 'static,
) -> Result<T, crate::AdminError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| crate::AdminError::Internal(format!("the request's worker stopped: {e}")))?
}

#[cfg(test)]
mod tests {

    /// The server answers on one thread per core (at most MAX_WORKERS):
    /// on one thread a view that composes a chain held every other request.
    #[test]
    fn requests_are_answered_on_every_core() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(workers(), cores.clamp(1, MAX_WORKERS));
        assert!(workers() >= 1);
    }

    use super::*;

    #[test]
    fn room_is_made_by_the_oldest_connection_without_a_whole_request() {
        let conns = Conns::default();
        let [a, b, c] = [conns.add(), conns.add(), conns.add()];
        a.stage.store(HANDLING, Ordering::Relaxed);
        b.stage.store(RECEIVING, Ordering::Relaxed);
        // `a` is answering: `b` goes first, then `c`, each once.
        assert!(conns.shed_one());
        assert!(b.closing.load(Ordering::Relaxed) && !a.closing.load(Ordering::Relaxed));
        assert!(conns.shed_one());
        assert!(c.closing.load(Ordering::Relaxed));
        assert!(!conns.shed_one(), "a request being answered is never cut");
        conns.remove(&b);
        conns.remove(&c);
        a.stage.store(WAITING, Ordering::Relaxed);
        assert!(conns.shed_one());
        assert!(a.closing.load(Ordering::Relaxed));
    }

    #[test]
    fn only_hyper_s_own_refusals_get_a_body() {
        let date = "date: Fri, 04 Dec 2026 11:48:15 GMT";
        for code in [400, 414, 431] {
            let head = format!(
                "HTTP/1.1 {code} Whatever\r\nconnection: close\r\ncontent-length: 0\r\n{date}\r\n\r\n"
            );
            assert_eq!(automatic_refusal(head.as_bytes()), Some(code), "{head}");
            let rewritten = String::from_utf8(with_body(&head, r#"{"status":1}"#)).expect("utf8");
            assert_eq!(
                rewritten,
                format!(
                    "HTTP/1.1 {code} Whatever\r\nconnection: close\r\n{date}\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n{{\"status\":1}}"
                )
            );
        }
        for other in [
            // Another status, a response with a body, part of a head.
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}",
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n",
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nHTTP/1.1 400 Bad Request\r\n\r\n",
        ] {
            assert_eq!(automatic_refusal(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn hosts_are_the_bound_address_and_localhost_only_for_loopback() {
        let v4: SocketAddr = "127.0.0.1:4242".parse().expect("addr");
        assert_eq!(allowed_hosts(v4), ["127.0.0.1:4242", "localhost:4242"]);
        let v6: SocketAddr = "[::1]:4242".parse().expect("addr");
        assert_eq!(allowed_hosts(v6), ["[::1]:4242", "localhost:4242"]);
        let lan: SocketAddr = "192.168.1.5:4242".parse().expect("addr");
        assert_eq!(allowed_hosts(lan), ["192.168.1.5:4242"]);
    }

    #[test]
    fn the_cap_fits_in_the_descriptor_limit() {
        assert_eq!(fit_in_descriptors(256, None), 256);
        assert_eq!(fit_in_descriptors(256, Some(20_000)), 256);
        assert_eq!(fit_in_descriptors(256, Some(256)), 112);
        assert_eq!(fit_in_descriptors(256, Some(48)), 8);
        assert_eq!(fit_in_descriptors(256, Some(10)), 1);
        assert_eq!(fit_in_descriptors(0, None), 1);
    }

    #[test]
    fn quoted_targets_are_escaped_and_bounded() {
        assert_eq!(escape_target("evil\u{1b}[2J\nx"), "evil\\u{1b}[2J\\nx");
        let long = "a".repeat(500);
        assert_eq!(escape_target(&long).chars().count(), 201);
    }

    #[test]
    fn bearer_needs_the_scheme_and_a_space() {
        let request = |value: &str| {
            axum::http::Request::builder()
                .header(AUTHORIZATION, value)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        assert_eq!(bearer(&request("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&request("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&request("Basic abc")), None);
        assert_eq!(bearer(&request("Bearerabc")), None);
    }
}
