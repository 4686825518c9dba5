//! Which chains a change reaches (`ChainPlan`), in what order they are
//! visited, and the work bound that stops a visit.

#[allow(clippy::wildcard_imports)]
use super::*;

/// At most this many gateway bots and chats are budgeted: a bound on the
/// memory a check's list of entries takes, far past any real gateway (a
/// chat's chains cost a few additions each, bounded from its bot's), not a
/// limit a home meets.
pub const MAX_GATEWAY_CHAINS: usize = 1 << 20;

/// The work bound per token of the default cap: the work a plan may do
/// grows with the room its chains may take, since a chain at the cap costs
/// about that many tokens to compose and count.
pub const WORK_PER_CAP_TOKEN: usize = 8_000;

/// At most this much work is done across all the chains one plan visits,
/// counted as [`chain_work`] counts it: the tokens every budget counted
/// (each layer's whole text, repeats included) and a token per 4 bytes
/// read. The work grows with roles × layers × their sizes, and counting
/// the prefix alone missed what repeats cost: 100 directory layers under a
/// root of 65,000 repeated bullets (one in the prefix, all of them read,
/// composed and counted on every chain) took `trust` and a save 6.5 s
/// without tripping it. It is [`WORK_PER_CAP_TOKEN`] times the default cap
/// (about 65 M): measured in release at about 20–30 ns per unit, so a
/// check stops after a second and a half or so of counting; a monorepo of
/// 30 `AGENTS.md` and 5 roles near a 1500-token cap costs 2.7 M for a
/// shared save and 5.5 M for `trust`, and chains near the default cap
/// about five times that. Chains past the bound are not budgeted, which
/// is said and refused unless accepted ([`Unchecked`]).
pub const MAX_PLAN_WORK: usize = WORK_PER_CAP_TOKEN * vak_prompt_budget::DEFAULT_MAX_TOKENS;

/// One chain a plan visits: what selects it, and which of the plan's
/// gateway entries it is, if one. The index lets whoever bounds thousands
/// of chats keep what it learnt of each in a vector, in the order the plan
/// visits them, instead of hashing names per chain.
#[derive(Debug, Clone, Copy)]
pub struct PlannedChain<'a> {
    /// The chain's selectors.
    pub selectors: &'a Selectors,
    /// Its gateway entry (a bot, or a bot's chat) in the plan's list, the
    /// same list for every plan of one check; `None` for every other chain.
    pub entry: Option<usize>,
}

/// A path as its text, for comparisons made once per chain: `Path`'s
/// equality walks components. Two spellings of one path compare unequal,
/// which only costs the caller a lookup or a clone, never a confusion.
pub(crate) fn path_text(path: &Option<Utf8PathBuf>) -> Option<&str> {
    path.as_deref().map(Utf8Path::as_str)
}

/// What composing and budgeting one chain of a plan weighed and cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Visited {
    /// Its longest prefix, in tokens: what ranks it for crossing.
    pub tokens: usize,
    /// The work it took ([`chain_work`]), counted against
    /// [`MAX_PLAN_WORK`].
    pub work: usize,
}

/// The work of reading `chain` once and budgeting it as `budgets`: every
/// token each budget counted ([`BudgetReport::tokens_counted`]: each
/// layer's whole text, not only what the prefix keeps of it, so a file of
/// repeated bullets costs what it costs to read, compose and count), and a
/// token per 4 bytes the load read (a shadowed file is read, though no
/// budget counts it).
pub fn chain_work<'a>(
    chain: &LoadedChain,
    budgets: impl IntoIterator<Item = &'a BudgetReport>,
) -> usize {
    budgets
        .into_iter()
        .fold(chain.text_bytes() / 4, |work, report| {
            work.saturating_add(report.tokens_counted())
        })
}

/// What one directory visited by the walk that lists directory layers
/// costs, in the units of [`MAX_PLAN_WORK`]: about 8 µs in release, what
/// counting 300 tokens takes. A walk stops at
/// [`vak_prompt_loader::MAX_VISITED`] directories, but a shared save walks
/// every trusted project, so walking is counted like composing.
pub const WORK_PER_DIRECTORY: usize = 300;

