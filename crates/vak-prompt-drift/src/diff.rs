use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use vak_prompt_blocks::{Block, PromptLayer};
use vak_prompt_blocks::{ChangeKind, LayerChange, PromptLayerDescriptor, Source};

use camino::Utf8Path;

/// What differs between a frozen contract's descriptors and the current
/// ones, per block and layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    /// True when the frozen list was empty: a ledger from before prompt
    /// layers were recorded. Nothing is reported for it.
    pub unknown_baseline: bool,
    /// Every changed (block, layer) pair, in render order of block, then
    /// layer precedence, then occurrence.
    pub changes: Vec<LayerChange>,
}

impl DriftReport {
    /// Whether anything changed.
    pub fn is_drifted(&self) -> bool {
        !self.changes.is_empty()
    }

    /// The changes of one kind.
    pub fn of_kind(&self, kind: ChangeKind) -> impl Iterator<Item = &LayerChange> {
        self.changes.iter().filter(move |c| c.kind == kind)
    }
}

impl fmt::Display for DriftReport {
    /// One line per change, e.g. `identity (project): changed 3f2a…→9b1c…`;
    /// a line saying so when there is nothing to report.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unknown_baseline {
            return f.write_str(
                "no drift check: the session was frozen before prompt layers were recorded",
            );
        }
        if self.changes.is_empty() {
            return f.write_str("no drift: the prompt in force matches the frozen contract");
        }
        for (i, change) in self.changes.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{change}")?;
        }
        Ok(())
    }
}

/// (block, layer, inventory name, n-th occurrence of the rest). The source
/// path is not part of the identity, as in [`vak_prompt_blocks::fingerprint`]:
/// moving a home directory does not change the instructions. An inventory
/// entry (a skill, an MCP server) is named, so adding one is one `added`,
/// not a shift of every entry after it.
type Key<'a> = (&'a str, &'a str, Option<&'a str>, usize);

/// The name an inventory descriptor is paired by: a skill's directory
/// (`…/skills/<name>/SKILL.md`), an MCP server's name (the config key's
/// name field). `None` for every other block, which pair by occurrence.
fn inventory_name<'a>(block: &str, source: Option<&'a Source>) -> Option<&'a str> {
    let source = source?;
    if block == Block::Skills.wire_name() {
        let path = source.path()?;
        return Some(
            path.parent()
                .and_then(Utf8Path::file_name)
                .unwrap_or(path.as_str()),
        );
    }
    if block == Block::Mcp.wire_name() {
        return source
            .mcp_server()
            .or_else(|| source.path().map(Utf8Path::as_str));
    }
    None
}

/// What a descriptor is paired by besides block, layer and occurrence: an
/// inventory entry's name, or for the `project` layer the directory whose
/// layer it is (`<dir>/.vak/prompts/<file>` and `<dir>/.vak/SYSTEM.md` both
/// name `<dir>`), so a directory sub-layer added between two others is
/// reported as that directory's, not as a shift of every directory below
/// it. A directory's interop file (`<dir>/AGENTS.md`, outside `.vak`) is
/// paired by its directory and file name: it is appended beside that
/// directory's own operating rules, never in their place, so it is never
/// compared with them. The directory is found on the typed path, by its
/// components, never by cutting the rendered string.
fn pairing_name<'a>(block: &str, layer: &str, source: Option<&'a Source>) -> Option<&'a str> {
    if let Some(name) = inventory_name(block, source) {
        return Some(name);
    }
    if layer != vak_prompt_blocks::PromptLayer::Project.wire_name() {
        return None;
    }
    let file = source?.path()?;
    let Some(dir) = file.parent() else {
        return Some(file.as_str());
    };
    let level = if dir.ends_with(".vak/prompts") {
        dir.parent().and_then(Utf8Path::parent)
    } else if dir.ends_with(".vak") {
        dir.parent()
    } else {
        None
    };
    Some(level.unwrap_or(file).as_str())
}

fn keyed(list: &[PromptLayerDescriptor]) -> Vec<(Key<'_>, &PromptLayerDescriptor)> {
    // Ordered maps, not hashed: a contract has a few dozen descriptors, and
    // comparing their short names costs less than SipHashing them.
    let mut seen: BTreeMap<(&str, &str, Option<&str>), usize> = BTreeMap::new();
    list.iter()
        .map(|d| {
            let name = pairing_name(&d.block, &d.layer, d.source.as_ref());
            let n = seen.entry((&*d.block, &*d.layer, name)).or_insert(0);
            let key = (&*d.block, &*d.layer, name, *n);
            *n += 1;
            (key, d)
        })
        .collect()
}

