//! Integration tests of the facade: doc 45's probe and directory layers on
//! a real filesystem. One test binary for the crate; each topic a module.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod directory_layers;
mod gateway_change;
mod gateway_reach;
mod probe;
mod rule_save;
mod shared_budget;
