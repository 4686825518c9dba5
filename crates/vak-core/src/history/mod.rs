//! Every prompt has a history: what the save path keeps,
//! and what `log`, `diff`, `revert` and `session diff` read back.
//!
//! A save (CLI or admin, through [`Core::save_block_by`]) keeps the file's
//! text before and after in the object store, appends one version record
//! per change, and keeps every contributed text of the resolution it
//! produced, so the digests a session freezes on it resolve.
//! [`keep_contributions`] is the one function that keeps a resolution's
//! texts; the session-creation path calls it before it writes a ledger.
//!
//! Digests: a version record's `before`/`after` are the *file's* sha256
//! (what `--if-digest` and `revert --to` take); a ledger descriptor's digest
//! is the sha256 of the *contributed* text (cleaned, trimmed).
//! Both are kept, each under its own digest.

use crate::{Core, EditTarget, Selectors};
use vak_prompt_blocks::{Block, Name};
use vak_prompt_compose::ResolvedPrompt;
use vak_prompt_history::unified_diff;

pub use vak_prompt_history::unified_diff as unified;
use vak_session::PromptLayerDescriptor;

pub use vak_prompt_history::{
    Action, History, HistoryError, MAX_OBJECT_BYTES, VersionRecord, Versions, is_digest,
};
pub use vak_store_file::{FileHistory, VersionLog};

mod session;
mod trust_preview;

pub use session::*;
pub use trust_preview::*;

/// The name `/etc/passwd` gives this process's user, else `uid N`: a
/// service or a container often runs without `$USER`.
fn user_of_process() -> Option<String> {
    let uid = vak_fs::owner_of("/proc/self").ok()?;
    // Bounded: a huge or endless file is not worth a label.
    let passwd = vak_fs::read_system_text("/etc/passwd", 1 << 20).unwrap_or_default();
    let named = passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let uid_field = fields.nth(1)?;
        (uid_field.parse::<u32>().ok()? == uid && !name.is_empty()).then(|| name.to_owned())
    });
    Some(named.unwrap_or_else(|| format!("uid {uid}")))
}

/// Who made a change, as a version record names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// The OS user running `vak` (`$USER`, else `$LOGNAME`).
    OsUser,
    /// An admin API request, by the id of the token it carried.
    AdminToken(String),
}

/// The most characters of an OS user name a version record keeps.
const MAX_USER_CHARS: usize = 64;

impl Who {
    /// The record's `who`: `user:<name>` or `admin-token:<id>`.
    pub fn label(&self) -> String {
        match self {
            Who::OsUser => {
                let name = ["USER", "LOGNAME"]
                    .into_iter()
                    .find_map(|key| std::env::var(key).ok().filter(|v| !v.is_empty()))
                    .or_else(user_of_process)
                    .unwrap_or_else(|| "unknown".to_owned());
                // From the environment, so bounded: no account name is this
                // long, and a record must fit the log's line bound.
                let name: String = match name.char_indices().nth(MAX_USER_CHARS) {
                    Some((cut, _)) => format!("{}…", &name[..cut]),
                    None => name,
                };
                format!("user:{name}")
            }
            Who::AdminToken(id) => format!("admin-token:{id}"),
        }
    }
}

/// The version log's name for `target`'s file: the path with its root (home
/// or project) canonicalised, so the same file has one history whichever
/// way the root was named on the command line. A home-side file of a store
/// that holds the home side is named relative to the home
/// (`$VAK_HOME/.vak/prompts/guardrails.md`), so every node sharing the store
/// lists the same history whatever its own `$VAK_HOME` is. A directory
/// sub-layer named through a symlink is named where it leads
/// ([`Core::real_target`]), as its saves are.
pub fn target_key(core: &Core, target: &EditTarget) -> String {
    let selectors = core.selectors();
    // A target the save would refuse has no history of its own: as named.
    let path = core
        .real_target(target)
        .map_or_else(|_| target.path(selectors), |real| real.path(selectors));
    file_key(core, &path, target.root(selectors))
}

