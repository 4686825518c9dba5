//! A temporary home and project, and a way to run `vak` against them.

#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace's `fixtures/` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Copy a directory tree (files and directories only).
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A temporary `$VAK_HOME` and project directory, and a `$TMPDIR` of its
/// own, so what a command leaves there (an edited copy kept after a
/// refusal, as it should be) goes with the test, not into the machine's.
pub struct Env {
    pub home: tempfile::TempDir,
    pub project: tempfile::TempDir,
    pub tmp: tempfile::TempDir,
}

impl Env {
    /// An empty home and an empty project.
    pub fn empty() -> Self {
        Env {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    /// Copies of `fixtures/home` and `fixtures/projects/<project>`.
    pub fn fixture(project: &str) -> Self {
        let env = Env::empty();
        copy_tree(&fixtures().join("home"), env.home.path());
        copy_tree(
            &fixtures().join("projects").join(project),
            env.project.path(),
        );
        env
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    pub fn project(&self) -> &Path {
        self.project.path()
    }

    /// Write `text` to `path` under the home, creating directories.
    pub fn write_home(&self, path: &str, text: &str) {
        write(&self.home().join(path), text);
    }

    /// Write `text` to `path` under the project, creating directories.
    pub fn write_project(&self, path: &str, text: &str) {
        write(&self.project().join(path), text);
    }

    /// A `vak` command with `VAK_HOME` set and the project as working dir.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_vak"));
        command
            .args(args)
            .env("VAK_HOME", self.home())
            .env("TMPDIR", self.tmp.path())
            .env_remove("VAK_LOG")
            // A managed layer is the machine's: a test that wants one
            // names it.
            .env_remove("VAK_MANAGED_DIR")
            .current_dir(self.project())
            .stdin(Stdio::null());
        command
    }

    /// Run `vak` and return its output.
    pub fn vak(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Run `vak` with `input` on stdin.
    pub fn vak_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run `vak`, assert success, return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.vak(args);
        assert!(
            out.status.success(),
            "vak {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run `vak … --format json`, assert success, parse stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// Set `[prompts] max_tokens` in the home's shared config (replacing
    /// any value there), for tests that depend on a cap.
    pub fn set_cap(&self, max_tokens: usize) {
        let path = self.home().join(".vak/config.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let kept: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("max_tokens"))
            .map(|l| format!("{l}\n"))
            .collect();
        let text = if kept.contains("[prompts]") {
            kept.replacen(
                "[prompts]\n",
                &format!("[prompts]\nmax_tokens = {max_tokens}\n"),
                1,
            )
        } else {
            format!("{kept}\n[prompts]\nmax_tokens = {max_tokens}\n")
        };
        write(&path, &text);
    }

    /// Trust the project.
    pub fn trust(&self) {
        self.ok(&["trust"]);
    }
}

/// Distinct guardrails tagged `tag`, just over 250 KiB: under the per-file
/// limit, but two of them are far over a model's window together.
pub fn large_guardrails(tag: &str) -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 250 * 1024 {
        text.push_str(&format!("- never {tag}{i} x{i}y z{i}q\n"));
        i += 1;
    }
    text
}

/// Write a file, creating its parent directories.
/// Make a FIFO at `path`, creating its directory.
pub fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

pub fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `vak trust` in `env` succeeds, with no chain left out of its budget.
pub fn trusted_with_every_chain_budgeted(env: &Env) {
    let out = env.vak(&["trust"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("not every chain"),
        "{}",
        stderr(&out)
    );
}

/// How long one `vak` run may take before a test calls it hung. Generous,
/// so that a loaded machine never trips it: how fast a command is, is the
/// benchmarks' business (BENCHMARKS.md), never a test's.
pub const HANG: Duration = Duration::from_secs(120);

/// Wait until `ready` holds, polling; if it still does not after [`HANG`]
/// the test fails saying `what` never happened. For a state another
/// process reaches in its own time (a lock taken, a listener closed),
/// which a fixed sleep would race on a loaded machine.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !ready() {
        assert!(started.elapsed() < HANG, "{what} never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run `command` with its output captured; if it has not finished within
/// `limit` it is killed and the test fails naming it, so a run that blocks
/// (on a FIFO, a lock) fails the test instead of hanging the suite.
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained on their own threads, so a full pipe never looks like a hang.
    fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = from.read_to_end(&mut bytes);
            bytes
        })
    }
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {limit:?}: it blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// A word for `sh -c`, quoted.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Run `vak args` on a pseudo-terminal (util-linux `script`), stdout and
/// stderr both on it, with `VAK_HOME` set and the project as working
/// directory; `shell_tail` is appended to the command line (a redirection
/// such as `2>FILE`). Returns what the terminal showed, `\r\n` made `\n`,
/// and the exit status.
pub fn on_terminal(
    env: &Env,
    args: &[&str],
    shell_tail: &str,
    vars: &[(&str, &str)],
) -> (String, Option<i32>) {
    terminal_run(env, args, shell_tail, vars, &[])
}

/// [`on_terminal`] with `unset` removed from the environment.
pub fn on_terminal_without(
    env: &Env,
    args: &[&str],
    vars: &[(&str, &str)],
    unset: &[&str],
) -> (String, Option<i32>) {
    terminal_run(env, args, "", vars, unset)
}

fn terminal_run(
    env: &Env,
    args: &[&str],
    shell_tail: &str,
    vars: &[(&str, &str)],
    unset: &[&str],
) -> (String, Option<i32>) {
    let mut line = shell_quote(env!("CARGO_BIN_EXE_vak"));
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quote(arg));
    }
    line.push(' ');
    line.push_str(shell_tail);
    let mut command = Command::new("script");
    command
        .args(["-qec", &line, "/dev/null"])
        .env("VAK_HOME", env.home())
        .env_remove("VAK_LOG")
        .env("TERM", "dumb")
        .current_dir(env.project())
        .stdin(Stdio::null());
    for (key, value) in vars {
        command.env(key, value);
    }
    for key in unset {
        command.env_remove(key);
    }
    let out = output_within(&mut command, HANG);
    (
        String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
        out.status.code(),
    )
}
