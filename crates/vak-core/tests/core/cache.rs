//! `CachedResolver` never serves stale text: every way a layer can change
//! is seen by the next `resolve`, and nothing changing is answered from
//! memory (the same `Arc`).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use vak_core::prompts::{ResolvedPrompt, TrustStore};
use vak_core::{CachedResolver, Core, Selectors};

struct Fixture {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    prompts: CachedResolver,
}

fn fixture() -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    fs::create_dir_all(home.path().join(".vak/prompts")).unwrap();
    fs::write(
        home.path().join(".vak/prompts/identity.md"),
        "You are AAAA.",
    )
    .unwrap();
    let selectors = Selectors::new(
        home.path().to_str().unwrap(),
        project.path().to_str().unwrap(),
    );
    let prompts = CachedResolver::open(selectors).unwrap();
    Fixture {
        home,
        project,
        prompts,
    }
}

impl Fixture {
    fn shared(&self, file: &str) -> std::path::PathBuf {
        self.home.path().join(".vak/prompts").join(file)
    }

    /// Resolve twice: the second answer must come from memory.
    fn resolve(&self) -> Arc<ResolvedPrompt> {
        let first = self.prompts.resolve().unwrap();
        let again = self.prompts.resolve().unwrap();
        assert!(self.prompts.is_watching(), "inotify is available here");
        assert!(Arc::ptr_eq(&first, &again), "nothing changed: from memory");
        first
    }

    fn sees(&self, text: &str) {
        let prompt = self.resolve();
        assert!(
            prompt.prefix.contains(text),
            "{text:?} not in\n{}",
            prompt.prefix
        );
    }

    fn does_not_see(&self, text: &str) {
        let prompt = self.resolve();
        assert!(
            !prompt.prefix.contains(text),
            "{text:?} still in the prefix"
        );
    }
}

fn set_mtime(path: &Path, to: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(to)
        .unwrap();
}

#[test]
fn nothing_changed_is_answered_from_memory_and_state_files_do_not_count() {
    let f = fixture();
    let first = f.resolve();
    // The stores vak writes beside the prompt files are not prompt input.
    fs::create_dir_all(f.home.path().join(".vak/gateway")).unwrap();
    let again = f.prompts.resolve().unwrap(); // the directory appearing counts
    fs::write(f.home.path().join(".vak/gateway/bindings.json"), "{}").unwrap();
    fs::write(f.home.path().join(".vak/trust.toml.lock"), "").unwrap();
    let after = f.prompts.resolve().unwrap();
    assert!(Arc::ptr_eq(&again, &after));
    assert_eq!(first.prefix, after.prefix);
}

#[test]
fn an_edit_of_the_same_size_within_one_clock_tick_is_seen() {
    let f = fixture();
    f.sees("You are AAAA.");
    let before = fs::metadata(f.shared("identity.md"))
        .unwrap()
        .modified()
        .unwrap();
    fs::write(f.shared("identity.md"), "You are BBBB.").unwrap();
    f.sees("You are BBBB.");
    // Same size, and the mtime put back: only the ctime (and the event) says so.
    fs::write(f.shared("identity.md"), "You are CCCC.").unwrap();
    set_mtime(&f.shared("identity.md"), before);
    f.sees("You are CCCC.");
}

#[test]
fn a_touch_keeping_the_mtime_is_seen() {
    let f = fixture();
    f.sees("You are AAAA.");
    let path = f.shared("identity.md");
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    // Content replaced in place, same size, then the mtime restored exactly.
    fs::write(&path, "You are DDDD.").unwrap();
    set_mtime(&path, mtime);
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    f.sees("You are DDDD.");
    // A bare touch to the same mtime (ctime changes, content does not).
    set_mtime(&path, mtime);
    f.sees("You are DDDD.");
}

#[test]
fn renames_are_seen() {
    let f = fixture();
    f.sees("You are AAAA.");
    // Moved away: the shared identity is gone.
    fs::rename(f.shared("identity.md"), f.home.path().join("elsewhere.md")).unwrap();
    f.does_not_see("You are AAAA.");
    // Another file renamed onto the name (an editor's atomic save).
    fs::write(f.shared(".identity.md.swp"), "You are EEEE.").unwrap();
    fs::rename(f.shared(".identity.md.swp"), f.shared("identity.md")).unwrap();
    f.sees("You are EEEE.");
}

