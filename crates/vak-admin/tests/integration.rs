//! The admin API against the real server on a loopback port: the auth
//! matrix, every error status, saves and resets reaching the files on disk,
//! gateway edits reaching `bots.json` / `allowlist.json` atomically, and the
//! copy rule over the served page.

// Helpers outside `#[test]` functions are test code too.
#![expect(
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic with its message"
)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use camino::{Utf8Path, Utf8PathBuf};
use serde_json::{Value, json};
use vak_admin::{Limits, ServeConfig, Server, TokenSource};
#[path = "integration/bodies.rs"]
mod bodies;
#[path = "integration/connections.rs"]
mod connections;
#[path = "integration/imports.rs"]
mod imports;
#[path = "integration/request_line.rs"]
mod request_line;

use vak_core::prompts::{
    AuditLog, ChangeKind, ConfigChange, LayerChange, SecurityEvent, SessionId, TrustStore,
    sha256_hex,
};

/// A copy of the fixture home and project (trusted), and a server on it.
struct Env {
    _dir: tempfile::TempDir,
    home: Utf8PathBuf,
    project: Utf8PathBuf,
    addr: SocketAddr,
    token: String,
}

fn copy_dir(from: &Utf8Path, to: &Utf8Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixture dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name().into_string().expect("utf8 name");
        let (src, dst) = (from.join(&name), to.join(&name));
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy fixture file");
        }
    }
}

fn fixtures() -> Utf8PathBuf {
    Utf8PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

impl Env {
    fn new() -> Env {
        Env::with_token(None)
    }

    fn with_token(env_token: Option<&str>) -> Env {
        Env::with(env_token, Limits::default()).0
    }

    /// An environment whose server has `limits`, and the thread serving it.
    fn with(
        env_token: Option<&str>,
        limits: Limits,
    ) -> (
        Env,
        std::thread::JoinHandle<Result<(), vak_admin::AdminError>>,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().expect("canon"))
            .expect("utf8 tempdir");
        let home = root.join("home");
        let project = root.join("myproj");
        copy_dir(&fixtures().join("home"), &home);
        copy_dir(&fixtures().join("projects/myproj"), &project);
        TrustStore::load(&home)
            .expect("trust store")
            .trust(&project)
            .expect("trust");
        let (addr, token, thread) = start(&home, &project, env_token, limits);
        let env = Env {
            _dir: dir,
            home,
            project,
            addr,
            token,
        };
        (env, thread)
    }

    fn host(&self) -> String {
        self.addr.to_string()
    }

    fn get(&self, path: &str) -> Response {
        send(
            self.addr,
            "GET",
            path,
            Some(&self.host()),
            Some(&self.token),
            None,
        )
    }

    fn put(&self, path: &str, body: &Value) -> Response {
        send(
            self.addr,
            "PUT",
            path,
            Some(&self.host()),
            Some(&self.token),
            Some(body.to_string().as_bytes()),
        )
    }

    fn post(&self, path: &str, body: &Value) -> Response {
        send(
            self.addr,
            "POST",
            path,
            Some(&self.host()),
            Some(&self.token),
            Some(body.to_string().as_bytes()),
        )
    }

    fn delete(&self, path: &str) -> Response {
        send(
            self.addr,
            "DELETE",
            path,
            Some(&self.host()),
            Some(&self.token),
            None,
        )
    }

    fn project_file(&self, name: &str) -> Utf8PathBuf {
        self.project.join(".vak/prompts").join(name)
    }

    fn gateway_file(&self, name: &str) -> Utf8PathBuf {
        self.home.join(".vak/gateway").join(name)
    }
}

/// Bind on port 0 and serve on a background thread; the thread ends with
/// the test process.
fn start(
    home: &Utf8Path,
    project: &Utf8Path,
    env_token: Option<&str>,
    limits: Limits,
) -> (
    SocketAddr,
    String,
    std::thread::JoinHandle<Result<(), vak_admin::AdminError>>,
) {
    let server = Server::bind(ServeConfig {
        store: None,
        home: home.to_owned(),
        project: project.to_owned(),
        listen: "127.0.0.1:0".to_owned(),
        env_token: env_token.map(str::to_owned),
    })
    .expect("bind");
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0, "port 0 must resolve to the real port");
    assert_eq!(server.url(), format!("http://{addr}/#/prompts"));
    let token = server.token().to_owned();
    let thread = serve_in_background(server.with_limits(limits), std::future::pending());
    (addr, token, thread)
}

/// Serve on a thread of its own, on the same single-threaded runtime
/// `Server::run` builds, until `stop` completes. (Not `run` itself: its
/// Ctrl-C handler would keep Ctrl-C from stopping the test run.)
fn serve_in_background(
    server: Server,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::thread::JoinHandle<Result<(), vak_admin::AdminError>> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(server.serve_until(stop))
    })
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The status, and a JSON error body that says something.
    fn expect_error(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        let error = self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error sentence: {}", self.body))
            .to_owned();
        assert!(error.len() > 10, "error too short to act on: {error}");
        error
    }

    fn expect_ok(&self) -> Value {
        assert_eq!(self.status, 200, "{}", self.body);
        self.json()
    }
}

fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_hex = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_hex.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&rest[start..start + size]);
        rest = &rest[start + size + 2..];
    }
    out
}

/// One HTTP/1.1 request over a fresh connection, written by hand so the
/// tests control every header (a wrong `Host`, no `Host`, odd tokens).
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    host: Option<&str>,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Response {
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if let Some(host) = host {
        head.push_str(&format!("Host: {host}\r\n"));
    }
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || matches!(method, "PUT" | "POST") {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    raw(addr, head.as_bytes(), body)
}

fn raw(addr: SocketAddr, head: &[u8], body: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    stream.write_all(head).expect("write head");
    // The server may answer (413) before reading a body it refuses.
    let _ = stream.write_all(body);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {}", String::from_utf8_lossy(&bytes)));
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = bytes[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn block<'a>(layers: &'a Value, name: &str) -> &'a Value {
    layers["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .find(|b| b["block"] == name)
        .unwrap_or_else(|| panic!("no block {name}"))
}

fn effective<'a>(prompt: &'a Value, name: &str) -> &'a Value {
    prompt["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .find(|b| b["block"] == name)
        .unwrap_or_else(|| panic!("no block {name}"))
}

// ---- auth ----------------------------------------------------------------

/// Every API route, with a method it answers.
const API_ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/prompt"),
    ("GET", "/api/layers?scope=project"),
    ("PUT", "/api/layers/identity?scope=project"),
    ("DELETE", "/api/layers/identity?scope=project&if_digest="),
    ("POST", "/api/tokens"),
    ("GET", "/api/permissions"),
    ("GET", "/api/rules"),
    ("GET", "/api/audit"),
    ("GET", "/api/gateway"),
    ("PUT", "/api/gateway/bots/helpdesk/identity"),
    ("DELETE", "/api/gateway/bots/helpdesk/identity?if_digest="),
    ("PUT", "/api/gateway/chats/helpdesk/42/identity"),
    (
        "DELETE",
        "/api/gateway/chats/helpdesk/42/identity?if_digest=",
    ),
    ("GET", "/api/no-such-route"),
];

