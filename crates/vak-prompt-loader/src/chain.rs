use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::{Block, Name, Origin, PromptLayer, Provenance, SharedText, SurfaceKind};

use crate::LoaderError;
use crate::confine::{EntryName, OpenedDirs};
use crate::discover::{has_layer, levels_and_left_out, levels_cut_at_home};
use crate::gateway::load_gateway;
use crate::imports::{Expansion, Imports, prompts_root};
use crate::paths::{LayerDirs, join, prompt_dir};
use crate::safe_read::{MAX_FILE_BYTES, ReadRefusal, utf8, utf8_shared};
use crate::snapshot::{DirRead, Levels, Snapshot};

/// How many directories holding layer files that are left out of the
/// chain (too deep, hidden, `node_modules`…) are named one by one; the rest
/// are counted in one more warning.
const MAX_UNREAD_LAYERS_NAMED: usize = 3;

/// What to load: the home, the project, and the selectors that pick
/// sub-layers.
#[derive(Debug, Clone)]
pub struct LoadRequest {
    /// `$VAK_HOME`: holds the shared layer and the gateway files.
    pub home: Utf8PathBuf,
    /// The project directory.
    pub project: Utf8PathBuf,
    /// Selects `surface/<kind>/`.
    pub surface: SurfaceKind,
    /// Selects a bot's entry in `bots.json`.
    pub bot: Option<Name>,
    /// Selects a chat's entry under the bot in `allowlist.json`.
    pub chat: Option<Name>,
    /// Selects `agents/<role>/`.
    pub agent: Option<Name>,
    /// The working directory inside the project: every directory between
    /// the project (exclusive) and it (inclusive) with its own
    /// `.vak/prompts/` or interop file is a narrower project sub-layer.
    /// `None` reads the project root alone.
    pub workdir: Option<Utf8PathBuf>,
}

/// One layer's text for one block, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contribution {
    /// The block the text is for.
    pub block: Block,
    /// Where it came from: the one provenance row the loader built for
    /// this input, shared (not copied) by the contributor, the budget's
    /// row and the report that describe it.
    pub provenance: Arc<Provenance>,
    /// Exactly the text read. Empty means "deliberately nothing". Shared:
    /// every chain of a snapshot, and the contributor composition keeps,
    /// hold this one copy.
    pub text: SharedText,
    /// Whether this is a directory's interop file (`AGENTS.md` and the
    /// like): operating rules written for every agent, which composition
    /// appends after the winning `operating-rules` text instead of letting
    /// them compete with it.
    pub interop: bool,
    /// The files a block file imports (`@parts/tone.md` alone on a line),
    /// whose texts `text` holds in place of those lines; or the import that
    /// was refused, and then `text` is the file's own. Always empty for an
    /// interop file and a gateway text, which do not import.
    pub imports: Imports,
    /// Which directory level of the project the text is from: 0 for the
    /// root (and for everything that is not a project directory layer), 1
    /// for the first directory below it, and so on; an index into
    /// [`LoadedChain::project_levels`]. Set by the loader as it reads each
    /// level, never worked out from the source afterwards.
    pub level: usize,
}

/// An input the loader refused, and why. Reported, never fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The block the input would have supplied, when known.
    pub block: Option<Block>,
    /// Where the input was.
    pub provenance: Provenance,
    /// A sentence fragment saying what is wrong.
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = &self.provenance.source;
        match self.block {
            Some(block) => write!(
                f,
                "`{block}` in {} layer `{source}` {}",
                self.provenance.layer, self.reason
            ),
            None => write!(
                f,
                "{} layer `{source}` {}",
                self.provenance.layer, self.reason
            ),
        }
    }
}

/// The legacy all-or-nothing `.vak/SYSTEM.md` of a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacySystem {
    /// Where it came from (the project layer, its path), built once by the
    /// loader and shared as is with demotions and contributors.
    pub provenance: Arc<Provenance>,
    /// Its text.
    pub text: String,
}

impl LegacySystem {
    /// Its path.
    pub fn path(&self) -> &Utf8Path {
        self.provenance.source.path().unwrap_or(Utf8Path::new(""))
    }
}

/// A parsed `.vak/config.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFile {
    /// Home or project.
    pub origin: Origin,
    /// Its path, shared with the source of every key composition names
    /// in it.
    pub path: Arc<Utf8Path>,
    /// Its contents, shared: every chain loaded from one [`Snapshot`]
    /// shares the table parsed once.
    pub table: Arc<toml::Table>,
}

/// Parse a config text: what a snapshot keeps per config path, so a check
/// crossing every role with every layer parses each config once (a
/// clone's 250 KB config took 3 ms to parse, 33 s for `vak trust` on
/// 2,000 roles when it was parsed per chain).
fn parse_config(text: &str) -> Result<Arc<toml::Table>, String> {
    crate::config_toml::parse_table(text)
        .map(Arc::new)
        .map_err(|error| format!("is not valid TOML: {}", error.message()))
}

