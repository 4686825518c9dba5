//! The house's rules that a test can hold, as tests (`cargo test -p
//! xtask`, so the README's test command runs them): the crates depend on
//! each other one way, in the order below; no process-wide cache holds
//! loaded data; no provenance string is parsed back. Where the code does
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
                    || ty.starts_with("Option<&")
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