#[test]
fn a_symlink_swap_and_an_edit_through_a_symlink_are_seen() {
    let f = fixture();
    // Outside `.vak` (still inside the home): watched because a read file is there.
    let targets = f.home.path().join("targets");
    fs::create_dir_all(&targets).unwrap();
    fs::write(targets.join("a.md"), "You are FFFF.").unwrap();
    fs::write(targets.join("b.md"), "You are GGGG.").unwrap();
    fs::remove_file(f.shared("identity.md")).unwrap();
    symlink(targets.join("a.md"), f.shared("identity.md")).unwrap();
    f.sees("You are FFFF.");
    // Swap the link atomically to the other target.
    symlink(targets.join("b.md"), f.shared("identity.md.new")).unwrap();
    fs::rename(f.shared("identity.md.new"), f.shared("identity.md")).unwrap();
    f.sees("You are GGGG.");
    // Edit the target the link leads to.
    fs::write(targets.join("b.md"), "You are HHHH.").unwrap();
    f.sees("You are HHHH.");
}

#[test]
fn a_layer_file_appearing_where_none_was_is_seen() {
    let f = fixture();
    f.sees("You are AAAA.");
    // The project has no `.vak` at all yet; an untrusted project may still
    // add guardrails.
    let dir = f.project.path().join(".vak/prompts/surface/cli");
    fs::create_dir_all(&dir).unwrap();
    f.does_not_see("never deploy on fridays");
    fs::write(dir.join("guardrails.md"), "- never deploy on fridays\n").unwrap();
    f.sees("never deploy on fridays");
    // And a file in a directory that already existed.
    fs::write(f.shared("operating-rules.md"), "- Read IIII first.\n").unwrap();
    f.sees("Read IIII first.");
}

#[test]
fn trusting_the_project_is_seen() {
    let f = fixture();
    let dir = f.project.path().join(".vak/prompts");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("identity.md"), "You are the JJJJ project agent.").unwrap();
    f.does_not_see("JJJJ");
    let mut store = TrustStore::load(f.home.path().to_str().unwrap().into()).unwrap();
    store
        .trust(f.project.path().to_str().unwrap().into())
        .unwrap();
    f.sees("JJJJ");
}

#[test]
fn a_replaced_parent_directory_is_seen() {
    let parent = tempfile::tempdir().unwrap();
    let home = parent.path().join("home");
    let project = tempfile::tempdir().unwrap();
    fs::create_dir_all(home.join(".vak/prompts")).unwrap();
    fs::write(home.join(".vak/prompts/identity.md"), "You are KKKK.").unwrap();
    let prompts = CachedResolver::open(Selectors::new(
        home.to_str().unwrap(),
        project.path().to_str().unwrap(),
    ))
    .unwrap();
    assert!(prompts.resolve().unwrap().prefix.contains("KKKK"));
    // The home is renamed away and another put in its place.
    fs::rename(&home, parent.path().join("old-home")).unwrap();
    fs::create_dir_all(home.join(".vak/prompts")).unwrap();
    fs::write(home.join(".vak/prompts/identity.md"), "You are LLLL.").unwrap();
    std::thread::sleep(Duration::from_millis(1));
    assert!(prompts.resolve().unwrap().prefix.contains("LLLL"));
}

#[test]
fn an_edit_through_another_hard_link_is_seen() {
    let f = fixture();
    let elsewhere = f.home.path().join("drafts");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::hard_link(f.shared("identity.md"), elsewhere.join("identity.md")).unwrap();
    f.sees("You are AAAA.");
    // Written in place through the other name: the same inode changes.
    fs::write(elsewhere.join("identity.md"), "You are MMMM.").unwrap();
    f.sees("You are MMMM.");
}

#[test]
fn a_skill_named_like_a_store_is_seen() {
    let f = fixture();
    let core = vak_core::Core::open(Selectors::new(
        f.home.path().to_str().unwrap(),
        f.project.path().to_str().unwrap(),
    ))
    .unwrap();
    let before = f.resolve();
    for name in ["sessions", "audit", "bindings.json"] {
        let dir = f.home.path().join(".vak/skills").join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("SKILL.md"),
            format!("---\ndescription: the {name} NNNN skill\n---\nbody\n"),
        )
        .unwrap();
        let cached = f.prompts.resolve().unwrap();
        assert_eq!(cached.prefix, core.resolve().unwrap().prefix, "{name}");
    }
    assert_ne!(before.prefix, f.resolve().prefix);
}

