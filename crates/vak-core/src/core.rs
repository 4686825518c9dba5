use std::path::Path;
use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::{Name, Origin, SurfaceKind};
use vak_prompt_compose::{
    ComposeMemo, ResolveInput, ResolvedPrompt, TailContext, resolve_prompt_with,
};
use vak_prompt_loader::{
    LoadRequest, LoadedChain, RootKind, Snapshot, discover_project, load_chain,
};
use vak_prompt_trust::{Trust, TrustStore};
use vak_session::Store;
use vak_store_file::FileStore;

use crate::CoreError;

/// `$VAK_HOME`, or `~/vak-home` when it is unset.
pub fn default_home() -> Result<Utf8PathBuf, CoreError> {
    if let Some(home) = std::env::var_os("VAK_HOME").filter(|v| !v.is_empty()) {
        return utf8(home.into());
    }
    let user_home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .ok_or(CoreError::NoHome)?;
    Ok(utf8(user_home.into())?.join("vak-home"))
}

fn utf8(path: std::path::PathBuf) -> Result<Utf8PathBuf, CoreError> {
    Utf8PathBuf::from_path_buf(path)
        .map_err(|p| CoreError::NonUtf8Path(p.to_string_lossy().into_owned()))
}

/// An absolute form of `path`, with every symlink resolved as far as it
/// exists ([`resolved`]): a directory named through a link is judged where
/// the link leads, even when its last part does not exist yet.
fn absolute(path: &Utf8Path) -> Result<Utf8PathBuf, CoreError> {
    let path = if path.is_absolute() {
        path.to_owned()
    } else {
        let cwd = std::env::current_dir().map_err(|_| CoreError::NonUtf8Path(path.to_string()))?;
        utf8(cwd)?.join(path)
    };
    match resolved(&path) {
        Some((_, full)) => utf8(full),
        None => Ok(path),
    }
}

/// `path` with every symlink resolved, as far as it exists: its nearest
/// existing ancestor (itself, when it exists) made canonical, and that with
/// the rest of `path` after it, as named (what does not exist cannot be a
/// link). `None` when no part of it resolves.
pub(crate) fn resolved(path: &Utf8Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let mut existing = path;
    let mut rest: Vec<&str> = Vec::new();
    loop {
        if let Ok(real) = vak_fs::canonical(existing) {
            let mut full = real.clone();
            full.extend(rest.iter().rev());
            return Some((real, full));
        }
        rest.push(existing.file_name()?);
        existing = existing.parent()?;
    }
}

/// Which chain to resolve: the home, the project, and the sub-layer
/// selectors. The same set every `vak prompts` command takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Selectors {
    /// `$VAK_HOME`.
    pub home: Utf8PathBuf,
    /// The project directory.
    pub project: Utf8PathBuf,
    /// The surface kind.
    pub surface: SurfaceKind,
    /// A gateway bot.
    pub bot: Option<Name>,
    /// A gateway chat of that bot.
    pub chat: Option<Name>,
    /// A worker role.
    pub agent: Option<Name>,
    /// Force demotion, for inspecting what a clone would get.
    pub force_untrusted: bool,
    /// The working directory inside the project, when it is not the root:
    /// each directory from the root down to it with its own `.vak/prompts/`
    /// (or interop file) is a narrower project sub-layer.
    pub workdir: Option<Utf8PathBuf>,
}

impl Selectors {
    /// Selectors for `project` under `home`, CLI surface, nothing else.
    pub fn new(home: impl Into<Utf8PathBuf>, project: impl Into<Utf8PathBuf>) -> Self {
        Selectors {
            home: home.into(),
            project: project.into(),
            surface: SurfaceKind::Cli,
            bot: None,
            chat: None,
            agent: None,
            force_untrusted: false,
            workdir: None,
        }
    }

    /// Selectors for a command run in `start`: the project
    /// is the root found upwards from it (`.git`, else `.vak`, else `start`;
    /// never `$VAK_HOME` or anything inside it, never across a filesystem
    /// boundary), and `start` is the working directory whose directory
    /// sub-layers apply.
    ///
    /// # Errors
    ///
    /// `start` does not exist or is not UTF-8.
    pub fn discover(home: impl Into<Utf8PathBuf>, start: &Utf8Path) -> Result<Self, CoreError> {
        let home = home.into();
        let found = discover_project(start, Some(&absolute(&home)?)).map_err(|error| {
            CoreError::Discovery {
                start: start.to_owned(),
                error,
            }
        })?;
        let workdir =
            (found.kind != RootKind::Home && found.workdir != found.root).then_some(found.workdir);
        Ok(Selectors {
            workdir,
            ..Selectors::new(home, found.root)
        })
    }

    /// The working directory relative to the project root, when it is below
    /// the root: `services/payments`.
    pub fn subdir(&self) -> Option<&Utf8Path> {
        self.workdir
            .as_deref()
            .and_then(|w| w.strip_prefix(&self.project).ok())
            .filter(|rel| !rel.as_str().is_empty())
    }
}