#[test]
fn auth_matrix_no_token_wrong_token_right_token_wrong_host() {
    let env = Env::new();
    let host = env.host();
    let body = json!({"text": "x", "if_digest": ""}).to_string();
    for (method, path) in API_ROUTES {
        let b = matches!(*method, "PUT" | "POST").then_some(body.as_bytes());
        // No token.
        let r = send(env.addr, method, path, Some(&host), None, b);
        let error = r.expect_error(401);
        assert!(error.contains("Authorization: Bearer"), "{error}");
        assert!(
            error.contains("admin.token"),
            "names where the token is: {error}"
        );
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        // Wrong token, including a prefix and an extension of the right one.
        for wrong in [
            "not-the-token-at-all",
            &env.token[..env.token.len() - 1],
            &format!("{}0", env.token),
        ] {
            let r = send(env.addr, method, path, Some(&host), Some(wrong), b);
            assert!(r.expect_error(401).contains("wrong"), "{method} {path}");
        }
        // Right token but the wrong Host: refused before auth matters.
        for bad_host in ["evil.example:80", "attacker.test", "127.0.0.1:1"] {
            let r = send(env.addr, method, path, Some(bad_host), Some(&env.token), b);
            let error = r.expect_error(421);
            assert!(error.contains(bad_host), "{error}");
            assert!(error.contains(&host), "says where to go instead: {error}");
        }
    }
    // Right token, right Host: served.
    let r = env.get("/api/prompt");
    assert_eq!(r.status, 200, "{}", r.body);
    // `localhost:PORT` is the same loopback server.
    let localhost = format!("localhost:{}", env.addr.port());
    let r = send(
        env.addr,
        "GET",
        "/api/prompt",
        Some(&localhost),
        Some(&env.token),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // The scheme is case-insensitive; the token is not.
    let r = raw(
        env.addr,
        format!(
            "GET /api/prompt HTTP/1.1\r\nHost: {host}\r\nAuthorization: bearer {}\r\nConnection: close\r\n\r\n",
            env.token
        )
        .as_bytes(),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = send(
        env.addr,
        "GET",
        "/api/prompt",
        Some(&host),
        Some(&env.token.to_uppercase()),
        None,
    );
    r.expect_error(401);
}

#[test]
fn the_page_is_served_without_a_token_but_only_to_our_host() {
    let env = Env::new();
    for path in ["/", "/app.js", "/app.css"] {
        let r = send(env.addr, "GET", path, Some(&env.host()), None, None);
        assert_eq!(r.status, 200, "{path}");
        let csp = r.header("content-security-policy").expect("CSP");
        assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        let r = send(
            env.addr,
            "GET",
            path,
            Some("rebind.example:8080"),
            None,
            None,
        );
        r.expect_error(421);
    }
    // No Host at all (HTTP/1.0 style) is refused too.
    let r = raw(env.addr, b"GET / HTTP/1.0\r\n\r\n", b"");
    assert!(r.expect_error(400).contains("no Host header"), "{}", r.body);
}

#[test]
fn token_file_is_generated_0600_and_reused_and_env_wins() {
    let env = Env::new();
    let path = vak_admin::token_path(&env.home);
    assert_eq!(
        std::fs::read_to_string(&path).expect("token file").trim(),
        env.token
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // A second server on the same home reuses it.
    let (addr, token, _thread) = start(&env.home, &env.project, None, Limits::default());
    assert_eq!(token, env.token);
    let r = send(
        addr,
        "GET",
        "/api/audit",
        Some(&addr.to_string()),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // VAK_ADMIN_TOKEN (passed in) wins over the file.
    let server = Server::bind(ServeConfig {
        store: None,
        home: env.home.clone(),
        project: env.project.clone(),
        listen: "127.0.0.1:0".to_owned(),
        env_token: Some("an-operator-chosen-token-123".to_owned()),
    })
    .expect("bind");
    assert_eq!(server.token_source(), &TokenSource::Env);
    let addr = server.local_addr();
    serve_in_background(server, std::future::pending());
    let host = addr.to_string();
    let r = send(
        addr,
        "GET",
        "/api/audit",
        Some(&host),
        Some(&env.token),
        None,
    );
    r.expect_error(401);
    let r = send(
        addr,
        "GET",
        "/api/audit",
        Some(&host),
        Some("an-operator-chosen-token-123"),
        None,
    );
    assert_eq!(r.status, 200);
}

#[test]
fn bad_listen_addresses_are_refused_with_a_sentence() {
    let env = Env::new();
    let error = Server::bind(ServeConfig {
        store: None,
        home: env.home.clone(),
        project: env.project.clone(),
        listen: "localhost".to_owned(),
        env_token: None,
    })
    .expect_err("no port");
    assert!(error.to_string().contains("IP:PORT"), "{error}");
}

// ---- error statuses -------------------------------------------------------

#[test]
fn every_error_status_has_a_json_sentence() {
    let env = Env::new();
    // 400: names validated before they touch a path.
    for path in [
        "/api/layers?scope=project&agent=..%2F..%2Fetc",
        "/api/layers?scope=project&agent=a%2Fb",
        "/api/layers?scope=project&surface=..",
        "/api/layers?scope=nowhere",
        "/api/layers",
        "/api/layers?scope=shared&surface=cli&agent=reviewer",
        "/api/prompt?bot=..",
        "/api/prompt?chat=42",
        "/api/prompt?surface=tv",
        "/api/prompt?untrusted=maybe",
    ] {
        env.get(path).expect_error(400);
    }
    // A query byte that is not UTF-8 is refused, not decoded to U+FFFD and
    // taken for another name.
    for path in [
        "/api/layers?scope=project&dir=services%ff",
        "/api/prompt?bot=%c3",
    ] {
        let error = env.get(path).expect_error(400);
        assert!(error.contains("UTF-8"), "{path}: {error}");
    }
    // Two credentials: refused before either is judged, the right one too.
    let r = raw(
        env.addr,
        format!(
            "GET /api/prompt HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAuthorization: Bearer wrong\r\nConnection: close\r\n\r\n",
            env.host(),
            env.token
        )
        .as_bytes(),
        b"",
    );
    assert!(
        r.expect_error(400).contains("2 Authorization headers"),
        "{}",
        r.body
    );
    for (path, body) in [
        (
            "/api/layers/capability-contract?scope=project",
            json!({"text": "x", "if_digest": ""}),
        ),
        (
            "/api/layers/..%2Fidentity?scope=project",
            json!({"text": "x", "if_digest": ""}),
        ),
        ("/api/layers/identity?scope=project", json!({"text": "x"})),
        (
            "/api/layers/identity?scope=project",
            json!({"words": "x", "if_digest": ""}),
        ),
        (
            "/api/layers/identity?scope=project",
            json!({"text": "x", "if_digest": "not-a-digest"}),
        ),
        (
            "/api/gateway/bots/..%2F..%2Fx/identity",
            json!({"text": "x", "if_digest": ""}),
        ),
        (
            "/api/gateway/chats/helpdesk/a%20b/identity",
            json!({"text": "x", "if_digest": ""}),
        ),
        (
            "/api/layers/%FF%FE?scope=project",
            json!({"text": "x", "if_digest": ""}),
        ),
        (
            "/api/gateway/bots/%FF/identity",
            json!({"text": "x", "if_digest": ""}),
        ),
        (
            "/api/gateway/bots/helpdesk/mcp",
            json!({"text": "x", "if_digest": ""}),
        ),
    ] {
        let error = env.put(path, &body).expect_error(400);
        assert!(!error.is_empty(), "{path}");
    }
    let r = send(
        env.addr,
        "PUT",
        "/api/layers/identity?scope=project",
        Some(&env.host()),
        Some(&env.token),
        Some(b"{not json"),
    );
    assert!(r.expect_error(400).contains("JSON"));
    env.delete("/api/layers/identity?scope=project")
        .expect_error(400);
    env.post(
        "/api/tokens",
        &json!({"block": "skills", "text": "x", "scope": "shared"}),
    )
    .expect_error(400);
    // The live count says what the save would then say.
    let count = env
        .post(
            "/api/tokens",
            &json!({"block": "guardrails", "text": "- a\u{200f}b\n", "scope": "shared"}),
        )
        .expect_ok();
    assert_eq!(count["refused"], true, "{count}");
    assert!(
        count["forbidden"].as_str().unwrap().starts_with("U+200F"),
        "{count}"
    );
    assert!(
        !env.project_file("../../etc").exists(),
        "nothing was created for a refused name"
    );

    // 404 and 405.
    env.get("/api/nope").expect_error(404);
    let r = send(
        env.addr,
        "PATCH",
        "/api/prompt",
        Some(&env.host()),
        Some(&env.token),
        None,
    );
    r.expect_error(405);

    // 409: the file changed since the digest the editor started from.
    let layers = env.get("/api/layers?scope=project").expect_ok();
    let digest = block(&layers, "identity")["digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    std::fs::write(
        env.project_file("identity.md"),
        "Someone else's identity.\n",
    )
    .expect("write");
    let r = env.put(
        "/api/layers/identity?scope=project",
        &json!({"text": "Mine.", "if_digest": digest}),
    );
    let error = r.expect_error(409);
    assert!(error.contains("changed since you read it"), "{error}");
    assert_eq!(
        r.json()["current_digest"],
        sha256_hex("Someone else's identity.\n")
    );
    assert_eq!(
        std::fs::read_to_string(env.project_file("identity.md")).expect("read"),
        "Someone else's identity.\n",
        "a stale save never overwrites"
    );
    // An inherited block saved with "" conflicts once someone created it.
    env.put(
        "/api/layers/identity?scope=project",
        &json!({"text": "Mine.", "if_digest": ""}),
    )
    .expect_error(409);
    env.delete(&format!(
        "/api/layers/identity?scope=project&if_digest={digest}"
    ))
    .expect_error(409);

    // 413: a body over the limit (refused from its Content-Length) and a
    // text over the per-file limit inside an acceptable body.
    let head = format!(
        "PUT /api/layers/identity?scope=project HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        env.host(),
        env.token,
        vak_admin::MAX_BODY_BYTES + 1
    );
    let r = raw(
        env.addr,
        head.as_bytes(),
        &vec![b' '; vak_admin::MAX_BODY_BYTES + 1],
    );
    assert!(r.expect_error(413).contains("limit"));
    let big = "a".repeat(300 * 1024);
    let r = env.put(
        "/api/layers/identity?scope=project",
        &json!({"text": big, "if_digest": ""}),
    );
    assert!(r.expect_error(413).contains("262144"));
    env.post(
        "/api/tokens",
        &json!({"scope": "project", "block": "identity", "text": big}),
    )
    .expect_error(413);

    // 422: over the cap, with the offending layers named and counted, and
    // the file left as it was.
    let before = std::fs::read_to_string(env.project_file("guardrails.md")).expect("read");
    let layers = env.get("/api/layers?scope=project").expect_ok();
    let digest = block(&layers, "guardrails")["digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    let huge: String = (0..400)
        .map(|i| format!("- Before touching service {i}, read its runbook first.\n"))
        .collect();
    let r = env.put(
        "/api/layers/guardrails?scope=project",
        &json!({"text": format!("{before}{huge}"), "if_digest": digest}),
    );
    let error = r.expect_error(422);
    assert!(error.contains("over the cap"), "{error}");
    assert!(error.contains("guardrails.md"), "{error}");
    let body = r.json();
    assert_eq!(body["tokens"]["cap"], 1500);
    assert!(body["tokens"]["prefix"].as_u64().expect("prefix") > 1500);
    assert!(body["over_by"].as_u64().expect("over_by") > 0);
    let offenders = body["offenders"].as_array().expect("offenders");
    assert_eq!(
        offenders[0]["layer"], "project",
        "largest first: {offenders:?}"
    );
    assert!(offenders[0]["tokens"].as_u64().expect("tokens") > 1000);
    assert!(
        offenders[0]["sources"]
            .as_array()
            .expect("sources")
            .iter()
            .any(|s| s["source"]
                .as_str()
                .is_some_and(|p| p.ends_with("myproj/.vak/prompts/guardrails.md")))
    );
    assert!(offenders.iter().any(|o| o["layer"] == "shared"));
    assert!(
        offenders.iter().all(|o| o["layer"] != "seed"),
        "only user-owned layers are named"
    );
    assert_eq!(
        std::fs::read_to_string(env.project_file("guardrails.md")).expect("read"),
        before
    );
}

// ---- saves and resets -----------------------------------------------------

#[test]
fn saves_and_resets_reach_the_files_on_disk() {
    let env = Env::new();
    let layers = env.get("/api/layers?scope=project").expect_ok();
    assert_eq!(layers["trust"], "trusted");
    let rules = block(&layers, "operating-rules");
    assert_eq!(rules["state"], "inherited");
    assert_eq!(rules["digest"], "");
    assert_eq!(rules["effective"]["summary"], "from Shared");
    assert_eq!(block(&layers, "identity")["state"], "overridden");
    let prompt = env.get("/api/prompt").expect_ok();
    assert_eq!(
        effective(&prompt, "operating-rules")["summary"],
        "from Shared"
    );
    assert_eq!(
        effective(&prompt, "capability-contract")["summary"],
        "locked"
    );
    assert_eq!(
        effective(&prompt, "guardrails")["summary"],
        "seed + Shared + 2"
    );
    let tokens_before = prompt["tokens"]["prefix"].as_u64().expect("tokens");

    // Save: the file appears with exactly the text.
    let text = "- Reply in British English.\n";
    let saved = env
        .put(
            "/api/layers/operating-rules?scope=project",
            &json!({"text": text, "if_digest": ""}),
        )
        .expect_ok();
    let path = env.project_file("operating-rules.md");
    assert_eq!(std::fs::read_to_string(&path).expect("saved file"), text);
    assert_eq!(saved["digest"], sha256_hex(text));
    assert_eq!(saved["path"], path.as_str());
    assert_eq!(saved["previous"], Value::Null);
    let layers = env.get("/api/layers?scope=project").expect_ok();
    assert_eq!(block(&layers, "operating-rules")["state"], "overridden");
    let prompt = env.get("/api/prompt").expect_ok();
    let rules = effective(&prompt, "operating-rules");
    assert_eq!(rules["summary"], "from This project");
    assert_eq!(rules["text"], "- Reply in British English.");
    assert_ne!(prompt["tokens"]["prefix"].as_u64(), Some(tokens_before));

    // An empty file is a real state.
    env.put(
        "/api/layers/operating-rules?scope=project",
        &json!({"text": "", "if_digest": sha256_hex(text)}),
    )
    .expect_ok();
    let layers = env.get("/api/layers?scope=project").expect_ok();
    assert_eq!(block(&layers, "operating-rules")["state"], "empty");

    // Reset: the file goes, the block inherits again.
    let reset = env
        .delete(&format!(
            "/api/layers/operating-rules?scope=project&if_digest={}",
            sha256_hex("")
        ))
        .expect_ok();
    assert_eq!(reset["removed"], sha256_hex(""));
    assert!(!path.exists());
    let prompt = env.get("/api/prompt").expect_ok();
    assert_eq!(
        effective(&prompt, "operating-rules")["summary"],
        "from Shared"
    );
    assert_eq!(prompt["tokens"]["prefix"].as_u64(), Some(tokens_before));

    // A role with no directory yet: its layer lists as inherited, its
    // prompt is a 404 that says how to create it.
    let layers = env
        .get("/api/layers?scope=project&agent=release")
        .expect_ok();
    assert!(
        layers["blocks"]
            .as_array()
            .expect("blocks")
            .iter()
            .all(|b| b["state"] == "inherited")
    );
    let error = env.get("/api/prompt?agent=release").expect_error(404);
    assert!(
        error.contains("agent role `release` is not defined"),
        "{error}"
    );

    // Sub-layers: a shared surface note and a new agent role.
    env.put(
        "/api/layers/surface-note?scope=shared&surface=desktop",
        &json!({"text": "The desktop app renders tables.", "if_digest": ""}),
    )
    .expect_ok();
    assert!(
        env.home
            .join(".vak/prompts/surface/desktop/surface-note.md")
            .is_file()
    );
    let prompt = env.get("/api/prompt?surface=desktop").expect_ok();
    assert!(
        effective(&prompt, "surface-note")["text"]
            .as_str()
            .expect("text")
            .contains("renders tables")
    );
    env.put(
        "/api/layers/identity?scope=project&agent=release",
        &json!({"text": "As the release manager, read the changelog first.", "if_digest": ""}),
    )
    .expect_ok();
    assert!(env.project_file("agents/release/identity.md").is_file());
    let layers = env
        .get("/api/layers?scope=project&agent=release")
        .expect_ok();
    assert_eq!(block(&layers, "identity")["lands_in"], "agent-instructions");
    assert!(
        layers["roles"]
            .as_array()
            .expect("roles")
            .iter()
            .any(|r| r == "release")
    );
    let prompt = env.get("/api/prompt?agent=release").expect_ok();
    assert!(
        effective(&prompt, "agent-instructions")["text"]
            .as_str()
            .expect("text")
            .contains("release manager")
    );
}

#[test]
fn an_untrusted_project_save_is_kept_and_says_it_does_not_apply() {
    let env = Env::new();
    TrustStore::load(&env.home)
        .expect("store")
        .untrust(&env.project)
        .expect("untrust");
    let layers = env.get("/api/layers?scope=project").expect_ok();
    assert_eq!(layers["trust"], "untrusted");
    assert!(
        block(&layers, "identity")["not_applied"]
            .as_str()
            .expect("note")
            .contains("untrusted")
    );
    assert_eq!(block(&layers, "guardrails")["not_applied"], Value::Null);
    let saved = env
        .put(
            "/api/layers/surface-note?scope=project",
            &json!({"text": "Caution is off.", "if_digest": sha256_hex(std::fs::read(env.project_file("surface-note.md")).expect("read"))}),
        )
        .expect_ok();
    assert!(
        saved["not_applied"]
            .as_str()
            .expect("note")
            .contains("will not apply")
    );
    let prompt = env.get("/api/prompt").expect_ok();
    assert!(
        !prompt["prefix"]
            .as_str()
            .expect("prefix")
            .contains("Caution is off")
    );
}

#[test]
fn a_huge_layer_file_is_its_cards_problem_and_is_never_read_whole() {
    let env = Env::new();
    TrustStore::load(&env.home)
        .expect("store")
        .untrust(&env.project)
        .expect("untrust");
    // A sparse 1 GiB guardrails file: reading it whole would take seconds
    // and a gigabyte; the listing must answer at once and still show the
    // other blocks.
    let file = std::fs::File::create(env.project_file("guardrails.md")).expect("create");
    file.set_len(1 << 30).expect("grow");
    // Not read whole: the card says it is over the size limit.
    let layers = env.get("/api/layers?scope=project").expect_ok();
    let guardrails = block(&layers, "guardrails");
    assert_eq!(guardrails["state"], "unreadable");
    let problem = guardrails["problem"].as_str().expect("problem");
    assert!(problem.contains("guardrails.md"), "{problem}");
    assert!(problem.contains("1073741824 bytes is over"), "{problem}");
    assert!(problem.contains("nothing was read"), "{problem}");
    assert_eq!(block(&layers, "identity")["state"], "overridden");
    // The prompt still resolves without it.
    let prompt = env.get("/api/prompt").expect_ok();
    assert!(
        prompt["prefix"]
            .as_str()
            .expect("prefix")
            .contains("## Guardrails")
    );
}

#[test]
fn live_counts_use_the_real_tokenizer_and_match_the_effective_prompt() {
    let env = Env::new();
    let prompt = env.get("/api/prompt").expect_ok();
    let now = prompt["tokens"]["prefix"].as_u64().expect("prefix");
    let current = std::fs::read_to_string(env.project_file("identity.md")).expect("read");
    let same = env
        .post(
            "/api/tokens",
            &json!({"scope": "project", "block": "identity", "text": current}),
        )
        .expect_ok();
    assert_eq!(same["prefix_tokens"].as_u64(), Some(now));
    assert_eq!(same["prefix_tokens_before"].as_u64(), Some(now));
    assert_eq!(same["cap"], 1500);
    assert_eq!(same["model"], "gpt-4o");
    assert_eq!(same["context_window"], 128000);
    let longer = env
        .post(
            "/api/tokens",
            &json!({"scope": "project", "block": "identity", "text": format!("{current} Always cite the ledger module by path.")}),
        )
        .expect_ok();
    assert!(longer["prefix_tokens"].as_u64() > Some(now));
    assert!(longer["text_tokens"].as_u64() > same["text_tokens"].as_u64());
    assert_eq!(longer["refused"], false);
    // Nothing was written by counting.
    assert_eq!(
        std::fs::read_to_string(env.project_file("identity.md")).expect("read"),
        current
    );
    let gateway = env
        .post(
            "/api/tokens",
            &json!({"bot": "helpdesk", "chat": "42", "block": "surface-note", "text": "Short."}),
        )
        .expect_ok();
    assert!(gateway["prefix_tokens"].as_u64().expect("tokens") > 0);
}

// ---- gateway tiers --------------------------------------------------------

fn gateway_prompt<'a>(list: &'a Value, bot: &str, chat: Option<&str>, name: &str) -> &'a Value {
    let bot = list["bots"]
        .as_array()
        .expect("bots")
        .iter()
        .find(|b| b["bot"] == bot)
        .expect("bot");
    let prompts = match chat {
        None => &bot["prompts"],
        Some(chat) => &bot["chats"]
            .as_array()
            .expect("chats")
            .iter()
            .find(|c| c["chat"] == chat)
            .expect("chat")["prompts"],
    };
    prompts
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["block"] == name)
        .expect("block")
}

fn read_json(path: &Utf8Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("valid JSON")
}

fn no_temp_files(dir: &Utf8Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == "bots.json" || n == "allowlist.json" || n == "bindings.json"),
        "stray files: {names:?}"
    );
}

