//! The files the CLI reads for a person, now opened by the floor
//! (`vak_fs::open_input`, `create_new`): `--file F` and the editor's copy
//! follow a link the person named, but a FIFO, a directory or a device is
//! refused by name, never waited on, and nothing is saved.

use std::fs;

use crate::common::{Env, HANG, mkfifo, output_within, stderr};

const IDENTITY: &str = ".vak/prompts/identity.md";

fn set_from(env: &Env, file: &std::path::Path) -> std::process::Output {
    let mut command = env.command(&[
        "prompts",
        "set",
        "--scope",
        "shared",
        "identity",
        "--file",
        file.to_str().unwrap(),
    ]);
    output_within(&mut command, HANG)
}

#[test]
fn a_file_named_through_a_link_is_read_and_a_directory_or_fifo_is_refused_by_name() {
    let env = Env::empty();
    let text = env.project().join("text.md");
    fs::write(&text, "You are Vak, from a linked file.\n").unwrap();
    let link = env.project().join("link.md");
    std::os::unix::fs::symlink(&text, &link).unwrap();
    let out = set_from(&env, &link);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let saved = env.home().join(IDENTITY);
    assert_eq!(
        fs::read_to_string(&saved).unwrap(),
        "You are Vak, from a linked file.\n"
    );

    let dir = env.project().join("a-directory.md");
    fs::create_dir(&dir).unwrap();
    let fifo = env.project().join("fifo.md");
    mkfifo(&fifo);
    let to_fifo = env.project().join("to-fifo.md");
    std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
    for bad in [&dir, &fifo, &to_fifo] {
        let out = set_from(&env, bad);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("is not a regular file"), "{err}");
        assert!(
            err.contains(bad.file_name().unwrap().to_str().unwrap()),
            "names the file: {err}"
        );
        assert_eq!(
            fs::read_to_string(&saved).unwrap(),
            "You are Vak, from a linked file.\n",
            "nothing saved from {}",
            bad.display()
        );
    }
    let out = set_from(&env, &env.project().join("missing.md"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot read `"), "{}", stderr(&out));
    assert!(stderr(&out).contains("missing.md"), "{}", stderr(&out));
}

#[test]
fn an_editor_that_leaves_a_fifo_for_its_copy_is_refused_without_hanging() {
    let env = Env::empty();
    env.write_home(IDENTITY, "You are Vak.\n");
    let editor = env.project().join("fifo-editor.sh");
    fs::write(&editor, "#!/bin/sh\nrm -f \"$1\"\nmkfifo \"$1\"\n").unwrap();
    fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut command = env.command(&["prompts", "edit", "--scope", "shared", "identity"]);
    command
        .env("EDITOR", editor.to_str().unwrap())
        .env_remove("VISUAL");
    let out = output_within(&mut command, HANG);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("vak-edit-"), "names the copy: {err}");
    assert!(err.contains("is not a regular file"), "{err}");
    assert_eq!(
        fs::read_to_string(env.home().join(IDENTITY)).unwrap(),
        "You are Vak.\n"
    );
}
