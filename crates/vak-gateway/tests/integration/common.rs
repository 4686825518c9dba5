//! A scratch home (a copy of the fixture home), a scratch project, and a
//! scratch store of either backend.

use std::path::{Path, PathBuf};

use camino::{Utf8Path, Utf8PathBuf};
use vak_core::Selectors;
use vak_core::prompts::{FileStore, Name, NameKind, Store, SurfaceKind};
use vak_store_pg::PgStore;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

pub use vak_store_pg::testing::pg_url;

/// Now, in Unix seconds: what a signed request's claim says. A claim from
/// long ago is one the file store may forget at its next prune.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap())
        .unwrap()
}

/// A fresh, migrated database on the test server; its URL.
pub fn scratch_database(url: &str) -> String {
    let scratch = vak_store_pg::testing::scratch_database(url, "t");
    PgStore::connect(&scratch).unwrap().migrate().unwrap();
    scratch
}

/// Which backend a contract test runs on.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    File,
    /// PostgreSQL with the default lock (the binding row).
    Postgres,
    /// PostgreSQL with `?vak_lock=advisory`.
    PostgresAdvisory,
}

/// A home, a project and a store.
pub struct Env {
    _home: tempfile::TempDir,
    _project: tempfile::TempDir,
    pub home: Utf8PathBuf,
    pub project: Utf8PathBuf,
    pub url: Option<String>,
}

impl Env {
    /// `None` when the backend is PostgreSQL and no server is configured.
    pub fn new(backend: Backend) -> Option<Env> {
        let url = match backend {
            Backend::File => None,
            Backend::Postgres => Some(scratch_database(&pg_url()?)),
            Backend::PostgresAdvisory => Some(scratch_database(&pg_url()?) + "?vak_lock=advisory"),
        };
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        copy_tree(&fixtures().join("home"), home.path());
        Some(Env {
            home: Utf8Path::from_path(home.path()).unwrap().to_owned(),
            project: Utf8Path::from_path(project.path()).unwrap().to_owned(),
            _home: home,
            _project: project,
            url,
        })
    }

    pub fn store(&self) -> Box<dyn Store> {
        match &self.url {
            None => Box::new(FileStore::new(&self.home)),
            Some(url) => Box::new(PgStore::open(url).unwrap()),
        }
    }

    pub fn selectors(&self, bot: &str, chat: &str) -> Selectors {
        Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(Name::new(NameKind::Bot, bot).unwrap()),
            chat: Some(Name::new(NameKind::Chat, chat).unwrap()),
            ..Selectors::new(self.home.clone(), self.project.clone())
        }
    }

    /// Add `chat` under `bot` in the allowlist.
    pub fn allow(&self, bot: &str, chats: &[String]) {
        let path = self.home.join(".vak/gateway/allowlist.json");
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for chat in chats {
            doc[bot][chat.as_str()] = serde_json::json!({});
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    }

    /// Change the shared guardrails (they accumulate, so every chain sees it).
    pub fn edit_prompt(&self, text: &str) {
        let path = self.home.join(".vak/prompts/guardrails.md");
        let mut old = std::fs::read_to_string(&path).unwrap_or_default();
        old.push_str(&format!("\n- {text}\n"));
        std::fs::write(path, old).unwrap();
    }
}