#[test]
fn gateway_edits_reach_bots_and_allowlist_atomically_keeping_other_keys() {
    let env = Env::new();
    // Other keys and other bots that must survive every edit.
    let bots_path = env.gateway_file("bots.json");
    let mut bots = read_json(&bots_path);
    bots["helpdesk"]["webhook"] = json!({"url": "http://127.0.0.1:9/hook", "retries": 3});
    bots["deploybot"] = json!({"display_name": "Deploy", "owner": "platform"});
    std::fs::write(
        &bots_path,
        serde_json::to_string_pretty(&bots).expect("json"),
    )
    .expect("write");

    let list = env.get("/api/gateway").expect_ok();
    let identity = gateway_prompt(&list, "helpdesk", None, "identity");
    assert_eq!(identity["state"], "overridden");
    assert_eq!(identity["key"], "bots.json#/helpdesk/prompts/identity");
    assert_eq!(
        gateway_prompt(&list, "helpdesk", None, "operating-rules")["state"],
        "inherited"
    );
    assert_eq!(
        gateway_prompt(&list, "helpdesk", None, "operating-rules")["effective"]["summary"],
        "from Shared",
        "the bot tier shows what it inherits"
    );
    assert_eq!(
        gateway_prompt(&list, "helpdesk", Some("42"), "guardrails")["state"],
        "overridden"
    );
    let digest = identity["digest"].as_str().expect("digest").to_owned();

    // Bot tier.
    let text = "You are the Helpdesk bot. You answer in three sentences at most.";
    let saved = env
        .put(
            "/api/gateway/bots/helpdesk/identity",
            &json!({"text": text, "if_digest": digest}),
        )
        .expect_ok();
    assert_eq!(saved["key"], "bots.json#/helpdesk/prompts/identity");
    let on_disk = read_json(&bots_path);
    assert_eq!(on_disk["helpdesk"]["prompts"]["identity"], text);
    assert_eq!(
        on_disk["helpdesk"]["prompts"]["guardrails"],
        bots["helpdesk"]["prompts"]["guardrails"]
    );
    assert_eq!(on_disk["helpdesk"]["display_name"], "Helpdesk");
    assert_eq!(on_disk["helpdesk"]["webhook"], bots["helpdesk"]["webhook"]);
    assert_eq!(on_disk["deploybot"], bots["deploybot"]);
    no_temp_files(&env.home.join(".vak/gateway"));
    let prompt = env.get("/api/prompt?surface=chat&bot=helpdesk").expect_ok();
    let identity = effective(&prompt, "identity");
    assert_eq!(identity["text"], text);
    assert_eq!(identity["layers"], json!(["bot"]));
    // The edit is a version of the key, and both values are kept.
    let versions = vak_core::history::VersionLog::new(&env.home)
        .for_target("bots.json#/helpdesk/prompts/identity")
        .expect("version log")
        .records;
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0].before.as_deref(), Some(digest.as_str()));
    assert_eq!(
        versions[0].after.as_deref(),
        Some(sha256_hex(text).as_str())
    );
    assert!(versions[0].who.starts_with("admin-token:"));
    for d in [&digest, &sha256_hex(text)] {
        assert!(
            vak_core::history::kept_text(&vak_core::history::FileHistory::new(&env.home), d)
                .expect("object")
                .is_some()
        );
    }

    // A stale digest is refused and the file is untouched.
    let before = std::fs::read_to_string(&bots_path).expect("read");
    let r = env.put(
        "/api/gateway/bots/helpdesk/identity",
        &json!({"text": "Other.", "if_digest": digest}),
    );
    assert!(
        r.expect_error(409)
            .contains("bots.json#/helpdesk/prompts/identity")
    );
    assert_eq!(std::fs::read_to_string(&bots_path).expect("read"), before);

    // A new key on a bot that had no prompts object.
    env.put(
        "/api/gateway/bots/deploybot/operating-rules",
        &json!({"text": "Post the deploy plan before running it.", "if_digest": ""}),
    )
    .expect_ok();
    let on_disk = read_json(&bots_path);
    assert_eq!(on_disk["deploybot"]["owner"], "platform");
    assert_eq!(
        on_disk["deploybot"]["prompts"]["operating-rules"],
        "Post the deploy plan before running it."
    );

    // Chat tier.
    let allow_path = env.gateway_file("allowlist.json");
    let allow_before = read_json(&allow_path);
    let list = env.get("/api/gateway").expect_ok();
    let note = gateway_prompt(&list, "helpdesk", Some("42"), "surface-note");
    let saved = env
        .put(
            "/api/gateway/chats/helpdesk/42/surface-note",
            &json!({"text": "Keep answers to two lines.", "if_digest": note["digest"]}),
        )
        .expect_ok();
    assert_eq!(
        saved["key"],
        "allowlist.json#/helpdesk/42/prompts/surface-note"
    );
    let on_disk = read_json(&allow_path);
    assert_eq!(
        on_disk["helpdesk"]["42"]["prompts"]["surface-note"],
        "Keep answers to two lines."
    );
    assert_eq!(
        on_disk["helpdesk"]["42"]["name"],
        allow_before["helpdesk"]["42"]["name"]
    );
    assert_eq!(
        on_disk["helpdesk"]["42"]["prompts"]["guardrails"],
        allow_before["helpdesk"]["42"]["prompts"]["guardrails"]
    );
    let prompt = env
        .get("/api/prompt?surface=chat&bot=helpdesk&chat=42")
        .expect_ok();
    assert!(
        effective(&prompt, "surface-note")["text"]
            .as_str()
            .expect("text")
            .contains("two lines")
    );

    // Reset removes only that key; an emptied prompts object goes too.
    env.delete(&format!(
        "/api/gateway/chats/helpdesk/42/surface-note?if_digest={}",
        sha256_hex("Keep answers to two lines.")
    ))
    .expect_ok();
    let on_disk = read_json(&allow_path);
    assert!(
        on_disk["helpdesk"]["42"]["prompts"]
            .get("surface-note")
            .is_none()
    );
    assert!(
        on_disk["helpdesk"]["42"]["prompts"]
            .get("guardrails")
            .is_some()
    );
    env.delete(&format!(
        "/api/gateway/bots/deploybot/operating-rules?if_digest={}",
        sha256_hex("Post the deploy plan before running it.")
    ))
    .expect_ok();
    let on_disk = read_json(&bots_path);
    assert!(on_disk["deploybot"].get("prompts").is_none());
    assert_eq!(on_disk["deploybot"]["owner"], "platform");
    no_temp_files(&env.home.join(".vak/gateway"));

    // Over the cap at the bot tier: 422, file unchanged.
    let before = std::fs::read_to_string(&bots_path).expect("read");
    let huge: String = (0..400)
        .map(|i| format!("- Never mention ticket {i}.\n"))
        .collect();
    let r = env.put(
        "/api/gateway/bots/helpdesk/guardrails",
        &json!({"text": huge, "if_digest": sha256_hex("- Never paste customer data into the chat.")}),
    );
    let error = r.expect_error(422);
    assert!(
        error.contains("bots.json#/helpdesk/prompts/guardrails"),
        "{error}"
    );
    assert!(
        r.json()["offenders"]
            .as_array()
            .expect("offenders")
            .iter()
            .any(|o| o["layer"] == "bot")
    );
    assert_eq!(std::fs::read_to_string(&bots_path).expect("read"), before);
}

