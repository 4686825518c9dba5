//! The store contract: every test here runs on both backends.

use std::collections::HashSet;

use vak_core::Core;
use vak_core::prompts::{
    Claim, Name, NameKind, Record, SecurityEvent, SessionError, SessionId, Store,
};
use vak_gateway::{DeliveryOutcome, Exec, LifecycleError, deliver, deliver_cached, meta_for};

use crate::common::{Backend, Env};

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn file() {
                if let Some(env) = super::Env::new(super::Backend::File) {
                    super::$name(&env);
                }
            }
            #[test]
            fn postgres() {
                if let Some(env) = super::Env::new(super::Backend::Postgres) {
                    super::$name(&env);
                }
            }
            #[test]
            fn postgres_advisory_lock() {
                if let Some(env) = super::Env::new(super::Backend::PostgresAdvisory) {
                    super::$name(&env);
                }
            }
        }
    )*};
}

on_both!(
    create_continue_rotate,
    off_the_allowlist_writes_nothing,
    concurrent_deliveries_rotate_once,
    named_sessions_refuse_or_proceed_on_frozen,
    listings_page_newest_first,
    a_signature_is_taken_only_by_a_committed_delivery,
    the_tail_sees_the_first_and_last_turns,
    a_cached_delivery_stays_cached_until_an_edit,
    a_claim_is_kept_while_its_request_is_in_the_window_whatever_its_time,
    a_chat_whose_ledger_is_gone_is_rebound_with_a_warning_and_an_event,
    a_turns_scoped_rules_are_recorded_and_read_back,
);

/// A delivery naming paths records the scoped rules in force in its turn,
/// and the store reads them back, on every backend; adding a rule never
/// rotates the chat (the prefix does not hold it).
fn a_turns_scoped_rules_are_recorded_and_read_back(env: &Env) {
    let store = env.store();
    let first = deliver_to(env, &*store, "42", "hello");
    let rules = env.project.join(".vak/prompts/rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("payments.md"),
        "+++\npaths = [\"src/payments/**\"]\n+++\n- Never log card numbers.\n",
    )
    .unwrap();
    let selectors = env.selectors("helpdesk", "42");
    let meta = meta_for(&selectors);
    let prompts = vak_core::InboundPrompts::open(selectors).unwrap();
    let paths = vak_core::paths_from_root(&["src/payments/x.rs".to_owned()]).unwrap();
    let second =
        vak_gateway::deliver_paths(&*store, &prompts, &meta, "refund", &paths, None, None).unwrap();
    assert_eq!(
        second.outcome,
        DeliveryOutcome::Continued,
        "a rule is per turn"
    );
    assert_eq!(second.session, first.session);
    assert!(second.request.tail.contains("Never log card numbers."));
    let ledger = store.read(&first.session).unwrap();
    let last = ledger.turns().last().unwrap();
    assert_eq!(last.rules.len(), 1);
    assert_eq!(last.rules[0].name, "payments");
    assert_eq!(last.rules[0].paths, ["src/payments/x.rs"]);
    assert!(ledger.turns().next().unwrap().rules.is_empty());
}

fn deliver_to(env: &Env, store: &dyn Store, chat: &str, text: &str) -> vak_gateway::Delivered {
    let selectors = env.selectors("helpdesk", chat);
    let meta = meta_for(&selectors);
    let prompts = vak_core::InboundPrompts::open(selectors).unwrap();
    deliver(store, &prompts, &meta, text).unwrap()
}

fn config_changes(store: &dyn Store) -> Vec<vak_core::prompts::ConfigChange> {
    store
        .audit_newest(10_000)
        .unwrap()
        .events
        .into_iter()
        .filter_map(|e| match e {
            SecurityEvent::ConfigChange(c) => Some(c),
            SecurityEvent::TrustOverCap(_) | SecurityEvent::Rebound(_) | SecurityEvent::Unknown => {
                None
            }
        })
        .collect()
}

fn create_continue_rotate(env: &Env) {
    let store = env.store();
    let first = deliver_to(env, &*store, "42", "the build is red");
    assert_eq!(first.outcome, DeliveryOutcome::Created);
    let second = deliver_to(env, &*store, "42", "still red");
    assert_eq!(second.outcome, DeliveryOutcome::Continued);
    assert_eq!(second.session, first.session);
    assert!(second.request.tail.contains("the build is red"));
    assert_eq!(second.to_json()["outcome"], "continued");
    // The service writes the borrowed view straight into its answer: the
    // bytes must read back as the very object `--format json` prints.
    let answered = serde_json::to_vec(&second.json()).unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&answered).unwrap(),
        second.to_json()
    );

    env.edit_prompt("You are the platform team's helper.");
    let third = deliver_to(env, &*store, "42", "and now?");
    let DeliveryOutcome::Rotated { previous, changes } = &third.outcome else {
        panic!("expected a rotation, got {:?}", third.outcome);
    };
    assert_eq!(previous, &first.session);
    assert!(!changes.is_empty());
    assert_ne!(third.session, first.session);
    let events = config_changes(&*store);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].old_session, first.session);
    assert_eq!(events[0].new_session, third.session);

    let fourth = deliver_to(env, &*store, "42", "ok");
    assert_eq!(fourth.outcome, DeliveryOutcome::Continued);
    assert_eq!(fourth.session, third.session);

    let bindings = store.bindings().unwrap();
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0].2.session_id, third.session);
    let old = store.read(&first.session).unwrap();
    assert_eq!(old.turns().count(), 2);
    let new = store.read(&third.session).unwrap();
    let turns: Vec<_> = new.turns().map(|t| t.message.as_str()).collect();
    assert_eq!(turns, ["and now?", "ok"]);
}

