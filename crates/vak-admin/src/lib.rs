//! The authenticated admin API and the `#/prompts` web UI behind
//! `vak admin serve` (docs/admin-api.md).
//!
//! - [`Server::bind`] resolves the home and project, loads or generates the
//!   bearer token ([`AdminToken`]), and binds a loopback address (port 0
//!   picks a free one); [`Server::run`] serves until Ctrl-C or SIGTERM,
//!   then lets requests in flight finish.
//! - Connections are bounded ([`Limits`]): at most 256 at once (fewer under
//!   a low `ulimit -n`; the rest wait in the kernel's backlog), a request
//!   head within 10 s (also the keep-alive idle limit) and of at most
//!   64 KiB (431), no connection silent for 60 s; accept errors such as
//!   EMFILE pause the accept loop briefly, never end it.
//! - Every request must have an origin-form target (`/api/…`; 400 for
//!   `http://host/…`, `host:port` or `*`) and exactly one `Host` (400 for
//!   none or several), naming the address the server listens on (a
//!   DNS-rebinding page arrives under its own name and is refused with
//!   421); every `/api/` request must carry
//!   `Authorization: Bearer <token>`, compared in constant time (401).
//!   Bodies are capped at [`MAX_BODY_BYTES`] (413) and must arrive
//!   within 30 s (408); block, surface, role,
//!   bot and chat names are validated before they touch a path (400).
//! - The routes call the same `vak_core` functions as the CLI: the
//!   effective prompt is `Core::budget` shaped as the `PromptReport`; saves
//!   and resets are `Core::save_block` / `Core::reset_block` (the same
//!   digest check → 409 and budget check → 422); the live count is
//!   `Core::preview`. Gateway tiers are written only here, with the
//!   loader's atomic, digest-checked save. Routes are listed in
//!   `docs/admin-api.md`.
//! - The page (`ui/`) is embedded with `include_str!` and fetches nothing
//!   but this server's own API.
//!
//! Guardrail text is defence in depth: it instructs the model. What tools
//! may actually do is the permission engine's decision; the UI says so on
//! every guardrail editor and links to the read-only `#/permissions` view.

mod api;
pub mod assets;
mod error;
mod gateway;
mod server;
mod token;

pub use error::AdminError;
pub use server::{
    HeadRefusal, Limits, MAX_BODY_BYTES, MAX_WORKERS, ServeConfig, Server, serve_router,
    serve_router_with, stop_signal, workers,
};
pub use token::{AdminToken, TokenSource, token_path};
