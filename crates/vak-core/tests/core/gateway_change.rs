//! `Core::change_gateway_key`, the one lifecycle of a gateway key's change:
//! each refusal leaves the files as they were, and a change that is made is
//! recorded by key.

use std::fs;

use camino::Utf8PathBuf;
use vak_core::history::{Action, Who};
use vak_core::prompts::{Block, Name, NameKind, sha256_hex};
use vak_core::{
    Core, EditError, GatewayChange, GatewayChangeError, GatewayKey, Selectors, Unchecked,
};

struct Fixture {
    _dir: tempfile::TempDir,
    home: Utf8PathBuf,
    project: Utf8PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let (home, project) = (root.join("home"), root.join("project"));
    fs::create_dir_all(home.join(".vak/gateway")).unwrap();
    fs::create_dir_all(&project).unwrap();
    fs::write(
        home.join(".vak/config.toml"),
        "[prompts]\nmax_tokens = 1500\n",
    )
    .unwrap();
    fs::write(
        home.join(".vak/gateway/bots.json"),
        r#"{"helpdesk": {"prompts": {"guardrails": "- Never paste customer data."}}}"#,
    )
    .unwrap();
    let chat_rules: String = (0..70)
        .map(|i| format!("- Never mention chat ticket {i}.\n"))
        .collect();
    fs::write(
        home.join(".vak/gateway/allowlist.json"),
        serde_json::json!({"helpdesk": {"42": {"prompts": {"guardrails": chat_rules}}}})
            .to_string(),
    )
    .unwrap();
    Fixture {
        _dir: dir,
        home,
        project,
    }
}

/// 42 bullets naming `who`, about 350 tokens: any two such lists fit the
/// fixture's cap beside the seed, three do not.
fn bullets(who: &str) -> String {
    (0..42)
        .map(|i| format!("- Never mention {who} ticket {i}.\n"))
        .collect()
}

/// Chat 42 of the helpdesk bot, with `guardrails` as its own.
fn chat_42_with(f: &Fixture, guardrails: &str) {
    fs::write(
        f.home.join(".vak/gateway/allowlist.json"),
        serde_json::json!({"helpdesk": {"42": {"prompts": {"guardrails": guardrails}}}})
            .to_string(),
    )
    .unwrap();
}

fn bot_key(block: Block) -> GatewayKey {
    GatewayKey {
        bot: Name::new(NameKind::Bot, "helpdesk").unwrap(),
        chat: None,
        block,
    }
}

fn change<'a>(text: Option<&'a str>, if_digest: &'a str, who: &'a Who) -> GatewayChange<'a> {
    GatewayChange {
        text,
        if_digest,
        action: Action::Save,
        create_entry: false,
        unchecked: Unchecked::Refuse,
        who,
    }
}

#[test]
fn each_refusal_leaves_the_file_and_a_change_is_recorded_by_key() {
    let f = fixture();
    let core = Core::open(Selectors::new(f.home.clone(), f.project.clone())).unwrap();
    let bots = f.home.join(".vak/gateway/bots.json");
    let before = fs::read_to_string(&bots).unwrap();
    let who = Who::OsUser;
    let current = sha256_hex("- Never paste customer data.");

    // A stale digest: 409's sentence names the key and both digests.
    let stale = core
        .change_gateway_key(&bot_key(Block::Guardrails), change(Some("- x"), "", &who))
        .unwrap_err();
    assert!(matches!(stale, GatewayChangeError::Stale { .. }), "{stale}");
    let said = stale.to_string();
    assert!(
        said.contains("bots.json#/helpdesk/prompts/guardrails"),
        "{said}"
    );
    assert!(
        said.contains(&current) && said.contains("absent (no key)"),
        "{said}"
    );

    // An entry that is not there is not created unless asked.
    let other = GatewayKey {
        bot: Name::new(NameKind::Bot, "deploybot").unwrap(),
        ..bot_key(Block::Identity)
    };
    let missing = core
        .change_gateway_key(&other, change(Some("You deploy."), "", &who))
        .unwrap_err();
    assert!(
        matches!(missing, GatewayChangeError::NoEntry { .. }),
        "{missing}"
    );

    // A bot's text that its own chain holds but chat 42's does not.
    let long: String = (0..60)
        .map(|i| format!("- Never mention bot ticket {i}.\n"))
        .collect();
    let over = core
        .change_gateway_key(
            &bot_key(Block::Guardrails),
            change(Some(&long), &current, &who),
        )
        .unwrap_err();
    match &over {
        GatewayChangeError::Edit(EditError::OverBudget { chain, .. }) => {
            assert!(
                chain.as_deref().is_some_and(|c| c.contains("chat `42`")),
                "{over}"
            );
        }
        other => panic!("not refused for the chat's chain: {other}"),
    }
    assert_eq!(fs::read_to_string(&bots).unwrap(), before);

    // A text every chain holds is written and recorded under its key.
    let changed = core
        .change_gateway_key(
            &bot_key(Block::Guardrails),
            change(Some("- Never share a password."), &current, &who),
        )
        .unwrap();
    let written = changed.written.expect("written");
    assert_eq!(changed.previous.as_deref(), Some(current.as_str()));
    assert!(written.unrecorded.is_none(), "{:?}", written.unrecorded);
    assert!(
        fs::read_to_string(&bots)
            .unwrap()
            .contains("Never share a password")
    );
    let log = core
        .store()
        .history()
        .versions_of("bots.json#/helpdesk/prompts/guardrails")
        .unwrap();
    assert_eq!(log.records.len(), 1);
    assert_eq!(
        log.records[0].after.as_deref(),
        Some(sha256_hex("- Never share a password.").as_str())
    );

    // Removing a key that is absent changes nothing and writes nothing.
    let after = fs::read_to_string(&bots).unwrap();
    let nothing = core
        .change_gateway_key(&bot_key(Block::Identity), change(None, "", &who))
        .unwrap();
    assert!(nothing.written.is_none());
    assert_eq!(fs::read_to_string(&bots).unwrap(), after);
}

