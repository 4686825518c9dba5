//! The budget on a home side shared by several nodes: a save's budget check
//! and its write are one compare-and-swap against the store's home
//! generation, so a save another node overtook between the two is checked
//! again, never written on a check of a state that is gone. Two nodes (two
//! homes) share an in-memory home side; the other node's save is made to
//! land exactly between this node's check and its write, so the race is
//! deterministic.

use std::fs;
use std::sync::{Arc, Mutex};

use camino::Utf8PathBuf;
use vak_core::history::{Action, Who};
use vak_core::home::{HomeError, SAVE_ATTEMPTS};
use vak_core::prompts::{Block, sha256_hex};
use vak_core::{Core, EditError, EditTarget, Scope, Selectors, SubLayer, Unchecked};
use vak_session::{
    AuditEntries, Binding, Bound, ChatPlan, Claim, Committed, Expect, FrozenContract, Header,
    History, HomeFile, HomeSnapshot, HomeStore, Ledger, Record, SessionError, SessionId,
    SessionMeta, Store, Swapped,
};
use vak_store_file::FileStore;

const CAP: usize = 1500;
const RULES: &str = ".vak/prompts/operating-rules.md";
const GUARDRAILS: &str = ".vak/prompts/guardrails.md";

/// A write another node commits: a path and its text.
type Commit = (String, String);

/// The home side in memory, as the PostgreSQL store keeps it: every change
/// a compare-and-swap that bumps the generation. `race` is what other
/// nodes commit just before each of the next writes reaches the store (one
/// entry per write; `forever` commits one before every write).
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<HomeSnapshot>,
    race: Mutex<Vec<Commit>>,
    forever: Mutex<Option<Commit>>,
}

impl Shared {
    fn new() -> Arc<Self> {
        let shared = Shared::default();
        shared.state.lock().unwrap().generation = 1;
        Arc::new(shared)
    }

    fn commit(state: &mut HomeSnapshot, path: &str, text: Option<&str>) {
        state.files.retain(|f| f.path != path);
        if let Some(text) = text {
            state.files.push(HomeFile {
                path: path.to_owned(),
                text: text.to_owned(),
                sha256: sha256_hex(text),
                by: "other node".to_owned(),
                at: String::new(),
            });
            state.files.sort_by(|a, b| a.path.cmp(&b.path));
        }
        state.generation += 1;
    }

    fn text(&self, path: &str) -> Option<String> {
        let state = self.state.lock().unwrap();
        state
            .files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.text.clone())
    }

    fn generation(&self) -> i64 {
        self.state.lock().unwrap().generation
    }

    /// The other nodes' writes due now, then this one.
    fn swap(&self, path: &str, text: Option<&str>, expect: &Expect, at: Option<i64>) -> Swapped {
        let mut state = self.state.lock().unwrap();
        let due = {
            let mut race = self.race.lock().unwrap();
            (!race.is_empty()).then(|| race.remove(0))
        };
        for (p, t) in due.into_iter().chain(self.forever.lock().unwrap().clone()) {
            Shared::commit(&mut state, &p, Some(&t));
        }
        if let Some(at) = at
            && at != state.generation
        {
            return Swapped::Moved(state.generation);
        }
        let now = state
            .files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.sha256.clone());
        let matches = match expect {
            Expect::Absent => now.is_none(),
            Expect::Digest(d) => now.as_deref() == Some(d.as_str()),
        };
        if !matches {
            return Swapped::Conflict(now);
        }
        Shared::commit(&mut state, path, text);
        Swapped::Done(state.generation)
    }
}

