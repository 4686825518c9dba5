//! Ledger durability under crashes and concurrent writers.
//!
//! The writer processes are this test binary itself, re-run with
//! `--ignored --exact child_writer` and an environment that tells it what to
//! write, so there is one test crate and no helper binary.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed setup step should stop it loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, RandomState};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use camino::Utf8PathBuf;
use vak_prompt_blocks::{Block, Provenance};
use vak_session::{
    FrozenContract, PromptLayerDescriptor, Record, SessionId, SessionMeta, Turn, fingerprint,
};
use vak_store_file::SessionStore;

const DIR: &str = "VAK_TEST_CHILD_DIR";
const ID: &str = "VAK_TEST_CHILD_ID";
const TAG: &str = "VAK_TEST_CHILD_TAG";
const COUNT: &str = "VAK_TEST_CHILD_COUNT";

/// The message of record `i` by writer `tag`: its length varies up to
/// ~256 KiB so some appends take several write calls' worth of time and a
/// kill can land mid-line.
fn message(tag: &str, i: usize) -> String {
    let pad = (i * 7919 + tag.len() * 104_729) % 262_144;
    format!("{tag}:{i}:{}", "x".repeat(pad))
}

/// Check a message is exactly what `message` wrote, and return (tag, i).
fn parse_message(text: &str) -> (String, usize) {
    let mut parts = text.splitn(3, ':');
    let tag = parts.next().expect("tag").to_owned();
    let i: usize = parts.next().expect("index").parse().expect("numeric index");
    assert_eq!(text, message(&tag, i), "record {tag}:{i} is not intact");
    (tag, i)
}

fn store() -> (tempfile::TempDir, SessionStore, SessionId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Utf8PathBuf::from_path_buf(dir.path().to_path_buf()).expect("utf-8 temp dir");
    let store = SessionStore::at(root);
    let layers = vec![PromptLayerDescriptor::of(
        Block::Identity,
        &Provenance::seed("identity"),
        "You are Vak.",
    )];
    let contract = FrozenContract {
        fingerprint: fingerprint(&layers),
        prompt_layers: layers,
        prefix: "You are Vak.".into(),
        ..FrozenContract::default()
    };
    let id = store.create(SessionMeta::now(), contract).expect("create");
    (dir, store, id)
}

fn child(store: &SessionStore, id: &SessionId, tag: &str, count: Option<usize>) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args([
        "--ignored",
        "--exact",
        "child_writer",
        "--nocapture",
        "--test-threads=1",
        "--quiet",
    ])
    .env(DIR, store.dir().as_str())
    .env(ID, id.as_str())
    .env(TAG, tag)
    .env(
        COUNT,
        count.map_or_else(|| "unbounded".to_owned(), |n| n.to_string()),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    cmd
}

/// Lines `written <tag>:<i>` a child printed, each only after its append
/// (and fsync) returned.
fn reported(stdout: impl std::io::Read) -> Vec<String> {
    BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("written ").map(str::to_owned))
        .collect()
}

fn random_below(n: u64) -> u64 {
    RandomState::new().hash_one(Instant::now()) % n
}

#[test]
#[ignore = "entry point of the writer processes the other tests start"]
fn child_writer() {
    let (Ok(dir), Ok(id), Ok(tag), Ok(count)) = (
        std::env::var(DIR),
        std::env::var(ID),
        std::env::var(TAG),
        std::env::var(COUNT),
    ) else {
        panic!("child_writer runs only as a child of the crash and concurrency tests");
    };
    let store = SessionStore::at(dir);
    let id = SessionId::parse(&id).expect("valid id");
    let limit = count.parse::<usize>().unwrap_or(usize::MAX);
    let mut out = std::io::stdout().lock();
    for i in 0..limit {
        let turn = Turn::now(message(&tag, i), "tail");
        store.append(&id, &Record::Turn(turn)).expect("append");
        writeln!(out, "written {tag}:{i}").expect("stdout");
        out.flush().expect("flush");
    }
}

#[test]
fn sigkilled_writers_lose_no_reported_record() {
    let (_dir, store, id) = store();
    let started = Instant::now();
    let mut promised: BTreeSet<String> = BTreeSet::new();
    let mut torn_seen = 0;
    let kills = 50;
    for run in 0..kills {
        let tag = format!("run{run}");
        let mut proc = child(&store, &id, &tag, None)
            .spawn()
            .expect("spawn writer");
        let stdout = proc.stdout.take().expect("piped stdout");
        let reader = std::thread::spawn(move || reported(stdout));
        std::thread::sleep(Duration::from_millis(15 + random_below(60)));
        proc.kill().expect("SIGKILL the writer");
        proc.wait().expect("reap the writer");
        promised.extend(reader.join().expect("reader thread"));

        let ledger = store
            .read(&id)
            .expect("the ledger still reads after a kill");
        torn_seen += ledger.warnings.len();
        let present: BTreeSet<String> = ledger
            .turns()
            .map(|t| {
                let (tag, i) = parse_message(&t.message);
                format!("{tag}:{i}")
            })
            .collect();
        let lost: Vec<_> = promised.difference(&present).collect();
        assert!(
            lost.is_empty(),
            "after kill {run}, records reported as written are gone: {lost:?}"
        );
    }
    assert!(
        !promised.is_empty(),
        "the writers never got to write anything"
    );
    eprintln!(
        "{kills} kills in {:?}: {} records reported written, {torn_seen} torn tails seen and skipped",
        started.elapsed(),
        promised.len()
    );
}

#[test]
fn concurrent_writer_processes_neither_interleave_nor_lose() {
    let (_dir, store, id) = store();
    let (writers, each) = (4, 25);
    let procs: Vec<_> = (0..writers)
        .map(|w| {
            child(&store, &id, &format!("p{w}"), Some(each))
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut promised = Vec::new();
    for mut proc in procs {
        let stdout = proc.stdout.take().expect("piped stdout");
        promised.extend(reported(stdout));
        assert!(proc.wait().expect("wait").success(), "a writer failed");
    }
    assert_eq!(promised.len(), writers * each);
    check_every_writer(&store, &id, writers, each);
}

#[test]
fn concurrent_writer_threads_neither_interleave_nor_lose() {
    let (_dir, store, id) = store();
    let (writers, each) = (8, 40);
    std::thread::scope(|scope| {
        for w in 0..writers {
            let dir = store.dir().to_owned();
            let id = id.clone();
            scope.spawn(move || {
                // A store per thread: separate opens, as separate processes do.
                let store = SessionStore::at(dir);
                let tag = format!("t{w}");
                for i in 0..each {
                    store
                        .append(&id, &Record::Turn(Turn::now(message(&tag, i), "")))
                        .expect("append");
                }
            });
        }
    });
    check_every_writer(&store, &id, writers, each);
}

/// Every writer's records are all there, intact, each writer's in order.
fn check_every_writer(store: &SessionStore, id: &SessionId, writers: usize, each: usize) {
    let ledger = store.read(id).expect("read");
    assert!(ledger.warnings.is_empty(), "{:?}", ledger.warnings);
    let mut by_writer: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for turn in ledger.turns() {
        let (tag, i) = parse_message(&turn.message);
        by_writer.entry(tag).or_default().push(i);
    }
    assert_eq!(by_writer.len(), writers);
    for (tag, seen) in by_writer {
        assert_eq!(seen, (0..each).collect::<Vec<_>>(), "writer {tag}");
    }
    // One JSON object per line and nothing else.
    let text = std::fs::read_to_string(store.path_of(id)).expect("read");
    assert_eq!(text.lines().count(), writers * each + 1);
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("every line is one whole record");
    }
}