impl Selectors {
    /// What the loader is asked to read for these selectors.
    pub fn load_request(&self) -> LoadRequest {
        LoadRequest {
            home: self.home.clone(),
            project: self.project.clone(),
            surface: self.surface,
            bot: self.bot.clone(),
            chat: self.chat.clone(),
            agent: self.agent.clone(),
            workdir: self.workdir.clone(),
        }
    }
}

/// How the trust level was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrustSource {
    Store,
    Forced(Trust),
}

/// The runtime's prompt-layer entry point.
#[derive(Debug, Clone)]
pub struct Core {
    selectors: Selectors,
    trust_source: TrustSource,
    /// The store sessions, kept texts and versions go to (DECISIONS §13,
    /// §14): the home's file store unless the caller chose one.
    store: Arc<dyn Store>,
    /// Whether the project is the home or inside it, once a check pinned
    /// it ([`Core::pinned`]) for every chain it chooses from this core
    /// ([`Core::reselect`]): answering it resolves both paths. `None`
    /// (every other core, some held for long) asks each time.
    in_home: Option<bool>,
}

impl Core {
    /// A core for `selectors`, trusting the project as the trust store says
    /// (or not at all with `force_untrusted`). Paths are made absolute.
    pub fn open(mut selectors: Selectors) -> Result<Self, CoreError> {
        if selectors.chat.is_some() && selectors.bot.is_none() {
            return Err(CoreError::ChatWithoutBot);
        }
        selectors.home = absolute(&selectors.home)?;
        selectors.project = absolute(&selectors.project)?;
        if let Some(workdir) = &selectors.workdir {
            let workdir = absolute(workdir)?;
            // Discovery from inside a nested repository finds it as the
            // root; only a named directory (`--dir`, the admin's `dir=`) or
            // an old ledger can ask for one below another root.
            if let Some(nested) = vak_prompt_loader::nested_repository(&selectors.project, &workdir)
            {
                return Err(CoreError::NestedRepository {
                    project: selectors.project,
                    workdir,
                    nested,
                });
            }
            selectors.workdir = Some(workdir);
        }
        let trust_source = if selectors.force_untrusted {
            TrustSource::Forced(Trust::Untrusted)
        } else {
            TrustSource::Store
        };
        let store: Arc<dyn Store> = Arc::new(FileStore::new(&selectors.home));
        Ok(Core {
            selectors,
            trust_source,
            store,
            in_home: None,
        })
    }

    /// Doc 45's probe entry point: the project at `dir` under the default
    /// home, trusted or not as told, regardless of the trust store.
    pub fn new_with_trust(dir: impl AsRef<Path>, trust_project: bool) -> Self {
        let project = Utf8PathBuf::from(dir.as_ref().to_string_lossy().into_owned());
        let home = default_home().unwrap_or_else(|_| Utf8PathBuf::from("/nonexistent-vak-home"));
        let trust = if trust_project {
            Trust::Trusted
        } else {
            Trust::Untrusted
        };
        let store: Arc<dyn Store> = Arc::new(FileStore::new(&home));
        Core {
            selectors: Selectors {
                project: absolute(&project).unwrap_or(project),
                ..Selectors::new(home, Utf8PathBuf::new())
            },
            trust_source: TrustSource::Forced(trust),
            store,
            in_home: None,
        }
    }

