//! `vak prompts show`, `vak prompts explain`, `vak trust`, `vak untrust`.

use std::fmt::Write as _;

use camino::{Utf8Path, Utf8PathBuf};
use clap::Args;
use serde_json::json;
use vak_core::prompts::{
    Composition, Escaped, ResolvedPrompt, Trust, TrustStore, escape_line, escape_text,
};
use vak_core::{Core, LayerNaming, PromptReport, provenance_summary};

use crate::CliError;
use crate::out;
use crate::selectors::{Format, HomeArg, SelectorArgs, project_in};

/// Arguments of `show` and `explain`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ViewArgs {
    #[command(flatten)]
    pub(crate) selectors: SelectorArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) pager: out::PagerArg,
    /// A path a turn would touch, relative to the current directory (repeat
    /// for several): the scoped rules whose globs match it are shown in the
    /// tail, and `explain` says which rule matched which path.
    #[arg(long = "path", value_name = "PATH", add = clap_complete::ArgValueCompleter::new(clap_complete::PathCompleter::any()))]
    pub(crate) paths: Vec<std::path::PathBuf>,
}

pub(crate) use crate::out::print_json;

/// The scoped rules of `core`'s project (read once), and the report of
/// which the `--path`s select.
fn rules_report(
    core: &Core,
    args: &ViewArgs,
    trust: Trust,
) -> Result<(vak_core::prompts::RuleSet, vak_core::RulesReport), CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Failed(format!("cannot read the current directory: {e}")))?;
    let paths = vak_core::paths_from_cwd(&core.selectors().project, &cwd, &args.paths)?;
    let set = core.scoped_rules();
    let report = vak_core::rules_report_of(&set, &paths, trust);
    Ok((set, report))
}

/// Print a report as JSON with the scoped rules beside it
/// (`scoped_rules`) and the tail a turn touching the `--path`s would carry.
fn print_with_rules(
    resolved: &vak_core::prompts::ResolvedPrompt,
    budget: &vak_core::Budget,
    rules: &vak_core::RulesReport,
) -> Result<(), CliError> {
    let tail = vak_core::output::tail_with_rules(&resolved.tail, rules);
    out::print_document(
        &vak_core::output::PromptDocument::new(PromptReport::new(resolved, budget))
            .with_rules(rules, tail.as_deref()),
    )
}

/// What `explain` says about the scoped rules: each rule with its globs,
/// which rule matched which `--path`, what was demoted or left out.
fn rules_text(report: &vak_core::RulesReport, asked: bool) -> String {
    let mut out = String::new();
    if report.rules.is_empty() && report.skipped.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nScoped rules ({}; in a turn's tail when it touches a matching path, never in the prefix):",
        report.rules.len()
    );
    for rule in &report.rules {
        let base = if rule.base.is_empty() {
            String::new()
        } else {
            format!(" (under {})", Escaped(&rule.base))
        };
        let demoted = if rule.demoted.is_some() {
            " · demoted: not applied in an untrusted project"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<16} {:<15} {:<8} {}{base}{demoted}\n{:<20}`{}`",
            Escaped(&rule.name).to_string(),
            rule.block,
            rule.layer,
            rule.globs
                .iter()
                .map(|g| Escaped(g).to_string())
                .collect::<Vec<_>>()
                .join(", "),
            "",
            Escaped(&rule.source.to_string())
        );
    }
    if asked {
        let _ = writeln!(out, "\nPaths:");
        for path in &report.paths {
            if path.matched.is_empty() {
                let _ = writeln!(out, "  {}: no rule", Escaped(&path.path));
            }
            for (source, glob) in &path.matched {
                let _ = writeln!(
                    out,
                    "  {}: `{}` matched by `{}`",
                    Escaped(&path.path),
                    Escaped(&source.to_string()),
                    Escaped(glob)
                );
            }
        }
    }
    for note in &report.demoted {
        let _ = writeln!(
            out,
            "  demoted: `{}`: {}",
            Escaped(&note.source.to_string()),
            escape_line(&note.reason)
        );
    }
    for note in &report.skipped {
        let _ = writeln!(
            out,
            "  left out: `{}` {}",
            Escaped(&note.source.to_string()),
            escape_line(&note.reason)
        );
    }
    out
}