/// The name the version log keeps the versions of the file `path` under
/// (a block file, a scoped rule, an imported file): in a store holding the
/// home side, a home-side file as every node names it (`$VAK_HOME/…`);
/// otherwise its path with `root` (the home or the project) spelled
/// canonically.
pub(crate) fn file_key(core: &Core, path: &camino::Utf8Path, root: &camino::Utf8Path) -> String {
    if core.store().home().is_some()
        && let Some(rel) = crate::home::home_side(&core.selectors().home, path)
    {
        return shared_home_key(&rel);
    }
    match (vak_fs::canonical(root), path.strip_prefix(root)) {
        (Ok(real), Ok(rest)) => real.join(rest.as_std_path()).to_string_lossy().into_owned(),
        _ => path.to_string(),
    }
}

/// [`target_key`] of the home-side file `rel` (relative to the home) in a
/// store that holds the home side.
fn shared_home_key(rel: &str) -> String {
    format!("$VAK_HOME/{rel}")
}

/// [`target_key`]'s two schemes, translated: the name a version record
/// the file store of one home wrote (a home-side file by its canonical
/// path) has in a store that holds the home side (relative to the home).
/// `vak store import` copies every record under it, so `log`, `diff` and
/// `revert --store` find a home-side file's versions after an import.
#[derive(Debug, Clone)]
pub struct SharedHomeKeys {
    /// The home as given and as canonicalised: a record names it the
    /// second way, or the first when it could not be canonicalised.
    roots: Vec<camino::Utf8PathBuf>,
}

impl SharedHomeKeys {
    /// The translation for the file store of `home`.
    pub fn of(home: &camino::Utf8Path) -> Self {
        let mut roots = Vec::with_capacity(2);
        if let Some(real) = vak_fs::canonical(home)
            .ok()
            .and_then(|p| camino::Utf8PathBuf::from_path_buf(p).ok())
        {
            roots.push(real);
        }
        roots.push(home.to_owned());
        SharedHomeKeys { roots }
    }

    /// `target` (a file-store record's) as a store holding the home side
    /// names it: a home-side file of this home relative to it, anything
    /// else (a project file, a gateway key) unchanged, as both name it.
    pub fn key_of(&self, target: &str) -> String {
        let path = camino::Utf8Path::new(target);
        self.roots
            .iter()
            .find_map(|root| crate::home::home_side(root, path))
            .map_or_else(|| target.to_owned(), |rel| shared_home_key(&rel))
    }

    /// `record` with its target renamed by [`key_of`](Self::key_of).
    pub fn record(&self, record: &VersionRecord) -> VersionRecord {
        VersionRecord {
            target: self.key_of(&record.target),
            ..record.clone()
        }
    }
}

/// The version log's name for one gateway prompt key: a
/// bot's `bots.json#/<bot>/prompts/<block>`, a chat's
/// `allowlist.json#/<bot>/<chat>/prompts/<block>`. The admin API's gateway
/// edits record under it; `vak prompts log --scope bot|chat` reads it.
pub fn gateway_key(bot: &Name, chat: Option<&Name>, block: Block) -> String {
    vak_prompt_blocks::GatewayKey {
        bot: bot.clone(),
        chat: chat.cloned(),
        block,
    }
    .to_string()
}

/// Keep every text whose digest a ledger frozen on `resolved` records, so
/// each resolves in the object store: the text each
/// descriptor names, the canonical text of the fingerprint, the agent
/// identity's text and each capability's contract line. Idempotent; the
/// session-creation path calls it before writing a ledger, `exec` before it
/// records an accepted drift, and the save path after every save. Returns
/// how many texts it kept.
///
/// # Errors
///
/// The first object that could not be written.
pub fn keep_contributions(
    history: &dyn History,
    resolved: &ResolvedPrompt,
) -> Result<usize, HistoryError> {
    let mut kept = 0;
    for block in &resolved.blocks {
        for contributor in &block.contributors {
            history.put_object(&contributor.text)?;
            kept += 1;
            // An imported file's descriptor names its own text.
            for imported in &contributor.imports {
                history.put_object(&imported.text)?;
                kept += 1;
            }
        }
    }
    history.put_object(&vak_session::fingerprint_text(&resolved.descriptors))?;
    kept += 1;
    if let Some(text) = &resolved.agent_text {
        history.put_object(text)?;
        kept += 1;
    }
    for capability in vak_prompt_compose::CATALOG {
        history.put_object(&capability.contract_line())?;
        kept += 1;
    }
    Ok(kept)
}

