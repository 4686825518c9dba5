//! What the workspace's tests need of a real PostgreSQL server, in one
//! place: the server's URL from `VAK_TEST_PG_URL` (`.ci/test` starts a
//! throwaway cluster and sets it) and a fresh database on it per test.
//! Compiled for this crate's own tests and, through the `test-support`
//! feature, for the other crates' test binaries only.

#![allow(clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};

/// The PostgreSQL URL the tests use. Under CI (`CI` set) a missing
/// `VAK_TEST_PG_URL` fails the test, so a green CI run never skipped the
/// PostgreSQL half; elsewhere that half is skipped with a note.
pub fn pg_url() -> Option<String> {
    if let Ok(url) = std::env::var("VAK_TEST_PG_URL")
        && !url.is_empty()
    {
        return Some(url);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    assert!(
        !ci,
        "VAK_TEST_PG_URL is unset under CI: run the tests through .ci/test, which starts PostgreSQL"
    );
    // Written past the test harness's capture, once, so the skip is seen.
    static NOTED: std::sync::Once = std::sync::Once::new();
    NOTED.call_once(|| {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "note: VAK_TEST_PG_URL is unset, so the PostgreSQL tests are skipped (.ci/test sets it)"
        );
    });
    None
}

/// A fresh, empty database on the server at `url` (named by `tag`, the
/// process and a counter, so parallel tests and test binaries never
/// share one); its URL. Not migrated: a test that wants the schema calls
/// [`crate::PgStore::migrate`], one that tests migration does not.
pub fn scratch_database(url: &str, tag: &str) -> String {
    static DATABASES: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "vak_{tag}_{}_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let mut admin = postgres::Client::connect(url, postgres::NoTls)
        .expect("the test PostgreSQL server at VAK_TEST_PG_URL accepts connections");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("the test PostgreSQL server creates a scratch database");
    let (base, _) = url
        .rsplit_once('/')
        .expect("VAK_TEST_PG_URL names a database");
    format!("{base}/{name}")
}
