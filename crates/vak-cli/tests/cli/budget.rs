//! The cap on real repositories: AGENTS.md files of thousands of tokens fit
//! the default cap; under a lower one every refusal names every chain over
//! it, `--over-budget` means the same on every command and is recorded, and
//! `show`, `check --all` say plainly what is over.

use crate::common::{Env, stderr, stdout, trusted_with_every_chain_budgeted};

/// Prose under headings, like a real AGENTS.md, of about `sections` × 31
/// tokens.
fn agents_md(topic: &str, sections: usize) -> String {
    let mut text = format!("# {topic}\n\n");
    for i in 0..sections {
        text.push_str(&format!(
            "## {topic} section {i}\n\nThe {topic} module {i} handles requests for its team; keep handlers small, test each branch, and log failures with enough context to reproduce them.\n\n"
        ));
    }
    text
}

/// A project whose root AGENTS.md is about 4,000 tokens, with two nested
/// directories that have their own: `services/payments` (the larger) and
/// `web`. Every chain fits the default cap.
fn real_repository() -> Env {
    let env = Env::empty();
    std::fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_project("AGENTS.md", &agents_md("root", 130));
    env.write_project("services/payments/AGENTS.md", &agents_md("payments", 70));
    env.write_project("web/AGENTS.md", &agents_md("web", 55));
    env
}

fn tokens_of(env: &Env, args: &[&str]) -> u64 {
    let mut all = vec!["prompts", "show"];
    all.extend(args);
    env.json(&all)["tokens"]["prefix"].as_u64().unwrap()
}

/// Where `needle` first appears in `haystack`, failing loudly if it does
/// not.
fn at(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} missing from:\n{haystack}"))
}

