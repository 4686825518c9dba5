//! Scoped rules: `.vak/prompts/rules/<name>.md`, each a `+++` TOML front
//! matter naming the paths it is for, then guardrail bullets or
//! operating-rules prose. The one reader and parser of that format.
//!
//! A rule is collected from the shared home (`$VAK_HOME/.vak/prompts/rules/`)
//! and from every `.vak/prompts/rules/` of the project tree (the same bounded
//! walk as the directory layers, never into a nested repository), whatever
//! the working directory: which rules apply is decided per turn by the paths
//! the turn touches, never by where the command runs. Like every prompt
//! input, a rule file is hostile until read: confined to its root, bounded,
//! UTF-8, a regular file; a bad one is reported by name ([`Skipped`]) and
//! left out, never fatal.

use std::sync::Arc;

use camino::{Utf8Component, Utf8Path, Utf8PathBuf};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use vak_prompt_blocks::{Block, Escaped, Name, NameKind, Origin, PromptLayer, Provenance};

use crate::chain::Skipped;
use crate::discover::{directory_layers_walked, is_walked_dir};
use crate::paths::{join, prompt_dir};
use crate::safe_read::{MAX_FILE_BYTES, ReadRefusal, utf8};
use crate::snapshot::Snapshot;

/// The directory, under a layer's `.vak/prompts/`, that holds its rules.
pub const RULES_DIR: &str = "rules";
/// At most this many rule files are read per project (home included); the
/// rest are reported once and left out, so a clone cannot make every turn
/// slow by shipping thousands.
pub const MAX_RULES: usize = 256;
/// At most this many bytes of rule files are read per project (home
/// included): each file is bounded as a block file is, and this bounds what
/// a clone's rules can make every turn read; a file past it is reported and
/// left out.
pub const MAX_RULES_BYTES: usize = 1024 * 1024;
/// At most this many globs in one rule's `paths`.
pub const MAX_GLOBS: usize = 64;
/// The longest glob accepted, in bytes.
pub const MAX_GLOB_BYTES: usize = 1024;
/// How many names of one `rules/` directory are looked at.
const MAX_RULE_ENTRIES: usize = 4096;
/// How many files of the tree the lint looks at, at most.
pub const MAX_LINT_FILES: usize = 100_000;

/// Why a rule file was left out. Each is a sentence naming what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The file does not start with a `+++` line.
    #[error(
        "has no front matter: a rule starts with a `+++` line, then `paths = [\"src/**\"]` (and optionally `block = \"operating-rules\"`), then `+++`"
    )]
    NoFrontMatter,
    /// The front matter is never closed.
    #[error("opens its front matter with `+++` but never closes it with a second `+++` line")]
    UnclosedFrontMatter,
    /// The front matter is not valid TOML, or holds an unknown key.
    #[error("has a front matter that is not valid: {0}")]
    BadFrontMatter(String),
    /// `paths` is empty.
    #[error("has an empty `paths`: name at least one glob, e.g. `paths = [\"src/**\"]`")]
    NoPaths,
    /// Too many globs.
    #[error("has {0} globs in `paths`; at most {MAX_GLOBS} are allowed")]
    TooManyGlobs(usize),
    /// `block` names a block a rule cannot carry.
    #[error(
        "has `block = \"{}\"`; a rule is `\"guardrails\"` (the default) or `\"operating-rules\"`",
        Escaped(.0)
    )]
    UnknownBlock(String),
    /// A glob that cannot be compiled, or that vak does not accept.
    #[error("has the glob `{}` in `paths`, which is not accepted: {reason}", Escaped(.glob))]
    BadGlob {
        /// The glob as written.
        glob: String,
        /// Why.
        reason: String,
    },
}

/// The front matter, as written. Unknown keys are refused: a misspelt
/// `path` must not silently make a rule apply nowhere.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    paths: Vec<String>,
    #[serde(default)]
    block: Option<String>,
}

