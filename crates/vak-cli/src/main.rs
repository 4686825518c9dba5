//! `vak`: show, explain and edit the layered system prompt; trust projects;
//! run sessions that remember their prompt; serve the admin UI.

mod admin;
mod complete;
mod edit;
mod error;
mod history;
mod imported;
mod managed;
mod out;
mod progress;
mod prompts;
#[cfg(test)]
mod readme;
mod rules;
mod selectors;
mod session;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use error::CliError;

/// vak: the agent runtime's layered, editable system prompt.
#[derive(Debug, Parser)]
#[command(name = "vak", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show, explain, edit and check the system prompt's layers.
    Prompts {
        #[command(subcommand)]
        command: PromptsCommand,
    },
    /// Trust a project: its prompt layers and config apply in full.
    Trust(prompts::TrustArgs),
    /// Stop trusting a project: only its guardrails apply.
    Untrust(prompts::UntrustArgs),
    /// Create, show and list sessions.
    Session {
        #[command(subcommand)]
        command: SessionCli,
    },
    /// Resume a session and print the request it would send.
    Exec(session::ExecArgs),
    /// Gateway operations.
    Gateway {
        #[command(subcommand)]
        command: session::GatewayCommand,
    },
    /// Security audit events.
    Audit {
        #[command(subcommand)]
        command: session::AuditCommand,
    },
    /// Migrate a store's schema; move a file store into PostgreSQL.
    Store {
        #[command(subcommand)]
        command: store::StoreCommand,
    },
    /// The managed layer (/etc/vak/prompts): verify it, sign its files,
    /// make a signing key, forget pinned keys.
    Managed {
        #[command(subcommand)]
        command: managed::ManagedCommand,
    },
    /// The admin API and web UI.
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    /// Print a shell completion script, which asks `vak` what fits as you
    /// type (commands, flags, scopes, blocks, and this home's roles, bots
    /// and chats): `vak completions bash > ~/.local/share/bash-completion/completions/vak`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `vak session …`: the lifecycle commands, and `diff` beside them.
#[derive(Debug, Subcommand)]
enum SessionCli {
    /// Per changed block and layer, the text diff between what a session
    /// froze and what resolves now.
    Diff(history::SessionDiffArgs),
    #[command(flatten)]
    Lifecycle(session::SessionCommand),
}

#[derive(Debug, Subcommand)]
enum PromptsCommand {
    /// Print the assembled prompt: the prefix, then the per-turn tail.
    Show(prompts::ViewArgs),
    /// One line per block saying which layers it came from, then what was
    /// demoted and why.
    Explain(prompts::ViewArgs),
    /// Replace one block of one layer from a file or standard input.
    Set(edit::SetArgs),
    /// Edit one block of one layer in $EDITOR.
    Edit(edit::EditArgs),
    /// Delete one block of one layer, so it inherits again.
    Reset(edit::ResetArgs),
    /// Check the budget and lints; non-zero when over the cap.
    Check(edit::CheckArgs),
    /// The versions of one block of one layer saved through vak: time, who,
    /// digest, tokens.
    Log(history::LogArgs),
    /// A unified diff between two versions of one block of one layer
    /// (default: its last change).
    Diff(history::DiffArgs),
    /// Save an earlier version of one block of one layer back, through the
    /// same checks as `set`.
    Revert(history::RevertArgs),
    /// Save a scoped rule file, or list its versions (`.vak/prompts/rules/NAME.md`).
    #[command(subcommand)]
    Rule(rules::RuleCommand),
    /// Save a file block files import (`@parts/tone.md`), or list its versions.
    #[command(subcommand)]
    Imported(imported::ImportedCommand),
}

