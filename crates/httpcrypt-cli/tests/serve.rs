//! `httpcrypt keygen`, `serve`, `fetch`, `certs`, `demo` and `--proxy`, run
//! as the built binary over loopback; keep-alive and key rotation with the
//! library client against the `serve` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{fetch, Proc, Relay};
use http_body_util::BodyExt;
use httpcrypt::client::OuterExchange;
use httpcrypt::proto::IdentityPublic;

/// A key directory, a site root with a few files, and `serve` on them.
struct Site {
    dir: tempfile::TempDir,
    identity: String,
    server: Proc,
    files: Vec<(&'static str, Vec<u8>)>,
}

impl Site {
    fn new(static_key: bool, extra: &[&str]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let identity = common::keygen(&keys, static_key);
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let files = vec![
            ("hello.txt", b"hello over httpcrypt\n".to_vec()),
            ("big.bin", common::noise(300_000, 7)),
            ("mid.bin", common::noise(40_000, 8)),
        ];
        for (name, bytes) in &files {
            std::fs::write(root.join(name), bytes).unwrap();
        }
        let server = common::serve(&keys, &root, extra);
        Site {
            dir,
            identity,
            server,
            files,
        }
    }

    fn keys(&self) -> PathBuf {
        self.dir.path().join("keys")
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.addr)
    }

    fn file(&self, name: &str) -> &[u8] {
        &self.files.iter().find(|(n, _)| *n == name).unwrap().1
    }
}

/// The outer request line `fetch -v` reports ("> METHOD TARGET HTTP/1.1").
fn outer_line(stderr: &str) -> &str {
    stderr
        .lines()
        .skip_while(|l| !l.starts_with("* what a middlebox sees"))
        .nth(1)
        .unwrap_or_else(|| panic!("no outer exchange in {stderr}"))
}