/// A rule file's parts: its block, its globs and its text.
#[derive(Debug, Clone)]
pub struct ParsedRule {
    /// `guardrails` (the default) or `operating-rules`.
    pub block: Block,
    /// The globs, as written.
    pub globs: Vec<String>,
    /// The text after the front matter.
    pub text: String,
    matcher: GlobSet,
    /// For each pattern of `matcher`, the index of the glob it came from.
    owners: Vec<usize>,
}

/// Parse a rule file's text: the one parser of the format.
///
/// # Errors
///
/// [`RuleError`]: no or unclosed front matter, bad TOML, unknown key,
/// empty `paths`, a bad glob, an unknown block.
pub fn parse_rule(text: &str) -> Result<ParsedRule, RuleError> {
    // An editor's byte order mark is not part of the first line.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let is_fence = |line: &str| line.trim_end_matches(['\n', '\r']).trim_end() == "+++";
    if !lines.next().is_some_and(is_fence) {
        return Err(RuleError::NoFrontMatter);
    }
    let mut front = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if is_fence(line) {
            closed = true;
            break;
        }
        front.push_str(line);
    }
    if !closed {
        return Err(RuleError::UnclosedFrontMatter);
    }
    let body: String = lines.collect();
    let front: FrontMatter = toml::from_str(&front)
        .map_err(|e| RuleError::BadFrontMatter(Escaped(e.message()).to_string()))?;
    let block = match front.block.as_deref() {
        None | Some("guardrails") => Block::Guardrails,
        Some("operating-rules") => Block::OperatingRules,
        Some(other) => return Err(RuleError::UnknownBlock(other.to_owned())),
    };
    if front.paths.is_empty() {
        return Err(RuleError::NoPaths);
    }
    if front.paths.len() > MAX_GLOBS {
        return Err(RuleError::TooManyGlobs(front.paths.len()));
    }
    let mut builder = GlobSetBuilder::new();
    let mut owners = Vec::new();
    for (at, glob) in front.paths.iter().enumerate() {
        for pattern in patterns(glob)? {
            let compiled = GlobBuilder::new(&pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| RuleError::BadGlob {
                    glob: glob.clone(),
                    reason: e.kind().to_string(),
                })?;
            builder.add(compiled);
            owners.push(at);
        }
    }
    let matcher = builder.build().map_err(|e| RuleError::BadGlob {
        glob: front.paths.join(", "),
        reason: e.to_string(),
    })?;
    Ok(ParsedRule {
        block,
        globs: front.paths,
        text: body,
        matcher,
        owners,
    })
}

/// The globset patterns one gitignore-style glob stands for: a glob with no
/// slash but a trailing one matches at any depth (`*.sql` is `**/*.sql`),
/// one with a slash is anchored at the rule's directory (a leading `/` only
/// anchors), and a pattern that names a directory also matches everything
/// under it (`src/payments` covers `src/payments/x.rs`).
fn patterns(glob: &str) -> Result<[String; 2], RuleError> {
    let bad = |reason: &str| RuleError::BadGlob {
        glob: glob.to_owned(),
        reason: reason.to_owned(),
    };
    if glob.len() > MAX_GLOB_BYTES {
        return Err(bad("it is longer than 1024 bytes"));
    }
    if glob.starts_with('!') {
        return Err(bad(
            "negation (`!`) is not supported in a rule; write the paths it is for",
        ));
    }
    if glob.chars().any(vak_prompt_blocks::is_forbidden) || glob.contains(['\n', '\r', '\t']) {
        return Err(bad("it holds a control or invisible character"));
    }
    let core = glob.trim_start_matches('/').trim_end_matches('/');
    if core.is_empty() {
        return Err(bad("it names no path"));
    }
    if core.split('/').any(|part| part == ".." || part == ".") {
        return Err(bad(
            "`.` and `..` are not allowed: a glob is relative to the directory that holds the rule's `.vak`",
        ));
    }
    let anchored = glob.starts_with('/') || core.contains('/');
    let pattern = if anchored || core.starts_with("**/") {
        core.to_owned()
    } else {
        format!("**/{core}")
    };
    let under = format!("{pattern}/**");
    Ok([pattern, under])
}

