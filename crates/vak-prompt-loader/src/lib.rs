//! Reads every layer of the prompt chain: directory layers under the home and
//! the project, the gateway JSON tiers, the legacy `.vak/SYSTEM.md`, config
//! files and skill directories.
//!
//! The loader knows files, not policy: it never decides what is trusted or
//! who wins. It treats every input as hostile until read (see [`read_safely`]):
//! a bad file becomes a [`Skipped`] entry naming it, and the rest of the chain
//! still loads, so the safety floor never depends on a project file being
//! well-formed.

mod chain;
mod config_toml;
pub mod confine;
mod discover;
mod error;
mod gateway;
mod imports;
mod managed;
mod paths;
mod rules;
mod safe_read;
mod snapshot;
mod watch;
mod write;

pub use chain::{
    ConfigFile, Contribution, DEFAULT_INTEROP, LegacySystem, LoadRequest, LoadedChain, SkillEntry,
    Skipped, load_chain,
};
pub use discover::{
    Discovered, LayerWalk, MAX_LAYERS, MAX_VISITED, RootKind, directory_layers,
    directory_layers_walked, discover_project, is_layer_dir, levels_and_left_out, levels_between,
    nested_repository,
};
pub use error::LoaderError;
pub use gateway::{
    GatewayDoc, GatewayError, GatewayFile, GatewayTable, GatewayTables, Keyed, MAX_GATEWAY_BYTES,
    Shape, TableEntry, check_gateway_text, entry_key, gateway_dir, gateway_entry_listed,
    gateway_lists, gateway_pointer, gateway_prompt_text, json_kind, read_gateway,
    write_gateway_prompt,
};
pub use imports::{ImportError, ImportRefusal, Imported, Imports, MAX_IMPORTS, expand_imports};
pub use managed::{
    LOCKABLE, MANAGED_DIR_ENV, MAX_SIGNATURE_BYTES, ManagedError, ManagedFile, ManagedLayer,
    ManagedLocation, ManagedSigningKey, PIN_FILE, SYSTEM_MANAGED_DIR, Verification, VerifiedFile,
    generate_managed_key, load_managed, pin_path, sign_managed_file, unpin_managed, verify_managed,
};
pub use paths::{LayerDirs, prompt_dir};
pub use rules::{
    MAX_GLOB_BYTES, MAX_GLOBS, MAX_LINT_FILES, MAX_RULES, MAX_RULES_BYTES, ParsedRule, PathMatch,
    RULES_DIR, RuleError, RuleSet, ScopedRule, load_rules, parse_rule, project_files, project_path,
    relative_project_path,
};
pub use safe_read::{MAX_FILE_BYTES, ReadRefusal, read_safely};
pub use snapshot::{Snapshot, SnapshotReads};
pub use watch::{InputWatch, MAX_WATCHES};
pub use write::{
    ABSENT_DIGEST, DIR_MODE, SaveError, SaveOutcome, create_dirs, create_parent_confined,
    create_temp, current_digest, current_version, refuse_nested_link, remove_checked, save_atomic,
};