#[test]
fn a_bot_edit_is_budgeted_on_every_chat_of_the_bot() {
    let env = Env::new();
    let bots_path = env.gateway_file("bots.json");
    let allow_path = env.gateway_file("allowlist.json");
    let original_allowlist = std::fs::read_to_string(&allow_path).expect("read");
    // Chat 42 keeps a long list of its own, which its chain adds to the
    // bot's: 1,223 of the 1,500 tokens.
    let mut allow: Value = serde_json::from_str(&original_allowlist).expect("json");
    allow["helpdesk"]["42"]["prompts"]["guardrails"] = json!(
        (0..70)
            .map(|i| format!("- Never mention chat ticket {i}.\n"))
            .collect::<String>()
    );
    std::fs::write(&allow_path, allow.to_string()).expect("write");
    // The bot's own chain stays well under the cap with it; chat 42's
    // would not.
    let bot_text: String = (0..60)
        .map(|i| format!("- Never mention bot ticket {i}.\n"))
        .collect();
    let save = || {
        env.put(
            "/api/gateway/bots/helpdesk/guardrails",
            &json!({"text": bot_text, "if_digest": sha256_hex("- Never paste customer data into the chat.")}),
        )
    };
    let before = std::fs::read_to_string(&bots_path).expect("read");
    let r = save();
    let error = r.expect_error(422);
    assert!(error.contains("chat `42`"), "{error}");
    assert!(
        error.contains("bots.json#/helpdesk/prompts/guardrails"),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&bots_path).expect("read"), before);
    // Without the chat's long list the same edit fits every chain.
    std::fs::write(&allow_path, &original_allowlist).expect("write");
    let saved = save().expect_ok();
    assert_eq!(saved["changed"], true);
    assert!(saved["unbudgeted"].is_null(), "{saved}");
}

