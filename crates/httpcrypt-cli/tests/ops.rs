//! Operating `serve` and `gateway` as the built binary: signals (SIGTERM
//! drains, SIGHUP reloads).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Proc;

/// A key directory and a site root holding `big.bin` of `big` bytes.
fn site(dir: &Path, big: usize) -> Vec<u8> {
    common::keygen(&dir.join("keys"), false);
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), b"hello\n").unwrap();
    let bytes = common::noise(big, 3);
    std::fs::write(root.join("big.bin"), &bytes).unwrap();
    bytes
}

fn serve(dir: &Path, extra: &[&str]) -> Proc {
    let mut args = vec!["--log", "info"];
    args.extend_from_slice(extra);
    common::serve(&dir.join("keys"), &dir.join("root"), &args)
}

/// A download in flight when SIGTERM arrives completes; the listener
/// closes at once; the server exits 0 once the download is done.
#[test]
fn sigterm_drains_a_download_in_flight_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let big = site(dir.path(), 32 << 20);
    let mut server = serve(dir.path(), &[]);
    let url = format!("http://{}/big.bin", server.addr);
    let mut fetch = common::command(&["fetch", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = fetch.stdout.take().unwrap();
    // The first bytes are here: the download is in flight, and the rest
    // waits on this reader (pipe and socket buffers hold far less).
    let mut got = vec![0u8; 64 << 10];
    out.read_exact(&mut got).unwrap();
    server.signal("TERM");
    // The listener closes at once: new connections are refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(server.addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        server.wait_exit(Duration::from_millis(300)).is_none(),
        "exited with a download in flight"
    );
    out.read_to_end(&mut got).unwrap();
    let status = fetch.wait().unwrap();
    assert!(status.success(), "fetch: {status}");
    assert_eq!(got.len(), big.len());
    assert!(got == big, "the download differs from the file");
    let status = server
        .wait_exit(Duration::from_secs(20))
        .expect("the server exits once drained");
    assert_eq!(status.code(), Some(0), "{}", server.log());
    let log = server.log();
    assert!(log.contains("draining"), "{log}");
    assert!(log.contains("SIGTERM"), "{log}");
}

/// SIGINT drains too; an idle keep-alive connection does not hold the
/// exit up until the deadline.
#[test]
fn sigint_with_an_idle_connection_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 1000);
    let mut server = serve(dir.path(), &["--shutdown-timeout", "60"]);
    let idle = TcpStream::connect(server.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    server.signal("INT");
    let status = server
        .wait_exit(Duration::from_secs(20))
        .expect("the server exits");
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    drop(idle);
}

/// A stalled client cannot hold the exit past `--shutdown-timeout`.
#[test]
fn the_drain_deadline_bounds_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 32 << 20);
    let mut server = serve(dir.path(), &["--shutdown-timeout", "1"]);
    let url = format!("http://{}/big.bin", server.addr);
    let mut fetch = common::command(&["fetch", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = fetch.stdout.take().unwrap();
    let mut first = vec![0u8; 1 << 10];
    out.read_exact(&mut first).unwrap();
    // The client reads no more: the download stalls.
    let t = Instant::now();
    server.signal("TERM");
    let status = server
        .wait_exit(Duration::from_secs(20))
        .expect("the server exits at the deadline");
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert!(server.log().contains("deadline"), "{}", server.log());
    let _ = fetch.kill();
    let _ = fetch.wait();
}

/// SIGHUP reloads the key directory (a key copied in is served) and keeps
/// the server answering, on a connection opened before it too.
#[test]
fn sighup_reloads_keys_and_keeps_connections() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 1000);
    let server = serve(dir.path(), &[]);
    let host = server.addr.to_string();
    let options = common::wire("OPTIONS", "/", &[("Host", &host)], b"");
    let (before, mut conn) = common::exchange(server.addr, &options);
    assert_eq!(before.status, 200);
    let serials = |body: &[u8]| String::from_utf8_lossy(body).lines().count();
    assert_eq!(serials(&before.body), 1);

    // Another process adds a key to the directory (as an operator copying
    // one in would).
    let keys = dir.path().join("keys");
    httpcrypt::keys::KeyStore::open(&keys)
        .unwrap()
        .rotate(httpcrypt::clock::unix_now(), Duration::from_secs(3600))
        .unwrap();

    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log().contains("key directory reloaded") {
        assert!(Instant::now() < deadline, "no reload: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The connection opened before SIGHUP still answers, now with both keys.
    conn.get_mut().write_all(&options).unwrap();
    let after = common::read_response(&mut conn).expect("an answer after SIGHUP");
    assert_eq!(after.status, 200);
    assert_eq!(serials(&after.body), 2, "{}", server.log());
    let hello = common::fetch(&[&format!("http://{host}/hello.txt")]);
    assert!(hello.status.success(), "{}", hello.stderr_text());
    assert_eq!(hello.stdout, b"hello\n");
}

/// The access lines (target `httpcrypt::access`) of a log.
fn access_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("httpcrypt::access"))
        .map(str::to_string)
        .collect()
}