mod random_changes {
    //! Property: after any sequence of changes to the layer files, the
    //! cached resolution equals a fresh, uncached one.

    use super::*;
    use proptest::prelude::*;
    use vak_core::Core;

    const FILES: [&str; 4] = [
        ".vak/prompts/identity.md",
        ".vak/prompts/guardrails.md",
        ".vak/prompts/surface/cli/surface-note.md",
        ".vak/prompts/surface/cli/guardrails.md",
    ];

    #[derive(Debug, Clone)]
    enum Op {
        /// Write `text` to file `i` of the home (`true`) or the project.
        Write(bool, usize, String),
        Remove(bool, usize),
        /// Rename file `i` onto file `j` (same origin).
        Rename(bool, usize, usize),
        /// Replace file `i` by a symlink to a fresh file holding `text`.
        Link(bool, usize, String),
        /// Rewrite file `i` in place (same size) and restore its mtime.
        SameMtime(bool, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let text = "[a-z]{1,6}".prop_map(|w| format!("- rule {w}\n"));
        prop_oneof![
            (any::<bool>(), 0..4usize, text.clone()).prop_map(|(h, i, t)| Op::Write(h, i, t)),
            (any::<bool>(), 0..4usize).prop_map(|(h, i)| Op::Remove(h, i)),
            (any::<bool>(), 0..4usize, 0..4usize).prop_map(|(h, i, j)| Op::Rename(h, i, j)),
            (any::<bool>(), 0..4usize, text).prop_map(|(h, i, t)| Op::Link(h, i, t)),
            (any::<bool>(), 0..4usize).prop_map(|(h, i)| Op::SameMtime(h, i)),
        ]
    }

