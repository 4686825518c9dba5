//! Imports inside block files: a line `@parts/tone.md` alone in a layer
//! file is replaced by that file's text. Which lines import, and what a
//! line may name, is `vak_prompt_blocks::import_lines` and `check_target`;
//! this module reads what they name.
//!
//! An import is read like the file that imports it, through the same
//! confined reader, with one narrower root: the `.vak/prompts/` directory
//! the importing file lives in. A symlink (or a directory on the way) that
//! leads out of it is refused, so no import reaches the home's token,
//! config, secrets or stores, nor anything outside the prompts directory.
//! Only block files import: interop files (`AGENTS.md`) and gateway texts
//! are never expanded, so their `@` lines stay text.

use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use thiserror::Error;
use vak_prompt_blocks::{
    Escaped, MAX_IMPORT_DEPTH, Origin, Provenance, TargetRefusal, check_target, import_lines,
};

use crate::confine::OpenedDirs;
use crate::paths::join;
use crate::safe_read::{MAX_FILE_BYTES, ReadRefusal, utf8};

/// The most files one block file imports, counting every level: a file
/// that imports more is a mistake or an attack, and each is a descriptor
/// in every session.
pub const MAX_IMPORTS: usize = 64;

/// One file imported by a block file, directly or through another import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Where it is: the importing file's layer and origin (an import is
    /// trusted exactly as the file that imports it), and its own path.
    pub provenance: Arc<Provenance>,
    /// The file's own text, as read; its own import lines are not expanded
    /// here (each imported file is an [`Imported`] of its own).
    pub text: String,
    /// 1 for a file the block file imports, 2 for one that file imports…
    pub depth: usize,
    /// The file whose line imports it.
    pub imported_by: Utf8PathBuf,
}

/// A block file's imports: every file read, depth first in the order their
/// lines come, or why one could not be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imports {
    /// The files imported, each once per line that imports it.
    pub files: Vec<Imported>,
    /// The first import that was refused; then `files` is empty and the
    /// contribution's text is the block file's own, unexpanded. Boxed: it
    /// is rare, and every contribution carries an `Imports`.
    pub refused: Option<Box<ImportError>>,
    /// When `files` is not empty, the block file's own text, as read: what
    /// a warning about its own characters is about (the contribution's
    /// text holds its imports' too). Empty otherwise.
    pub own: String,
}

/// Why an import line could not be expanded. Each names the file the line
/// is in, the line, and what it imports.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line} of `{}`: the import `@{}` {why}", Escaped(.file.as_str()), Escaped(.target))]
pub struct ImportError {
    /// The file the import line is in.
    pub file: Utf8PathBuf,
    /// Its line number, from 1.
    pub line: usize,
    /// What follows the `@`.
    pub target: String,
    /// What is wrong.
    pub why: ImportRefusal,
}

/// What is wrong with one import.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ImportRefusal {
    /// The line names something an import may not name.
    #[error("{}", .0.explain())]
    Target(TargetRefusal),
    /// Nothing is there.
    #[error("names `{}`, which does not exist; fix the line or create the file", Escaped(.0.as_str()))]
    Missing(Utf8PathBuf),
    /// It leads outside the prompts directory.
    #[error(
        "names `{}`, which leads outside the prompts directory `{}` (to `{}`); an import reads only `.md` files inside the prompts directory of the file that imports it",
        Escaped(.path.as_str()), Escaped(.prompts.as_str()), Escaped(.target.as_str())
    )]
    Outside {
        /// The path the line names.
        path: Utf8PathBuf,
        /// The prompts directory it must stay in.
        prompts: Utf8PathBuf,
        /// Where it leads.
        target: Utf8PathBuf,
    },
    /// It could not be read as a prompt file: not a regular file, too
    /// large, not UTF-8.
    #[error("names `{}`, which {}", Escaped(.path.as_str()), .refusal)]
    Unreadable {
        /// The path the line names.
        path: Utf8PathBuf,
        /// Why it was not read.
        refusal: ReadRefusal,
    },
    /// It imports a file that is already being imported.
    #[error("makes a cycle: {}; remove one of these imports", chain(.0))]
    Cycle(Vec<Utf8PathBuf>),
    /// It is more than [`MAX_IMPORT_DEPTH`] levels below the block file.
    #[error(
        "is more than {MAX_IMPORT_DEPTH} imports deep: {}; import the file from a shallower one",
        chain(.0)
    )]
    TooDeep(Vec<Utf8PathBuf>),
    /// The block file imports more than [`MAX_IMPORTS`] files.
    #[error(
        "is one import too many: a block file imports at most {MAX_IMPORTS} files, every level counted"
    )]
    TooMany,
    /// With its imports, the block file's text would pass the bound of one
    /// prompt file.
    #[error(
        "makes the text, with its imports, larger than {MAX_FILE_BYTES} bytes, the bound of one prompt file"
    )]
    TooLarge,
}