#[test]
fn a_bot_edit_is_budgeted_on_every_chat_of_the_bot_with_every_role() {
    let env = Env::new();
    let bots_path = env.gateway_file("bots.json");
    let allow_path = env.gateway_file("allowlist.json");
    let role_path = env.home.join(".vak/prompts/agents/reviewer/guardrails.md");
    let original_role = std::fs::read_to_string(&role_path).expect("read");
    // About 280 tokens each, so any two of the bot's text, chat 42's list
    // and the reviewer role's list fit the cap beside the rest of the
    // fixture's prompt, and all three do not: only chat 42 with the role
    // goes over.
    let bullets = |who: &str| -> String {
        (0..35)
            .map(|i| format!("- Never mention {who} ticket {i}.\n"))
            .collect()
    };
    let mut allow: Value =
        serde_json::from_str(&std::fs::read_to_string(&allow_path).expect("read")).expect("json");
    allow["helpdesk"]["42"]["prompts"]["guardrails"] = json!(bullets("chat"));
    std::fs::write(&allow_path, allow.to_string()).expect("write");
    std::fs::write(&role_path, format!("{original_role}\n{}", bullets("role"))).expect("write");
    let bot_text = bullets("bot");
    let save = || {
        env.put(
            "/api/gateway/bots/helpdesk/guardrails",
            &json!({"text": bot_text, "if_digest": sha256_hex("- Never paste customer data into the chat.")}),
        )
    };
    let before = std::fs::read_to_string(&bots_path).expect("read");
    let error = save().expect_error(422);
    assert!(error.contains("chat `42`"), "{error}");
    assert!(error.contains("agent `reviewer`"), "{error}");
    assert_eq!(std::fs::read_to_string(&bots_path).expect("read"), before);

    // Without the role's long list the same edit is saved, and each chain
    // it was checked on before (chat 42 with no role, the bot with the
    // role) is under the cap with it.
    std::fs::write(&role_path, &original_role).expect("write");
    let saved = save().expect_ok();
    assert_eq!(saved["changed"], true);
    std::fs::write(&role_path, format!("{original_role}\n{}", bullets("role"))).expect("write");
    for chain in ["bot=helpdesk&chat=42", "bot=helpdesk&agent=reviewer"] {
        let prompt = env
            .get(&format!("/api/prompt?surface=chat&{chain}"))
            .expect_ok();
        let (tokens, cap) = (&prompt["budget"]["prefix_tokens"], &prompt["budget"]["cap"]);
        assert!(tokens.as_u64() < cap.as_u64(), "{chain}: {tokens} of {cap}");
    }
    let both = env
        .get("/api/prompt?surface=chat&bot=helpdesk&chat=42&agent=reviewer")
        .expect_ok();
    let (tokens, cap) = (&both["budget"]["prefix_tokens"], &both["budget"]["cap"]);
    assert!(tokens.as_u64() > cap.as_u64(), "{tokens} of {cap}");
}

