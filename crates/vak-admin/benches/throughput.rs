//! `admin throughput`: requests per second the admin server answers for
//! `GET /` (the embedded page: the floor) and `GET /api/prompt` (load,
//! compose and budget the fixture's chain), from four keep-alive clients,
//! with the server on one worker thread (as it was) and on
//! `vak_admin::workers()` (one per core, at most four). A measurement, not
//! a timing assertion: `cargo bench -p vak-admin --bench throughput`; the
//! numbers are in BENCHMARKS.md.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use vak_admin::{ServeConfig, Server};

const TOKEN: &str = "throughput-bench-token-0123456789abcdef";
const CLIENTS: usize = 4;
const FOR: Duration = Duration::from_secs(4);

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// One keep-alive client: GET `path` until `until`; how many answered.
fn client(addr: &str, path: &str, until: Instant) -> u64 {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    let mut answered = 0;
    while Instant::now() < until {
        writer.write_all(request.as_bytes()).unwrap();
        let mut length = 0usize;
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{path}: {status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = n.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        answered += 1;
    }
    answered
}

fn rate(addr: &str, path: &str) -> f64 {
    let until = Instant::now() + FOR;
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (addr, path) = (addr.to_owned(), path.to_owned());
            std::thread::spawn(move || client(&addr, &path, until))
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    total as f64 / FOR.as_secs_f64()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    for threads in [1, vak_admin::workers()] {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        copy_tree(&fixtures.join("home"), home.path());
        copy_tree(&fixtures.join("projects/myproj"), project.path());
        let server = Server::bind(ServeConfig {
            home: home.path().to_str().unwrap().into(),
            project: project.path().to_str().unwrap().into(),
            listen: "127.0.0.1:0".to_owned(),
            env_token: Some(TOKEN.to_owned()),
            store: None,
        })
        .unwrap();
        let addr = server.local_addr().to_string();
        // Served until the process exits.
        std::thread::spawn(move || server.run_on(threads));
        let page = rate(&addr, "/");
        let prompt = rate(&addr, "/api/prompt");
        println!(
            "workers {threads}: GET / {page:.0} req/s, GET /api/prompt {prompt:.0} req/s ({:.3} of GET /)",
            prompt / page
        );
        std::mem::forget((home, project));
    }
}
