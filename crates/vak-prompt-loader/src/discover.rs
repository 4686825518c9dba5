//! Where the project is: the nearest ancestor of the
//! working directory that has `.git` (a directory, or a file in worktrees
//! and submodules); if none has, the nearest that has `.vak`; else the
//! working directory itself. `$VAK_HOME` and everything inside it is never a
//! project, and the walk never crosses into another filesystem.
//!
//! Only names are looked at (`lstat`): nothing under a candidate is opened
//! or read here, so a hostile tree cannot make discovery block or read.

use std::io;
use std::os::unix::fs::MetadataExt;

use camino::{Utf8Path, Utf8PathBuf};

/// Why the root is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootKind {
    /// The nearest directory with `.git` (directory or file).
    Git,
    /// No `.git` on the way up; the nearest directory with `.vak`.
    Vak,
    /// Neither: the working directory itself.
    WorkingDir,
    /// The working directory is `$VAK_HOME` or inside it: there is no
    /// project, and the home stands in for it (its layers are the shared
    /// ones, never read twice).
    Home,
}

/// The project found from a working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The project root, canonical.
    pub root: Utf8PathBuf,
    /// The working directory, canonical; `root` or inside it.
    pub workdir: Utf8PathBuf,
    /// Why `root` was chosen.
    pub kind: RootKind,
}

fn canonical(path: &Utf8Path) -> io::Result<Utf8PathBuf> {
    let real = std::fs::canonicalize(path)?;
    Utf8PathBuf::from_path_buf(real).map_err(|p| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "`{}` is not valid UTF-8",
                vak_prompt_blocks::Escaped(&p.to_string_lossy())
            ),
        )
    })
}

fn has(dir: &Utf8Path, name: &str) -> bool {
    std::fs::symlink_metadata(dir.join(name)).is_ok()
}

/// Find the project for a command run in `start`, under `home`.
///
/// # Errors
///
/// `start` cannot be resolved (it does not exist, or is not UTF-8).
pub fn discover_project(start: &Utf8Path, home: Option<&Utf8Path>) -> io::Result<Discovered> {
    discover_with(start, home, |dir| {
        std::fs::metadata(dir).ok().map(|m| m.dev())
    })
}

/// [`discover_project`] with the device of a directory looked up by
/// `device_of` (`None`: cannot be looked at, which ends the walk too).
fn discover_with(
    start: &Utf8Path,
    home: Option<&Utf8Path>,
    device_of: impl Fn(&Utf8Path) -> Option<u64>,
) -> io::Result<Discovered> {
    let start = canonical(start)?;
    if let Some(home) = home.and_then(|h| canonical(h).ok())
        && start.starts_with(&home)
    {
        return Ok(Discovered {
            root: home.clone(),
            workdir: home,
            kind: RootKind::Home,
        });
    }
    let device = device_of(&start);
    let mut nearest_vak = None;
    for dir in start.ancestors() {
        // A mount point's parent is another filesystem: stop before it.
        if device.is_none() || device_of(dir) != device {
            break;
        }
        if has(dir, ".git") {
            return Ok(Discovered {
                root: dir.to_owned(),
                workdir: start.clone(),
                kind: RootKind::Git,
            });
        }
        if nearest_vak.is_none() && has(dir, ".vak") {
            nearest_vak = Some(dir.to_owned());
        }
    }
    Ok(match nearest_vak {
        Some(root) => Discovered {
            root,
            workdir: start,
            kind: RootKind::Vak,
        },
        None => Discovered {
            root: start.clone(),
            workdir: start,
            kind: RootKind::WorkingDir,
        },
    })
}

/// The directories strictly below `root` down to `workdir` inclusive,
/// widest first: the candidates for directory sub-layers. Empty when
/// `workdir` is `root` or not inside it. Cut off where [`directory_layers`]
/// stops looking (a hidden directory, `node_modules`, `target`, a nested
/// repository, or past [`MAX_DEPTH`]): a layer applies only where the preview and the budget,
/// which enumerate layers with that walk, can see it.
pub fn levels_between(root: &Utf8Path, workdir: &Utf8Path, home: &Utf8Path) -> Vec<Utf8PathBuf> {
    levels_and_left_out(root, workdir, home).0
}