fn resolve(args: &ViewArgs) -> Result<(Core, ResolvedPrompt), CliError> {
    let core = synced_for_reading(Core::open(args.selectors.to_selectors()?)?);
    let resolved = core.resolve()?;
    Ok((core, resolved))
}

/// `core` on the chosen store with the home's replica brought up to it.
/// Reading commands still answer when that fails (an
/// unreachable database, a bad `[store] url`, a replica edited by hand): from
/// the files as they are, with a warning saying why they may be stale.
pub(crate) fn synced_for_reading(core: Core) -> Core {
    match vak_gateway::on_chosen_store(core.clone(), None) {
        Ok(core) => core,
        Err(error) => {
            out::notice(
                "warning",
                &format!(
                    "showing this home's files as they are, which may not be what the store holds: {error}"
                ),
            );
            core
        }
    }
}

/// The note an untrusted project's output ends with: what was not applied
/// (listed one by one unless the output above already did, as `explain`'s
/// `Demoted:` does) and the one command that changes it.
fn untrusted_note(core: &Core, resolved: &ResolvedPrompt, listed_above: bool) -> String {
    let mut note = String::new();
    if resolved.trust == Trust::Untrusted && !resolved.demoted.is_empty() {
        let _ = writeln!(
            note,
            "This project is untrusted: {} of its inputs were not applied{} (guardrails from it still apply).",
            resolved.demoted.len(),
            if listed_above { ", listed above" } else { "" }
        );
        for d in resolved.demoted.iter().filter(|_| !listed_above) {
            let what = d.subject();
            let _ = writeln!(
                note,
                "  not applied: {} from `{}`",
                Escaped(&what),
                Escaped(&d.provenance.source.to_string())
            );
        }
        let _ = writeln!(
            note,
            "To apply them, trust the project: vak trust {}",
            Escaped(core.selectors().project.as_str())
        );
    }
    note
}

/// The warning line on stderr for a prompt over its cap.
fn over_cap_notice(core: &Core, budget: &vak_core::Budget) {
    let config = vak_core::shared_config(&core.selectors().home);
    if let Some(warning) = vak_core::over_cap_warning(&budget.report, &config) {
        out::notice("warning", &warning);
    }
}

/// `vak prompts show`.
pub(crate) fn show(args: &ViewArgs) -> Result<(), CliError> {
    let (core, resolved) = resolve(args)?;
    let (set, rules) = rules_report(&core, args, resolved.trust)?;
    match args.format {
        Format::Json => print_with_rules(
            &resolved,
            &vak_core::budget_of(&resolved).with_scoped_rules(&set),
            &rules,
        ),
        Format::Text => {
            let mut text = escape_text(&resolved.prefix).into_owned();
            // Scoped rules are the one part of a tail the budget counts
            // (every rule, as if all were active); the rest is not.
            text.push_str(if rules.rules.is_empty() {
                "\n--- tail (rendered per turn; outside the budget and the fingerprint) ---\n"
            } else {
                "\n--- tail (rendered per turn; outside the fingerprint; its scoped rules are budgeted, all as if active) ---\n"
            });
            text.push_str(&escape_text(&resolved.tail));
            text.push('\n');
            if !rules.tail.is_empty() {
                text.push_str(&escape_text(&rules.tail));
            }
            for note in rules.skipped.iter().chain(&rules.demoted) {
                out::notice(
                    "warning",
                    &format!("scoped rule `{}` {}", note.source, note.reason),
                );
            }
            let budget = vak_core::budget_of(&resolved).with_scoped_rules(&set);
            let _ = write!(text, "\n--- {} ---\n", crate::edit::tokens_line(&budget));
            for warning in &budget.warnings {
                out::notice("warning", warning);
            }
            over_cap_notice(&core, &budget);
            let note = untrusted_note(&core, &resolved, false);
            if !note.is_empty() {
                text.push_str("\n--- not applied ---\n");
                text.push_str(&note);
            }
            for warning in &resolved.warnings {
                out::notice("warning", warning);
            }
            out::page(&text, args.pager)
        }
    }
}

