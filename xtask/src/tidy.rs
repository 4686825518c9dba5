//! The house's rules that a test can hold, as tests (`cargo test -p
//! xtask`, so the README's test command runs them): the crates depend on
//! each other one way, in the order below; no process-wide cache holds
//! loaded data; no provenance string is parsed back; the CLI and the admin
//! spell out no JSON document they both answer; no `std::fs` outside the
//! floor and the stores. Where the code does not meet a rule yet, the
//! exception is listed here with why, and the test fails when an exception
//! is no longer needed, so the lists only shrink.
//!
//! **The floor and the stores** (`FS_OWNERS`) are the only code that names
//! the file system (`std::fs`, `fs::…`, `File::open`/`create`,
//! `OpenOptions`, `rustix::fs`, `WalkDir`, or a path method only a path has
//! that asks the disk, such as `.read_dir_utf8()` or `.canonicalize()`):
//! - `vak-fs`, the floor: the one hostile open, replace and lock, and the
//!   plain doors above it (an input file a person names, a canonical path, a
//!   directory's entries, the umask) that every crate above the loader uses;
//! - the loader's modules that read or write prompt layers: `confine.rs`
//!   (every confined open), `discover.rs` (finding the project: which
//!   directories exist, on which device), `managed.rs` (the managed
//!   directory's modes and its key pins), `rules.rs` (the project walk a
//!   scoped rule's globs are linted on), `watch.rs` (inotify), `write.rs`
//!   (the layer writer);
//! - the stores: `vak-store-file` (the session store, and the object store
//!   and version log behind `vak-prompt-history`'s interface), `vak-store-pg`,
//!   and the trust store's file (`vak-prompt-trust/src/store.rs`).
//!
//! Everything else — vak-core, the admin, the gateway, the CLI, and the
//! pure crates — reaches the file system through those owners (vak-core's
//! `files` module re-exports the floor's doors for the crates above it).
//! Tests (`#[cfg(test)]` items and the modules they declare), `tests/`,
//! `benches/` and build scripts are not scanned: only `crates/*/src`.

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
    const LAYERS: [&str; 15] = [
        "vak-prompt-blocks",
        "vak-prompt-history",
        "vak-fs",
        "vak-prompt-loader",
        "vak-prompt-trust",
        "vak-session",
        "vak-store-file",
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
    /// session store or PostgreSQL.
    const PURE: [&str; 6] = [
        "vak-prompt-blocks",
        "vak-fs",
        "vak-prompt-loader",
        "vak-prompt-compose",
        "vak-prompt-budget",
        "vak-prompt-drift",
    ];
    const STORES: [&str; 3] = ["vak-session", "vak-store-file", "vak-store-pg"];

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

    /// The contract crate's `vak-*` dependencies, and why: the contract's
    /// types (`vak-prompt-blocks`) and the `History` trait `Store::history`
    /// returns (`vak-prompt-history`, itself a contract). Storage (the
    /// floor, the loader's confinement) is the stores' own.
    const CONTRACT_DEPS: [&str; 2] = ["vak-prompt-blocks", "vak-prompt-history"];

    #[test]
    fn the_contract_crate_holds_no_storage() {
        for dep in dependencies("vak-session") {
            assert!(
                CONTRACT_DEPS.contains(&dep.as_str()),
                "vak-session depends on {dep}: the contract crate keeps types, traits and pure functions; storage goes in vak-store-file or vak-store-pg"
            );
        }
        let owners: Vec<&str> = FS_OWNERS.iter().map(|(owner, _)| *owner).collect();
        for contract in ["crates/vak-session/", "crates/vak-prompt-history/"] {
            assert!(
                !owners.iter().any(|o| o.starts_with(contract)),
                "{contract} is a file-system owner: a contract crate names no file"
            );
        }
        // Not even through a dependency: the contract's whole closure holds
        // no storage, so a store's backend can change without it.
        let mut reached = vec!["vak-session".to_owned()];
        let mut at = 0;
        while at < reached.len() {
            for dep in dependencies(&reached[at]) {
                if !reached.contains(&dep) {
                    reached.push(dep);
                }
            }
            at += 1;
        }
        for storage in [
            "vak-fs",
            "vak-prompt-loader",
            "vak-store-file",
            "vak-store-pg",
        ] {
            assert!(
                !reached.iter().any(|r| r == storage),
                "vak-session reaches {storage} through its dependencies ({reached:?}): keep storage out of the contract's closure"
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
    /// parsed tables are kept by the prompt cache or the snapshot that read
    /// them).
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

    /// The gateway file has one reader: the typed table's seeds
    /// (`Typed`, the `Checked` values it keeps, `KeySeed`) are the only
    /// serde visitors in `gateway.rs` outside its tests, and it parses
    /// nothing with `serde_json::from_*` or into a `Value` beside them.
    #[test]
    fn the_gateway_file_has_one_reader() {
        const READER: [&str; 3] = ["Checked", "KeySeed", "Typed"];
        let path = root().join("crates/vak-prompt-loader/src/gateway.rs");
        let text = std::fs::read_to_string(&path).expect("gateway.rs");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut visitors = Vec::new();
        for line in code.lines() {
            if let Some((_, rest)) = line.split_once("Visitor<'de> for ") {
                let name = rest.split(['<', ' ', '{']).next().unwrap_or_default();
                visitors.push(name.to_owned());
            }
            for parse in ["serde_json::from_", "from_value(", ": Value = serde_json"] {
                assert!(
                    !line.contains(parse),
                    "gateway.rs parses beside its one reader: {}",
                    line.trim()
                );
            }
        }
        visitors.sort();
        assert_eq!(
            visitors, READER,
            "gateway.rs has one reader (the typed table); a second visitor is a second reader"
        );
    }

    /// The one file that reads a source string back: `Source::from_wire`,
    /// called where a ledger is read (a descriptor's, a recorded change's
    /// `source`), so a frozen contract's sources are typed like the rest.
    const WIRE_BOUNDARY: &str = "crates/vak-prompt-blocks/src/source.rs";

    /// Whether `line` parses a source string: a string method that cuts or
    /// matches text applied in one expression to something named `source`
    /// or to a gateway key's rendering (`entry_key`, `gateway_key(…)`,
    /// `.key(…)`), the old string shape of a source (`source.as_deref()`),
    /// a source string made back into a path, or the key separator of a
    /// rendered source cut anywhere (`split_once('#')`,
    /// `rsplit_once("#mcp.servers.")`, …). Path methods on the typed path a
    /// `Source` gives (`path()`, `parent()`, `file_name()`) are not string
    /// parsing and are not hits. What a line check cannot see — a rendering
    /// bound to another name and cut lines later — the types close: every
    /// provenance field is a `Source` (see [`string_source_field`]), so a
    /// parse needs an explicit `to_string()` first, which review sees.
    fn parses_a_source(line: &str) -> bool {
        const CUTS: [&str; 14] = [
            "rsplit_once(",
            "split_once(",
            "rsplit(",
            "split(",
            "strip_prefix(",
            "strip_suffix(",
            "starts_with(",
            "ends_with(",
            "find(",
            "rfind(",
            "contains(",
            "trim_start_matches(",
            "trim_end_matches(",
            "parse",
        ];
        let code = line.split("//").next().unwrap_or_default();
        // `'#'`, or a string opening with one `#` (`"#mcp.servers."`), not a
        // Markdown heading's `"## …"`.
        let cut_at_hash = ["split_once(", "rsplit_once(", "split(", "rsplit("]
            .iter()
            .any(|cut| {
                code.contains(&format!("{cut}'#'"))
                    || code.match_indices(&format!("{cut}\"#")).any(|(at, m)| {
                        !matches!(code[at + m.len()..].chars().next(), Some('#' | ' '))
                    })
            });
        // The expression from `at` on: up to a space, `,` or `;` outside
        // parentheses.
        let chain_after = |at: usize| {
            let rest = &code[at..];
            let mut depth = 0usize;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' | '[' => {
                        depth += 1;
                        false
                    }
                    ')' | ']' if depth > 0 => {
                        depth -= 1;
                        false
                    }
                    ')' | ']' => true,
                    c => depth == 0 && (c.is_whitespace() || c == ',' || c == ';'),
                })
                .map_or(rest.len(), |(end, _)| end);
            &rest[..end]
        };
        let cut = |chain: &str| CUTS.iter().any(|cut| chain.contains(&format!(".{cut}")));
        let applied_to_source = code.match_indices("source").any(|(at, _)| {
            let chain = chain_after(at);
            chain.contains(".as_deref()") || cut(chain)
        });
        let applied_to_key = ["entry_key", "gateway_key", ".key("]
            .iter()
            .any(|name| code.match_indices(name).any(|(at, _)| cut(chain_after(at))));
        // A string (a source's rendering) made back into a path.
        let back_to_path = code.match_indices("Path::new(").any(|(at, m)| {
            let arg = chain_after(at + m.len() - 1);
            arg.contains("source")
        });
        cut_at_hash || applied_to_source || applied_to_key || back_to_path
    }

    /// Whether `line` declares a provenance field as a string: a source
    /// is a `Source` wherever it is carried.
    fn string_source_field(line: &str) -> bool {
        let line = line.trim_start();
        let line = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        ["source: ", "frozen_source: "].iter().any(|field| {
            line.strip_prefix(field).is_some_and(|ty| {
                ty.starts_with("String")
                    || ty.starts_with("Option<String>")
                    || ty.starts_with("&str")
                    || ty.starts_with("&'a str")
                    || ty.starts_with("Option<&str>")
                    || ty.starts_with("Option<&'a str>")
            })
        })
    }

    /// Sources carried as strings, and why: the ledger's wire shapes of a
    /// descriptor, a recorded change and a turn's scoped rule, each read
    /// into a `Source` by `Source::from_wire` as the ledger is read. The
    /// on-disk format stays a string; nothing after the read sees one.
    const STRING_SOURCE_DEBT: [&str; 3] = [
        "crates/vak-prompt-blocks/src/change.rs",
        "crates/vak-prompt-blocks/src/contract.rs",
        "crates/vak-session/src/ledger.rs",
    ];

    #[test]
    fn no_provenance_string_is_parsed_back() {
        let found: Vec<String> = hits(parses_a_source)
            .into_iter()
            .filter(|hit| !hit.starts_with(WIRE_BOUNDARY))
            .collect();
        assert!(
            found.is_empty(),
            "a source string parsed back: {found:#?}; carry the typed `Source` (its path, gateway key, config key) instead"
        );
        let fields = hits(string_source_field);
        for hit in &fields {
            assert!(
                STRING_SOURCE_DEBT.iter().any(|file| hit.starts_with(file)),
                "a source carried as a string: {hit}; make it a `Source`"
            );
        }
        for file in STRING_SOURCE_DEBT {
            assert!(
                fields.iter().any(|hit| hit.starts_with(file)),
                "{file} carries no source as a string any more: take it off STRING_SOURCE_DEBT"
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

    /// The sources that may name the file system, and why: a crate's
    /// directory (all of it) or one file.
    const FS_OWNERS: [(&str, &str); 10] = [
        ("crates/vak-fs/", "the floor"),
        (
            "crates/vak-store-file/",
            "the file store, its object store and version log",
        ),
        ("crates/vak-store-pg/", "the PostgreSQL store"),
        (
            "crates/vak-prompt-trust/src/store.rs",
            "the trust store's file",
        ),
        ("crates/vak-prompt-loader/src/confine.rs", "confined opens"),
        (
            "crates/vak-prompt-loader/src/discover.rs",
            "finding the project",
        ),
        (
            "crates/vak-prompt-loader/src/managed.rs",
            "the managed layer",
        ),
        (
            "crates/vak-prompt-loader/src/rules.rs",
            "the walk a rule's globs are linted on",
        ),
        ("crates/vak-prompt-loader/src/watch.rs", "the file watch"),
        ("crates/vak-prompt-loader/src/write.rs", "the layer writer"),
    ];

    /// Path methods that ask the disk (std's `Path` and camino's). Not
    /// `.is_dir()`, `.is_file()` or `.metadata()`: a `FileType`, a
    /// `Metadata` and an open `File` have them too, without a path, so a
    /// line cannot tell them apart.
    const DISK_METHODS: [&str; 8] = [
        ".exists()",
        ".try_exists()",
        ".symlink_metadata()",
        ".read_dir()",
        ".read_dir_utf8()",
        ".canonicalize()",
        ".canonicalize_utf8()",
        "WalkDir::new(",
    ];

    /// Code that names the file system outside its owners, and why it is
    /// still there. The test fails when an entry is no longer needed.
    const FS_DEBT: [(&str, &str); 1] = [(
        "crates/vak-prompt-loader/src/chain.rs",
        "lists the skills directory by path when the confined open fails; to go through confine.rs",
    )];

    /// Whether `line` (code, not a comment) names the file system.
    /// `in_std_use` is whether the line is inside a multi-line
    /// `use std::{ … }`.
    fn names_fs(line: &str, in_std_use: bool) -> bool {
        let code = line.trim_start();
        if code.starts_with("//") {
            return false;
        }
        let fs_path = code.match_indices("fs::").any(|(at, _)| {
            !code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        });
        let std_group = (in_std_use || code.starts_with("use std::{")) && is_word_in("fs", code);
        fs_path
            || std_group
            || code.contains("std::fs")
            || code.contains("File::open")
            || code.contains("File::create")
            || code.contains("OpenOptions")
            || DISK_METHODS.iter().any(|m| code.contains(m))
    }

    /// Where the code outside `#[cfg(test)]` names the file system, as
    /// `path:line: text`, in every `crates/*/src` file that is not a test
    /// module. A `#[cfg(test)]` item is skipped to the `}` closing it at the
    /// attribute's indentation (or its one line, when it ends in `;`); a
    /// `#[cfg(test)] mod name;` marks `name.rs` (or `name/mod.rs`) a test
    /// module, never scanned.
    fn fs_hits() -> Vec<String> {
        let root = root();
        let files = sources();
        let mut test_modules: Vec<PathBuf> = Vec::new();
        for path in &files {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let dir = match path.file_stem().and_then(|s| s.to_str()) {
                Some("lib" | "main" | "mod") => path.parent().map(Path::to_owned),
                Some(stem) => path.parent().map(|p| p.join(stem)),
                None => None,
            };
            for pair in lines.windows(2) {
                if pair[0].trim() == "#[cfg(test)]"
                    && let Some(dir) = &dir
                    && let Some(name) = declared_module(pair[1])
                {
                    test_modules.push(dir.join(format!("{name}.rs")));
                    test_modules.push(dir.join(name).join("mod.rs"));
                }
            }
        }
        let mut out = Vec::new();
        for path in files.iter().filter(|p| !test_modules.contains(p)) {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let rel = path.strip_prefix(&root).unwrap_or(path);
            out.extend(
                scan(&text)
                    .into_iter()
                    .map(|(n, line)| format!("{}:{n}: {}", rel.display(), line.trim())),
            );
        }
        out
    }

    /// The module `line` declares without a body (`mod name;`, any
    /// visibility).
    fn declared_module(line: &str) -> Option<&str> {
        let line = line.trim();
        let rest = line.split("mod ").nth(1)?;
        let name = rest.strip_suffix(';')?;
        let before = line.split("mod ").next()?;
        (before.is_empty() || before.starts_with("pub")).then_some(name.trim())
    }

    /// The lines of one source (1-based) that name the file system, outside
    /// `#[cfg(test)]` items.
    fn scan(text: &str) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut lines = text.lines().enumerate().peekable();
        let mut in_std_use = false;
        while let Some((at, line)) = lines.next() {
            if line.trim() == "#[cfg(test)]" {
                let indent = &line[..line.len() - line.trim_start().len()];
                let close = format!("{indent}}}");
                match lines.next() {
                    Some((_, item)) if item.trim_end().ends_with(';') => {}
                    Some(_) => {
                        for (_, inner) in lines.by_ref() {
                            if inner.trim_end() == close {
                                break;
                            }
                        }
                    }
                    None => {}
                }
                continue;
            }
            if names_fs(line, in_std_use) {
                out.push((at + 1, line.to_owned()));
            }
            if line.trim_start().starts_with("use std::{") {
                in_std_use = !line.contains("};");
            } else if in_std_use && line.contains("};") {
                in_std_use = false;
            }
        }
        out
    }

    fn owner_of(hit: &str) -> Option<&'static str> {
        FS_OWNERS
            .iter()
            .find(|(owner, _)| hit.starts_with(owner))
            .map(|(owner, _)| *owner)
    }

    #[test]
    fn no_std_fs_outside_the_floor_and_the_stores() {
        let found = fs_hits();
        let in_debt = |hit: &str| FS_DEBT.iter().any(|(file, _)| hit.starts_with(file));
        let strays: Vec<&String> = found
            .iter()
            .filter(|h| owner_of(h).is_none() && !in_debt(h))
            .collect();
        assert!(
            strays.is_empty(),
            "the file system named outside the floor and the stores; call the owner of that file (vak-fs, through `vak_core::files` above vak-core, or the store that owns its format) instead:\n{}",
            strays
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        for (file, why) in FS_DEBT {
            assert!(
                found.iter().any(|h| h.starts_with(file)),
                "{file} ({why}) names the file system no more: take it off FS_DEBT"
            );
        }
        // A single file listed as an owner must still need to be: the list
        // names exactly the modules that touch the disk.
        for (owner, why) in FS_OWNERS {
            if owner.ends_with(".rs") {
                assert!(
                    found.iter().any(|h| h.starts_with(owner)),
                    "{owner} ({why}) names the file system no more: take it off FS_OWNERS"
                );
            }
        }
    }

    #[test]
    fn the_fs_scan_sees_what_it_looks_for() {
        for hit in [
            "    let text = std::fs::read_to_string(&path)?;",
            "use std::fs;",
            "    fs::write(path, text)?;",
            "use std::{fs, io};",
            "    let f = File::open(path)?;",
            "    let f = OpenOptions::new().read(true).open(path)?;",
            "    use std::os::unix::fs::PermissionsExt as _;",
            "    let fd = rustix::fs::open(path, flags, mode)?;",
            "    if !project.exists() {",
            "    let Ok(entries) = dir.read_dir_utf8() else {",
        ] {
            assert!(names_fs(hit, false), "missed: {hit}");
        }
        assert!(
            names_fs("    fs,", true),
            "a multi-line `use std::{{ fs }}`"
        );
        for clean in [
            "    Ok(vak_fs::lock_exclusive(&path)?)",
            "    File(#[from] vak_fs::FsError),",
            "    // std::fs::read would follow a link here",
            "    let real = vak_core::files::canonical(&dir);",
            "    fs,",
            "            Ok(kind) if kind.is_dir() => pending.push(path),",
        ] {
            assert!(!names_fs(clean, false), "a false hit: {clean}");
        }
        let text = "fn a() {\n    std::fs::read(\"x\");\n}\n\n#[cfg(test)]\nmod tests {\n    fn b() {\n        std::fs::read(\"y\");\n    }\n}\n\nfn c() {\n    fs::remove_file(p);\n}\n";
        let lines: Vec<usize> = scan(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            lines,
            [2, 13],
            "the test module is skipped, not what follows it"
        );
        assert_eq!(declared_module("mod readme;"), Some("readme"));
        assert_eq!(declared_module("pub(crate) mod tests;"), Some("tests"));
        assert_eq!(declared_module("mod tests {"), None);
    }

    #[test]
    fn the_rules_see_what_they_look_for() {
        for parsed in [
            "let dir = source.rsplit_once('/').map_or(source, |(dir, _)| dir);",
            "let mut parts = source.rsplit(['/', '\\\\']);",
            ".rposition(|level| Utf8Path::new(source).starts_with(level))",
            ".rsplit_once(\"#mcp.servers.\")",
            "let entry = tier.key(block).rsplit_once(\"/prompts/\");",
            "let bot = gateway_key(&bot, None, block).split('/').nth(1);",
            "let Some(source) = provenance.source.as_deref() else {",
            ".and_then(|root| camino::Utf8Path::new(source).strip_prefix(root).ok())",
            "(Some(dir), Some(source)) => camino::Utf8Path::new(source).starts_with(dir),",
            "if c.provenance.source.to_string().starts_with(\"builtin:\") {",
        ] {
            assert!(parses_a_source(parsed), "{parsed}");
        }
        for typed in [
            "let file = source?.path()?;",
            "source: Source::Gateway(entry.key(block)),",
            "let relative = root.and_then(|root| file.strip_prefix(root).ok());",
            "let after = readme.split(\"## Using it\").nth(1).unwrap_or_default();",
            "// source.split_once('#') was how it was done",
        ] {
            assert!(!parses_a_source(typed), "{typed}");
        }
        assert!(string_source_field("    pub source: Option<String>,"));
        assert!(string_source_field("    source: Option<&'a str>,"));
        assert!(!string_source_field("    pub source: Source,"));
        assert!(!string_source_field("    pub sources: Vec<String>,"));
        // Spelled in two pieces so a plain search of the tree for a
        // process-wide `Mutex` finds no line of this test.
        assert!(holds_loaded_data(concat!(
            "    static REMEMBERED: ",
            "Mutex<Remembered> = Mutex::new(Vec::new());"
        )));
        assert!(!holds_loaded_data(
            "static CLAIMS: std::sync::atomic::AtomicU64 = AtomicU64::new(0);"
        ));
        assert!(!holds_loaded_data(
            "    static TYPE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b\"x\"));"
        ));
    }
}