#[test]
fn fetch_small_get_uses_the_get_form() {
    let site = Site::new(false, &[]);
    let out = fetch(&["-v", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, site.file("hello.txt"));
    let stderr = out.stderr_text();
    let line = outer_line(&stderr);
    assert!(line.starts_with("> GET /") && line.contains('?'), "{line}");
    // The path and content are not visible to a middlebox.
    assert!(!line.contains("hello"), "{line}");
    // The inner response carries the file's Content-Length (spec §4.3).
    let out = fetch(&["-i", &site.url("/hello.txt")]);
    let text = out.stdout_text();
    assert!(text.starts_with("HTTP/1.1 200 OK\n"), "{text}");
    assert!(
        text.contains(&format!(
            "\ncontent-length: {}\n",
            site.file("hello.txt").len()
        )),
        "{text}"
    );
    // A missing file is the inner 404; fetch reports it and succeeds.
    let out = fetch(&["-i", &site.url("/nope.txt")]);
    assert!(out.status.success());
    assert!(out.stdout_text().starts_with("HTTP/1.1 404"));
}

/// `serve --compact` announces profile 2 (spec §4.5): certificates carry
/// version 2, the client's requests show the 33-character nonce segment,
/// carry no inner `Host` or `Date`, and the inner answers leave out `Date`
/// and, for a one-record answer, `Content-Length`. Tickets work on it too.
#[test]
fn compact_profile_end_to_end() {
    let site = Site::new(false, &["--compact"]);
    let mount = httpcrypt::proto::outer::Mount::new("").unwrap();
    let certs = common::certs(site.server.addr, &mount);
    assert!(!certs.is_empty());
    assert!(certs
        .iter()
        .all(|c| c.profile == httpcrypt::proto::Profile::Compact));
    let nonce_segment = |line: &str| -> String {
        let target = line.split(' ').nth(2).unwrap_or_else(|| panic!("{line}"));
        let path = target.split('?').next().unwrap();
        path.rsplit('/').next().unwrap().to_string()
    };
    // GET form, fresh key.
    let out = fetch(&["-v", "-i", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let stderr = out.stderr_text();
    let line = outer_line(&stderr);
    assert!(line.starts_with("> GET /") && line.contains('?'), "{line}");
    let seg = nonce_segment(line);
    assert_eq!(seg.len(), 33, "{line}");
    assert!(seg.starts_with('2'), "{line}");
    let text = out.stdout_text();
    assert!(text.starts_with("HTTP/1.1 200 OK\n"), "{text}");
    assert!(text.ends_with("hello over httpcrypt\n"), "{text}");
    let head = text.split("\n\n").next().unwrap().to_ascii_lowercase();
    assert!(!head.contains("\ndate:"), "{head}");
    assert!(!head.contains("\ncontent-length:"), "{head}");
    // A 40 kB answer spans several records and keeps its Content-Length.
    let out = fetch(&["-i", "--no-get-form", &site.url("/mid.bin")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let head_end = out.stdout.windows(2).position(|w| w == b"\n\n").unwrap();
    let head = String::from_utf8_lossy(&out.stdout[..head_end]).to_ascii_lowercase();
    assert!(head.contains("\ncontent-length: 40000"), "{head}");
    assert_eq!(&out.stdout[head_end + 2..], site.file("mid.bin"));
    // POST form, three requests through one client: the later ones resume
    // with the ticket, still in profile 2.
    let out = fetch(&[
        "-v",
        "--no-get-form",
        "--repeat",
        "3",
        &site.url("/big.bin"),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, site.file("big.bin"));
    let stderr = out.stderr_text();
    assert!(
        stderr.contains("request 3: status 200, credential ticket"),
        "{stderr}"
    );
    let line = outer_line(&stderr);
    assert!(line.starts_with("> POST /"), "{line}");
    assert_eq!(nonce_segment(line).len(), 33, "{line}");
    // --no-compact keeps v1 with the same key: the server takes both.
    let out = fetch(&["-v", "-i", "--no-compact", &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let stderr = out.stderr_text();
    assert_eq!(nonce_segment(outer_line(&stderr)).len(), 32, "{stderr}");
    let head = out.stdout_text().to_ascii_lowercase();
    assert!(head.contains("\ndate:"), "{head}");
}

#[test]
fn fetch_post_form_with_no_get_form_and_large_data() {
    let site = Site::new(false, &[]);
    // --no-get-form: an inner GET inside the POST form; 300 KB back.
    let out = fetch(&["-v", "--no-get-form", &site.url("/big.bin")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, site.file("big.bin"));
    let stderr = out.stderr_text();
    let line = outer_line(&stderr);
    assert!(
        line.starts_with("> POST /") && !line.contains('?'),
        "{line}"
    );
    assert!(stderr.contains("> content-type: application/octet-stream"));
    // A large -d cannot take the GET form; static files refuse the inner
    // POST with an inner 405 (the body itself is checked in gateway.rs).
    let data = "x".repeat(100_000);
    let out = fetch(&["-v", "-i", "-d", &data, &site.url("/hello.txt")]);
    assert!(out.status.success(), "{}", out.stderr_text());
    let stderr = out.stderr_text();
    assert!(outer_line(&stderr).starts_with("> POST /"), "{stderr}");
    assert!(out.stdout_text().starts_with("HTTP/1.1 405"));
    // -o writes the verified body to a file, nothing to stdout.
    let path = site.dir.path().join("out.bin");
    let out = fetch(&["-o", path.to_str().unwrap(), &site.url("/mid.bin")]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), site.file("mid.bin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_carries_many_requests_on_one_connection() {
    let site = Site::new(false, &[]);
    let relay = Relay::new(site.server.addr);
    let client = httpcrypt::Client::new(httpcrypt::ClientConfig::default());
    // hyper-util hands a connection back to its pool from a background task
    // once the previous body is done; a request in that instant starts a
    // second connection in parallel (used or not). Pauses keep the count
    // about the server's keep-alive, not about that race.
    let settle = Duration::from_millis(50);
    client
        .refresh_certs("http", &relay.addr.to_string())
        .await
        .unwrap();
    tokio::time::sleep(settle).await;
    let mut forms = Vec::new();
    for i in 0..8 {
        let name = ["hello.txt", "mid.bin", "big.bin"][i % 3];
        // Every other request carries a field too large for the GET form.
        let mut req = http::Request::get(format!("http://{}/{name}", relay.addr));
        if i % 2 == 1 {
            req = req.header("x-padding", "p".repeat(3000));
        }
        let rsp = tokio::time::timeout(
            Duration::from_secs(30),
            client.send(req.body(Bytes::new()).unwrap()),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(rsp.status(), 200);
        forms.push(
            rsp.extensions()
                .get::<OuterExchange>()
                .unwrap()
                .method
                .clone(),
        );
        let body = rsp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, site.file(name), "request {i}");
        tokio::time::sleep(settle).await;
    }
    assert!(forms.contains(&http::Method::GET) && forms.contains(&http::Method::POST));
    // OPTIONS and eight requests, all on the first connection.
    let requests: Vec<usize> = relay
        .captured()
        .iter()
        .map(|c| String::from_utf8_lossy(c).matches(" HTTP/1.1\r\n").count())
        .collect();
    assert_eq!(
        relay.connections(),
        1,
        "requests per connection: {requests:?}"
    );
    let sent = String::from_utf8_lossy(&relay.captured()[0]).into_owned();
    assert_eq!(sent.matches(" HTTP/1.1\r\n").count(), 9, "{sent:.300}");
}

/// Requests from one client loop until `deadline` (or `max` requests):
/// (requests, failures, first errors, kids seen in cookies).
async fn steady_traffic(
    site: &Site,
    config: httpcrypt::ClientConfig,
    deadline: Instant,
    max: usize,
) -> (usize, usize, Vec<String>, BTreeSet<String>) {
    let client = httpcrypt::Client::new(config);
    let (mut done, mut failed, mut errors, mut ids) = (0, 0, Vec::new(), BTreeSet::new());
    while Instant::now() < deadline && done < max {
        let name = ["hello.txt", "mid.bin"][done % 2];
        let req = http::Request::get(site.url(&format!("/{name}")))
            .body(Bytes::new())
            .unwrap();
        done += 1;
        let result = tokio::time::timeout(Duration::from_secs(10), async {
            let rsp = client.send(req).await.map_err(|e| e.to_string())?;
            if let Some(x) = rsp.extensions().get::<OuterExchange>() {
                if let Some(c) = x.request_headers.get(http::header::COOKIE) {
                    ids.insert(c.to_str().unwrap_or("")[..14].to_string());
                }
            }
            let status = rsp.status();
            let body = rsp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if status != 200 || body != site.file(name) {
                return Err(format!("{status}, {} bytes", body.len()));
            }
            Ok::<_, String>(())
        })
        .await
        .unwrap_or_else(|_| Err("timed out".into()));
        if let Err(e) = result {
            failed += 1;
            if errors.len() < 5 {
                errors.push(e);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (done, failed, errors, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_every_two_seconds_under_steady_traffic() {
    let site = Site::new(false, &["--rotation", "2"]);
    let identity = IdentityPublic::from_b64(&site.identity).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Two clients: fresh keys with tickets and the GET form; one kept key,
    // no tickets, the POST form (so every request names a kid).
    let a = steady_traffic(
        &site,
        httpcrypt::ClientConfig {
            identity: Some(identity),
            ..Default::default()
        },
        deadline,
        50_000,
    );
    let b = steady_traffic(
        &site,
        httpcrypt::ClientConfig {
            identity: Some(identity),
            key_policy: httpcrypt::KeyPolicy::ReusePerHost,
            tickets: false,
            get_form: false,
            ..Default::default()
        },
        deadline,
        50_000,
    );
    let ((na, fa, ea, _), (nb, fb, eb, kids)) = tokio::join!(a, b);
    let serials = std::fs::read_dir(site.keys().join("kex")).unwrap().count();
    println!(
        "rotation R=2s for 30s: {} requests ({na} + {nb}), {} failed; {serials} key epochs, \
         {} kids used by the kid-naming client",
        na + nb,
        fa + fb,
        kids.len()
    );
    assert_eq!(fa + fb, 0, "failures: {ea:?} {eb:?}");
    assert!(na + nb >= 200, "too little traffic: {}", na + nb);
    assert!(serials >= 10, "rotations: {serials}");
    assert!(
        kids.len() >= 8,
        "the client followed the rotation: {kids:?}"
    );
}

#[test]
fn demo_runs_and_shows_decrypted_bodies() {
    let out = common::run(&["demo"], Duration::from_secs(60));
    let text = out.stdout_text();
    assert!(out.status.success(), "{text}\n{}", out.stderr_text());
    for expect in [
        "hello from the encrypted side",
        "card=4111-1111-1111-1111",
        "<title>httpcrypt demo</title>",
        "middlebox sees:  GET /",
        "middlebox sees:  POST /",
        "demo finished",
    ] {
        assert!(text.contains(expect), "missing {expect:?} in\n{text}");
    }
    // The plaintext never shows up where the middlebox view is printed.
    for line in text.lines().filter(|l| l.contains("middlebox sees")) {
        assert!(!line.contains("hello") && !line.contains("card="), "{line}");
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_layout_modes_and_no_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let identity = common::keygen(&keys, false);
    IdentityPublic::from_b64(&identity).unwrap();
    assert_eq!(
        std::fs::read_to_string(keys.join("identity.pub"))
            .unwrap()
            .trim(),
        identity
    );
    assert!(keys.join("identity.key").is_file());
    assert!(keys.join("kex").is_dir());
    assert!(!keys.join("static").exists());
    assert_eq!(std::fs::read_dir(keys.join("kex")).unwrap().count(), 0);
    #[cfg(unix)]
    assert_eq!(mode(&keys.join("identity.key")), 0o600);
    // A second keygen refuses and leaves the identity alone.
    let before = std::fs::read(keys.join("identity.key")).unwrap();
    for static_key in [false, true] {
        let mut args = vec!["keygen", "--dir", keys.to_str().unwrap()];
        if static_key {
            args.push("--static");
        }
        let out = common::run(&args, Duration::from_secs(30));
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr_text().contains("refusing"),
            "{}",
            out.stderr_text()
        );
    }
    assert_eq!(std::fs::read(keys.join("identity.key")).unwrap(), before);
    assert!(!keys.join("static").exists());

    // Static mode: the marker and one kex key file, secret-mode too.
    let keys = dir.path().join("static-keys");
    common::keygen(&keys, true);
    assert!(keys.join("static").is_file());
    let kex: Vec<_> = std::fs::read_dir(keys.join("kex"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kex.len(), 1, "{kex:?}");
    assert_eq!(kex[0].file_name().unwrap(), "0000000001.key");
    #[cfg(unix)]
    {
        assert_eq!(mode(&kex[0]), 0o600);
        assert_eq!(mode(&keys.join("identity.key")), 0o600);
    }
    let text = std::fs::read_to_string(&kex[0]).unwrap();
    let kinds: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(kinds, ["secret", "cert", "ticket"]);
    // Nothing but the files of the layout (no leftovers of atomic writes).
    let mut names: Vec<String> = std::fs::read_dir(&keys)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["identity.key", "identity.pub", "kex", "static"]);
}

#[test]
fn static_keys_serve_and_identities_are_checked() {
    let site = Site::new(true, &[]);
    let before: Vec<_> = std::fs::read_dir(site.keys().join("kex"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    // The right identity: fetch works, certs verifies.
    let out = fetch(&[
        &format!("--identity={}", site.identity),
        &site.url("/hello.txt"),
    ]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout, site.file("hello.txt"));
    let out = common::run(
        &[
            "certs",
            &site.url("/"),
            &format!("--identity={}", site.identity),
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.contains("serial 1 "), "{text}");
    assert!(text.contains("signature verified"), "{text}");
    assert!(
        text.contains("..4294967295 "),
        "a static key does not expire: {text}"
    );
    assert!(text.contains("\n  hc1 "), "{text}");
    // The static key is not rotated, and OPTIONS says so (max-age 86400).
    let (rsp, _) = common::exchange(
        site.server.addr,
        &common::wire("OPTIONS", "/", &[("Host", "h")], b""),
    );
    assert_eq!(rsp.header("cache-control"), Some("max-age=86400"));
    let after: Vec<_> = std::fs::read_dir(site.keys().join("kex"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after);

    // Another identity: certs and fetch both fail, and fetch prints nothing.
    let other = common::keygen(&site.dir.path().join("other"), false);
    let out = common::run(
        &["certs", &site.url("/"), &format!("--identity={other}")],
        Duration::from_secs(30),
    );
    assert!(!out.status.success(), "{}", out.stdout_text());
    let pin = format!("--identity={other}");
    for args in [
        vec![pin.as_str(), "/hello.txt"],
        vec![pin.as_str(), "--no-get-form", "/big.bin"],
    ] {
        let url = site.url(args[args.len() - 1]);
        let mut all = args[..args.len() - 1].to_vec();
        all.push(&url);
        let out = fetch(&all);
        assert!(!out.status.success(), "wrong identity accepted");
        assert!(
            out.stdout.is_empty(),
            "printed a body: {}",
            out.stdout_text()
        );
        assert!(
            out.stderr_text().contains("httpcrypt: "),
            "{}",
            out.stderr_text()
        );
    }
    // Not an identity at all.
    let out = fetch(&["--identity", "not-a-key", &site.url("/hello.txt")]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

/// A fake forward proxy: records the first request line it gets, answers 502.
fn fake_proxy() -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // One connection per fetch; at most a few, so the thread ends.
        for conn in listener.incoming().take(4) {
            let Ok(conn) = conn else { continue };
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut r = BufReader::new(conn);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            loop {
                let mut l = String::new();
                if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                    break;
                }
            }
            let _ = r.get_mut().write_all(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            let _ = tx.send(line.trim_end().to_string());
        }
    });
    (port, rx)
}

#[test]
fn fetch_through_a_proxy_sends_the_absolute_form() {
    // Nothing listens at the origin: only the proxy is ever contacted.
    let origin = "127.0.0.1:9";
    let (port, lines) = fake_proxy();
    let proxy = format!("http://127.0.0.1:{port}");
    let out = fetch(&["--proxy", &proxy, &format!("http://{origin}/secret.txt")]);
    let line = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("the proxy got a request");
    assert_eq!(line, format!("OPTIONS http://{origin}/ HTTP/1.1"));
    assert!(!out.status.success(), "a 502 from the proxy is a failure");
    assert!(out.stdout.is_empty());
    assert!(out.stderr_text().contains("502"), "{}", out.stderr_text());
    // The same through HTTP_PROXY, unless NO_PROXY names the host.
    let mut cmd = common::command(&["fetch", &format!("http://{origin}/x")]);
    cmd.env("HTTP_PROXY", &proxy);
    let out = common::run_cmd(cmd, Duration::from_secs(60));
    let line = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(line, format!("OPTIONS http://{origin}/ HTTP/1.1"));
    assert!(!out.status.success());
    let mut cmd = common::command(&["fetch", &format!("http://{origin}/x")]);
    cmd.env("HTTP_PROXY", &proxy).env("NO_PROXY", "127.0.0.1");
    let out = common::run_cmd(cmd, Duration::from_secs(60));
    assert!(!out.status.success(), "nothing listens at the origin");
    assert!(lines.recv_timeout(Duration::from_millis(500)).is_err());
}

/// Erratum E2: `serve` answers HEAD of a 1 MiB file with the length a GET
/// gets and no body, in both profiles, and the Rust client takes it.
#[test]
fn head_carries_the_length_a_get_would_get() {
    for extra in [&[][..], &["--compact"]] {
        let site = Site::new(false, extra);
        let file = common::noise(1 << 20, 9);
        std::fs::write(site.dir.path().join("root").join("mib.bin"), &file).unwrap();
        let out = fetch(&["-X", "HEAD", "-i", &site.url("/mib.bin")]);
        assert!(out.status.success(), "{extra:?}: {}", out.stderr_text());
        let text = out.stdout_text();
        assert!(text.starts_with("HTTP/1.1 200 OK\n"), "{extra:?}: {text}");
        assert!(
            text.contains("\ncontent-length: 1048576\n"),
            "{extra:?}: {text}"
        );
        // The head, its empty line, and nothing after it.
        assert!(text.ends_with("\n\n"), "{extra:?}: {text}");
        assert_eq!(text.matches("\n\n").count(), 1, "{extra:?}: {text}");
        // The GET of the same file still gets its bytes.
        let out = fetch(&[&site.url("/mib.bin")]);
        assert!(out.status.success(), "{extra:?}: {}", out.stderr_text());
        assert!(out.stdout == file, "{extra:?}");
    }
}

#[test]
fn serve_refuses_a_key_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    common::keygen(&keys, true);
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let secret = keys.join("identity.key");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = common::run(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--keys",
            keys.to_str().unwrap(),
            "--root",
            root.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let stderr = out.stderr_text();
    assert!(
        stderr.contains(&format!("chmod 600 {}", secret.display())),
        "{stderr}"
    );
}

#[test]
fn fetch_repeat_names_the_ticket_form_it_presents() {
    let site = Site::new(false, &[]);
    // The `--repeat` lines of three requests for hello.txt with `args`.
    let repeat_lines = |args: &[&str]| {
        let url = site.url("/hello.txt");
        let out = fetch(&[args, &["--repeat", "3", &url]].concat());
        assert!(out.status.success(), "{}", out.stderr_text());
        assert!(out.stdout_text().ends_with("hello over httpcrypt\n"));
        let stderr = out.stderr_text();
        stderr
            .lines()
            .filter(|l| l.starts_with("request "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // By default the client asks for a short ticket (spec §7.3) and
    // presents it on the later requests.
    assert_eq!(
        repeat_lines(&[]),
        [
            "request 1: status 200, credential key",
            "request 2: status 200, credential ticket (short)",
            "request 3: status 200, credential ticket (short)",
        ]
    );
    // --v1-tickets never asks: the server's v1 tickets (§7.2) are presented.
    assert_eq!(
        repeat_lines(&["--v1-tickets"]),
        [
            "request 1: status 200, credential key",
            "request 2: status 200, credential ticket",
            "request 3: status 200, credential ticket",
        ]
    );
}