/// `vak prompts explain`: one line per block, then demotions and warnings.
pub(crate) fn explain(args: &ViewArgs) -> Result<(), CliError> {
    let (core, resolved) = resolve(args)?;
    let (set, rules) = rules_report(&core, args, resolved.trust)?;
    if args.format == Format::Json {
        return print_with_rules(
            &resolved,
            &vak_core::budget_of(&resolved).with_scoped_rules(&set),
            &rules,
        );
    }
    let s = core.selectors();
    let mut out = String::new();
    let trust = match resolved.trust {
        // The home is never a project: there is nothing to
        // trust, and "untrusted" would suggest there were.
        _ if core.project_is_home() => "the vak home: no project, the shared layers only",
        Trust::Trusted => "trusted",
        Trust::Untrusted => "untrusted",
    };
    let _ = write!(
        out,
        "Prompt for {} ({trust}) · surface {}",
        Escaped(s.project.as_str()),
        s.surface
    );
    if let Some(dir) = s.subdir() {
        let _ = write!(out, " · directory {}", Escaped(dir.as_str()));
    }
    if let Some(bot) = &s.bot {
        let _ = write!(out, " · bot {bot}");
    }
    if let Some(chat) = &s.chat {
        let _ = write!(out, " · chat {chat}");
    }
    if let Some(agent) = &s.agent {
        let _ = write!(out, " · agent {agent}");
    }
    let _ = writeln!(out, "\n");
    for block in &resolved.blocks {
        let _ = writeln!(
            out,
            "{:<20} {}",
            block.block.wire_name(),
            provenance_summary(block, LayerNaming::Wire)
        );
        if block.block.composition() != Composition::Fixed {
            for c in &block.contributors {
                let _ = writeln!(
                    out,
                    "{:<20}   {:<8} {}",
                    "",
                    c.provenance.layer,
                    Escaped(&c.provenance.source.to_string())
                );
                // Imported files are listed under the file that imports
                // them: they are its text.
                for imported in &c.imports {
                    let _ = writeln!(
                        out,
                        "{:<20}     imports {}",
                        "",
                        Escaped(&imported.provenance.source.to_string())
                    );
                }
            }
        }
        for shadowed in &block.shadowed {
            let _ = writeln!(
                out,
                "{:<20}   shadows {} {}",
                "",
                shadowed.layer,
                Escaped(&shadowed.source.to_string())
            );
        }
    }
    if !resolved.demoted.is_empty() {
        let _ = writeln!(out, "\nDemoted:");
        for d in &resolved.demoted {
            let what = d.subject();
            let _ = writeln!(
                out,
                "  {} from {} `{}`: {}",
                Escaped(&what),
                d.provenance.layer,
                Escaped(&d.provenance.source.to_string()),
                escape_line(&d.reason.to_string())
            );
        }
    }
    if !resolved.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings:");
        for w in &resolved.warnings {
            let _ = writeln!(out, "  {}", Escaped(w));
        }
    }
    out.push_str(&rules_text(&rules, !args.paths.is_empty()));
    let _ = writeln!(out, "\nfingerprint {}", resolved.fingerprint);
    let budget = vak_core::budget_of(&resolved).with_scoped_rules(&set);
    let _ = writeln!(out, "{}", crate::edit::tokens_line(&budget));
    over_cap_notice(&core, &budget);
    let note = untrusted_note(&core, &resolved, true);
    if !note.is_empty() {
        let _ = write!(out, "\n{note}");
    }
    out::page(&out, args.pager)
}