/// The work one check has done, across every plan it visits (a shared
/// save visits one per trusted project), against its bound: by default
/// [`MAX_PLAN_WORK`], or [`WORK_PER_CAP_TOKEN`] times a cap in force above
/// the default ([`Work::for_cap`]), since a larger cap lets every chain
/// weigh more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub(super) spent: usize,
    pub(super) bound: usize,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            spent: 0,
            bound: MAX_PLAN_WORK,
        }
    }
}

impl Work {
    /// No work done yet, bounded by [`WORK_PER_CAP_TOKEN`] times `cap`,
    /// and never below [`MAX_PLAN_WORK`]: a lower cap does not make a chain
    /// cheaper to read, compose and count (its files are as long), so a
    /// user who lowers the cap keeps the default's room to check a home of
    /// many roles and chats; a larger cap lets every chain weigh more.
    pub fn for_cap(cap: usize) -> Self {
        Work {
            spent: 0,
            bound: WORK_PER_CAP_TOKEN
                .saturating_mul(cap.max(1))
                .max(MAX_PLAN_WORK),
        }
    }

    /// Whether the bound is reached: nothing more is visited, or walked.
    pub fn is_spent(&self) -> bool {
        self.spent >= self.bound
    }

    /// The bound.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The work counted so far.
    pub fn spent(&self) -> usize {
        self.spent
    }

    fn add(&mut self, work: usize) {
        self.spent = self.spent.saturating_add(work);
    }
}

/// At most this many projects are named in a note that says some were
/// left out; the rest are counted.
const MAX_PROJECTS_NAMED: usize = 3;

/// What a check could not budget: said, never silent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainsLeftOut {
    /// Gateway bots and chats not budgeted at all.
    pub gateway: usize,
    /// The projects whose walk that lists directory layers stopped before
    /// it looked everywhere ([`vak_prompt_loader::MAX_LAYERS`] layers or
    /// [`vak_prompt_loader::MAX_VISITED`] directories).
    pub unlisted_in: Vec<Utf8PathBuf>,
    /// Chains not budgeted because the check had counted
    /// [`MAX_PLAN_WORK`] already.
    pub over_work: usize,
    /// Trusted projects a shared save reaches that were not looked at, not
    /// even walked, because the check had counted [`MAX_PLAN_WORK`] before
    /// it came to them.
    pub projects: Vec<Utf8PathBuf>,
    /// The work bound the check ran under ([`Work::bound`]), for the note.
    pub work_bound: usize,
}

/// `paths` as a note names them: the first few, then how many more.
fn some_paths(paths: &[Utf8PathBuf]) -> String {
    let mut named: Vec<String> = paths
        .iter()
        .take(MAX_PROJECTS_NAMED)
        .map(|p| format!("`{}`", Escaped(p.as_str())))
        .collect();
    if paths.len() > MAX_PROJECTS_NAMED {
        named.push(format!("{} more", paths.len() - MAX_PROJECTS_NAMED));
    }
    named.join(", ")
}

impl ChainsLeftOut {
    /// Why a check cannot vouch for every chain, when it cannot: the walk
    /// that lists directory layers stopped at its bound, or chains were not
    /// counted at all for the work bound. A clone decides how many
    /// directories and chains it has and how large their prompts are, so
    /// either could hide one over the cap: `vak trust` and every save,
    /// reset and revert refuse, unless told `--over-budget`. (Gateway
    /// entries past [`MAX_GATEWAY_CHAINS`] are the user's own, in the home,
    /// and only said.)
    pub fn unproven(&self) -> Option<String> {
        (!self.unlisted_in.is_empty() || self.over_work > 0 || !self.projects.is_empty())
            .then(|| self.note())
            .flatten()
    }

    /// Add what another plan of the same check left out.
    pub(crate) fn merge(&mut self, other: ChainsLeftOut) {
        // Every plan lists the same home's gateway entries.
        self.gateway = self.gateway.max(other.gateway);
        self.unlisted_in.extend(other.unlisted_in);
        self.over_work = self.over_work.saturating_add(other.over_work);
        self.projects.extend(other.projects);
        self.work_bound = self.work_bound.max(other.work_bound);
    }

