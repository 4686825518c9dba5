//! vak-gateway's integration tests: the store contract (the same lifecycle
//! suite on the file store and on PostgreSQL).
#![allow(
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod common;
mod contract;
mod home_side;