/// Arguments of `vak trust`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TrustArgs {
    /// The project directory [default: the project root found from the
    /// current directory].
    pub(crate) dir: Option<Utf8PathBuf>,
    /// List trusted directories instead.
    #[arg(long, conflicts_with = "dir")]
    pub(crate) list: bool,
    /// Trust the project even when its newly applied layers put the prompt
    /// prefix over the token cap.
    #[arg(long, conflicts_with = "list")]
    pub(crate) over_budget: bool,
    /// Show what trusting would change (per block, as a diff; the prefix
    /// tokens before and after; the config keys that would apply) and
    /// write nothing.
    #[arg(long, conflicts_with_all = ["list", "over_budget"])]
    pub(crate) preview: bool,
    #[command(flatten)]
    pub(crate) pager: out::PagerArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) home: HomeArg,
}

/// Arguments of `vak untrust`.
#[derive(Debug, Clone, Args)]
pub(crate) struct UntrustArgs {
    /// The project directory [default: the project root found from the
    /// current directory].
    pub(crate) dir: Option<Utf8PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) home: HomeArg,
}

/// `vak trust [DIR]` and `vak trust --list`.
pub(crate) fn trust(args: &TrustArgs) -> Result<(), CliError> {
    let home = args.home.dir()?;
    let store = TrustStore::load(&home).map_err(vak_core::CoreError::from)?;
    if args.list {
        if args.format == Format::Json {
            let trusted: Vec<&str> = store.list().collect();
            return print_json(&json!({ "trusted": trusted }));
        }
        let mut listed = String::new();
        for dir in store.list() {
            listed.push_str(&escape_line(dir));
            listed.push('\n');
        }
        if listed.is_empty() {
            out::say("no trusted projects; `vak trust DIR` trusts one");
        }
        return out::print(&listed);
    }
    let dir = project_in(args.dir.as_ref(), &home)?;
    if args.preview {
        return trust_preview(&home, &dir, args.dir.is_none(), args.format, args.pager);
    }
    // Named as the store will key it, not as typed (`.`).
    let dir = vak_core::files::canonical(&dir)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or(dir);
    // The chain reported is the one in force where the command runs: found
    // from the current directory, that directory's layer included.
    let mut selectors = vak_core::Selectors::new(home.clone(), dir.clone());
    if args.dir.is_none() {
        let here = vak_core::Selectors::discover(home.clone(), &crate::selectors::current_dir()?)?;
        if here.project == selectors.project {
            selectors.workdir = here.workdir;
        }
    }
    let trusted = match vak_core::trust_project(
        &selectors,
        vak_core::Unchecked::from_over_budget(args.over_budget),
        &vak_core::history::Who::OsUser,
    ) {
        Ok(trusted) => trusted,
        Err(
            refusal @ (vak_core::TrustRefusal::OverBudget { .. }
            | vak_core::TrustRefusal::Unchecked { .. }),
        ) => return Err(CliError::OverBudget(refusal.to_string())),
        Err(vak_core::TrustRefusal::Core(error)) => return Err(error.into()),
        Err(vak_core::TrustRefusal::Home(error)) => {
            return Err(CliError::Failed(error.to_string()));
        }
    };
    let budget = &trusted.budget;
    let key = &trusted.key;
    if trusted.over_cap() {
        out::notice_lines(
            "warning",
            &format!(
                "trusting `{}` over the cap, as asked (written to the audit log): {}",
                Escaped(key.as_str()),
                budget.over.chains_text()
            ),
        );
    }
    if let Some(why) = budget.unproven() {
        out::notice(
            "warning",
            &format!("trusting `{}` although {why}", Escaped(key.as_str())),
        );
    } else if let Some(note) = budget.left_out.note() {
        out::notice("warning", &note);
    }
    if let Some(unrecorded) = &trusted.unrecorded {
        out::notice("warning", unrecorded);
    }
    if args.dir.is_some()
        && let Ok(found) = vak_core::Selectors::discover(home.clone(), &dir)
        && found.project.as_str() != key.as_str()
        && found.workdir.is_some()
    {
        out::notice(
            "note",
            &format!(
                "`{}` is trusted, and it is inside the project `{}`: a command run in it without --project finds that root and uses its trust instead; pass `--project {}` to use this directory as the project",
                Escaped(key.as_str()),
                Escaped(found.project.as_str()),
                Escaped(key.as_str())
            ),
        );
    }
    let chain = vak_core::describe_chain(&selectors, vak_core::prompts::Trust::Untrusted);
    if args.format == Format::Json {
        return print_json(&json!({
            "trusted": key,
            "chain": chain,
            "tokens_before": budget.before.report.prefix_tokens,
            "tokens_after": budget.after.report.prefix_tokens,
            "cap": budget.after.report.cap,
            "over_cap": trusted.over_cap(),
            "over_chains": budget.over.reports(),
            "recorded": trusted.unrecorded.is_none(),
        }));
    }
    out::println(&format!(
        "trusted {}: its identity, operating rules, surface notes, skills and config now apply\nprompt prefix on the chain for {}: {} -> {} tokens ({})",
        Escaped(key.as_str()),
        escape_line(&chain),
        budget.before.report.prefix_tokens,
        budget.after.report.prefix_tokens,
        cap_change(budget)
    ))
}