fn off_the_allowlist_writes_nothing(env: &Env) {
    let store = env.store();
    for (bot, chat) in [("stranger", "42"), ("helpdesk", "99")] {
        let selectors = env.selectors(bot, chat);
        let meta = meta_for(&selectors);
        let prompts = vak_core::InboundPrompts::open(selectors).unwrap();
        let refused = deliver(&*store, &prompts, &meta, "hi").unwrap_err();
        assert!(
            matches!(
                refused,
                LifecycleError::UnknownBot { .. } | LifecycleError::UnknownChat { .. }
            ),
            "{refused}"
        );
    }
    assert_eq!(store.list_newest(10).unwrap().1, 0);
    assert!(store.bindings().unwrap().is_empty());
    assert_eq!(store.audit_newest(10).unwrap().total, 0);
}

fn concurrent_deliveries_rotate_once(env: &Env) {
    let store = env.store();
    let chats: Vec<String> = (0..4).map(|i| format!("c{i}")).collect();
    env.allow("helpdesk", &chats);
    let round = |tag: &str| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|i| {
                    let chat = chats[i % chats.len()].clone();
                    let store = &*store;
                    let text = format!("{tag}{i}");
                    scope.spawn(move || deliver_to(env, store, &chat, &text))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let before = round("a");
    env.edit_prompt("A new identity, half-way.");
    let after = round("b");
    let bindings = store.bindings().unwrap();
    assert_eq!(bindings.len(), chats.len(), "one binding per chat");
    let events = config_changes(&*store);
    let rotated: HashSet<&str> = events.iter().map(|e| e.chat.as_str()).collect();
    assert_eq!(
        events.len(),
        chats.len(),
        "one config-change per chat: {events:?}"
    );
    assert_eq!(rotated.len(), chats.len());
    let created = before
        .iter()
        .filter(|d| d.outcome == DeliveryOutcome::Created)
        .count();
    assert_eq!(created, chats.len(), "one session created per chat");
    for delivered in before.iter().chain(&after) {
        let ledger = store.read(&delivered.session).unwrap();
        let text = delivered.request.message.as_deref().unwrap();
        assert!(
            ledger.turns().any(|t| t.message == text),
            "turn {text} is in {}",
            delivered.session
        );
    }
}

fn named_sessions_refuse_or_proceed_on_frozen(env: &Env) {
    let store = env.store();
    let core = Core::open(vak_core::Selectors::new(
        env.home.clone(),
        env.project.clone(),
    ))
    .unwrap();
    let created = vak_gateway::new_session(&*store, &core, None).unwrap();
    let (resumed, _) = vak_gateway::exec(
        &*store,
        &env.home,
        &created.id,
        false,
        Some("hello"),
        vak_gateway::TurnPaths::None,
        &env.project,
    )
    .unwrap();
    assert!(matches!(resumed, Exec::Continued(_)));
    env.edit_prompt("Changed under the session.");
    let (refused, _) = vak_gateway::exec(
        &*store,
        &env.home,
        &created.id,
        false,
        Some("again"),
        vak_gateway::TurnPaths::None,
        &env.project,
    )
    .unwrap();
    let Exec::Refused { drift, .. } = &refused else {
        panic!("expected a refusal");
    };
    assert!(!drift.changes.is_empty());
    assert_eq!(
        store.read(&created.id).unwrap().records.len(),
        1,
        "nothing written"
    );
    let (frozen, _) = vak_gateway::exec(
        &*store,
        &env.home,
        &created.id,
        true,
        Some("anyway"),
        vak_gateway::TurnPaths::None,
        &env.project,
    )
    .unwrap();
    assert!(matches!(frozen, Exec::ProceedOnFrozen(_)));
    let ledger = store.read(&created.id).unwrap();
    assert!(matches!(ledger.records[1], Record::DriftAccepted(_)));
    assert_eq!(ledger.turns().count(), 2);
    let child = vak_gateway::new_session(&*store, &core, Some(&created.id)).unwrap();
    assert_eq!(
        child.contract.parent.map(|p| p.session_id),
        Some(created.id.to_string())
    );
}

fn listings_page_newest_first(env: &Env) {
    let store = env.store();
    let core = Core::open(vak_core::Selectors::new(
        env.home.clone(),
        env.project.clone(),
    ))
    .unwrap();
    let ids: Vec<SessionId> = (0..5)
        .map(|_| vak_gateway::new_session(&*store, &core, None).unwrap().id)
        .collect();
    let (page, total) = store.list_newest(2).unwrap();
    assert_eq!(total, 5);
    assert_eq!(page, vec![ids[4].clone(), ids[3].clone()]);
    let header = store.read_header(&ids[0]).unwrap();
    assert_eq!(header.meta.surface.as_deref(), Some("cli"));
    let missing = SessionId::parse("01J0000000NOSUCHSESSION000").unwrap();
    assert!(matches!(
        store.read(&missing),
        Err(vak_core::prompts::SessionError::NotFound { .. })
    ));
}

fn deliver_signed(
    env: &Env,
    store: &dyn Store,
    chat: &str,
    text: &str,
    claim: &Claim<'_>,
) -> Result<vak_gateway::Delivered, LifecycleError> {
    let selectors = env.selectors("helpdesk", chat);
    let meta = meta_for(&selectors);
    let prompts = vak_core::InboundPrompts::open(selectors).unwrap();
    deliver_cached(store, &prompts, &meta, text, None, Some(claim))
}

/// A signature is taken with the delivery that commits, never by one that
/// fails: the sender's retry of a failed delivery is delivered, and a
/// replay of a delivered one (on any handle, to any chat) writes nothing.
fn a_signature_is_taken_only_by_a_committed_delivery(env: &Env) {
    let store = env.store();
    let other = env.store();
    env.allow("helpdesk", &["43".to_owned()]);
    let claim = Claim {
        key: "v2=abc",
        at: crate::common::now(),
        window_secs: 300,
    };
    let bot = Name::new(NameKind::Bot, "helpdesk").unwrap();
    let chat = Name::new(NameKind::Chat, "42").unwrap();
    // A plan that fails (what a prompt over the window does): nothing is
    // written, the signature included.
    let failed = store.deliver_at(&bot, &chat, None, Some(&claim), &mut |_| None);
    assert!(matches!(failed, Ok(None)), "{failed:?}");
    assert!(store.bindings().unwrap().is_empty());

    let first = deliver_signed(env, &*store, "42", "one", &claim).expect("the retry is delivered");
    assert_eq!(first.outcome, DeliveryOutcome::Created);
    for (handle, chat) in [(&store, "42"), (&other, "42"), (&other, "43")] {
        let replayed = deliver_signed(env, &**handle, chat, "one", &claim).unwrap_err();
        assert!(
            matches!(replayed, LifecycleError::Store(SessionError::Replayed)),
            "{replayed}"
        );
        assert!(replayed.to_string().contains("replay"), "{replayed}");
    }
    assert_eq!(
        store.list_newest(10).unwrap().1,
        1,
        "a replay writes nothing"
    );
    assert_eq!(store.bindings().unwrap().len(), 1);
    let ledger = store.read(&first.session).unwrap();
    assert_eq!(ledger.turns().count(), 1);
    assert!(
        ledger.has_delivery(&claim.digest()),
        "the turn records its delivery"
    );

    let fresh = Claim {
        key: "v2=abd",
        ..claim
    };
    let second = deliver_signed(env, &*other, "42", "two", &fresh).unwrap();
    assert_eq!(second.outcome, DeliveryOutcome::Continued);
    assert_eq!(store.read(&first.session).unwrap().turns().count(), 2);
}

#[test]
fn import_moves_a_file_store_and_verifies_it() {
    let Some(url) = crate::common::pg_url() else {
        return;
    };
    let env = Env::new(Backend::File).unwrap();
    let files = env.store();
    deliver_to(&env, &*files, "42", "one");
    deliver_to(&env, &*files, "42", "two");
    env.edit_prompt("Changed before the move.");
    let rotated = deliver_to(&env, &*files, "42", "three");
    let core = Core::open(vak_core::Selectors::new(
        env.home.clone(),
        env.project.clone(),
    ))
    .unwrap();
    let named = vak_gateway::new_session(&*files, &core, None).unwrap();
    // A signed request from 100 s ago: its marker carries that time, and
    // the database gets the same, so it forgets the signature when the
    // request's window has closed, not 100 s later.
    let claimed = crate::common::now() - 100;
    let claim = Claim {
        key: "v2=signed-before-the-move",
        at: claimed,
        window_secs: 300,
    };
    deliver_signed(&env, &*files, "42", "signed", &claim).unwrap();
    // A try killed before its turn leaves a marker that does not say
    // committed: its request was never recorded, so it is not carried, and
    // the sender's retry is delivered on PostgreSQL.
    let killed = Claim {
        key: "v2=killed-before-its-turn",
        ..claim
    };
    let bound = files.bindings().unwrap()[0].2.session_id.clone();
    std::fs::create_dir_all(env.home.join(".vak/gateway/replay")).unwrap();
    std::fs::write(
        env.home.join(".vak/gateway/replay").join(killed.digest()),
        format!("helpdesk/42\nsession {bound}\n"),
    )
    .unwrap();

    let target = crate::common::scratch_database(&url);
    let imported = vak_gateway::import_file(&env.home, &target).unwrap();
    assert_eq!(imported.sessions, 3);
    assert_eq!(imported.records, 4);
    assert_eq!(imported.events, 1);
    assert_eq!(imported.bindings, 1);
    assert_eq!(imported.replay_markers, 1);
    let mut db = postgres::Client::connect(&target, postgres::NoTls).unwrap();
    let at: i64 = db
        .query_one(
            "SELECT at FROM vak_replay WHERE key = $1",
            &[&claim.digest()],
        )
        .unwrap()
        .get(0);
    assert_eq!(at, claimed, "the marker's time is carried over");
    let again = vak_gateway::import_file(&env.home, &target).unwrap();
    assert_eq!(
        (again.sessions, again.already_there, again.events),
        (0, 3, 0)
    );
    assert_eq!(
        (again.bindings, again.replay_markers),
        (0, 0),
        "a repeat copies nothing and says so"
    );
    // A node on the database moves the chat on to a session of its own:
    // importing the file store again never rolls it back.
    let pg = vak_store_pg::PgStore::open(&target).unwrap();
    let own = vak_gateway::new_session(&pg, &core, None).unwrap();
    let moved_on = |to: &str| {
        let mut db = postgres::Client::connect(&target, postgres::NoTls).unwrap();
        db.execute(
            "UPDATE vak_bindings SET session_id = $1 WHERE bot = 'helpdesk' AND chat = '42'",
            &[&to],
        )
        .unwrap();
    };
    moved_on(own.id.as_str());
    let refused = vak_gateway::import_file(&env.home, &target).unwrap_err();
    assert!(refused.to_string().contains("bindings differ"), "{refused}");
    assert_eq!(
        pg.bindings().unwrap()[0].2.session_id,
        own.id,
        "left as the database had it"
    );
    // The file store moving a chat on since the last import is followed:
    // the database's binding is a session the file store holds.
    moved_on(rotated.session.as_str());
    // (A project's file: the home's are the store's since the import.)
    std::fs::create_dir_all(env.project.join(".vak/prompts")).unwrap();
    std::fs::write(
        env.project.join(".vak/prompts/guardrails.md"),
        "- Changed again before the cut-over.\n",
    )
    .unwrap();
    let rotated = deliver_to(&env, &*files, "42", "three again");
    assert!(matches!(rotated.outcome, DeliveryOutcome::Rotated { .. }));
    let followed = vak_gateway::import_file(&env.home, &target).unwrap();
    assert_eq!((followed.sessions, followed.bindings), (1, 1));
    assert_eq!(pg.bindings().unwrap()[0].2.session_id, rotated.session);

    for id in [&rotated.session, &named.id] {
        assert_eq!(
            vak_gateway::ledger_digest(&pg.read(id).unwrap()).unwrap(),
            vak_gateway::ledger_digest(&files.read(id).unwrap()).unwrap()
        );
    }
    assert_eq!(pg.bindings().unwrap()[0].2.session_id, rotated.session);
    // The moved chat continues on PostgreSQL.
    let next = deliver_to(&env, &pg, "42", "four");
    assert_eq!(next.outcome, DeliveryOutcome::Continued);
    assert_eq!(next.session, rotated.session);
    let retried = deliver_signed(&env, &pg, "42", "retried", &killed).unwrap();
    assert_eq!(retried.outcome, DeliveryOutcome::Continued);
}

/// A file home with two sessions and one `config-change` event, for the
/// import tests.
fn rotated_file_env() -> Env {
    let env = Env::new(Backend::File).unwrap();
    let files = env.store();
    deliver_to(&env, &*files, "42", "one");
    env.edit_prompt("Changed before the move.");
    let rotated = deliver_to(&env, &*files, "42", "two").outcome;
    assert!(
        matches!(rotated, DeliveryOutcome::Rotated { .. }),
        "{rotated:?}"
    );
    env
}

fn count(db: &mut postgres::Client, table: &str) -> i64 {
    db.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .unwrap()
        .get(0)
}

/// An import waits while another holds the database: nothing of it is
/// written until the other is done, so two never interleave.
#[test]
fn an_import_waits_for_the_one_already_running() {
    let Some(url) = crate::common::pg_url() else {
        return;
    };
    let env = rotated_file_env();
    let target = crate::common::scratch_database(&url);
    let other = vak_store_pg::PgStore::connect(&target)
        .unwrap()
        .lock_import()
        .unwrap();
    let importer = {
        let (home, target) = (env.home.clone(), target.clone());
        std::thread::spawn(move || vak_gateway::import_file(&home, &target))
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut db = postgres::Client::connect(&target, postgres::NoTls).unwrap();
    assert!(!importer.is_finished(), "the import waits");
    assert_eq!(count(&mut db, "vak_sessions"), 0, "and has written nothing");
    drop(other);
    let imported = importer.join().unwrap().unwrap();
    assert_eq!((imported.sessions, imported.events), (2, 1));
    assert_eq!(count(&mut db, "vak_audit"), 1);
}

/// The audit events are checked and appended in one transaction: a node
/// that writes an event of its own after the import's first check (here a
/// trigger, firing as the sessions are copied) gets none of the file's
/// events put beside it; the import is refused.
#[test]
fn audit_events_are_checked_and_appended_in_one_transaction() {
    let Some(url) = crate::common::pg_url() else {
        return;
    };
    let env = rotated_file_env();
    let file_event = env.store().audit_newest(10).unwrap().events;
    let SecurityEvent::ConfigChange(change) = &file_event[0] else {
        panic!("{file_event:?}")
    };
    let theirs = SecurityEvent::ConfigChange(vak_core::prompts::ConfigChange {
        chat: "99".to_owned(),
        ..change.clone()
    });
    let theirs = serde_json::to_string(&theirs).unwrap().replace('\'', "''");
    let target = crate::common::scratch_database(&url);
    let mut db = postgres::Client::connect(&target, postgres::NoTls).unwrap();
    db.batch_execute(&format!(
        "CREATE FUNCTION node_delivers() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO vak_audit (event) VALUES ('{theirs}'); RETURN NULL; END $$;
         CREATE TRIGGER node_delivers AFTER INSERT ON vak_sessions
         FOR EACH STATEMENT EXECUTE FUNCTION node_delivers();"
    ))
    .unwrap();
    let refused = vak_gateway::import_file(&env.home, &target).unwrap_err();
    assert!(
        matches!(refused, LifecycleError::ImportMismatch { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("audit events"), "{refused}");
    let ours = serde_json::to_string(&file_event[0]).unwrap();
    let copied: i64 = db
        .query_one("SELECT count(*) FROM vak_audit WHERE event = $1", &[&ours])
        .unwrap()
        .get(0);
    assert_eq!(copied, 0, "none of the file's events went in");
}

/// A turn whose replay marker is lost (removed by hand, or never written by
/// an older build that wrote it after the turn and was killed in between):
/// the retry finds the turn by its delivery at the end of the chat's
/// session and is refused as a replay: nothing appended twice, and the
/// marker written then.
#[test]
fn a_delivery_whose_marker_a_crash_lost_is_still_refused_once_retried() {
    let env = Env::new(Backend::File).unwrap();
    let store = env.store();
    let marker = |claim: &Claim<'_>| marker_file(&env.home, &claim.digest());
    let first_claim = Claim {
        key: "v2=created",
        at: crate::common::now(),
        window_secs: 300,
    };
    let next_claim = Claim {
        key: "v2=continued",
        ..first_claim
    };
    for (claim, text, turns) in [(first_claim, "one", 1), (next_claim, "two", 2)] {
        let delivered = deliver_signed(&env, &*store, "42", text, &claim).unwrap();
        std::fs::remove_file(marker(&claim).expect("written")).expect("the crash: no marker");
        let retried = deliver_signed(&env, &*store, "42", text, &claim).unwrap_err();
        assert!(
            matches!(retried, LifecycleError::Store(SessionError::Replayed)),
            "{retried}"
        );
        assert!(
            marker(&claim).is_some(),
            "the marker is written by the retry"
        );
        let ledger = store.read(&delivered.session).unwrap();
        assert_eq!(ledger.turns().count(), turns, "recorded once");
    }
}

/// A session for chat 42 frozen on the prompt that resolves now, as a
/// delivery killed part-way leaves one, and its fingerprint.
fn session_left_by_a_crash(env: &Env, store: &dyn Store) -> (SessionId, String) {
    let selectors = env.selectors("helpdesk", "42");
    let resolved = vak_core::InboundPrompts::open(selectors.clone())
        .unwrap()
        .resolve()
        .unwrap();
    let id = store
        .create(meta_for(&selectors), vak_gateway::freeze(&resolved, None))
        .unwrap();
    (id, resolved.fingerprint.clone())
}

/// What a rotation of chat 42 away from `old` killed after its
/// `config-change` event leaves: the new session and its event, the binding
/// not moved.
fn rotation_left_by_a_crash(env: &Env, store: &dyn Store, old: &SessionId) -> SessionId {
    use vak_core::prompts::{AuditLog, ConfigChange, now_rfc3339};
    let (orphan, fingerprint) = session_left_by_a_crash(env, store);
    let old_fingerprint = store.read(old).unwrap().contract().fingerprint.clone();
    AuditLog::new(&env.home)
        .append(&SecurityEvent::ConfigChange(ConfigChange {
            at: now_rfc3339(),
            bot: "helpdesk".to_owned(),
            chat: "42".to_owned(),
            old_session: old.clone(),
            new_session: orphan.clone(),
            old_fingerprint: Some(old_fingerprint),
            new_fingerprint: Some(fingerprint),
            changes: Vec::new(),
        }))
        .unwrap();
    orphan
}

/// A chat's first delivery killed after binding its new session and before
/// appending the turn: the retry continues that session and records the
/// turn there, once.
#[test]
fn a_first_delivery_killed_before_its_turn_is_recorded_once_by_the_retry() {
    use vak_core::prompts::BindingStore;
    let env = Env::new(Backend::File).unwrap();
    let store = env.store();
    let claim = Claim {
        key: "v2=first",
        at: crate::common::now(),
        window_secs: 300,
    };
    let (created, _) = session_left_by_a_crash(&env, &*store);
    let mut bindings = BindingStore::new(&env.home).lock().unwrap();
    bindings.bind(
        &Name::new(NameKind::Bot, "helpdesk").unwrap(),
        &Name::new(NameKind::Chat, "42").unwrap(),
        created.clone(),
    );
    bindings.commit().unwrap();

    let retried = deliver_signed(&env, &*store, "42", "one", &claim).unwrap();
    assert_eq!(retried.session, created);
    assert_eq!(store.list_newest(10).unwrap().1, 1, "no second session");
    let ledger = store.read(&created).unwrap();
    assert_eq!(ledger.turns().count(), 1);
    assert!(ledger.has_delivery(&claim.digest()));
    let replayed = deliver_signed(&env, &*store, "42", "one", &claim).unwrap_err();
    assert!(matches!(
        replayed,
        LifecycleError::Store(SessionError::Replayed)
    ));
}

/// A rotation a crash interrupted after it appended its turn (new session,
/// event and turn written; binding and marker not: what a build that
/// appended the turn before binding could leave): the retry finishes the
/// binding, appends nothing, and is refused as a replay.
#[test]
fn a_rotation_interrupted_after_its_turn_is_finished_and_refused_as_a_replay() {
    use vak_core::prompts::Turn;
    let env = Env::new(Backend::File).unwrap();
    let store = env.store();
    let first = deliver_to(&env, &*store, "42", "one");
    env.edit_prompt("Changed, then the process died after the turn.");
    let claim = Claim {
        key: "v2=rotating",
        at: crate::common::now(),
        window_secs: 300,
    };
    let orphan = rotation_left_by_a_crash(&env, &*store, &first.session);
    let mut turn = Turn::now("two", "");
    turn.delivery = Some(claim.digest());
    store.append(&orphan, &Record::Turn(turn)).unwrap();

    let retried = deliver_signed(&env, &*store, "42", "two", &claim).unwrap_err();
    assert!(
        matches!(retried, LifecycleError::Store(SessionError::Replayed)),
        "{retried}"
    );
    assert_eq!(store.bindings().unwrap()[0].2.session_id, orphan);
    assert_eq!(store.read(&orphan).unwrap().turns().count(), 1);
    assert_eq!(config_changes(&*store).len(), 1, "one config-change event");
    let next = deliver_to(&env, &*store, "42", "three");
    assert_eq!(next.outcome, DeliveryOutcome::Continued);
    assert_eq!(next.session, orphan);
}

/// A file-store rotation a crash interrupted after its `config-change`
/// event (the new ledger and event written, the binding not moved) is
/// finished by the next delivery, not repeated.
#[test]
fn an_interrupted_rotation_is_finished_not_repeated() {
    let env = Env::new(Backend::File).unwrap();
    let store = env.store();
    let first = deliver_to(&env, &*store, "42", "one");
    env.edit_prompt("Changed, then the process died.");
    let orphan = rotation_left_by_a_crash(&env, &*store, &first.session);

    let next = deliver_to(&env, &*store, "42", "two");
    assert!(matches!(next.outcome, DeliveryOutcome::Rotated { .. }));
    assert_eq!(next.session, orphan, "the interrupted rotation is finished");
    assert_eq!(config_changes(&*store).len(), 1, "one config-change event");
    assert_eq!(store.bindings().unwrap()[0].2.session_id, orphan);
    assert_eq!(
        deliver_to(&env, &*store, "42", "three").outcome,
        DeliveryOutcome::Continued
    );
}

fn the_tail_sees_the_first_and_last_turns(env: &Env) {
    let store = env.store();
    for text in ["the build is red", "which job?", "the deploy job"] {
        deliver_to(env, &*store, "42", text);
    }
    let next = deliver_to(env, &*store, "42", "fixed?");
    let tail = &next.request.tail;
    assert!(tail.contains("the build is red"), "{tail}");
    assert!(
        tail.contains("3 earlier turns; the last was: the deploy job"),
        "{tail}"
    );
}

/// The service's path: deliveries resolve through one `vak_core::PromptCache`
/// (the gateway has no cache of its own). What a delivery writes (replay
/// marker, chat lock, binding, session, audit) does not invalidate it; an
/// edit to a layer does, and the very next delivery rotates.
fn a_cached_delivery_stays_cached_until_an_edit(env: &Env) {
    let store = env.store();
    let cache = vak_core::PromptCache::within_window();
    let mut signed = 0;
    let mut send = |chat: &str, text: &str| {
        signed += 1;
        let key = format!("v2={signed}");
        let claim = Claim {
            key: &key,
            at: crate::common::now(),
            window_secs: 300,
        };
        let selectors = env.selectors("helpdesk", chat);
        let meta = meta_for(&selectors);
        let prompts = vak_core::InboundPrompts::open(selectors).unwrap();
        deliver_cached(&*store, &prompts, &meta, text, Some(&cache), Some(&claim)).unwrap()
    };
    let first = send("42", "one");
    assert_eq!(first.outcome, DeliveryOutcome::Created);
    assert_eq!(send("42", "two").outcome, DeliveryOutcome::Continued);
    assert_eq!(
        cache.counts(),
        (1, 1),
        "the delivery's own writes do not count"
    );
    env.edit_prompt("Edited while cached.");
    let third = send("42", "three");
    assert!(
        matches!(third.outcome, DeliveryOutcome::Rotated { .. }),
        "{:?}",
        third.outcome
    );
    assert_eq!(send("42", "four").outcome, DeliveryOutcome::Continued);
    // Composed twice: once at the start, once after the edit. PostgreSQL
    // plans a rotation twice, both from memory: first from the chat's last
    // turn as the store remembers it (not a continuation, so not written
    // from), then under the lock.
    let (hits, misses) = cache.counts();
    assert_eq!(misses, 2);
    assert!((2..=3).contains(&hits), "{hits}");
    assert!(cache.is_watching());
}

/// The file store writes a signature's marker, naming the chat (and the
/// session), before the delivery's turn. A delivery killed after it and before its
/// turn: the sender's retry to that chat is recorded, once; the same
/// request sent to another chat is a replay, crash or no crash.
#[test]
fn a_marker_names_its_chat_so_a_killed_delivery_is_retried_there_and_nowhere_else() {
    let env = Env::new(Backend::File).unwrap();
    env.allow("helpdesk", &["43".to_owned()]);
    let store = env.store();
    let claim = Claim {
        key: "v2=killed",
        at: crate::common::now(),
        window_secs: 300,
    };
    let marker = env.home.join(".vak/gateway/replay").join(claim.digest());
    // What the kill leaves: the marker, and nothing else.
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    std::fs::write(&marker, "helpdesk/42\n").unwrap();
    let other = deliver_signed(&env, &*store, "43", "one", &claim).unwrap_err();
    assert!(
        matches!(other, LifecycleError::Store(SessionError::Replayed)),
        "{other}"
    );
    let retried = deliver_signed(&env, &*store, "42", "one", &claim).expect("the retry");
    assert_eq!(retried.outcome, DeliveryOutcome::Created);
    for chat in ["42", "43"] {
        let again = deliver_signed(&env, &*store, chat, "one", &claim).unwrap_err();
        assert!(
            matches!(again, LifecycleError::Store(SessionError::Replayed)),
            "{chat}: {again}"
        );
    }
    assert_eq!(store.read(&retried.session).unwrap().turns().count(), 1);
    assert_eq!(store.bindings().unwrap().len(), 1, "nothing for chat 43");
    // The retry committed: the marker now says so, and refuses every
    // later claim itself (even once the chat has rotated).
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        format!("helpdesk/42\nsession {}\ncommitted\n", retried.session)
    );

    // An empty marker (an older build created the file before writing it,
    // and a kill cut it short) proves nothing: the chat's session decides,
    // and it has no such turn, so the retry is delivered, once.
    let old = Claim {
        key: "v2=old-build",
        ..claim
    };
    std::fs::write(env.home.join(".vak/gateway/replay").join(old.digest()), "").unwrap();
    let delivered = deliver_signed(&env, &*store, "42", "two", &old).expect("delivered");
    assert_eq!(delivered.outcome, DeliveryOutcome::Continued);
    for chat in ["42", "43"] {
        let refused = deliver_signed(&env, &*store, chat, "two", &old).unwrap_err();
        assert!(
            matches!(refused, LifecycleError::Store(SessionError::Replayed)),
            "{chat}: {refused}"
        );
    }
    // One whose turn is in the chat's session is refused there.
    let found = Claim {
        key: "v2=found",
        ..claim
    };
    deliver_signed(&env, &*store, "42", "three", &found).expect("delivered");
    std::fs::write(
        marker_file(&env.home, &found.digest()).expect("written"),
        "",
    )
    .unwrap();
    let refused = deliver_signed(&env, &*store, "42", "three", &found).unwrap_err();
    assert!(
        matches!(refused, LifecycleError::Store(SessionError::Replayed)),
        "{refused}"
    );
    assert_eq!(
        store.read(&retried.session).unwrap().turns().count(),
        3,
        "one, two, three: each once"
    );
}

/// A claim dated anywhere (the edges of `i64`, now − 2^63, far ahead, the
/// two ends of the window) is still refused as a replay after the store
/// forgets old claims, to another chat too: pruning goes by the store's
/// clock, and a claim is
/// never forgotten while its request could still be in the window.
fn a_claim_is_kept_while_its_request_is_in_the_window_whatever_its_time(env: &Env) {
    let store = env.store();
    // Replayed to another chat, whose session's ledger never saw it: only
    // the claim can refuse it there.
    env.allow("helpdesk", &["43".to_owned()]);
    let now = crate::common::now();
    let times = [
        now + i64::MIN,
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        now - (1 << 62),
        now + (1 << 62),
        now - 1_000_000,
        now - 301,
        now - 300,
        now - 299,
        now + 299,
        now + 300,
        now + 301,
    ];
    let keys: Vec<String> = times.iter().map(|at| format!("v2=dated-{at}")).collect();
    for (at, key) in times.iter().zip(&keys) {
        let claim = Claim {
            key,
            at: *at,
            window_secs: 300,
        };
        deliver_signed(env, &*store, "42", key, &claim).expect("a first claim is delivered");
    }
    store.prune_claims(300).unwrap();
    for (at, key) in times.iter().zip(&keys) {
        let claim = Claim {
            key,
            at: *at,
            window_secs: 300,
        };
        let again = deliver_signed(env, &*store, "43", key, &claim);
        assert!(
            matches!(again, Err(LifecycleError::Store(SessionError::Replayed))),
            "the claim dated {at} was forgotten: {:?}",
            again.map(|d| d.outcome)
        );
    }
}

/// A chat bound to a session whose ledger is gone is bound to a fresh
/// session, with a warning naming both, and one `rebound` audit event
/// written with the delivery.
fn a_chat_whose_ledger_is_gone_is_rebound_with_a_warning_and_an_event(env: &Env) {
    let store = env.store();
    let first = deliver_to(env, &*store, "42", "first");
    let gone = first.session.clone();
    match &env.url {
        None => std::fs::remove_file(env.home.join(format!(".vak/sessions/{gone}.jsonl"))).unwrap(),
        Some(url) => {
            let url = url.split('?').next().unwrap();
            let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
            db.execute(
                "DELETE FROM vak_records WHERE session_id = $1",
                &[&gone.as_str()],
            )
            .unwrap();
            db.execute("DELETE FROM vak_sessions WHERE id = $1", &[&gone.as_str()])
                .unwrap();
        }
    }
    let second = deliver_to(env, &*store, "42", "second");
    assert_eq!(
        second.outcome,
        DeliveryOutcome::Rebound { gone: gone.clone() }
    );
    assert!(
        second
            .warnings
            .iter()
            .any(|w| w.contains(gone.as_str()) && w.contains("helpdesk/42")),
        "{:?}",
        second.warnings
    );
    let rebounds: Vec<_> = store
        .audit_newest(100)
        .unwrap()
        .events
        .into_iter()
        .filter_map(|e| match e {
            SecurityEvent::Rebound(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(rebounds.len(), 1, "{rebounds:?}");
    assert_eq!(rebounds[0].gone_session, gone);
    assert_eq!(rebounds[0].new_session, second.session);
    assert_eq!(
        (rebounds[0].bot.as_str(), rebounds[0].chat.as_str()),
        ("helpdesk", "42")
    );
}

/// Where the file store keeps the marker of the signature whose digest is
/// `digest`: in whichever bucket of `gateway/claims/` it was filed, or
/// where an older build kept it.
fn marker_file(home: &camino::Utf8Path, digest: &str) -> Option<camino::Utf8PathBuf> {
    let legacy = home.join(".vak/gateway/replay").join(digest);
    if legacy.exists() {
        return Some(legacy);
    }
    let claims = home.join(".vak/gateway/claims");
    std::fs::read_dir(&claims)
        .ok()?
        .flatten()
        .find_map(|bucket| {
            let path = claims.join(bucket.file_name().to_str()?).join(digest);
            path.exists().then_some(path)
        })
}