    /// What to tell the user, when anything was left out.
    pub fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.gateway > 0 {
            parts.push(format!(
                "{} gateway bot{} or chat{} not at all (past the first {MAX_GATEWAY_CHAINS}; check one with `vak prompts check --surface chat --bot BOT --chat CHAT`)",
                self.gateway,
                if self.gateway == 1 { "" } else { "s" },
                if self.gateway == 1 { "" } else { "s" }
            ));
        }
        if self.over_work > 0 {
            parts.push(format!(
                "{} chain{} not at all, because there are so many chains, or their layers are so large (repeated text included), that counting every one would take too long (the bound of {} tokens of work was reached; check one with `vak prompts check --surface S --agent ROLE --dir DIR`)",
                self.over_work,
                if self.over_work == 1 { "" } else { "s" },
                self.work_bound
            ));
        }
        if !self.projects.is_empty() {
            parts.push(format!(
                "{} other trusted project{} not at all ({}), because the bound of {} tokens of work was reached before {}; check one with `vak prompts check --project DIR`",
                self.projects.len(),
                if self.projects.len() == 1 { "" } else { "s" },
                some_paths(&self.projects),
                self.work_bound,
                if self.projects.len() == 1 { "it" } else { "them" }
            ));
        }
        if !self.unlisted_in.is_empty() {
            parts.push(format!(
                "the walk that lists directory layers stopped (at {} layers or {} directories) in {}, so layers past it were not looked at; check one with `vak prompts check --dir DIR`",
                vak_prompt_loader::MAX_LAYERS,
                vak_prompt_loader::MAX_VISITED,
                some_paths(&self.unlisted_in)
            ));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "not every chain was budgeted everywhere: {}",
                parts.join("; ")
            )
        })
    }
}

/// The roles that have a directory under the home or the project (a
/// symlink staying inside its root counts), each name valid, sorted by
/// name. Bounded by the first 4096 entries of each `agents/` directory.
pub fn roles_with_dirs(selectors: &Selectors) -> Vec<Name> {
    let mut roles: Vec<Name> = Vec::new();
    for root in [&selectors.home, &selectors.project] {
        let dir = vak_prompt_loader::prompt_dir(root).join("agents");
        let Ok(entries) = vak_fs::entries(&dir, 4096) else {
            continue;
        };
        for entry in entries {
            // Followed: a role directory that is a symlink staying inside
            // its root is read by the loader like any other, so it is
            // budgeted and previewed like any other.
            let is_dir = vak_fs::is_dir(&entry.path) == Some(true);
            if let (true, Some(name)) = (is_dir, entry.name.as_deref())
                && let Ok(role) = Name::new(vak_prompt_blocks::NameKind::Role, name)
            {
                roles.push(role);
            }
        }
    }
    roles.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    roles.dedup_by(|a, b| a.as_str() == b.as_str());
    roles
}

/// A gateway's bots (no chat) and chats with prompts of their own, each
/// named by its bot and chat.
type GatewayEntries = Vec<(Name, Option<Name>)>;

/// Every gateway bot (`bots.json`) of the home, and every chat
/// (`allowlist.json`) with prompts of its own, valid names only, bots
/// first. A chat without its own prompts resolves as its bot does, so its
/// bot's chain stands for it. Read through `snapshot`, which keeps the
/// parsed files for the chains the check then loads.
fn gateway_entries(home: &Utf8Path, snapshot: &mut Snapshot) -> GatewayEntries {
    use vak_prompt_blocks::NameKind;
    use vak_prompt_loader::GatewayFile;
    let mut out = Vec::new();
    if let Some(table) = snapshot.gateway_table(home, GatewayFile::Bots) {
        out.extend(
            table
                .bots()
                .filter_map(|bot| Name::new(NameKind::Bot, bot).ok())
                .map(|bot| (bot, None)),
        );
    }
    if let Some(table) = snapshot.gateway_table(home, GatewayFile::Allowlist)
        && let vak_prompt_loader::GatewayTable::Allowlist(entries) = &*table
    {
        use vak_prompt_loader::Shape;
        for (bot, chats) in entries {
            let (Ok(bot), Shape::Is(chats)) = (Name::new(NameKind::Bot, bot), chats) else {
                continue;
            };
            out.extend(
                chats
                    .iter()
                    .filter(|(_, entry)| matches!(entry, Shape::Is(entry) if entry.has_prompts()))
                    .filter_map(|(chat, _)| Name::new(NameKind::Chat, chat).ok())
                    .map(|chat| (bot.clone(), Some(chat))),
            );
        }
    }
    out
}