impl ParsedRule {
    /// The first glob (as written) that matches `path`, a path relative to
    /// the directory that holds the rule's `.vak`.
    pub fn matching_glob(&self, path: &Utf8Path) -> Option<&str> {
        self.matcher
            .matches(path.as_str())
            .into_iter()
            .map(|i| self.owners[i])
            .min()
            .map(|at| self.globs[at].as_str())
    }

    /// Whether glob number `at` matches `path`.
    fn glob_matches(&self, at: usize, path: &str) -> bool {
        self.matcher
            .matches(path)
            .into_iter()
            .any(|i| self.owners[i] == at)
    }
}

/// One rule, read and parsed.
#[derive(Debug, Clone)]
pub struct ScopedRule {
    /// The file's name without `.md`: `payments`.
    pub name: String,
    /// Where it came from: shared (home) or project, its path.
    pub provenance: Arc<Provenance>,
    /// The directory its globs are relative to, relative to the project
    /// root (empty for the root's and the home's rules).
    pub base: Utf8PathBuf,
    /// Its block, globs and text.
    pub parsed: ParsedRule,
}

impl ScopedRule {
    /// The glob that matches `path` (relative to the project root,
    /// normalised), if any.
    pub fn matches(&self, path: &Utf8Path) -> Option<&str> {
        let rel = if self.base.as_str().is_empty() {
            path
        } else {
            path.strip_prefix(&self.base).ok()?
        };
        if rel.as_str().is_empty() {
            return None;
        }
        self.parsed.matching_glob(rel)
    }

    /// `rules/<name>` as written in its layer, for people.
    pub fn label(&self) -> String {
        format!("{RULES_DIR}/{}", self.name)
    }
}

/// Every scoped rule of a project (and the home), and what was left out.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// The rules, the home's first, then the project's widest first, each
    /// directory's by name.
    pub rules: Vec<ScopedRule>,
    /// Rule files (or `rules/` directories) refused, each naming the file.
    pub skipped: Vec<Skipped>,
    /// Whether the tree walk looked everywhere it looks (it is bounded).
    pub complete: bool,
}

/// One path a rule matched, and the glob that matched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathMatch {
    /// The path, relative to the project root.
    pub path: Utf8PathBuf,
    /// The glob, as written in the rule.
    pub glob: String,
}

impl RuleSet {
    /// The rules matching any of `paths` (relative to the project root,
    /// normalised), in the set's order, each with what it matched.
    pub fn active<'s>(&'s self, paths: &[Utf8PathBuf]) -> Vec<(&'s ScopedRule, Vec<PathMatch>)> {
        self.rules
            .iter()
            .filter_map(|rule| {
                let matched: Vec<PathMatch> = paths
                    .iter()
                    .filter_map(|path| {
                        rule.matches(path).map(|glob| PathMatch {
                            path: path.clone(),
                            glob: glob.to_owned(),
                        })
                    })
                    .collect();
                (!matched.is_empty()).then_some((rule, matched))
            })
            .collect()
    }

    /// Every (rule, glob) that matches no file of `files` (relative to the
    /// project root): a glob misspelt, or left behind by a rename.
    pub fn unmatched_globs<'s>(&'s self, files: &[Utf8PathBuf]) -> Vec<(&'s ScopedRule, &'s str)> {
        let mut out = Vec::new();
        for rule in &self.rules {
            let rel: Vec<&str> = files
                .iter()
                .filter_map(|f| {
                    if rule.base.as_str().is_empty() {
                        Some(f.as_str())
                    } else {
                        f.strip_prefix(&rule.base).ok().map(Utf8Path::as_str)
                    }
                })
                .collect();
            for (at, glob) in rule.parsed.globs.iter().enumerate() {
                if !rel.iter().any(|f| rule.parsed.glob_matches(at, f)) {
                    out.push((rule, glob.as_str()));
                }
            }
        }
        out
    }
}

