use camino::{Utf8Path, Utf8PathBuf};
use vak_prompt_blocks::{Name, SurfaceKind};

/// `<root>/.vak/prompts`: the prompt directory of a home or a project.
pub fn prompt_dir(root: &Utf8Path) -> Utf8PathBuf {
    root.join(".vak").join("prompts")
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
            surface: base.join("surface").join(surface.wire_name()),
            agent: agent.map(|role| base.join("agents").join(role.as_str())),
            base,
        }
    }
}