/// No role, then every role with a directory: the roles a plan reaches.
fn no_role_then_each(base: &Selectors) -> Vec<Option<Name>> {
    std::iter::once(None)
        .chain(roles_with_dirs(base).into_iter().map(Some))
        .collect()
}

/// The chains a check visits: every surface, every
/// role with a directory (or the one role), the root and every directory
/// layer (or those below the one changed), and every gateway bot and chat.
#[derive(Debug, Clone)]
pub struct ChainPlan {
    base: Selectors,
    surfaces: Vec<SurfaceKind>,
    /// `None` is "no role"; a plan for one role's file holds only it.
    roles: Vec<Option<Name>>,
    /// The named working directory first.
    workdirs: Vec<Option<Utf8PathBuf>>,
    gateway: Vec<(Name, Option<Name>)>,
    gateway_left_out: usize,
    /// What listing the directory layers took.
    walk: Walked,
}

/// What the walk that listed a plan's directory layers took.
#[derive(Debug, Clone, Copy, Default)]
struct Walked {
    /// Whether it looked everywhere it looks.
    complete: bool,
    /// How many directories it visited.
    visited: usize,
}

impl ChainPlan {
    /// The chains a change to `target` reaches from `base`: every surface
    /// (or the one sub-layer's) crossed with every role that has a
    /// directory (or the one role's) and with the root and every directory
    /// layer (those at or below the one changed, for a directory file),
    /// bounded only by [`MAX_PLAN_WORK`], as for trusting.
    pub fn for_change(base: &Selectors, target: &EditTarget) -> ChainPlan {
        ChainPlan::for_change_in(base, target, &mut None, &mut Snapshot::new())
    }

    /// [`for_change`](Self::for_change), with the home's gateway entries
    /// listed once for every plan of a check (`entries`, filled by the
    /// first plan that lists them, from the files `snapshot` parses once
    /// for the check's chains): a shared save makes one plan per trusted
    /// project, all with the same home.
    pub(crate) fn for_change_in(
        base: &Selectors,
        target: &EditTarget,
        entries: &mut Option<GatewayEntries>,
        snapshot: &mut Snapshot,
    ) -> ChainPlan {
        let surfaces = match &target.sub {
            SubLayer::Surface(kind) => vec![*kind],
            _ => SurfaceKind::ALL.to_vec(),
        };
        let roles = match &target.sub {
            SubLayer::Agent(role) => vec![Some(role.clone())],
            _ => no_role_then_each(base),
        };
        let below = match &target.sub {
            SubLayer::Directory(dir) => Some(dir.as_path()),
            _ => None,
        };
        let (workdirs, walk) = layer_workdirs(base, below);
        ChainPlan::new(base, surfaces, roles, workdirs, walk, (entries, snapshot))
    }

    /// The chains trusting `base.project` reaches, `base` first: every role
    /// crossed with every directory layer on every surface, bounded only by
    /// [`MAX_PLAN_WORK`].
    pub fn for_trust(base: &Selectors) -> ChainPlan {
        ChainPlan::for_trust_in(base, &mut Snapshot::new())
    }

    /// [`for_trust`](Self::for_trust), the gateway files read through
    /// `snapshot`, which the check then loads its chains from.
    pub(crate) fn for_trust_in(base: &Selectors, snapshot: &mut Snapshot) -> ChainPlan {
        let (workdirs, walk) = layer_workdirs(base, None);
        ChainPlan::new(
            base,
            SurfaceKind::ALL.to_vec(),
            no_role_then_each(base),
            workdirs,
            walk,
            (&mut None, snapshot),
        )
    }