fn init_logging(default: tracing::Level) {
    // VAK_LOG=debug|info|warn|error; `default` otherwise, on stderr so
    // stdout stays machine-readable.
    let level = match std::env::var("VAK_LOG").as_deref() {
        Ok("trace") => tracing::Level::TRACE,
        Ok("debug") => tracing::Level::DEBUG,
        Ok("info") => tracing::Level::INFO,
        Ok("warn") => tracing::Level::WARN,
        Ok("error") => tracing::Level::ERROR,
        _ => default,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(|| out::EscapingStderr)
        .with_target(false)
        // Field values quote paths from hostile trees: escaped, never raw,
        // so the subscriber's own colour codes are off too — always, which
        // covers a stderr that is not a terminal and `NO_COLOR` alike
        // (an escape sequence would reach the user as `\u{1b}[…`).
        .with_ansi(false)
        .without_time()
        .try_init();
}

fn run(cli: &Cli) -> Result<(), CliError> {
    match &cli.command {
        Command::Prompts { command } => match command {
            PromptsCommand::Show(args) => prompts::show(args),
            PromptsCommand::Explain(args) => prompts::explain(args),
            PromptsCommand::Set(args) => edit::set(args),
            PromptsCommand::Edit(args) => edit::edit(args),
            PromptsCommand::Reset(args) => edit::reset(args),
            PromptsCommand::Check(args) => edit::check(args),
            PromptsCommand::Log(args) => history::log(args),
            PromptsCommand::Diff(args) => history::diff(args),
            PromptsCommand::Revert(args) => history::revert(args),
            PromptsCommand::Rule(command) => rules::rule(command),
            PromptsCommand::Imported(command) => imported::imported(command),
        },
        Command::Trust(args) => prompts::trust(args),
        Command::Untrust(args) => prompts::untrust(args),
        Command::Session { command } => match command {
            SessionCli::Diff(args) => history::session_diff(args),
            SessionCli::Lifecycle(command) => session::session(command),
        },
        Command::Exec(args) => session::exec(args),
        Command::Gateway { command } => session::gateway(command),
        Command::Audit { command } => session::audit(command),
        Command::Store { command } => store::store(command),
        Command::Managed { command } => managed::managed(command),
        Command::Admin { command } => admin::admin(command),
        Command::Completions { shell } => complete::script(*shell),
    }
}

/// The command line, parsed; a usage error is printed with every argument
/// escaped and exits with 2.
///
/// clap quotes an offending argument as given, so a value holding an escape
/// sequence or a newline would reach the terminal raw (a script or a
/// completion can pass what a repository chose). The arguments are parsed
/// once as given; only when that fails are they parsed again escaped, so
/// the error clap reports names them escaped. Should the escaped arguments
/// fail differently (or parse), the first error is shown with its control
/// characters escaped instead.
fn parse_cli() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let error = match Cli::try_parse_from(&args) {
        Ok(cli) => return cli,
        Err(error) => error,
    };
    if !error.use_stderr() {
        // `--help` and `--version`: clap's own text, to stdout.
        error.exit();
    }
    let escaped = args.iter().map(|arg| {
        let arg = arg.to_string_lossy();
        vak_core::prompts::escape_line(&arg).into_owned()
    });
    match Cli::try_parse_from(escaped) {
        Err(again) if again.kind() == error.kind() => again.exit(),
        _ => {
            let text = error.render().to_string();
            eprint!("{}", vak_core::prompts::escape_text(&text));
            std::process::exit(error.exit_code());
        }
    }
}

/// The default home (`~/vak-home`) when `VAK_HOME` does not choose another
/// and it does not exist yet: a command that creates it says so, once.
fn unborn_default_home() -> Option<camino::Utf8PathBuf> {
    if std::env::var_os("VAK_HOME").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let home = vak_core::default_home().ok()?;
    (!vak_core::files::is_present(&home)).then_some(home)
}

fn main() -> ExitCode {
    // Nothing vak writes (the trust store, a session ledger, a layer, the
    // version log) may be writable by group or others, whatever umask it
    // inherits: under `umask 000` any local user could otherwise trust a
    // project or rewrite a session. Set before any thread starts.
    vak_core::files::restrict_umask();
    // A write past `ulimit -f` would kill the process mid-change (SIGXFSZ's
    // default), between a file's rename and its version record; handled,
    // the write fails with EFBIG instead, which every writer cleans up after
    // and reports like a full disk.
    if let Err(error) = signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    ) {
        tracing::debug!(%error, "could not handle SIGXFSZ");
    }
    // The completion script's question (`COMPLETE=bash vak -- …`): answered
    // and exited here, before anything else runs.
    complete::answer_if_asked();
    let cli = parse_cli();
    // Tracing goes to stderr; skipped inputs are reported in the output
    // itself, so the default level stays quiet.
    let service = matches!(
        &cli.command,
        Command::Gateway {
            command: session::GatewayCommand::Serve(_)
        }
    );
    let admin_server = matches!(
        &cli.command,
        Command::Admin {
            command: admin::AdminCommand::Serve(_)
        }
    );
    if service {
        // A service logs one line per delivery by default.
        init_logging(tracing::Level::INFO);
    } else if admin_server || std::env::var_os("VAK_LOG").is_some() {
        // A server's warnings (listening beyond loopback, accept errors)
        // are for whoever started it, asked or not.
        init_logging(tracing::Level::WARN);
    }
    let unborn = unborn_default_home();
    let result = run(&cli);
    if let Some(home) = unborn
        && vak_core::files::is_present(&home)
    {
        out::say(&format!(
            "created the vak home `{}` (shared layers, trust store, sessions); VAK_HOME or --home chooses another",
            vak_core::prompts::Escaped(home.as_str())
        ));
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::BrokenPipe) => CliError::BrokenPipe.exit_code(),
        Err(error) => {
            out::notice_lines("vak", &error.to_string());
            error.exit_code()
        }
    }
}
