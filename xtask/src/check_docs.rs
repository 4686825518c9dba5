//! `cargo xtask check-docs`: the user's documentation stands on its own and
//! its numbers are the code's.
//!
//! - No page cites a document that is not in the repository (the design
//!   notes the project was built from): no "DECISIONS", no "doc NN", no `§`.
//! - Every "schema version N" and "migrations 1–N" is the newest migration
//!   `vak-store-pg` ships (the highest `NNNN_*.sql` under its migrations).
//! - Every statement of the default token cap ("N tokens unless …", "default
//!   cap of N", a JSON example's `"cap": N`) is
//!   [`vak_prompt_budget::DEFAULT_MAX_TOKENS`].
//! - Every "N KiB limit" / "N KiB per-file limit" is the loader's
//!   [`vak_prompt_loader::MAX_FILE_BYTES`].
//!
//! It reads the constants through the crates themselves, so a change of
//! either side without the other fails here (and in `cargo test`, which runs
//! the same check).

use std::fs;
use std::path::{Path, PathBuf};

use vak_prompt_budget::DEFAULT_MAX_TOKENS;
use vak_prompt_loader::MAX_FILE_BYTES;

/// The pages a user of the repository reads, relative to its root: every
/// `docs/*.md` and these.
const PAGES: [&str; 4] = [
    "README.md",
    "ARCHITECTURE.md",
    "BENCHMARKS.md",
    "crates/README.md",
];

const MIGRATIONS: &str = "crates/vak-store-pg/src/migrations";

/// Every page checked, in a stable order.
fn pages(root: &Path) -> Result<Vec<PathBuf>, String> {
    let docs = root.join("docs");
    let listing =
        fs::read_dir(&docs).map_err(|e| format!("cannot list `{}`: {e}", docs.display()))?;
    let mut out = Vec::new();
    for entry in listing {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out.extend(PAGES.iter().map(|p| root.join(p)));
    // Each crate's README says how it works inside; it stands on its own too.
    let crates = root.join("crates");
    let listing =
        fs::read_dir(&crates).map_err(|e| format!("cannot list `{}`: {e}", crates.display()))?;
    let mut readmes = Vec::new();
    for entry in listing {
        let readme = entry.map_err(|e| e.to_string())?.path().join("README.md");
        if readme.is_file() {
            readmes.push(readme);
        }
    }
    readmes.sort();
    out.extend(readmes);
    Ok(out)
}

/// The newest schema version `vak-store-pg` ships: the highest `NNNN` of
/// its `NNNN_name.sql` files.
fn newest_migration(root: &Path) -> Result<u64, String> {
    let dir = root.join(MIGRATIONS);
    let listing =
        fs::read_dir(&dir).map_err(|e| format!("cannot list `{}`: {e}", dir.display()))?;
    let mut newest = None;
    for entry in listing {
        let name = entry.map_err(|e| e.to_string())?.file_name();
        let name = name.to_string_lossy();
        if let Some(version) = name
            .strip_suffix(".sql")
            .and_then(|n| n.split('_').next())
            .and_then(|n| n.parse::<u64>().ok())
        {
            newest = newest.max(Some(version));
        }
    }
    newest.ok_or_else(|| format!("no `NNNN_*.sql` migration in `{}`", dir.display()))
}

/// The number written right after each `prefix` (digits, with `,` as a
/// thousands separator), and the 1-based line it is on.
fn numbers_after(text: &str, prefix: &str) -> Vec<(usize, u64)> {
    text.match_indices(prefix)
        .filter_map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let digits: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(char::is_ascii_digit)
                .collect();
            Some((line_of(text, at), digits.parse().ok()?))
        })
        .collect()
}

/// The number written right before each `suffix`, and its line.
fn numbers_before(text: &str, suffix: &str) -> Vec<(usize, u64)> {
    text.match_indices(suffix)
        .filter_map(|(at, _)| {
            let before = &text[..at];
            let start = before
                .char_indices()
                .rev()
                .take_while(|(_, c)| c.is_ascii_digit() || *c == ',')
                .last()
                .map(|(i, _)| i)?;
            let digits: String = before[start..]
                .chars()
                .filter(char::is_ascii_digit)
                .collect();
            Some((line_of(text, at), digits.parse().ok()?))
        })
        .collect()
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Citations of documents that are not in the repository, with their line.
fn citations(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let cited = line.contains("DECISIONS")
            || line.contains('§')
            || line.match_indices("doc ").any(|(at, _)| {
                let rest = &line.as_bytes()[at + 4..];
                rest.len() >= 2 && rest[0].is_ascii_digit() && rest[1].is_ascii_digit()
            });
        if cited {
            out.push((n + 1, line.trim().to_owned()));
        }
    }
    out
}

