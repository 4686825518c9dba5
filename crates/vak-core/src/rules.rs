//! Scoped rules for a turn: the paths it names, made relative to the
//! project root, and the rules they select, composed for the tail.

use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_compose::{ScopedTail, compose_rules};
use vak_prompt_loader::{RuleSet, load_rules, project_path, relative_project_path};
use vak_prompt_trust::Trust;
use vak_session::TurnRule;

use crate::{Core, CoreError};

/// At most this many paths name what one turn touches.
pub const MAX_TURN_PATHS: usize = 256;
/// The longest path a turn may name, in bytes.
pub const MAX_TURN_PATH_BYTES: usize = 4096;

fn bounded(count: usize) -> Result<(), CoreError> {
    if count > MAX_TURN_PATHS {
        return Err(CoreError::TurnPath(format!(
            "{count} paths were named for one turn; at most {MAX_TURN_PATHS} are accepted"
        )));
    }
    Ok(())
}

/// Paths given on the command line (relative to `cwd`, or absolute), made
/// relative to `project`'s root. `..` is resolved by name.
///
/// # Errors
///
/// [`CoreError::NonUtf8Path`] for a path that is not UTF-8;
/// [`CoreError::TurnPath`] for one outside the project, too long, or too
/// many paths.
pub fn paths_from_cwd(
    project: &Utf8Path,
    cwd: &std::path::Path,
    given: &[std::path::PathBuf],
) -> Result<Vec<Utf8PathBuf>, CoreError> {
    bounded(given.len())?;
    let cwd = Utf8Path::from_path(cwd)
        .ok_or_else(|| CoreError::NonUtf8Path(cwd.to_string_lossy().into_owned()))?;
    // The project as the file system names it, so a cwd reached through a
    // symlink (or `/tmp` → `/private/tmp`) still lies inside it.
    let root = std::fs::canonicalize(project)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or_else(|| project.to_owned());
    let cwd = std::fs::canonicalize(cwd)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or_else(|| cwd.to_owned());
    given
        .iter()
        .map(|path| {
            let path = Utf8Path::from_path(path)
                .ok_or_else(|| CoreError::NonUtf8Path(path.to_string_lossy().into_owned()))?;
            if path.as_str().len() > MAX_TURN_PATH_BYTES {
                return Err(CoreError::TurnPath(format!(
                    "a path of {} bytes was named; at most {MAX_TURN_PATH_BYTES} are accepted",
                    path.as_str().len()
                )));
            }
            project_path(&root, &cwd, path).map_err(CoreError::TurnPath)
        })
        .collect()
}

/// Paths a delivery's body names, already relative to the project root.
///
/// # Errors
///
/// [`CoreError::TurnPath`]: too many, too long, absolute, with `..`, empty
/// or holding a control character; the sentence names the path.
pub fn paths_from_root(given: &[String]) -> Result<Vec<Utf8PathBuf>, CoreError> {
    bounded(given.len())?;
    given
        .iter()
        .map(|path| {
            if path.len() > MAX_TURN_PATH_BYTES {
                return Err(CoreError::TurnPath(format!(
                    "a path of {} bytes was named; at most {MAX_TURN_PATH_BYTES} are accepted",
                    path.len()
                )));
            }
            relative_project_path(path).map_err(CoreError::TurnPath)
        })
        .collect()
}

impl Core {
    /// Every scoped rule of this project and of the home (only the home's
    /// when the project is the home or inside it).
    pub fn scoped_rules(&self) -> RuleSet {
        let selectors = self.selectors();
        let project = (!self.project_is_home()).then_some(selectors.project.as_path());
        load_rules(&selectors.home, project)
    }

    /// The scoped rules `paths` (relative to the project root) select,
    /// under `trust`, composed for the tail.
    pub fn scoped_tail(&self, paths: &[Utf8PathBuf], trust: Trust) -> (ScopedTail, RuleSet) {
        let set = self.scoped_rules();
        (compose_rules(&set, paths, trust), set)
    }
}

/// What a turn's ledger record says about the rules in force.
pub fn turn_rules(tail: &ScopedTail) -> Vec<TurnRule> {
    tail.active
        .iter()
        .map(|rule| TurnRule {
            name: rule.name.clone(),
            source: rule.provenance.source.clone().unwrap_or_default(),
            layer: rule.provenance.layer.wire_name().to_owned(),
            block: rule.block.to_string(),
            digest: rule.digest.clone(),
            paths: rule.matched.iter().map(|m| m.path.to_string()).collect(),
        })
        .collect()
}