/// A skill found under `.vak/skills/<name>/SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillEntry {
    /// The skill's directory name.
    pub name: String,
    /// Where it came from: the runtime tier (skills are a runtime-derived
    /// block), its origin (home or project, which trust decides on) and the
    /// `SKILL.md` path. Built once by the loader and carried as is into the
    /// skills block's contributors and descriptors.
    pub provenance: Arc<Provenance>,
    /// The file's text.
    pub text: String,
}

impl SkillEntry {
    /// Home or project.
    pub fn origin(&self) -> Origin {
        self.provenance.origin
    }

    /// The `SKILL.md` path.
    pub fn path(&self) -> &Utf8Path {
        self.provenance.source.path().unwrap_or(Utf8Path::new(""))
    }
}

/// Everything read for one resolution, in chain order, unfiltered.
#[derive(Debug, Clone, Default)]
pub struct LoadedChain {
    /// Every present block file and gateway entry, widest first.
    pub contributions: Vec<Contribution>,
    /// The project's legacy `.vak/SYSTEM.md`, if present.
    pub legacy_system: Option<LegacySystem>,
    /// Home, then project config.
    pub configs: Vec<ConfigFile>,
    /// Home skills, then project skills, each sorted by name.
    pub skills: Vec<SkillEntry>,
    /// The role directories that exist for the selected agent, home first.
    pub role_dirs: Vec<Utf8PathBuf>,
    /// Inputs refused, with reasons.
    pub skipped: Vec<Skipped>,
    /// The project's directory levels, widest first: the project root, then
    /// each directory down to the working directory. A project-origin
    /// source belongs to the deepest level it lies under.
    pub project_levels: Vec<Utf8PathBuf>,
    /// The interop file names in force (`[prompts] interop`), in order.
    pub interop_names: Vec<String>,
    /// The managed layer, when the machine has one: its locks, its
    /// ceiling and keys. Its block files are in `contributions`, first.
    pub managed: Option<Arc<crate::ManagedLayer>>,
}

impl LoadedChain {
    /// How many bytes of text the load read and holds: every contribution
    /// (shadowed ones too), the legacy `SYSTEM.md` and every skill. What
    /// reading and composing the chain costs, whatever of it wins.
    pub fn text_bytes(&self) -> usize {
        let contributions: usize = self.contributions.iter().map(|c| c.text.len()).sum();
        let skills: usize = self.skills.iter().map(|s| s.text.len()).sum();
        let legacy = self.legacy_system.as_ref().map_or(0, |l| l.text.len());
        contributions.saturating_add(skills).saturating_add(legacy)
    }

    /// Put `text` in place of whatever the chain holds for `block` from
    /// `provenance` (or remove it when `text` is `None`), keeping the
    /// loader's order, so a candidate edit can be composed before anything
    /// is written. A home or project file's imports are read, as a load
    /// reads them ([`expand_imports`](crate::expand_imports)).
    pub fn substitute(&mut self, block: Block, provenance: &Provenance, text: Option<&str>) {
        let expanded = text.map(|text| crate::imports::expand_imports(provenance, text));
        self.substitute_expanded(block, provenance, expanded);
    }

    /// [`substitute`](Self::substitute) with the candidate's imports
    /// already read ([`expand_imports`](crate::expand_imports)): a check
    /// that puts one candidate into many chains reads its imports once.
    pub fn substitute_expanded(
        &mut self,
        block: Block,
        provenance: &Provenance,
        expanded: Option<(String, Imports)>,
    ) {
        let same = |b: Block, p: &Provenance| b == block && p == provenance;
        self.contributions
            .retain(|c| !same(c.block, c.provenance.as_ref()));
        self.skipped
            .retain(|s| !(s.block.is_some_and(|b| same(b, &s.provenance))));
        let Some((text, imports)) = expanded else {
            return;
        };
        // The loader reads layers widest first, home before project within
        // a tier, and a directory's files in `Block::EDITABLE` order.
        let rank = |b: Block| Block::EDITABLE.iter().position(|e| *e == b);
        let key = |c: &Contribution| {
            (
                c.provenance.layer,
                c.provenance.origin,
                c.level,
                rank(c.block),
            )
        };
        let new = Contribution {
            block,
            provenance: Arc::new(provenance.clone()),
            text: text.into(),
            interop: false,
            imports,
            level: self.level_for(provenance),
        };
        let at = self
            .contributions
            .iter()
            .position(|c| key(c) > key(&new))
            .unwrap_or(self.contributions.len());
        self.contributions.insert(at, new);
    }