    /// The chains a change of one gateway key reaches from `base`'s
    /// project, at its root, on the chat surface, each with no role and
    /// with every role that has a directory: `bot`'s chain and each of its
    /// chats with prompts of its own, or `chat`'s chain alone.
    pub fn for_gateway(base: &Selectors, bot: &Name, chat: Option<&Name>) -> ChainPlan {
        let base = Selectors {
            surface: SurfaceKind::Chat,
            bot: Some(bot.clone()),
            chat: chat.cloned(),
            workdir: None,
            ..base.clone()
        };
        let mut gateway: Vec<(Name, Option<Name>)> = match chat {
            Some(_) => Vec::new(),
            None => gateway_entries(&base.home, &mut Snapshot::new())
                .into_iter()
                .filter(|(of, chat)| of == bot && chat.is_some())
                .collect(),
        };
        let gateway_left_out = gateway.len().saturating_sub(MAX_GATEWAY_CHAINS);
        gateway.truncate(MAX_GATEWAY_CHAINS);
        ChainPlan {
            roles: no_role_then_each(&base),
            base,
            surfaces: vec![SurfaceKind::Chat],
            workdirs: vec![None],
            gateway,
            gateway_left_out,
            walk: Walked {
                complete: true,
                visited: 0,
            },
        }
    }

    /// The selectors the plan's chains vary.
    pub fn base(&self) -> &Selectors {
        &self.base
    }

    fn new(
        base: &Selectors,
        surfaces: Vec<SurfaceKind>,
        roles: Vec<Option<Name>>,
        workdirs: Vec<Option<Utf8PathBuf>>,
        walk: Walked,
        (entries, snapshot): (&mut Option<GatewayEntries>, &mut Snapshot),
    ) -> ChainPlan {
        let mut gateway = if surfaces.contains(&SurfaceKind::Chat) {
            entries
                .get_or_insert_with(|| gateway_entries(&base.home, snapshot))
                .clone()
        } else {
            Vec::new()
        };
        let gateway_left_out = gateway.len().saturating_sub(MAX_GATEWAY_CHAINS);
        gateway.truncate(MAX_GATEWAY_CHAINS);
        ChainPlan {
            base: base.clone(),
            surfaces,
            roles,
            workdirs,
            gateway,
            gateway_left_out,
            walk,
        }
    }