/// `a.md → b.md → a.md`, each escaped.
fn chain(paths: &[Utf8PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("`{}`", Escaped(p.as_str())))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// The `.vak/prompts` directory a layer directory lies in (a surface or
/// agent sub-layer lies below it), or the directory itself.
pub(crate) fn prompts_root(dir: &Utf8Path) -> &Utf8Path {
    dir.ancestors()
        .find(|a| a.ends_with(".vak/prompts"))
        .unwrap_or(dir)
}

/// `text`, to be the block file `provenance` names (a candidate edit, not
/// yet written), with its imports expanded as a load would expand them,
/// each read afresh and confined to the file's prompts directory; or the
/// text as it is and the refusal. A gateway text, or a text without a
/// path, does not import.
pub fn expand_imports(provenance: &Provenance, text: &str) -> (String, Imports) {
    let file = match (&provenance.origin, provenance.source.path()) {
        (Origin::Home | Origin::Project, Some(file)) if may_import(text) => file,
        _ => return (text.to_owned(), Imports::default()),
    };
    let dir = file.parent().unwrap_or(Utf8Path::new(""));
    let prompts = prompts_root(dir).to_owned();
    let mut opened = OpenedDirs::open(&prompts);
    let mut read = |path: &Utf8Path| match &mut opened {
        Ok(Some(dirs)) => match dirs.read_one(path, MAX_FILE_BYTES) {
            Ok(Some(bytes)) => utf8(bytes).map(Some),
            Ok(None) => Ok(None),
            Err(refusal) => Err(refusal.into()),
        },
        Ok(None) => Ok(None),
        Err(error) => Err(ReadRefusal::Io(error.to_string())),
    };
    let mut expansion = Expansion {
        read: &mut read,
        prompts: &prompts,
        provenance,
        files: Vec::new(),
    };
    let result = expansion.expand(file, text);
    let files = expansion.files;
    outcome(result, files, text.to_owned())
}

/// Whether `text` could hold an import line at all: every one names its
/// target after an `@`. Nearly no block file does, and one that does not
/// is its own expansion, so the prompts directory is neither found nor
/// opened and the text is not copied.
pub(crate) fn may_import(text: &str) -> bool {
    // `memchr` rather than `str::contains`, whose character searcher costs
    // about a hundred instructions before it looks at a byte.
    memchr::memchr(b'@', text.as_bytes()).is_some()
}

/// What a contribution holds after the expansion of `text`: the expanded
/// text and its files (and `text` itself, as [`Imports::own`], when it
/// imported any), or `text` and the refusal.
pub(crate) fn outcome(
    result: Result<String, Box<ImportError>>,
    files: Vec<Imported>,
    text: String,
) -> (String, Imports) {
    match result {
        Ok(expanded) if files.is_empty() => (expanded, Imports::default()),
        Ok(expanded) => (
            expanded,
            Imports {
                files,
                refused: None,
                own: text,
            },
        ),
        Err(error) => (
            text,
            Imports {
                files: Vec::new(),
                refused: Some(error),
                own: String::new(),
            },
        ),
    }
}

/// Expands the imports of one block file, reading each imported file with
/// `read` (confined to the prompts directory by the caller).
pub(crate) struct Expansion<'r> {
    /// Reads a file under the prompts directory: its text, `None` when
    /// absent, or why not.
    pub(crate) read: &'r mut dyn FnMut(&Utf8Path) -> Result<Option<String>, ReadRefusal>,
    /// The prompts directory imports are confined to.
    pub(crate) prompts: &'r Utf8Path,
    /// The block file's provenance: each import's is made from it.
    pub(crate) provenance: &'r Provenance,
    /// What has been imported so far.
    pub(crate) files: Vec<Imported>,
}