/// ` (which the project's config would raise to 9000 once trusted)`, when
/// the cap a refusal names is not the one trusting would bring.
fn raised_cap(budget: &vak_core::TrustBudget, over: &vak_core::prompts::BudgetReport) -> String {
    if budget.after.report.cap > over.cap {
        format!(
            " (which the project's config would raise to {} once trusted)",
            budget.after.report.cap
        )
    } else {
        String::new()
    }
}

/// `cap 1500`, or `cap 1500 -> 9000` when trusting moves it.
fn cap_change(budget: &vak_core::TrustBudget) -> String {
    let (before, after) = (budget.before.report.cap, budget.after.report.cap);
    if before == after {
        format!("cap {after}")
    } else {
        format!("cap {before} -> {after}")
    }
}

/// `vak trust --preview [DIR]`: what trusting would change; writes nothing.
///
/// Found from the current directory, the chain named is the one in force
/// there (its directory layer included); every other chain trusting
/// reaches is previewed too.
fn trust_preview(
    home: &Utf8Path,
    dir: &Utf8Path,
    found: bool,
    format: Format,
    pager: out::PagerArg,
) -> Result<(), CliError> {
    // Untrusted against trusted, whatever the trust store says now; named
    // by the path `vak trust` would record, not as typed.
    let dir = vak_core::files::canonical(dir)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or_else(|| dir.to_owned());
    let dir = dir.as_path();
    let mut selectors = vak_core::Selectors::new(home, dir);
    if found {
        let here = vak_core::Selectors::discover(home, &crate::selectors::current_dir()?)?;
        if here.project == selectors.project {
            selectors.workdir = here.workdir;
        }
    }
    let preview = {
        let mut progress = crate::progress::Progress::new("composing chains");
        vak_core::history::trust_preview_with(&selectors, |chains| {
            progress.step(chains, None);
        })?
    };
    let budget = &preview.budget;
    if format == Format::Json {
        let chain = vak_core::describe_chain(&selectors, vak_core::prompts::Trust::Untrusted);
        return out::print_document(&preview.report().on_chain(dir, chain));
    }
    let mut text = format!(
        "trusting `{}` would change (nothing is written), on the chain for {}:
prompt prefix: {} -> {} tokens ({})
",
        escape_line(dir.as_str()),
        escape_line(&vak_core::describe_chain(
            &selectors,
            vak_core::prompts::Trust::Untrusted
        )),
        budget.before.report.prefix_tokens,
        budget.after.report.prefix_tokens,
        cap_change(budget)
    );
    for o in budget.over.chains() {
        let _ = writeln!(
            text,
            "over the cap of {}{} on the chain for {}: {} tokens; `vak trust` would refuse without --over-budget",
            o.report.cap,
            raised_cap(budget, &o.report),
            escape_line(&o.chain),
            o.report.prefix_tokens
        );
    }
    let unproven = budget.unproven();
    if unproven.is_some() {
        text.push_str(
            "not every layer could be looked at (below); `vak trust` would refuse without --over-budget
",
        );
    }
    if preview.config_keys.is_empty() {
        text.push_str(
            "config keys that would apply: none
",
        );
    } else {
        text.push_str(
            "config keys that would apply:
",
        );
        for (key, source) in &preview.config_keys {
            let _ = writeln!(
                text,
                "  {} (from `{}`)",
                escape_line(key),
                escape_line(&source.to_string())
            );
        }
    }
    if let Some(note) = budget.left_out.note() {
        let _ = writeln!(text, "{}", escape_line(&note));
    }
    if preview.blocks.is_empty() {
        text.push_str(if unproven.is_some() {
            "no block's text would change on the chains looked at
"
        } else if preview.elsewhere.is_empty() {
            "no block's text would change, on any chain
"
        } else {
            "no block's text would change on this chain
"
        });
    }
    for block in &preview.blocks {
        let _ = writeln!(
            text,
            "
`{}` would be {}:",
            block.block, block.change
        );
        text.push_str(&escape_text(&block.diff));
    }
    if let Some(note) = &preview.changes_left_out {
        let _ = writeln!(text, "\n{}", escape_line(note));
    }
    for other in &preview.elsewhere {
        let block = &other.preview;
        let _ = writeln!(
            text,
            "
elsewhere, `{}` would be {} on the chain for {}:",
            block.block,
            block.change,
            escape_line(&chains_named(&other.chains))
        );
        text.push_str(&escape_text(&block.diff));
    }
    out::page(&text, pager)
}

