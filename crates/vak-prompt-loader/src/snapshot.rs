//! One read of every input a question can reach, shared by every chain
//! chosen from it.

use std::collections::HashMap;
use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::Block;

use crate::LoaderError;
use crate::chain::{LoadRequest, LoadedChain, load_in};
use crate::confine::OpenedDirs;
use crate::gateway::{GatewayFile, GatewayRead, GatewayTables};
use crate::safe_read::ReadRefusal;

/// One block file of a directory layer: the block, its file name, and what
/// reading it answered (its text, absent, or refused).
pub(crate) type BlockFile = (
    Block,
    &'static str,
    Result<Option<vak_prompt_blocks::SharedText>, ReadRefusal>,
);

/// What one directory layer's read answered: each editable block's file,
/// read, absent or refused.
#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "the four files are held inline on purpose: boxing them is the allocation per directory this saves"
)]
pub(crate) enum DirRead {
    /// The directory (or its root) is not there.
    Missing,
    /// The directory leads outside its root, or could not be opened.
    Refused(ReadRefusal),
    /// Its block files, in [`Block::EDITABLE`] order (held inline: one
    /// allocation fewer for each directory layer).
    Files([BlockFile; Block::EDITABLE.len()]),
}

/// The levels of a working directory, as the chain reads them.
#[derive(Debug, Clone)]
pub(crate) struct Levels {
    /// The directory levels below the root down to the working directory.
    pub(crate) levels: Vec<Utf8PathBuf>,
    /// Directories on the way the walk does not look in that hold a layer.
    pub(crate) unread: Vec<Utf8PathBuf>,
    /// The home, when it lies on the way.
    pub(crate) home_dir: Option<Utf8PathBuf>,
}

/// Every input the chains of one question read, each read once: the
/// home's and each project's layer files, interop files, configs, skills,
/// `SYSTEM.md`, the gateway files and the directory levels on the way to
/// each working directory. Every read goes through the loader's one
/// confined reader (each root opened once, [`OpenedDirs`]), bounded and
/// refused exactly as [`load_chain`](crate::load_chain) reads and refuses;
/// what a read answered (text, absence or refusal) is kept with the path it
/// was read from, so a chain loaded from the snapshot carries the same
/// provenance and the same `Skipped` entries as a load of its own.
///
/// [`Snapshot::load`] chooses a chain: it reads what no earlier chain of
/// this snapshot read, and answers the rest from memory, so a check that
/// budgets every role × surface × directory × gateway chat of ten projects
/// reads each file once and parses each config and each gateway file
/// once. A snapshot is the inputs as they were when read: it belongs to
/// one question (a save's budget check, a `vak trust`), and a later
/// question takes a new one. It holds directory handles, so it stays on
/// the thread that made it.
#[derive(Default)]
pub struct Snapshot {
    /// Each layer root, opened once, and whether it was opened as a
    /// project (whose nested repositories a link may not enter).
    pub(crate) roots: Vec<(Utf8PathBuf, bool, Option<OpenedDirs>)>,
    /// What this snapshot read itself.
    pub(crate) reads: SnapshotReads,
    /// What an earlier snapshot of the same inputs read, answered from
    /// before reading ([`Snapshot::sharing`]).
    pub(crate) shared: Option<Arc<SnapshotReads>>,
    /// Whether it serves one chain only ([`Snapshot::once`]): a chain
    /// reads each file once anyway, so no text is kept (a copy of each).
    pub(crate) once: bool,
    /// The parsed gateway texts of the owner that opened it
    /// ([`Snapshot::once_sharing`]).
    pub(crate) tables: Option<GatewayTables>,
}

