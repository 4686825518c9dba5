//! Hostile paths: a
//! project whose `.vak`, `.vak/prompts` or a sub-layer directory is a
//! symlink into the shared layer or out of the checkout; the trust store as
//! a FIFO, written concurrently, untrusted by a path that no longer
//! resolves; oversized and ill-formed gateway JSON and config.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::{Env, HANG, copy_tree, fixtures, mkfifo, output_within, stderr, stdout, write};

const SHARED: &str = "- shared guardrail the user wrote\n";

/// An env whose home has shared guardrails at every directory layer a
/// project could be pointed at.
fn env_with_shared() -> Env {
    let env = Env::empty();
    for dir in [
        ".vak/prompts",
        ".vak/prompts/surface/cli",
        ".vak/prompts/agents/reviewer",
    ] {
        env.write_home(&format!("{dir}/guardrails.md"), SHARED);
    }
    env
}

fn shared_intact(env: &Env, dir: &str) {
    let path = env.home().join(dir).join("guardrails.md");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap_or_default(),
        SHARED,
        "{} was deleted or changed",
        path.display()
    );
}

fn mkdirs(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
}

#[test]
fn reset_through_a_symlinked_prompt_dir_never_deletes_the_shared_file() {
    // (project link, its target in the home, reset arguments, shared dir hit)
    let cases: [(&str, &str, &[&str], &str); 4] = [
        (".vak/prompts", ".vak/prompts", &[], ".vak/prompts"),
        (".vak", ".vak", &[], ".vak/prompts"),
        (
            ".vak/prompts/surface/cli",
            ".vak/prompts/surface/cli",
            &["--surface", "cli"],
            ".vak/prompts/surface/cli",
        ),
        (
            ".vak/prompts/agents/reviewer",
            ".vak/prompts/agents/reviewer",
            &["--agent", "reviewer"],
            ".vak/prompts/agents/reviewer",
        ),
    ];
    for (link, target, sub, hit) in cases {
        let env = env_with_shared();
        let link_path = env.project().join(link);
        mkdirs(link_path.parent().unwrap());
        symlink(env.home().join(target), &link_path).unwrap();
        let mut args = vec!["prompts", "reset", "--scope", "project"];
        args.extend_from_slice(sub);
        args.push("guardrails");
        let out = env.vak(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{link}: {err}");
        assert!(err.contains("refusing to remove"), "{link}: {err}");
        assert!(err.contains("leads outside"), "{link}: {err}");
        shared_intact(&env, hit);
        // The admin API's DELETE runs the same core function; a save is
        // refused the same way and writes nothing there.
        let out = env.vak_stdin(
            &[
                &["prompts", "set", "--scope", "project"][..],
                sub,
                &["guardrails", "-"],
            ]
            .concat(),
            "- from the project\n",
        );
        assert_eq!(out.status.code(), Some(1), "{link}: {}", stderr(&out));
        assert!(stderr(&out).contains("leads outside"), "{}", stderr(&out));
        shared_intact(&env, hit);
    }
}

#[test]
fn a_prompt_dir_symlinked_out_of_the_project_is_refused_like_vak() {
    let outside = tempfile::tempdir().unwrap();
    write(
        &outside.path().join("prompts/identity.md"),
        "OUTSIDE-IDENTITY",
    );
    write(
        &outside.path().join("vak/prompts/identity.md"),
        "OUTSIDE-VAK",
    );
    for (link, target) in [(".vak/prompts", "prompts"), (".vak", "vak")] {
        let env = Env::empty();
        let link_path = env.project().join(link);
        mkdirs(link_path.parent().unwrap());
        symlink(outside.path().join(target), &link_path).unwrap();
        env.trust();
        let report = env.json(&["prompts", "show"]);
        let prefix = report["prefix"].as_str().unwrap();
        assert!(!prefix.contains("OUTSIDE"), "{link}: read from outside");
        let skipped = report["warnings"].to_string() + &report["demoted"].to_string();
        assert!(
            skipped.contains(link) && skipped.contains("symlink leading outside"),
            "{link}: not reported: {skipped}"
        );
    }
}

#[test]
fn a_symlink_inside_the_project_to_the_project_is_allowed() {
    let env = Env::empty();
    env.write_project("docs/guardrails.md", "- INSIDE-PROJECT rule\n");
    mkdirs(&env.project().join(".vak/prompts"));
    symlink(
        "../../docs/guardrails.md",
        env.project().join(".vak/prompts/guardrails.md"),
    )
    .unwrap();
    let report = env.json(&["prompts", "show"]);
    assert!(
        report["prefix"]
            .as_str()
            .unwrap()
            .contains("INSIDE-PROJECT"),
        "{report}"
    );
}

fn fixture_home(name: &str) -> Env {
    let env = Env::empty();
    copy_tree(&fixtures().join("hostile/paths").join(name), env.home());
    env
}

fn both(out: &std::process::Output) -> String {
    stdout(out) + &stderr(out)
}

const CHAT: [&str; 8] = [
    "prompts",
    "show",
    "--surface",
    "chat",
    "--bot",
    "helpdesk",
    "--chat",
    "ops",
];

/// Every warning of a `show --format json`, one string.
fn warnings(env: &Env, args: &[&str]) -> (String, String) {
    let report = env.json(args);
    (
        report["prefix"].as_str().unwrap().to_owned(),
        report["warnings"].to_string(),
    )
}

#[test]
fn a_duplicate_gateway_key_is_reported_not_silently_resolved() {
    let env = fixture_home("duplicate-key");
    let (prefix, warnings) = warnings(&env, &CHAT);
    assert!(!prefix.contains("DUPLICATE-WINS"), "{prefix}");
    assert!(
        warnings.contains("bots.json")
            && warnings.contains("#/helpdesk/prompts/identity")
            && warnings.contains("more than once"),
        "{warnings}"
    );
}

#[test]
fn gateway_entries_of_the_wrong_type_are_reported_with_file_and_key() {
    let env = fixture_home("wrong-type");
    let (prefix, warnings) = warnings(&env, &CHAT);
    assert!(!prefix.contains("WRONG-TYPE"), "{prefix}");
    assert!(
        warnings.contains("bots.json#/helpdesk` is a string, not an object"),
        "{warnings}"
    );
    assert!(
        warnings.contains("allowlist.json#/helpdesk/ops` is an array, not an object"),
        "{warnings}"
    );
}

#[test]
fn a_gateway_agent_instructions_key_says_where_it_belongs() {
    let env = fixture_home("agent-instructions");
    let (prefix, warnings) = warnings(&env, &CHAT);
    assert!(!prefix.contains("AGENT-KEY"), "{prefix}");
    assert!(
        warnings.contains("prompts/agent-instructions") && warnings.contains("agents/<role>/"),
        "{warnings}"
    );
    assert!(!warnings.contains("code-owned"), "{warnings}");
}

#[test]
fn oversized_gateway_json_and_config_are_refused_by_size() {
    let env = Env::empty();
    let filler = "x".repeat(2 << 20);
    env.write_home(
        ".vak/gateway/bots.json",
        &format!(r#"{{"helpdesk": {{"prompts": {{"identity": "BIG-JSON"}}, "pad": "{filler}"}}}}"#),
    );
    env.write_home(
        ".vak/config.toml",
        &format!("[prompts]\nmax_tokens = 10\npad = \"{filler}\"\n"),
    );
    env.write_project(".vak/config.toml", &format!("pad = \"{filler}\"\n"));
    // Refused by size, as the warnings say ("byte limit"), not read.
    let (prefix, warnings) = warnings(&env, &CHAT);
    assert!(!prefix.contains("BIG-JSON"), "{prefix}");
    for file in ["bots.json", "config.toml"] {
        assert!(
            warnings.contains(file) && warnings.contains("byte limit"),
            "{file}: {warnings}"
        );
    }
    assert_eq!(warnings.matches("config.toml").count(), 2, "{warnings}");
}

#[test]
fn a_fifo_gateway_file_is_refused_without_blocking() {
    let env = Env::empty();
    mkdirs(&env.home().join(".vak/gateway"));
    assert!(
        std::process::Command::new("mkfifo")
            .arg(env.home().join(".vak/gateway/bots.json"))
            .status()
            .unwrap()
            .success()
    );
    // Opened without blocking: a run that blocked on the FIFO is killed.
    let args = [&CHAT[..], &["--format", "json"]].concat();
    let out = output_within(&mut env.command(&args), HANG);
    assert!(out.status.success(), "{}", stderr(&out));
    let warnings =
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["warnings"].to_string();
    assert!(
        warnings.contains("bots.json") && warnings.contains("not a regular file"),
        "{warnings}"
    );
}

#[test]
fn a_fifo_trust_store_is_refused_without_blocking_by_every_command() {
    let env = Env::empty();
    mkdirs(&env.home().join(".vak"));
    let store = env.home().join(".vak/trust.toml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&store)
            .status()
            .unwrap()
            .success()
    );
    for args in [
        &["prompts", "show"][..],
        &["trust"],
        &["untrust"],
        &["trust", "--list"],
    ] {
        // A run that blocked on the FIFO is killed and fails the test.
        let out = output_within(&mut env.command(args), HANG);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", both(&out));
        let err = stderr(&out);
        assert!(
            err.contains("trust.toml") && err.contains("not a regular file"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn concurrent_trusts_lose_no_entry() {
    let env = Env::empty();
    let projects: Vec<_> = (0..20).map(|_| tempfile::tempdir().unwrap()).collect();
    let children: Vec<_> = projects
        .iter()
        .map(|p| {
            env.command(&["trust", "--over-budget", p.path().to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let listed = env.ok(&["trust", "--list"]);
    for project in &projects {
        let key = project.path().canonicalize().unwrap();
        assert!(
            listed.lines().any(|l| Path::new(l) == key),
            "{} lost: {listed}",
            key.display()
        );
    }
    assert_eq!(listed.lines().count(), 20, "{listed}");
}

#[test]
fn untrust_of_a_deleted_project_by_a_non_canonical_path_removes_it() {
    let base = tempfile::tempdir().unwrap();
    let base = base.path().canonicalize().unwrap();
    let base = base.to_str().unwrap();
    std::fs::create_dir_all(format!("{base}/real")).unwrap();
    symlink(format!("{base}/real"), format!("{base}/link")).unwrap();
    let proj = format!("{base}/real/proj");
    for spelling in [
        format!("{base}/real/../real/proj"),
        format!("{proj}/"),
        format!("{base}/link/proj"),
    ] {
        let env = Env::empty();
        mkdirs(Path::new(&proj));
        env.ok(&["trust", &proj]);
        std::fs::remove_dir(&proj).unwrap();
        let out = env.ok(&["untrust", &spelling]);
        assert!(
            out.contains(&format!("untrusted {proj}:")),
            "{spelling}: {out}"
        );
        assert!(
            !env.ok(&["trust", "--list"]).contains(&proj),
            "{spelling}: entry left"
        );
        // A directory re-created there is not trusted.
        mkdirs(Path::new(&proj));
        let report = env.json(&["prompts", "show", "--project", &proj]);
        assert_eq!(report["trust"], "untrusted", "{spelling}: {report}");
        std::fs::remove_dir(&proj).unwrap();
    }
}

#[test]
fn reset_of_a_file_symlinked_into_the_home_removes_neither() {
    let env = env_with_shared();
    mkdirs(&env.project().join(".vak/prompts"));
    let link = env.project().join(".vak/prompts/guardrails.md");
    symlink(env.home().join(".vak/prompts/guardrails.md"), &link).unwrap();
    let out = env.vak(&["prompts", "reset", "--scope", "project", "guardrails"]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(stderr(&out).contains("it is a symlink"), "{}", stderr(&out));
    shared_intact(&env, ".vak/prompts");
    assert!(
        link.symlink_metadata().is_ok(),
        "the link itself was removed"
    );
}

#[test]
fn a_project_that_contains_the_home_cannot_reset_the_shared_layer_through_a_link() {
    // The project is `~` and the home `~/vak-home`: a link from the
    // project's prompt directory into the home never leaves the project, so
    // only the home check stops the reset.
    let env = Env::empty();
    let home = env.project().join("vak-home");
    write(&home.join(".vak/prompts/guardrails.md"), SHARED);
    symlink(home.join(".vak"), env.project().join(".vak")).unwrap();
    for args in [
        &["prompts", "reset", "--scope", "project", "guardrails"][..],
        &["prompts", "set", "--scope", "project", "guardrails", "-"][..],
    ] {
        let out = env
            .command(args)
            .env("VAK_HOME", &home)
            .stdin(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("leads through a symlink") && err.contains("into the vak home"),
            "{args:?}: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".vak/prompts/guardrails.md")).unwrap(),
            SHARED,
            "{args:?} changed the shared guardrails"
        );
    }
}

/// A root's real path is looked up only when a symlink must be judged
/// against it: the judgement is the same whether the project is named by
/// its real path, through a symlink to it, or found from the current
/// directory, and whether a link inside leads in by a relative path, in by
/// an absolute path through that symlink, or out.
#[test]
fn symlinks_are_judged_alike_however_the_project_is_named() {
    let env = Env::empty();
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret.md"), "OUTSIDE-SECRET");
    let link = outside.path().join("project-link");
    symlink(env.project(), &link).unwrap();
    env.write_project("docs/identity.md", "INSIDE-BY-ABSOLUTE-LINK identity");
    env.write_project("docs/guardrails.md", "- INSIDE-BY-RELATIVE-LINK rule\n");
    let prompts = env.project().join(".vak/prompts");
    mkdirs(&prompts);
    symlink(link.join("docs/identity.md"), prompts.join("identity.md")).unwrap();
    symlink("../../docs/guardrails.md", prompts.join("guardrails.md")).unwrap();
    symlink(
        outside.path().join("secret.md"),
        prompts.join("surface-note.md"),
    )
    .unwrap();
    env.trust();

    let by_real = env.json(&["prompts", "show"]);
    let link_arg = link.to_str().unwrap();
    let by_link = env.json(&["prompts", "show", "--project", link_arg]);
    let from_link = env
        .command(&["prompts", "show", "--format", "json"])
        .current_dir(&link)
        .output()
        .unwrap();
    assert!(from_link.status.success(), "{}", stderr(&from_link));
    let from_link: serde_json::Value = serde_json::from_slice(&from_link.stdout).unwrap();
    for report in [&by_real, &by_link, &from_link] {
        let prefix = report["prefix"].as_str().unwrap();
        assert!(prefix.contains("INSIDE-BY-ABSOLUTE-LINK"), "{report}");
        assert!(prefix.contains("INSIDE-BY-RELATIVE-LINK"), "{report}");
        assert!(!prefix.contains("OUTSIDE-SECRET"), "{report}");
        let warnings = report["warnings"].to_string();
        assert!(
            warnings.contains("surface-note.md") && warnings.contains("symlink leading outside"),
            "{warnings}"
        );
        assert_eq!(report["prefix"], by_real["prefix"]);
    }
}

#[test]
fn nothing_vak_creates_is_group_or_world_writable_even_under_umask_000() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::empty();
    let vak = env!("CARGO_BIN_EXE_vak");
    let umask_000 = |args: &[&str], input: &str| {
        let mut shell = std::process::Command::new("sh");
        shell
            .arg("-c")
            .arg("umask 000; exec \"$0\" \"$@\"")
            .arg(vak)
            .args(args)
            .env("VAK_HOME", env.home())
            .env_remove("VAK_LOG")
            .current_dir(env.project())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = shell.spawn().unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    umask_000(
        &["prompts", "set", "--scope", "shared", "guardrails", "-"],
        "- ask before deleting\n",
    );
    umask_000(&["trust", "."], "");
    umask_000(
        &["prompts", "set", "--scope", "project", "identity", "-"],
        "You are the project's agent.\n",
    );
    umask_000(&["session", "new"], "");
    let mut checked = (0, 0);
    for root in [env.home(), env.project()] {
        for entry in walk(root) {
            let mode = std::fs::symlink_metadata(&entry)
                .unwrap()
                .permissions()
                .mode();
            if mode & 0o170000 == 0o040000 {
                checked.0 += 1;
            } else {
                checked.1 += 1;
            }
            assert_eq!(mode & 0o022, 0, "{} is {:o}", entry.display(), mode & 0o777);
        }
    }
    // The home's store directories, the trust store, a ledger and layers.
    assert!(
        checked.0 >= 6 && checked.1 >= 5,
        "only {checked:?} were made"
    );
}

/// Every path under `root`, `root` itself left out.
fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

#[test]
fn a_project_scope_save_into_a_home_inside_the_project_names_the_home_not_a_symlink() {
    let env = Env::empty();
    mkdirs(&env.project().join(".git"));
    let home = env.project().join("vakhome");
    mkdirs(&home);
    for dir in ["vakhome", "vakhome/sub"] {
        let mut command = env.command(&[
            "prompts",
            "set",
            "--scope",
            "project",
            "--dir",
            dir,
            "guardrails",
            "-",
        ]);
        let out = command
            .env("VAK_HOME", &home)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(b"- x\n")?;
                child.wait_with_output()
            })
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{dir}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(said.contains("is in the vak home"), "{dir}: {said}");
        assert!(!said.contains("symlink"), "{dir}: {said}");
    }
    assert!(!home.join(".vak").exists(), "wrote into the home");
}

#[test]
fn a_dangling_link_or_a_fifo_where_the_prompt_directory_goes_is_said_on_show_and_save() {
    let env = Env::empty();
    mkdirs(&env.project().join(".vak"));
    let prompts = env.project().join(".vak/prompts");
    // Read, it is said, not passed over as if there were no layer; saved,
    // the directory in the way is named, not "File exists".
    let cases: [(&dyn Fn(), &str, &str); 2] = [
        (
            &|| symlink("/nonexistent/elsewhere", &prompts).unwrap(),
            "it is a dangling symlink; skipped",
            "is in the way, a symlink that leads nowhere",
        ),
        (
            &|| mkfifo(&prompts),
            "it is not a directory",
            "not a directory",
        ),
    ];
    for (make, on_show, on_save) in cases {
        let _ = std::fs::remove_file(&prompts);
        make();
        let shown = env.vak(&["prompts", "show"]);
        assert!(stderr(&shown).contains(on_show), "{}", stderr(&shown));
        let out = env.vak_stdin(
            &["prompts", "set", "--scope", "project", "guardrails", "-"],
            "- g\n",
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let said = stderr(&out);
        assert!(said.contains(on_save), "{said}");
        assert!(!said.contains("os error"), "{said}");
    }
}

#[test]
fn a_home_that_is_a_regular_file_is_refused_naming_it() {
    let env = Env::fixture("myproj");
    let file = env.home().join("not-a-home");
    write(&file, "x\n");
    for args in [
        vec!["prompts", "show", "--home", file.to_str().unwrap()],
        vec!["prompts", "explain", "--home", file.to_str().unwrap()],
    ] {
        let out = output_within(&mut env.command(&args), HANG);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(file.to_str().unwrap()) && err.contains("is not a directory"),
            "{args:?}: {err}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }
    // From VAK_HOME the same.
    let mut command = env.command(&["prompts", "show"]);
    command.env("VAK_HOME", &file);
    let out = output_within(&mut command, HANG);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a directory"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_socket_fifo_or_device_as_a_layer_file_is_named_for_what_it_is() {
    let env = Env::fixture("myproj");
    env.trust();
    let prompts = env.project().join(".vak/prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::remove_file(prompts.join("guardrails.md")).unwrap();
    std::fs::remove_file(prompts.join("identity.md")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(prompts.join("guardrails.md")).unwrap();
    mkfifo(&prompts.join("identity.md"));
    let out = output_within(&mut env.command(&["prompts", "show"]), HANG);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("guardrails.md` is not a regular file (a socket)"),
        "{err}"
    );
    assert!(
        err.contains("identity.md` is not a regular file (a FIFO)"),
        "{err}"
    );
    assert!(!err.contains("No such device or address"), "{err}");
}

#[test]
fn a_role_directory_linked_out_of_the_project_is_named_not_called_undefined() {
    let env = Env::fixture("myproj");
    env.trust();
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("guardrails.md"), "- from outside\n");
    let agents = env.project().join(".vak/prompts/agents");
    std::fs::create_dir_all(&agents).unwrap();
    symlink(outside.path(), agents.join("rogue")).unwrap();
    for args in [
        vec!["prompts", "show", "--agent", "rogue"],
        vec!["prompts", "explain", "--agent", "rogue"],
    ] {
        let out = output_within(&mut env.command(&args), HANG);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(!err.contains("is not defined"), "{args:?}: {err}");
        assert!(
            err.contains(".vak/prompts/agents/rogue") && err.contains("symlink"),
            "{args:?}: {err}"
        );
        assert!(!stdout(&out).contains("from outside"), "{}", stdout(&out));
    }
}
