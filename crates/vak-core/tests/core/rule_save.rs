//! A scoped rule counts in every chain of its project, so saving one is
//! checked on every chain — a role's, a directory's, a gateway chat's —
//! not only the one the command runs in.

use std::fs;

use camino::Utf8PathBuf;
use vak_core::history::Who;
use vak_core::prompts::{Name, NameKind, TrustStore};
use vak_core::{Core, RuleSaveError, RuleTarget, Selectors, Unchecked};

fn bullets(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- {tag} rule {i}: never do thing {i} without asking\n"))
        .collect()
}

fn write(path: &camino::Utf8Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

#[test]
fn a_rule_save_is_refused_when_it_pushes_a_role_chain_over_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let (home, project) = (root.join("home"), root.join("project"));
    fs::create_dir_all(project.join(".git")).unwrap();
    // The reviewer role's chain is long; the plain chain is short.
    write(
        &home.join(".vak/prompts/agents/reviewer/guardrails.md"),
        &bullets("review", 120),
    );
    TrustStore::load(&home).unwrap().trust(&project).unwrap();
    let selectors = Selectors::new(home.clone(), project.clone());
    let plain = Core::open(selectors.clone()).unwrap().budget().unwrap().1;
    let role = Core::open(Selectors {
        agent: Some(Name::new(NameKind::Role, "reviewer").unwrap()),
        ..selectors.clone()
    })
    .unwrap()
    .budget()
    .unwrap()
    .1;
    let gap = role.report.prefix_tokens - plain.report.prefix_tokens;
    assert!(gap > 1000, "{gap}");
    // Room for the rule beside the plain chain, not beside the role's.
    let cap = role.report.prefix_tokens + 300;
    write(
        &home.join(".vak/config.toml"),
        &format!("[prompts]\nmax_tokens = {cap}\n"),
    );
    let rule = format!("+++\npaths = [\"src/**\"]\n+++\n{}", bullets("src", 40));
    let core = Core::open(selectors.clone()).unwrap();
    let target = RuleTarget {
        scope: vak_core::Scope::Project,
        dir: None,
        name: Name::new(NameKind::Role, "src").unwrap(),
    };
    let refused = core
        .save_rule(&target, &rule, None, &Who::OsUser, Unchecked::Refuse)
        .unwrap_err();
    let text = refused.to_string();
    assert!(
        matches!(refused, RuleSaveError::Edit(_)) && text.contains("reviewer"),
        "{text}"
    );
    assert!(!target.path(&selectors).exists(), "nothing written");
    // A short rule fits beside every chain, and is saved.
    let short = "+++\npaths = [\"src/**\"]\n+++\n- Keep it short.\n";
    core.save_rule(&target, short, None, &Who::OsUser, Unchecked::Refuse)
        .unwrap();
    assert!(target.path(&selectors).exists());
}