/// `home` with every symlink resolved, as a project's paths are; as given
/// when it cannot be resolved (it does not exist yet); `None` when that is
/// not absolute, and so contains no project directory.
pub(crate) fn real_home(home: &Utf8Path) -> Option<Utf8PathBuf> {
    Some(canonical(home).unwrap_or_else(|_| home.to_owned())).filter(|h| h.is_absolute())
}

/// Whether `dir` is the vak home or inside it.
fn in_home(dir: &Utf8Path, home: Option<&Utf8PathBuf>) -> bool {
    home.is_some_and(|home| dir.starts_with(home))
}

/// [`levels_between`], and the directories on the way to `workdir` it left
/// out because the walk does not look there (a hidden directory,
/// `node_modules`, `target`, deeper than [`MAX_DEPTH`]), widest first: a
/// layer in one of those is not read, which the loader says. A nested
/// repository leaves nothing out: it is another project.
pub fn levels_and_left_out(
    root: &Utf8Path,
    workdir: &Utf8Path,
    home: &Utf8Path,
) -> (Vec<Utf8PathBuf>, Vec<Utf8PathBuf>) {
    let Ok(rest) = workdir.strip_prefix(root) else {
        return (Vec::new(), Vec::new());
    };
    let home = real_home(home);
    let mut dir = root.to_owned();
    let mut levels = Vec::new();
    let mut left_out = Vec::new();
    for component in rest.components() {
        match component {
            camino::Utf8Component::Normal(name) => {
                dir.push(name);
                if !left_out.is_empty() || is_skipped_dir(name) || levels.len() >= MAX_DEPTH {
                    left_out.push(dir.clone());
                    continue;
                }
                // A nested repository is a project of its own (DECISIONS
                // §15), never a layer of this one, nor is anything in it.
                if is_repository(&dir) {
                    break;
                }
                // The vak home inside a project is the shared layer, never
                // a project layer, nor is anything in it.
                if in_home(&dir, home.as_ref()) {
                    break;
                }
                levels.push(dir.clone());
            }
            // A `..` or root component would leave the project.
            _ => return (Vec::new(), Vec::new()),
        }
    }
    (levels, left_out)
}

/// The directory on the way from `root` down to `workdir` where
/// [`levels_and_left_out`] stops because it is the vak home (or the first
/// one inside it); `None` when the way does not enter the home.
pub(crate) fn levels_cut_at_home(
    root: &Utf8Path,
    workdir: &Utf8Path,
    home: &Utf8Path,
) -> Option<Utf8PathBuf> {
    let home = real_home(home)?;
    // A nested repository ends the way before the home can: `Some(None)`.
    first_on_the_way(root, workdir, |dir| {
        if is_repository(dir) {
            Some(None)
        } else {
            dir.starts_with(&home).then(|| Some(dir.to_owned()))
        }
    })
    .flatten()
}

/// What `stop` answers for the first directory strictly below `root` on
/// the way to `workdir` (each taken in turn, root first) for which it
/// answers at all; `None` when it answers for none, or `workdir` is not
/// below `root`, or the way holds a component that is not a plain name.
fn first_on_the_way<T>(
    root: &Utf8Path,
    workdir: &Utf8Path,
    mut stop: impl FnMut(&Utf8Path) -> Option<T>,
) -> Option<T> {
    let rest = workdir.strip_prefix(root).ok()?;
    let mut dir = root.to_owned();
    for component in rest.components() {
        let camino::Utf8Component::Normal(name) = component else {
            return None;
        };
        dir.push(name);
        if let Some(answer) = stop(&dir) {
            return Some(answer);
        }
    }
    None
}

/// The first directory strictly below `root` on the way to `workdir` that
/// is a repository of its own (has `.git`, a directory or a submodule's
/// file), relative to `root`: a separate project, whose layers never join
/// `root`'s chain. `None` when there is none, or `workdir` is not below
/// `root`.
pub fn nested_repository(root: &Utf8Path, workdir: &Utf8Path) -> Option<Utf8PathBuf> {
    first_on_the_way(root, workdir, |dir| {
        is_repository(dir).then(|| dir.strip_prefix(root).ok().map(Utf8Path::to_owned))
    })
    .flatten()
}