impl Expansion<'_> {
    /// `text`, the block file `file`'s, with every import line replaced by
    /// the text it imports, recursively.
    /// The error is boxed: it is the rare path, and it is large.
    pub(crate) fn expand(
        &mut self,
        file: &Utf8Path,
        text: &str,
    ) -> Result<String, Box<ImportError>> {
        let mut stack = vec![file.to_owned()];
        self.expand_in(text, &mut stack)
    }

    fn expand_in(
        &mut self,
        text: &str,
        stack: &mut Vec<Utf8PathBuf>,
    ) -> Result<String, Box<ImportError>> {
        let lines = import_lines(text);
        if lines.is_empty() {
            return Ok(text.to_owned());
        }
        let Some(file) = stack.last().cloned() else {
            return Ok(text.to_owned());
        };
        let dir = file.parent().unwrap_or(Utf8Path::new(""));
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for line in lines {
            let refuse = |why| {
                Box::new(ImportError {
                    file: file.clone(),
                    line: line.line,
                    target: line.target.to_owned(),
                    why,
                })
            };
            out.push_str(&text[at..line.span.start]);
            at = line.span.end;
            check_target(line.target).map_err(|t| refuse(ImportRefusal::Target(t)))?;
            let path = join(dir, &[line.target]);
            if let Some(first) = stack.iter().position(|p| *p == path) {
                let mut cycle = stack[first..].to_vec();
                cycle.push(path);
                return Err(refuse(ImportRefusal::Cycle(cycle)));
            }
            if stack.len() > MAX_IMPORT_DEPTH {
                let mut deep = stack.clone();
                deep.push(path);
                return Err(refuse(ImportRefusal::TooDeep(deep)));
            }
            if self.files.len() >= MAX_IMPORTS {
                return Err(refuse(ImportRefusal::TooMany));
            }
            let imported = match (self.read)(&path) {
                Ok(Some(imported)) => imported,
                Ok(None) => return Err(refuse(ImportRefusal::Missing(path))),
                Err(ReadRefusal::SymlinkOutside { target }) => {
                    return Err(refuse(ImportRefusal::Outside {
                        path,
                        prompts: self.prompts.to_owned(),
                        target,
                    }));
                }
                Err(refusal) => return Err(refuse(ImportRefusal::Unreadable { path, refusal })),
            };
            self.files.push(Imported {
                provenance: Arc::new(Provenance::new(
                    self.provenance.layer,
                    self.provenance.origin,
                    path.as_str(),
                )),
                text: imported.clone(),
                depth: stack.len(),
                imported_by: file.clone(),
            });
            stack.push(path);
            let expanded = self.expand_in(&imported, stack)?;
            stack.pop();
            out.push_str(expanded.trim_end_matches(['\n', '\r']));
            if text[line.span.clone()].ends_with('\n') {
                out.push('\n');
            }
            if out.len() as u64 > MAX_FILE_BYTES {
                return Err(refuse(ImportRefusal::TooLarge));
            }
        }
        out.push_str(&text[at..]);
        if out.len() as u64 > MAX_FILE_BYTES {
            return Err(Box::new(ImportError {
                file: file.clone(),
                line: 1,
                target: String::new(),
                why: ImportRefusal::TooLarge,
            }));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use vak_prompt_blocks::PromptLayer;

    /// Expand `text` as `/p/identity.md` over the files in `tree`.
    fn expand(
        tree: &[(&str, &str)],
        text: &str,
    ) -> (Result<String, Box<ImportError>>, Vec<Imported>) {
        let files: HashMap<Utf8PathBuf, String> = tree
            .iter()
            .map(|(p, t)| (Utf8PathBuf::from(format!("/p/{p}")), (*t).to_owned()))
            .collect();
        let mut read = |path: &Utf8Path| Ok(files.get(path).cloned());
        let provenance = Provenance::new(PromptLayer::Shared, Origin::Home, "/p/identity.md");
        let mut expansion = Expansion {
            read: &mut read,
            prompts: Utf8Path::new("/p"),
            provenance: &provenance,
            files: Vec::new(),
        };
        let out = expansion.expand(Utf8Path::new("/p/identity.md"), text);
        (out, expansion.files)
    }

    #[test]
    fn an_import_is_replaced_by_its_text_in_place() {
        let (out, files) = expand(
            &[
                ("tone.md", "Be brief.\n"),
                ("parts/a.md", "A\n@b.md\n"),
                ("parts/b.md", "B"),
            ],
            "You are X.\n@tone.md\n@parts/a.md\r\nEnd.",
        );
        assert_eq!(out.unwrap(), "You are X.\nBe brief.\nA\nB\nEnd.");
        let names: Vec<_> = files
            .iter()
            .map(|f| (f.provenance.source.path().unwrap().as_str(), f.depth))
            .collect();
        assert_eq!(
            names,
            [
                ("/p/tone.md", 1),
                ("/p/parts/a.md", 1),
                ("/p/parts/b.md", 2)
            ]
        );
        assert_eq!(files[2].imported_by, "/p/parts/a.md");
        assert_eq!(files[0].provenance.layer, PromptLayer::Shared);
    }

    #[test]
    fn cycles_are_refused_naming_every_file() {
        let (out, _) = expand(&[("a.md", "@b.md"), ("b.md", "@a.md")], "@a.md");
        let error = out.unwrap_err();
        assert_eq!(
            error.why,
            ImportRefusal::Cycle(vec!["/p/a.md".into(), "/p/b.md".into(), "/p/a.md".into()])
        );
        assert_eq!(error.file, "/p/b.md");
        assert!(
            error
                .to_string()
                .contains("`/p/a.md` → `/p/b.md` → `/p/a.md`"),
            "{error}"
        );
        let (own, _) = expand(&[], "@identity.md");
        assert!(matches!(own.unwrap_err().why, ImportRefusal::Cycle(c) if c.len() == 2));
    }

    #[test]
    fn four_levels_are_read_and_a_fifth_is_refused() {
        let tree = [
            ("1.md", "@2.md"),
            ("2.md", "@3.md"),
            ("3.md", "@4.md"),
            ("4.md", "four"),
            ("5.md", "five"),
        ];
        assert_eq!(expand(&tree, "@1.md").0.unwrap(), "four");
        let mut deeper = tree;
        deeper[3] = ("4.md", "@5.md");
        let error = expand(&deeper, "@1.md").0.unwrap_err();
        assert!(
            matches!(error.why, ImportRefusal::TooDeep(ref c) if c.len() == 6),
            "{error}"
        );
    }

    #[test]
    fn a_missing_or_escaping_import_is_refused_by_name() {
        let error = expand(&[], "x\n@typo.md").0.unwrap_err();
        assert_eq!(error.line, 2);
        assert_eq!(error.why, ImportRefusal::Missing("/p/typo.md".into()));
        for (line, refusal) in [
            ("@../../.vak/token", TargetRefusal::Parent),
            ("@/etc/passwd", TargetRefusal::Absolute),
            ("@parts//x.md", TargetRefusal::Unclean),
        ] {
            let error = expand(&[], line).0.unwrap_err();
            assert_eq!(error.why, ImportRefusal::Target(refusal), "{line}");
        }
    }

    #[test]
    fn fan_out_is_bounded() {
        let wide = "@w.md\n".repeat(MAX_IMPORTS + 1);
        let error = expand(&[("w.md", "w")], &wide).0.unwrap_err();
        assert_eq!(error.why, ImportRefusal::TooMany);
        let big = "x".repeat(200 * 1024);
        let error = expand(&[("big.md", &big)], "@big.md\n@big.md")
            .0
            .unwrap_err();
        assert_eq!(error.why, ImportRefusal::TooLarge);
    }

    #[test]
    fn the_prompts_root_is_the_nearest_prompts_directory() {
        assert_eq!(
            prompts_root("/h/.vak/prompts/surface/cli".into()),
            "/h/.vak/prompts"
        );
        assert_eq!(prompts_root("/h/.vak/prompts".into()), "/h/.vak/prompts");
        assert_eq!(prompts_root("/h/x".into()), "/h/x");
    }
}