#[test]
fn a_real_repository_fits_the_default_cap_and_trust_succeeds() {
    let env = real_repository();
    let out = env.vak(&["trust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The root AGENTS.md alone is about 4,000 tokens once trusted.
    let root = tokens_of(&env, &[]);
    assert!(root > 4000, "{root}");
    let json = env.json(&["prompts", "show"]);
    assert_eq!(json["tokens"]["cap"], 8192, "{}", json["tokens"]);
    assert_eq!(json["over_cap"], false);
    let check = env.vak(&["prompts", "check", "--all"]);
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(
        stdout(&check).contains("every one is within its cap"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn under_a_lower_cap_trust_names_every_directory_over_it_and_over_budget_is_recorded() {
    let env = real_repository();
    env.set_cap(1500);
    let out = env.vak(&["trust"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    // Both nested directories, the larger first, in one refusal.
    let payments = at(&said, "directory `services/payments`");
    let web = at(&said, "directory `web`");
    assert!(payments < web, "largest first:\n{said}");
    for needed in [
        "max_tokens",
        "--over-budget",
        "trust store is unchanged",
        "AGENTS.md",
    ] {
        at(&said, needed);
    }
    at(
        &said,
        &env.home().join(".vak/config.toml").display().to_string(),
    );
    assert_eq!(env.ok(&["trust", "--list"]).trim(), "");

    // --over-budget trusts it, says so, and writes an audit event.
    let out = env.vak(&["trust", "--over-budget", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["over_cap"], true, "{json}");
    assert!(
        json["tokens_after"].as_u64() > json["tokens_before"].as_u64(),
        "{json}"
    );
    assert_eq!(json["recorded"], true, "{json}");
    let chains = json["over_chains"].as_array().unwrap();
    assert!(chains.len() >= 3, "{json}");
    let said = stderr(&out);
    at(&said, "over the cap");
    assert!(!said.contains("\\n"), "{said}");
    assert_eq!(env.ok(&["trust", "--list"]).lines().count(), 1);
    let audit = env.ok(&["audit", "list", "--format", "json"]);
    at(&audit, "trust-over-cap");
    at(&audit, "services/payments");
    let audit = env.ok(&["audit", "list"]);
    at(&audit, "trust-over-cap");

    // A shared guardrail makes every over chain longer: refused by default,
    // naming every chain over; accepted with --over-budget and recorded.
    let set = ["prompts", "set", "--scope", "shared", "guardrails", "-"];
    let out = env.vak_stdin(&set, "- Keep secrets secret.\n");
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    let payments = at(&said, "directory `services/payments`");
    let web = at(&said, "directory `web`");
    assert!(payments < web, "largest first:\n{said}");
    at(&said, "max_tokens");
    at(&said, "--over-budget");
    assert!(!env.home().join(".vak/prompts/guardrails.md").exists());

    let mut over = set.to_vec();
    over.insert(5, "--over-budget");
    let out = env.vak_stdin(&over, "- Keep secrets secret.\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    at(&said, "over the cap");
    // Said a chain a line, not as one escaped line.
    assert!(!said.contains("\\n"), "{said}");
    at(&said, "\n    directory `services/payments`: over the cap");
    let log = env.json(&["prompts", "log", "--scope", "shared", "guardrails"]);
    let versions = log["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1, "{log}");
    assert_eq!(versions[0]["over_cap"], true, "{log}");
    let text = env.ok(&["prompts", "log", "--scope", "shared", "guardrails"]);
    at(&text, "made over the cap");

    // show and explain say it, and never refuse.
    let out = env.vak(&["prompts", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    at(&stderr(&out), "over its cap");
    let out = env.vak(&["prompts", "explain"]);
    assert!(out.status.success(), "{}", stderr(&out));
    at(&stderr(&out), "over its cap");
    assert_eq!(env.json(&["prompts", "show"])["over_cap"], true);
    let out = env.vak(&["session", "new"]);
    assert!(out.status.success(), "{}", stderr(&out));
    at(&stderr(&out), "over its cap");

    // check --all: every chain at once, exit 4, the same summary.
    let out = env.vak(&["prompts", "check", "--all"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    let payments = at(&said, "directory `services/payments`");
    let web = at(&said, "directory `web`");
    assert!(payments < web, "largest first:\n{said}");
    let out = env.vak(&["prompts", "check", "--all", "--format", "json"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["over"], true, "{json}");
    let dirs: Vec<&str> = json["directories"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    assert_eq!(dirs, ["services/payments", "web"], "{json}");
    let over = json["over_chains"].as_array().unwrap();
    let tokens: Vec<u64> = over
        .iter()
        .map(|c| c["prefix_tokens"].as_u64().unwrap())
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] >= w[1]), "{json}");
    // Every surface of every directory and the root.
    assert!(over.len() >= 15, "{}", over.len());

    // Raising the cap is the other way out.
    env.set_cap(8192);
    let out = env.vak(&["prompts", "check", "--all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(env.json(&["prompts", "show"])["over_cap"], false);
}

#[test]
fn trust_reports_the_token_change_of_the_directory_it_runs_in() {
    let env = real_repository();
    let dir = env.project().join("services/payments");
    let here = |args: &[&str]| env.command(args).current_dir(&dir).output().unwrap();
    let before = here(&["prompts", "show", "--format", "json"]);
    let before: serde_json::Value = serde_json::from_str(&stdout(&before)).unwrap();
    let out = here(&["trust", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let after = here(&["prompts", "show", "--format", "json"]);
    let after: serde_json::Value = serde_json::from_str(&stdout(&after)).unwrap();
    assert_eq!(json["tokens_before"], before["tokens"]["prefix"], "{json}");
    assert_eq!(json["tokens_after"], after["tokens"]["prefix"], "{json}");
    at(json["chain"].as_str().unwrap(), "services/payments");
    // The root's chain is not the one reported.
    assert_ne!(
        json["tokens_after"].as_u64(),
        Some(tokens_of(&env, &[])),
        "{json}"
    );
}

#[test]
fn a_save_that_changes_nothing_records_no_version() {
    let env = Env::empty();
    let set = [
        "prompts", "set", "--scope", "shared", "identity", "--format", "json", "-",
    ];
    let out = env.vak_stdin(&set, "You are Kite.\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let first: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(first["recorded"], true, "{first}");
    assert_eq!(first["over_cap"], false, "{first}");
    assert!(first["tokens_after"].as_u64().is_some(), "{first}");
    assert!(first["tokens_before"].as_u64().is_some(), "{first}");
    let out = env.vak_stdin(&set, "You are Kite.\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let again: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(again["recorded"], false, "{again}");
    assert_eq!(again["digest"], first["digest"], "{again}");
    assert_eq!(again["tokens_before"], again["tokens_after"], "{again}");
    let log = env.json(&["prompts", "log", "--scope", "shared", "identity"]);
    assert_eq!(log["versions"].as_array().unwrap().len(), 1, "{log}");
    // In text, it says so.
    let mut text = set[..5].to_vec();
    text.push("-");
    let out = env.vak_stdin(&text, "You are Kite.\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("unchanged"), "{}", stdout(&out));
    // A reset of a file that is not there records nothing either.
    let out = env.vak(&[
        "prompts",
        "reset",
        "--scope",
        "shared",
        "guardrails",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let reset: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(reset["recorded"], false, "{reset}");
}

/// A home as large as a busy gateway makes it: `chats` chats over two bots,
/// each with a guardrail and a surface note of its own, three roles with a
/// directory, and a project whose `AGENTS.md` only applies once trusted.
fn busy_gateway(chats: usize, big_chat: Option<&str>) -> Env {
    let env = Env::empty();
    env.set_cap(8192);
    env.write_home(".vak/prompts/identity.md", "You are the helpdesk's agent.");
    for role in ["reviewer", "writer", "ops"] {
        env.write_home(
            &format!(".vak/prompts/agents/{role}/identity.md"),
            &format!("You are the {role}."),
        );
    }
    env.write_home(
        ".vak/gateway/bots.json",
        r#"{"b0": {"prompts": {"identity": "You are bot zero."}}, "b1": {}}"#,
    );
    let mut bots = Vec::new();
    for bot in ["b0", "b1"] {
        let mut entries: Vec<String> = (0..chats / 2)
            .map(|n| {
                format!(
                    r#""{bot}-{n}": {{"prompts": {{"guardrails": "- chat {n} of {bot} answers in its room's language", "surface-note": "Chat {n} reads on a wall screen."}}}}"#
                )
            })
            .collect();
        if bot == "b0"
            && let Some(text) = big_chat
        {
            entries.push(format!(
                r#""big": {{"prompts": {{"guardrails": {}}}}}"#,
                serde_json::Value::from(text)
            ));
        }
        bots.push(format!(r#""{bot}": {{{}}}"#, entries.join(", ")));
    }
    env.write_home(
        ".vak/gateway/allowlist.json",
        &format!("{{{}}}", bots.join(", ")),
    );
    std::fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_project(".vak/prompts/identity.md", "You work on this service.");
    let build: String = (0..60)
        .map(|i| {
            format!(
                "- Build step {i}: run `make step-{i}` and read its whole log before going on.\n"
            )
        })
        .collect();
    env.write_project("AGENTS.md", &build);
    env.write_project(
        "services/api/AGENTS.md",
        "- The API's tests run with `make api-test`.\n",
    );
    env
}

/// The chat chain `big` of bot `b0`, untrusted, in prefix tokens.
fn big_chat_tokens(env: &Env) -> u64 {
    let json = env.json(&[
        "prompts",
        "check",
        "--surface",
        "chat",
        "--bot",
        "b0",
        "--chat",
        "big",
    ]);
    json["tokens"]["prefix"].as_u64().unwrap()
}

#[test]
fn trust_and_check_all_budget_every_chat_of_a_busy_gateway_and_name_the_one_over() {
    // 3,000 chats × 4 roles (none and three) × 2 directory layers × the
    // surfaces, at the default cap: every chain budgeted, none left out
    // for the work bound, and the one chat that trust pushes over named.
    let room_rules = |n: usize| -> String {
        (0..n)
            .map(|i| format!("- Room rule {i}: never post a ticket's contents outside its room.\n"))
            .collect()
    };
    // The big chat's chain untrusted, measured at two sizes, then sized to
    // sit a little under the cap: trusting the project's `AGENTS.md`
    // (several hundred tokens) pushes it over, and no other chat's chain
    // comes near.
    let at_size = |n: usize| big_chat_tokens(&busy_gateway(2, Some(&room_rules(n))));
    let (small, large) = (at_size(10), at_size(110));
    let per_rule = (large - small) / 100;
    let rules = 10 + ((8192 - 250 - small) / per_rule) as usize;
    let env = busy_gateway(3000, Some(&room_rules(rules)));
    let untrusted = big_chat_tokens(&env);
    assert!(
        (8192 - 400..=8192).contains(&untrusted),
        "the big chat's chain is just under the cap untrusted: {untrusted}"
    );

    let out = env.vak(&["trust"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    at(&said, "chat `big`");
    assert!(
        !said.contains("not every chain was budgeted"),
        "no chain is left out at this size:\n{said}"
    );
    assert!(!said.contains("b1-"), "only the big chat is over:\n{said}");
    assert_eq!(env.ok(&["trust", "--list"]).trim(), "");
    // The preview says what trust does: the same chain over, nothing
    // unproven, though it lists the changes of fewer chains than it budgets.
    let preview = env.json(&["trust", "--preview"]);
    assert!(preview["unproven"].is_null(), "{preview}");
    let over = preview["over_chains"].to_string();
    assert!(
        over.contains("chat `big`") && !over.contains("b1-"),
        "{over}"
    );

    // `check --all` counts every chain, and finds none over untrusted.
    let check = env.vak(&["prompts", "check", "--all"]);
    assert!(check.status.success(), "{}", stderr(&check));
    let all = format!("{}{}", stdout(&check), stderr(&check));
    assert!(!all.contains("not every chain was budgeted"), "{all}");
    at(&all, "every one is within its cap");
    let checked: usize = all
        .split("checked ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count of chains:\n{all}"));
    assert!(
        checked > 3000 * 4,
        "every chat with every role: {checked}\n{all}"
    );

    // Without the big chat, trust succeeds and leaves nothing unchecked.
    let env = busy_gateway(3000, None);
    trusted_with_every_chain_budgeted(&env);
    assert_eq!(env.ok(&["trust", "--list"]).lines().count(), 1);
}

#[test]
fn trust_with_eighteen_hundred_roles_budgets_every_chain() {
    // 1,800 roles × 5 surfaces × 3 directory layers: 27,000 chains. Each is
    // counted once trusted, and untrusted only when trusted it is over the
    // cap, so `trust` answers for every chain instead of stopping at its
    // work bound and refusing the project as unchecked.
    let env = Env::empty();
    env.set_cap(8192);
    env.write_home(".vak/prompts/identity.md", "You are the team's agent.");
    for role in 0..1800 {
        env.write_home(
            &format!(".vak/prompts/agents/role{role}/identity.md"),
            &format!("You are role {role}. ").repeat(5),
        );
    }
    std::fs::create_dir_all(env.project().join(".git")).unwrap();
    env.write_project(".vak/prompts/identity.md", "You work here.");
    let steps: String = (0..30).map(|i| format!("- Step {i}.\n")).collect();
    env.write_project("AGENTS.md", &steps);
    env.write_project("web/AGENTS.md", "- Web rules.\n");
    env.write_project("api/AGENTS.md", "- API rules.\n");
    trusted_with_every_chain_budgeted(&env);
    let check = env.vak(&["prompts", "check", "--all"]);
    assert!(check.status.success(), "{}", stderr(&check));
    let all = format!("{}{}", stdout(&check), stderr(&check));
    at(&all, "checked 27015 chains");
    at(&all, "every one is within its cap");
}