#[test]
fn a_chat_keys_history_diff_and_revert_and_their_refusals() {
    let env = Env::new();
    let list = env.get("/api/gateway").expect_ok();
    let before = gateway_prompt(&list, "helpdesk", Some("42"), "guardrails");
    let old = before["text"].as_str().expect("text").to_owned();
    let base = "/api/gateway/chats/helpdesk/42/guardrails";
    let empty = env.get(&format!("{base}/history")).expect_ok();
    assert_eq!(empty["versions"], json!([]));
    assert_eq!(
        empty["key"],
        "allowlist.json#/helpdesk/42/prompts/guardrails"
    );
    let new = "- Answer in the ops channel only.";
    env.put(base, &json!({"text": new, "if_digest": sha256_hex(&old)}))
        .expect_ok();
    let history = env.get(&format!("{base}/history")).expect_ok();
    let versions = history["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1, "{history}");
    assert_eq!(versions[0]["before"], sha256_hex(&old));
    assert_eq!(history["current_digest"], sha256_hex(new));
    let diff = env
        .get(&format!(
            "{base}/history/diff?from={}&to={}",
            sha256_hex(&old),
            sha256_hex(new)
        ))
        .expect_ok();
    assert!(
        diff["diff"]
            .as_str()
            .expect("diff")
            .contains("+- Answer in the ops channel only."),
        "{diff}"
    );
    // A stale digest: 409, nothing written.
    env.post(
        &format!("{base}/history/revert"),
        &json!({"to": sha256_hex(&old), "if_digest": sha256_hex(&old)}),
    )
    .expect_error(409);
    // A version never kept: 404.
    env.post(
        &format!("{base}/history/revert"),
        &json!({"to": sha256_hex("never"), "if_digest": sha256_hex(new)}),
    )
    .expect_error(404);
    // Not a digest: 400.
    env.post(
        &format!("{base}/history/revert"),
        &json!({"to": "../../etc/passwd", "if_digest": sha256_hex(new)}),
    )
    .expect_error(400);
    let reverted = env
        .post(
            &format!("{base}/history/revert"),
            &json!({"to": sha256_hex(&old), "if_digest": sha256_hex(new)}),
        )
        .expect_ok();
    assert_eq!(reverted["digest"], sha256_hex(&old));
    let allow = read_json(&env.gateway_file("allowlist.json"));
    assert_eq!(
        allow["helpdesk"]["42"]["prompts"]["guardrails"],
        old.as_str()
    );
    let history = env.get(&format!("{base}/history")).expect_ok();
    assert_eq!(history["versions"][1]["action"], "revert");
    // A hostile name never reaches a path.
    env.get("/api/gateway/chats/helpdesk/..%2F..%2Fx/guardrails/history")
        .expect_error(400);
}

#[test]
fn a_malformed_gateway_file_is_reported_not_overwritten() {
    let env = Env::new();
    let bots_path = env.gateway_file("bots.json");
    std::fs::write(&bots_path, "{ not json").expect("write");
    let error = env.get("/api/gateway").expect_error(409);
    assert!(
        error.contains("bots.json") && error.contains("not valid JSON"),
        "{error}"
    );
    env.put(
        "/api/gateway/bots/helpdesk/identity",
        &json!({"text": "x", "if_digest": ""}),
    )
    .expect_error(409);
    assert_eq!(
        std::fs::read_to_string(&bots_path).expect("read"),
        "{ not json"
    );
}

// ---- scoped rules -----------------------------------------------------------

/// `GET /api/rules` lists every rule with its globs; `?path=` says which
/// match and what the tail would carry; a bad path is a 400 naming it; a
/// bad rule file is listed as left out, not fatal.
#[test]
fn rules_are_listed_with_their_globs_and_matched_per_path() {
    let env = Env::new();
    let rules_dir = env.project.join(".vak/prompts/rules");
    std::fs::create_dir_all(&rules_dir).expect("mkdir");
    std::fs::write(
        rules_dir.join("payments.md"),
        "+++\npaths = [\"src/payments/**\"]\n+++\n- Never log card numbers.\n",
    )
    .expect("write");
    std::fs::write(rules_dir.join("bad.md"), "- no front matter\n").expect("write");
    let listed = env.get("/api/rules").expect_ok();
    let rules = listed["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{listed}");
    assert_eq!(rules[0]["name"], "payments");
    assert_eq!(rules[0]["globs"][0], "src/payments/**");
    assert_eq!(rules[0]["block"], "guardrails");
    assert!(
        listed["skipped"][0]["source"]
            .as_str()
            .expect("source")
            .ends_with("bad.md")
    );
    let matched = env.get("/api/rules?path=src/payments/x.rs").expect_ok();
    assert_eq!(matched["active"][0]["name"], "payments", "{matched}");
    assert!(
        matched["tail"]
            .as_str()
            .expect("tail")
            .contains("Never log card numbers.")
    );
    let other = env.get("/api/rules?path=README.md").expect_ok();
    assert!(other["active"].as_array().expect("active").is_empty());
    env.get("/api/rules?path=../etc/passwd").expect_error(400);
}

// ---- permissions and audit ------------------------------------------------

#[test]
fn permissions_say_where_each_rule_came_from() {
    let env = Env::new();
    let p = env.get("/api/permissions").expect_ok();
    let rules = p["rules"].as_array().expect("rules");
    let deny = rules
        .iter()
        .find(|r| r["rule"] == "edit_file:infra/*")
        .expect("project deny");
    assert_eq!(deny["kind"], "deny");
    assert_eq!(deny["origin"], "project");
    assert!(
        deny["source"]
            .as_str()
            .expect("source")
            .ends_with("myproj/.vak/config.toml#permissions.deny")
    );
    assert!(
        rules
            .iter()
            .any(|r| r["rule"] == "read_file:*" && r["kind"] == "allow" && r["origin"] == "home")
    );
    assert!(rules.iter().any(|r| r["kind"] == "ask"));
    let p = env.get("/api/permissions?untrusted=true").expect_ok();
    assert_eq!(p["trust"], "untrusted");
}

#[test]
fn audit_lists_security_events() {
    let env = Env::new();
    let empty = env.get("/api/audit").expect_ok();
    assert_eq!(empty["events"], json!([]));
    let event = ConfigChange {
        at: "2026-12-02T14:00:00Z".to_owned(),
        bot: "helpdesk".to_owned(),
        chat: "42".to_owned(),
        old_session: SessionId::parse("01JAAAAAAAAAAAAAAAAAAAAAAA").expect("id"),
        new_session: SessionId::parse("01JBBBBBBBBBBBBBBBBBBBBBBB").expect("id"),
        old_fingerprint: Some("sha256:old".to_owned()),
        new_fingerprint: Some("sha256:new".to_owned()),
        changes: vec![LayerChange {
            block: "identity".to_owned(),
            layer: "bot".to_owned(),
            occurrence: 0,
            kind: ChangeKind::Changed,
            frozen_digest: Some("a".to_owned()),
            current_digest: Some("b".to_owned()),
            source: None,
        }],
    };
    AuditLog::new(&env.home)
        .append(&SecurityEvent::ConfigChange(event))
        .expect("append");
    let listed = env.get("/api/audit").expect_ok();
    let events = listed["events"].as_array().expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "config-change");
    assert_eq!(events[0]["bot"], "helpdesk");
}

// ---- the page -------------------------------------------------------------

