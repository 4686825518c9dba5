//! The runtime's capability catalog and the contract generated from it.
//!
//! The contract is not advice: it is a factual description of the callable
//! interface, so it is generated from the same table the tool dispatcher
//! would be, and no layer can edit it.

use vak_prompt_blocks::CapabilityDescriptor;
use vak_prompt_blocks::sha256_hex;

/// One tool the agent can call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// The name the model calls it by.
    pub name: &'static str,
    /// Its parameters, as the model writes them.
    pub params: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
}

impl Capability {
    /// The tool's line in the contract; its digest is the descriptor's.
    pub fn contract_line(&self) -> String {
        format!("- `{}({})`: {}", self.name, self.params, self.summary)
    }

    /// The tool's descriptor, for the frozen contract.
    pub fn descriptor(&self) -> CapabilityDescriptor {
        CapabilityDescriptor {
            name: self.name.to_owned(),
            digest: sha256_hex(self.contract_line()),
        }
    }
}

/// The built-in catalog, in the order the contract lists it.
pub const CATALOG: &[Capability] = &[
    Capability {
        name: "read_file",
        params: "path, offset?, limit?",
        summary: "read a UTF-8 text file in the work tree.",
    },
    Capability {
        name: "list_dir",
        params: "path",
        summary: "list a directory's entries.",
    },
    Capability {
        name: "search",
        params: "pattern, path?",
        summary: "search file contents with a regular expression.",
    },
    Capability {
        name: "edit_file",
        params: "path, old, new",
        summary: "replace one exact occurrence of `old` with `new`.",
    },
    Capability {
        name: "write_file",
        params: "path, content",
        summary: "create or overwrite a file.",
    },
    Capability {
        name: "run_command",
        params: "command, cwd?, timeout_s?",
        summary: "run a shell command in the sandbox; returns exit code, stdout and stderr.",
    },
    Capability {
        name: "ask_user",
        params: "question",
        summary: "ask the person one question and wait for the answer.",
    },
    Capability {
        name: "use_skill",
        params: "name",
        summary: "load a listed skill's full instructions.",
    },
    Capability {
        name: "mcp_call",
        params: "server, tool, arguments",
        summary: "call a tool on a listed MCP server.",
    },
];

const PREAMBLE: &str = "You can call exactly these tools; nothing else is available.";
const ENFORCEMENT: &str = "Every call is checked by the permission engine before it runs. A denied or failed call returns an error: report it rather than retrying another way.";

/// The capability contract text for `catalog`.
pub fn render_contract(catalog: &[Capability]) -> String {
    let mut text = String::from(PREAMBLE);
    for capability in catalog {
        text.push('\n');
        text.push_str(&capability.contract_line());
    }
    text.push('\n');
    text.push_str(ENFORCEMENT);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_names_every_tool_and_digests_are_distinct() {
        let contract = render_contract(CATALOG);
        let mut digests = std::collections::BTreeSet::new();
        for capability in CATALOG {
            assert!(contract.contains(&format!("`{}(", capability.name)));
            assert!(digests.insert(capability.descriptor().digest));
        }
    }
}
