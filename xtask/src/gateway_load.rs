//! `cargo xtask gateway-load`: a bounded load client for `vak gateway
//! serve`. It builds nothing: point it at a `vak` binary (default
//! `target/release/vak`). It sets up a scratch home (a copy of
//! `fixtures/home`, a trusted copy of `fixtures/projects/myproj`, the
//! allowlist, the bot's secret), starts `--nodes` services on one store,
//! sends `--deliveries` signed deliveries over `--chats` chats from
//! `--clients` threads, and prints deliveries per second and the p50/p99
//! latency of the 200 answers.
//!
//! ```text
//! cargo xtask gateway-load [--vak PATH] [--store file|postgres://…] [--nodes N]
//!                          [--deliveries N] [--chats N] [--clients N]
//!                          [--home-in-store yes|no]
//! ```
//!
//! `--home-in-store yes` (PostgreSQL only) imports the scratch home's
//! prompt files and secret into the store first, so every delivery syncs
//! the nodes' replica against the store.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

struct Options {
    vak: PathBuf,
    store: String,
    nodes: usize,
    deliveries: usize,
    chats: usize,
    clients: usize,
    home_in_store: bool,
}

fn parse(args: &[String], root: &Path) -> Result<Options, String> {
    let mut options = Options {
        vak: root.join("target/release/vak"),
        store: "file".to_owned(),
        nodes: 1,
        deliveries: 2000,
        chats: 50,
        clients: 32,
        home_in_store: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("`{flag}` needs a value"))?;
        let number = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{flag} {value}`: expected a positive whole number"))
        };
        match flag.as_str() {
            "--vak" => options.vak = PathBuf::from(value),
            "--store" => options.store.clone_from(value),
            "--nodes" => options.nodes = number()?,
            "--deliveries" => options.deliveries = number()?,
            "--chats" => options.chats = number()?,
            "--clients" => options.clients = number()?,
            "--home-in-store" => {
                options.home_in_store = match value.as_str() {
                    "yes" => true,
                    "no" => false,
                    other => return Err(format!("`--home-in-store {other}`: expected yes or no")),
                }
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(options)
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(from).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// A running service: killed when dropped; its stdout is kept open.
struct Node {
    child: Child,
    _stdout: BufReader<std::process::ChildStdout>,
    addr: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn vak(options: &Options, home: &Path, project: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(&options.vak)
        .args(args)
        .env("VAK_HOME", home)
        .current_dir(project)
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", options.vak.display()))?;
    if !out.status.success() {
        return Err(format!(
            "vak {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The `v2` signature (docs/gateway.md) of `body` sent to `path`
/// (`/v1/bots/{bot}/chats/{chat}/messages`) at `ts`.
fn sign(secret: &str, ts: &str, path: &str, body: &[u8]) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    let parts: Vec<&str> = path.split('/').collect();
    let (bot, chat) = match parts[..] {
        ["", "v1", "bots", bot, "chats", chat, "messages"] => (bot, chat),
        _ => ("", ""),
    };
    mac.update(b"v2:");
    mac.update(ts.as_bytes());
    mac.update(b":");
    mac.update(bot.as_bytes());
    mac.update(b":");
    mac.update(chat.as_bytes());
    mac.update(b":");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("v2={hex}")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One client's connection to a node, kept open between requests
/// (HTTP/1.1 keep-alive), as a sender's HTTP client does: a request costs
/// the service its handling, not a TCP handshake and a teardown, and the
/// load client stays cheap beside the service on a shared machine.
struct KeepAlive {
    addr: String,
    stream: Option<BufReader<TcpStream>>,
}

impl KeepAlive {
    fn new(addr: &str) -> Self {
        KeepAlive {
            addr: addr.to_owned(),
            stream: None,
        }
    }

    /// POST `body` signed now.
    fn post(&mut self, path: &str, secret: &str, body: &str) -> Result<u16, String> {
        self.post_at(path, secret, body, &unix_now().to_string())
    }

    /// POST `body` signed at `ts`. A kept connection the service closed
    /// while it was idle fails before any answer arrives; the request is
    /// then sent once more on a fresh connection (the service never read
    /// it, and a signature it did take would be refused as a replay).
    fn post_at(&mut self, path: &str, secret: &str, body: &str, ts: &str) -> Result<u16, String> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Vak-Timestamp: {ts}\r\nX-Vak-Signature: {}\r\n\r\n{body}",
            self.addr,
            body.len(),
            sign(secret, ts, path, body.as_bytes())
        );
        let reused = self.stream.is_some();
        match self.exchange(request.as_bytes()) {
            Err(Unanswered(_)) if reused => {
                self.stream = None;
                self.exchange(request.as_bytes()).map_err(|e| e.0)
            }
            other => other.map_err(|e| e.0),
        }
    }

    fn exchange(&mut self, request: &[u8]) -> Result<u16, Unanswered> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            None => {
                let stream =
                    TcpStream::connect(&self.addr).map_err(|e| Unanswered(e.to_string()))?;
                stream
                    .set_read_timeout(Some(Duration::from_secs(120)))
                    .map_err(|e| Unanswered(e.to_string()))?;
                let _ = stream.set_nodelay(true);
                self.stream.insert(BufReader::new(stream))
            }
        };
        let answer = read_answer(stream, request);
        if !matches!(answer, Ok((_, true))) {
            self.stream = None;
        }
        answer.map(|(status, _)| status)
    }
}

/// A request that got no answer at all (the connection was gone).
struct Unanswered(String);

/// Send `request` on `stream` and read the answer: its status and whether
/// the connection stays open. The body is read (by its `Content-Length`)
/// and dropped.
fn read_answer(
    stream: &mut BufReader<TcpStream>,
    request: &[u8],
) -> Result<(u16, bool), Unanswered> {
    stream
        .get_mut()
        .write_all(request)
        .map_err(|e| Unanswered(e.to_string()))?;
    let mut line = String::new();
    let n = stream
        .read_line(&mut line)
        .map_err(|e| Unanswered(e.to_string()))?;
    if n == 0 {
        return Err(Unanswered(
            "the connection closed before answering".to_owned(),
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Unanswered("no HTTP status in the answer".to_owned()))?;
    let (mut length, mut open) = (None, true);
    loop {
        line.clear();
        if stream
            .read_line(&mut line)
            .map_err(|e| Unanswered(e.to_string()))?
            == 0
        {
            return Ok((status, false));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<u64>().ok();
            } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close")
            {
                open = false;
            }
        }
    }
    match length {
        Some(length) => {
            let copied = std::io::copy(&mut stream.by_ref().take(length), &mut std::io::sink())
                .map_err(|e| Unanswered(e.to_string()))?;
            Ok((status, open && copied == length))
        }
        // No length: the body runs to the end of the connection.
        None => {
            let _ = std::io::copy(stream, &mut std::io::sink());
            Ok((status, false))
        }
    }
}

/// `hits/misses` of a node's resolution cache, from `/healthz`.
fn healthz_cache(addr: &str) -> String {
    let answer = (|| -> Result<String, std::io::Error> {
        let mut stream = TcpStream::connect(addr)?;
        stream.write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )?;
        let mut raw = String::new();
        stream.read_to_string(&mut raw)?;
        Ok(raw)
    })()
    .unwrap_or_default();
    let field = |name: &str| {
        answer
            .split(&format!("\"{name}\":"))
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .unwrap_or("?")
            .to_owned()
    };
    format!("{}/{}", field("hits"), field("misses"))
}

/// The CPU time `pid` has used (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may
    // hold spaces: utime and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// CPU clock ticks as microseconds per delivery.
fn per_delivery(ticks: Option<u64>, deliveries: usize) -> String {
    ticks.map_or("?".to_owned(), |ticks| {
        // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
        format!(
            "{:.0}us/delivery",
            ticks as f64 * 10_000.0 / deliveries.max(1) as f64
        )
    })
}

/// Run the load and print one result line.
pub(crate) fn run(args: &[String], root: &Path) -> Result<(), String> {
    let options = parse(args, root)?;
    let scratch = std::env::temp_dir().join(format!("vak-load-{}", std::process::id()));
    let home = scratch.join("home");
    let project = scratch.join("project");
    copy_tree(&root.join("fixtures/home"), &home)?;
    copy_tree(&root.join("fixtures/projects/myproj"), &project)?;
    let result = load(&options, &home, &project);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Allow `--chats` chats, trust the project, migrate the store and make the
/// bot's secret, which is returned.
fn prepare(options: &Options, home: &Path, project: &Path) -> Result<String, String> {
    let mut chats = String::from("{\"helpdesk\": {");
    for i in 0..options.chats {
        if i > 0 {
            chats.push(',');
        }
        chats.push_str(&format!("\"c{i}\": {{}}"));
    }
    chats.push_str("}}");
    std::fs::write(home.join(".vak/gateway/allowlist.json"), chats).map_err(|e| e.to_string())?;
    let project_arg = project.to_string_lossy().into_owned();
    vak(options, home, project, &["trust", &project_arg])?;
    vak(
        options,
        home,
        project,
        &["store", "migrate", "--store", &options.store],
    )?;
    let secret = vak(options, home, project, &["gateway", "secret", "helpdesk"])?;
    Ok(secret)
}

fn load(options: &Options, home: &Path, project: &Path) -> Result<(), String> {
    let secret = prepare(options, home, project)?;
    if options.home_in_store {
        vak(
            options,
            home,
            project,
            &[
                "store",
                "import",
                "--from",
                "file",
                "--store",
                &options.store,
            ],
        )?;
    }
    let mut nodes = Vec::new();
    for _ in 0..options.nodes {
        nodes.push(start_node(options, home, project)?);
    }
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    // Files changed in the last 2 s are "racy" for the services'
    // resolution cache; let the scratch home settle as a real one would.
    std::thread::sleep(Duration::from_millis(2100));
    let cpu_before: Vec<Option<u64>> = nodes.iter().map(|n| cpu_ticks(n.child.id())).collect();
    // The load client's own CPU too: it shares the machine with the nodes
    // and the database, so what it spends is taken from them.
    let client_before = cpu_ticks(std::process::id());
    let next = AtomicUsize::new(0);
    let latencies = Mutex::new(Vec::with_capacity(options.deliveries));
    let failures = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..options.clients {
            scope.spawn(|| {
                let mut conns: Vec<KeepAlive> = addrs.iter().map(|a| KeepAlive::new(a)).collect();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= options.deliveries {
                        break;
                    }
                    let chat = format!("c{}", i % options.chats);
                    let body = format!("{{\"text\":\"load message {i}\"}}");
                    let path = format!("/v1/bots/helpdesk/chats/{chat}/messages");
                    let sent = Instant::now();
                    match conns[i % addrs.len()].post(&path, &secret, &body) {
                        Ok(200) => {
                            if let Ok(mut l) = latencies.lock() {
                                l.push(sent.elapsed());
                            }
                        }
                        _ => {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed();
    // The nodes' own CPU per delivery (user and system, from
    // /proc/PID/stat): a rate on a shared machine moves with its load, the
    // CPU a delivery costs much less.
    let cpu: Option<u64> = nodes
        .iter()
        .zip(&cpu_before)
        .map(|(n, before)| Some(cpu_ticks(n.child.id())?.saturating_sub((*before)?)))
        .sum();
    let client_cpu = cpu_ticks(std::process::id())
        .zip(client_before)
        .map(|(after, before)| after.saturating_sub(before));
    let cache: Vec<String> = addrs.iter().map(|addr| healthz_cache(addr)).collect();
    drop(nodes);
    let mut latencies = latencies.into_inner().map_err(|e| e.to_string())?;
    latencies.sort();
    let pick = |q: f64| {
        let index = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies
            .get(index)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let store = if options.store.starts_with("postgres") {
        let lock = if options.store.contains("vak_lock=advisory") {
            "advisory lock"
        } else {
            "row lock"
        };
        format!("postgres ({lock})")
    } else {
        "file".to_owned()
    };
    println!(
        "store={store} nodes={} deliveries={} chats={} clients={} ok={} failed={} elapsed={:.2}s rate={:.0}/s p50={:.1}ms p99={:.1}ms cache={} node_cpu={} client_cpu={}",
        options.nodes,
        options.deliveries,
        options.chats,
        options.clients,
        latencies.len(),
        failures.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pick(0.50),
        pick(0.99),
        cache.join(","),
        per_delivery(cpu, latencies.len()),
        per_delivery(client_cpu, latencies.len()),
    );
    Ok(())
}

/// `cargo xtask gateway-soak`: sustained signed load for a while, then a
/// check of every acknowledged turn. Options as `gateway-load`, with
/// `--seconds N` (how long, default 600) in place of `--deliveries`, and
/// `--kill-one yes` to `SIGKILL` one node halfway and start it again.
///
/// A request that gets no answer or a 5xx is sent again — the same signed
/// request, as a sender retries — to the next node, until it is answered
/// 200 (delivered) or 401 (a replay: an earlier try was delivered and its
/// answer lost). Afterwards every such message must be in the store
/// exactly once, and no message twice. It prints one line per minute (the
/// 200s' p50/p99 that minute) and a summary; the run fails if the check
/// does.
pub(crate) fn soak(args: &[String], root: &Path) -> Result<(), String> {
    let mut seconds = 600u64;
    let mut kill_one = false;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--seconds" => {
                seconds = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("`--seconds` needs a positive whole number")?;
            }
            "--kill-one" => {
                kill_one = match it.next().map(String::as_str) {
                    Some("yes") => true,
                    Some("no") => false,
                    _ => return Err("`--kill-one`: expected yes or no".to_owned()),
                }
            }
            _ => {
                rest.push(flag.clone());
                if let Some(value) = it.next() {
                    rest.push(value.clone());
                }
            }
        }
    }
    let options = parse(&rest, root)?;
    let scratch = std::env::temp_dir().join(format!("vak-soak-{}", std::process::id()));
    let home = scratch.join("home");
    let project = scratch.join("project");
    copy_tree(&root.join("fixtures/home"), &home)?;
    copy_tree(&root.join("fixtures/projects/myproj"), &project)?;
    let result = soak_in(
        &options,
        &home,
        &project,
        Duration::from_secs(seconds),
        kill_one,
    );
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn start_node(options: &Options, home: &Path, project: &Path) -> Result<Node, String> {
    let mut child = Command::new(&options.vak)
        .args([
            "gateway",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            &options.store,
        ])
        .env("VAK_HOME", home)
        .env("VAK_LOG", "warn")
        .current_dir(project)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(|e| e.to_string())?;
    let addr = line.trim().trim_start_matches("http://").to_owned();
    if addr.is_empty() {
        return Err("a node did not print its address".to_owned());
    }
    Ok(Node {
        child,
        _stdout: stdout,
        addr,
    })
}

/// What became of one message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    Delivered,
    Replayed,
    Failed,
}

fn soak_in(
    options: &Options,
    home: &Path,
    project: &Path,
    length: Duration,
    kill_one: bool,
) -> Result<(), String> {
    let secret = prepare(options, home, project)?;
    let mut nodes = Vec::new();
    for _ in 0..options.nodes {
        nodes.push(start_node(options, home, project)?);
    }
    let addrs = Mutex::new(nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
    let nodes = Mutex::new(nodes);
    let next = AtomicUsize::new(0);
    let fates: Mutex<Vec<(usize, Fate)>> = Mutex::new(Vec::new());
    // (minute, latency) of every 200.
    let latencies: Mutex<Vec<(u64, Duration)>> = Mutex::new(Vec::new());
    let started = Instant::now();
    let killed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..options.clients {
            scope.spawn(|| {
                while started.elapsed() < length {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let chat = format!("c{}", i % options.chats);
                    let body = format!("{{\"text\":\"soak message {i}\"}}");
                    let path = format!("/v1/bots/helpdesk/chats/{chat}/messages");
                    let ts = unix_now().to_string();
                    let sent = Instant::now();
                    let mut fate = Fate::Failed;
                    for attempt in 0..20 {
                        let addr = addrs
                            .lock()
                            .map(|a| a[(i + attempt) % a.len()].clone())
                            .unwrap_or_default();
                        match KeepAlive::new(&addr).post_at(&path, &secret, &body, &ts) {
                            Ok(200) => {
                                fate = Fate::Delivered;
                                break;
                            }
                            Ok(401) if attempt > 0 => {
                                fate = Fate::Replayed;
                                break;
                            }
                            Ok(status) if status < 500 => break,
                            _ => std::thread::sleep(Duration::from_millis(100)),
                        }
                    }
                    if fate == Fate::Delivered
                        && let Ok(mut l) = latencies.lock()
                    {
                        l.push((sent.duration_since(started).as_secs() / 60, sent.elapsed()));
                    }
                    if let Ok(mut f) = fates.lock() {
                        f.push((i, fate));
                    }
                }
            });
        }
        if kill_one {
            scope.spawn(|| {
                while started.elapsed() < length / 2 {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if let Ok(mut nodes) = nodes.lock()
                    && let Some(node) = nodes.first_mut()
                {
                    let _ = node.child.kill();
                    let _ = node.child.wait();
                    killed.store(true, Ordering::Relaxed);
                    if let Ok(fresh) = start_node(options, home, project)
                        && let Ok(mut addrs) = addrs.lock()
                    {
                        addrs[0] = fresh.addr.clone();
                        *node = fresh;
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed();
    drop(nodes);
    let fates = fates.into_inner().map_err(|e| e.to_string())?;
    let latencies = latencies.into_inner().map_err(|e| e.to_string())?;
    let mut per_minute: std::collections::BTreeMap<u64, Vec<Duration>> = Default::default();
    for (minute, latency) in latencies {
        per_minute.entry(minute).or_default().push(latency);
    }
    let pick = |sorted: &[Duration], q: f64| {
        let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted.get(index).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let mut p99s = Vec::new();
    for (minute, mut all) in per_minute {
        all.sort();
        let p99 = pick(&all, 0.99);
        p99s.push(p99);
        println!(
            "minute {minute}: {} delivered, p50={:.1}ms p99={p99:.1}ms",
            all.len(),
            pick(&all, 0.5)
        );
    }
    let count = |fate: Fate| fates.iter().filter(|(_, f)| *f == fate).count();
    // Every message the senders saw acknowledged (or refused as a replay
    // of an earlier, delivered try) must be there exactly once.
    let recorded = recorded_messages(options, home, project)?;
    let mut missing = 0;
    let mut twice = 0;
    for (i, fate) in &fates {
        let n = recorded
            .get(&format!("soak message {i}"))
            .copied()
            .unwrap_or(0);
        if matches!(fate, Fate::Delivered | Fate::Replayed) && n == 0 {
            missing += 1;
        }
        if n > 1 {
            twice += 1;
        }
    }
    let (first, last) = (p99s.first().copied(), p99s.last().copied());
    println!(
        "store={} nodes={} chats={} clients={} seconds={:.0} killed={} delivered={} replayed={} failed={} rate={:.0}/s p99 first minute={:.1}ms last minute={:.1}ms ratio={:.2} missing={missing} twice={twice}",
        options.store,
        options.nodes,
        options.chats,
        options.clients,
        elapsed.as_secs_f64(),
        killed.load(Ordering::Relaxed),
        count(Fate::Delivered),
        count(Fate::Replayed),
        count(Fate::Failed),
        count(Fate::Delivered) as f64 / elapsed.as_secs_f64(),
        first.unwrap_or(0.0),
        last.unwrap_or(0.0),
        match (first, last) {
            (Some(first), Some(last)) if first > 0.0 => last / first,
            _ => 0.0,
        },
    );
    if missing > 0 || twice > 0 {
        return Err(format!(
            "{missing} acknowledged messages are not in the store and {twice} are there more than once"
        ));
    }
    Ok(())
}

/// How many times each message is recorded in the store, read through
/// `vak session list` and `vak session show`.
fn recorded_messages(
    options: &Options,
    home: &Path,
    project: &Path,
) -> Result<std::collections::HashMap<String, usize>, String> {
    let listed = vak(
        options,
        home,
        project,
        &[
            "session",
            "list",
            "--limit",
            "10000",
            "--format",
            "json",
            "--store",
            &options.store,
        ],
    )?;
    let listed: serde_json::Value = serde_json::from_str(&listed).map_err(|e| e.to_string())?;
    let mut recorded = std::collections::HashMap::new();
    for session in listed["sessions"].as_array().into_iter().flatten() {
        let Some(id) = session["session_id"].as_str() else {
            continue;
        };
        let shown = vak(
            options,
            home,
            project,
            &[
                "session",
                "show",
                id,
                "--format",
                "json",
                "--store",
                &options.store,
            ],
        )?;
        let shown: serde_json::Value = serde_json::from_str(&shown).map_err(|e| e.to_string())?;
        for record in shown["records"].as_array().into_iter().flatten() {
            if let Some(message) = record["message"].as_str() {
                *recorded.entry(message.to_owned()).or_insert(0) += 1;
            }
        }
    }
    Ok(recorded)
}