/// The contents of every string literal in `js` (quotes, apostrophes and
/// template literals, with `${…}` expressions dropped), skipping comments.
fn js_string_literals(js: &str) -> Vec<String> {
    let chars: Vec<char> = js.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '\'' || c == '"' || c == '`' {
            let quote = c;
            let mut s = String::new();
            i += 1;
            let mut depth = 0;
            while i < chars.len() {
                let d = chars[i];
                if depth == 0 && d == '\\' {
                    if let Some(next) = chars.get(i + 1) {
                        s.push(*next);
                    }
                    i += 2;
                    continue;
                }
                if quote == '`' && depth == 0 && d == '$' && chars.get(i + 1) == Some(&'{') {
                    depth = 1;
                    i += 2;
                    continue;
                }
                if depth > 0 {
                    if d == '{' {
                        depth += 1;
                    } else if d == '}' {
                        depth -= 1;
                    }
                    i += 1;
                    continue;
                }
                if d == quote {
                    break;
                }
                s.push(d);
                i += 1;
            }
            out.push(s);
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Text nodes and human-facing attributes of `html`, scripts and styles
/// dropped.
fn html_copy(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        out.push(rest[..start].to_owned());
        let Some(end) = rest[start..].find('>') else {
            break;
        };
        let tag = &rest[start..start + end];
        for attr in ["title=\"", "aria-label=\"", "placeholder=\"", "alt=\""] {
            if let Some(at) = tag.find(attr) {
                let value = &tag[at + attr.len()..];
                out.push(value[..value.find('"').unwrap_or(value.len())].to_owned());
            }
        }
        rest = &rest[start + end + 1..];
    }
    out.push(rest.to_owned());
    out
}

fn forbidden_word(text: &str) -> Option<&'static str> {
    let lower = text.to_lowercase();
    ["prevent", "block", "cannot", "can't", "can not"]
        .into_iter()
        .find(|w| lower.contains(w))
}

#[test]
fn served_copy_says_instruct_never_prevent_block_or_cannot() {
    let env = Env::new();
    let html = send(env.addr, "GET", "/", Some(&env.host()), None, None).body;
    let js = send(env.addr, "GET", "/app.js", Some(&env.host()), None, None).body;
    let css = send(env.addr, "GET", "/app.css", Some(&env.host()), None, None).body;
    assert_eq!(html, vak_admin::assets::INDEX_HTML);
    assert_eq!(js, vak_admin::assets::APP_JS);

    let literals = js_string_literals(&js);
    assert!(
        literals.len() > 100,
        "the tokenizer found the copy ({})",
        literals.len()
    );
    assert!(
        literals
            .iter()
            .any(|s| s.contains("Guardrails instruct the model")),
        "the guardrail note is among the literals"
    );
    let mut copy: Vec<String> = literals;
    copy.extend(html_copy(&html));
    for text in &copy {
        assert!(
            forbidden_word(text).is_none(),
            "visible copy must say instruct, not {:?}: {text:?}",
            forbidden_word(text)
        );
    }
    // The tokenizer is not fooled by an identifier or a comment…
    assert!(js_string_literals("const block = 1; // cannot\n").is_empty());
    // …and catches a literal that slips through.
    assert!(
        js_string_literals("say('This will block the tool')")
            .iter()
            .any(|s| forbidden_word(s).is_some())
    );
    // CSS has no generated text at all.
    assert!(!css.contains("content:"), "no text from CSS");

    // No network fetches: nothing in the page points off this server.
    for text in [&html, &js, &css] {
        for needle in ["http://", "https://", "//cdn", "@import", "url("] {
            assert!(!text.contains(needle), "page references {needle}");
        }
    }
    // Usable from the keyboard: real buttons and labelled inputs.
    assert!(html.contains("<label for=\"token-input\">"));
    assert!(
        !html.contains("onclick"),
        "no inline handlers (CSP forbids them)"
    );
    assert!(css.contains(":focus-visible"));
    assert!(js.contains("el('button', { type: 'button'"));
    assert!(js.contains("href: '#/permissions'"));
}

#[test]
fn the_scope_control_lists_and_edits_directory_layers() {
    let env = Env::new();
    let payments = env.project.join("services/payments");
    std::fs::create_dir_all(payments.join(".vak/prompts")).expect("mkdir");
    std::fs::write(
        payments.join(".vak/prompts/guardrails.md"),
        "- Never log card numbers.\n",
    )
    .expect("write");
    std::fs::create_dir_all(env.project.join("services/web")).expect("mkdir");
    std::fs::write(env.project.join("services/web/AGENTS.md"), "Use pnpm.\n").expect("write");

    let layers = env.get("/api/layers?scope=project").expect_ok();
    assert_eq!(
        layers["directories"],
        json!(["services/payments", "services/web"])
    );

    // One directory layer: its cards, and a save that lands in its file.
    let dir_layers = env
        .get("/api/layers?scope=project&dir=services/payments")
        .expect_ok();
    assert_eq!(dir_layers["sub"], "dir/services/payments");
    assert_eq!(block(&dir_layers, "guardrails")["state"], "overridden");
    env.put(
        "/api/layers/identity?scope=project&dir=services/payments",
        &json!({"text": "You are Vak, on payments.", "if_digest": ""}),
    )
    .expect_ok();
    assert_eq!(
        std::fs::read_to_string(payments.join(".vak/prompts/identity.md")).expect("saved"),
        "You are Vak, on payments."
    );
    // The effective prompt for that directory shows it; the root's does not.
    let prompt = env.get("/api/prompt?dir=services/payments").expect_ok();
    assert!(
        prompt["prefix"]
            .as_str()
            .expect("prefix")
            .contains("on payments.")
    );
    assert!(
        prompt["prefix"]
            .as_str()
            .expect("prefix")
            .contains("Never log card numbers")
    );
    let root = env.get("/api/prompt").expect_ok();
    assert!(
        !root["prefix"]
            .as_str()
            .expect("prefix")
            .contains("on payments.")
    );

    // Only plain names below the root, and only at project scope.
    env.get("/api/layers?scope=project&dir=../elsewhere")
        .expect_error(400);
    env.get("/api/prompt?dir=/etc").expect_error(400);
    env.get("/api/layers?scope=shared&dir=services/payments")
        .expect_error(400);
}

#[test]
fn history_diff_revert_and_the_trust_preview() {
    let env = Env::new();
    let first = "- Reply in British English.\n";
    let second = "- Reply in British English.\n- Cite the file.\n";
    env.put(
        "/api/layers/operating-rules?scope=project",
        &json!({"text": first, "if_digest": ""}),
    )
    .expect_ok();
    env.put(
        "/api/layers/operating-rules?scope=project",
        &json!({"text": second, "if_digest": sha256_hex(first)}),
    )
    .expect_ok();
    let history = env
        .get("/api/history/operating-rules?scope=project")
        .expect_ok();
    let versions = history["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 2, "{history}");
    assert_eq!(history["current_digest"], sha256_hex(second));
    let who = versions[1]["who"].as_str().expect("who");
    assert!(who.starts_with("admin-token:"), "{who}");
    assert!(
        !who.contains(&env.token),
        "the token itself is never recorded"
    );

    let diff = env
        .get(&format!(
            "/api/history/operating-rules/diff?scope=project&from={}&to={}",
            sha256_hex(first),
            sha256_hex(second)
        ))
        .expect_ok();
    assert!(
        diff["diff"]
            .as_str()
            .expect("diff")
            .contains("+- Cite the file."),
        "{diff}"
    );

    // A stale digest is the save's conflict; the right one reverts.
    env.post(
        "/api/history/operating-rules/revert?scope=project",
        &json!({"to": sha256_hex(first), "if_digest": sha256_hex(first)}),
    )
    .expect_error(409);
    env.post(
        "/api/history/operating-rules/revert?scope=project",
        &json!({"to": sha256_hex("never kept"), "if_digest": sha256_hex(second)}),
    )
    .expect_error(404);
    let reverted = env
        .post(
            "/api/history/operating-rules/revert?scope=project",
            &json!({"to": sha256_hex(first), "if_digest": sha256_hex(second)}),
        )
        .expect_ok();
    assert_eq!(reverted["digest"], sha256_hex(first));
    assert_eq!(
        std::fs::read_to_string(env.project_file("operating-rules.md")).expect("file"),
        first
    );

    let preview = env.get("/api/trust-preview").expect_ok();
    assert_eq!(preview["trusted"], true);
    env.get("/api/audit/diff").expect_error(400);
    env.get(&format!(
        "/api/audit/diff?old={}&new={}",
        SessionId::generate(),
        SessionId::generate()
    ))
    .expect_error(404);
    assert!(preview["tokens"]["after"].as_u64().is_some(), "{preview}");
}

#[test]
fn a_prompt_edit_never_puts_a_bot_or_chat_on_the_gateways_lists() {
    let env = Env::new();
    let allow_path = env.gateway_file("allowlist.json");
    let bots_path = env.gateway_file("bots.json");
    let (allow, bots) = (
        std::fs::read(&allow_path).ok(),
        std::fs::read(&bots_path).ok(),
    );
    for path in [
        "/api/gateway/chats/helpdesk/666/guardrails",
        "/api/gateway/bots/nobot/guardrails",
    ] {
        let error = env
            .put(path, &json!({"text": "- be brief", "if_digest": ""}))
            .expect_error(404);
        assert!(error.contains("create_entry"), "{error}");
    }
    assert_eq!(std::fs::read(&allow_path).ok(), allow);
    assert_eq!(std::fs::read(&bots_path).ok(), bots);
    // The live count says so before the save is tried, and not when the
    // save would make the entry.
    for (body, refused) in [
        (json!({"bot": "helpdesk", "chat": "666"}), true),
        (json!({"bot": "nobot"}), true),
        (
            json!({"bot": "helpdesk", "chat": "666", "create_entry": true}),
            false,
        ),
        (json!({"bot": "helpdesk"}), false),
    ] {
        let mut body = body;
        body["block"] = json!("guardrails");
        body["text"] = json!("- be brief");
        let count = env.post("/api/tokens", &body).expect_ok();
        assert_eq!(count["refused"], refused, "{body}: {count}");
        assert_eq!(count["missing_entry"].is_string(), refused, "{count}");
    }
    // Asked for, the entry is created with its prompt.
    env.put(
        "/api/gateway/chats/helpdesk/666/guardrails",
        &json!({"text": "- be brief", "if_digest": "", "create_entry": true}),
    )
    .expect_ok();
    let allow: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&allow_path).expect("read")).expect("json");
    assert_eq!(
        allow["helpdesk"]["666"]["prompts"]["guardrails"],
        "- be brief"
    );
}