    /// This core with `store` as the store (opened by whoever parsed
    /// `--store`, `VAK_STORE` or the shared config: `vak_gateway::open_store`).
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = store;
        self
    }

    /// The store sessions, kept texts and versions go to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The selectors this core resolves.
    pub fn selectors(&self) -> &Selectors {
        &self.selectors
    }

    /// The trust level this core was told to use regardless of the trust
    /// store, if any (part of what a cached resolution is keyed by).
    pub(crate) fn forced_trust(&self) -> Option<Trust> {
        match self.trust_source {
            TrustSource::Forced(trust) => Some(trust),
            TrustSource::Store => None,
        }
    }

    /// How far the project is trusted right now.
    pub fn trust(&self) -> Result<Trust, CoreError> {
        match self.trust_source {
            TrustSource::Forced(trust) => Ok(trust),
            TrustSource::Store => {
                Ok(TrustStore::load(&self.selectors.home)?.trust_of(&self.selectors.project))
            }
        }
    }

    /// This core's home, project, trust and store with other selectors of
    /// the same project: a chain of a check's plan, chosen without opening
    /// a core of its own. Only for selectors whose working directory the
    /// plan found (the layer walk never enters a nested repository) or
    /// this core's own.
    pub(crate) fn reselect(&self, selectors: Selectors) -> Core {
        debug_assert!(self.in_home.is_some(), "reselected from an unpinned core");
        debug_assert!(selectors.home == self.selectors.home);
        debug_assert!(selectors.project == self.selectors.project);
        Core {
            selectors,
            ..self.clone()
        }
    }

    /// This core, with whether its project lies in the home answered now
    /// and kept: for the chains of one check ([`Core::reselect`]).
    pub(crate) fn pinned(&self) -> Core {
        Core {
            in_home: Some(self.project_is_home()),
            ..self.clone()
        }
    }

    /// Read every layer of the chain.
    pub fn load(&self) -> Result<LoadedChain, CoreError> {
        let mut chain = load_chain(&self.selectors.load_request())?;
        self.as_project(&mut chain);
        Ok(chain)
    }

    /// The chain, chosen from `snapshot`: what a check that budgets many
    /// chains reads each of them with, every input read once.
    pub fn load_from(&self, snapshot: &mut Snapshot) -> Result<LoadedChain, CoreError> {
        let mut chain = snapshot.load(&self.selectors.load_request())?;
        self.as_project(&mut chain);
        Ok(chain)
    }

    /// A loaded chain as this project's: nothing of a project that is the
    /// home or inside it.
    fn as_project(&self, chain: &mut LoadedChain) {
        if self.project_is_home() {
            if let (Ok(home), Ok(project)) = (
                vak_fs::canonical(&self.selectors.home),
                vak_fs::canonical(&self.selectors.project),
            ) && home != project
            {
                chain.skipped.push(vak_prompt_loader::Skipped {
                    block: None,
                    provenance: vak_prompt_blocks::Provenance::new(
                        vak_prompt_blocks::PromptLayer::Project,
                        Origin::Home,
                        self.selectors.project.as_str(),
                    ),
                    reason: "is inside the vak home, and the home is never a project: only the shared layers apply".to_owned(),
                });
            }
            // Run from inside `$VAK_HOME`: its `.vak/prompts` is the shared
            // layer, already read as such. Read a second time as a project
            // it would be reported as "not applied" while it applies.
            chain
                .contributions
                .retain(|c| c.provenance.origin != Origin::Project);
            chain
                .skipped
                .retain(|s| s.provenance.origin != Origin::Project);
            chain.configs.retain(|c| c.origin != Origin::Project);
            chain.skills.retain(|s| s.origin() != Origin::Project);
            chain.legacy_system = None;
            chain.role_dirs.dedup();
        }
    }

    /// Whether the project directory is the vak home itself or anywhere
    /// inside it: the home and everything inside it is never a project,
    /// whether named by `--project` or found by discovery.
    pub fn project_is_home(&self) -> bool {
        self.in_home.unwrap_or_else(|| self.resolves_into_home())
    }

    /// [`project_is_home`](Self::project_is_home), asked of the file system.
    fn resolves_into_home(&self) -> bool {
        let (Ok(home), Ok(project)) = (
            vak_fs::canonical(&self.selectors.home),
            vak_fs::canonical(&self.selectors.project),
        ) else {
            return false;
        };
        project.starts_with(home)
    }

    /// Resolve the prompt, with the tail rendered for `tail`.
    pub fn resolve_at(&self, tail: TailContext) -> Result<ResolvedPrompt, CoreError> {
        let chain = self.load()?;
        let trust = self.trust()?;
        refuse_imports(self.compose(&chain, trust, tail))
    }

    /// Resolve the prompt, with the tail rendered for now.
    pub fn resolve(&self) -> Result<ResolvedPrompt, CoreError> {
        self.resolve_at(TailContext::now())
    }

    /// Compose an already-loaded chain, e.g. one with a candidate edit
    /// substituted, under this core's selectors.
    pub fn compose(&self, chain: &LoadedChain, trust: Trust, tail: TailContext) -> ResolvedPrompt {
        self.compose_with(chain, trust, tail, &mut ComposeMemo::new())
    }

    /// [`compose`](Self::compose), sharing `memo` with the other chains a
    /// check composes.
    pub(crate) fn compose_with(
        &self,
        chain: &LoadedChain,
        trust: Trust,
        tail: TailContext,
        memo: &mut ComposeMemo,
    ) -> ResolvedPrompt {
        resolve_prompt_with(
            &ResolveInput {
                chain,
                trust,
                surface: self.selectors.surface,
                agent: self.selectors.agent.as_ref(),
                tail,
            },
            memo,
        )
    }

    /// The assembled prefix. If the chain cannot be read at all (or a
    /// file in force imports one that cannot be read), the
    /// built-in prompt alone: the floor never depends on the project.
    pub fn system_prompt(&self) -> String {
        match self.resolve() {
            Ok(resolved) => resolved.prefix,
            Err(error) => {
                tracing::error!(%error, "prompt chain unreadable; using the built-in prompt");
                self.compose(
                    &LoadedChain::default(),
                    Trust::Untrusted,
                    TailContext::now(),
                )
                .prefix
            }
        }
    }
}

/// `prompt`, unless a block file in force in it imports a file that could
/// not be read: then no session may run on it (the prompt would lack text
/// its author wrote), and the error names each such import.
pub(crate) fn refuse_imports(prompt: ResolvedPrompt) -> Result<ResolvedPrompt, CoreError> {
    if prompt.refused_imports.is_empty() {
        Ok(prompt)
    } else {
        Err(CoreError::ImportRefused(prompt.refused_imports))
    }
}