    /// Visit each chain once, `visit` answering what the chain weighed and
    /// cost (`None`: it could not be loaded) or `Break` to stop; once the
    /// work answered adds up to [`MAX_PLAN_WORK`], the chains left are
    /// counted, not visited. First every
    /// role in the named working directory and every directory layer with
    /// the plan's first role, each on every surface, weighed by its longest
    /// prompt, and every gateway bot and chat with that first role; then
    /// every surface × every directory layer × every role, the heaviest of
    /// that first pass first; then every
    /// gateway bot and chat × every other role, the heaviest role first
    /// (after the chains a delivery uses, which have no role).
    /// Every one, not the heaviest few: a clone chooses its texts, and
    /// guardrails a role repeats from heavy layers are dropped there as
    /// duplicates (counting nothing), so a light layer can make the longest
    /// chain with it. The order only decides which chains are left out when
    /// the work bound stops the visit, and those are counted.
    pub fn visit<B>(
        &self,
        visit: impl FnMut(PlannedChain<'_>) -> std::ops::ControlFlow<B, Option<Visited>>,
    ) -> std::ops::ControlFlow<B, ChainsLeftOut> {
        self.visit_within(&mut Work::default(), visit)
    }

    /// [`visit`](Self::visit), counting against `work`, which other plans
    /// of the same check share (a shared save visits one plan per trusted
    /// project): walking this plan's directories counts too
    /// ([`WORK_PER_DIRECTORY`]), as it has been done.
    pub fn visit_within<B>(
        &self,
        work: &mut Work,
        mut visit: impl FnMut(PlannedChain<'_>) -> std::ops::ControlFlow<B, Option<Visited>>,
    ) -> std::ops::ControlFlow<B, ChainsLeftOut> {
        use std::collections::HashSet;
        use std::ops::ControlFlow;
        work.add(self.walk.visited.saturating_mul(WORK_PER_DIRECTORY));
        let base = &self.base;
        let surface0 = if self.surfaces.contains(&base.surface) {
            base.surface
        } else {
            self.surfaces[0]
        };
        // A chain is named by indices (surface, working directory, role,
        // gateway entry) until it is visited: a check reaches hundreds of
        // thousands of chains, and cloning and hashing each one's
        // selectors cost more than bounding it (`reach`).
        const NO_ENTRY: usize = usize::MAX;
        // A gateway entry that is the base's own bot and chat is the
        // base's chain: visited once.
        let entry_key = |index: usize| {
            let (bot, chat) = &self.gateway[index];
            if base.bot.as_ref() == Some(bot) && base.chat == *chat {
                NO_ENTRY
            } else {
                index
            }
        };
        let surface_at = |surface: SurfaceKind| {
            SurfaceKind::ALL
                .iter()
                .position(|s| *s == surface)
                .unwrap_or(usize::MAX)
        };
        let mut seen: HashSet<(usize, usize, usize)> = HashSet::new();
        // Gateway chains are each met once (the first role's in the first
        // pass, every other role's in the last), so they are counted, not
        // remembered: a home may list a million chats and thousands of roles.
        let entry_chains = std::cell::Cell::new(0usize);
        // Work counted so far, and chains skipped once past the bound.
        // Written back to `work` at the end: a `Break` ends the check.
        let spent = std::cell::Cell::new(*work);
        let over_work = std::cell::Cell::new(0usize);
        // One set of selectors, each field set only when it changes.
        let mut current = base.clone();
        let mut go = |surface: SurfaceKind,
                      workdir: usize,
                      role: usize,
                      entry: usize,
                      seen: &mut HashSet<(usize, usize, usize)>| {
            let entry = if entry == NO_ENTRY {
                NO_ENTRY
            } else {
                entry_key(entry)
            };
            if entry == NO_ENTRY {
                if !seen.insert((surface_at(surface), workdir, role)) {
                    return ControlFlow::Continue(None);
                }
            } else {
                entry_chains.set(entry_chains.get() + 1);
            }
            if spent.get().is_spent() {
                over_work.set(over_work.get() + 1);
                return ControlFlow::Continue(None);
            }
            current.surface = surface;
            if path_text(&current.workdir) != path_text(&self.workdirs[workdir]) {
                current.workdir.clone_from(&self.workdirs[workdir]);
            }
            if current.agent != self.roles[role] {
                current.agent.clone_from(&self.roles[role]);
            }
            let (bot, chat) = match entry {
                NO_ENTRY => (base.bot.as_ref(), &base.chat),
                index => (Some(&self.gateway[index].0), &self.gateway[index].1),
            };
            if current.bot.as_ref() != bot {
                current.bot = bot.cloned();
            }
            if current.chat != *chat {
                current.chat.clone_from(chat);
            }
            let flow = visit(PlannedChain {
                selectors: &current,
                entry: (entry != NO_ENTRY).then_some(entry),
            });
            if let ControlFlow::Continue(Some(visited)) = &flow {
                let mut now = spent.get();
                now.add(visited.work);
                spent.set(now);
            }
            flow.map_continue(|visited| visited.map(|v| v.tokens))
        };
        // Each role and each layer on every surface, weighed by its longest:
        // a role that adds nothing on one surface (its bullets repeat that
        // surface's) may add much on another.
        let surfaces: Vec<SurfaceKind> = std::iter::once(surface0)
            .chain(self.surfaces.iter().copied().filter(|s| *s != surface0))
            .collect();
        let mut role_weight: Vec<(usize, usize)> = Vec::new();
        for index in 0..self.roles.len() {
            let mut weight = 0;
            for surface in &surfaces {
                let measured = go(*surface, 0, index, NO_ENTRY, &mut seen)?;
                weight = weight.max(measured.unwrap_or(0));
            }
            role_weight.push((weight, index));
        }
        let mut dir_weight: Vec<(usize, usize)> = vec![(usize::MAX, 0)];
        for index in 1..self.workdirs.len() {
            let mut weight = 0;
            for surface in &surfaces {
                let measured = go(*surface, index, 0, NO_ENTRY, &mut seen)?;
                weight = weight.max(measured.unwrap_or(0));
            }
            dir_weight.push((weight, index));
        }
        for entry in 0..self.gateway.len() {
            go(SurfaceKind::Chat, 0, 0, entry, &mut seen)?;
        }
        // The heaviest first ("no role" last, the named directory first),
        // so a bound that stops the visit leaves out the lightest.
        let heaviest = |mut weights: Vec<(usize, usize)>| {
            weights.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            weights
                .into_iter()
                .map(|(_, index)| index)
                .collect::<Vec<_>>()
        };
        let (no_role, with_role): (Vec<_>, Vec<_>) = role_weight
            .into_iter()
            .partition(|(_, index)| self.roles[*index].is_none());
        let mut roles = heaviest(with_role);
        roles.extend(no_role.into_iter().map(|(_, index)| index));
        let dirs = heaviest(dir_weight);
        for surface in &self.surfaces {
            for &dir in &dirs {
                for &role in &roles {
                    go(*surface, dir, role, NO_ENTRY, &mut seen)?;
                }
            }
        }
        // A delivery may run a chat under any role, so a change that
        // reaches the chats reaches each with every role (a chat's list and
        // a role's can each fit beside the changed text and not both).
        for &role in roles.iter().filter(|role| **role != 0) {
            for entry in 0..self.gateway.len() {
                go(SurfaceKind::Chat, 0, role, entry, &mut seen)?;
            }
        }
        // How close a check came to its bound, for whoever tunes it.
        *work = spent.get();
        tracing::debug!(
            project = %Escaped(base.project.as_str()),
            chains = seen.len() + entry_chains.get() - over_work.get(),
            walked = self.walk.visited,
            work = work.spent(),
            left_out = over_work.get(),
            "budgeted the chains of one plan"
        );
        ControlFlow::Continue(ChainsLeftOut {
            gateway: self.gateway_left_out,
            unlisted_in: if self.walk.complete {
                Vec::new()
            } else {
                vec![base.project.clone()]
            },
            over_work: over_work.get(),
            projects: Vec::new(),
            work_bound: work.bound(),
        })
    }
}

/// The file names read as a directory's operating rules (`[prompts]
/// interop` of the shared config, else `AGENTS.md`), as the loader reads
/// them: a directory whose only layer is a configured `CLAUDE.md` is a
/// layer the budget and the preview must see.
pub fn interop_names(base: &Selectors) -> Vec<String> {
    let request = LoadRequest {
        agent: None,
        workdir: None,
        ..base.load_request()
    };
    load_chain(&request).map_or_else(
        |_| {
            vak_prompt_loader::DEFAULT_INTEROP
                .iter()
                .map(|n| (*n).to_owned())
                .collect()
        },
        |chain| chain.interop_names,
    )
}

/// Every directory layer of `base`'s project, relative to its root, found
/// with the interop names the shared config sets ([`interop_names`]).
pub fn layer_directories(base: &Selectors) -> Vec<Utf8PathBuf> {
    let names = interop_names(base);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    vak_prompt_loader::directory_layers(&base.project, &names, &base.home)
}

/// The named working directory, then (unless `below` is given) the project
/// root, then every directory layer of the project (at or below `below`,
/// when given), and what the walk that lists them took (whether it stopped
/// at its bound, how many directories it visited).
/// Every layer, not only the deepest: identity and operating rules are
/// narrowest-wins, so a middle directory's chain (its long identity) can be
/// longer than that of a deeper one that replaces it with a short one. Any
/// other directory's chain is that of its nearest layer (or the root's).
fn layer_workdirs(
    base: &Selectors,
    below: Option<&Utf8Path>,
) -> (Vec<Option<Utf8PathBuf>>, Walked) {
    let mut out = vec![base.workdir.clone()];
    if below.is_none() && base.workdir.is_some() {
        out.push(None);
    }
    let names = interop_names(base);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let walk = vak_prompt_loader::directory_layers_walked(&base.project, &names, &base.home);
    for dir in walk
        .layers
        .iter()
        .filter(|d| below.is_none_or(|b| d.starts_with(b)))
    {
        let workdir = Some(base.project.join(dir));
        if !out.contains(&workdir) {
            out.push(workdir);
        }
    }
    (
        out,
        Walked {
            complete: walk.complete,
            visited: walk.visited,
        },
    )
}
