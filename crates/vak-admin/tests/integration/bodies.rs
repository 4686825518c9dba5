//! Request bodies are bounded before they are buffered, and the refusal is
//! a JSON 413 that names the limit.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use super::{Env, raw};

fn status_and_body(bytes: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(bytes);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

#[test]
fn a_declared_length_over_the_limit_is_refused_before_the_body_is_sent() {
    let env = Env::new();
    let limit = vak_admin::MAX_BODY_BYTES;
    for (method, path) in [
        ("PUT", "/api/layers/identity?scope=project"),
        ("POST", "/api/tokens"),
        ("PUT", "/api/gateway/bots/helpdesk/identity"),
        ("GET", "/api/layers?scope=project"),
    ] {
        let mut stream = TcpStream::connect(env.addr).expect("connect");
        // A server that waited for the body fails the read after a minute.
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        // A gigabyte is announced; not a byte of it is sent.
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n",
            env.host(),
            env.token
        );
        stream.write_all(head.as_bytes()).expect("write");
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        let (status, body) = status_and_body(&bytes);
        // Answered with no body sent: refused on the declared length.
        assert_eq!(status, 413, "{method} {path}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).expect("JSON error");
        let error = error["error"].as_str().expect("sentence");
        assert!(error.contains(&format!("{limit}-byte limit")), "{error}");
        assert!(error.contains("1073741824"), "{error}");
    }
}

#[test]
fn a_chunked_body_over_the_limit_is_cut_off_with_a_json_413() {
    let env = Env::new();
    let limit = vak_admin::MAX_BODY_BYTES;
    let head = format!(
        "PUT /api/layers/identity?scope=project HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        env.host(),
        env.token
    );
    let chunk = vec![b' '; 64 * 1024];
    let mut body = Vec::new();
    for _ in 0..(limit / chunk.len() + 2) {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(&chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let before = std::fs::read(env.project_file("identity.md")).ok();
    let r = raw(env.addr, head.as_bytes(), &body);
    let error = r.expect_error(413);
    assert!(error.contains(&format!("{limit}-byte limit")), "{error}");
    // Nothing was written.
    assert_eq!(std::fs::read(env.project_file("identity.md")).ok(), before);
}
