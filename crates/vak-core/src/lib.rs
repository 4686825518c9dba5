//! The facade: one place that wires loader, trust and composition together,
//! so the CLI and the admin API call the same functions.
//!
//! Architecture invariant: the facade holds no composition logic of its own.
//! It picks the home and the trust level, calls the crates below, and shapes
//! the result for callers.

mod cached;
mod check;
mod core;
mod edit;
mod error;
mod gateway_edit;
pub mod history;
pub mod home;
mod imported;
mod inbound;
mod names;
pub mod output;
mod over_cap;
mod reach;
mod report;
mod rules;
mod trust;

pub use crate::cached::{CachedResolver, MAX_CACHED, PromptCache};
pub use crate::check::{CheckAll, check_all};
pub use crate::core::{Core, Selectors, default_home};
pub use crate::gateway_edit::{
    GatewayChange, GatewayChangeError, GatewayChanged, GatewayEntry, GatewayKey, GatewayWritten,
    key_selectors, missing_entry,
};
pub use edit::{
    Budget, ChainPlan, ChainsLeftOut, EditError, EditStart, EditTarget, MAX_GATEWAY_CHAINS,
    MAX_PLAN_WORK, Preview, Reset, Saved, Scope, SubLayer, TrustBudget, TrustStep, Unchecked,
    UntrustOutcome, Visited, WORK_PER_CAP_TOKEN, WORK_PER_DIRECTORY, Work, budget_of, chain_work,
    check_window, describe_chain, interop_names, layer_directories, lints_of, lints_of_text,
    pushes_over, roles_with_dirs, trust_budget, untrust, walk_trust_chains,
};
pub use error::CoreError;
pub use imported::{ImportedSaveError, ImportedSaved, ImportedTarget};
pub use inbound::{Admission, InboundPrompts};
pub use names::{KnownNames, known_names};
pub use over_cap::{OVER_BUDGET_HINT, OverCap, OverChain, over_cap_warning, shared_config};
pub use report::{LayerNaming, PromptReport, provenance_summary};
pub use rules::{
    MAX_TURN_PATH_BYTES, MAX_TURN_PATHS, PathRules, RuleChange, RuleNote, RuleSaveError, RuleSaved,
    RuleSummary, RuleTarget, RuleTexts, RulesReport, paths_from_cwd, paths_from_root, rule_changes,
    rule_lints, rules_report_of, turn_rules,
};
pub use trust::{TrustRefusal, Trusted, trust_project};

/// The public prompt-layer API, re-exported from the crates that own it:
/// what the CLI, the admin server and the gateway use, and no writer (a
/// prompt layer changes only through [`Core`]'s saves and the functions of
/// [`home`]). `xtask` tidy holds its size.
pub mod prompts {
    pub use vak_prompt_blocks::{
        Block, BlocksError, Composition, Guardrail, Name, NameKind, Origin, PromptLayer,
        Provenance, SurfaceKind, parse_guardrails, sha256_hex,
    };
    pub use vak_prompt_blocks::{
        Escaped, escape_line, escape_text, first_forbidden, is_unsafe_for_terminal,
    };
    pub use vak_prompt_budget::{BudgetReport, DEFAULT_MAX_TOKENS, Encoding, count_tokens, lookup};
    pub use vak_prompt_compose::ScopedTail;
    pub use vak_prompt_compose::{
        CATALOG, Contributor, ResolveInput, ResolvedBlock, ResolvedPrompt, SeedBlock, TailContext,
        render_contract, render_tail, resolve_prompt, seed,
    };
    pub use vak_prompt_drift::{DriftReport, ResumeDecision, ResumePath, decide, diff};
    pub use vak_prompt_loader::RuleSet;
    pub use vak_prompt_loader::confine::home_path;
    pub use vak_prompt_loader::{
        ABSENT_DIGEST, LoadRequest, LoadedChain, LoaderError, MAX_FILE_BYTES, SaveError,
        current_digest, directory_layers, load_chain, nested_repository, prompt_dir, read_safely,
    };
    pub use vak_prompt_loader::{
        GatewayError, GatewayFile, GatewayTable, Shape, TableEntry, entry_key, gateway_dir,
        gateway_lists, json_kind, read_gateway,
    };
    pub use vak_prompt_loader::{
        MANAGED_DIR_ENV, ManagedError, ManagedLocation, SYSTEM_MANAGED_DIR, Verification,
        generate_managed_key, load_managed, sign_managed_file, unpin_managed, verify_managed,
    };
    pub use vak_prompt_trust::{DemoteReason, Trust, TrustStore, Verdict, prompt_verdict};
    pub use vak_session::{
        AuditEntries, Baseline, Binding, Bound, ChangeKind, ChatPlan, Claim, Committed,
        ConfigChange, DriftAccepted, Expect, FreshSession, FrozenContract, Header, HomeFile,
        HomeSnapshot, HomeStore, LayerChange, Ledger, ParentSession, Record, SecurityEvent,
        SessionError, SessionId, SessionMeta, Store, Swapped, TornLine, Turn, TurnRule,
        fingerprint, now_rfc3339, short_digest,
    };
    pub use vak_store_file::{AuditLog, BindingStore, FileStore};
}

/// The file system, for the files a caller owns beside the prompt layers
/// (the admin token, the gateway's secrets, `--file F`, an editor's copy):
/// directories made with the house's mode, a parent made only inside the
/// home, and the floor's hostile opens. A caller above vak-core reaches the
/// file system only through here (tidy `no_std_fs_outside_the_floor_and_the_stores`).
pub mod files {
    pub use vak_fs::{
        FsError, canonical, create_new, entries, is_dir, is_present, open_input, open_read,
        permissions, remove_file, restrict_umask, set_permissions,
    };
    pub use vak_prompt_loader::{create_dirs, create_parent_confined};
}
