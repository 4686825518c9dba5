use std::ffi::CStr;
use std::fmt;
use std::str::FromStr;

use crate::BlocksError;

/// One named part of the system prompt.
///
/// Declaration order is the order the blocks render in the prefix. Wire
/// names never change once written; a new block gets a new string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Block {
    /// Who the agent is. User-owned, narrowest wins.
    Identity,
    /// How the agent works. User-owned, narrowest wins.
    OperatingRules,
    /// The safety floor. User-owned, accumulates across every layer.
    Guardrails,
    /// The factual description of the callable interface. Code-owned.
    CapabilityContract,
    /// The generated `Surface:` line. Code-owned, runtime-derived.
    Surface,
    /// User notes rendered after the `Surface:` line. Accumulates.
    SurfaceNote,
    /// The live skill inventory. Code-owned, runtime-derived.
    Skills,
    /// The live MCP server inventory. Code-owned, runtime-derived.
    Mcp,
    /// A worker role's additive instructions, from the agent tier.
    AgentInstructions,
}

/// Who may change a block's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Editable per layer by the user (or operator).
    User,
    /// Written by the runtime; no layer may change it.
    Code,
}

/// How the layers of the chain combine into one block text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Composition {
    /// The narrowest layer that has the block decides; an empty text counts.
    NarrowestWins,
    /// Every layer's items are concatenated widest first and duplicates
    /// dropped; nothing a wider layer said can be removed.
    Accumulate,
    /// Shipped text, identical for every chain.
    Fixed,
    /// Derived by the runtime from what it observes.
    RuntimeDerived,
    /// Appended after the universal blocks, never replacing them.
    Additive,
}

/// The composition table: one row per block. Kept as data so the docs, the
/// engine and the tests read the same rule.
const TABLE: [(Block, &str, &str, Owner, Composition); 9] = [
    (
        Block::Identity,
        "identity",
        "Identity",
        Owner::User,
        Composition::NarrowestWins,
    ),
    (
        Block::OperatingRules,
        "operating-rules",
        "Operating rules",
        Owner::User,
        Composition::NarrowestWins,
    ),
    (
        Block::Guardrails,
        "guardrails",
        "Guardrails",
        Owner::User,
        Composition::Accumulate,
    ),
    (
        Block::CapabilityContract,
        "capability-contract",
        "Capability contract",
        Owner::Code,
        Composition::Fixed,
    ),
    (
        Block::Surface,
        "surface",
        "Surface",
        Owner::Code,
        Composition::RuntimeDerived,
    ),
    (
        Block::SurfaceNote,
        "surface-note",
        "Surface note",
        Owner::User,
        Composition::Accumulate,
    ),
    (
        Block::Skills,
        "skills",
        "Skills",
        Owner::Code,
        Composition::RuntimeDerived,
    ),
    (
        Block::Mcp,
        "mcp",
        "MCP servers",
        Owner::Code,
        Composition::RuntimeDerived,
    ),
    (
        Block::AgentInstructions,
        "agent-instructions",
        "Agent instructions",
        Owner::User,
        Composition::Additive,
    ),
];

impl Block {
    /// Every block, in render order.
    pub const ALL: [Block; 9] = [
        Block::Identity,
        Block::OperatingRules,
        Block::Guardrails,
        Block::CapabilityContract,
        Block::Surface,
        Block::SurfaceNote,
        Block::Skills,
        Block::Mcp,
        Block::AgentInstructions,
    ];

    /// The blocks a directory layer or gateway entry may contain, in the
    /// order their files are read.
    pub const EDITABLE: [Block; 4] = [
        Block::Identity,
        Block::OperatingRules,
        Block::Guardrails,
        Block::SurfaceNote,
    ];

    /// Its place in [`Block::ALL`], from 0: an index for a table with a
    /// slot per block.
    pub fn index(self) -> usize {
        // `ALL` is in declaration order; a unit test checks it.
        self as usize
    }