/// A path the user gave, made relative to the project root: `given` is
/// relative to `cwd` (or absolute); `..` and `.` are resolved by name.
///
/// # Errors
///
/// A sentence naming the path: it lies outside the project root, or names
/// the root itself.
pub fn project_path(
    root: &Utf8Path,
    cwd: &Utf8Path,
    given: &Utf8Path,
) -> Result<Utf8PathBuf, String> {
    let joined = if given.is_absolute() {
        given.to_owned()
    } else {
        cwd.join(given)
    };
    let normal = normalise(&joined);
    let root = normalise(root);
    match normal.strip_prefix(&root) {
        Ok(rel) if !rel.as_str().is_empty() => Ok(rel.to_owned()),
        Ok(_) => Err(format!(
            "path `{}` is the project root itself; name a file or directory inside it",
            Escaped(given.as_str())
        )),
        Err(_) if given.is_relative() => Err(format!(
            "path `{}` (relative to the current directory `{}`) lies outside the project `{}`; rules apply to paths inside the project",
            Escaped(given.as_str()),
            Escaped(cwd.as_str()),
            Escaped(root.as_str())
        )),
        Err(_) => Err(format!(
            "path `{}` lies outside the project `{}`; rules apply to paths inside the project",
            Escaped(given.as_str()),
            Escaped(root.as_str())
        )),
    }
}

/// `path` with `.` dropped and each `..` taking away the part before it,
/// by name (a path a turn names need not exist yet).
fn normalise(path: &Utf8Path) -> Utf8PathBuf {
    let mut out = Utf8PathBuf::new();
    for part in path.components() {
        match part {
            Utf8Component::CurDir => {}
            Utf8Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_str()),
        }
    }
    out
}

/// A path relative to the project root as a turn names it (the gateway's
/// `"paths"`): relative, no `..`, no empty or control characters.
///
/// # Errors
///
/// A sentence naming the path.
pub fn relative_project_path(given: &str) -> Result<Utf8PathBuf, String> {
    let path = Utf8Path::new(given);
    if given.is_empty()
        || given.chars().any(vak_prompt_blocks::is_forbidden)
        || given.contains(['\n', '\r'])
    {
        return Err(format!(
            "path `{}` is empty or holds a control or invisible character",
            Escaped(given)
        ));
    }
    if path.is_absolute() || path.components().any(|c| c == Utf8Component::ParentDir) {
        return Err(format!(
            "path `{}` must be relative to the project root, without `..`",
            Escaped(given)
        ));
    }
    let normal = normalise(path);
    if normal.as_str().is_empty() {
        return Err(format!("path `{}` names no file", Escaped(given)));
    }
    Ok(normal)
}

impl Snapshot {
    /// Every scoped rule for `project` (none when `None`: a project that is
    /// the home) and the home, read once per snapshot.
    pub fn rules(&mut self, home: &Utf8Path, project: Option<&Utf8Path>) -> Arc<RuleSet> {
        let key = (home.to_string(), project.map(ToString::to_string));
        if let Some(set) = self.kept(|r| r.rules.get(&key)) {
            return Arc::clone(set);
        }
        let set = Arc::new(read_rules(self, home, project));
        if !self.once {
            self.reads.rules.insert(key, Arc::clone(&set));
        }
        set
    }
}

/// [`Snapshot::rules`] on a snapshot of its own.
pub fn load_rules(home: &Utf8Path, project: Option<&Utf8Path>) -> RuleSet {
    let set = Snapshot::once().rules(home, project);
    Arc::unwrap_or_clone(set)
}

