//! What a session freezes at creation, and the ledger it is written to.
//!
//! The contract types live here, beside the ledger, because a ledger is
//! their only durable home; `vak_core::prompts` re-exports them.

mod contract;

pub use contract::{
    AgentIdentity, CapabilityDescriptor, FrozenContract, ParentSession, PromptLayerDescriptor,
    fingerprint,
};
