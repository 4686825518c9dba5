//! The session lifecycle as library code with typed outcomes: create a
//! session, resume a named one, deliver a message to a gateway chat
//! (continue, rotate or rebind), over one [`Store`].
//!
//! The `vak` binary and the gateway service only parse input and render
//! these outcomes. The delivery path receives nothing but the read-only
//! [`InboundPrompts`] handle and a store.
//!
//! [`Store`]: vak_core::prompts::Store
//! [`InboundPrompts`]: vak_core::InboundPrompts

mod error;
mod lifecycle;
mod request;
mod secret;
mod secret_cache;
mod service;
mod store;

pub use error::LifecycleError;
pub use lifecycle::{
    Delivered, DeliveryOutcome, Exec, NewSession, Resumed, TurnPaths, TurnScoped, deliver,
    deliver_cached, deliver_paths, deliver_served, exec, freeze, meta_for, new_session,
    resolve_session, scoped_for_turn, selectors_of,
};
pub use request::{Request, clip, render_tail_for, render_tail_from};
pub use secret::{
    Formats, REPLAY_WINDOW_SECS, SignatureRefusal, Verified, bot_secret, ensure_bot_secret,
    ensure_secret, hex, read_secret, secret_path, sign, sign_v2, verify,
};
pub use service::{BODY_READ_TIMEOUT, MAX_BODY_BYTES, Service, ServiceConfig, head_refusal};
pub use store::{
    Imported, Migrated, StoreSource, StoreUrl, choose_store, import_file, import_file_with,
    ledger_digest, migrate, on_chosen_store, open_store,
};