/// Before a change is written: check the version log can take its record,
/// keep `texts` (the value before, the value after) and every contributed
/// text of the resolution `before` it, so the
/// change's "before" and every session frozen on it resolve. The CLI and
/// admin save path calls this through [`Core::save_block_by`]; the admin
/// gateway edit calls it directly.
///
/// # Errors
///
/// The first text that could not be kept: refuse the change.
pub fn keep_before_change(
    history: &dyn History,
    texts: &[&str],
    before: &ResolvedPrompt,
) -> Result<(), HistoryError> {
    history.check_appendable()?;
    for text in texts {
        history.put_object(text)?;
    }
    keep_contributions(history, before)?;
    Ok(())
}

/// Write `text` as the file `path` (confined to `root`) the way a save
/// through vak writes a file that is not a block file (a scoped rule, an
/// imported file): its old and new texts kept first (a store that cannot
/// keep them, or cannot append a version, refuses the save: nothing
/// written), then `record` completed with the write's digests and appended
/// ([`record_change`]). The second value is the warning to give when the
/// record could not be appended after the write.
///
/// # Errors
///
/// [`crate::EditError::History`] before the write, [`crate::EditError::Save`]
/// for the write itself (a stale `if_digest`, a path that leads out).
pub(crate) fn write_versioned(
    core: &Core,
    (path, root): (&camino::Utf8Path, &camino::Utf8Path),
    (text, if_digest): (&str, Option<&str>),
    mut record: VersionRecord,
    who: &Who,
    resolved: &ResolvedPrompt,
) -> Result<(vak_prompt_loader::SaveOutcome, Option<String>), crate::EditError> {
    let history = core.store().history();
    let old = vak_prompt_loader::read_safely(path, root).ok().flatten();
    let texts: Vec<&str> = std::iter::once(text).chain(old.as_deref()).collect();
    keep_before_change(history, &texts, resolved)?;
    let outcome = vak_prompt_loader::save_atomic(path, root, text, if_digest)?;
    record.before.clone_from(&outcome.previous);
    record.after = Some(outcome.digest.clone());
    let unrecorded = record_change(history, record, who, resolved);
    Ok((outcome, unrecorded))
}

/// After a change is written: stamp `record` with the time and `who`,
/// append it to the version log and keep the contributed texts of the
/// resolution `after`. A failure is returned as the sentence to warn with
/// (the change is already written).
pub fn record_change(
    history: &dyn History,
    mut record: VersionRecord,
    who: &Who,
    after: &ResolvedPrompt,
) -> Option<String> {
    record.time = vak_session::now_rfc3339();
    record.who = who.label();
    let logged = history.append_version(&record);
    let kept = keep_contributions(history, after).map(|_| ());
    match logged.and(kept) {
        Ok(()) => None,
        Err(error) => Some(format!(
            "the change was written, but its history was not: {error}"
        )),
    }
}

/// The text kept under `digest`; `Ok(None)` when it was never kept (an old
/// ledger, written before objects existed: "text not kept").
///
/// # Errors
///
/// An object whose bytes were altered ([`HistoryError::Corrupt`]), never
/// served; a refused object file.
pub fn kept_text(history: &dyn History, digest: &str) -> Result<Option<String>, HistoryError> {
    history.find_object(digest)
}

/// The text of one version of a file: `None` digest is "no file" (empty).
///
/// # Errors
///
/// As [`History::get_object`]: not kept, altered, refused.
pub fn version_text(history: &dyn History, digest: Option<&str>) -> Result<String, HistoryError> {
    match digest {
        None | Some("") => Ok(String::new()),
        Some(digest) => history.get_object(digest),
    }
}

