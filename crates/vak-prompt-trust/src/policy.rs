use vak_prompt_blocks::{Block, Origin, Provenance};

/// How far a source is trusted. Ordered: `Untrusted < Trusted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trust {
    /// A project the user has not vouched for, e.g. a fresh clone.
    Untrusted,
    /// A project listed in the trust store, and everything user- or
    /// operator-owned.
    Trusted,
}

/// Why a contribution was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DemoteReason {
    /// `identity`, `operating-rules` or agent instructions from an untrusted
    /// project: a cloned repository may not tell the agent who to be.
    UntrustedIdentity,
    /// `surface-note` from an untrusted project: free-form context widens
    /// perceived latitude.
    UntrustedSurfaceNote,
    /// The legacy `.vak/SYSTEM.md` of an untrusted project.
    UntrustedLegacySystem,
    /// A skill shipped by an untrusted project: skills are instructions.
    UntrustedSkill,
    /// A privileged config key from an untrusted project.
    UntrustedConfigKey,
    /// `identity` or `operating-rules` from a layer narrower than the
    /// managed one, whose config locks the block.
    LockedByManaged,
}

impl DemoteReason {
    /// A sentence saying why, ending with how to change it.
    pub fn explain(self) -> &'static str {
        match self {
            DemoteReason::UntrustedIdentity => {
                "an untrusted project may add guardrails but may not say who the agent is or how it works; run `vak trust` in the project to apply it"
            }
            DemoteReason::UntrustedSurfaceNote => {
                "an untrusted project may not add surface notes, which widen perceived latitude; run `vak trust` in the project to apply it"
            }
            DemoteReason::UntrustedLegacySystem => {
                "an untrusted project's legacy SYSTEM.md is ignored; run `vak trust` in the project to apply it (as identity)"
            }
            DemoteReason::UntrustedSkill => {
                "skills from an untrusted project are instructions and are not loaded; run `vak trust` in the project to load them"
            }
            DemoteReason::LockedByManaged => {
                "not applied: locked by managed (the managed layer's config.toml lists this block in `[prompts] locked`, so only its text applies); ask the machine's administrator to change it"
            }
            DemoteReason::UntrustedConfigKey => {
                "this key is privileged and an untrusted project may not set it; run `vak trust` in the project to apply it"
            }
        }
    }
}

impl std::fmt::Display for DemoteReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.explain())
    }
}

/// What happens to one contribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Applied.
    Keep,
    /// Dropped, and reported with the reason.
    Demote(DemoteReason),
}

/// Doc 45's trust table as a function.
///
/// Only project-owned text can be demoted: shared-layer files are the
/// user's own, gateway entries are the operator's, the seed is the code's.
/// From an untrusted project only `guardrails` survive, because
/// restrictive-only text can only narrow behaviour.
pub fn prompt_verdict(provenance: &Provenance, block: Block, trust: Trust) -> Verdict {
    if provenance.origin != Origin::Project || trust == Trust::Trusted {
        return Verdict::Keep;
    }
    match block {
        Block::Guardrails => Verdict::Keep,
        Block::SurfaceNote => Verdict::Demote(DemoteReason::UntrustedSurfaceNote),
        Block::Skills => Verdict::Demote(DemoteReason::UntrustedSkill),
        Block::Identity | Block::OperatingRules | Block::AgentInstructions => {
            Verdict::Demote(DemoteReason::UntrustedIdentity)
        }
        // No project file can supply a code-owned block; if one ever claims
        // to, it is dropped like identity.
        Block::CapabilityContract | Block::Surface | Block::Mcp => {
            Verdict::Demote(DemoteReason::UntrustedIdentity)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vak_prompt_blocks::PromptLayer;

    /// Doc 45's table, row by row, plus the origins it leaves implicit.
    #[test]
    fn the_trust_table() {
        let project = Provenance::new(PromptLayer::Project, Origin::Project, "p");
        let project_surface =
            Provenance::new(PromptLayer::Surface, Origin::Project, "p/surface/cli");
        let project_agent = Provenance::new(PromptLayer::Agent, Origin::Project, "p/agents/r");
        let shared = Provenance::new(PromptLayer::Shared, Origin::Home, "h");
        let gateway = Provenance::new(PromptLayer::Bot, Origin::Gateway, "bots.json#/b");
        let rows = [
            (&project, Block::Identity, Trust::Untrusted, false),
            (&project, Block::OperatingRules, Trust::Untrusted, false),
            (&project, Block::SurfaceNote, Trust::Untrusted, false),
            (&project, Block::Guardrails, Trust::Untrusted, true),
            (&project_surface, Block::Identity, Trust::Untrusted, false),
            (&project_surface, Block::Guardrails, Trust::Untrusted, true),
            (
                &project_agent,
                Block::AgentInstructions,
                Trust::Untrusted,
                false,
            ),
            (&project_agent, Block::Guardrails, Trust::Untrusted, true),
            (&project, Block::Identity, Trust::Trusted, true),
            (&project, Block::SurfaceNote, Trust::Trusted, true),
            (&shared, Block::Identity, Trust::Untrusted, true),
            (&shared, Block::SurfaceNote, Trust::Untrusted, true),
            (&gateway, Block::Identity, Trust::Untrusted, true),
        ];
        for (provenance, block, trust, kept) in rows {
            assert_eq!(
                prompt_verdict(provenance, block, trust) == Verdict::Keep,
                kept,
                "{provenance} {block} {trust:?}"
            );
        }
    }

    #[test]
    fn trust_is_ordered() {
        assert!(Trust::Untrusted < Trust::Trusted);
    }
}
