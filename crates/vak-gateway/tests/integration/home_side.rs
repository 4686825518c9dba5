//! The home side in the PostgreSQL store: compare-and-swap,
//! an altered row, a hostile path, and a delivery whose resolution the
//! store moved past under the chat's lock (refused, resolved again, never
//! rotated back). PostgreSQL only: the file store does not hold the home
//! side.

use camino::{Utf8Path, Utf8PathBuf};
use vak_core::prompts::{
    AuditEntries, Binding, Bound, ChatPlan, Claim, Committed, Expect, FrozenContract, Header,
    HomeStore, Ledger, Name, NameKind, Record, SessionError, SessionId, SessionMeta, Store,
    SurfaceKind, Swapped, sha256_hex,
};
use vak_core::{InboundPrompts, Selectors};
use vak_gateway::{DeliveryOutcome, deliver, meta_for};
use vak_store_pg::PgStore;

use crate::common::{Backend, Env};

const GUARDRAILS: &str = ".vak/prompts/guardrails.md";

fn seeded() -> Option<(Env, PgStore)> {
    let env = Env::new(Backend::Postgres)?;
    let url = env.url.clone()?;
    vak_gateway::import_file(&env.home, &url).unwrap();
    Some((env, PgStore::open(&url).unwrap()))
}

fn empty_home() -> (tempfile::TempDir, Utf8PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = Utf8Path::from_path(dir.path()).unwrap().to_owned();
    (dir, path)
}

fn chat_prompts(home: &Utf8Path, project: &Utf8Path) -> (InboundPrompts, SessionMeta) {
    let selectors = Selectors {
        surface: SurfaceKind::Chat,
        bot: Some(Name::new(NameKind::Bot, "helpdesk").unwrap()),
        chat: Some(Name::new(NameKind::Chat, "42").unwrap()),
        ..Selectors::new(home.to_owned(), project.to_owned())
    };
    let meta = meta_for(&selectors);
    (InboundPrompts::open(selectors).unwrap(), meta)
}

fn current(store: &PgStore, path: &str) -> String {
    store
        .home_snapshot()
        .unwrap()
        .files
        .into_iter()
        .find(|f| f.path == path)
        .unwrap()
        .text
}

#[test]
fn a_put_or_remove_from_a_stale_digest_is_a_conflict_and_writes_nothing() {
    let Some((_env, store)) = seeded() else {
        return;
    };
    let before = store.home_generation().unwrap();
    let text = current(&store, GUARDRAILS);
    let swapped = store
        .home_put(GUARDRAILS, "- x\n", &Expect::Absent, None, "test")
        .unwrap();
    assert_eq!(swapped, Swapped::Conflict(Some(sha256_hex(&text))));
    let wrong = Expect::Digest(sha256_hex("something else"));
    assert!(matches!(
        store.home_remove(GUARDRAILS, &wrong, None, "test").unwrap(),
        Swapped::Conflict(Some(_))
    ));
    assert_eq!(store.home_generation().unwrap(), before);
    let swapped = store
        .home_put(
            GUARDRAILS,
            "- y\n",
            &Expect::Digest(sha256_hex(&text)),
            None,
            "test",
        )
        .unwrap();
    assert_eq!(swapped, Swapped::Done(before + 1));
    assert_eq!(current(&store, GUARDRAILS), "- y\n");
}

#[test]
fn a_put_or_remove_at_a_generation_the_home_side_moved_past_is_refused_and_writes_nothing() {
    let Some((_env, store)) = seeded() else {
        return;
    };
    const RULES: &str = ".vak/prompts/operating-rules.md";
    let checked_at = store.home_generation().unwrap();
    let guardrails = current(&store, GUARDRAILS);
    let rules = current(&store, RULES);
    // Another node saves another file after this node's check.
    let other = store
        .home_put(
            RULES,
            "- from the other node\n",
            &Expect::Digest(sha256_hex(&rules)),
            Some(checked_at),
            "other node",
        )
        .unwrap();
    assert_eq!(other, Swapped::Done(checked_at + 1));
    // This file's digest still matches, but the check is stale.
    let expect = Expect::Digest(sha256_hex(&guardrails));
    let swapped = store
        .home_put(GUARDRAILS, "- y\n", &expect, Some(checked_at), "test")
        .unwrap();
    assert_eq!(swapped, Swapped::Moved(checked_at + 1));
    assert_eq!(
        store
            .home_remove(GUARDRAILS, &expect, Some(checked_at), "test")
            .unwrap(),
        Swapped::Moved(checked_at + 1)
    );
    assert_eq!(current(&store, GUARDRAILS), guardrails);
    assert_eq!(store.home_generation().unwrap(), checked_at + 1);
    // At the generation now, it goes through.
    let swapped = store
        .home_put(GUARDRAILS, "- y\n", &expect, Some(checked_at + 1), "test")
        .unwrap();
    assert_eq!(swapped, Swapped::Done(checked_at + 2));
}