    fn apply(root: &Path, op: &Op, n: usize) {
        let file = |i: usize| root.join(FILES[i]);
        match op {
            Op::Write(_, i, text) => {
                fs::create_dir_all(file(*i).parent().unwrap()).unwrap();
                let _ = fs::remove_file(file(*i)); // not through a link
                fs::write(file(*i), text).unwrap();
            }
            Op::Remove(_, i) => {
                let _ = fs::remove_file(file(*i));
            }
            Op::Rename(_, i, j) => {
                if i != j && fs::symlink_metadata(file(*i)).is_ok() {
                    fs::create_dir_all(file(*j).parent().unwrap()).unwrap();
                    fs::rename(file(*i), file(*j)).unwrap();
                }
            }
            Op::Link(_, i, text) => {
                let target = root.join(format!("targets/t{n}.md"));
                fs::create_dir_all(target.parent().unwrap()).unwrap();
                fs::write(&target, text).unwrap();
                fs::create_dir_all(file(*i).parent().unwrap()).unwrap();
                let tmp = file(*i).with_extension("tmp-link");
                symlink(&target, &tmp).unwrap();
                fs::rename(&tmp, file(*i)).unwrap();
            }
            Op::SameMtime(_, i) => {
                if let Ok(meta) = fs::metadata(file(*i)) {
                    let old = fs::read(file(*i)).unwrap();
                    let flipped: Vec<u8> = old
                        .iter()
                        .map(|b| {
                            if b.is_ascii_lowercase() {
                                b'a' + (b - b'a' + 1) % 26
                            } else {
                                *b
                            }
                        })
                        .collect();
                    fs::write(file(*i), flipped).unwrap();
                    set_mtime(&file(*i), meta.modified().unwrap());
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn cached_equals_fresh_after_any_changes(ops in proptest::collection::vec(op(), 1..12)) {
            let f = fixture();
            let mut store = TrustStore::load(f.home.path().to_str().unwrap().into()).unwrap();
            store.trust(f.project.path().to_str().unwrap().into()).unwrap();
            let core = Core::open(Selectors::new(
                f.home.path().to_str().unwrap(),
                f.project.path().to_str().unwrap(),
            ))
            .unwrap();
            f.prompts.resolve().unwrap();
            for (n, op) in ops.iter().enumerate() {
                let (Op::Write(home, ..) | Op::Remove(home, _) | Op::Rename(home, ..)
                | Op::Link(home, ..) | Op::SameMtime(home, _)) = op;
                let root = if *home { f.home.path() } else { f.project.path() };
                apply(root, op, n);
                let cached = f.prompts.resolve().unwrap();
                let fresh = core.resolve().unwrap();
                prop_assert_eq!(&cached.prefix, &fresh.prefix, "after {:?}", op);
                prop_assert_eq!(&cached.fingerprint, &fresh.fingerprint);
            }
        }

        /// The gateway's shape: one cache for several selectors of one
        /// home and project, each miss loading from what earlier misses
        /// read. After any change each answer is still a fresh read's.
        #[test]
        fn a_shared_cache_of_several_selectors_equals_fresh_after_any_changes(
            ops in proptest::collection::vec(op(), 1..10),
            order in proptest::collection::vec(0..3usize, 3..6),
        ) {
            use vak_core::prompts::SurfaceKind;
            let f = fixture();
            let mut store = TrustStore::load(f.home.path().to_str().unwrap().into()).unwrap();
            store.trust(f.project.path().to_str().unwrap().into()).unwrap();
            let base = Selectors::new(
                f.home.path().to_str().unwrap(),
                f.project.path().to_str().unwrap(),
            );
            let selectors = [
                base.clone(),
                Selectors { surface: SurfaceKind::Chat, ..base.clone() },
                Selectors { force_untrusted: true, ..base },
            ];
            let cache = vak_core::PromptCache::new();
            let handles: Vec<_> = selectors
                .iter()
                .map(|s| vak_core::InboundPrompts::open(s.clone()).unwrap())
                .collect();
            let fresh: Vec<_> = selectors.iter().map(|s| Core::open(s.clone()).unwrap()).collect();
            for (n, op) in ops.iter().enumerate() {
                let (Op::Write(home, ..) | Op::Remove(home, _) | Op::Rename(home, ..)
                | Op::Link(home, ..) | Op::SameMtime(home, _)) = op;
                let root = if *home { f.home.path() } else { f.project.path() };
                apply(root, op, n);
                for &i in &order {
                    let cached = cache.resolve(&handles[i]).unwrap();
                    let fresh = fresh[i].resolve().unwrap();
                    prop_assert_eq!(&cached.prefix, &fresh.prefix, "selectors {} after {:?}", i, op);
                    prop_assert_eq!(&cached.fingerprint, &fresh.fingerprint);
                }
            }
        }
    }
}

#[test]
fn a_directory_layer_or_agents_md_appearing_below_the_root_is_seen() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let workdir = project.path().join("services/payments/src");
    fs::create_dir_all(&workdir).unwrap();
    TrustStore::load(&camino::Utf8PathBuf::from(home.path().to_str().unwrap()))
        .unwrap()
        .trust(&camino::Utf8PathBuf::from(project.path().to_str().unwrap()))
        .unwrap();
    let mut selectors = Selectors::new(
        home.path().to_str().unwrap(),
        project.path().to_str().unwrap(),
    );
    selectors.workdir = Some(workdir.to_str().unwrap().into());
    let prompts = CachedResolver::open(selectors).unwrap();
    let first = prompts.resolve().unwrap();
    assert!(Arc::ptr_eq(&first, &prompts.resolve().unwrap()));
    // A level's interop file, then a level's own guardrails directory.
    fs::write(
        project.path().join("services/payments/AGENTS.md"),
        "Run make check before committing PPPP.\n",
    )
    .unwrap();
    let prompt = prompts.resolve().unwrap();
    assert!(prompt.prefix.contains("PPPP"), "{}", prompt.prefix);
    fs::create_dir_all(project.path().join("services/.vak/prompts")).unwrap();
    fs::write(
        project.path().join("services/.vak/prompts/guardrails.md"),
        "- never touch the ledger QQQQ\n",
    )
    .unwrap();
    let prompt = prompts.resolve().unwrap();
    assert!(prompt.prefix.contains("QQQQ"), "{}", prompt.prefix);
}

mod shared_cache {
    //! One `PromptCache` for many selectors (the gateway service's shape):
    //! one watch for all of them, any change drops every entry.

    use super::*;
    use vak_core::prompts::{Name, NameKind, SurfaceKind};
    use vak_core::{InboundPrompts, PromptCache};

    fn bots_json(home: &Path, alpha: &str, beta: &str) {
        fs::create_dir_all(home.join(".vak/gateway")).unwrap();
        let doc = serde_json::json!({
            "alpha": {"prompts": {"identity": alpha}},
            "beta": {"prompts": {"identity": beta}},
        });
        fs::write(home.join(".vak/gateway/bots.json"), doc.to_string()).unwrap();
    }

    fn bot(home: &Path, project: &Path, bot: &str) -> InboundPrompts {
        InboundPrompts::open(Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(Name::new(NameKind::Bot, bot).unwrap()),
            chat: Some(Name::new(NameKind::Chat, "7").unwrap()),
            ..Selectors::new(home.to_str().unwrap(), project.to_str().unwrap())
        })
        .unwrap()
    }

    #[test]
    fn two_bots_share_one_cache_and_an_edit_to_one_key_refreshes_both() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        bots_json(home.path(), "You are ALPHA-1.", "You are BETA-1.");
        let cache = PromptCache::new();
        let alpha = bot(home.path(), project.path(), "alpha");
        let beta = bot(home.path(), project.path(), "beta");

        let a1 = cache.resolve(&alpha).unwrap();
        let b1 = cache.resolve(&beta).unwrap();
        assert!(cache.is_watching(), "inotify is available here");
        assert!(a1.prefix.contains("ALPHA-1"), "{}", a1.prefix);
        assert!(b1.prefix.contains("BETA-1"), "{}", b1.prefix);
        assert_eq!(cache.len(), 2);
        // Nothing changed: both from memory, each its own.
        assert!(Arc::ptr_eq(&a1, &cache.resolve(&alpha).unwrap()));
        assert!(Arc::ptr_eq(&b1, &cache.resolve(&beta).unwrap()));
        // A handle opened afresh for the same selectors hits the same entry.
        let again = bot(home.path(), project.path(), "alpha");
        assert!(Arc::ptr_eq(&a1, &cache.resolve(&again).unwrap()));
        assert_eq!(cache.counts(), (3, 2));

        // An edit to alpha's gateway key alone: every entry is dropped.
        bots_json(home.path(), "You are ALPHA-2.", "You are BETA-1.");
        let a2 = cache.resolve(&alpha).unwrap();
        let b2 = cache.resolve(&beta).unwrap();
        assert!(a2.prefix.contains("ALPHA-2"), "{}", a2.prefix);
        assert!(!Arc::ptr_eq(&b1, &b2), "beta was composed again");
        assert_eq!(b2.prefix, b1.prefix, "and is unchanged");
        let fresh_alpha = Core::open(alpha_selectors(home.path(), project.path())).unwrap();
        assert_eq!(a2.prefix, fresh_alpha.resolve().unwrap().prefix);
        assert_eq!(cache.counts(), (3, 4));
        // And both come from memory again.
        assert!(Arc::ptr_eq(&a2, &cache.resolve(&alpha).unwrap()));
        assert!(Arc::ptr_eq(&b2, &cache.resolve(&beta).unwrap()));
        assert_eq!(cache.counts(), (5, 4));

        // Beta's key now, from another thread's handle: both fresh again.
        bots_json(home.path(), "You are ALPHA-2.", "You are BETA-3.");
        let b3 = std::thread::scope(|s| s.spawn(|| cache.resolve(&beta).unwrap()).join().unwrap());
        assert!(b3.prefix.contains("BETA-3"), "{}", b3.prefix);
        let a3 = cache.resolve(&alpha).unwrap();
        assert!(!Arc::ptr_eq(&a2, &a3));
        assert_eq!(a3.prefix, a2.prefix);
    }