/// Whether `dir` holds a directory layer: its own `.vak/prompts/` or one of
/// the `interop` files, looked at by name.
pub(crate) fn has_layer<S: AsRef<str>>(dir: &Utf8Path, interop: &[S]) -> bool {
    std::fs::symlink_metadata(dir.join(".vak").join("prompts")).is_ok()
        || interop.iter().any(|name| has(dir, name.as_ref()))
}

/// Whether `dir` is a repository's root: it has `.git`, looked at by name.
fn is_repository(dir: &Utf8Path) -> bool {
    has(dir, ".git")
}

/// Whether `rel` (relative to a project root) can be a directory sub-layer:
/// plain names only, none of them one the walk skips ([`is_skipped_dir`]),
/// none holding a character no prompt may hold, at most [`MAX_DEPTH`]
/// deep. A layer anywhere else would never be read, so it is not written.
pub fn is_layer_dir(rel: &Utf8Path) -> bool {
    let mut depth = 0;
    for component in rel.components() {
        let camino::Utf8Component::Normal(name) = component else {
            return false;
        };
        if is_skipped_dir(name) {
            return false;
        }
        depth += 1;
    }
    (1..=MAX_DEPTH).contains(&depth)
}

/// A directory that is never a project sub-layer, nor looked into for one:
/// hidden (`.git`, `.github`, `.vak`), `node_modules`, `target`, and a name
/// that is not one line of visible text (a control or invisible character;
/// the tab and newline a prompt's text may hold too), which no save could
/// name and no message could show as it is.
fn is_skipped_dir(name: &str) -> bool {
    name.starts_with('.')
        || name == "node_modules"
        || name == "target"
        || vak_prompt_blocks::has_forbidden(name)
        || name.contains(['\n', '\t'])
}

/// Whether the tree walks enter the directory `entry`: not hidden, not
/// `node_modules` or `target` (unless `also` names it, and it is not
/// `.git`), not a nested repository, not the home.
pub(crate) fn is_walked_dir(
    entry: &walkdir::DirEntry,
    home: Option<&Utf8PathBuf>,
    also: &[&str],
) -> bool {
    let named = |name: &str| name != ".git" && also.contains(&name);
    let enters = entry
        .file_name()
        .to_str()
        .is_some_and(|name| !is_skipped_dir(name) || named(name));
    enters
        && !Utf8Path::from_path(entry.path()).is_some_and(|p| is_repository(p) || in_home(p, home))
}

/// How deep below the root [`directory_layers`] looks.
const MAX_DEPTH: usize = 8;
/// How many directories [`directory_layers`] visits at most.
pub const MAX_VISITED: usize = 20_000;
/// How many directory layers [`directory_layers`] lists at most.
pub const MAX_LAYERS: usize = 256;

/// Every directory below `root` that has its own `.vak/prompts/` or one of
/// `interop` (`AGENTS.md`): the directory layers a project-scope save with
/// `--dir` can reach, relative to the root, sorted. Bounded in depth, in
/// directories visited and in results; symlinks are not followed, and
/// hidden directories (`.git`, `.vak`), `node_modules`, `target` and nested
/// repositories (a directory with `.git`: a project of its own) are not
/// entered.
pub fn directory_layers(root: &Utf8Path, interop: &[&str], home: &Utf8Path) -> Vec<Utf8PathBuf> {
    directory_layers_walked(root, interop, home).layers
}

/// What [`directory_layers_walked`] found, and what the walk took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerWalk {
    /// The directory layers, relative to the root, sorted.
    pub layers: Vec<Utf8PathBuf>,
    /// Whether the walk looked everywhere it looks: `false` when it
    /// stopped at [`MAX_LAYERS`] layers or [`MAX_VISITED`] directories, so
    /// a layer may exist that is not listed (which whoever budgets every
    /// layer must say).
    pub complete: bool,
    /// How many directories it visited: its cost, for whoever bounds the
    /// work of walking many projects.
    pub visited: usize,
}

