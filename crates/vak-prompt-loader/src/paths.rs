use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::{Name, SurfaceKind};

/// `<root>/.vak/prompts`: the prompt directory of a home or a project.
pub fn prompt_dir(root: &Utf8Path) -> Utf8PathBuf {
    join(root, &[".vak", "prompts"])
}

/// `dir` joined with `names` in turn, as `Utf8Path::join` joins them, in
/// one allocation of the exact size (a chain of `join`s copies the path
/// once per name and grows it again for each). An empty or absolute name
/// is joined by `Utf8Path::join` itself, which gives it its own meaning.
pub(crate) fn join(dir: &Utf8Path, names: &[&str]) -> Utf8PathBuf {
    if names.iter().any(|n| n.is_empty() || n.starts_with('/')) {
        return names.iter().fold(dir.to_owned(), |path, n| path.join(n));
    }
    let mut out = String::with_capacity(
        dir.as_str().len() + names.iter().map(|n| n.len() + 1).sum::<usize>(),
    );
    out.push_str(dir.as_str());
    for name in names {
        if !out.is_empty() && !out.ends_with('/') {
            out.push('/');
        }
        out.push_str(name);
    }
    Utf8PathBuf::from(out)
}

/// `path`'s parent and file name, as `Utf8Path::parent` and
/// `Utf8Path::file_name` give them, by one search for the last `/` when
/// the path ends plainly (a name after a single `/`, a parent not ending in
/// `.`): how the loader spells every path it reads. Parsing the path's
/// components for each cost more than the rest of finding its directory.
pub(crate) fn parent_and_name(path: &Utf8Path) -> Option<(&Utf8Path, &str)> {
    let text = path.as_str();
    if let Some(at) = text.rfind('/')
        && at > 0
    {
        let (parent, name) = (&text[..at], &text[at + 1..]);
        // `parent` trims trailing separators and `.` components from what
        // is left; a name of `.` or `..` is no file name.
        let plain = !matches!(name, "" | "." | "..")
            && !parent.ends_with('/')
            && !parent.ends_with("/.")
            && parent != ".";
        if plain {
            return Some((Utf8Path::new(parent), name));
        }
    }
    Some((path.parent()?, path.file_name()?))
}

/// The directories that make up one origin's share of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDirs {
    /// `.vak/prompts/`
    pub base: Utf8PathBuf,
    /// `.vak/prompts/surface/<kind>/`
    pub surface: Utf8PathBuf,
    /// `.vak/prompts/agents/<role>/`, when a role is selected.
    pub agent: Option<Utf8PathBuf>,
}

impl LayerDirs {
    /// The layer directories under `root` for a surface and optional role.
    pub fn new(root: &Utf8Path, surface: SurfaceKind, agent: Option<&Name>) -> Self {
        let base = prompt_dir(root);
        LayerDirs {
            surface: join(&base, &["surface", surface.wire_name()]),
            agent: agent.map(|role| join(&base, &["agents", role.as_str()])),
            base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parent_and_name_are_std_s(parts in proptest::collection::vec("(|\\.|\\.\\.|\\.\\.\\.|a|bc|\\.d)", 0..6), absolute in any::<bool>(), trailing in any::<bool>()) {
            let mut path = parts.join("/");
            if absolute {
                path.insert(0, '/');
            }
            if trailing {
                path.push('/');
            }
            let path = Utf8Path::new(&path);
            let std = path.parent().zip(path.file_name());
            prop_assert_eq!(parent_and_name(path), std, "{}", path);
        }
    }

    #[test]
    fn join_joins_as_path_join_does() {
        for dir in ["/h", "/h/", "", "rel", "/"] {
            for names in [
                &["a"][..],
                &["a", "b.md"],
                &[".vak", "prompts"],
                &["a/b", "c"],
                &["", "x"],
                &["a", "/abs"],
            ] {
                let dir = Utf8Path::new(dir);
                let want = names.iter().fold(dir.to_owned(), |p, n| p.join(n));
                assert_eq!(join(dir, names), want, "{dir:?} {names:?}");
            }
        }
    }
}