impl HomeStore for Shared {
    fn home_generation(&self) -> Result<i64, SessionError> {
        Ok(self.generation())
    }
    fn home_snapshot(&self) -> Result<HomeSnapshot, SessionError> {
        Ok(self.state.lock().unwrap().clone())
    }
    fn home_put(
        &self,
        path: &str,
        text: &str,
        expect: &Expect,
        at: Option<i64>,
        _by: &str,
    ) -> Result<Swapped, SessionError> {
        Ok(self.swap(path, Some(text), expect, at))
    }
    fn home_remove(
        &self,
        path: &str,
        expect: &Expect,
        at: Option<i64>,
        _by: &str,
    ) -> Result<Swapped, SessionError> {
        Ok(self.swap(path, None, expect, at))
    }
    fn bot_secret(&self, _: &str) -> Result<Option<String>, SessionError> {
        Ok(None)
    }
    fn bot_secret_create(&self, _: &str, secret: &str) -> Result<String, SessionError> {
        Ok(secret.to_owned())
    }
}

/// One node: its own home's file store, the shared home side.
#[derive(Debug)]
struct Node {
    files: FileStore,
    shared: Arc<Shared>,
}

impl Store for Node {
    fn describe(&self) -> String {
        "the shared test store".to_owned()
    }
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn history(&self) -> &dyn History {
        self.files.history()
    }
    fn create(
        &self,
        meta: SessionMeta,
        contract: FrozenContract,
    ) -> Result<SessionId, SessionError> {
        self.files.create(meta, contract)
    }
    fn append(&self, id: &SessionId, record: &Record) -> Result<(), SessionError> {
        self.files.append(id, record)
    }
    fn read(&self, id: &SessionId) -> Result<Ledger, SessionError> {
        self.files.read(id)
    }
    fn read_header(&self, id: &SessionId) -> Result<Header, SessionError> {
        self.files.read_header(id)
    }
    fn list_newest(&self, limit: usize) -> Result<(Vec<SessionId>, usize), SessionError> {
        self.files.list_newest(limit)
    }
    fn audit_newest(&self, limit: usize) -> Result<AuditEntries, SessionError> {
        self.files.audit_newest(limit)
    }
    fn bindings(&self) -> Result<Vec<(String, String, Binding)>, SessionError> {
        self.files.bindings()
    }
    fn deliver_at(
        &self,
        bot: &vak_core::prompts::Name,
        chat: &vak_core::prompts::Name,
        home_generation: Option<i64>,
        claim: Option<&Claim<'_>>,
        plan: &mut dyn FnMut(&Bound) -> Option<ChatPlan>,
    ) -> Result<Option<Committed>, SessionError> {
        self.files
            .deliver_at(bot, chat, home_generation, claim, plan)
    }
    fn prune_claims(&self, window_secs: i64) -> Result<(), SessionError> {
        self.files.prune_claims(window_secs)
    }
    fn home(&self) -> Option<&dyn HomeStore> {
        Some(&*self.shared)
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    shared: Arc<Shared>,
    homes: [Utf8PathBuf; 2],
    project: Utf8PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let homes = [root.join("node1"), root.join("node2")];
    for home in &homes {
        fs::create_dir_all(home.join(".vak")).unwrap();
    }
    // The cap is in the shared config, which the store carries to every
    // node: imported from node 1, synced to node 2 (empty) on its first
    // change.
    fs::write(
        homes[0].join(".vak/config.toml"),
        format!("[prompts]\nmax_tokens = {CAP}\n"),
    )
    .unwrap();
    let shared = Shared::new();
    vak_core::home::import_home(&homes[0], &*shared, "the shared test store", "test").unwrap();
    let project = root.join("project");
    fs::create_dir_all(&project).unwrap();
    Fixture {
        _dir: dir,
        shared,
        homes,
        project,
    }
}

impl Fixture {
    fn core(&self, node: usize) -> Core {
        let home = &self.homes[node];
        let store = Node {
            files: FileStore::new(home),
            shared: self.shared.clone(),
        };
        Core::open(Selectors::new(home.clone(), self.project.clone()))
            .unwrap()
            .with_store(Arc::new(store))
    }
}

fn shared(block: Block) -> EditTarget {
    EditTarget::new(Scope::Shared, SubLayer::Base, block).unwrap()
}

/// `n` distinct bullet lines.
fn bullets(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- {tag} rule {i}: answer in plain words.\n"))
        .collect()
}

/// How many lines each of the two texts gets so that either alone fits the
/// cap and both together do not: measured on node 1's chain (a block's
/// text may replace the built-in one or add to it), not guessed, so a
/// change in the built-in prompt does not quietly make the test vacuous.
fn sized(f: &Fixture, block: Block, share: usize) -> usize {
    let core = f.core(0);
    let base = prefix_tokens(&core);
    let delta = |n: usize| {
        core.preview(&shared(block), Some(&bullets("X", n)))
            .unwrap()
            .budget
            .report
            .prefix_tokens as i64
            - base as i64
    };
    let (d10, d20) = (delta(10), delta(20));
    let per_line = (d20 - d10) / 10;
    let fixed = d10 - 10 * per_line;
    let want = ((CAP - base) * share / 100) as i64;
    usize::try_from((want - fixed) / per_line.max(1)).unwrap()
}

/// Node 1's text (operating rules) and node 2's (guardrails), each taking
/// `share` percent of the room under the cap.
fn texts(f: &Fixture, share: usize) -> (String, String) {
    (
        bullets("A", sized(f, Block::OperatingRules, share)),
        bullets("B", sized(f, Block::Guardrails, share)),
    )
}

fn save(
    core: &Core,
    block: Block,
    text: &str,
    unchecked: Unchecked,
) -> Result<vak_core::Saved, EditError> {
    core.save_block_by(
        &shared(block),
        text,
        None,
        &Who::OsUser,
        Action::Save,
        unchecked,
    )
}

fn prefix_tokens(core: &Core) -> usize {
    core.budget().unwrap().1.report.prefix_tokens
}

#[test]
fn a_save_overtaken_by_another_nodes_save_between_its_check_and_its_write_is_refused_over_the_cap()
{
    let f = fixture();
    let (a, b) = texts(&f, 70);
    let (node1, node2) = (f.core(0), f.core(1));
    // Either alone fits; together they do not.
    let alone = |block, text: &str| {
        node1
            .preview(&shared(block), Some(text))
            .unwrap()
            .budget
            .report
            .prefix_tokens
    };
    assert!(alone(Block::OperatingRules, &a) <= CAP);
    assert!(alone(Block::Guardrails, &b) <= CAP);
    // Node 2 checks B against the home side it synced; node 1's save of A
    // commits before node 2's write reaches the store.
    f.shared
        .race
        .lock()
        .unwrap()
        .push((RULES.to_owned(), a.clone()));
    let error = save(&node2, Block::Guardrails, &b, Unchecked::Refuse).unwrap_err();
    assert!(matches!(error, EditError::OverBudget { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("guardrails.md"), "{message}");
    assert_eq!(f.shared.text(GUARDRAILS), None, "B never reached the store");
    assert_eq!(f.shared.text(RULES).as_deref(), Some(a.as_str()));
    // Both nodes resolve A alone, within the cap; A and B together
    // would not have been.
    for core in [&node1, &node2] {
        vak_core::home::sync_if_shared(&core.selectors().home, &**core.store(), false).unwrap();
        assert!(prefix_tokens(core) <= CAP, "{}", prefix_tokens(core));
    }
    let both = node1.preview(&shared(Block::Guardrails), Some(&b)).unwrap();
    assert!(both.budget.report.prefix_tokens > CAP);
    assert!(!f.homes[1].join(GUARDRAILS).exists());
}

#[test]
fn an_overtaken_save_that_still_fits_is_written_after_a_second_check() {
    let f = fixture();
    let (a, b) = texts(&f, 30);
    let node2 = f.core(1);
    f.shared
        .race
        .lock()
        .unwrap()
        .push((RULES.to_owned(), a.clone()));
    let saved = save(&node2, Block::Guardrails, &b, Unchecked::Refuse).unwrap();
    assert!(!saved.over_cap);
    assert_eq!(f.shared.text(RULES).as_deref(), Some(a.as_str()));
    assert_eq!(f.shared.text(GUARDRAILS).as_deref(), Some(b.as_str()));
    assert_eq!(
        fs::read_to_string(f.homes[1].join(GUARDRAILS)).unwrap(),
        b,
        "the replica follows"
    );
    // The preview the save answers is of the state it was written on.
    assert!(saved.preview.after.prefix.contains("A rule 0"));
}

#[test]
fn over_budget_still_proceeds_when_overtaken_and_says_it_went_over() {
    let f = fixture();
    let (a, b) = texts(&f, 70);
    let node2 = f.core(1);
    f.shared
        .race
        .lock()
        .unwrap()
        .push((RULES.to_owned(), a.clone()));
    let saved = save(&node2, Block::Guardrails, &b, Unchecked::Accept).unwrap();
    assert!(saved.over_cap, "recorded as made over the cap");
    assert_eq!(f.shared.text(GUARDRAILS).as_deref(), Some(b.as_str()));
}

#[test]
fn a_home_side_that_keeps_moving_refuses_the_save_after_a_few_attempts() {
    let f = fixture();
    let node2 = f.core(1);
    *f.shared.forever.lock().unwrap() = Some((
        ".vak/prompts/identity.md".to_owned(),
        "You are busy.\n".to_owned(),
    ));
    let before = f.shared.generation();
    let error = save(&node2, Block::Guardrails, "- short\n", Unchecked::Refuse).unwrap_err();
    assert!(
        matches!(error, EditError::Home(HomeError::KeptMoving { .. })),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains("other nodes"), "{message}");
    assert!(message.contains("Try the change again"), "{message}");
    assert_eq!(f.shared.text(GUARDRAILS), None, "nothing written");
    // Each attempt was checked again and met one more change.
    let attempts = f.shared.generation() - before;
    assert_eq!(attempts, i64::try_from(SAVE_ATTEMPTS).unwrap());
}

#[test]
fn a_gateway_edit_overtaken_by_another_nodes_save_is_refused_over_the_cap() {
    use vak_core::prompts::{Name, NameKind};
    use vak_core::{GatewayChange, GatewayChangeError, GatewayKey};
    let f = fixture();
    let (a, b) = texts(&f, 70);
    // The bot exists on the home side, so a bot's chain is budgeted.
    f.shared.race.lock().unwrap().clear();
    {
        let mut state = f.shared.state.lock().unwrap();
        Shared::commit(
            &mut state,
            ".vak/gateway/bots.json",
            Some(r#"{"helpdesk": {"prompts": {"identity": "You are the helpdesk."}}}"#),
        );
    }
    let node2 = f.core(1);
    vak_core::home::sync_if_shared(&f.homes[1], &**node2.store(), false).unwrap();
    f.shared
        .race
        .lock()
        .unwrap()
        .push((RULES.to_owned(), a.clone()));
    let key = GatewayKey {
        bot: Name::new(NameKind::Bot, "helpdesk").unwrap(),
        chat: None,
        block: Block::Guardrails,
    };
    let who = Who::OsUser;
    let error = node2
        .change_gateway_key(
            &key,
            GatewayChange {
                text: Some(&b),
                if_digest: vak_core::prompts::ABSENT_DIGEST,
                create_entry: false,
                unchecked: Unchecked::Refuse,
                who: &who,
                action: Action::Save,
            },
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            GatewayChangeError::Edit(EditError::OverBudget { .. })
        ),
        "{error}"
    );
    let bots = f.shared.text(".vak/gateway/bots.json").unwrap();
    assert!(!bots.contains("B rule"), "{bots}");
}