    fn alpha_selectors(home: &Path, project: &Path) -> Selectors {
        Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(Name::new(NameKind::Bot, "alpha").unwrap()),
            chat: Some(Name::new(NameKind::Chat, "7").unwrap()),
            ..Selectors::new(home.to_str().unwrap(), project.to_str().unwrap())
        }
    }

    #[test]
    fn many_chats_keep_one_watch_and_stay_fresh() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        bots_json(home.path(), "You are ALPHA-1.", "You are BETA-1.");
        let cache = PromptCache::new();
        let chats: Vec<InboundPrompts> = (0..200)
            .map(|i| {
                InboundPrompts::open(Selectors {
                    surface: SurfaceKind::Chat,
                    bot: Some(Name::new(NameKind::Bot, "alpha").unwrap()),
                    chat: Some(Name::new(NameKind::Chat, &format!("c{i}")).unwrap()),
                    ..Selectors::new(
                        home.path().to_str().unwrap(),
                        project.path().to_str().unwrap(),
                    )
                })
                .unwrap()
            })
            .collect();
        // 200 chats: more than the default 128 inotify instances per user,
        // which one `CachedResolver` per chat would need.
        let first: Vec<_> = chats.iter().map(|c| cache.resolve(c).unwrap()).collect();
        assert!(cache.is_watching());
        assert_eq!(cache.len(), 200);
        for (chat, prompt) in chats.iter().zip(&first) {
            assert!(Arc::ptr_eq(prompt, &cache.resolve(chat).unwrap()));
        }
        bots_json(home.path(), "You are ALPHA-9.", "You are BETA-1.");
        for chat in &chats {
            assert!(cache.resolve(chat).unwrap().prefix.contains("ALPHA-9"));
        }
    }

    /// A chat read after another of the same project reads only what the
    /// other did not: its layer files, configs and gateway files come from
    /// what the first miss read, and its answer is a fresh read's. An edit
    /// drops what was kept with the entries: the next chats read afresh.
    #[test]
    fn a_chat_after_another_of_the_same_project_loads_from_what_the_first_read() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        fs::create_dir_all(project.path().join(".git")).unwrap();
        bots_json(home.path(), "You are ALPHA-1.", "You are BETA-1.");
        let allowlist = serde_json::json!({
            "alpha": {"8": {"prompts": {"guardrails": "- CHAT-EIGHT rule"}}},
        });
        fs::write(
            home.path().join(".vak/gateway/allowlist.json"),
            allowlist.to_string(),
        )
        .unwrap();
        let prompts = home.path().join(".vak/prompts");
        fs::create_dir_all(prompts.join("agents/reviewer")).unwrap();
        fs::write(prompts.join("guardrails.md"), "- SHARED rule").unwrap();
        fs::write(
            prompts.join("agents/reviewer/identity.md"),
            "REVIEWER notes",
        )
        .unwrap();
        fs::create_dir_all(project.path().join(".vak/prompts")).unwrap();
        fs::write(
            project.path().join(".vak/prompts/operating-rules.md"),
            "- PROJECT rule",
        )
        .unwrap();
        let mut store = TrustStore::load(home.path().to_str().unwrap().into()).unwrap();
        store
            .trust(project.path().to_str().unwrap().into())
            .unwrap();
        let selectors = |bot: &str, chat: &str, agent: Option<&str>| Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(Name::new(NameKind::Bot, bot).unwrap()),
            chat: Some(Name::new(NameKind::Chat, chat).unwrap()),
            agent: agent.map(|a| Name::new(NameKind::Role, a).unwrap()),
            ..Selectors::new(
                home.path().to_str().unwrap(),
                project.path().to_str().unwrap(),
            )
        };
        let cache = PromptCache::new();
        let chats = [
            selectors("alpha", "7", None),
            selectors("alpha", "8", None),
            selectors("beta", "7", None),
            selectors("alpha", "9", Some("reviewer")),
        ];
        let check = |expect: &[&str]| {
            for (i, chat) in chats.iter().enumerate() {
                let got = cache
                    .resolve(&InboundPrompts::open(chat.clone()).unwrap())
                    .unwrap();
                let fresh = Core::open(chat.clone()).unwrap().resolve().unwrap();
                assert_eq!(got.prefix, fresh.prefix, "chat {i}");
                assert_eq!(got.fingerprint, fresh.fingerprint, "chat {i}");
                assert_eq!(*got.descriptors, *fresh.descriptors, "chat {i}");
                for text in expect {
                    assert!(got.prefix.contains(text), "{text} in chat {i}");
                }
            }
        };
        check(&["SHARED", "PROJECT"]);
        if !cache.is_watching() {
            return;
        }
        // The first chat read from disk; the other three from what it read
        // (the fourth adds its role's directory to what is kept).
        assert_eq!(cache.shared_loads(), 3);
        assert_eq!(cache.counts(), (0, 4));

        fs::write(prompts.join("guardrails.md"), "- EDITED rule").unwrap();
        check(&["EDITED", "PROJECT"]);
        assert_eq!(
            cache.shared_loads(),
            6,
            "the first after the edit read from disk"
        );
        assert_eq!(cache.counts(), (0, 8));
        // A working directory of its own is other roots: read from disk.
        let sub = project.path().join("sub");
        fs::create_dir_all(&sub).unwrap();
        let below = InboundPrompts::open(Selectors {
            workdir: Some(sub.to_str().unwrap().into()),
            ..chats[0].clone()
        })
        .unwrap();
        let shared_before = cache.shared_loads();
        assert!(cache.resolve(&below).unwrap().prefix.contains("EDITED"));
        assert!(cache.shared_loads() <= shared_before + 1);
    }

    /// The trust store's answer is kept with what misses read, and goes
    /// with it: a chat resolved after the project is trusted is trusted.
    #[test]
    fn trusting_the_project_between_two_chats_is_seen_by_the_second() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        fs::create_dir_all(project.path().join(".git")).unwrap();
        bots_json(home.path(), "You are ALPHA-1.", "You are BETA-1.");
        fs::create_dir_all(project.path().join(".vak/prompts")).unwrap();
        fs::write(
            project.path().join(".vak/prompts/operating-rules.md"),
            "- PROJECT rule",
        )
        .unwrap();
        let cache = PromptCache::new();
        let chat = |n: &str| Selectors {
            chat: Some(Name::new(NameKind::Chat, n).unwrap()),
            ..alpha_selectors(home.path(), project.path())
        };
        let first = cache
            .resolve(&InboundPrompts::open(chat("1")).unwrap())
            .unwrap();
        assert!(!first.prefix.contains("PROJECT"), "untrusted: demoted");
        let second = cache
            .resolve(&InboundPrompts::open(chat("2")).unwrap())
            .unwrap();
        assert!(!second.prefix.contains("PROJECT"));
        let mut store = TrustStore::load(home.path().to_str().unwrap().into()).unwrap();
        store
            .trust(project.path().to_str().unwrap().into())
            .unwrap();
        let third = cache
            .resolve(&InboundPrompts::open(chat("3")).unwrap())
            .unwrap();
        assert!(third.prefix.contains("PROJECT"), "{}", third.prefix);
        let again = cache
            .resolve(&InboundPrompts::open(chat("1")).unwrap())
            .unwrap();
        assert!(again.prefix.contains("PROJECT"));
        let fresh = Core::open(chat("1")).unwrap().resolve().unwrap();
        assert_eq!(again.prefix, fresh.prefix);
    }

    /// Past its bound the cache evicts the least recently used entry, one
    /// at a time: it never holds more than the bound (so memory is flat once
    /// it is reached) and a chat in use stays in memory.
    #[test]
    fn past_its_bound_the_least_recently_used_entry_goes() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        bots_json(home.path(), "You are ALPHA-1.", "You are BETA-1.");
        let cache = PromptCache::with_capacity(3);
        let chat = |i: usize| {
            InboundPrompts::open(Selectors {
                surface: SurfaceKind::Chat,
                bot: Some(Name::new(NameKind::Bot, "alpha").unwrap()),
                chat: Some(Name::new(NameKind::Chat, &format!("c{i}")).unwrap()),
                ..Selectors::new(
                    home.path().to_str().unwrap(),
                    project.path().to_str().unwrap(),
                )
            })
            .unwrap()
        };
        let busy = chat(0);
        let kept = cache.resolve(&busy).unwrap();
        if !cache.is_watching() {
            return;
        }
        for i in 1..50 {
            cache.resolve(&chat(i)).unwrap();
            // The busy chat is used between every new one: never evicted.
            assert!(Arc::ptr_eq(&kept, &cache.resolve(&busy).unwrap()), "{i}");
            assert!(cache.len() <= 3, "{} entries at chat {i}", cache.len());
        }
        assert_eq!(cache.len(), 3);
        // Chat 48 was used after 47 and before 49; 47 was evicted first.
        let (hits, _) = cache.counts();
        cache.resolve(&chat(49)).unwrap();
        assert_eq!(cache.counts().0, hits + 1, "the newest chat is still held");
        cache.resolve(&chat(1)).unwrap();
        assert_eq!(cache.counts().0, hits + 1, "the oldest chat was evicted");
        assert_eq!(cache.len(), 3);
    }
}