/// Waits until the log holds `n` access lines.
fn wait_access(server: &Proc, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = access_lines(&server.log());
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "no access lines: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One line per request, plain text (stderr is a pipe: no colour), with
/// the outer path only; the inner target appears with `--log-targets`;
/// cookies and field values never do.
#[test]
fn access_log_text_lines() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 1000);
    let server = serve(dir.path(), &[]);
    let url = format!("http://{}/hello.txt", server.addr);
    let out = common::fetch(&["-H", "Cookie: session=sekrit-value", &url]);
    assert!(out.status.success(), "{}", out.stderr_text());
    // OPTIONS for the certificates, then the sealed GET.
    let lines = wait_access(&server, 2);
    let log = server.log();
    assert!(!log.contains('\x1b'), "colour codes in a log file: {log}");
    assert!(!log.contains("sekrit"), "{log}");
    assert!(
        !log.contains("hello.txt"),
        "the inner target without --log-targets: {log}"
    );
    let sealed = lines
        .iter()
        .find(|l| l.contains("encrypted=true"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    for want in [
        "method=GET",
        "status=200",
        "key=\"fresh\"",
        "inner_status=\"200\"",
        "bytes=",
        "duration_ms=",
        "complete=true",
    ] {
        assert!(sealed.contains(want), "{want} in {sealed}");
    }

    drop(server);
    let server = serve(dir.path(), &["--log-targets"]);
    let url = format!("http://{}/hello.txt", server.addr);
    let out = common::fetch(&[&url]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let lines = wait_access(&server, 2);
    assert!(
        lines.iter().any(
            |l| l.contains("inner_method=\"GET\"") && l.contains("inner_target=\"/hello.txt\"")
        ),
        "{lines:?}"
    );
}

/// `--log-format json`: every line is a JSON object; the access line has
/// the fields as keys.
#[test]
fn access_log_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 1000);
    let server = serve(dir.path(), &["--log-format", "json", "--log-targets"]);
    let url = format!("http://{}/nothing-here", server.addr);
    let out = common::fetch(&[&url]);
    // The inner 404 is the application's answer.
    assert!(
        !out.stderr_text().contains("panicked"),
        "{}",
        out.stderr_text()
    );
    let lines = wait_access(&server, 2);
    let objects: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let sealed = objects
        .iter()
        .find(|o| o["encrypted"] == true)
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(sealed["target"], "httpcrypt::access");
    assert_eq!(sealed["level"], "INFO");
    assert_eq!(sealed["inner_status"], "404");
    assert_eq!(sealed["inner_target"], "/nothing-here");
    assert_eq!(sealed["key"], "fresh");
    assert_eq!(sealed["status"], 200);
    assert!(sealed["bytes"].as_u64().unwrap() > 0);
    assert!(sealed["duration_ms"].as_f64().is_some());
}

/// A key directory for a gateway.
fn gateway_keys(dir: &Path) -> std::path::PathBuf {
    let keys = dir.join("keys");
    common::keygen(&keys, false);
    keys
}

/// The status line and the body of `fetch -i` output.
fn split_include(stdout: &[u8]) -> (String, Vec<u8>) {
    let text = String::from_utf8_lossy(stdout);
    let status = text.lines().next().unwrap_or_default().to_string();
    let at = stdout
        .windows(2)
        .position(|w| w == b"\n\n")
        .map_or(stdout.len(), |p| p + 2);
    (status, stdout[at..].to_vec())
}