/// [`directory_layers`], whether the walk looked everywhere, and how many
/// directories it visited.
pub fn directory_layers_walked(root: &Utf8Path, interop: &[&str], home: &Utf8Path) -> LayerWalk {
    let home = real_home(home);
    let mut found = Vec::new();
    let mut complete = true;
    let mut seen = 0;
    let walk = walkdir::WalkDir::new(root)
        .min_depth(1)
        .max_depth(MAX_DEPTH)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| {
            e.file_type().is_dir()
                && !e.file_name().to_str().is_none_or(is_skipped_dir)
                && !Utf8Path::from_path(e.path())
                    .is_some_and(|p| is_repository(p) || in_home(p, home.as_ref()))
        });
    for (visited, entry) in walk.flatten().enumerate() {
        if visited >= MAX_VISITED {
            complete = false;
            break;
        }
        seen = visited + 1;
        let Some(path) = Utf8Path::from_path(entry.path()) else {
            continue;
        };
        if has_layer(path, interop)
            && let Ok(rel) = path.strip_prefix(root)
        {
            found.push(rel.to_owned());
            if found.len() >= MAX_LAYERS {
                complete = false;
                break;
            }
        }
    }
    found.sort();
    LayerWalk {
        layers: found,
        complete,
        visited: seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A home no project is in.
    const NO_HOME_STR: &str = "/nonexistent-vak-home";
    use std::fs;

    fn temp() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = canonical(Utf8Path::from_path(dir.path()).unwrap()).unwrap();
        (dir, path)
    }

    #[test]
    fn a_layer_directory_name_is_one_line_of_visible_text() {
        for ok in ["services/payments", "a b", "é/ü"] {
            assert!(is_layer_dir(Utf8Path::new(ok)), "{ok:?}");
        }
        for bad in [
            "x\ny",
            "t\tt",
            "a/\u{202e}b",
            "a/\u{1b}",
            ".hidden",
            "a/node_modules",
            "",
        ] {
            assert!(!is_layer_dir(Utf8Path::new(bad)), "{bad:?}");
        }
    }

    #[test]
    fn git_wins_over_a_nearer_vak_and_a_file_counts() {
        let (_keep, base) = temp();
        let deep = base.join("repo/sub/deep");
        fs::create_dir_all(&deep).unwrap();
        fs::create_dir_all(base.join("repo/sub/.vak")).unwrap();
        fs::write(base.join("repo/.git"), "gitdir: /elsewhere\n").unwrap();
        let found = discover_project(&deep, None).unwrap();
        assert_eq!(found.root, base.join("repo"));
        assert_eq!(found.kind, RootKind::Git);
        assert_eq!(found.workdir, deep);
    }

    #[test]
    fn nearest_vak_without_git_else_the_working_dir() {
        let (_keep, base) = temp();
        let deep = base.join("a/b/c");
        fs::create_dir_all(&deep).unwrap();
        fs::create_dir_all(base.join("a/.vak")).unwrap();
        fs::create_dir_all(base.join("a/b/.vak")).unwrap();
        let found = discover_project(&deep, None).unwrap();
        assert_eq!((found.root, found.kind), (base.join("a/b"), RootKind::Vak));
        let (_keep2, lone) = temp();
        let found = discover_project(&lone, None).unwrap();
        assert_eq!((found.root, found.kind), (lone, RootKind::WorkingDir));
    }

    #[test]
    fn the_home_and_everything_inside_it_is_never_a_project() {
        let (_keep, base) = temp();
        let home = base.join("home");
        fs::create_dir_all(home.join(".vak/prompts")).unwrap();
        fs::create_dir_all(base.join(".git")).unwrap();
        let found = discover_project(&home.join(".vak/prompts"), Some(&home)).unwrap();
        assert_eq!((found.root, found.kind), (home.clone(), RootKind::Home));
    }

    #[test]
    fn the_walk_stops_at_a_filesystem_boundary() {
        let (_keep, base) = temp();
        let inner = base.join("outer/mnt/work");
        fs::create_dir_all(&inner).unwrap();
        fs::create_dir_all(base.join("outer/.git")).unwrap();
        // `outer/mnt` is a mount point: it and below are device 2.
        let mount = base.join("outer/mnt");
        let device = |dir: &Utf8Path| Some(if dir.starts_with(&mount) { 2 } else { 1 });
        let found = discover_with(&inner, None, device).unwrap();
        assert_eq!(
            (found.root, found.kind),
            (inner.clone(), RootKind::WorkingDir)
        );
        // Without the boundary the outer repository is found.
        let found = discover_with(&inner, None, |_| Some(1)).unwrap();
        assert_eq!(
            (found.root, found.kind),
            (base.join("outer"), RootKind::Git)
        );
    }

    #[test]
    fn directory_layers_are_listed_relative_and_bounded() {
        let (_keep, root) = temp();
        fs::create_dir_all(root.join("services/payments/.vak/prompts")).unwrap();
        fs::create_dir_all(root.join("services/web")).unwrap();
        fs::write(root.join("services/web/AGENTS.md"), "x").unwrap();
        fs::create_dir_all(root.join("node_modules/x/.vak/prompts")).unwrap();
        fs::create_dir_all(root.join(".git/y/.vak/prompts")).unwrap();
        fs::create_dir_all(root.join("plain")).unwrap();
        // Nested repositories, a clone's `.git` directory or a submodule's
        // `.git` file: projects of their own, never this one's layers.
        fs::create_dir_all(root.join("vendor/clone/.git")).unwrap();
        fs::create_dir_all(root.join("vendor/clone/.vak/prompts")).unwrap();
        fs::create_dir_all(root.join("vendor/clone/deep/.vak/prompts")).unwrap();
        fs::create_dir_all(root.join("sub/.vak/prompts")).unwrap();
        fs::write(root.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        assert_eq!(
            directory_layers(&root, &["AGENTS.md"], Utf8Path::new(NO_HOME_STR)),
            [
                Utf8PathBuf::from("services/payments"),
                Utf8PathBuf::from("services/web")
            ]
        );
        assert_eq!(
            levels_between(
                &root,
                &root.join("vendor/clone/deep"),
                Utf8Path::new(NO_HOME_STR)
            ),
            [root.join("vendor")]
        );
        assert!(levels_between(&root, &root.join("sub"), Utf8Path::new(NO_HOME_STR)).is_empty());
        assert_eq!(
            nested_repository(&root, &root.join("vendor/clone/deep")),
            Some(Utf8PathBuf::from("vendor/clone"))
        );
        assert_eq!(
            nested_repository(&root, &root.join("sub")),
            Some(Utf8PathBuf::from("sub"))
        );
        assert_eq!(nested_repository(&root, &root.join("services/web")), None);
        assert_eq!(nested_repository(&root, &root), None);
        // What the walk took: the directories it entered (not the hidden,
        // `node_modules` or nested repositories it passed over).
        let walk = directory_layers_walked(&root, &["AGENTS.md"], Utf8Path::new(NO_HOME_STR));
        assert!(walk.complete);
        assert_eq!(
            walk.visited,
            [
                "services",
                "services/payments",
                "services/web",
                "plain",
                "vendor"
            ]
            .len()
        );
    }

    #[test]
    fn levels_are_widest_first_and_stay_inside() {
        let root = Utf8Path::new("/r");
        assert_eq!(
            levels_between(root, Utf8Path::new("/r/a/b"), Utf8Path::new(NO_HOME_STR)),
            [Utf8PathBuf::from("/r/a"), Utf8PathBuf::from("/r/a/b")]
        );
        assert!(levels_between(root, root, Utf8Path::new(NO_HOME_STR)).is_empty());
        assert!(
            levels_between(
                root,
                Utf8Path::new("/elsewhere"),
                Utf8Path::new(NO_HOME_STR)
            )
            .is_empty()
        );
        // Where the walk that lists layers does not look, no layer applies.
        assert!(
            levels_between(
                root,
                Utf8Path::new("/r/.github/x"),
                Utf8Path::new(NO_HOME_STR)
            )
            .is_empty()
        );
        assert_eq!(
            levels_between(
                root,
                Utf8Path::new("/r/a/node_modules/b"),
                Utf8Path::new(NO_HOME_STR)
            ),
            [Utf8PathBuf::from("/r/a")]
        );
        let deep: Utf8PathBuf = ["/r", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
            .iter()
            .collect();
        assert_eq!(
            levels_between(root, &deep, Utf8Path::new(NO_HOME_STR)).len(),
            MAX_DEPTH
        );
    }
}