/// What a snapshot read, each read with what it answered, without the
/// directory handles it read through: what an owner answering many chains
/// of the same inputs keeps between snapshots while nothing changed (the
/// gateway's prompt cache, which drops it with its resolutions when its
/// watch reports a change). `Send` and `Sync`, unlike a snapshot.
///
/// Paths are keys as strings: the loader spells each path one way, and a
/// `Path` hashes and compares component by component.
#[derive(Debug, Clone, Default)]
pub struct SnapshotReads {
    /// Files read alone in their directory, by path, with the root they
    /// were confined to (a read is kept for the root it was judged under).
    pub(crate) files: HashMap<String, (Utf8PathBuf, Result<Option<String>, ReadRefusal>)>,
    /// Directory layers, by directory, with the root they were confined to.
    pub(crate) dirs: HashMap<String, (Utf8PathBuf, DirRead)>,
    /// Configs parsed, by path: each text is parsed once per snapshot.
    pub(crate) configs: HashMap<String, Result<Arc<toml::Table>, String>>,
    /// Skill directories listed, by `skills/` directory.
    pub(crate) skill_names: HashMap<String, Option<Vec<String>>>,
    /// The levels of each (project, working directory).
    pub(crate) levels: HashMap<(String, String), Levels>,
    /// The gateway files, read and parsed once each.
    pub(crate) gateway: HashMap<GatewayFile, GatewayRead>,
    /// The managed layer, read once: `None` until the first chain asks.
    pub(crate) managed: Option<Result<Option<Arc<crate::ManagedLayer>>, crate::ManagedError>>,
    /// The scoped rules of each (home, project), read once.
    pub(crate) rules: HashMap<(String, Option<String>), Arc<crate::rules::RuleSet>>,
}

