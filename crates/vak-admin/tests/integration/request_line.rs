//! The request line and `Host`: origin-form targets only, exactly one
//! `Host`, naming the address the server listens on.

use super::{Env, raw};

fn request(env: &Env, line: &str, hosts: &[&str]) -> super::Response {
    let mut head = format!("{line}\r\nAuthorization: Bearer {}\r\n", env.token);
    for host in hosts {
        head.push_str(&format!("Host: {host}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    raw(env.addr, head.as_bytes(), b"")
}

#[test]
fn only_origin_form_targets_are_served() {
    let env = Env::new();
    let host = env.host();
    let ours = format!("http://{host}/api/layers?scope=project");
    for line in [
        "GET http://evil.example/api/layers?scope=project HTTP/1.1".to_owned(),
        format!("GET {ours} HTTP/1.1"),
        "GET HTTP://evil.example/ HTTP/1.1".to_owned(),
        format!("CONNECT {host} HTTP/1.1"),
        "OPTIONS * HTTP/1.1".to_owned(),
    ] {
        let r = request(&env, &line, &[&host]);
        let error = r.expect_error(400);
        assert!(error.contains("not origin-form"), "{line}: {error}");
        assert!(
            !r.body.contains("\"blocks\""),
            "{line} was served: {}",
            r.body
        );
    }
    // The same route in origin-form is served.
    let r = request(&env, "GET /api/layers?scope=project HTTP/1.1", &[&host]);
    assert_eq!(r.expect_ok()["scope"], "project");
}

#[test]
fn exactly_one_host_naming_this_server() {
    let env = Env::new();
    let host = env.host();
    let line = "GET /api/layers?scope=project HTTP/1.1";
    // A second, foreign Host, after ours or before it.
    for hosts in [
        [host.as_str(), "evil.example"],
        ["evil.example", host.as_str()],
    ] {
        let error = request(&env, line, &hosts).expect_error(400);
        assert!(error.contains("2 Host headers"), "{error}");
    }
    // Twice ours is still two.
    let error = request(&env, line, &[&host, &host]).expect_error(400);
    assert!(error.contains("2 Host headers"), "{error}");
    // None.
    let error = request(&env, line, &[]).expect_error(400);
    assert!(error.contains("no Host header"), "{error}");
    // A foreign one, a different port, and a name with a trailing dot.
    let port = env.addr.port();
    for foreign in [
        "evil.example".to_owned(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("localhost.:{port}"),
    ] {
        let error = request(&env, line, &[&foreign]).expect_error(421);
        assert!(error.contains(&foreign), "{error}");
        assert!(error.contains(&host), "says where to go instead: {error}");
    }
    // Ours, and `localhost:PORT` in any case, are served.
    for ours in [host.clone(), format!("LocalHost:{port}")] {
        assert_eq!(
            request(&env, line, &[&ours]).expect_ok()["scope"],
            "project"
        );
    }
}

#[test]
fn an_oversized_request_head_is_refused_and_the_server_carries_on() {
    let env = Env::new();
    let host = env.host();
    let padding = "x".repeat(100 * 1024);
    let head = format!(
        "GET /api/audit HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nX-Padding: {padding}\r\nConnection: close\r\n\r\n",
        env.token
    );
    let r = raw(env.addr, head.as_bytes(), b"");
    assert_eq!(r.status, 431, "{}", r.body);
    env.get("/api/audit").expect_ok();
}
