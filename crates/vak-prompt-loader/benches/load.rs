//! `load`: `load_chain` alone, timed with `std::time` (no harness), on
//! the chain `vak-core`'s `resolve` bench reads (every tier populated, 32
//! inputs) and on a sparse one (`fixtures/home` with
//! `fixtures/projects/myproj`, surface and agent directories missing), since
//! what pays on one can cost on the other. `cargo bench -p
//! vak-prompt-loader --bench load`; `-- once` loads each once, for `strace`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
use std::fs;
use std::path::Path;
use std::time::Instant;

use camino::Utf8PathBuf;
use vak_prompt_blocks::{Name, NameKind, SurfaceKind};
use vak_prompt_loader::{LoadRequest, load_chain};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn populate(home: &Path, project: &Path) {
    let guardrails = (0..6)
        .map(|i| format!("- guardrail number {i}: never do thing {i} without asking\n"))
        .collect::<String>();
    for root in [home, project] {
        for dir in [
            ".vak/prompts",
            ".vak/prompts/surface/cli",
            ".vak/prompts/agents/reviewer",
        ] {
            for (file, text) in [
                (
                    "identity.md",
                    "You are a careful agent for this tree. ".repeat(4),
                ),
                (
                    "operating-rules.md",
                    "- Read before writing.\n- Run the tests.\n".repeat(3),
                ),
                ("guardrails.md", guardrails.clone()),
                (
                    "surface-note.md",
                    "The person is on a slow link; keep output short.".to_owned(),
                ),
            ] {
                write(&root.join(dir).join(file), &format!("{text} ({})", dir));
            }
        }
        write(
            &root.join(".vak/config.toml"),
            "model = \"gpt-4o\"\n[permissions]\ndeny = [\"run_command:rm *\"]\n[mcp.servers.docs]\ncommand = \"docs-mcp\"\n",
        );
        for skill in ["changelog", "release"] {
            write(
                &root.join(".vak/skills").join(skill).join("SKILL.md"),
                &format!("---\ndescription: the {skill} skill\n---\nbody\n"),
            );
        }
    }
    let prompts = r#"{"identity": "bot identity", "operating-rules": "bot rules", "guardrails": "- bot guardrail", "surface-note": "bot note"}"#;
    write(
        &home.join(".vak/gateway/bots.json"),
        &format!(r#"{{"helpdesk": {{"prompts": {prompts}}}}}"#),
    );
    write(
        &home.join(".vak/gateway/allowlist.json"),
        &format!(r#"{{"helpdesk": {{"42": {{"prompts": {prompts}}}}}}}"#),
    );
}

fn time(label: &str, request: &LoadRequest, iters: usize) {
    let mut samples = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(load_chain(request).unwrap());
        }
        samples.push(t.elapsed().as_nanos() as f64 / iters as f64 / 1000.0);
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{label}: min {:.2} µs  median {:.2} µs",
        samples[0], samples[15]
    );
}

fn main() {
    let once = std::env::args().any(|a| a == "once");
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    populate(home.path(), project.path());
    let full = LoadRequest {
        home: Utf8PathBuf::from_path_buf(home.path().to_path_buf()).unwrap(),
        project: Utf8PathBuf::from_path_buf(project.path().to_path_buf()).unwrap(),
        surface: SurfaceKind::Cli,
        bot: Some(Name::new(NameKind::Bot, "helpdesk").unwrap()),
        chat: Some(Name::new(NameKind::Chat, "42").unwrap()),
        agent: Some(Name::new(NameKind::Role, "reviewer").unwrap()),
        workdir: None,
    };
    let fixtures = Utf8PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"));
    let sparse = LoadRequest {
        home: fixtures.join("home"),
        project: fixtures.join("projects/myproj"),
        surface: SurfaceKind::Server,
        bot: None,
        chat: None,
        agent: None,
        workdir: None,
    };
    let chain = load_chain(&full).unwrap();
    assert!(chain.skipped.is_empty(), "{:?}", chain.skipped);
    if once {
        eprintln!("=== full");
        load_chain(&full).unwrap();
        eprintln!("=== sparse");
        let c = load_chain(&sparse).unwrap();
        eprintln!("=== end {} {}", c.contributions.len(), c.skipped.len());
        return;
    }
    for _ in 0..2 {
        time("full  ", &full, 2000);
        time("sparse", &sparse, 2000);
    }
}