/// One frozen descriptor and the current one it is compared with, as
/// [`diff`] pairs them, by index into the two lists; `None` on one side is
/// a descriptor the other side has no partner for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// The frozen descriptor (`None`: added since).
    pub frozen: Option<usize>,
    /// The current descriptor (`None`: removed since).
    pub current: Option<usize>,
    /// The n-th descriptor of its block, layer and pairing name, on the
    /// side(s) it is on.
    pub occurrence: usize,
}

/// Pair the `frozen` descriptors of a session with the `current` ones by
/// block, layer, pairing name and occurrence (see [`Key`]): every frozen
/// descriptor in its order, with its partner or none, then every current
/// one left without a partner, in its order. The one pairing [`diff`]
/// decides drift on, so anything that words a drift (`vak session diff`)
/// pairs as the decision did.
pub fn pair(frozen: &[PromptLayerDescriptor], current: &[PromptLayerDescriptor]) -> Vec<Pair> {
    pair_keyed(&keyed(frozen), &keyed(current))
}

fn pair_keyed(
    frozen: &[(Key<'_>, &PromptLayerDescriptor)],
    current: &[(Key<'_>, &PromptLayerDescriptor)],
) -> Vec<Pair> {
    // Keys are unique within a side: the occurrence tells repeats apart.
    let mut current_by_key: BTreeMap<Key<'_>, usize> = current
        .iter()
        .enumerate()
        .map(|(i, (key, _))| (*key, i))
        .collect();
    let mut out = Vec::with_capacity(frozen.len().max(current.len()));
    for (fi, (key, _)) in frozen.iter().enumerate() {
        out.push(Pair {
            frozen: Some(fi),
            current: current_by_key.remove(key),
            occurrence: key.3,
        });
    }
    let mut left: Vec<usize> = current_by_key.into_values().collect();
    left.sort_unstable();
    out.extend(left.into_iter().map(|ci| Pair {
        frozen: None,
        current: Some(ci),
        occurrence: current[ci].0.3,
    }));
    out
}

/// Compare the `frozen` descriptors of a session with the `current` ones.
///
/// An empty `frozen` list is an unknown baseline and reports nothing.
/// Descriptors are paired by [`pair`]: by block, layer and occurrence
/// (inventory entries by block, layer and name, project directory layers
/// by their directory, see [`Key`]); a pair whose digest differs is
/// `changed`, one only in `current` is `added`, one only in `frozen` is
/// `removed`.
pub fn diff(frozen: &[PromptLayerDescriptor], current: &[PromptLayerDescriptor]) -> DriftReport {
    if frozen.is_empty() {
        return DriftReport {
            unknown_baseline: true,
            changes: Vec::new(),
        };
    }
    let frozen = keyed(frozen);
    let current = keyed(current);
    let mut changes = Vec::new();
    for p in pair_keyed(&frozen, &current) {
        match (p.frozen.map(|i| frozen[i]), p.current.map(|i| current[i])) {
            (Some((_, old)), Some((_, new))) if new.digest == old.digest => {}
            (Some((key, old)), Some((_, new))) => {
                changes.push(change(key, ChangeKind::Changed, Some(old), Some(new)));
            }
            (Some((key, old)), None) => {
                changes.push(change(key, ChangeKind::Removed, Some(old), None));
            }
            (None, Some((key, new))) => {
                changes.push(change(key, ChangeKind::Added, None, Some(new)));
            }
            (None, None) => {}
        }
    }
    // The same texts in another order render another prompt (the inventory
    // lists skills in chain order): each that changed place is reported, so
    // the decision never continues on a fingerprint that moved.
    if changes.is_empty() {
        let current_by_key: BTreeMap<Key<'_>, &PromptLayerDescriptor> =
            current.iter().copied().collect();
        for ((key, old), (current_key, new)) in frozen.iter().zip(&current) {
            if key != current_key {
                let new = current_by_key.get(key).copied().unwrap_or(new);
                changes.push(change(*key, ChangeKind::Reordered, Some(old), Some(new)));
            }
        }
    }
    changes.sort_by(order);
    DriftReport {
        unknown_baseline: false,
        changes,
    }
}

fn change(
    (block, layer, _, occurrence): Key<'_>,
    kind: ChangeKind,
    old: Option<&PromptLayerDescriptor>,
    new: Option<&PromptLayerDescriptor>,
) -> LayerChange {
    LayerChange {
        block: block.to_owned(),
        layer: layer.to_owned(),
        occurrence,
        kind,
        frozen_digest: old.map(|d| d.digest.clone()),
        current_digest: new.map(|d| d.digest.clone()),
        source: new.or(old).and_then(|d| d.source.clone()),
    }
}

/// Blocks in render order, layers widest first, inventory entries by name
/// and project directory layers by directory (widest first);
/// names this build does not
/// know (from a newer ledger) after the known ones, alphabetically. The
/// order depends only on the keys, so swapping the arguments of [`diff`]
/// swaps added and removed and nothing else.
fn order(a: &LayerChange, b: &LayerChange) -> Ordering {
    fn block_rank(s: &str) -> (usize, &str) {
        (s.parse::<Block>().map_or(usize::MAX, |b| b as usize), s)
    }
    fn layer_rank(s: &str) -> (usize, &str) {
        (
            s.parse::<PromptLayer>().map_or(usize::MAX, |l| l as usize),
            s,
        )
    }
    fn name(c: &LayerChange) -> Option<&str> {
        pairing_name(&c.block, &c.layer, c.source.as_ref())
    }
    block_rank(&a.block)
        .cmp(&block_rank(&b.block))
        .then_with(|| layer_rank(&a.layer).cmp(&layer_rank(&b.layer)))
        .then_with(|| name(a).cmp(&name(b)))
        .then_with(|| a.occurrence.cmp(&b.occurrence))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use vak_prompt_blocks::sha256_hex;

    /// A change's source as people read it.
    fn rendered(c: &LayerChange) -> Option<String> {
        c.source.as_ref().map(ToString::to_string)
    }

    fn d(block: &str, layer: &str, text: &str, source: &str) -> PromptLayerDescriptor {
        PromptLayerDescriptor {
            block: block.to_owned().into(),
            layer: layer.to_owned().into(),
            // As a ledger gives it back.
            source: Some(Source::from_wire(layer, block, source)),
            digest: sha256_hex(text),
            bytes: text.len(),
            signed_by: None,
        }
    }

    #[test]
    fn the_same_skills_in_another_order_are_reordered() {
        let skill = |name: &str, root: &str| {
            d(
                "skills",
                "runtime",
                name,
                &format!("{root}/.vak/skills/{name}/SKILL.md"),
            )
        };
        let frozen = vec![skill("aa", "/h"), skill("zz", "/h"), skill("mm", "/p")];
        let current = vec![skill("aa", "/h"), skill("mm", "/p"), skill("zz", "/p")];
        let report = diff(&frozen, &current);
        assert!(report.is_drifted(), "{report}");
        let moved: Vec<_> = report
            .changes
            .iter()
            .map(|c| (c.kind, rendered(c)))
            .collect();
        assert_eq!(
            moved,
            [
                (
                    ChangeKind::Reordered,
                    Some("/p/.vak/skills/mm/SKILL.md".to_owned())
                ),
                (
                    ChangeKind::Reordered,
                    Some("/p/.vak/skills/zz/SKILL.md".to_owned())
                ),
            ]
        );
        assert!(report.to_string().contains("reordered"), "{report}");
        assert!(!diff(&frozen, &frozen).is_drifted());
    }

    #[test]
    fn reports_changed_added_removed_with_both_digests() {
        let frozen = vec![
            d("identity", "project", "old", "/p/identity.md"),
            d("guardrails", "seed", "g", "builtin:guardrails"),
            d("surface-note", "shared", "n", "/h/surface-note.md"),
        ];
        let current = vec![
            d("identity", "project", "new", "/p/identity.md"),
            d("guardrails", "seed", "g", "builtin:guardrails"),
            d(
                "guardrails",
                "chat",
                "c",
                "allowlist.json#/b/c/prompts/guardrails",
            ),
        ];
        let report = diff(&frozen, &current);
        let kinds: Vec<_> = report
            .changes
            .iter()
            .map(|c| (c.block.as_str(), c.layer.as_str(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("identity", "project", ChangeKind::Changed),
                ("guardrails", "chat", ChangeKind::Added),
                ("surface-note", "shared", ChangeKind::Removed),
            ]
        );
        let changed = &report.changes[0];
        assert_eq!(
            changed.frozen_digest.as_deref(),
            Some(sha256_hex("old").as_str())
        );
        assert_eq!(
            changed.current_digest.as_deref(),
            Some(sha256_hex("new").as_str())
        );
        let text = report.to_string();
        let first = format!(
            "identity (project): changed {}…→{}… (/p/identity.md)",
            &sha256_hex("old")[..4],
            &sha256_hex("new")[..4]
        );
        assert_eq!(text.lines().next(), Some(first.as_str()));
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn source_is_not_identity_but_occurrence_is() {
        let frozen = vec![
            d("guardrails", "surface", "a", "/h/s/g.md"),
            d("guardrails", "surface", "b", "/p/s/g.md"),
        ];
        let moved = vec![
            d("guardrails", "surface", "a", "/h2/s/g.md"),
            d("guardrails", "surface", "b", "/p2/s/g.md"),
        ];
        assert!(!diff(&frozen, &moved).is_drifted());
        let dropped_first = vec![d("guardrails", "surface", "b", "/p/s/g.md")];
        let report = diff(&frozen, &dropped_first);
        let kinds: Vec<_> = report
            .changes
            .iter()
            .map(|c| (c.occurrence, c.kind))
            .collect();
        assert_eq!(kinds, [(0, ChangeKind::Changed), (1, ChangeKind::Removed)]);
    }

    #[test]
    fn project_directory_layers_pair_by_directory() {
        let frozen = vec![
            d(
                "guardrails",
                "project",
                "a",
                "/p/.vak/prompts/guardrails.md",
            ),
            d(
                "guardrails",
                "project",
                "c",
                "/p/s/pay/.vak/prompts/guardrails.md",
            ),
            d("operating-rules", "project", "r", "/p/s/pay/AGENTS.md"),
        ];
        let current = vec![
            d(
                "guardrails",
                "project",
                "a",
                "/p/.vak/prompts/guardrails.md",
            ),
            d(
                "guardrails",
                "project",
                "b",
                "/p/s/.vak/prompts/guardrails.md",
            ),
            d(
                "guardrails",
                "project",
                "c",
                "/p/s/pay/.vak/prompts/guardrails.md",
            ),
            d(
                "operating-rules",
                "project",
                "r2",
                "/p/s/pay/.vak/prompts/operating-rules.md",
            ),
        ];
        let report = diff(&frozen, &current);
        let changes: Vec<_> = report
            .changes
            .iter()
            .map(|c| (c.block.as_str(), c.kind, rendered(c)))
            .collect();
        let changes: Vec<_> = changes
            .iter()
            .map(|(b, k, s)| (*b, *k, s.as_deref()))
            .collect();
        assert_eq!(
            changes,
            [
                (
                    "operating-rules",
                    ChangeKind::Added,
                    Some("/p/s/pay/.vak/prompts/operating-rules.md")
                ),
                (
                    "operating-rules",
                    ChangeKind::Removed,
                    Some("/p/s/pay/AGENTS.md")
                ),
                (
                    "guardrails",
                    ChangeKind::Added,
                    Some("/p/s/.vak/prompts/guardrails.md")
                ),
            ],
            "{report}"
        );
    }

    /// A directory's interop files pair by directory and file name: an
    /// `AGENTS.md` edited deep in a monorepo is that file's change, one
    /// added above it is an addition (nothing below shifts), and an
    /// `AGENTS.override.md` that appears beside an `AGENTS.md` replaces it
    /// as a removal and an addition, never as a change of the directory's
    /// own `operating-rules.md`.
    #[test]
    fn interop_files_pair_by_directory_and_file_name() {
        let rules = |text: &str, source: &str| d("operating-rules", "project", text, source);
        let frozen = vec![
            rules("own", "/p/s/.vak/prompts/operating-rules.md"),
            rules("root", "/p/AGENTS.md"),
            rules("pay", "/p/s/pay/AGENTS.md"),
        ];
        let current = vec![
            rules("own", "/p/s/.vak/prompts/operating-rules.md"),
            rules("root", "/p/AGENTS.md"),
            rules("s", "/p/s/AGENTS.override.md"),
            rules("pay2", "/p/s/pay/AGENTS.md"),
        ];
        let report = diff(&frozen, &current);
        let changes: Vec<_> = report
            .changes
            .iter()
            .map(|c| (c.kind, rendered(c)))
            .collect();
        let changes: Vec<_> = changes.iter().map(|(k, s)| (*k, s.as_deref())).collect();
        assert_eq!(
            changes,
            [
                (ChangeKind::Added, Some("/p/s/AGENTS.override.md")),
                (ChangeKind::Changed, Some("/p/s/pay/AGENTS.md")),
            ],
            "{report}"
        );
    }

    #[test]
    fn inventory_entries_pair_by_name() {
        let skill = |name: &str, text: &str| {
            d(
                "skills",
                "runtime",
                text,
                &format!("/h/.vak/skills/{name}/SKILL.md"),
            )
        };
        let frozen = vec![
            d("identity", "seed", "x", "builtin:identity"),
            skill("alpha", "a"),
            skill("gamma", "g"),
        ];
        let current = vec![
            d("identity", "seed", "x", "builtin:identity"),
            skill("alpha", "a"),
            skill("beta", "b"),
            skill("gamma", "g"),
        ];
        let report = diff(&frozen, &current);
        assert_eq!(report.changes.len(), 1, "{report}");
        let added = &report.changes[0];
        assert_eq!((added.kind, added.occurrence), (ChangeKind::Added, 0));
        assert_eq!(
            rendered(added).as_deref(),
            Some("/h/.vak/skills/beta/SKILL.md")
        );
        assert!(!report.to_string().contains('#'), "{report}");

        let mcp = |name: &str, text: &str| {
            d(
                "mcp",
                "runtime",
                text,
                &format!("/h/.vak/config.toml#mcp.servers.{name}"),
            )
        };
        let frozen = vec![mcp("db", "1"), mcp("web", "2")];
        let current = vec![mcp("web", "2")];
        let report = diff(&frozen, &current);
        assert_eq!(report.changes.len(), 1, "{report}");
        assert_eq!(report.changes[0].kind, ChangeKind::Removed);
        assert!(report.to_string().contains("mcp.servers.db"), "{report}");
        // A moved home does not change which skill is which.
        let moved = vec![d(
            "skills",
            "runtime",
            "a",
            "/elsewhere/.vak/skills/alpha/SKILL.md",
        )];
        assert!(!diff(&[skill("alpha", "a")], &moved).is_drifted());
    }

    #[test]
    fn unknown_baseline_reports_nothing() {
        let report = diff(&[], &[d("identity", "seed", "x", "builtin:identity")]);
        assert!(report.unknown_baseline);
        assert!(!report.is_drifted());
        assert!(
            report
                .to_string()
                .contains("before prompt layers were recorded")
        );
    }

    #[test]
    fn unknown_wire_names_sort_after_known_ones() {
        let frozen = vec![d("identity", "seed", "x", "s")];
        let current = vec![
            d("hologram", "seed", "y", "s"),
            d("identity", "orbit", "z", "s"),
            d("identity", "seed", "x", "s"),
        ];
        let report = diff(&frozen, &current);
        let names: Vec<_> = report
            .changes
            .iter()
            .map(|c| (c.block.as_str(), c.layer.as_str()))
            .collect();
        assert_eq!(names, [("identity", "orbit"), ("hologram", "seed")]);
    }

    fn descriptor() -> impl Strategy<Value = PromptLayerDescriptor> {
        (
            prop::sample::select(vec![
                "identity",
                "operating-rules",
                "guardrails",
                "surface-note",
                "skills",
                "mcp",
                "x-new",
            ]),
            prop::sample::select(vec![
                "seed", "shared", "project", "surface", "chat", "runtime",
            ]),
            "[ab]{0,2}",
            prop::sample::select(vec![
                "p",
                "q",
                "/h/.vak/skills/s1/SKILL.md",
                "/p/.vak/skills/s2/SKILL.md",
                "/h/.vak/config.toml#mcp.servers.m1",
                "/p/.vak/config.toml#mcp.servers.m2",
            ]),
        )
            .prop_map(|(b, l, text, src)| d(b, l, &text, src))
    }

    fn list() -> impl Strategy<Value = Vec<PromptLayerDescriptor>> {
        prop::collection::vec(descriptor(), 0..12)
    }

    proptest! {
        #[test]
        fn identical_lists_do_not_drift(a in list()) {
            prop_assert!(!diff(&a, &a).is_drifted());
        }

        #[test]
        fn unknown_baseline_is_always_empty(current in list()) {
            let report = diff(&[], &current);
            prop_assert!(report.unknown_baseline);
            prop_assert!(report.changes.is_empty());
        }

        #[test]
        fn swapping_sides_swaps_added_and_removed(a in list(), b in list()) {
            prop_assume!(!a.is_empty() && !b.is_empty());
            let forward = diff(&a, &b);
            let backward = diff(&b, &a);
            prop_assert_eq!(forward.changes.len(), backward.changes.len());
            for (f, r) in forward.changes.iter().zip(&backward.changes) {
                prop_assert_eq!((&f.block, &f.layer, f.occurrence), (&r.block, &r.layer, r.occurrence));
                prop_assert_eq!(&f.frozen_digest, &r.current_digest);
                prop_assert_eq!(&f.current_digest, &r.frozen_digest);
                let mirrored = match f.kind {
                    ChangeKind::Added => ChangeKind::Removed,
                    ChangeKind::Removed => ChangeKind::Added,
                    other => other,
                };
                prop_assert_eq!(mirrored, r.kind);
            }
        }

        /// Inserting one named skill anywhere reports exactly that skill.
        #[test]
        fn adding_a_skill_reports_only_it(names in prop::collection::btree_set("[a-z]{1,6}", 0..8), new in "[A-Z]{1,6}", at in 0usize..8) {
            let skill = |name: &str| d("skills", "runtime", name, &format!("/h/.vak/skills/{name}/SKILL.md"));
            let mut frozen: Vec<_> = names.iter().map(|n| skill(n)).collect();
            frozen.insert(0, d("identity", "seed", "x", "builtin:identity"));
            let mut current = frozen.clone();
            current.insert((at % frozen.len()) + 1, skill(&new));
            let report = diff(&frozen, &current);
            prop_assert_eq!(report.changes.len(), 1);
            prop_assert_eq!(report.changes[0].kind, ChangeKind::Added);
            let want = format!("/h/.vak/skills/{new}/SKILL.md");
            prop_assert_eq!(rendered(&report.changes[0]), Some(want));
        }

        /// Every descriptor of each side is in exactly one pair, frozen
        /// ones in their order; a pair is of one block and layer; and a
        /// drift is reported exactly when a pair is one-sided or its
        /// digests differ, or else when the order moved.
        #[test]
        fn pairing_covers_each_descriptor_once(a in list(), b in list()) {
            prop_assume!(!a.is_empty());
            let pairs = pair(&a, &b);
            let frozen: Vec<usize> = pairs.iter().filter_map(|p| p.frozen).collect();
            prop_assert_eq!(frozen, (0..a.len()).collect::<Vec<_>>());
            let mut current: Vec<usize> = pairs.iter().filter_map(|p| p.current).collect();
            current.sort_unstable();
            prop_assert_eq!(current, (0..b.len()).collect::<Vec<_>>());
            let mut differs = false;
            for p in &pairs {
                match (p.frozen, p.current) {
                    (Some(f), Some(c)) => {
                        prop_assert_eq!((&a[f].block, &a[f].layer), (&b[c].block, &b[c].layer));
                        differs |= a[f].digest != b[c].digest;
                    }
                    _ => differs = true,
                }
            }
            let report = diff(&a, &b);
            if differs {
                prop_assert!(report.changes.iter().all(|c| c.kind != ChangeKind::Reordered));
                prop_assert!(report.is_drifted());
            } else {
                prop_assert!(report.changes.iter().all(|c| c.kind == ChangeKind::Reordered));
            }
        }

        #[test]
        fn every_change_names_a_real_difference(a in list(), b in list()) {
            prop_assume!(!a.is_empty());
            let report = diff(&a, &b);
            for c in &report.changes {
                prop_assert!(c.frozen_digest != c.current_digest);
            }
            let identity = |d: &PromptLayerDescriptor| (d.block.clone(), d.layer.clone(), d.digest.clone(), pairing_name(&d.block, &d.layer, d.source.as_ref()).map(str::to_owned));
            if a.iter().map(identity).eq(b.iter().map(identity)) {
                prop_assert!(!report.is_drifted());
            }
        }
    }
}