#[test]
fn a_bot_key_is_budgeted_on_each_chat_with_each_role() {
    let f = fixture();
    // Chat 42's list, the reviewer role's and the bot's new text, about
    // 350 tokens each: any two fit the cap beside the seed, all three do
    // not, so only chat 42 with the reviewer role goes over.
    let role = f.home.join(".vak/prompts/agents/reviewer");
    fs::create_dir_all(&role).unwrap();
    fs::write(role.join("operating-rules.md"), bullets("role")).unwrap();
    chat_42_with(&f, &bullets("chat"));
    let over = refused_bot_guardrails(&f);
    match &over {
        GatewayChangeError::Edit(EditError::OverBudget { chain, .. }) => {
            let chain = chain.as_deref().unwrap_or_default();
            assert!(
                chain.contains("chat `42`") && chain.contains("agent `reviewer`"),
                "{over}"
            );
        }
        other => panic!("not refused for chat 42 with the role: {other}"),
    }
}

/// The bot's guardrails set to its ~350-token list from the fixture's
/// project: the refusal, after checking `bots.json` was left as it was.
fn refused_bot_guardrails(f: &Fixture) -> GatewayChangeError {
    let core = Core::open(Selectors::new(f.home.clone(), f.project.clone())).unwrap();
    let bots = f.home.join(".vak/gateway/bots.json");
    let before = fs::read_to_string(&bots).unwrap();
    let who = Who::OsUser;
    let current = sha256_hex("- Never paste customer data.");
    let text = bullets("bot");
    let over = core
        .change_gateway_key(
            &bot_key(Block::Guardrails),
            change(Some(&text), &current, &who),
        )
        .unwrap_err();
    assert_eq!(fs::read_to_string(&bots).unwrap(), before, "{over}");
    over
}

/// A file save reaches every gateway chat with every role too, not only
/// with none: chat 42's list and the reviewer role's each fit beside the
/// new shared text, both do not, so the save is over the cap on that one
/// chain — which a delivery to chat 42 under the reviewer role would use.
#[test]
fn a_shared_save_is_budgeted_on_each_chat_with_each_role() {
    let f = fixture();
    let role = f.home.join(".vak/prompts/agents/reviewer");
    fs::create_dir_all(&role).unwrap();
    fs::write(role.join("operating-rules.md"), bullets("role")).unwrap();
    chat_42_with(&f, &bullets("chat"));
    let core = Core::open(Selectors::new(f.home.clone(), f.project.clone())).unwrap();
    let target = vak_core::EditTarget::new(
        vak_core::Scope::Shared,
        vak_core::SubLayer::Base,
        Block::Guardrails,
    )
    .unwrap();
    let (_, over, left_out) = core
        .check_change(&target, Some(&bullets("shared")))
        .unwrap();
    assert!(left_out.note().is_none(), "every chain was checked");
    let chains: Vec<String> = over.chains().iter().map(|c| c.chain.clone()).collect();
    assert!(
        chains
            .iter()
            .any(|c| c.contains("chat `42`") && c.contains("agent `reviewer`")),
        "chat 42 with the reviewer role is over the cap: {chains:?}"
    );
    assert!(
        !chains
            .iter()
            .any(|c| c.contains("chat `42`") && !c.contains("agent")),
        "chat 42 alone fits: {chains:?}"
    );
}

/// A gateway key is the home's, as a shared file is: a bot's text reaches
/// that bot's chats in every trusted project, not only in the project the
/// change is made from. Here the other project's guardrails, chat 42's
/// list and the bot's new text are too much together; in this project
/// (no layers of its own) chat 42 fits.
#[test]
fn a_bot_key_is_budgeted_in_every_trusted_project() {
    let f = fixture();
    chat_42_with(&f, &bullets("chat"));
    let other = f.home.parent().unwrap().join("other");
    fs::create_dir_all(other.join(".git")).unwrap();
    fs::create_dir_all(other.join(".vak/prompts")).unwrap();
    fs::write(other.join(".vak/prompts/guardrails.md"), bullets("other")).unwrap();
    let mut store = vak_core::prompts::TrustStore::load(&f.home).unwrap();
    store.trust(&other).unwrap();
    let over = refused_bot_guardrails(&f);
    let said = over.to_string();
    assert!(
        matches!(over, GatewayChangeError::Edit(EditError::OverBudget { .. })),
        "{said}"
    );
    assert!(
        said.contains("chat `42`") && said.contains(other.as_str()),
        "chat 42 in the other trusted project is named: {said}"
    );
}