/// With the upstream down, the client gets a sealed 502 with an RFC 9457
/// problem document, and the gateway's log names the upstream.
#[test]
fn gateway_with_a_dead_upstream_answers_502_problem() {
    let dir = tempfile::tempdir().unwrap();
    let keys = gateway_keys(dir.path());
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = common::gateway(&keys, dead, &["--log", "info"]);
    let out = common::fetch(&["-i", &format!("http://{}/x", gw.addr)]);
    let (status, body) = split_include(&out.stdout);
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway", "{}", out.stderr_text());
    assert!(out
        .stdout_text()
        .to_ascii_lowercase()
        .contains("content-type: application/problem+json"));
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["status"], 502);
    assert_eq!(doc["title"], "Bad Gateway");
    assert_eq!(doc["type"], "about:blank");
    assert!(doc["detail"].as_str().is_some_and(|d| !d.is_empty()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gw.log().contains(&format!("upstream=http://{dead}")) {
        assert!(Instant::now() < deadline, "{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An upstream that accepts and never answers: 504 after --upstream-timeout.
#[test]
fn gateway_with_a_slow_upstream_answers_504() {
    let dir = tempfile::tempdir().unwrap();
    let keys = gateway_keys(dir.path());
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    // Holds every connection open without a byte of answer.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().take(8) {
            held.push(s);
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    let gw = common::gateway(&keys, addr, &["--upstream-timeout", "1"]);
    let t = Instant::now();
    let out = common::fetch(&["-i", &format!("http://{}/x", gw.addr)]);
    let (status, body) = split_include(&out.stdout);
    assert_eq!(
        status,
        "HTTP/1.1 504 Gateway Timeout",
        "{}",
        out.stderr_text()
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["status"], 504);
}

/// The upstream learns the client's address from the gateway, never from
/// the client's own X-Forwarded-For.
#[test]
fn gateway_adds_forwarded_fields_from_the_tcp_peer() {
    let dir = tempfile::tempdir().unwrap();
    let keys = gateway_keys(dir.path());
    let up = common::upstream();
    let fields = |gw: &Proc| -> Vec<(String, String)> {
        let out = common::fetch(&[
            "-H",
            "X-Forwarded-For: 6.6.6.6",
            "-H",
            "Forwarded: for=6.6.6.6",
            &format!("http://{}/echo", gw.addr),
        ]);
        assert!(out.status.success(), "{}", out.stderr_text());
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kv| {
                (
                    kv[0].as_str().unwrap().to_ascii_lowercase(),
                    kv[1].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let get = |f: &[(String, String)], n: &str| -> Vec<String> {
        f.iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let gw = common::gateway(&keys, up.addr, &[]);
    let f = fields(&gw);
    assert_eq!(get(&f, "x-forwarded-for"), ["127.0.0.1"], "{f:?}");
    assert_eq!(get(&f, "x-forwarded-proto"), ["http"], "{f:?}");
    assert!(get(&f, "forwarded").is_empty(), "{f:?}");
    drop(gw);
    let gw = common::gateway(&keys, up.addr, &["--forwarded", "forwarded"]);
    let f = fields(&gw);
    assert_eq!(get(&f, "forwarded"), ["for=127.0.0.1;proto=http"], "{f:?}");
    assert!(get(&f, "x-forwarded-for").is_empty(), "{f:?}");
    drop(gw);
    let gw = common::gateway(&keys, up.addr, &["--forwarded", "none"]);
    let f = fields(&gw);
    assert!(
        get(&f, "forwarded").is_empty() && get(&f, "x-forwarded-for").is_empty(),
        "{f:?}"
    );
}

/// `fetch ARGS`, its exit code and stderr.
fn fetch_code(args: &[&str]) -> (Option<i32>, String, Vec<u8>) {
    let out = common::fetch(args);
    (out.status.code(), out.stderr_text(), out.stdout)
}

/// A server that accepts and never answers: fetch gives up at --max-time
/// with curl's exit code 28 and the `timeout` diagnosis.
#[test]
fn fetch_max_time_against_a_server_that_never_answers() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().take(4) {
            held.push(s);
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    let t = Instant::now();
    let (code, err, _) = fetch_code(&["--max-time", "2", &format!("http://{addr}/")]);
    assert_eq!(code, Some(28), "{err}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert!(err.contains("timeout: timed out after 2 s while"), "{err}");
}

/// Each diagnosis, by running the binary: the code, curl's exit code and
/// the wording shared by all clients (spec §12).
#[test]
fn fetch_diagnoses() {
    // Refused: nothing listens.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (code, err, _) = fetch_code(&[&format!("http://{dead}/")]);
    assert_eq!(code, Some(7), "{err}");
    assert!(
        err.contains(&format!("connect_failed: cannot connect to {dead}: ")),
        "{err}"
    );
    // A plain HTTP server: OPTIONS answered without a certificate list.
    let up = common::upstream();
    let (code, err, _) = fetch_code(&[&format!("http://{}/echo", up.addr)]);
    assert_eq!(code, Some(35), "{err}");
    assert!(
        err.contains(&format!(
            "not_httpcrypt: {} is not an HTTPCrypt server (OPTIONS / answered 501)",
            up.addr
        )),
        "{err}"
    );
    // The wrong mount.
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let server = serve(dir.path(), &[]);
    let url = format!("http://{}/hello.txt", server.addr);
    let (code, err, _) = fetch_code(&["--mount", "/hc", &url]);
    assert_eq!(code, Some(35), "{err}");
    assert!(
        err.contains(&format!(
            "no_endpoint: no HTTPCrypt endpoint at /hc on {}: wrong --mount?",
            server.addr
        )),
        "{err}"
    );
    // Another identity pinned.
    let other = common::keygen(&dir.path().join("other"), false);
    let (code, err, _) = fetch_code(&["--identity", &other, &url]);
    assert_eq!(code, Some(60), "{err}");
    assert!(
        err.contains("bad_signature: the certificates are not signed by the pinned identity"),
        "{err}"
    );
    // -f: an inner 404 fails with 22 and no body; without it, exit 0.
    let missing = format!("http://{}/missing", server.addr);
    let (code, err, out) = fetch_code(&["-f", &missing]);
    assert_eq!(code, Some(22), "{err}");
    assert!(out.is_empty());
    let (code, _, _) = fetch_code(&[&missing]);
    assert_eq!(code, Some(0));
    // -s hides the message, -sS shows it.
    let (code, err, _) = fetch_code(&["-s", "-f", &missing]);
    assert_eq!((code, err.as_str()), (Some(22), ""));
    let (_, err, _) = fetch_code(&["-sS", "-f", &missing]);
    assert!(err.contains("404"), "{err}");
    // -w prints the status after the body.
    let (code, _, out) = fetch_code(&["-s", "-o", "/dev/null", "-w", "%{http_code}\\n", &missing]);
    assert_eq!((code, out.as_slice()), (Some(0), &b"404\n"[..]));
    // A local file that cannot be read is named.
    let (code, err, _) = fetch_code(&["-d", "@/nonexistent/body", &url]);
    assert_eq!(code, Some(26), "{err}");
    assert!(err.contains("cannot read /nonexistent/body"), "{err}");
}

/// `-d @file` sends the file's contents; repeated `-d` are joined with `&`
/// as curl does; `-O` names the file after the URL; `-I` prints the head.
#[test]
fn fetch_data_remote_name_and_head() {
    let dir = tempfile::tempdir().unwrap();
    let keys = gateway_keys(dir.path());
    let up = common::upstream();
    let gw = common::gateway(&keys, up.addr, &[]);
    let body = dir.path().join("body.txt");
    std::fs::write(&body, b"a=1\nb=2\n").unwrap();
    let echo = format!("http://{}/echo", gw.addr);
    let sha = |b: &[u8]| {
        use sha2::Digest;
        hex(&sha2::Sha256::digest(b))
    };
    let doc = |out: &[u8]| -> serde_json::Value { serde_json::from_slice(out).unwrap() };
    let at = format!("@{}", body.display());
    let (code, err, out) = fetch_code(&["-d", &at, &echo]);
    assert_eq!(code, Some(0), "{err}");
    let d = doc(&out);
    assert_eq!(d["method"], "POST");
    assert_eq!(d["sha256"], sha(b"a=1b=2"), "{d}");
    let (_, _, out) = fetch_code(&["-d", "x=1", "-d", "y=2", &echo]);
    assert_eq!(doc(&out)["sha256"], sha(b"x=1&y=2"));
    // -O into a working directory.
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut cmd = common::command(&["fetch", "-O", &format!("http://{}/gen?n=1000", gw.addr)]);
    cmd.current_dir(&work);
    let out = common::run_cmd(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(std::fs::read(work.join("gen")).unwrap().len(), 1000);
    // -I: HEAD, the head only (the static files answer HEAD).
    let site_dir = tempfile::tempdir().unwrap();
    site(site_dir.path(), 10);
    let server = serve(site_dir.path(), &[]);
    let (code, err, out) = fetch_code(&["-I", &format!("http://{}/hello.txt", server.addr)]);
    assert_eq!(code, Some(0), "{err}");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\n\n"), "{text}");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A configuration file round-trips through `check-config` (its output is
/// a file giving the same configuration), a server runs from it, and flags
/// override it.
#[test]
fn config_file_round_trip_and_flags_override() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let keys = dir.path().join("keys");
    let root = dir.path().join("root");
    let file = dir.path().join("serve.toml");
    std::fs::write(
        &file,
        format!(
            "command = \"serve\"\nkeys = {keys:?}\nroot = {root:?}\nlisten = \"127.0.0.1:1\"\n\
             rotation = 600\nno-tickets = true\npublic = [\"/static/**\", \"/img/*\"]\n\
             log = \"info\"\nshutdown-timeout = 5\n"
        ),
    )
    .unwrap();
    let check = |f: &Path| {
        let out = common::run(
            &["check-config", f.to_str().unwrap()],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{}", out.stderr_text());
        out.stdout_text()
    };
    let first = check(&file);
    for want in [
        "rotation = \"600\"",
        "no-tickets = true",
        "public = [\"/static/**\", \"/img/*\"]",
        "max-connections = \"1024\"",
        "shutdown-timeout = \"5\"",
    ] {
        assert!(first.contains(want), "{want} in\n{first}");
    }
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &first).unwrap();
    assert_eq!(check(&again), first);
    // The server runs from the file; --listen on the command line wins
    // over the file's unusable port 1.
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args([
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    let server = common::spawn_listening_cmd(cmd);
    let out = common::fetch(&[&format!("http://{}/hello.txt", server.addr)]);
    assert!(out.status.success(), "{}", out.stderr_text());
    // The file's `log = "info"` is in force: access lines are written.
    wait_access(&server, 2);
}

/// Mistakes in a file or in flags are refused with a message that names them.
#[test]
fn config_and_flag_mistakes_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "command = \"serve\"\nlisten = \"127.0.0.1:0\"\nroot = \"/\"\nlisten_port = 3\n",
    )
    .unwrap();
    let out = common::run(
        &["check-config", bad.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr_text().contains("--listen-port"),
        "{}",
        out.stderr_text()
    );
    std::fs::write(&bad, "listen = [\n").unwrap();
    let out = common::run(
        &["check-config", bad.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr_text().contains("bad.toml"),
        "{}",
        out.stderr_text()
    );
    let keys = dir.path().join("keys");
    let root = dir.path().join("root");
    for rotation in ["0", "99999999"] {
        let out = common::run(
            &[
                "serve",
                "--keys",
                keys.to_str().unwrap(),
                "--root",
                root.to_str().unwrap(),
                "--rotation",
                rotation,
            ],
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(2), "{rotation}");
        assert!(
            out.stderr_text().contains("rotation period must be"),
            "{}",
            out.stderr_text()
        );
    }
}

/// `--listen :PORT` and `localhost:PORT` are accepted.
#[test]
fn listen_accepts_port_only_and_names() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    // A free port for each form, taken just before the server binds it:
    // one port kept across both servers could meanwhile become another
    // test's connection's local port (`:PORT` binds every address).
    for form in [":", "localhost:"] {
        let port = common::free_port();
        let listen = format!("{form}{port}");
        let mut cmd = std::process::Command::new(common::BIN);
        cmd.args(["serve", "--listen", &listen, "--keys"])
            .arg(dir.path().join("keys"))
            .arg("--root")
            .arg(dir.path().join("root"));
        let server = common::spawn_listening_cmd(cmd);
        assert_eq!(server.addr.port(), port, "{listen}");
        let out = common::fetch(&[&format!("http://127.0.0.1:{port}/hello.txt")]);
        assert!(out.status.success(), "{listen}: {}", out.stderr_text());
        drop(server);
    }
}

/// `keys show` lists the keys with UTC dates; a second server on the same
/// directory follows the first's keys while the first holds the lock.
#[test]
fn keys_show_and_the_key_directory_lock() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let first = serve(dir.path(), &[]);
    let keys = dir.path().join("keys");
    let out = common::run(
        &["keys", "show", "--keys", keys.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.contains("identity "), "{text}");
    assert!(text.contains("kex serial    1"), "{text}");
    assert!(text.contains(" UTC .. "), "{text}");
    // 2R + skew from not_before = now - skew: 2h 1m.
    assert!(
        text.contains("(valid, 2h 1m left)") || text.contains("(valid, 2h 0m left)"),
        "{text}"
    );
    assert!(text.contains("ticket key"), "{text}");
    assert!(text.contains("next rotation "), "{text}");
    // A second server on the directory follows the first's keys instead
    // of rotating next to it.
    let second = serve(dir.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !second
        .log()
        .contains("another process rotates this key directory")
    {
        assert!(Instant::now() < deadline, "{}", second.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = common::fetch(&[&format!("http://{}/hello.txt", second.addr)]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let files = std::fs::read_dir(keys.join("kex")).unwrap().count();
    assert_eq!(files, 1, "one key, made by the first server");
    drop(second);
    drop(first);
    // The lock goes with the process: the next server rotates.
    let third = serve(dir.path(), &[]);
    assert!(!third.log().contains("another process"), "{}", third.log());
}

/// `-L` follows a same-origin redirect (a directory's 307 to its slash
/// form); without it the 307 is the answer.
#[test]
fn fetch_location_follows_same_origin_redirects() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let sub = dir.path().join("root/sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("index.html"), b"in sub\n").unwrap();
    let server = serve(dir.path(), &[]);
    let url = format!("http://{}/sub", server.addr);
    let (code, err, out) = fetch_code(&["-s", "-w", "%{http_code}", &url]);
    assert_eq!((code, out.as_slice()), (Some(0), &b"307"[..]), "{err}");
    let (code, err, out) = fetch_code(&["-L", "-w", " %{num_redirects} %{http_code}", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out), "in sub\n 1 200");
    let (code, err, _) = fetch_code(&["-L", "--max-redirs", "0", &url]);
    assert_eq!(code, Some(47), "{err}");
}

/// The access log tells a key agreement from a session-cache hit and a
/// ticket.
#[test]
fn access_log_tells_fresh_cache_and_ticket_apart() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let keys_of = |server: &Proc, n: usize| -> Vec<String> {
        wait_access(server, n)
            .iter()
            .filter(|l| l.contains("encrypted=true"))
            .map(|l| {
                l.split("key=\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let server = serve(dir.path(), &[]);
    let url = format!("http://{}/hello.txt", server.addr);
    let out = common::fetch(&["--repeat", "2", &url]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(keys_of(&server, 3), ["fresh", "ticket"]);
    drop(server);
    let server = serve(dir.path(), &["--no-tickets"]);
    let url = format!("http://{}/hello.txt", server.addr);
    let out = common::fetch(&["--repeat", "2", "--reuse-key", &url]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(keys_of(&server, 3), ["fresh", "cache"]);
}

/// A listener whose accept queue is full drops new SYNs, so a connection
/// attempt hangs: fetch gives up at --connect-timeout with exit code 28.
#[test]
fn fetch_connect_timeout() {
    let full = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = full.local_addr().unwrap();
    // Fill the accept queue (std's backlog is 128); bounded count and time.
    let mut held = Vec::new();
    for _ in 0..300 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    assert!(held.len() < 300, "the accept queue never filled");
    let t = Instant::now();
    let (code, err, _) = fetch_code(&["--connect-timeout", "1", &format!("http://{addr}/")]);
    assert_eq!(code, Some(28), "{err}");
    assert!(
        err.contains(&format!(
            "timeout: timed out after 1 s while connecting to {addr}"
        )),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    drop(full);
}

/// SIGHUP re-reads the configuration file's log filter: access lines
/// start once the file says `log = "info"`.
#[test]
fn sighup_reloads_the_log_filter_of_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path(), 10);
    let file = dir.path().join("serve.toml");
    let write = |log: &str| {
        std::fs::write(
            &file,
            format!(
                "keys = {:?}\nroot = {:?}\nlog = \"{log}\"\n",
                dir.path().join("keys"),
                dir.path().join("root")
            ),
        )
        .unwrap()
    };
    write("warn");
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        file.to_str().unwrap(),
    ]);
    let server = common::spawn_listening_cmd(cmd);
    let url = format!("http://{}/hello.txt", server.addr);
    assert!(common::fetch(&[&url]).status.success());
    std::thread::sleep(Duration::from_millis(200));
    assert!(access_lines(&server.log()).is_empty(), "{}", server.log());
    write("info");
    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(common::fetch(&[&url]).status.success());
        if !access_lines(&server.log()).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}