    /// The level a project block file at `provenance` is read at: the
    /// level whose prompts directory holds it. A file in a directory that
    /// is no level yet (the first layer file of a directory, being created)
    /// makes that directory a level, between the levels above and below
    /// it, as a load would once the file exists: the deeper levels and
    /// their contributions move down one. 0 for everything else. For a
    /// candidate edit, which the loader has not read.
    fn level_for(&mut self, provenance: &Provenance) -> usize {
        if provenance.origin != Origin::Project || provenance.layer != PromptLayer::Project {
            return 0;
        }
        let Some(dir) = provenance.source.path().and_then(Utf8Path::parent) else {
            return 0;
        };
        if let Some(level) = self
            .project_levels
            .iter()
            .rposition(|l| prompt_dir(l) == dir)
        {
            return level;
        }
        // `<level>/.vak/prompts`, by its components.
        let level_dir = dir
            .ends_with(".vak/prompts")
            .then(|| dir.parent().and_then(Utf8Path::parent))
            .flatten();
        let Some(level_dir) = level_dir else {
            return 0;
        };
        // The levels run from the root down one path, so the ones above
        // this directory come first.
        let at = self
            .project_levels
            .iter()
            .take_while(|l| level_dir.starts_with(l))
            .count();
        if at == 0 {
            return 0;
        }
        self.project_levels.insert(at, level_dir.to_owned());
        for c in &mut self.contributions {
            if c.level >= at {
                c.level += 1;
            }
        }
        at
    }
}

struct Reader<'a> {
    chain: &'a mut LoadedChain,
    /// What is read: each layer root opened once (each directory under it
    /// opened and checked once, shared by every file in it), and every
    /// answer kept, so a later chain of the same snapshot reads nothing
    /// again.
    snap: &'a mut Snapshot,
    /// The project's root: the one root whose nested repositories are
    /// refused (see [`OpenedDirs::project`]).
    project: &'a Utf8Path,
}

impl Reader<'_> {
    fn skip(&mut self, block: Option<Block>, provenance: Provenance, refusal: impl ToString) {
        let skipped = Skipped {
            block,
            provenance,
            reason: refusal.to_string(),
        };
        tracing::warn!(%skipped, "prompt input skipped");
        self.chain.skipped.push(skipped);
    }

    /// The directories opened under `root`, resolving the root once per
    /// load. `Ok(None)` when the root does not exist.
    fn root(&mut self, root: &Utf8Path) -> Result<Option<&mut OpenedDirs>, ReadRefusal> {
        let project = root.as_str() == self.project.as_str();
        self.snap.root(root, project)
    }

    /// Read `path` as a hostile file that must stay inside `root`: once
    /// per snapshot.
    fn read(&mut self, path: &Utf8Path, root: &Utf8Path) -> Result<Option<String>, ReadRefusal> {
        // Kept for the root it was judged under: the same path asked under
        // another root (the home read as a project) is read again.
        let kept = self.snap.kept(|r| r.files.get(path.as_str()));
        if let Some((under, read)) = kept
            && under == root
        {
            return read.clone();
        }
        let keep = kept.is_none() && !self.snap.once;
        let read = match self.root(root) {
            Ok(Some(dirs)) => match dirs.read_one(path, MAX_FILE_BYTES) {
                Ok(Some(bytes)) => utf8(bytes).map(Some),
                Ok(None) => Ok(None),
                Err(refusal) => Err(refusal.into()),
            },
            Ok(None) => Ok(None),
            Err(refusal) => Err(refusal),
        };
        if keep {
            self.snap
                .reads
                .files
                .insert(path.as_str().to_owned(), (root.to_owned(), read.clone()));
        }
        read
    }

    /// Read the editable block files of the directory `dir` under `root`:
    /// once per snapshot.
    fn dir_files(&mut self, dir: &Utf8Path, root: &Utf8Path) -> DirRead {
        let kept = self.snap.kept(|r| r.dirs.get(dir.as_str()));
        if let Some((under, read)) = kept
            && under == root
        {
            return read.clone();
        }
        let keep = kept.is_none() && !self.snap.once;
        // The directory is opened and checked once for its four files; each
        // file is opened relative to that handle.
        let read = match self.root(root) {
            Ok(Some(dirs)) => match dirs.dir(dir) {
                Ok(Some(opened)) => DirRead::Files(Block::EDITABLE.map(|block| {
                    let (Some(file), Some(c_file)) = (block.file_name(), block.file_c_name())
                    else {
                        // Every editable block has a file: never taken.
                        return (block, "", Ok(None));
                    };
                    let text = dirs
                        .read_in_with(
                            &opened,
                            EntryName::compiled(file, c_file),
                            MAX_FILE_BYTES,
                            |bytes| utf8_shared(&bytes),
                        )
                        .map_err(ReadRefusal::from)
                        .and_then(Option::transpose);
                    (block, file, text)
                })),
                Ok(None) => DirRead::Missing,
                Err(refusal) => DirRead::Refused(ReadRefusal::from(refusal)),
            },
            Ok(None) => DirRead::Missing,
            Err(refusal) => DirRead::Refused(refusal),
        };
        if keep {
            self.snap
                .reads
                .dirs
                .insert(dir.as_str().to_owned(), (root.to_owned(), read.clone()));
        }
        read
    }

    /// `text`, the block file `provenance` names in the layer directory
    /// `dir`, with its imports expanded, each read once per snapshot and
    /// confined to the prompts directory `dir` lies in; or, when one is
    /// refused, the text as it is and the refusal.
    fn expand_imports(
        &mut self,
        dir: &Utf8Path,
        provenance: &Provenance,
        text: SharedText,
    ) -> (SharedText, Imports) {
        let Some(file) = provenance
            .source
            .path()
            .filter(|_| crate::imports::may_import(&text))
        else {
            return (text, Imports::default());
        };
        let prompts = prompts_root(dir).to_owned();
        let mut read = |path: &Utf8Path| self.read(path, &prompts);
        let mut expansion = Expansion {
            read: &mut read,
            prompts: &prompts,
            provenance,
            files: Vec::new(),
        };
        let result = expansion.expand(file, &text);
        if let Err(error) = &result {
            tracing::warn!(%error, "prompt import refused");
        }
        let files = expansion.files;
        let (text, imports) = crate::imports::outcome(result, files, text.to_string());
        (SharedText::from(text), imports)
    }

    /// Read the editable block files of one directory layer. Returns
    /// whether the directory exists inside its root.
    fn directory_layer(
        &mut self,
        dir: &Utf8Path,
        root: &Utf8Path,
        layer: PromptLayer,
        origin: Origin,
        level: usize,
    ) -> bool {
        // One that leads outside its root is reported once, naming the
        // directory.
        let files = match self.dir_files(dir, root) {
            DirRead::Files(files) => files,
            DirRead::Missing => return false,
            DirRead::Refused(refusal) => {
                self.skip(None, Provenance::new(layer, origin, dir), refusal);
                return false;
            }
        };
        for (block, file, text) in files {
            let provenance = Provenance::new(layer, origin, join(dir, &[file]));
            match text {
                Ok(Some(text)) => {
                    let (text, imports) = self.expand_imports(dir, &provenance, text);
                    self.chain.contributions.push(Contribution {
                        block,
                        provenance: Arc::new(provenance),
                        text,
                        interop: false,
                        imports,
                        level,
                    });
                }
                Ok(None) => {}
                Err(refusal) => self.skip(Some(block), provenance, refusal),
            }
        }
        true
    }
}