/// The first few chains of a list, and how many more.
fn chains_named(chains: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut out = chains
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if chains.len() > SHOWN {
        let _ = write!(out, "; and {} more", chains.len() - SHOWN);
    }
    out
}

/// The prompt prefix's tokens for `project`'s base chain as it resolves
/// now; `None` when it does not resolve.
fn prefix_tokens(home: &Utf8Path, project: &Utf8Path) -> Option<usize> {
    Core::open(vak_core::Selectors::new(
        home.to_owned(),
        project.to_owned(),
    ))
    .and_then(|core| core.resolve())
    .ok()
    .map(|resolved| vak_core::budget_of(&resolved).report.prefix_tokens)
}

/// `vak untrust [DIR]`.
pub(crate) fn untrust(args: &UntrustArgs) -> Result<(), CliError> {
    let home = args.home.dir()?;
    let dir = project_in(args.dir.as_ref(), &home)?;
    let json = args.format == Format::Json;
    let before = if json {
        prefix_tokens(&home, &dir)
    } else {
        None
    };
    let done = vak_core::untrust(&home, &dir)?;
    if json {
        let removed: Vec<_> = done
            .removed
            .iter()
            .map(|(path, over)| {
                json!({"path": path, "over_cap": over.as_ref().map(vak_core::prompts::BudgetReport::summary)})
            })
            .collect();
        return print_json(&json!({
            "project": done.key,
            "untrusted": removed,
            "changed": !done.removed.is_empty(),
            "tokens_before": before,
            "tokens_after": prefix_tokens(&home, &dir),
            // Untrusting keeps no version and writes no audit event.
            "recorded": false,
        }));
    }
    if done.removed.is_empty() {
        return out::println(&format!(
            "{} was not trusted; nothing changed",
            Escaped(done.key.as_str())
        ));
    }
    for (removed, over) in &done.removed {
        out::println(&format!(
            "untrusted {}: only its guardrails apply now",
            Escaped(removed.as_str())
        ))?;
        if let Some(report) = over {
            out::notice_lines(
                "warning",
                &format!(
                    "without its project layers, {}",
                    report.over_cap_check_message()
                ),
            );
        }
    }
    Ok(())
}