#[test]
fn a_change_that_could_not_be_checked_everywhere_is_refused_unless_accepted() {
    // More plain directories than the walk that lists directory layers
    // visits: a layer past them could be over the cap, so a save or reset
    // is refused (422, `unchecked` saying why) until `over_budget` accepts
    // it, exactly as `--over-budget` does on the command line.
    let env = Env::new();
    for i in 0..=20_000 {
        std::fs::create_dir_all(env.project.join(format!("src/d{i}"))).expect("mkdir");
    }
    let shared = env.home.join(".vak/prompts/operating-rules.md");
    let before = std::fs::read_to_string(&shared).expect("fixture file");
    let digest = sha256_hex(before.as_bytes());
    let put = |over_budget: bool| {
        env.put(
            "/api/layers/operating-rules?scope=shared",
            &json!({"text": "Be brief.\n", "if_digest": digest, "over_budget": over_budget}),
        )
    };
    let r = put(false);
    let error = r.expect_error(422);
    assert!(error.contains("--over-budget"), "{error}");
    let unchecked = r.json()["unchecked"]
        .as_str()
        .expect("unchecked")
        .to_owned();
    assert!(
        unchecked.contains("the walk that lists directory layers stopped"),
        "{unchecked}"
    );
    assert_eq!(std::fs::read_to_string(&shared).expect("read"), before);
    let saved = put(true).expect_ok();
    assert_eq!(
        std::fs::read_to_string(&shared).expect("read"),
        "Be brief.\n"
    );
    let digest = saved["digest"].as_str().expect("digest");
    let reset = |extra: &str| {
        env.delete(&format!(
            "/api/layers/operating-rules?scope=shared&if_digest={digest}{extra}"
        ))
    };
    assert!(reset("").expect_error(422).contains("refusing to reset"));
    assert!(shared.exists(), "removed");
    reset("&over_budget=true").expect_ok();
    assert!(!shared.exists());
}

#[test]
fn a_save_that_changes_nothing_answers_recorded_false_and_writes_no_version() {
    let env = Env::new();
    let text = "- Check the build before you report.\n";
    let first = env
        .put(
            "/api/layers/operating-rules?scope=project",
            &json!({"text": text, "if_digest": ""}),
        )
        .expect_ok();
    assert_eq!(first["recorded"], true, "{first}");
    assert_eq!(first["over_cap"], false, "{first}");
    assert!(first["tokens_after"]["prefix"].is_u64(), "{first}");
    let again = env
        .put(
            "/api/layers/operating-rules?scope=project",
            &json!({"text": text, "if_digest": sha256_hex(text)}),
        )
        .expect_ok();
    assert_eq!(again["recorded"], false, "{again}");
    assert_eq!(again["digest"], first["digest"], "{again}");
    let history = env
        .get("/api/history/operating-rules?scope=project")
        .expect_ok();
    let versions = history["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1, "{history}");
}

#[test]
fn over_budget_saves_over_the_cap_and_the_version_says_so() {
    // The fixture home sets `max_tokens = 1500`.
    let env = Env::new();
    let long: String = (0..600)
        .map(|i| format!("- Rule {i}: check the resource number {i} before you change it.\n"))
        .collect();
    let path = env.project.join(".vak/prompts/guardrails.md");
    let digest = std::fs::read(&path).map_or_else(|_| String::new(), |b| sha256_hex(&b));
    let put = |over_budget: bool| {
        env.put(
            "/api/layers/guardrails?scope=project",
            &json!({"text": long, "if_digest": digest, "over_budget": over_budget}),
        )
    };
    let r = put(false);
    let error = r.expect_error(422);
    assert!(
        error.contains("max_tokens") && error.contains("over_budget"),
        "{error}"
    );
    let chains = r.json()["chains"].as_array().expect("chains").clone();
    assert!(chains.len() > 1, "every chain over is named: {chains:?}");
    let tokens: Vec<u64> = chains
        .iter()
        .map(|c| c["prefix_tokens"].as_u64().expect("tokens"))
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] >= w[1]), "{tokens:?}");
    let saved = put(true).expect_ok();
    assert_eq!(saved["over_cap"], true, "{saved}");
    assert_eq!(saved["recorded"], true, "{saved}");
    let history = env.get("/api/history/guardrails?scope=project").expect_ok();
    let versions = history["versions"].as_array().expect("versions");
    assert_eq!(
        versions.last().expect("a version")["over_cap"],
        true,
        "{history}"
    );
}

#[test]
fn a_gateway_save_of_the_text_the_key_holds_records_nothing() {
    let env = Env::new();
    let text = "Post the deploy plan before running it.";
    let first = env
        .put(
            "/api/gateway/bots/deploybot/operating-rules",
            &json!({"text": text, "if_digest": "", "create_entry": true}),
        )
        .expect_ok();
    assert_eq!(first["recorded"], true, "{first}");
    assert_eq!(first["over_cap"], false, "{first}");
    assert!(first["tokens_after"]["prefix"].is_u64(), "{first}");
    let again = env
        .put(
            "/api/gateway/bots/deploybot/operating-rules",
            &json!({"text": text, "if_digest": sha256_hex(text), "create_entry": true}),
        )
        .expect_ok();
    assert_eq!(again["recorded"], false, "{again}");
    assert_eq!(again["changed"], false, "{again}");
    let history = env
        .get("/api/gateway/bots/deploybot/operating-rules/history")
        .expect_ok();
    let versions = history["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1, "{history}");
}

/// `/api/prompt` answers an unchanged prompt from memory, and never a
/// stale one: a layer file edited on disk behind the server's back shows
/// in the very next answer, and the tail is rendered for each request.
#[test]
fn the_prompt_view_is_never_stale_after_an_edit_on_disk() {
    let env = Env::new();
    let first = env.get("/api/prompt").expect_ok();
    let again = env.get("/api/prompt").expect_ok();
    assert_eq!(first["prefix"], again["prefix"]);
    let rules = env.project.join(".vak/prompts/operating-rules.md");
    std::fs::create_dir_all(rules.parent().expect("dir")).expect("dir");
    std::fs::write(&rules, "- Edited behind the server's back.\n").expect("write");
    let after = env.get("/api/prompt").expect_ok();
    assert!(
        after["prefix"]
            .as_str()
            .expect("prefix")
            .contains("Edited behind the server's back."),
        "{}",
        after["prefix"]
    );
    assert!(after["tail"].as_str().expect("tail").starts_with("Now: "));
}
