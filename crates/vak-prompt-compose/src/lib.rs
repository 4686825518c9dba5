//! The composition engine.
//!
//! [`resolve_prompt`] takes what the loader read and what trust allows, and
//! composes every block by its rule (see [`vak_prompt_blocks::Composition`]):
//! narrowest-wins for identity and operating rules, concatenate-and-dedupe
//! for guardrails and surface notes, additive agent instructions, the
//! capability contract generated from the catalog, and runtime-derived
//! surface, skill and MCP blocks. It renders the prefix in one fixed order
//! and the per-turn tail separately, and describes every winning layer.
//!
//! Composition is pure: no file or clock is touched here, so the property
//! tests run over thousands of random chains in milliseconds.

mod catalog;
mod config;
mod descriptors;
mod resolve;
mod rules;
#[rustfmt::skip]
mod seed;
mod seed_model;
mod tail;

pub use catalog::{CATALOG, Capability, render_contract};
pub use config::{ComposeMemo, EffectiveConfig, McpServer, PermissionKind, Sourced};
pub use descriptors::Descriptors;
pub use resolve::{
    Contributor, Demotion, MAX_LINTS_PER_FILE, ResolveInput, ResolvedBlock, ResolvedPrompt,
    resolve_prompt, resolve_prompt_with,
};
pub use rules::{
    ActiveRule, DemotedRule, SCOPED_GUARDRAILS_HEADING, SCOPED_RULES_HEADING, ScopedTail,
    all_rule_texts, compose_rules, render_all,
};
pub use seed_model::{SeedBlock, seed};
pub use tail::{TailContext, render_tail, rfc3339_utc};