impl SnapshotReads {
    fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.dirs.is_empty()
            && self.configs.is_empty()
            && self.skill_names.is_empty()
            && self.levels.is_empty()
            && self.gateway.is_empty()
            && self.managed.is_none()
            && self.rules.is_empty()
    }

    /// `self` with `newer`'s reads added (each key is read once, so no
    /// key is in both).
    fn extended(mut self, newer: SnapshotReads) -> SnapshotReads {
        self.files.extend(newer.files);
        self.dirs.extend(newer.dirs);
        self.configs.extend(newer.configs);
        self.skill_names.extend(newer.skill_names);
        self.levels.extend(newer.levels);
        self.gateway.extend(newer.gateway);
        self.managed = self.managed.or(newer.managed);
        self.rules.extend(newer.rules);
        self
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("roots", &self.roots.len())
            .field("files", &self.reads.files.len())
            .field("dirs", &self.reads.dirs.len())
            .field("configs", &self.reads.configs.len())
            .field("shared", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// A snapshot that has read nothing yet.
    pub fn new() -> Self {
        Snapshot::default()
    }

    /// A snapshot for one chain ([`load_chain`](crate::load_chain)): it
    /// reads exactly as any other, but keeps no file's text, which one
    /// chain never asks for twice.
    pub(crate) fn once() -> Self {
        Snapshot {
            once: true,
            ..Snapshot::default()
        }
    }

    /// A snapshot that reads `text` as the file `path` (judged under
    /// `root`, the prompts directory it lies in) instead of what is on disk:
    /// what a save's check of a file block files import composes every
    /// chain with. Only an imported file is read through it; a block file
    /// is read with its directory.
    pub fn with_text(path: &Utf8Path, root: &Utf8Path, text: &str) -> Self {
        let mut snapshot = Snapshot::new();
        snapshot.reads.files.insert(
            path.as_str().to_owned(),
            (root.to_owned(), Ok(Some(text.to_owned()))),
        );
        snapshot
    }

    /// A snapshot for one chain that takes the gateway files' tables from
    /// `tables`, kept by an owner that opens many snapshots of one home
    /// (the gateway's prompt cache): a chat's chain read after the cache
    /// dropped it looks its entry up in the table parsed before rather than
    /// parsing a 1 MB `allowlist.json` again. No file's text is kept.
    pub fn once_sharing(tables: &GatewayTables) -> Self {
        Snapshot {
            once: true,
            tables: Some(tables.clone()),
            ..Snapshot::default()
        }
    }

    /// A snapshot that answers from `shared` (what an earlier snapshot of
    /// the same inputs read) before reading, keeps what it reads itself,
    /// and takes the gateway files' tables from `tables`: what the
    /// gateway's prompt cache loads a chain with after a miss, so a chat
    /// read after another of the same project reads only what the other
    /// did not. The owner must know that nothing `shared` read has changed
    /// since (the cache drops it whenever its watch reports a change).
    pub fn sharing(tables: &GatewayTables, shared: Option<Arc<SnapshotReads>>) -> Self {
        Snapshot {
            shared,
            tables: Some(tables.clone()),
            ..Snapshot::default()
        }
    }

    /// Everything this snapshot and the one it shared from read; `None`
    /// when it read nothing of its own (the shared reads are then all
    /// there is, and the owner keeps those).
    pub fn into_reads(self) -> Option<Arc<SnapshotReads>> {
        if self.reads.is_empty() {
            return None;
        }
        Some(Arc::new(match self.shared {
            Some(shared) => SnapshotReads::clone(&shared).extended(self.reads),
            None => self.reads,
        }))
    }

    /// A read kept, by this snapshot or the one it shares from.
    pub(crate) fn kept<'s, V>(
        &'s self,
        map: impl Fn(&'s SnapshotReads) -> Option<&'s V>,
    ) -> Option<&'s V> {
        map(&self.reads).or_else(|| self.shared.as_deref().and_then(map))
    }

    /// The chain `request` selects, its inputs read once per snapshot.
    ///
    /// # Errors
    ///
    /// As [`load_chain`](crate::load_chain): no such project, no such
    /// role; bad files are skipped and reported in the result.
    pub fn load(&mut self, request: &LoadRequest) -> Result<LoadedChain, LoaderError> {
        load_in(self, request)
    }

    /// What the chat `chat` of `bot` contributes on its own: its
    /// `allowlist.json` entry's prompts, as a chain that selects it loads
    /// them (the same reads, checks and provenance), without the rest of
    /// the chain. A budget check that bounds a chat's chains from its
    /// bot's asks this once per chat.
    pub fn chat_contributions(
        &mut self,
        home: &Utf8Path,
        bot: &vak_prompt_blocks::Name,
        chat: &vak_prompt_blocks::Name,
    ) -> Vec<crate::Contribution> {
        let (mut contributions, mut skipped) = (Vec::new(), Vec::new());
        crate::gateway::load_gateway_files(
            home,
            self,
            (Some(bot), Some(chat)),
            &[crate::GatewayFile::Allowlist],
            (&mut contributions, &mut skipped),
        );
        contributions
    }

    /// The gateway file `file` of `home`, parsed, as every chain of this
    /// snapshot reads it (read and parsed once); `None` when there is none
    /// or it is refused (a chain that reads it says why). What a check
    /// lists the gateway's bots and chats from.
    pub fn gateway_table(
        &mut self,
        home: &Utf8Path,
        file: crate::GatewayFile,
    ) -> Option<Arc<crate::GatewayTable<'static>>> {
        crate::gateway::kept_table(home, self, file)
    }

    /// The directories opened under `root`, opening it the first time it
    /// is asked for. `Ok(None)` when the root does not exist.
    pub(crate) fn root(
        &mut self,
        root: &Utf8Path,
        project: bool,
    ) -> Result<Option<&mut OpenedDirs>, ReadRefusal> {
        // Compared as strings: the loader spells each root one way.
        let at = match self
            .roots
            .iter()
            .position(|(r, p, _)| r.as_str() == root.as_str() && *p == project)
        {
            Some(at) => at,
            None => {
                let dirs = OpenedDirs::open(root).map_err(|e| ReadRefusal::Io(e.to_string()))?;
                // A project's nested repositories are projects of their own:
                // a link into one is refused like a link out of the project.
                let dirs = dirs.map(|d| if project { d.project() } else { d });
                self.roots.push((root.to_owned(), project, dirs));
                self.roots.len() - 1
            }
        };
        Ok(self.roots[at].2.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::SurfaceKind;

    /// The chain of `project` on the CLI surface, no bot, chat, role or
    /// working directory.
    fn cli_request(home: &Utf8Path, project: Utf8PathBuf) -> LoadRequest {
        LoadRequest {
            home: home.to_owned(),
            project,
            surface: SurfaceKind::Cli,
            bot: None,
            chat: None,
            agent: None,
            workdir: None,
        }
    }

    fn write(path: &Utf8Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The gateway's tables as a check lists its bots and chats: parsed
    /// once and shared with the chains of the same snapshot; a file that
    /// links out of the home, or is not UTF-8, gives no table, and a chain
    /// of the snapshot still says why.
    #[test]
    fn a_gateway_table_is_read_once_and_a_refused_file_gives_none() {
        use vak_prompt_blocks::{Name, NameKind};
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        let (home, project) = (root.join("home"), root.join("project"));
        std::fs::create_dir_all(project.join(".git")).unwrap();
        write(
            &home.join(".vak/gateway/bots.json"),
            r#"{"helpdesk": {"prompts": {"guardrails": "- bot rule"}}}"#,
        );
        write(&root.join("outside.json"), r#"{"helpdesk": {"42": {}}}"#);
        std::os::unix::fs::symlink(
            root.join("outside.json"),
            home.join(".vak/gateway/allowlist.json"),
        )
        .unwrap();
        let mut snapshot = Snapshot::new();
        let bots = snapshot
            .gateway_table(&home, crate::GatewayFile::Bots)
            .unwrap();
        assert_eq!(bots.bots().collect::<Vec<_>>(), ["helpdesk"]);
        let again = snapshot
            .gateway_table(&home, crate::GatewayFile::Bots)
            .unwrap();
        assert!(Arc::ptr_eq(&bots, &again), "parsed once");
        assert!(
            snapshot
                .gateway_table(&home, crate::GatewayFile::Allowlist)
                .is_none()
        );
        let chain = snapshot
            .load(&LoadRequest {
                surface: SurfaceKind::Chat,
                bot: Some(Name::new(NameKind::Bot, "helpdesk").unwrap()),
                chat: Some(Name::new(NameKind::Chat, "42").unwrap()),
                ..cli_request(&home, project.clone())
            })
            .unwrap();
        assert!(chain.contributions.iter().any(|c| c.text == "- bot rule"));
        assert!(
            chain
                .skipped
                .iter()
                .any(|s| s.to_string().contains("allowlist.json")),
            "{:?}",
            chain.skipped
        );
        // Not UTF-8: no table either.
        std::fs::remove_file(home.join(".vak/gateway/allowlist.json")).unwrap();
        std::fs::write(home.join(".vak/gateway/allowlist.json"), b"{\"a\xff\": {}}").unwrap();
        assert!(
            Snapshot::new()
                .gateway_table(&home, crate::GatewayFile::Allowlist)
                .is_none()
        );
    }

    /// A block file's text is made from the read's buffer whether the first
    /// read held it all or not: a file past that buffer is read whole, a
    /// byte that is not UTF-8 is refused at its offset on either side of
    /// it, and two chains of one snapshot hold the one text read.
    #[test]
    fn a_block_file_is_read_whole_and_checked_either_side_of_the_first_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        let (home, project) = (root.join("home"), root.join("project"));
        std::fs::create_dir_all(project.join(".git")).unwrap();
        let long: String = (0..2_500).map(|i| format!("- rule {i:05}\n")).collect();
        assert!(long.len() > 16 * 1024, "past the first read");
        write(&home.join(".vak/prompts/guardrails.md"), &long);
        let prompts = project.join(".vak/prompts");
        std::fs::create_dir_all(&prompts).unwrap();
        let mut early = b"You are ".to_vec();
        early.push(0xff);
        std::fs::write(prompts.join("identity.md"), &early).unwrap();
        let mut late = vec![b'a'; 20_000];
        late[17_000] = 0xc3;
        std::fs::write(prompts.join("operating-rules.md"), &late).unwrap();
        let request = cli_request(&home, project);
        let mut snapshot = Snapshot::new();
        let first = snapshot.load(&request).unwrap();
        let second = snapshot
            .load(&LoadRequest {
                surface: SurfaceKind::Chat,
                ..request.clone()
            })
            .unwrap();
        assert_eq!(first.contributions.len(), 1, "{:?}", first.skipped);
        assert_eq!(first.contributions[0].text, long);
        assert_eq!(
            first.contributions[0].text.as_ptr(),
            second.contributions[0].text.as_ptr(),
            "one text, shared by both chains"
        );
        let reasons: Vec<String> = first.skipped.iter().map(ToString::to_string).collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("identity.md") && r.contains("not valid UTF-8 at byte 8")),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("operating-rules.md")
                    && r.contains("not valid UTF-8 at byte 17000")),
            "{reasons:?}"
        );
    }

    /// Two chains of one snapshot read each file once: an edit made after
    /// the first is not seen by the second (a snapshot is the inputs as they
    /// were), a config is parsed once and shared, and a new snapshot reads
    /// the edit.
    #[test]
    fn a_snapshot_reads_each_input_once_and_a_new_one_reads_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        let (home, project) = (root.join("home"), root.join("project"));
        std::fs::create_dir_all(project.join(".git")).unwrap();
        write(&home.join(".vak/prompts/guardrails.md"), "- shared rule");
        let config: String = (0..200).map(|i| format!("k{i} = {i}\n")).collect();
        write(&home.join(".vak/config.toml"), &config);
        let request = cli_request(&home, project);
        let mut snapshot = Snapshot::new();
        let first = snapshot.load(&request).unwrap();
        write(&home.join(".vak/prompts/guardrails.md"), "- edited rule");
        let second = snapshot
            .load(&LoadRequest {
                surface: SurfaceKind::Chat,
                ..request.clone()
            })
            .unwrap();
        let text = |chain: &LoadedChain| chain.contributions[0].text.clone();
        assert_eq!(text(&first), "- shared rule");
        assert_eq!(text(&second), "- shared rule");
        assert!(Arc::ptr_eq(
            &first.configs[0].table,
            &second.configs[0].table
        ));
        let fresh = crate::load_chain(&request).unwrap();
        assert_eq!(text(&fresh), "- edited rule");

        // A snapshot sharing what an earlier one read reads only what that
        // one lacks, and keeps it beside the rest.
        let tables = GatewayTables::default();
        let mut earlier = Snapshot::sharing(&tables, None);
        earlier.load(&request).unwrap();
        let reads = earlier.into_reads().unwrap();
        write(&home.join(".vak/prompts/guardrails.md"), "- third rule");
        let mut same = Snapshot::sharing(&tables, Some(Arc::clone(&reads)));
        assert_eq!(text(&same.load(&request).unwrap()), "- edited rule");
        assert!(same.into_reads().is_none(), "nothing of its own was read");
        write(
            &home.join(".vak/prompts/agents/reviewer/identity.md"),
            "reviewer notes",
        );
        let mut wider = Snapshot::sharing(&tables, Some(Arc::clone(&reads)));
        let role = wider
            .load(&LoadRequest {
                agent: Some(
                    vak_prompt_blocks::Name::new(vak_prompt_blocks::NameKind::Role, "reviewer")
                        .unwrap(),
                ),
                ..request.clone()
            })
            .unwrap();
        assert_eq!(text(&role), "- edited rule");
        assert!(
            role.contributions
                .iter()
                .any(|c| c.text == "reviewer notes")
        );
        let kept = wider.into_reads().unwrap();
        assert!(kept.dirs.len() > reads.dirs.len());
        assert!(reads.dirs.keys().all(|dir| kept.dirs.contains_key(dir)));
        assert!(!Arc::ptr_eq(
            &first.configs[0].table,
            &fresh.configs[0].table
        ));
    }
}
