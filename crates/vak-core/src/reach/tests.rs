use std::fs;

use camino::Utf8PathBuf;
use proptest::prelude::*;
use vak_prompt_blocks::{NameKind, SurfaceKind, contain_markdown};
use vak_prompt_budget::TokenMemo;

use super::*;
use crate::Core;

/// Lines chosen to sit on every kind of structure containment and the
/// token cuts care about: headings, fences, setext underlines, breaks,
/// HTML, `Surface:` lines, indents, slashes, list markers, duplicates,
/// other line breaks.
const LINES: &[&str] = &[
    "# Heading",
    "## Guardrails",
    "###### deep",
    "```",
    "~~~~~~~~",
    "````rust",
    "---",
    "===",
    "<!-- open",
    "<div>",
    "<script>",
    "Surface: forged",
    "  indented two",
    "    indented code",
    "/slash/at/start",
    "- never share secrets",
    "- never share secrets",
    "* star item",
    "1. one",
    "2) two",
    "-",
    "[ref]: https://example.com",
    "> quote",
    "plain words about the work",
    "",
    "\t tab",
    "line\rwith a return",
    "a\u{2028}separator",
    "日本語のテキスト 🎉",
    "#",
];

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(LINES), 0..12).prop_map(|l| l.join("\n"))
}

fn write(path: &camino::Utf8Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn name(kind: NameKind, s: &str) -> Name {
    Name::new(kind, s).unwrap()
}

/// Every text of a chat chain and its bot's chain.
#[derive(Debug, Clone)]
struct Home {
    shared_guardrails: String,
    shared_identity: String,
    project_rules: String,
    agents_md: String,
    role_guardrails: String,
    bot_guardrails: String,
    bot_note: String,
    chat: [String; 4],
    with_role: bool,
}

fn home() -> impl Strategy<Value = Home> {
    (
        (text(), text(), text(), text(), text()),
        (text(), text()),
        [text(), text(), text(), text()],
        any::<bool>(),
    )
        .prop_map(|((sg, si, pr, am, rg), (bg, bn), chat, with_role)| Home {
            shared_guardrails: sg,
            shared_identity: si,
            project_rules: pr,
            agents_md: am,
            role_guardrails: rg,
            bot_guardrails: bg,
            bot_note: bn,
            chat,
            with_role,
        })
}

/// The bound of the chat's chain from its bot's, and the chat chain's
/// exact count; `None` for the bound when the bot's chain gives no base.
fn bound_and_exact(h: &Home) -> (Option<usize>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let home = root.join("home");
    let project = root.join("project");
    fs::create_dir_all(project.join(".git")).unwrap();
    let prompts = home.join(".vak/prompts");
    write(&prompts.join("guardrails.md"), &h.shared_guardrails);
    write(&prompts.join("identity.md"), &h.shared_identity);
    write(
        &prompts.join("agents/reviewer/guardrails.md"),
        &h.role_guardrails,
    );
    write(
        &project.join(".vak/prompts/operating-rules.md"),
        &h.project_rules,
    );
    write(&project.join("AGENTS.md"), &h.agents_md);
    let bots = serde_json::json!({"bot0": {"prompts": {
        "guardrails": h.bot_guardrails, "surface-note": h.bot_note}}});
    write(&home.join(".vak/gateway/bots.json"), &bots.to_string());
    let keys = ["identity", "operating-rules", "guardrails", "surface-note"];
    let prompts: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .zip(&h.chat)
        .filter(|(_, t)| !t.is_empty())
        .map(|(k, t)| ((*k).to_owned(), serde_json::Value::from(t.as_str())))
        .collect();
    let allow = serde_json::json!({"bot0": {"7": {"prompts": prompts}}});
    write(
        &home.join(".vak/gateway/allowlist.json"),
        &allow.to_string(),
    );
    vak_prompt_trust::TrustStore::load(&home)
        .unwrap()
        .trust(&project)
        .unwrap();
    let bot_chain = Selectors {
        surface: SurfaceKind::Chat,
        bot: Some(name(NameKind::Bot, "bot0")),
        agent: h.with_role.then(|| name(NameKind::Role, "reviewer")),
        ..Selectors::new(home.clone(), project.clone())
    };
    let chat_chain = Selectors {
        chat: Some(name(NameKind::Chat, "7")),
        ..bot_chain.clone()
    };
    let mut memo = TokenMemo::new();
    let (resolved, budget) = Core::open(bot_chain).unwrap().budget().unwrap();
    let base = Base::of(
        &resolved,
        &budget.report,
        budget.scoped_rules_tokens,
        &mut memo,
    );
    let exact = Core::open(chat_chain.clone())
        .unwrap()
        .budget()
        .unwrap()
        .1
        .report
        .prefix_tokens;
    let bot = name(NameKind::Bot, "bot0");
    let chat = name(NameKind::Chat, "7");
    let shapes = chat_shapes(&mut Snapshot::new(), &chat_chain, &bot, &chat);
    let bound = base.zip(shapes).map(|(base, shapes)| base.bound(&shapes));
    (bound, exact)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The promise: a chat's chain is never over its bound, so a chain the
    /// fast path lets through is never one the exact count finds over.
    #[test]
    fn a_chat_chain_is_never_over_the_bound_from_its_bot(h in home()) {
        let (bound, exact) = bound_and_exact(&h);
        // Every bot chain is cut where the bound needs it, whatever its
        // texts: the fast path is never switched off by a hostile file.
        let bound = bound.expect("the bot's chain gives a base");
        prop_assert!(bound >= exact, "bound {bound} < exact {exact}");
    }

    /// What the bound assumes of containment: a line grows by at most
    /// [`CONTAIN_PER_LINE`] bytes, plus one closing fence no longer than
    /// the longest line; it shrinks by at most [`UNCONTAIN_PER_LINE`].
    #[test]
    fn containment_grows_and_shrinks_a_text_within_the_bound(t in text()) {
        let cleaned = vak_prompt_blocks::clean(&t).text.into_owned();
        let shape = Shape::of(&cleaned);
        let contained = contain_markdown(&cleaned).len();
        prop_assert!(contained <= shape.bytes + CONTAIN_PER_LINE * shape.lines + shape.longest + 1);
        prop_assert!(contained + UNCONTAIN_PER_LINE * shape.lines >= shape.bytes);
    }
}

/// The common home: every chat's chain is bounded, none composed.
#[test]
fn a_plain_chat_is_bounded_within_the_cap() {
    let h = Home {
        shared_guardrails: "- never share secrets\n- ask before deleting".into(),
        shared_identity: "You are the careful assistant.".into(),
        project_rules: "Run the tests before you push.".into(),
        agents_md: "- build with cargo".into(),
        role_guardrails: "- review every diff".into(),
        bot_guardrails: "- bot never shares tickets".into(),
        bot_note: String::new(),
        chat: [
            String::new(),
            String::new(),
            "- chat 7 answers in French".into(),
            "Read on a wall screen.".into(),
        ],
        with_role: true,
    };
    let (bound, exact) = bound_and_exact(&h);
    let bound = bound.expect("a plain bot chain gives a base");
    assert!(bound >= exact);
    assert!(bound < 8192, "{bound}");
}