#[test]
fn a_hostile_path_is_never_stored() {
    let Some((_env, store)) = seeded() else {
        return;
    };
    for path in [
        "../../etc/passwd",
        ".vak/prompts/agents/../../../x/guardrails.md",
        ".vak/gateway/secrets/helpdesk",
        ".vak/skills/changelog/run.sh",
        ".vak/managed-keys.toml",
    ] {
        assert!(
            store
                .home_put(path, "x", &Expect::Absent, None, "test")
                .is_err(),
            "{path}"
        );
    }
}

#[test]
fn a_row_altered_in_the_database_is_refused_and_never_reaches_a_replica() {
    let Some((env, store)) = seeded() else {
        return;
    };
    let mut admin =
        postgres::Client::connect(env.url.as_deref().unwrap(), postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "UPDATE vak_home_files SET text = '- injected' WHERE path = '.vak/prompts/guardrails.md';
             UPDATE vak_home_generation SET generation = generation + 1",
        )
        .unwrap();
    let error = store.home_snapshot().unwrap_err().to_string();
    assert!(
        error.contains("does not match its recorded sha256"),
        "{error}"
    );
    let (_dir, home) = empty_home();
    assert!(vak_core::home::sync_home(&home, &store, "test", true).is_err());
    assert!(!home.join(GUARDRAILS).exists());
}

#[test]
fn under_the_chat_lock_an_older_generation_is_refused_before_the_plan_runs() {
    let Some((_env, store)) = seeded() else {
        return;
    };
    let now = store.home_generation().unwrap();
    let bot = Name::new(NameKind::Bot, "helpdesk").unwrap();
    let chat = Name::new(NameKind::Chat, "42").unwrap();
    let mut planned = false;
    let result = store.deliver_at(&bot, &chat, Some(now - 1), None, &mut |_| {
        planned = true;
        None
    });
    assert!(
        matches!(result, Err(SessionError::HomeMoved { resolved, now: n, .. }) if resolved == now - 1 && n == now),
        "{result:?}"
    );
    assert!(!planned);
    assert!(store.bindings().unwrap().is_empty());
}