impl Reader<'_> {
    /// The interop file of one project level: the first of `names` present
    /// in `level` (`AGENTS.override.md` before `AGENTS.md` by default), as
    /// other agents read it. It is that level's contribution to the
    /// operating rules, appended after the winning `operating-rules` text
    /// whether or not the level has an `operating-rules.md` of its own. Read
    /// like every layer file: confined to the project, bounded, UTF-8; a
    /// refusal names the file and the next name is not tried, so a refused
    /// override never lets the file it overrides in.
    fn interop_file(&mut self, dir: &Utf8Path, level: usize, root: &Utf8Path, names: &[String]) {
        for name in names {
            let path = join(dir, &[name]);
            let read = self.read(&path, root);
            let provenance = || Provenance::new(PromptLayer::Project, Origin::Project, path);
            match read {
                Ok(Some(text)) => {
                    self.chain.contributions.push(Contribution {
                        block: Block::OperatingRules,
                        provenance: Arc::new(provenance()),
                        text: text.into(),
                        interop: true,
                        imports: Imports::default(),
                        level,
                    });
                    return;
                }
                Ok(None) => {}
                Err(refusal) => {
                    self.skip(Some(Block::OperatingRules), provenance(), refusal);
                    return;
                }
            }
        }
    }
}

/// The interop file names the default list holds, in the order they are
/// tried in each directory: a team's local override first, as other agents
/// read them.
pub const DEFAULT_INTEROP: [&str; 2] = ["AGENTS.override.md", "AGENTS.md"];

/// At most this many interop names are honoured.
const MAX_INTEROP_NAMES: usize = 16;