fn read_rules(snap: &mut Snapshot, home: &Utf8Path, project: Option<&Utf8Path>) -> RuleSet {
    let mut set = RuleSet {
        complete: true,
        ..RuleSet::default()
    };
    let home_dir = join(&prompt_dir(home), &[RULES_DIR]);
    read_dir_rules(
        snap,
        &mut set,
        home,
        false,
        &home_dir,
        Utf8Path::new(""),
        PromptLayer::Shared,
        Origin::Home,
    );
    if let Some(project) = project {
        let walk = directory_layers_walked(project, &[] as &[&str], home);
        set.complete = walk.complete;
        let levels = std::iter::once(Utf8PathBuf::new()).chain(walk.layers);
        for level in levels {
            let dir = if level.as_str().is_empty() {
                project.to_owned()
            } else {
                project.join(&level)
            };
            let rules_dir = join(&prompt_dir(&dir), &[RULES_DIR]);
            read_dir_rules(
                snap,
                &mut set,
                project,
                true,
                &rules_dir,
                &level,
                PromptLayer::Project,
                Origin::Project,
            );
        }
    }
    set
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call per root, each spelled out"
)]
fn read_dir_rules(
    snap: &mut Snapshot,
    set: &mut RuleSet,
    root: &Utf8Path,
    is_project: bool,
    rules_dir: &Utf8Path,
    base: &Utf8Path,
    layer: PromptLayer,
    origin: Origin,
) {
    let skip = |set: &mut RuleSet, path: &Utf8Path, reason: String| {
        let skipped = Skipped {
            block: None,
            provenance: Provenance::new(layer, origin, path.as_str()),
            reason,
        };
        tracing::warn!(%skipped, "scoped rule skipped");
        set.skipped.push(skipped);
    };
    let dirs = match snap.root(root, is_project) {
        Ok(Some(dirs)) => dirs,
        Ok(None) => return,
        Err(refusal) => return skip(set, rules_dir, refusal.to_string()),
    };
    let handle = match dirs.listed_dir(rules_dir) {
        Ok(Some(handle)) => handle,
        Ok(None) => return,
        Err(refusal) => return skip(set, rules_dir, ReadRefusal::from(refusal).to_string()),
    };
    let Ok(mut names) = handle.names(MAX_RULE_ENTRIES) else {
        return skip(set, rules_dir, "could not be listed".to_owned());
    };
    names.sort();
    for file in names {
        let Some(stem) = file.strip_suffix(".md") else {
            continue;
        };
        if file.starts_with('.') {
            continue;
        }
        let path = join(rules_dir, &[&file]);
        if set.rules.len() >= MAX_RULES {
            skip(
                set,
                &path,
                format!(
                    "is past the first {MAX_RULES} rules of this project; it and the rest are left out"
                ),
            );
            return;
        }
        if Name::new(NameKind::Role, stem).is_err() {
            skip(
                set,
                &path,
                "has a name that is not a valid rule name (letters, digits, `-`, `_`); it is left out".to_owned(),
            );
            continue;
        }
        let text = dirs
            .read_in(&handle, file.as_str(), MAX_FILE_BYTES)
            .map_err(ReadRefusal::from)
            .and_then(|bytes| bytes.map(utf8).transpose());
        let read_so_far: usize = set.rules.iter().map(|r| r.parsed.text.len()).sum();
        if let Ok(Some(text)) = &text
            && read_so_far + text.len() > MAX_RULES_BYTES
        {
            skip(
                set,
                &path,
                format!(
                    "would take this project's rules past {} KiB in all; it is left out (shorten or merge rules)",
                    MAX_RULES_BYTES / 1024
                ),
            );
            continue;
        }
        match text {
            Ok(Some(text)) => match parse_rule(&text) {
                Ok(parsed) => set.rules.push(ScopedRule {
                    name: stem.to_owned(),
                    provenance: Arc::new(Provenance::new(layer, origin, path.as_str())),
                    base: base.to_owned(),
                    parsed,
                }),
                Err(error) => skip(set, &path, format!("{error}; the rule is left out")),
            },
            Ok(None) => {}
            Err(refusal) => skip(set, &path, refusal.to_string()),
        }
    }
}