/// Every digest a target's log names (each record's before and after),
/// newest first, each once.
pub fn known_digests(records: &[VersionRecord]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for r in records.iter().rev() {
        for d in [r.after.as_deref(), r.before.as_deref()]
            .into_iter()
            .flatten()
        {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// The text a revert of `target` (a file's path or a gateway key) to `to`
/// saves back: only a version its own log records, so a revert cannot
/// copy another block's text, or any text the store happens to keep, into
/// it.
///
/// # Errors
///
/// [`HistoryError::BadDigest`] for anything but a sha256,
/// [`HistoryError::NotAVersion`], else as [`version_text`].
pub fn revert_text(
    history: &dyn History,
    records: &[VersionRecord],
    target: &str,
    to: &str,
) -> Result<String, HistoryError> {
    if !is_digest(to) {
        return Err(HistoryError::BadDigest(to.to_owned()));
    }
    if !known_digests(records).contains(&to) {
        return Err(HistoryError::NotAVersion {
            digest: to.to_owned(),
            target: target.to_owned(),
        });
    }
    history.get_object(to)
}

/// A file's (or gateway key's) text as it is now, with its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentText {
    /// Lowercase hex sha256 of the text's bytes.
    pub digest: String,
    /// The text.
    pub text: String,
}

impl CurrentText {
    /// `text` and its digest.
    pub fn of(text: &str) -> Self {
        CurrentText {
            digest: vak_prompt_blocks::sha256_hex(text.as_bytes()),
            text: text.to_owned(),
        }
    }
}

/// A gateway key's text as it is now (`entry_path` in `file` of `home`);
/// `None` when the key is not set.
///
/// # Errors
///
/// The gateway file cannot be read, or is not the shape it should be.
pub fn gateway_current_text(
    home: &camino::Utf8Path,
    file: vak_prompt_loader::GatewayFile,
    entry_path: &[&str],
    block: Block,
) -> Result<Option<CurrentText>, vak_prompt_loader::GatewayError> {
    Ok(match vak_prompt_loader::read_gateway(home, file)? {
        Some(doc) => doc.prompt(entry_path, block)?.map(CurrentText::of),
        None => None,
    })
}

/// `target`'s file as it is now; `None` when there is none.
///
/// # Errors
///
/// A file a save would refuse to read (a symlink, a FIFO, over the size
/// limit, outside its root) or one that is not UTF-8: said, naming it,
/// rather than shown as "no file".
pub fn current_text(
    core: &Core,
    target: &EditTarget,
) -> Result<Option<CurrentText>, vak_prompt_loader::SaveError> {
    let path = target.path(core.selectors());
    let Some((digest, bytes)) =
        vak_prompt_loader::current_version(&path, target.root(core.selectors()))?
    else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|e| vak_prompt_loader::SaveError::Io {
        action: "read as UTF-8 text",
        path,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })?;
    Ok(Some(CurrentText { digest, text }))
}

/// [`version_text`], where the version that is `current` is read from it:
/// a text edited by hand (or by a `git pull`) was never recorded, yet "the
/// file as it is now" is always there to compare.
///
/// # Errors
///
/// As [`version_text`], for any other version.
pub fn text_or_current(
    history: &dyn History,
    digest: Option<&str>,
    current: Option<&CurrentText>,
) -> Result<String, HistoryError> {
    match (digest, current) {
        (Some(digest), Some(current)) if digest == current.digest => Ok(current.text.clone()),
        _ => version_text(history, digest),
    }
}

/// One version of a file as `log` lists it.
pub fn versions(core: &Core, target: &EditTarget) -> Result<Versions, HistoryError> {
    core.store()
        .history()
        .versions_of(&target_key(core, target))
}

/// Two versions of a file by digest; `None` is "no file".
pub type DiffPair = (Option<String>, Option<String>);

/// Which two versions `diff` compares: `from`/`to` digests, or by default
/// the last recorded change's before and after; `current` is the target as
/// it is now. `Ok(None)` when there is no recorded change and no digest
/// was given.
///
/// # Errors
///
/// Reading the log.
pub fn diff_pair(
    core: &Core,
    target: &EditTarget,
    from: Option<&str>,
    to: Option<&str>,
    current: Option<&CurrentText>,
) -> Result<Option<DiffPair>, HistoryError> {
    let last = versions(core, target)?.records.pop();
    Ok(pair_of(last.as_ref(), from, to, || {
        current.map(|c| c.digest.clone())
    }))
}

/// The rule of [`diff_pair`] for any target (a layer file or a gateway
/// key): `last` is its last recorded change, `current` its digest now.
pub fn pair_of(
    last: Option<&VersionRecord>,
    from: Option<&str>,
    to: Option<&str>,
    current: impl FnOnce() -> Option<String>,
) -> Option<DiffPair> {
    match (from, to, last) {
        (None, None, None) => None,
        (None, None, Some(last)) => Some((last.before.clone(), last.after.clone())),
        (Some(from), None, _) => Some((Some(from.to_owned()), current())),
        (from, Some(to), last) => Some((
            from.map(str::to_owned)
                .or_else(|| last.and_then(|l| l.before.clone())),
            Some(to.to_owned()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::sha256_hex;

    #[test]
    fn gateway_keys_name_the_file_and_entry() {
        use vak_prompt_blocks::NameKind;
        let bot = Name::new(NameKind::Bot, "helpdesk").unwrap();
        let chat = Name::new(NameKind::Chat, "ops-room").unwrap();
        assert_eq!(
            gateway_key(&bot, None, Block::Identity),
            "bots.json#/helpdesk/prompts/identity"
        );
        assert_eq!(
            gateway_key(&bot, Some(&chat), Block::Guardrails),
            "allowlist.json#/helpdesk/ops-room/prompts/guardrails"
        );
    }

    #[test]
    fn a_winner_that_moved_layer_is_one_change_with_both_sources() {
        use vak_prompt_blocks::{Origin, PromptLayer, Provenance};
        let dir = tempfile::tempdir().unwrap();
        let history = FileHistory::new(camino::Utf8Path::from_path(dir.path()).unwrap());
        let shared = Provenance::new(PromptLayer::Shared, Origin::Home, "/h/identity.md");
        let project = Provenance::new(PromptLayer::Project, Origin::Project, "/p/identity.md");
        let rule = Provenance::new(PromptLayer::Project, Origin::Project, "/p/guardrails.md");
        let home_rule = Provenance::new(PromptLayer::Shared, Origin::Home, "/h/guardrails.md");
        for text in ["You are calm.", "You are loud.", "- a", "- b"] {
            history.put_object(text).unwrap();
        }
        let old = [
            PromptLayerDescriptor::of(Block::Identity, &shared, "You are calm."),
            PromptLayerDescriptor::of(Block::Guardrails, &rule, "- a"),
        ];
        let new = [
            PromptLayerDescriptor::of(Block::Identity, &project, "You are loud."),
            PromptLayerDescriptor::of(Block::Guardrails, &home_rule, "- b"),
        ];
        let changes = contract_changes(&history, &old, &new);
        let kinds: Vec<_> = changes.iter().map(|c| (c.block.as_str(), c.kind)).collect();
        // Identity has one winner: one change. Guardrails accumulate: a
        // contributor gone and another come are two.
        assert_eq!(
            kinds,
            [
                ("identity", TextChangeKind::Moved),
                ("guardrails", TextChangeKind::Removed),
                ("guardrails", TextChangeKind::Added)
            ]
        );
        let moved = &changes[0];
        assert_eq!(moved.frozen_source, Some("/h/identity.md".into()));
        assert_eq!(moved.source, Some("/p/identity.md".into()));
        assert_eq!(
            moved.frozen_layer.as_deref(),
            Some(PromptLayer::Shared.wire_name())
        );
        assert_eq!(moved.layer, PromptLayer::Project.wire_name());
        let diff = moved.diff.as_ref().unwrap();
        assert!(
            diff.contains("-You are calm.") && diff.contains("+You are loud."),
            "{diff}"
        );
        // The same text moving layer is still reported: the source changed.
        let same = [PromptLayerDescriptor::of(
            Block::Identity,
            &project,
            "You are calm.",
        )];
        let changes = contract_changes(&history, &old[..1], &same);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].kind, TextChangeKind::Moved);
        assert_eq!(changes[0].diff.as_deref(), Ok(""));
    }

    /// A home and a trusted project whose session is resumed from `sub/`:
    /// guardrails in the home, the project root and (empty here) `sub/`;
    /// an identity at the root; skills in the home and the project.
    struct Scene {
        _dir: tempfile::TempDir,
        root: camino::Utf8PathBuf,
    }

    impl Scene {
        fn new() -> Scene {
            let dir = tempfile::tempdir().unwrap();
            let root =
                camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
            let scene = Scene { _dir: dir, root };
            scene.write("home/.vak/prompts/guardrails.md", "- home rule\n");
            scene.write("home/.vak/skills/aa/SKILL.md", "Skill aa.\n");
            scene.write("home/.vak/skills/zz/SKILL.md", "Skill zz.\n");
            scene.write("proj/.vak/skills/mm/SKILL.md", "Skill mm.\n");
            scene.write("proj/.vak/prompts/guardrails.md", "- root rule\n");
            scene.write("proj/.vak/prompts/identity.md", "You are the root.\n");
            std::fs::create_dir_all(scene.root.join("proj/.git")).unwrap();
            std::fs::create_dir_all(scene.root.join("proj/sub/src")).unwrap();
            vak_prompt_trust::TrustStore::load(&scene.home())
                .unwrap()
                .trust(&scene.root.join("proj"))
                .unwrap();
            scene
        }

        fn home(&self) -> camino::Utf8PathBuf {
            self.root.join("home")
        }

        fn write(&self, rel: &str, text: &str) {
            let path = self.root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        /// Move `from` to `to` (both under the scene), making `to`'s directory.
        fn mv(&self, from: &str, to: &str) {
            let to = self.root.join(to);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::rename(self.root.join(from), to).unwrap();
        }

        fn core(&self, home: &camino::Utf8Path) -> Core {
            let sub = self.root.join("proj/sub");
            Core::open(Selectors::discover(home, &sub).unwrap()).unwrap()
        }
    }

    /// What a session created now freezes (as `vak_gateway::freeze` does).
    /// `vak session diff` and `vak exec --session` agree on every kind of
    /// edit: the diff is empty exactly when the drift check finds nothing,
    /// and each edit shows as the change it is.
    #[test]
    fn session_changes_are_empty_exactly_when_there_is_no_drift() {
        type Edit = fn(&Scene, &mut vak_session::FrozenContract) -> Option<camino::Utf8PathBuf>;
        let moved = TextChangeKind::Moved;
        let cases: [(&str, Edit, &[TextChangeKind]); 11] = [
            ("nothing", |_, _| None, &[]),
            (
                "edit",
                |s, _| {
                    s.write("proj/.vak/prompts/guardrails.md", "- root rule, edited\n");
                    None
                },
                &[TextChangeKind::Changed],
            ),
            (
                "move from the root into a directory layer, same text",
                |s, _| {
                    s.mv(
                        "proj/.vak/prompts/guardrails.md",
                        "proj/sub/.vak/prompts/guardrails.md",
                    );
                    None
                },
                &[moved],
            ),
            (
                "move from the home into a directory layer, same text",
                |s, _| {
                    s.mv(
                        "home/.vak/prompts/guardrails.md",
                        "proj/sub/.vak/prompts/guardrails.md",
                    );
                    None
                },
                &[moved],
            ),
            (
                "a winner moved into a directory layer, same text",
                |s, _| {
                    s.mv(
                        "proj/.vak/prompts/identity.md",
                        "proj/sub/.vak/prompts/identity.md",
                    );
                    None
                },
                &[moved],
            ),
            (
                "reorder: a skill moved from the home to the project",
                |s, _| {
                    s.mv("home/.vak/skills/zz", "proj/.vak/skills/zz");
                    None
                },
                &[TextChangeKind::Reordered, TextChangeKind::Reordered],
            ),
            (
                "add",
                |s, _| {
                    s.write("proj/sub/.vak/prompts/guardrails.md", "- sub rule\n");
                    None
                },
                &[TextChangeKind::Added],
            ),
            (
                "remove",
                |s, _| {
                    std::fs::remove_file(s.root.join("home/.vak/prompts/guardrails.md")).unwrap();
                    None
                },
                &[TextChangeKind::Removed],
            ),
            (
                "frozen prefix edited in the ledger",
                |_, contract| {
                    contract.prefix.push_str("\nand obey the ledger");
                    None
                },
                &[TextChangeKind::Changed],
            ),
            (
                "layer list emptied in the ledger",
                |_, contract| {
                    contract.prompt_layers.clear();
                    None
                },
                &[TextChangeKind::Removed],
            ),
            (
                "the home moved: the same texts at other paths",
                |s, _| {
                    std::fs::rename(s.home(), s.root.join("home2")).unwrap();
                    Some(s.root.join("home2"))
                },
                &[],
            ),
        ];
        for (name, edit, want) in cases {
            let scene = Scene::new();
            let core = scene.core(&scene.home());
            let resolved = core.resolve().unwrap();
            keep_contributions(core.store().history(), &resolved).unwrap();
            let mut contract = resolved.freeze(None);
            let home = edit(&scene, &mut contract).unwrap_or_else(|| scene.home());
            let current = scene.core(&home).resolve().unwrap();
            let drift = session_drift(&contract, &current);
            let changes = session_changes(core.store().history(), &contract, &current);
            assert_eq!(
                changes.is_empty(),
                !drift.is_drifted(),
                "{name}: {drift}\n{changes:#?}"
            );
            let kinds: Vec<_> = changes.iter().map(|c| c.kind).collect();
            assert_eq!(kinds, want, "{name}: {drift}\n{changes:#?}");
            for c in &changes {
                assert!(c.diff.is_ok(), "{name}: every text was kept: {c:?}");
                if c.kind == moved {
                    assert_ne!(
                        (&c.frozen_layer, &c.frozen_source),
                        (&Some(c.layer.clone()), &c.source),
                        "{name}: a move names both places"
                    );
                }
            }
        }
    }

    #[test]
    fn a_file_store_key_translates_to_the_shared_stores_for_home_side_files_only() {
        use crate::{Scope, SubLayer};
        let dir = tempfile::tempdir().unwrap();
        let real = camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(real.join("home/.vak/prompts")).unwrap();
        std::fs::create_dir_all(real.join("proj")).unwrap();
        // The home named through a symlink: the file store's key is the
        // canonical path, and the translation still finds it.
        std::os::unix::fs::symlink(real.join("home"), real.join("link")).unwrap();
        let home = real.join("link");
        let core = Core::open(Selectors::new(&home, real.join("proj"))).unwrap();
        let keys = SharedHomeKeys::of(&home);
        for (scope, sub) in [
            (Scope::Shared, SubLayer::Base),
            (
                Scope::Shared,
                SubLayer::Agent(Name::new(vak_prompt_blocks::NameKind::Role, "reviewer").unwrap()),
            ),
        ] {
            let target = EditTarget::new(scope, sub, Block::Guardrails).unwrap();
            let file_key = target_key(&core, &target);
            assert!(
                file_key.starts_with(real.join("home").as_str()),
                "{file_key}"
            );
            let rel = file_key
                .strip_prefix(&format!("{}/", real.join("home")))
                .unwrap();
            assert_eq!(keys.key_of(&file_key), format!("$VAK_HOME/{rel}"));
        }
        // A project file, a gateway key and a path that is not a home-side file
        // are named alike in both stores.
        let project = EditTarget::new(Scope::Project, SubLayer::Base, Block::Guardrails).unwrap();
        let project_key = target_key(&core, &project);
        assert_eq!(keys.key_of(&project_key), project_key);
        let gateway = "bots.json#/helpdesk/prompts/identity";
        assert_eq!(keys.key_of(gateway), gateway);
        let other = real.join("home/.vak/prompts/notes.txt");
        assert_eq!(keys.key_of(other.as_str()), other.as_str());
        // A file a block file may import travels with the home side, so it
        // is named as the shared store names it.
        let imported = real.join("home/.vak/prompts/parts/notes.md");
        assert_eq!(
            keys.key_of(imported.as_str()),
            "$VAK_HOME/.vak/prompts/parts/notes.md"
        );
    }

    fn descriptor() -> impl proptest::strategy::Strategy<Value = PromptLayerDescriptor> {
        use proptest::prelude::*;
        (
            prop::sample::select(vec![Block::Identity, Block::Guardrails, Block::Skills]),
            prop::sample::select(vec!["shared", "project", "surface"]),
            prop::sample::select(vec![
                "/h/.vak/prompts/x.md",
                "/p/.vak/prompts/x.md",
                "/p/sub/.vak/prompts/x.md",
                "/p/.vak/skills/s1/SKILL.md",
                "/h/.vak/skills/s2/SKILL.md",
            ]),
            "[ab]{0,2}",
        )
            .prop_map(|(block, layer, source, text)| PromptLayerDescriptor {
                block: block.wire_name().to_owned().into(),
                layer: layer.to_owned().into(),
                source: Some(vak_prompt_blocks::Source::from_wire(
                    layer,
                    block.wire_name(),
                    source,
                )),
                digest: sha256_hex(&text),
                bytes: text.len(),
                signed_by: None,
            })
    }

    proptest::proptest! {
        /// A rotation's text diff pairs as the drift check that rotated
        /// it: empty exactly when the check found no change of text or
        /// place (it adds no diff for a reorder alone).
        #[test]
        fn contract_changes_are_empty_exactly_when_drift_finds_no_change(
            old in proptest::collection::vec(descriptor(), 1..10),
            new in proptest::collection::vec(descriptor(), 0..10),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let history = FileHistory::new(camino::Utf8Path::from_path(dir.path()).unwrap());
            let changes = contract_changes(&history, &old, &new);
            let drift = vak_prompt_drift::diff(&old, &new);
            let changed = drift
                .changes
                .iter()
                .any(|c| c.kind != vak_session::ChangeKind::Reordered);
            proptest::prop_assert_eq!(changes.is_empty(), !changed, "{}", drift);
        }
    }

    #[test]
    fn who_labels() {
        assert_eq!(Who::AdminToken("ops".into()).label(), "admin-token:ops");
        assert!(Who::OsUser.label().starts_with("user:"));
        // Without `$USER`, the process's own user by name (or uid): one
        // field of passwd, never a line or a separator.
        let name = user_of_process().expect("a user");
        assert!(!name.is_empty() && !name.contains([':', '\n']), "{name}");
    }

    #[test]
    fn version_text_of_no_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let home = camino::Utf8Path::from_path(dir.path()).unwrap();
        let history = FileHistory::new(home);
        assert_eq!(version_text(&history, None).unwrap(), "");
        let missing = sha256_hex("x");
        assert!(
            version_text(&history, Some(&missing))
                .unwrap_err()
                .is_not_kept()
        );
    }

    #[test]
    fn saves_resets_and_reverts_are_recorded_and_every_text_resolves() {
        use crate::{Scope, SubLayer};
        use vak_prompt_blocks::Block;
        let dir = tempfile::tempdir().unwrap();
        let root = camino::Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".vak/prompts")).unwrap();
        std::fs::write(home.join(".vak/prompts/guardrails.md"), "- old rule\r\n").unwrap();
        std::fs::create_dir_all(root.join("proj")).unwrap();
        let core = Core::open(Selectors::new(&home, root.join("proj"))).unwrap();
        let target = EditTarget::new(Scope::Shared, SubLayer::Base, Block::Guardrails).unwrap();
        let first = core.save_block(&target, "- one\n", None).unwrap();
        assert!(first.unrecorded.is_none(), "{:?}", first.unrecorded);
        core.save_block(&target, "- two\n", None).unwrap();
        let reverted = core
            .revert_block(
                &target,
                &first.outcome.digest,
                None,
                &Who::AdminToken("t".into()),
                crate::Unchecked::Refuse,
            )
            .unwrap();
        assert_eq!(reverted.outcome.digest, first.outcome.digest);
        core.reset_block(&target, None).unwrap();
        let records = versions(&core, &target).unwrap().records;
        let actions: Vec<_> = records.iter().map(|r| r.action).collect();
        assert_eq!(
            actions,
            [Action::Save, Action::Save, Action::Revert, Action::Reset]
        );
        assert_eq!(records[2].who, "admin-token:t");
        // The pre-existing text (CRLF and all) resolves as the first "before".
        assert_eq!(
            version_text(core.store().history(), records[0].before.as_deref()).unwrap(),
            "- old rule\r\n"
        );
        for r in &records {
            version_text(core.store().history(), r.after.as_deref()).unwrap();
        }
        // The resolution after a save has every descriptor digest kept.
        for d in &first.preview.after.descriptors {
            assert!(
                kept_text(core.store().history(), &d.digest)
                    .unwrap()
                    .is_some(),
                "{d:?}"
            );
        }
        // Default diff: the last change.
        let (from, to) = diff_pair(&core, &target, None, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(from, Some(first.outcome.digest.clone()));
        assert_eq!(to, None);
    }
}