/// `[prompts] interop` from the *shared* config (a project's config never
/// names files to read), else [`DEFAULT_INTEROP`]. A value that is not a
/// list of plain file names is reported (naming the key) and the default
/// applies; one bad entry is reported and skipped.
fn interop_names(reader: &mut Reader<'_>) -> Vec<String> {
    let default = || DEFAULT_INTEROP.iter().map(|n| (*n).to_owned()).collect();
    let from_project: Vec<Arc<Utf8Path>> = reader
        .chain
        .configs
        .iter()
        .filter(|c| c.origin == Origin::Project)
        .filter(|c| {
            c.table
                .get("prompts")
                .and_then(|p| p.as_table())
                .is_some_and(|p| p.contains_key("interop"))
        })
        .map(|c| c.path.clone())
        .collect();
    for path in from_project {
        reader.skip(
            None,
            Provenance::new(PromptLayer::Project, Origin::Project, path.as_str()),
            "sets `prompts.interop`, which only the shared config may set (a project never names files for vak to read); it is ignored",
        );
    }
    let Some(config) = reader
        .chain
        .configs
        .iter()
        .find(|c| c.origin == Origin::Home)
    else {
        return default();
    };
    let Some(value) = config
        .table
        .get("prompts")
        .and_then(|p| p.as_table())
        .and_then(|p| p.get("interop"))
        .cloned()
    else {
        return default();
    };
    let path = config.path.clone();
    let provenance = || Provenance::new(PromptLayer::Shared, Origin::Home, path.as_str());
    let Some(list) = value.as_array() else {
        reader.skip(
            None,
            provenance(),
            "key `prompts.interop` is not a list of file names; the default (`AGENTS.override.md`, `AGENTS.md`) applies",
        );
        return default();
    };
    let mut names = Vec::new();
    for item in list {
        let name = item.as_str().unwrap_or_default();
        let plain = !name.is_empty()
            && name.len() <= 255
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\', '\0'])
            && !name.chars().any(vak_prompt_blocks::is_forbidden);
        if !plain || names.len() >= MAX_INTEROP_NAMES {
            reader.skip(
                None,
                provenance(),
                format!(
                    "key `prompts.interop` holds `{}`, which is not a plain file name in a directory (or is past the {MAX_INTEROP_NAMES}-name limit); it is ignored",
                    vak_prompt_blocks::Escaped(&item.to_string())
                ),
            );
            continue;
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// Whether the directory `inner`, once symlinks are followed, stays inside
/// `outer`. A missing `inner` is fine: there is nothing to read.
fn stays_inside(
    reader: &mut Reader<'_>,
    inner: &Utf8Path,
    outer: &Utf8Path,
) -> Result<(), ReadRefusal> {
    if let Some(dirs) = reader.root(outer)? {
        dirs.dir(inner)?;
    }
    Ok(())
}

/// Load every layer of the chain `request` selects: a chain of a
/// [`Snapshot`] of its own.
///
/// Fails only when the request itself cannot be honoured (no such project,
/// no such role); bad files are skipped and reported in the result.
pub fn load_chain(request: &LoadRequest) -> Result<LoadedChain, LoaderError> {
    Snapshot::once().load(request)
}

/// The chain `request` selects, read through `snap` ([`Snapshot::load`]).
pub(crate) fn load_in(
    snap: &mut Snapshot,
    request: &LoadRequest,
) -> Result<LoadedChain, LoaderError> {
    let mut chain = LoadedChain::default();
    let mut reader = Reader {
        chain: &mut chain,
        snap,
        project: &request.project,
    };
    // The project's root is opened first: a handle opened as a directory
    // proves it is one, so the `stat` is only asked when that open did not
    // answer.
    let opened = matches!(reader.root(&request.project), Ok(Some(dirs)) if dirs.holds_root());
    if !opened && !request.project.is_dir() {
        return Err(LoaderError::ProjectMissing(request.project.clone()));
    }
    // The managed layer first: the floor every chain stands on, read once
    // per snapshot. A refusal stops the resolution (fail closed).
    let managed = match reader.snap.kept(|r| r.managed.as_ref()) {
        Some(read) => read.clone(),
        None => {
            let read = crate::managed::load_managed(&request.home);
            reader.snap.reads.managed = Some(read.clone());
            read
        }
    }?;
    if let Some(managed) = &managed {
        reader.chain.contributions.extend(
            managed
                .files
                .iter()
                .filter(|f| f.surface.is_none() || f.surface == Some(request.surface))
                // A managed file is taken as signed, whole: it imports
                // nothing (an imported file would carry no signature).
                .map(|f| Contribution {
                    block: f.block,
                    provenance: Arc::clone(&f.provenance),
                    text: f.text.clone(),
                    interop: false,
                    imports: Imports::default(),
                    level: 0,
                }),
        );
    }
    reader.chain.managed = managed;
    let home_dirs = LayerDirs::new(&request.home, request.surface, request.agent.as_ref());
    let project_dirs = LayerDirs::new(&request.project, request.surface, request.agent.as_ref());
    // Room for the most this request can contribute, so the list is
    // allocated once rather than grown (and copied) on the way: each
    // directory layer (base, surface, agent, home and project) at most its
    // editable blocks, each gateway tier as many, the project root's interop
    // file one; the working directory's levels are added when known.
    let per_dir = Block::EDITABLE.len();
    let dir_layers = if request.agent.is_some() { 6 } else { 4 };
    let tiers = match (&request.bot, &request.chat) {
        (None, _) => 0,
        (Some(_), None) => 1,
        (Some(_), Some(_)) => 2,
    };
    reader
        .chain
        .contributions
        .reserve_exact((dir_layers + tiers) * per_dir + 1);

    // A project's whole `.vak` may itself be a symlink out of the checkout;
    // then nothing under it is the project's to say.
    let project_vak = join(&request.project, &[".vak"]);
    let project_ok = match stays_inside(&mut reader, &project_vak, &request.project) {
        Ok(()) => true,
        Err(refusal) => {
            reader.skip(
                None,
                Provenance::new(PromptLayer::Project, Origin::Project, project_vak.as_str()),
                refusal,
            );
            false
        }
    };

    // One rule for every layer file: it must stay
    // inside its home or its project once every symlink is resolved.
    let home_root = &request.home;
    let project_root = &request.project;

    let home_vak = join(&request.home, &[".vak"]);
    // The project's entry is only read when `project_ok`.
    let config_roots = [
        (&home_vak, home_root, Origin::Home, PromptLayer::Shared),
        (
            &project_vak,
            project_root,
            Origin::Project,
            PromptLayer::Project,
        ),
    ];
    let config_roots = &config_roots[..if project_ok { 2 } else { 1 }];
    reader.chain.configs.reserve_exact(config_roots.len());
    for &(vak_dir, root, origin, layer) in config_roots {
        let path = join(vak_dir, &["config.toml"]);
        match reader.read(&path, root) {
            Ok(Some(text)) => {
                let parsed = match reader.snap.kept(|r| r.configs.get(path.as_str())) {
                    Some(parsed) => parsed.clone(),
                    None => {
                        let parsed = parse_config(&text);
                        // One chain reads each config once: nothing to
                        // share it with.
                        if !reader.snap.once {
                            (reader.snap.reads.configs)
                                .insert(path.as_str().to_owned(), parsed.clone());
                        }
                        parsed
                    }
                };
                match parsed {
                    Ok(table) => reader.chain.configs.push(ConfigFile {
                        origin,
                        path: path.into(),
                        table,
                    }),
                    Err(reason) => {
                        reader.skip(
                            None,
                            Provenance::new(layer, origin, path.into_string()),
                            reason,
                        );
                    }
                }
            }
            Ok(None) => {}
            Err(refusal) => reader.skip(
                None,
                Provenance::new(layer, origin, path.into_string()),
                refusal,
            ),
        }
    }

    // Kept aside while the chain is read, and moved into it at the end.
    let interop = interop_names(&mut reader);

    reader.directory_layer(
        &home_dirs.base,
        home_root,
        PromptLayer::Shared,
        Origin::Home,
        0,
    );
    // The project root, then each directory down to the working directory,
    // widest first: the same four files, project-owned,
    // then the level's interop file (`AGENTS.md`), which composition appends
    // to the operating rules.
    reader.chain.project_levels.push(request.project.clone());
    if project_ok {
        reader.directory_layer(
            &project_dirs.base,
            project_root,
            PromptLayer::Project,
            Origin::Project,
            0,
        );
    }
    reader.interop_file(&request.project, 0, project_root, &interop);
    if let Some(workdir) = &request.workdir {
        if !workdir.starts_with(&request.project) {
            reader.skip(
                None,
                Provenance::new(PromptLayer::Project, Origin::Project, workdir.as_str()),
                "is not inside the project once symlinks are resolved; no directory layer below the project root is read",
            );
        }
        let key = (request.project.to_string(), workdir.to_string());
        let Levels {
            levels,
            unread,
            home_dir,
        } = match reader.snap.kept(|r| r.levels.get(&key)) {
            Some(levels) => levels.clone(),
            None => {
                let (levels, left_out) =
                    levels_and_left_out(&request.project, workdir, &request.home);
                let found = Levels {
                    levels,
                    unread: left_out
                        .into_iter()
                        .filter(|dir| has_layer(dir, &interop))
                        .collect(),
                    home_dir: levels_cut_at_home(&request.project, workdir, &request.home),
                };
                reader.snap.reads.levels.insert(key, found.clone());
                found
            }
        };
        // The home inside the project is the shared layer: its files are
        // read once, as shared, never again as a project directory layer.
        if let Some(home_dir) = home_dir {
            reader.skip(
                None,
                Provenance::new(PromptLayer::Project, Origin::Project, home_dir.as_str()),
                "is the vak home (`$VAK_HOME`), or inside it: its files are the shared layer, never a project directory layer, so no directory layer is read there; work in a directory of the project outside the home",
            );
        }
        // Said, not silent: guardrails written there do not apply. The
        // first few are named; a clone nested a thousand deep is one more
        // line, not a thousand lines of ever longer paths.
        let mut unread = unread.into_iter();
        for dir in unread.by_ref().take(MAX_UNREAD_LAYERS_NAMED) {
            reader.skip(
                None,
                Provenance::new(PromptLayer::Project, Origin::Project, dir.as_str()),
                "is not read as a directory layer: no layer is read inside a hidden directory, `node_modules`, `target` or a directory whose name holds a control or invisible character, or more than 8 levels below the project root; move its files to a directory that is",
            );
        }
        if let Some(next) = unread.next() {
            let more = unread.count();
            reader.skip(
                None,
                Provenance::new(PromptLayer::Project, Origin::Project, next.as_str()),
                format!(
                    "is not read as a directory layer either, nor {more} more below it that hold layer files, for the same reason"
                ),
            );
        }
        reader
            .chain
            .contributions
            .reserve(levels.len() * (Block::EDITABLE.len() + 1));
        for dir in levels {
            // The level is the index of the directory in `project_levels`,
            // fixed here as it is read.
            let level = reader.chain.project_levels.len();
            reader.chain.project_levels.push(dir.clone());
            let prompts = prompt_dir(&dir);
            reader.directory_layer(
                &prompts,
                project_root,
                PromptLayer::Project,
                Origin::Project,
                level,
            );
            reader.interop_file(&dir, level, project_root, &interop);
        }
    }
    reader.directory_layer(
        &home_dirs.surface,
        home_root,
        PromptLayer::Surface,
        Origin::Home,
        0,
    );
    if project_ok {
        reader.directory_layer(
            &project_dirs.surface,
            project_root,
            PromptLayer::Surface,
            Origin::Project,
            0,
        );
    }
    // The gateway files share the home's opened directories; a home that
    // cannot be resolved is reported by the gateway's own read.
    load_gateway(
        &request.home,
        reader.snap,
        request.bot.as_ref(),
        request.chat.as_ref(),
        &mut reader.chain.contributions,
        &mut reader.chain.skipped,
    );

    if let Some(role) = &request.agent {
        let candidates = [
            (home_dirs.agent, home_root, Origin::Home, true),
            (
                project_dirs.agent,
                project_root,
                Origin::Project,
                project_ok,
            ),
        ];
        // A role directory refused (a symlink out of its root) is named
        // when no other defines the role, never called undefined.
        let mut refused = None;
        for (dir, root, origin, allowed) in candidates {
            let Some(dir) = dir else { continue };
            if !allowed {
                continue;
            }
            let before = reader.chain.skipped.len();
            if reader.directory_layer(&dir, root, PromptLayer::Agent, origin, 0) {
                reader.chain.role_dirs.push(dir);
            } else if let Some(skip) = reader.chain.skipped[before..]
                .iter()
                .find(|s| s.block.is_none())
            {
                refused.get_or_insert((dir, skip.reason.clone()));
            }
        }
        if let (true, Some((dir, reason))) = (reader.chain.role_dirs.is_empty(), refused) {
            return Err(LoaderError::RoleRefused {
                role: role.to_string(),
                dir,
                reason,
            });
        }
        if reader.chain.role_dirs.is_empty() {
            return Err(LoaderError::UnknownRole {
                role: role.to_string(),
                home_dir: prompt_dir(&request.home).join("agents").join(role.as_str()),
            });
        }
    }

    if project_ok {
        let path = join(&project_vak, &["SYSTEM.md"]);
        match reader.read(&path, project_root) {
            Ok(Some(text)) => {
                reader.chain.legacy_system = Some(LegacySystem {
                    provenance: Arc::new(Provenance::new(
                        PromptLayer::Project,
                        Origin::Project,
                        path.into_string(),
                    )),
                    text,
                });
            }
            Ok(None) => {}
            Err(refusal) => reader.skip(
                Some(Block::Identity),
                Provenance::new(PromptLayer::Project, Origin::Project, path.into_string()),
                refusal,
            ),
        }
    }

    for &(vak_dir, root, origin, layer) in config_roots {
        load_skills(&mut reader, vak_dir, root, origin, layer);
    }

    chain.interop_names = interop;
    Ok(chain)
}

/// The most skill directories one layer contributes.
const MAX_SKILLS: usize = 256;
/// The most directory entries looked at to choose them.
const MAX_SKILL_ENTRIES: usize = 65_536;

/// The first [`MAX_SKILL_ENTRIES`] names in `skills_dir`, unsorted; `None`
/// when it cannot be listed. Listed through the directory's checked handle,
/// which the skills' reads then open beneath; a directory that leads
/// outside its root is listed by path as before, so each skill in it is
/// refused by name, as it always was.
fn skill_names(
    reader: &mut Reader<'_>,
    skills_dir: &Utf8Path,
    root: &Utf8Path,
) -> Option<Vec<String>> {
    if let Some(names) = reader.snap.kept(|r| r.skill_names.get(skills_dir.as_str())) {
        return names.clone();
    }
    let names = list_skills(reader, skills_dir, root);
    if !reader.snap.once {
        (reader.snap.reads.skill_names).insert(skills_dir.as_str().to_owned(), names.clone());
    }
    names
}

/// [`skill_names`], read.
fn list_skills(
    reader: &mut Reader<'_>,
    skills_dir: &Utf8Path,
    root: &Utf8Path,
) -> Option<Vec<String>> {
    if let Ok(Some(dirs)) = reader.root(root) {
        match dirs.listed_dir(skills_dir) {
            Ok(Some(dir)) => {
                if let Ok(names) = dir.names(MAX_SKILL_ENTRIES) {
                    return Some(names);
                }
            }
            Ok(None) => return None,
            Err(_) => {}
        }
    }
    let entries = skills_dir.read_dir_utf8().ok()?;
    Some(
        entries
            .filter_map(Result::ok)
            .take(MAX_SKILL_ENTRIES)
            .map(|entry| entry.file_name().to_owned())
            .collect(),
    )
}

fn load_skills(
    reader: &mut Reader<'_>,
    vak_dir: &Utf8Path,
    root: &Utf8Path,
    origin: Origin,
    layer: PromptLayer,
) {
    let skills_dir = join(vak_dir, &["skills"]);
    // A clone can ship any number of skill directories; listing and
    // reading them all would let it make every command slow. The first
    // MAX_SKILLS by name are read, and the cut is reported once.
    let Some(mut names) = skill_names(reader, &skills_dir, root) else {
        return;
    };
    names.sort();
    if names.len() > MAX_SKILLS {
        let first_skipped = skills_dir.join(&names[MAX_SKILLS]);
        reader.skip(
            Some(Block::Skills),
            Provenance::new(layer, origin, first_skipped.as_str()),
            format!(
                "is past the first {MAX_SKILLS} skill directories of this layer; it and the rest are skipped"
            )
            .as_str(),
        );
        names.truncate(MAX_SKILLS);
    }
    for name in names {
        let path = join(&skills_dir, &[&name, "SKILL.md"]);
        if !Name::is_valid(vak_prompt_blocks::NameKind::Role, &name) {
            reader.skip(
                Some(Block::Skills),
                Provenance::new(layer, origin, path.into_string()),
                "has a directory name that is not a valid skill name",
            );
            continue;
        }
        match reader.read(&path, root) {
            Ok(Some(text)) => reader.chain.skills.push(SkillEntry {
                name,
                provenance: Arc::new(Provenance::new(
                    PromptLayer::Runtime,
                    origin,
                    path.into_string(),
                )),
                text,
            }),
            Ok(None) => {}
            Err(refusal) => reader.skip(
                Some(Block::Skills),
                Provenance::new(layer, origin, path.into_string()),
                refusal,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contribution(path: &str, level: usize) -> Contribution {
        Contribution {
            block: Block::Identity,
            provenance: Arc::new(Provenance::new(PromptLayer::Project, Origin::Project, path)),
            text: path.to_owned().into(),
            interop: false,
            imports: Imports::default(),
            level,
        }
    }

    fn chain() -> LoadedChain {
        LoadedChain {
            contributions: vec![
                contribution("/p/.vak/prompts/identity.md", 0),
                contribution("/p/a/b/.vak/prompts/identity.md", 1),
            ],
            project_levels: vec!["/p".into(), "/p/a/b".into()],
            ..LoadedChain::default()
        }
    }

    fn order(chain: &LoadedChain) -> Vec<(String, usize)> {
        chain
            .contributions
            .iter()
            .map(|c| (c.provenance.source.to_string(), c.level))
            .collect()
    }

    /// A candidate file at a level the chain has keeps that level; one in a
    /// directory that is no level yet makes it one, between the levels
    /// above and below it, as a load would once the file exists.
    #[test]
    fn a_candidate_lands_at_its_own_level_even_a_new_one() {
        let at = |path: &str| Provenance::new(PromptLayer::Project, Origin::Project, path);

        let mut existing = chain();
        existing.substitute(
            Block::Identity,
            &at("/p/a/b/.vak/prompts/identity.md"),
            Some("x"),
        );
        assert_eq!(
            order(&existing),
            [
                ("/p/.vak/prompts/identity.md".to_owned(), 0),
                ("/p/a/b/.vak/prompts/identity.md".to_owned(), 1)
            ]
        );

        let mut between = chain();
        between.substitute(
            Block::Identity,
            &at("/p/a/.vak/prompts/identity.md"),
            Some("x"),
        );
        assert_eq!(
            order(&between),
            [
                ("/p/.vak/prompts/identity.md".to_owned(), 0),
                ("/p/a/.vak/prompts/identity.md".to_owned(), 1),
                ("/p/a/b/.vak/prompts/identity.md".to_owned(), 2)
            ]
        );
        assert_eq!(between.project_levels, ["/p", "/p/a", "/p/a/b"]);

        let mut below = chain();
        below.substitute(
            Block::Identity,
            &at("/p/a/b/c/.vak/prompts/identity.md"),
            Some("x"),
        );
        assert_eq!(
            order(&below),
            [
                ("/p/.vak/prompts/identity.md".to_owned(), 0),
                ("/p/a/b/.vak/prompts/identity.md".to_owned(), 1),
                ("/p/a/b/c/.vak/prompts/identity.md".to_owned(), 2)
            ]
        );

        // Removing adds no level.
        let mut removed = chain();
        removed.substitute(Block::Identity, &at("/p/a/.vak/prompts/identity.md"), None);
        assert_eq!(removed.project_levels, ["/p", "/p/a/b"]);
    }
}
