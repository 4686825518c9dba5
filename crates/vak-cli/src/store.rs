//! `vak store migrate`, `vak store import`.

use camino::Utf8PathBuf;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use vak_core::prompts::Escaped;
use vak_gateway::{Migrated, StoreSource, StoreUrl, choose_store};

use crate::CliError;
use crate::out;
use crate::prompts::print_json;
use crate::selectors::{Format, HomeArg, home_dir};

/// `vak store …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum StoreCommand {
    /// Apply the schema migrations this build ships (idempotent).
    Migrate(MigrateArgs),
    /// Copy a file store into PostgreSQL and verify counts and digests.
    Import(ImportArgs),
}

/// `vak store migrate`.
#[derive(Debug, Clone, Args)]
pub(crate) struct MigrateArgs {
    /// The store [default: $VAK_STORE, else `[store] url` in the shared config, else file].
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    #[command(flatten)]
    pub(crate) home: HomeArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// Where `vak store import` copies from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ImportFrom {
    /// The home's files.
    File,
}

/// `vak store import`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ImportArgs {
    /// The store to copy from.
    #[arg(long, value_enum)]
    pub(crate) from: ImportFrom,
    /// The PostgreSQL store to copy into [default: $VAK_STORE, else `[store] url` in the shared config].
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// The vak home whose files are copied [default: $VAK_HOME, else ~/vak-home].
    #[arg(long, value_name = "DIR", value_parser = crate::selectors::non_empty_path)]
    pub(crate) home: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
}

/// `vak store …`
pub(crate) fn store(command: &StoreCommand) -> Result<(), CliError> {
    match command {
        StoreCommand::Migrate(args) => migrate(args),
        StoreCommand::Import(args) => import(args),
    }
}

fn migrate(args: &MigrateArgs) -> Result<(), CliError> {
    let home = args.home.dir()?;
    let migrated = vak_gateway::migrate(&home, args.store.as_deref())?;
    match (&migrated, args.format) {
        (Migrated::FileStore, Format::Json) => print_json(&json!({"store": "file", "applied": []})),
        (Migrated::FileStore, Format::Text) => {
            out::print("the file store has no schema to migrate\n")
        }
        (Migrated::Postgres { store, applied }, Format::Json) => {
            print_json(&json!({"store": store, "applied": applied}))
        }
        (Migrated::Postgres { store, applied }, Format::Text) => {
            if applied.is_empty() {
                out::print(&format!("{} is up to date\n", Escaped(store)))
            } else {
                let versions: Vec<String> = applied.iter().map(ToString::to_string).collect();
                out::print(&format!(
                    "{}: applied migration {}\n",
                    Escaped(store),
                    versions.join(", ")
                ))
            }
        }
    }
}

fn import(args: &ImportArgs) -> Result<(), CliError> {
    let home = home_dir(args.home.as_ref())?;
    let ImportFrom::File = args.from;
    let (url, source) = choose_store(&home, args.store.as_deref())?;
    let StoreUrl::Postgres(url) = url else {
        return Err(CliError::Usage(match source {
            StoreSource::Default => {
                "`vak store import --from file` needs a PostgreSQL store to copy into: --store postgres://…".to_owned()
            }
            other => format!("the store from {other} is the file store; import copies into a PostgreSQL store"),
        }));
    };
    let imported = {
        let mut progress = crate::progress::Progress::new("copying sessions");
        vak_gateway::import_file_with(&home, &url, |done, total| {
            progress.step(done, Some(total));
        })?
    };
    for refused in &imported.objects_refused {
        out::notice("warning", &format!("a kept text was not copied: {refused}"));
    }
    if imported.versions_under_old_keys > 0 {
        out::notice(
            "warning",
            &format!(
                "{} version records of home-side files an earlier import copied stay under the file's path, where `vak prompts log --store` does not look; import into an empty database to copy them under the home-relative name",
                imported.versions_under_old_keys
            ),
        );
    }
    match args.format {
        Format::Json => print_json(&json!({
            "sessions": imported.sessions,
            "already_there": imported.already_there,
            "records": imported.records,
            "events": imported.events,
            "bindings": imported.bindings,
            "objects": imported.objects,
            "objects_refused": imported.objects_refused,
            "versions": imported.versions,
            "versions_under_old_keys": imported.versions_under_old_keys,
            "home_files": imported.home_files,
            "home_already_there": imported.home_already_there,
            "secrets": imported.secrets,
            "replay_markers": imported.replay_markers,
            "verified": true,
        })),
        Format::Text => out::print(&format!(
            "copied {} sessions ({} records), {} audit events, {} bindings, {} kept texts, {} version records, {} home-side files, {} signing secrets and {} replay markers; {} sessions were already there (and {} home-side files); every ledger's digest, the events, the bindings, every kept text (re-hashed), the version log and every home-side file's digest verified\n",
            imported.sessions,
            imported.records,
            imported.events,
            imported.bindings,
            imported.objects,
            imported.versions,
            imported.home_files,
            imported.secrets,
            imported.replay_markers,
            imported.already_there,
            imported.home_already_there
        )),
    }
}