/// A store error inside the delivery's transaction, after the signature
/// was taken (here the home side moving on), rolls the signature back with
/// everything else: the sender's retry is delivered, and its replay is not.
#[test]
fn a_delivery_that_fails_in_its_transaction_leaves_its_signature_free() {
    let Some((env, store)) = seeded() else {
        return;
    };
    let now = store.home_generation().unwrap();
    let bot = Name::new(NameKind::Bot, "helpdesk").unwrap();
    let chat = Name::new(NameKind::Chat, "42").unwrap();
    let claim = Claim {
        key: "v2=retried",
        at: crate::common::now(),
        window_secs: 300,
    };
    let failed = store.deliver_at(&bot, &chat, Some(now - 1), Some(&claim), &mut |_| None);
    assert!(
        matches!(failed, Err(SessionError::HomeMoved { .. })),
        "{failed:?}"
    );
    let mut admin =
        postgres::Client::connect(env.url.as_deref().unwrap(), postgres::NoTls).unwrap();
    let mut replay_rows = || -> i64 {
        admin
            .query_one("SELECT count(*) FROM vak_replay", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(replay_rows(), 0, "the failed delivery took nothing");

    let selectors = env.selectors("helpdesk", "42");
    let meta = meta_for(&selectors);
    let prompts = InboundPrompts::open(selectors).unwrap();
    let delivered =
        vak_gateway::deliver_cached(&store, &prompts, &meta, "hello", None, Some(&claim)).unwrap();
    assert_eq!(delivered.outcome, DeliveryOutcome::Created);
    assert_eq!(replay_rows(), 1);
    let replayed =
        vak_gateway::deliver_cached(&store, &prompts, &meta, "hello", None, Some(&claim))
            .unwrap_err();
    assert!(
        matches!(
            replayed,
            vak_gateway::LifecycleError::Store(SessionError::Replayed)
        ),
        "{replayed}"
    );
    assert_eq!(store.read(&delivered.session).unwrap().turns().count(), 1);
    assert_eq!(store.list_newest(10).unwrap().1, 1);
    assert_eq!(replay_rows(), 1, "a replay writes nothing");
}

/// The PostgreSQL store, moving the home side on once just before the
/// first delivery takes the chat's lock: what another node's admin save
/// does between this node's sync and its delivery.
#[derive(Debug)]
struct MovesOnce {
    inner: PgStore,
    edit: std::sync::Mutex<Option<String>>,
}

impl Store for MovesOnce {
    fn prune_claims(&self, window_secs: i64) -> Result<(), SessionError> {
        self.inner.prune_claims(window_secs)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn history(&self) -> &dyn vak_core::history::History {
        self.inner.history()
    }
    fn create(
        &self,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError> {
        self.inner.create(meta, contract)
    }
    fn append(&self, id: &SessionId, record: &Record) -> Result<(), SessionError> {
        self.inner.append(id, record)
    }
    fn read(&self, id: &SessionId) -> Result<Ledger, SessionError> {
        self.inner.read(id)
    }
    fn read_header(&self, id: &SessionId) -> Result<Header, SessionError> {
        self.inner.read_header(id)
    }
    fn list_newest(&self, limit: usize) -> Result<(Vec<SessionId>, usize), SessionError> {
        self.inner.list_newest(limit)
    }
    fn audit_newest(&self, limit: usize) -> Result<AuditEntries, SessionError> {
        self.inner.audit_newest(limit)
    }
    fn bindings(&self) -> Result<Vec<(String, String, Binding)>, SessionError> {
        self.inner.bindings()
    }
    fn deliver_at(
        &self,
        bot: &Name,
        chat: &Name,
        home_generation: Option<i64>,
        claim: Option<&Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Committed>, SessionError> {
        if let Some(text) = self.edit.lock().unwrap().take() {
            let old = current(&self.inner, GUARDRAILS);
            let done = self
                .inner
                .home_put(
                    GUARDRAILS,
                    &text,
                    &Expect::Digest(sha256_hex(&old)),
                    None,
                    "other node",
                )
                .unwrap();
            assert!(matches!(done, Swapped::Done(_)));
        }
        self.inner
            .deliver_at(bot, chat, home_generation, claim, plan)
    }
    fn home(&self) -> Option<&dyn HomeStore> {
        Some(&self.inner)
    }
}

#[test]
fn a_node_whose_resolution_the_store_moved_past_resolves_again_and_never_rotates_back() {
    let Some((env, store)) = seeded() else {
        return;
    };
    let (_a, home_a) = empty_home();
    let (_b, home_b) = empty_home();
    // Node A delivers first: created, on the imported prompt.
    let (prompts_a, meta_a) = chat_prompts(&home_a, &env.project);
    let first = deliver(&store, &prompts_a, &meta_a, "one").unwrap();
    assert_eq!(first.outcome, DeliveryOutcome::Created);

    // Node B syncs, then another node saves before B takes the chat's lock.
    let moving = MovesOnce {
        inner: PgStore::open(env.url.as_deref().unwrap()).unwrap(),
        edit: std::sync::Mutex::new(Some("- Never deploy on Fridays.\n".to_owned())),
    };
    let (prompts_b, meta_b) = chat_prompts(&home_b, &env.project);
    let second = deliver(&moving, &prompts_b, &meta_b, "two").unwrap();
    // B's first resolution was refused under the lock; it resolved again
    // on the new text, so the rotation lands on the newest prompt.
    assert!(
        matches!(second.outcome, DeliveryOutcome::Rotated { .. }),
        "{:?}",
        second.outcome
    );
    assert!(second.request.prefix.contains("Never deploy on Fridays"));

    // Node A still holds the older replica; its next delivery syncs first
    // and continues the new session — it does not rotate back.
    let third = deliver(&store, &prompts_a, &meta_a, "three").unwrap();
    assert_eq!(third.outcome, DeliveryOutcome::Continued);
    assert_eq!(third.session, second.session);
    let changes = store
        .audit_newest(100)
        .unwrap()
        .events
        .into_iter()
        .filter(|e| matches!(e, vak_core::prompts::SecurityEvent::ConfigChange(_)))
        .count();
    assert_eq!(changes, 1);
}

#[test]
fn a_database_missing_a_middle_migration_is_refused_until_migrated() {
    let Some(env) = Env::new(Backend::Postgres) else {
        return;
    };
    let url = env.url.clone().unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    // What a build that lacked migration 2 would have left.
    admin
        .batch_execute("DELETE FROM vak_schema_migrations WHERE version = 2; DROP TABLE vak_replay")
        .unwrap();
    let error = PgStore::open(&url).unwrap_err().to_string();
    assert!(error.contains("lacks migration 2"), "{error}");
    assert_eq!(PgStore::connect(&url).unwrap().migrate().unwrap(), [2]);
    PgStore::open(&url).unwrap();
}

/// The shared home's scoped rules travel with the home side: imported
/// into the store, synced onto a node with an empty home, and chosen by a
/// delivery's paths there.
#[test]
fn the_homes_scoped_rules_travel_to_every_node() {
    const RULE: &str = ".vak/prompts/rules/payments.md";
    let Some(env) = Env::new(Backend::Postgres) else {
        return;
    };
    let url = env.url.clone().unwrap();
    std::fs::create_dir_all(env.home.join(".vak/prompts/rules")).unwrap();
    std::fs::write(
        env.home.join(RULE),
        "+++\npaths = [\"src/payments/**\"]\n+++\n- Never log card numbers.\n",
    )
    .unwrap();
    vak_gateway::import_file(&env.home, &url).unwrap();
    let store = PgStore::open(&url).unwrap();
    assert!(current(&store, RULE).contains("card numbers"));
    let (_dir, node) = empty_home();
    vak_core::home::sync_home(&node, &store, "test", true).unwrap();
    assert!(node.join(RULE).exists());
    let (prompts, meta) = chat_prompts(&node, &env.project);
    let paths = vak_core::paths_from_root(&["src/payments/x.rs".to_owned()]).unwrap();
    let delivered =
        vak_gateway::deliver_paths(&store, &prompts, &meta, "refund", &paths, None, None).unwrap();
    assert!(
        delivered.request.tail.contains("Never log card numbers."),
        "{}",
        delivered.request.tail
    );
}

/// The service's sync check (`deliver_served`): while the prompt cache's
/// change notifications say nothing under the home changed, a delivery
/// reads no manifest and hashes no replica file (the check's work counter
/// stays put, however many deliveries); a save on another node is still
/// taken at this node's very next delivery (the store refuses the
/// generation remembered, the replica syncs and the chat rotates once);
/// and a replica file edited by hand is still refused, not served.
#[test]
fn a_served_node_checks_its_replica_only_when_something_under_the_home_changed() {
    let Some((env, store)) = seeded() else {
        return;
    };
    let (_a, home) = empty_home();
    let (prompts, meta) = chat_prompts(&home, &env.project);
    let cache = vak_core::PromptCache::within_window();
    let replica = vak_core::home::ReplicaCheck::new();
    let send = |text: &str| {
        vak_gateway::deliver_served(&store, &prompts, &meta, text, &[], &cache, &replica, None)
    };
    assert_eq!(send("one").unwrap().outcome, DeliveryOutcome::Created);
    // The first deliveries arm the watch (each arming moves the epoch).
    for _ in 0..3 {
        assert_eq!(send("warm").unwrap().outcome, DeliveryOutcome::Continued);
    }
    let settled = replica.checks();
    for _ in 0..20 {
        assert_eq!(send("again").unwrap().outcome, DeliveryOutcome::Continued);
    }
    assert!(cache.is_watching());
    assert_eq!(replica.checks(), settled, "no check while nothing changed");

    // Another node saves: the next delivery here takes it.
    let old = current(&store, GUARDRAILS);
    let other = PgStore::open(env.url.as_deref().unwrap()).unwrap();
    let saved = other
        .home_put(
            GUARDRAILS,
            "- Never deploy on Fridays.\n",
            &Expect::Digest(sha256_hex(&old)),
            None,
            "other node",
        )
        .unwrap();
    assert!(matches!(saved, Swapped::Done(_)));
    let next = send("after the save").unwrap();
    assert!(
        matches!(next.outcome, DeliveryOutcome::Rotated { .. }),
        "{:?}",
        next.outcome
    );
    assert!(next.request.prefix.contains("Never deploy on Fridays"));
    assert!(replica.checks() > settled);
    assert_eq!(send("settled").unwrap().outcome, DeliveryOutcome::Continued);

    // A hand edit of the replica moves the epoch: checked, and refused.
    let before = replica.checks();
    std::fs::write(home.join(GUARDRAILS), "- Edited by hand.\n").unwrap();
    let refused = send("after the hand edit");
    assert!(
        matches!(
            refused,
            Err(vak_gateway::LifecycleError::Home(
                vak_core::home::HomeError::EditedByHand { .. }
            ))
        ),
        "{:?}",
        refused.map(|d| d.outcome)
    );
    assert_eq!(replica.checks(), before + 1);
}
