//! The house's rules that a test can hold, as tests (`cargo test -p
//! xtask`, so the README's test command runs them): the crates depend on
//! each other one way, in the order below; no process-wide cache holds
//! loaded data; no provenance string is parsed back; the CLI and the admin
//! spell out no JSON document they both answer. Where the code does
//! not meet a rule yet, the exception is listed here with why, and the test
//! fails when an exception is no longer needed, so the lists only shrink.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root")
            .to_owned()
    }

    /// The workspace's crates, lowest first: each may depend only on crates
    /// before it (dev-dependencies are free).
    const LAYERS: [&str; 14] = [
        "vak-prompt-blocks",
        "vak-fs",
        "vak-prompt-loader",
        "vak-prompt-trust",
        "vak-prompt-history",
        "vak-session",
        "vak-prompt-compose",
        "vak-prompt-budget",
        "vak-prompt-drift",
        "vak-store-pg",
        "vak-core",
        "vak-admin",
        "vak-gateway",
        "vak-cli",
    ];

    /// Crates that compute and hold no store: they may not depend on the
    /// session store, PostgreSQL, or the version history.
    const PURE: [&str; 6] = [
        "vak-prompt-blocks",
        "vak-fs",
        "vak-prompt-loader",
        "vak-prompt-compose",
        "vak-prompt-budget",
        "vak-prompt-drift",
    ];
    const STORES: [&str; 3] = ["vak-session", "vak-store-pg", "vak-prompt-history"];

    /// Known exceptions to `PURE`, each to go: none today (the frozen
    /// contract's types moved from `vak-session` to the blocks crate).
    const PURE_DEBT: [(&str, &str); 0] = [];

    /// The `vak-*` crates `crate` lists under `[dependencies]`.
    fn dependencies(name: &str) -> Vec<String> {
        let path = root().join("crates").join(name).join("Cargo.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut inside = false;
        let mut out = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                inside = line == "[dependencies]";
                continue;
            }
            if inside
                && let Some(dep) = line.split(['=', ' ', '.']).next()
                && dep.starts_with("vak-")
            {
                out.push(dep.to_owned());
            }
        }
        out
    }

    #[test]
    fn every_crate_has_its_place_in_the_layers() {
        let mut crates: Vec<String> = std::fs::read_dir(root().join("crates"))
            .expect("crates/")
            .flatten()
            .filter(|e| e.path().join("Cargo.toml").is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        crates.sort();
        let mut listed: Vec<String> = LAYERS.iter().map(|c| (*c).to_owned()).collect();
        listed.sort();
        assert_eq!(
            crates, listed,
            "a crate was added or removed: place it in LAYERS"
        );
    }

    #[test]
    fn dependencies_point_one_way() {
        for (at, name) in LAYERS.iter().enumerate() {
            for dep in dependencies(name) {
                let Some(below) = LAYERS.iter().position(|c| *c == dep) else {
                    panic!("{name} depends on {dep}, which LAYERS does not list");
                };
                assert!(
                    below < at,
                    "{name} depends on {dep}, which is not below it: dependencies point one way (LAYERS)"
                );
            }
        }
    }

    #[test]
    fn pure_crates_hold_no_store() {
        let mut debt_seen = Vec::new();
        for name in PURE {
            for dep in dependencies(name) {
                if !STORES.contains(&dep.as_str()) {
                    continue;
                }
                let known = PURE_DEBT
                    .iter()
                    .any(|(from, to)| *from == name && *to == dep);
                assert!(known, "{name} depends on the store crate {dep}");
                debt_seen.push((name, dep));
            }
        }
        for (from, to) in PURE_DEBT {
            assert!(
                debt_seen.iter().any(|(f, t)| *f == from && t == to),
                "{from} no longer depends on {to}: take it off PURE_DEBT"
            );
        }
    }

    /// Every `.rs` file under `crates/*/src`.
    fn sources() -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        for krate in std::fs::read_dir(root().join("crates"))
            .expect("crates/")
            .flatten()
        {
            walk(&krate.path().join("src"), &mut out);
        }
        out.sort();
        out
    }

    /// The lines of the sources matching `is_hit`, as `path:line`
    /// relative to the root.
    fn hits(is_hit: impl Fn(&str) -> bool) -> Vec<String> {
        let root = root();
        let mut out = Vec::new();
        for path in sources() {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines() {
                if is_hit(line) {
                    let rel = path.strip_prefix(&root).unwrap_or(&path);
                    out.push(format!("{}: {}", rel.display(), line.trim()));
                }
            }
        }
        out
    }

    /// Whether `line` declares a static that can hold loaded data.
    fn holds_loaded_data(line: &str) -> bool {
        let line = line.trim_start();
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        line.starts_with("static ")
            && ["Mutex<", "RwLock<", "OnceLock<HashMap", "OnceLock<Vec"]
                .iter()
                .any(|kind| line.contains(kind))
    }

    /// Process-wide caches still here, and why: none (the gateway files'
    /// indexes are kept by the prompt cache or the snapshot that read them).
    const CACHE_DEBT: [&str; 0] = [];

    #[test]
    fn no_process_wide_cache_holds_loaded_data() {
        let found = hits(holds_loaded_data);
        for hit in &found {
            assert!(
                CACHE_DEBT.iter().any(|file| hit.starts_with(file)),
                "a process-wide cache of loaded data: {hit}; keep it in the snapshot or the handle that loaded it"
            );
        }
        for file in CACHE_DEBT {
            assert!(
                found.iter().any(|hit| hit.starts_with(file)),
                "{file} holds no process-wide cache any more: take it off CACHE_DEBT"
            );
        }
    }

    /// Provenance parsed back from a string, and why it is still here:
    /// none today.
    const PARSING_DEBT: [&str; 0] = [];

    #[test]
    fn no_provenance_string_is_parsed_back() {
        let found = hits(|line| line.contains("rsplit_once('#')"));
        for hit in &found {
            assert!(
                PARSING_DEBT.iter().any(|file| hit.starts_with(file)),
                "a provenance string parsed back: {hit}; carry the typed source instead"
            );
        }
        for file in PARSING_DEBT {
            assert!(
                found.iter().any(|hit| hit.starts_with(file)),
                "{file} parses no provenance string any more: take it off PARSING_DEBT"
            );
        }
    }

    /// ARCHITECTURE.md's most lines: a map a newcomer reads in one sitting;
    /// how a crate works inside goes in that crate's README.
    const MAP_MAX_LINES: usize = 250;

    fn map() -> String {
        let path = root().join("ARCHITECTURE.md");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    #[test]
    fn the_architecture_is_a_map() {
        let map = map();
        let lines = map.lines().count();
        assert!(
            lines <= MAP_MAX_LINES,
            "ARCHITECTURE.md has {lines} lines, over {MAP_MAX_LINES}: move how a crate works inside to its README"
        );
        for name in LAYERS {
            let readme = format!("crates/{name}/README.md");
            assert!(
                root().join(&readme).is_file(),
                "{readme} is missing: each crate says how it works inside"
            );
            assert!(
                map.contains(&format!("({readme})")),
                "ARCHITECTURE.md does not link {readme}"
            );
        }
    }

    /// The map's dependency block: one line per crate, `name : deps`, with
    /// the `vak-prompt-`/`vak-` prefixes dropped from the dependencies.
    fn graph_in_map(map: &str) -> Vec<(String, Vec<String>)> {
        let start = map
            .find("## The graph")
            .expect("ARCHITECTURE.md has `## The graph`");
        let block = &map[start..];
        let open = block.find("```text\n").expect("the graph is a text block") + 8;
        let close = block[open..].find("```").expect("the graph block closes") + open;
        block[open..close]
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(name, deps)| {
                let mut deps: Vec<String> = deps.split_whitespace().map(str::to_owned).collect();
                deps.sort();
                (name.trim().to_owned(), deps)
            })
            .collect()
    }

    fn short(name: &str) -> String {
        name.trim_start_matches("vak-prompt-")
            .trim_start_matches("vak-")
            .to_owned()
    }

    #[test]
    fn the_map_lists_the_real_graph() {
        let listed = graph_in_map(&map());
        let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, LAYERS, "the map lists the crates in LAYERS order");
        for (name, deps) in listed {
            let mut real: Vec<String> = dependencies(&name).iter().map(|d| short(d)).collect();
            real.sort();
            assert_eq!(
                deps, real,
                "ARCHITECTURE.md's graph line for {name} is not its Cargo.toml"
            );
        }
    }

    /// The crates and directories that call the facade.
    const FACADE_CALLERS: [&str; 6] = [
        "crates/vak-cli",
        "crates/vak-admin",
        "crates/vak-gateway",
        "crates/vak-core/tests",
        "crates/vak-core/benches",
        "xtask/src",
    ];

    /// Writers a caller may not reach through the facade: a prompt layer
    /// changes only through vak-core's saves.
    const WRITERS: [&str; 5] = [
        "save_atomic",
        "remove_checked",
        "write_gateway_prompt",
        "create_dirs",
        "create_parent_confined",
    ];

    /// The names `vak_core::prompts` re-exports.
    fn facade_names() -> Vec<String> {
        let path = root().join("crates/vak-core/src/lib.rs");
        let text = std::fs::read_to_string(&path).expect("vak-core's lib.rs");
        let start = text.find("pub mod prompts {").expect("the facade module");
        let end = text[start..].find("\n}\n").expect("the facade closes") + start;
        let mut names = Vec::new();
        for group in text[start..end].split("pub use ").skip(1) {
            let Some(open) = group.find('{') else {
                continue;
            };
            let close = group.find('}').expect("a closed group");
            names.extend(
                group[open + 1..close]
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned),
            );
        }
        names
    }

    fn rust_under(dir: &Path, out: &mut String) {
        let Ok(listing) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in listing.flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_under(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                out.push('\n');
            }
        }
    }

    fn is_word_in(word: &str, text: &str) -> bool {
        text.match_indices(word).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !part(before) && !part(after)
        })
    }

    #[test]
    fn the_facade_exports_what_callers_use_and_no_writer() {
        let mut callers = String::new();
        for dir in FACADE_CALLERS {
            rust_under(&root().join(dir), &mut callers);
        }
        let names = facade_names();
        assert!(names.len() > 20, "the facade was read: {names:?}");
        for name in &names {
            assert!(
                !WRITERS.contains(&name.as_str()),
                "vak_core::prompts re-exports the writer {name}: callers change prompts through vak-core"
            );
            assert!(
                is_word_in(name, &callers),
                "vak_core::prompts re-exports {name}, which no caller uses: drop it"
            );
        }
    }

    /// The `json!` sites left in the two front ends, per file. Each builds
    /// a document only one of them answers (a CLI-only command's result,
    /// an admin-only view, an error envelope); a document both answer is a
    /// type in `vak_core::output` that both serialise. The counts only fall.
    const FRONT_END_JSON: [(&str, usize); 9] = [
        // `prompts check` and `check --all`: the terminal's only.
        ("crates/vak-cli/src/edit.rs", 2),
        // The session diff's envelope and a scoped rule's change; each
        // text change in it is `TextChangeReport`.
        ("crates/vak-cli/src/history.rs", 2),
        // An imported file's save: the terminal's only.
        ("crates/vak-cli/src/imported.rs", 1),
        // `trust --list`, `trust`, and `untrust` with each path it
        // untrusted.
        ("crates/vak-cli/src/prompts.rs", 4),
        // A rule's save: the terminal's only.
        ("crates/vak-cli/src/rules.rs", 1),
        // `session new|show|list`: the terminal's only.
        ("crates/vak-cli/src/session.rs", 5),
        // `store migrate|import`: the terminal's only.
        ("crates/vak-cli/src/store.rs", 3),
        // The page's views (layers, live count, managed, permissions),
        // a rotation's envelope and an unchecked change's 422.
        ("crates/vak-admin/src/api.rs", 17),
        // The gateway views and a gateway key's change: the page's only.
        ("crates/vak-admin/src/gateway.rs", 6),
    ];

    /// Keys only `vak_core::output`'s documents carry: a front end that
    /// spells one out is writing a shared document a second time.
    const OUTPUT_KEYS: [&str; 3] = [
        "\"frozen_source\":",
        "\"config_keys\":",
        "\"current_digest\":",
    ];

    #[test]
    fn the_front_ends_spell_out_no_document_they_share() {
        for krate in ["crates/vak-cli/src", "crates/vak-admin/src"] {
            let mut files = Vec::new();
            let listing = std::fs::read_dir(root().join(krate)).expect("a front end's sources");
            for entry in listing.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
            for path in files {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let rel = path.strip_prefix(root()).unwrap_or(&path);
                let rel = rel.to_string_lossy();
                let sites = text.matches("json!(").count();
                let allowed = FRONT_END_JSON
                    .iter()
                    .find(|(file, _)| *file == rel)
                    .map_or(0, |(_, n)| *n);
                assert!(
                    sites <= allowed,
                    "{rel} has {sites} `json!` documents, {allowed} allowed: a document the CLI and the admin both answer is a type in vak_core::output"
                );
                assert!(
                    sites == allowed,
                    "{rel} has {sites} `json!` documents now: lower its count in FRONT_END_JSON to {sites}"
                );
                for key in OUTPUT_KEYS {
                    assert!(
                        !text.contains(key),
                        "{rel} spells out {key}, a key of a vak_core::output document: serialise the type"
                    );
                }
            }
        }
        for (file, _) in FRONT_END_JSON {
            assert!(
                root().join(file).exists(),
                "{file} is gone: take it off FRONT_END_JSON"
            );
        }
    }

    #[test]
    fn the_rules_see_what_they_look_for() {
        assert!(holds_loaded_data(
            "    static REMEMBERED: Mutex<Remembered> = Mutex::new(Vec::new());"
        ));
        assert!(!holds_loaded_data(
            "static CLAIMS: std::sync::atomic::AtomicU64 = AtomicU64::new(0);"
        ));
        assert!(!holds_loaded_data(
            "    static TYPE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b\"x\"));"
        ));
    }
}