/// The files of the project tree, relative to its root, for the lint: the
/// same walk the directory layers use (bounded, symlinks not followed, no
/// hidden directories, `node_modules`, `target`, nested repositories or
/// the home), except that a directory `set`'s globs name literally
/// (`.github` in `.github/workflows/*.yml`) is entered, so such a glob is
/// not reported as matching nothing. The second value says whether the
/// walk looked everywhere.
pub fn project_files(root: &Utf8Path, home: &Utf8Path, set: &RuleSet) -> (Vec<Utf8PathBuf>, bool) {
    let home = crate::discover::real_home(home);
    let named: Vec<&str> = set
        .rules
        .iter()
        .flat_map(|r| r.parsed.globs.iter())
        .flat_map(|g| g.split('/'))
        .filter(|part| !part.is_empty() && !part.contains(['*', '?', '[', '{', '\\']))
        .collect();
    let mut files = Vec::new();
    let walk = walkdir::WalkDir::new(root)
        .min_depth(1)
        .max_depth(16)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| !e.file_type().is_dir() || is_walked_dir(e, home.as_ref(), &named));
    for entry in walk.flatten() {
        if files.len() >= MAX_LINT_FILES {
            return (files, false);
        }
        if entry.file_type().is_dir() {
            continue;
        }
        if let Some(rel) = Utf8Path::from_path(entry.path()).and_then(|p| p.strip_prefix(root).ok())
        {
            files.push(rel.to_owned());
        }
    }
    (files, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> ParsedRule {
        match parse_rule(text) {
            Ok(rule) => rule,
            Err(error) => panic!("{error}"),
        }
    }

    #[test]
    fn front_matter_block_defaults_to_guardrails_and_body_follows() {
        let parsed = rule("+++\npaths = [\"src/payments/**\"]\n+++\n- Never log card numbers.\n");
        assert_eq!(parsed.block, Block::Guardrails);
        assert_eq!(parsed.text, "- Never log card numbers.\n");
        let ops =
            rule("+++\r\npaths = [\"*.sql\"]\nblock = \"operating-rules\"\n+++\r\nUse migrations.");
        assert_eq!(ops.block, Block::OperatingRules);
        assert_eq!(ops.text, "Use migrations.");
    }

    #[test]
    fn bad_front_matter_is_refused_with_a_reason() {
        assert_eq!(
            parse_rule("- no front matter").err(),
            Some(RuleError::NoFrontMatter)
        );
        assert_eq!(
            parse_rule("+++\npaths = [\"a\"]\n- body").err(),
            Some(RuleError::UnclosedFrontMatter)
        );
        assert!(
            matches!(parse_rule("+++\npath = [\"a\"]\n+++\n"), Err(RuleError::BadFrontMatter(m)) if m.contains("path"))
        );
        assert_eq!(
            parse_rule("+++\npaths = []\n+++\n").err(),
            Some(RuleError::NoPaths)
        );
        assert_eq!(
            parse_rule("+++\npaths = [\"a\"]\nblock = \"identity\"\n+++\n").err(),
            Some(RuleError::UnknownBlock("identity".into()))
        );
        for glob in ["!src/**", "src/[", "../x", "", "/", "a\u{202e}b"] {
            let text = format!("+++\npaths = [{}]\n+++\n", toml::Value::from(glob));
            assert!(
                matches!(parse_rule(&text), Err(RuleError::BadGlob { .. })),
                "{glob:?}"
            );
        }
        let many = format!(
            "+++\npaths = [{}]\n+++\n",
            vec!["\"a\""; MAX_GLOBS + 1].join(",")
        );
        assert_eq!(
            parse_rule(&many).err(),
            Some(RuleError::TooManyGlobs(MAX_GLOBS + 1))
        );
    }

    #[test]
    fn globs_are_gitignore_style() {
        let parsed =
            rule("+++\npaths = [\"src/payments/**\", \"*.sql\", \"/Makefile\", \"docs\"]\n+++\n");
        let m = |p: &str| parsed.matching_glob(Utf8Path::new(p));
        assert_eq!(m("src/payments/x.rs"), Some("src/payments/**"));
        assert_eq!(m("src/payments/deep/y.rs"), Some("src/payments/**"));
        assert_eq!(m("README.md"), None);
        assert_eq!(m("src/paymentsx/y.rs"), None);
        assert_eq!(m("db/m/001.sql"), Some("*.sql"));
        assert_eq!(m("Makefile"), Some("/Makefile"));
        assert_eq!(m("sub/Makefile"), None);
        assert_eq!(m("docs/guide.md"), Some("docs"));
        assert_eq!(m("a/docs/guide.md"), Some("docs"));
    }

    #[test]
    fn paths_are_made_relative_to_the_root() {
        let root = Utf8Path::new("/p");
        let cwd = Utf8Path::new("/p/src");
        assert_eq!(
            project_path(root, cwd, Utf8Path::new("payments/x.rs")).ok(),
            Some("src/payments/x.rs".into())
        );
        assert_eq!(
            project_path(root, cwd, Utf8Path::new("../README.md")).ok(),
            Some("README.md".into())
        );
        assert_eq!(
            project_path(root, cwd, Utf8Path::new("/p/a/./b/../c")).ok(),
            Some("a/c".into())
        );
        assert!(
            project_path(root, cwd, Utf8Path::new("../../etc/passwd"))
                .is_err_and(|e| e.contains("outside the project"))
        );
        assert!(project_path(root, cwd, Utf8Path::new("..")).is_err());
        assert!(relative_project_path("../x").is_err());
        assert!(relative_project_path("/x").is_err());
        assert!(relative_project_path("a\u{0}b").is_err());
        assert_eq!(
            relative_project_path("./src/x.rs").ok(),
            Some("src/x.rs".into())
        );
    }

    #[test]
    fn a_rule_in_a_sub_directory_is_relative_to_it() {
        let sub = ScopedRule {
            name: "api".into(),
            provenance: Arc::new(Provenance::new(PromptLayer::Project, Origin::Project, "x")),
            base: "services/api".into(),
            parsed: rule("+++\npaths = [\"src/**\"]\n+++\n- careful\n"),
        };
        assert_eq!(
            sub.matches(Utf8Path::new("services/api/src/a.rs")),
            Some("src/**")
        );
        assert_eq!(sub.matches(Utf8Path::new("src/a.rs")), None);
    }

    proptest::proptest! {
        /// Whatever mix of names, `.` and `..` a turn names, a path it
        /// accepts is inside the root: relative, never `..`, never empty.
        #[test]
        fn an_accepted_path_never_leaves_the_root(
            parts in proptest::collection::vec(proptest::prop_oneof!["\\.\\.", "\\.", "[a-c]{1,2}"], 0..8),
            absolute in proptest::bool::ANY,
        ) {
            let root = Utf8Path::new("/r/p");
            let cwd = Utf8Path::new("/r/p/a");
            let given = if absolute {
                format!("/r/p/{}", parts.join("/"))
            } else {
                parts.join("/")
            };
            if let Ok(rel) = project_path(root, cwd, Utf8Path::new(&given)) {
                proptest::prop_assert!(!rel.as_str().is_empty());
                proptest::prop_assert!(rel.is_relative());
                proptest::prop_assert!(rel.components().all(|c| matches!(c, Utf8Component::Normal(_))), "{rel}");
            }
            if let Ok(rel) = relative_project_path(&given) {
                proptest::prop_assert!(rel.components().all(|c| matches!(c, Utf8Component::Normal(_))), "{rel}");
            }
        }

        /// Whatever glob and body a rule file holds, parsing answers
        /// (never panics), and a rule it accepts has at least one glob and
        /// one of the two blocks; every glob it accepts is relative.
        #[test]
        fn parsing_never_panics(
            glob in "[a-z*?/.!\\[\\]{},\\\\-]{0,24}",
            body in "[ -~\n]{0,80}",
            prose in proptest::bool::ANY,
        ) {
            let block = if prose { "\nblock = \"operating-rules\"" } else { "" };
            let text = format!("+++\npaths = [{}]{block}\n+++\n{body}", toml::Value::from(glob.as_str()));
            if let Ok(parsed) = parse_rule(&text) {
                proptest::prop_assert!(!parsed.globs.is_empty());
                proptest::prop_assert_eq!(parsed.block, if prose { Block::OperatingRules } else { Block::Guardrails });
                proptest::prop_assert!(!parsed.globs[0].starts_with('!'));
                proptest::prop_assert!(!parsed.globs[0].split('/').any(|p| p == ".."));
                proptest::prop_assert_eq!(parsed.text, body);
            }
        }
    }
}