    fn row(self) -> &'static (Block, &'static str, &'static str, Owner, Composition) {
        // The table is indexed by declaration order; a unit test checks it.
        &TABLE[self as usize]
    }

    /// The stable string written to ledgers, JSON and file names.
    pub fn wire_name(self) -> &'static str {
        self.row().1
    }

    /// A name for people; free to change between releases.
    pub fn label(self) -> &'static str {
        self.row().2
    }

    /// Who may change this block.
    pub fn owner(self) -> Owner {
        self.row().3
    }

    /// How layers combine for this block.
    pub fn composition(self) -> Composition {
        self.row().4
    }

    /// The file that holds this block in a directory layer, if users may
    /// write it.
    pub fn file_name(self) -> Option<&'static str> {
        match self {
            Block::Identity => Some("identity.md"),
            Block::OperatingRules => Some("operating-rules.md"),
            Block::Guardrails => Some("guardrails.md"),
            Block::SurfaceNote => Some("surface-note.md"),
            _ => None,
        }
    }

    /// [`Block::file_name`] spelled for a system call (NUL ended).
    pub fn file_c_name(self) -> Option<&'static CStr> {
        match self {
            Block::Identity => Some(c"identity.md"),
            Block::OperatingRules => Some(c"operating-rules.md"),
            Block::Guardrails => Some(c"guardrails.md"),
            Block::SurfaceNote => Some(c"surface-note.md"),
            _ => None,
        }
    }

    /// Whether a layer may supply text for this block.
    pub fn is_editable(self) -> bool {
        self.file_name().is_some()
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl FromStr for Block {
    type Err = BlocksError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TABLE
            .iter()
            .find(|row| row.1 == s)
            .map(|row| row.0)
            .ok_or_else(|| BlocksError::UnknownBlock(s.to_owned()))
    }
}

impl serde::Serialize for Block {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.wire_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_declaration_order() {
        for (index, block) in Block::ALL.iter().enumerate() {
            assert_eq!(TABLE[index].0, *block);
            assert_eq!(*block as usize, index);
        }
    }

    #[test]
    fn wire_names_round_trip() {
        for block in Block::ALL {
            assert_eq!(block.wire_name().parse::<Block>(), Ok(block));
        }
        assert!("Identity".parse::<Block>().is_err());
    }

    #[test]
    fn wire_names_are_frozen() {
        let names: Vec<_> = Block::ALL.iter().map(|b| b.wire_name()).collect();
        assert_eq!(
            names,
            [
                "identity",
                "operating-rules",
                "guardrails",
                "capability-contract",
                "surface",
                "surface-note",
                "skills",
                "mcp",
                "agent-instructions"
            ]
        );
    }

    #[test]
    fn only_user_blocks_have_files() {
        for block in Block::ALL {
            if block.is_editable() {
                assert_eq!(block.owner(), Owner::User);
                assert_eq!(
                    block.file_name().map(|f| f.trim_end_matches(".md")),
                    Some(block.wire_name())
                );
            }
        }
        assert_eq!(
            Block::EDITABLE.iter().filter(|b| b.is_editable()).count(),
            4
        );
    }

    #[test]
    fn each_block_is_at_its_index_in_all() {
        for (index, block) in Block::ALL.iter().enumerate() {
            assert_eq!(block.index(), index);
        }
    }

    #[test]
    fn each_c_file_name_spells_the_file_name() {
        for block in Block::ALL {
            assert_eq!(
                block.file_c_name().map(|c| c.to_str().unwrap()),
                block.file_name()
            );
        }
    }

    #[test]
    fn floor_blocks_accumulate() {
        assert_eq!(Block::Guardrails.composition(), Composition::Accumulate);
        assert_eq!(Block::SurfaceNote.composition(), Composition::Accumulate);
        assert_eq!(Block::CapabilityContract.owner(), Owner::Code);
    }
}
