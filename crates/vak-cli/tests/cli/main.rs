//! Integration tests: the real `vak` binary on temporary homes and projects.
//! One test crate for the whole CLI; each command family is a module.
#![allow(
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod agents_monorepo;
mod budget;
mod command_line;
mod common;
mod completions;
mod crash_windows;
mod discovery;
mod edit;
mod fs_floor;
mod gateway_hostile;
mod gateway_replay;
mod gateway_scale;
mod gateway_service;
mod history;
mod history_store;
mod home_store;
mod hostile_cli;
mod hostile_links;
mod hostile_paths;
mod hostile_stores;
mod hostile_terminal;
mod hostile_text;
mod imports;
mod json_agree;
mod managed;
mod prompts;
mod provenance;
mod redteam_managed_imports;
mod rules;
mod session;