/// Every problem found in one page's text, given the code's numbers.
fn problems_in(text: &str, newest_schema: u64) -> Vec<String> {
    let mut out = Vec::new();
    for (line, cited) in citations(text) {
        out.push(format!(
            "line {line} cites a document that is not in the repository (DECISIONS, doc NN, §N): {cited}"
        ));
    }
    let schema = numbers_after(text, "schema version ")
        .into_iter()
        .chain(numbers_after(text, "migrations 1–"))
        .chain(numbers_after(text, "migrations 1-"));
    for (line, n) in schema {
        if n != newest_schema {
            out.push(format!(
                "line {line} says schema version {n}; the newest migration shipped ({MIGRATIONS}) is {newest_schema}"
            ));
        }
    }
    let cap = numbers_before(text, " tokens unless")
        .into_iter()
        .chain(numbers_after(text, "default cap of "))
        .chain(numbers_after(text, "\"cap\": "));
    for (line, n) in cap {
        if n != DEFAULT_MAX_TOKENS as u64 {
            out.push(format!(
                "line {line} states a default cap of {n} tokens; vak_prompt_budget::DEFAULT_MAX_TOKENS is {DEFAULT_MAX_TOKENS}"
            ));
        }
    }
    let file_kib = MAX_FILE_BYTES / 1024;
    let limits = numbers_before(text, " KiB limit")
        .into_iter()
        .chain(numbers_before(text, " KiB per-file limit"));
    for (line, n) in limits {
        if n != file_kib {
            out.push(format!(
                "line {line} says a {n} KiB file limit; vak_prompt_loader::MAX_FILE_BYTES is {file_kib} KiB"
            ));
        }
    }
    out
}

/// Checks every page; the error lists every problem, by page and line.
pub(crate) fn check(root: &Path) -> Result<String, String> {
    let newest_schema = newest_migration(root)?;
    let pages = pages(root)?;
    let mut problems = Vec::new();
    for page in &pages {
        let text = fs::read_to_string(page)
            .map_err(|e| format!("cannot read `{}`: {e}", page.display()))?;
        let shown = page
            .strip_prefix(root)
            .unwrap_or(page)
            .display()
            .to_string();
        problems.extend(
            problems_in(&text, newest_schema)
                .into_iter()
                .map(|p| format!("{shown}: {p}")),
        );
    }
    if problems.is_empty() {
        Ok(format!(
            "docs are current: {} pages, no outside citation; schema version {newest_schema}, default cap {DEFAULT_MAX_TOKENS} tokens, {} KiB file limit",
            pages.len(),
            MAX_FILE_BYTES / 1024
        ))
    } else {
        Err(format!(
            "{} problem(s) in the documentation:\n  {}",
            problems.len(),
            problems.join("\n  ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repositorys_docs_are_current() {
        let root = crate::workspace_root();
        if let Err(problems) = check(&root) {
            panic!("{problems}");
        }
    }

    #[test]
    fn each_kind_of_problem_is_found_with_its_line() {
        let cap = DEFAULT_MAX_TOKENS + 1;
        let text = format!(
            "fine\nas DECISIONS §3 says\nsee doc 45\nschema version 2\n{cap} tokens unless set\n\"cap\": {cap}\n1 KiB limit\n"
        );
        let found = problems_in(&text, 5);
        assert_eq!(found.len(), 6, "{found:#?}");
        for (problem, line) in found.iter().zip([2, 3, 4, 5, 6, 7]) {
            assert!(problem.starts_with(&format!("line {line} ")), "{problem}");
        }
    }

    #[test]
    fn true_statements_and_lookalikes_pass() {
        let text = format!(
            "schema version 5; migrations 1–5\n{} tokens unless\nthe docs 45 times\ndoc 4 of them\n{} KiB limit\n",
            DEFAULT_MAX_TOKENS,
            MAX_FILE_BYTES / 1024
        );
        assert_eq!(problems_in(&text, 5), Vec::<String>::new());
        assert_eq!(
            numbers_before("a 12,000 tokens unless", " tokens unless"),
            [(1, 12000)]
        );
    }
}
